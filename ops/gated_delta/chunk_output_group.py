"""The output of the chunked gated delta rule on group products, every chunk at once: one
cube (one group of 4 planes) per (batch·head, chunk), over all V ≤ 256 value columns (q, k
and the attention P are read and made once per chunk), computes

    P = lower part of scale·e^(G_i − G_j)·(q·kᵀ)     (C×C, F32 accumulator, then rounded to
                                                     DT in registers: the A operand below)
    o = scale·e^G·(q·h) + P·Δ                        (C×V, one F32 accumulator)

with h = S_op entering the chunk and Δ its deltas (chunk_state_group.py) read as transposed
operands of their stored transposes, and G the chunk's cumulative decay (gc). q, k, hᵀ and Δᵀ
come by bulk copies onto one arrival barrier. The intra-chunk attention P is made here, where
it is used, so the prepare writes neither it nor a scaled copy of q. A whole chunk's output
is staged in Δ's place and bulk-stored; the tail's rows past T are not stored. Taking the
output off the sequential sweep leaves that the state alone.
"""
from __future__ import annotations

import kerneldsl as kd

from .tuning import GROUP_MAX_K


@kd.kernel
def chunk_output_group(q: kd.Tensor[None, 2], k: kd.Tensor[None, 2], gc: kd.Tensor[kd.f32], hT: kd.Tensor[None, 2],
                       dT: kd.Tensor[None, 2], out: kd.Tensor[None, 2], T: kd.i32, scale: kd.f32, K: kd.Const[int],
                       V: kd.Const[int], C: kd.Const[int], SW: kd.Const[int], SWV: kd.Const[int]):
    """out[bh·T + chunk rows < T, :] ([B·H·T, V]); q, k [B·H·Tp, K] (padded), gc [B·H, Tp]
    (a one-dimensional grid of (bh, chunk)); SW, SWV: the layouts of K-wide and V-wide tiles."""
    kd.static_assert(kd.cube_units() == 4 * kd.PLANE_DIM, "launch one group (4 planes) a cube")
    kd.static_assert(C == 64, "a chunk is one 64-row group accumulator")
    kd.static_assert(V <= GROUP_MAX_K, "the output is one group accumulator, V columns wide")
    chunks = (T + C - 1) // C
    n = kd.cube_pos_x() % chunks
    bh = kd.cube_pos_x() // chunks
    row_p = bh * (chunks * C) + n * C
    hrow = (bh * chunks + n) * V
    Q = kd.shared(q.dtype, C * K)
    Ks = kd.shared(q.dtype, C * K)
    H = kd.shared(q.dtype, V * K)
    D = kd.shared(q.dtype, V * C)
    G = kd.shared(kd.f32, C)
    full = kd.arrival_barriers(1)
    me = kd.unit_pos_x()
    if me == 0:
        kd.barrier_init(full, 0, 1)
    for i in range(me, C, kd.cube_units()):
        G[i] = gc[kd.i64(row_p) + i]
    kd.sync_cube()
    if me == 0:
        kd.barrier_expect(full, 0, (2 * C * K + V * K + V * C) * 2)
        kd.bulk_copy(Q, 0, q, row_p, 0, C, K, full, 0, swizzle=SW)
        kd.bulk_copy(Ks, 0, k, row_p, 0, C, K, full, 0, swizzle=SW)
        kd.bulk_copy(H, 0, hT, hrow, 0, V, K, full, 0, swizzle=SW)
        kd.bulk_copy(D, 0, dT, hrow, 0, V, C, full, 0, swizzle=SW)
    kd.barrier_wait(full, 0, 0)
    s = kd.group_fragment_acc(C, C)
    acc = kd.group_fragment_acc(C, V)
    pa = kd.group_fragment_a(q.dtype, C, C)
    qt = kd.shared_tile(Q, 0, C, K, swizzle=SW)
    kd.group_mma(s, qt, kd.shared_tile(Ks, 0, K, C, transposed=True, swizzle=SW), accumulate=False)
    kd.group_mma(acc, qt, kd.shared_tile(H, 0, K, V, transposed=True, swizzle=SW), accumulate=False)
    kd.group_wait(0)
    for e in kd.unroll(kd.fragment_len(s)):
        i = kd.fragment_row(s, e)
        j = kd.fragment_col(s, e)
        kd.fragment_set(s, e, kd.select(j <= i, scale * kd.exp(G[i] - G[kd.min(i, j)]) * kd.fragment_get(s, e), 0.0))
    kd.fragment_convert(pa, s)
    for e in kd.unroll(kd.fragment_len(acc)):
        kd.fragment_set(acc, e, scale * kd.exp(G[kd.fragment_row(acc, e)]) * kd.fragment_get(acc, e))
    kd.group_mma(acc, pa, kd.shared_tile(D, 0, C, V, transposed=True, swizzle=SW))
    kd.group_wait(0)
    if n * C + C <= T:  # a whole chunk: staged in Δ's place, one bulk store
        kd.sync_cube()  # every plane's product read Δ
        for e in kd.unroll(kd.fragment_len(acc)):
            r = kd.fragment_row(acc, e)
            D[kd.tile_offset(r, kd.fragment_col(acc, e), C, swizzle=SWV)] = kd.fragment_get(acc, e)
        kd.sync_cube()
        if me == 0:
            kd.bulk_store(out, bh * T + n * C, 0, D, 0, C, V, swizzle=SWV)
            kd.bulk_store_wait()
    else:  # the tail: its rows past T belong to the next (b, h)
        for e in kd.unroll(kd.fragment_len(acc)):
            t = n * C + kd.fragment_row(acc, e)
            if t < T:
                out[kd.i64(bh) * T + t, kd.fragment_col(acc, e)] = kd.fragment_get(acc, e)
