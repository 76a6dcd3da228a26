"""The chunk sweep on the matrix primitive (F16/BF16 inputs): one cube of 4 planes per (tile
of BV = 64 or 32 value columns, batch·head) walks the chunks in order, as chunk_sweep.py does,
with every product on 16×16×16 fragments:

    Δ = u + wn·S_op              (u F32 into the accumulators; stored to shared in DT)
    o = qg·S_op + p·Δ            (rows past T not stored)
    S ← e^(G_L)·S + kdᵀ·Δ        (the state stays F32 in accumulator fragments)

with wn = −w, qg, kd and p from chunk_prepare.py (MATRIX) and S_op the state rounded to
the inputs' dtype in shared memory, re-written after every chunk. Plane `pl` owns the
state tiles pl, pl + 4, … (of (K/16)·(BV/16)) and the Δ/o tiles the same way, so every
plane does the same number of products.
"""
from __future__ import annotations

import kerneldsl as kd

PLANES = 4
COLUMNS = (64, 32)  # value columns per cube (tuning.matrix_columns picks one)


@kd.func
def tile_of(e, VT):
    """(row tile, column tile) of tile number e in a grid VT tiles wide."""
    return e // VT, e % VT


@kd.kernel
def chunk_sweep_mma(wn: kd.Tensor, u: kd.Tensor[kd.f32], qg: kd.Tensor, kdk: kd.Tensor, p: kd.Tensor,
                    gc: kd.Tensor[kd.f32], s0: kd.Tensor[kd.f32], out: kd.Tensor, s1: kd.Tensor[kd.f32], T: kd.i32,
                    K: kd.Const[int], V: kd.Const[int], C: kd.Const[int], BV: kd.Const[int], DT: kd.Const[object]):
    """out[bh, :, cols] and s1[bh, :, cols] for the cube's BV columns (a one-dimensional grid of (bh, tile))."""
    VT = BV // 16
    NS = (K // 16) * VT // PLANES  # state tiles per plane
    ND = (C // 16) * VT // PLANES  # delta / output tiles per plane
    pl = kd.plane_pos()
    bh = kd.cube_pos_x() // (V // BV)
    c0 = kd.cube_pos_x() % (V // BV) * BV
    chunks = (T + C - 1) // C
    Tp = chunks * C
    SB = kd.shared(DT, K * BV)
    DB = kd.shared(DT, C * BV)
    fa = kd.fragment_a(DT, 16, 16, 16)
    fk = kd.fragment_a(DT, 16, 16, 16, layout="col")
    fb = kd.fragment_b(DT, 16, 16, 16)
    acc = kd.fragment_acc(16, 16, 16)
    n_el = kd.fragment_len(acc)
    state = ()
    for j in kd.unroll(NS):
        state = state + (kd.fragment_acc(16, 16, 16),)
    sbase = kd.i64(bh) * (K * V) + c0
    for j in kd.unroll(NS):
        kt, vt = tile_of(pl + PLANES * j, VT)
        for i in kd.unroll(n_el):
            r = kt * 16 + kd.fragment_row(state[j], i)
            kd.fragment_set(state[j], i, s0[sbase + r * V + vt * 16 + kd.fragment_col(state[j], i)])
        kd.store_fragment(SB, kt * 16 * BV + vt * 16, state[j], BV)
    kd.sync_cube()
    for n in range(chunks):
        row_p = kd.i64(bh) * Tp + n * C
        for j in kd.unroll(ND):  # Δ = u + wn·S_op
            ct, vt = tile_of(pl + PLANES * j, VT)
            for i in kd.unroll(n_el):
                r = ct * 16 + kd.fragment_row(acc, i)
                kd.fragment_set(acc, i, u[(row_p + r) * V + c0 + vt * 16 + kd.fragment_col(acc, i)])
            for kk in range(K // 16):
                kd.load_fragment(fa, wn, (row_p + ct * 16) * K + kk * 16, K)
                kd.load_fragment(fb, SB, kk * 16 * BV + vt * 16, BV)
                kd.mma(acc, fa, fb)
            kd.store_fragment(DB, ct * 16 * BV + vt * 16, acc, BV)
        kd.sync_cube()
        for j in kd.unroll(ND):  # o = qg·S_op + p·Δ
            ct, vt = tile_of(pl + PLANES * j, VT)
            kd.fill_fragment(acc, 0.0)
            for kk in range(K // 16):
                kd.load_fragment(fa, qg, (row_p + ct * 16) * K + kk * 16, K)
                kd.load_fragment(fb, SB, kk * 16 * BV + vt * 16, BV)
                kd.mma(acc, fa, fb)
            for cc in range(C // 16):
                kd.load_fragment(fa, p, (row_p + ct * 16) * C + cc * 16, C)
                kd.load_fragment(fb, DB, cc * 16 * BV + vt * 16, BV)
                kd.mma(acc, fa, fb)
            for i in kd.unroll(n_el):
                t = n * C + ct * 16 + kd.fragment_row(acc, i)
                if t < T:
                    out[(kd.i64(bh) * T + t) * V + c0 + vt * 16 + kd.fragment_col(acc, i)] = kd.fragment_get(acc, i)
        el = kd.exp(gc[row_p + C - 1])
        for j in kd.unroll(NS):  # S ← e^(G_L)·S + kdᵀ·Δ
            kt, vt = tile_of(pl + PLANES * j, VT)
            for i in kd.unroll(n_el):
                kd.fragment_set(state[j], i, kd.fragment_get(state[j], i) * el)
            for cc in range(C // 16):
                kd.load_fragment(fk, kdk, (row_p + cc * 16) * K + kt * 16, K)
                kd.load_fragment(fb, DB, cc * 16 * BV + vt * 16, BV)
                kd.mma(state[j], fk, fb)
        kd.sync_cube()  # every read of S_op and Δ done
        for j in kd.unroll(NS):
            kt, vt = tile_of(pl + PLANES * j, VT)
            kd.store_fragment(SB, kt * 16 * BV + vt * 16, state[j], BV)
        kd.sync_cube()
    for j in kd.unroll(NS):
        kt, vt = tile_of(pl + PLANES * j, VT)
        for i in kd.unroll(n_el):
            r = kt * 16 + kd.fragment_row(state[j], i)
            s1[sbase + r * V + vt * 16 + kd.fragment_col(state[j], i)] = kd.fragment_get(state[j], i)
