"""The output of the chunked gated delta rule on group products, every chunk at once: one
cube (one group of 4 planes) per (batch·head, chunk, tile of BV = 64 value columns) computes

    o = qg·h + p·Δ        (C×BV: qg C×K and p C×C from chunk_prepare_mma.py; h = S_op
                           entering the chunk and Δ its deltas, from chunk_state_group.py)

with both products on one F32 group accumulator; the four tiles come by bulk copies onto one
arrival barrier, h and Δ read as transposed operands of their stored transposes. Rows past
T are not stored. Taking this off the sequential sweep leaves it the state alone.
"""
from __future__ import annotations

import kerneldsl as kd

from .chunk_state_group import BV


@kd.kernel
def chunk_output_group(qg: kd.Tensor[None, 2], p: kd.Tensor[None, 2], hT: kd.Tensor[None, 2],
                       dT: kd.Tensor[None, 2], out: kd.Tensor, T: kd.i32, K: kd.Const[int], V: kd.Const[int],
                       C: kd.Const[int], SW: kd.Const[int]):
    """out[bh, chunk rows < T, cols] (a one-dimensional grid of (bh, chunk, tile), tiles fastest)."""
    kd.static_assert(kd.cube_units() == 4 * kd.PLANE_DIM, "launch one group (4 planes) a cube")
    kd.static_assert(C == 64, "a chunk is one 64-row group accumulator")
    VT = V // BV
    chunks = (T + C - 1) // C
    x = kd.cube_pos_x()
    c0 = x % VT * BV
    n = x // VT % chunks
    bh = x // (VT * chunks)
    row_p = bh * (chunks * C) + n * C
    hrow = (bh * chunks + n) * V + c0
    Q = kd.shared(qg.dtype, C * K)
    H = kd.shared(qg.dtype, BV * K)
    P = kd.shared(qg.dtype, C * C)
    D = kd.shared(qg.dtype, BV * C)
    full = kd.arrival_barriers(1)
    if kd.unit_pos_x() == 0:
        kd.barrier_init(full, 0, 1)
    kd.sync_cube()
    if kd.unit_pos_x() == 0:
        kd.barrier_expect(full, 0, (C * K + BV * K + C * C + BV * C) * 2)
        kd.bulk_copy(Q, 0, qg, row_p, 0, C, K, full, 0, swizzle=SW)
        kd.bulk_copy(H, 0, hT, hrow, 0, BV, K, full, 0, swizzle=SW)
        kd.bulk_copy(P, 0, p, row_p, 0, C, C, full, 0, swizzle=SW)
        kd.bulk_copy(D, 0, dT, hrow, 0, BV, C, full, 0, swizzle=SW)
    kd.barrier_wait(full, 0, 0)
    acc = kd.group_fragment_acc(C, BV)
    kd.group_mma(acc, kd.shared_tile(Q, 0, C, K, swizzle=SW), kd.shared_tile(H, 0, K, BV, transposed=True, swizzle=SW),
                 accumulate=False)
    kd.group_mma(acc, kd.shared_tile(P, 0, C, C, swizzle=SW), kd.shared_tile(D, 0, C, BV, transposed=True, swizzle=SW))
    kd.group_wait(0)
    for i in kd.unroll(kd.fragment_len(acc)):
        t = n * C + kd.fragment_row(acc, i)
        if t < T:
            out[(kd.i64(bh) * T + t) * V + c0 + kd.fragment_col(acc, i)] = kd.fragment_get(acc, i)
