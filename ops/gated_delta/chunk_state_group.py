"""The sequential half of the chunked gated delta rule on group products (`kd.group_mma`,
wgmma on the H200), with the output taken off it: one cube (one group of 4 planes) per
(tile of BV = 64 value columns, batch·head) walks the chunks in order computing only the
deltas and the state; chunk_output_group.py then computes every chunk's output at once.
Per chunk n (C = 64 positions, G_L its last cumulative decay), all transposed:

    Δᵀ = uᵀ + S_opᵀ·wnᵀ                 (BV×C: S_opᵀ, the state rounded to DT, in registers)
    Sᵀ ← e^(G_L)·Sᵀ + Δᵀ_op·kd          (BV×K, the F32 group accumulator; Δᵀ_op in registers)

with wn = −w, u and kd from chunk_prepare_group.py. Holding the state transposed makes it
one 64-row accumulator over all K columns and makes both products' left operands register
fragments converted from the accumulators, so the chain from one chunk to the next never
goes through shared memory: a chunk is two products and one cube barrier. The chunk's wn,
kd and u tiles come by bulk copies into a ring of two stages (chunk n + 2's issued once
chunk n's products are done); S_opᵀ (hᵀ[n], the state entering the chunk) and Δᵀ are also
written to shared memory, two buffers each, and bulk-stored for the output kernel while the
next chunk runs.
"""
from __future__ import annotations

import kerneldsl as kd

from ..stage_ring import next_stage

BV = 64      # value columns of a cube (one group accumulator's rows in the state)
STAGES = 2   # chunks of operands in flight


@kd.func
def issue_chunk(Wsh, KDsh, Ush, wn, kdk, u, full, slot, row, c0, C: kd.Const[int], K: kd.Const[int],
                SW: kd.Const[int]):
    """One unit: copy the chunk's wn and kd (C×K) and u (C×BV) tiles into stage `slot`."""
    kd.barrier_expect(full, slot, (2 * C * K + C * BV) * 2)
    kd.bulk_copy(Wsh, slot * (C * K), wn, row, 0, C, K, full, slot, swizzle=SW)
    kd.bulk_copy(KDsh, slot * (C * K), kdk, row, 0, C, K, full, slot, swizzle=SW)
    kd.bulk_copy(Ush, slot * (C * BV), u, row, c0, C, BV, full, slot, swizzle=SW)


@kd.kernel
def chunk_state_group(wn: kd.Tensor[None, 2], kdk: kd.Tensor[None, 2], u: kd.Tensor[None, 2], gc: kd.Tensor[kd.f32],
                      s0: kd.Tensor[kd.f32], hT: kd.Tensor[None, 2], dT: kd.Tensor[None, 2], s1: kd.Tensor[kd.f32],
                      T: kd.i32, K: kd.Const[int], V: kd.Const[int], C: kd.Const[int], SW: kd.Const[int]):
    """hT[(bh·chunks + n)·V + cols, :] (states entering each chunk, transposed), dT[same rows, :]
    (the chunks' deltas, transposed) and s1[bh, :, cols] for the cube's BV columns; wn, kdk
    [B·H·Tp, K], u [B·H·Tp, V] (a one-dimensional grid of (bh, tile))."""
    kd.static_assert(kd.cube_units() == 4 * kd.PLANE_DIM, "launch one group (4 planes) a cube")
    kd.static_assert(C == 64, "the deltas are one 64-column group accumulator")
    VT = V // BV
    bh = kd.cube_pos_x() // VT
    c0 = kd.cube_pos_x() % VT * BV
    chunks = (T + C - 1) // C
    Tp = chunks * C
    me = kd.unit_pos_x()
    Wsh = kd.shared(wn.dtype, STAGES * C * K)
    KDsh = kd.shared(wn.dtype, STAGES * C * K)
    Ush = kd.shared(wn.dtype, STAGES * C * BV)
    ST = kd.shared(wn.dtype, STAGES * BV * K)   # S_opᵀ of the last chunks, for the stores of hᵀ
    DTs = kd.shared(wn.dtype, STAGES * BV * C)  # Δᵀ of the last chunks, for the stores of dT
    full = kd.arrival_barriers(STAGES)
    if me == 0:
        for s in kd.unroll(STAGES):
            kd.barrier_init(full, s, 1)
    kd.sync_cube()
    if me == 0:
        for s in kd.unroll(STAGES):
            if s < chunks:
                issue_chunk(Wsh, KDsh, Ush, wn, kdk, u, full, s, kd.i64(bh) * Tp + s * C, c0, C, K, SW)
    state = kd.group_fragment_acc(BV, K)   # Sᵀ, F32
    delta = kd.group_fragment_acc(BV, C)   # Δᵀ
    s_op = kd.group_fragment_a(wn.dtype, BV, K)
    d_op = kd.group_fragment_a(wn.dtype, BV, C)
    n_s = kd.fragment_len(state)
    n_d = kd.fragment_len(delta)
    sbase = kd.i64(bh) * (K * V) + c0
    for i in kd.unroll(n_s):
        kd.fragment_set(state, i, s0[sbase + kd.fragment_col(state, i) * V + kd.fragment_row(state, i)])
    slot = 0
    phase = 0
    for n in range(chunks):
        row_p = kd.i64(bh) * Tp + n * C
        el = kd.exp(gc[row_p + C - 1])
        kd.barrier_wait(full, slot, phase)
        for i in kd.unroll(n_d):  # uᵀ: element (v, c) of the accumulator is u[c, v]
            kd.fragment_set(delta, i, kd.f32(Ush[slot * (C * BV) + kd.tile_offset(
                kd.fragment_col(delta, i), kd.fragment_row(delta, i), C, swizzle=SW)]))
        kd.fragment_convert(s_op, state)
        kd.group_mma(delta, s_op, kd.shared_tile(Wsh, slot * (C * K), K, C, transposed=True, swizzle=SW))
        for i in kd.unroll(n_s):  # S_opᵀ for hᵀ[n] while the product runs
            ST[slot * (BV * K) + kd.tile_offset(kd.fragment_row(state, i), kd.fragment_col(state, i), BV,
                                                 swizzle=SW)] = kd.fragment_get(state, i)
        kd.group_wait(0)
        for i in kd.unroll(n_s):  # the decay (writing an accumulator while a product runs would stall it)
            kd.fragment_set(state, i, kd.fragment_get(state, i) * el)
        kd.fragment_convert(d_op, delta)
        kd.group_mma(state, d_op, kd.shared_tile(KDsh, slot * (C * K), C, K, swizzle=SW))
        for i in kd.unroll(n_d):
            DTs[slot * (BV * C) + kd.tile_offset(kd.fragment_row(delta, i), kd.fragment_col(delta, i), BV,
                                                 swizzle=SW)] = kd.fragment_get(delta, i)
        kd.group_wait(0)
        if me == 0:
            kd.bulk_store_wait()  # chunk n − 1's stores, from the other buffers, are out
        kd.sync_cube()  # this stage read by every product; ST and DTs written; the other buffers free
        if me == 0:
            hrow = (bh * chunks + n) * V + c0
            kd.bulk_store(hT, hrow, 0, ST, slot * (BV * K), BV, K, swizzle=SW)
            kd.bulk_store(dT, hrow, 0, DTs, slot * (BV * C), BV, C, swizzle=SW)
            if n + STAGES < chunks:
                issue_chunk(Wsh, KDsh, Ush, wn, kdk, u, full, slot, row_p + STAGES * C, c0, C, K, SW)
        slot, phase = next_stage(slot, phase, STAGES)
    if me == 0:
        kd.bulk_store_wait()
    for i in kd.unroll(n_s):
        s1[sbase + kd.fragment_col(state, i) * V + kd.fragment_row(state, i)] = kd.fragment_get(state, i)
