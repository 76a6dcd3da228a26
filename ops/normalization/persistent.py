"""LayerNorm / RMSNorm forward for long rows on GPUs with hardware async copies: persistent
cubes that prefetch their next row into shared memory while they reduce and write the
current one.

Why: a row that fills a core's registers (W = 32768: 128 KiB f32, 64 KiB bf16) leaves room
for one cube per core, and a cube that loads its row, reduces it and writes it has no
loads in flight while it reduces and writes; the next cube's loads wait for it to end.
Here each cube loops over rows cube, cube + G, ... (G cubes, about one per core); each
unit copies its own chunks of the next row into shared memory (`kd.async_copy`: cp.async
on CUDA, bypassing the registers) right after it has taken the current row's chunks from
there into registers, so the next row's reads overlap this row's reductions and stores.
A unit only ever reads the shared slots it copied itself, so the copies need no barrier;
one barrier a row keeps the reductions' shared partials of consecutive rows apart.
It pays only where gamma (and beta) still fit in the core's L1 beside the shared row
(the copies bypass L1): the library picks it for bf16 RMSNorm at W = 32768 (+12% on the
H200) and f32 LayerNorm at W = 16384 (+7%); where they do not fit (f32 at W = 32768) it
was 5-10% slower than one row a cube (tuning.long_row_plan has the rule). On runtimes
without hardware copies the copy is a plain one and the kernel is merely correct.
The chunks must tile the row exactly (BX*CH*L == width), L*itemsize == 16 bytes.
Same [rows, width] view, outputs and statistics as forward.norm_cached.
"""
from __future__ import annotations

import kerneldsl as kd

from .device import chunks_total, vec_of
from .forward import exact_stats, write_normalized


@kd.func
def prefetch(buf, x, row, rows, x_stride, t, BX, CH, L):
    """Start copying this unit's CH chunks of `row` into its slots of `buf` (zeros for a
    row past the last: nothing is read) and close the group."""
    base = kd.i64(row) * x_stride
    for c in kd.unroll(CH):
        col = (c * BX + t) * L
        kd.async_copy(buf, col, x, base + col, L, row < rows)
    kd.async_commit()


@kd.kernel
def norm_persistent(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], beta: kd.Tensor[kd.f32, 1], y: kd.Tensor,
                    mean_out: kd.Tensor[kd.f32, 1], rstd_out: kd.Tensor[kd.f32, 1],
                    rows: kd.i32, width: kd.i32, x_stride: kd.i64, eps: kd.f32,
                    RMS: kd.Const[bool], HAS_BETA: kd.Const[bool],
                    BX: kd.Const[int], CH: kd.Const[int], L: kd.Const[int]):
    t = kd.unit_pos_x()
    buf = kd.shared(x.dtype, BX * CH * L)
    step = kd.cube_count_x()
    first = kd.cube_pos_x()
    prefetch(buf, x, first, rows, x_stride, t, BX, CH, L)
    inv_w = 1.0 / kd.f32(width)
    for row in range(first, rows, step):
        kd.async_wait(0)
        vals = ()
        for c in kd.unroll(CH):
            col = (c * BX + t) * L
            lanes = ()
            for k in kd.unroll(L):
                lanes = lanes + (kd.f32(buf[col + k]),)
            vals = vals + (vec_of(lanes, L),)
        acc = chunks_total(vals, RMS, CH, L)
        # every unit has taken its chunks and read the previous row's reduction partials:
        # refill the slots (prefetching here rather than after the reduction keeps a f32
        # LayerNorm at 64 registers with no spills, ptxas sm_90) and rewrite the partials
        kd.sync_cube()
        prefetch(buf, x, row + step, rows, x_stride, t, BX, CH, L)
        mean, rstd = exact_stats(vals, acc, inv_w, eps, RMS, BX, 1, CH, L)
        write_normalized(y, kd.i64(row) * width, vals, gamma, beta, mean, rstd, 0, t, width, True, False, RMS,
                         HAS_BETA, BX, CH, L)
        if t == 0:
            if not RMS:
                mean_out[row] = mean
            rstd_out[row] = rstd
    kd.async_wait(0)  # the last (zero-filling) group: nothing may be in flight at exit
