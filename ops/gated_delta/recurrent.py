"""The recurrent gated delta rule: one pass over T with the state held in registers.

A cube owns one (batch·head, tile of BV value columns); unit (x, y) holds column x of the
tile for the state rows y, y + KS, y + 2·KS, … (R of them, a tuple of f32 registers), so
state reads and writes are coalesced along V. Each step needs three sums over all K rows
of the pre-decay state S (Sᵀk, Sᵀq and k·q); the KS row groups add their partials in a
double-buffered shared array (one barrier a step), and then every unit applies

    δ = β·(v − e^g·Sᵀk),  o = scale·(e^g·Sᵀq + δ·(k·q)),  S ← e^g·S + k ⊗ δ,

which is SPEC §3's o = S_newᵀ(scale·q) expanded so the state is read once per step.
"""
from __future__ import annotations

import kerneldsl as kd


@kd.kernel
def gated_delta_recurrent(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, beta: kd.Tensor, g: kd.Tensor[kd.f32],
                          s0: kd.Tensor[kd.f32], out: kd.Tensor, s1: kd.Tensor[kd.f32], T: kd.i32, scale: kd.f32,
                          K: kd.Const[int], V: kd.Const[int], KS: kd.Const[int], R: kd.Const[int],
                          BV: kd.Const[int]):
    """out[bh, t, col] and s1[bh, :, col] for the cube's row bh and tile of BV columns (the
    grid is one-dimensional, tiles of one row adjacent: no limit on B·H from a grid's y axis)."""
    x = kd.unit_pos_x()
    y = kd.unit_pos_y()
    bh = kd.cube_pos_x() // ((V + BV - 1) // BV)
    col = kd.cube_pos_x() % ((V + BV - 1) // BV) * BV + x
    vc = kd.min(col, V - 1)  # clamped column: loads stay in bounds, stores are guarded
    sbase = kd.i64(bh) * (K * V) + vc
    red = kd.shared(kd.f32, 6 * KS * BV)
    s = ()
    for r in kd.unroll(R):
        row = y + KS * r
        s = s + (kd.select(row < K, s0[sbase + kd.min(row, K - 1) * V], kd.f32(0)),)
    row_t = kd.i64(bh) * T
    for t in range(T):
        d = kd.exp(g[row_t + t])
        bt = kd.f32(beta[row_t + t])
        kbase = (row_t + t) * K
        a = kd.f32(0)
        bq = kd.f32(0)
        kq = kd.f32(0)
        kk = ()
        for r in kd.unroll(R):
            row = y + KS * r
            kr = kd.select(row < K, kd.f32(k[kbase + kd.min(row, K - 1)]), kd.f32(0))
            qr = kd.select(row < K, kd.f32(q[kbase + kd.min(row, K - 1)]), kd.f32(0))
            a += s[r] * kr
            bq += s[r] * qr
            kq += kr * qr
            kk = kk + (kr,)
        p = (t % 2) * (3 * KS * BV)
        red[p + y * BV + x] = a
        red[p + (KS + y) * BV + x] = bq
        red[p + (2 * KS + y) * BV + x] = kq
        kd.sync_cube()
        sk = kd.f32(0)
        sq = kd.f32(0)
        kqs = kd.f32(0)
        for j in kd.unroll(KS):
            sk += red[p + j * BV + x]
            sq += red[p + (KS + j) * BV + x]
            kqs += red[p + (2 * KS + j) * BV + x]
        delta = bt * (kd.f32(v[(row_t + t) * V + vc]) - d * sk)
        if y == 0 and col < V:
            out[(row_t + t) * V + col] = scale * (d * sq + delta * kqs)
        s2 = ()
        for r in kd.unroll(R):
            s2 = s2 + (d * s[r] + kk[r] * delta,)
        s = s2
    for r in kd.unroll(R):
        row = y + KS * r
        if row < K and col < V:
            s1[sbase + row * V] = s[r]
