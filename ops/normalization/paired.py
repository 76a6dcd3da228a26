"""LayerNorm / RMSNorm forward for long rows, NR rows a cube: REG (0 or 1) of them held
in registers, the others in shared memory (each unit's own slots, filled by async
copies), so every gamma and beta chunk is read once for NR rows.

Why: the output of each row needs all of gamma (and beta for LayerNorm), f32, W elements.
At W = 32768 that is 128-256 KiB a row, more than a core's L1 keeps beside the streaming
row, so it comes from L2 again for every row. NR rows a cube divide that traffic by NR.
The library picks NR = 2, REG = 1 for f32 rows of 32768 (layout.long_row_plan: +6% for
LayerNorm, +3% for RMSNorm on the H200) and NR = 3, REG = 0 for 16-bit rows past L1 (as
f32 registers they would spill at 1024 units): bf16 at W = 32768 3530 GB/s LayerNorm
(packed kernel 3144) and 3964 RMSNorm (persistent cubes 3766).
Rows in shared memory are reduced chunk by chunk (LayerNorm: per-chunk mean and M2
merged as they come, so each chunk is read once per pass) and read again to be written.
A unit only reads the shared slots it copied itself: the copies need no barrier.
The chunks must tile the row exactly (BX*CH*L == width), L*itemsize == 16 bytes.
Same [rows, width] view, outputs and statistics as forward.norm_cached.
"""
from __future__ import annotations

import kerneldsl as kd

from .device import chunks_total, lanes_sum, merge_m2, row_mean_m2, row_sum, sum_sq, sum_sq_dev, vec_of
from .forward import affine, exact_stats


@kd.func
def slot(buf, k, c, t, BX, CH, L):
    """Chunk c of this unit's share of shared row k, as f32 lanes."""
    col = k * (BX * CH * L) + (c * BX + t) * L
    lanes = ()
    for e in kd.unroll(L):
        lanes = lanes + (kd.f32(buf[col + e]),)
    return vec_of(lanes, L)


@kd.func
def shared_row_stats(buf, k, t, inv_w, RMS, BX, CH, L):
    """(mean, mean square or variance) of shared row k: one read of each chunk."""
    mean = kd.f32(0)
    if RMS:
        acc = kd.f32(0)
        for c in kd.unroll(CH):
            acc += sum_sq(slot(buf, k, c, t, BX, CH, L), L)
        ms = row_sum(acc, BX, 1) * inv_w
    else:
        r = (kd.f32(0), kd.f32(0), kd.f32(0))
        for c in kd.unroll(CH):
            v = slot(buf, k, c, t, BX, CH, L)
            cm = lanes_sum(v, L) * (1.0 / L)
            cq = sum_sq_dev(v, cm, L)
            if c == 0:
                r = (cm, cq, kd.f32(L))
            else:
                r = merge_m2(r[0], r[1], r[2], cm, cq, kd.f32(L))
        mean, ms = row_mean_m2(r[0], r[1], CH * L, BX, 1)
        ms = ms * inv_w
    return mean, ms


@kd.kernel
def norm_paired(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], beta: kd.Tensor[kd.f32, 1], y: kd.Tensor,
                mean_out: kd.Tensor[kd.f32, 1], rstd_out: kd.Tensor[kd.f32, 1],
                rows: kd.i32, width: kd.i32, x_stride: kd.i64, eps: kd.f32,
                RMS: kd.Const[bool], HAS_BETA: kd.Const[bool],
                BX: kd.Const[int], CH: kd.Const[int], L: kd.Const[int], NR: kd.Const[int], REG: kd.Const[int]):
    """Rows first .. first + NR - 1 of this cube; the first REG (0 or 1) of them in registers."""
    t = kd.unit_pos_x()
    SPAN = BX * CH * L
    buf = kd.shared(x.dtype, (NR - REG) * SPAN)
    first = (kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()) * NR
    for k in kd.unroll(REG, NR):
        base = kd.i64(kd.min(first + k, rows - 1)) * x_stride  # rows past the end: read the last, store nothing
        for c in kd.unroll(CH):
            col = (c * BX + t) * L
            kd.async_copy(buf, (k - REG) * SPAN + col, x, base + col, L)
    kd.async_commit()
    inv_w = 1.0 / kd.f32(width)
    means = ()
    rstds = ()
    va = ()
    if REG == 1:
        xa = kd.i64(kd.min(first, rows - 1)) * x_stride  # past the end only in a wrapped grid's last cubes
        for c in kd.unroll(CH):
            va = va + (kd.cast(kd.load_vec(x, xa + (c * BX + t) * L, L), kd.f32),)
        m0, rs0 = exact_stats(va, chunks_total(va, RMS, CH, L), inv_w, eps, RMS, BX, 1, CH, L)
        means = (m0,)
        rstds = (rs0,)
    kd.async_wait(0)
    for k in kd.unroll(REG, NR):
        if k > 0:
            kd.sync_cube()  # the previous reduction's shared partials are read: they may be rewritten
        mk, msk = shared_row_stats(buf, k - REG, t, inv_w, RMS, BX, CH, L)
        means = means + (mk,)
        rstds = rstds + (kd.rsqrt(msk + eps),)
    for c in kd.unroll(CH):
        col = (c * BX + t) * L
        g = kd.load_vec(gamma, col, L)
        b = kd.load_vec(beta, col, L) if HAS_BETA else g
        for k in kd.unroll(NR):
            v = va[c] if k < REG else slot(buf, k - REG, c, t, BX, CH, L)
            if first + k < rows:
                kd.store_vec(y, kd.i64(first + k) * width + col, affine(v, means[k], rstds[k], g, b, RMS, HAS_BETA, L))
    if t == 0:
        for k in kd.unroll(NR):
            if first + k < rows:
                if not RMS:
                    mean_out[first + k] = means[k]
                rstd_out[first + k] = rstds[k]
