"""The sequential half of the chunked gated delta rule on group products (`kd.group_mma`,
wgmma on the H200), with the output taken off it: one cube (one group of 4 planes) per
(tile of BV = 64 value columns, batch·head) walks the chunks in order computing only the
deltas and the state; chunk_output_group.py then computes every chunk's output at once.
Per chunk n (C = 64 positions, G_L its last cumulative decay):

    hᵀ[n] = S_opᵀ                       (the state entering the chunk, in DT: bulk store)
    Δ = u + wn·S_op                     (C×BV, F32 accumulator; Δᵀ stored in DT: bulk store)
    Sᵀ ← e^(G_L)·Sᵀ + Δᵀ·kd             (BV×K, the F32 group accumulator, transposed)

with wn = −w, u and kd from chunk_prepare_mma.py. The state is held transposed so that one
64-row accumulator covers all K columns; S_op (the state rounded to DT) lives in shared
memory as Sᵀ, which is S_op as a transposed operand. The chunk's wn, kd and u tiles come by
bulk copies into a ring of two stages, chunk n + 2's issued once chunk n's products are
done, so the copies run while the next chunk multiplies.
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
    kd.static_assert(C == 64, "the deltas are one 64-row group accumulator")
    VT = V // BV
    bh = kd.cube_pos_x() // VT
    c0 = kd.cube_pos_x() % VT * BV
    chunks = (T + C - 1) // C
    Tp = chunks * C
    me = kd.unit_pos_x()
    Wsh = kd.shared(wn.dtype, STAGES * C * K)
    KDsh = kd.shared(wn.dtype, STAGES * C * K)
    Ush = kd.shared(wn.dtype, STAGES * C * BV)
    ST = kd.shared(wn.dtype, BV * K)    # S_opᵀ: the B operand S_op (K×BV), stored transposed
    DTs = kd.shared(wn.dtype, BV * C)   # Δᵀ: the A operand of the state update
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
    delta = kd.group_fragment_acc(C, BV)
    n_s = kd.fragment_len(state)
    n_d = kd.fragment_len(delta)
    sbase = kd.i64(bh) * (K * V) + c0
    for i in kd.unroll(n_s):
        v = kd.fragment_row(state, i)
        k = kd.fragment_col(state, i)
        x = s0[sbase + k * V + v]
        kd.fragment_set(state, i, x)
        ST[kd.tile_offset(v, k, BV, swizzle=SW)] = x
    kd.sync_cube()
    slot = 0
    phase = 0
    for n in range(chunks):
        row_p = kd.i64(bh) * Tp + n * C
        hrow = (bh * chunks + n) * V + c0
        el = kd.exp(gc[row_p + C - 1])
        if me == 0:
            kd.bulk_store(hT, hrow, 0, ST, 0, BV, K, swizzle=SW)
        kd.barrier_wait(full, slot, phase)
        for i in kd.unroll(n_d):
            kd.fragment_set(delta, i, kd.f32(Ush[slot * (C * BV) + kd.tile_offset(
                kd.fragment_row(delta, i), kd.fragment_col(delta, i), C, swizzle=SW)]))
        kd.group_mma(delta, kd.shared_tile(Wsh, slot * (C * K), C, K, swizzle=SW),
                     kd.shared_tile(ST, 0, K, BV, transposed=True, swizzle=SW))
        kd.group_wait(0)
        if me == 0:
            kd.bulk_store_wait()  # hᵀ[n] (from ST) and Δᵀ of chunk n − 1 (from DTs) are out
        kd.sync_cube()
        for i in kd.unroll(n_d):
            DTs[kd.tile_offset(kd.fragment_col(delta, i), kd.fragment_row(delta, i), BV, swizzle=SW)] = \
                kd.fragment_get(delta, i)
        for i in kd.unroll(n_s):
            kd.fragment_set(state, i, kd.fragment_get(state, i) * el)
        kd.sync_cube()  # Δᵀ in DTs for the product and the store
        if me == 0:
            kd.bulk_store(dT, hrow, 0, DTs, 0, BV, C, swizzle=SW)
        kd.group_mma(state, kd.shared_tile(DTs, 0, BV, C, swizzle=SW),
                     kd.shared_tile(KDsh, slot * (C * K), C, K, swizzle=SW))
        kd.group_wait(0)
        kd.sync_cube()  # every product reading this stage and ST is done
        if me == 0:
            if n + STAGES < chunks:
                issue_chunk(Wsh, KDsh, Ush, wn, kdk, u, full, slot, row_p + STAGES * C, c0, C, K, SW)
        for i in kd.unroll(n_s):
            ST[kd.tile_offset(kd.fragment_row(state, i), kd.fragment_col(state, i), BV, swizzle=SW)] = \
                kd.fragment_get(state, i)
        slot, phase = next_stage(slot, phase, STAGES)
        kd.sync_cube()  # ST holds the next chunk's S_op
    if me == 0:
        kd.bulk_store_wait()
    for i in kd.unroll(n_s):
        s1[sbase + kd.fragment_col(state, i) * V + kd.fragment_row(state, i)] = kd.fragment_get(state, i)
