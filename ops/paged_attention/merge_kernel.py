"""Merge of the split path: partial (max, sum, acc) of every split of a (query row, head),
combined in F32 in split order (deterministic) with max-rescaling; empty splits (sum 0)
are skipped, and a row with no visible token gives zeros."""
from __future__ import annotations

import kerneldsl as kd


@kd.kernel
def merge_kernel(work: kd.Tensor, out: kd.Tensor, DV: kd.Const[int]):
    r = kd.cube_pos_x()
    h = kd.cube_pos_y()
    splits = work.shape[2]
    m = -kd.inf
    for sp in range(splits):
        if work[r, h, sp, DV + 1] > 0.0:
            m = kd.max(m, work[r, h, sp, DV])
    total = kd.f32(0)
    for sp in range(splits):
        l = work[r, h, sp, DV + 1]
        if l > 0.0:
            total += l * kd.exp2_fast(work[r, h, sp, DV] - m)
    inv = kd.select(total > 0.0, 1.0 / total, kd.f32(0))
    for d in range(kd.unit_pos_x(), DV, kd.cube_units()):
        a = kd.f32(0)
        for sp in range(splits):
            if work[r, h, sp, DV + 1] > 0.0:
                a += work[r, h, sp, d] * kd.exp2_fast(work[r, h, sp, DV] - m)
        out[r, h, d] = a * inv
