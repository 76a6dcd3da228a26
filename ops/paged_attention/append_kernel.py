"""Cache append: query row r's new K and V rows written in place into slot
positions[r] % page_size of page tables[s][positions[r] // page_size]; nothing else is touched."""
from __future__ import annotations

import kerneldsl as kd


@kd.kernel
def append_kernel(new: kd.Tensor, cache: kd.Tensor, tables: kd.Tensor, seq_ids: kd.Tensor, positions: kd.Tensor):
    r = kd.cube_pos_x()
    ps = cache.shape[1]
    H = cache.shape[2]
    D = cache.shape[3]
    p = positions[r]
    page = tables[seq_ids[r], p // ps]
    for e in range(kd.unit_pos_x(), H * D, kd.cube_units()):
        cache[page, p % ps, e // D, e % D] = new[r, e // D, e % D]
