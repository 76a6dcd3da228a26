"""The sequential half of the chunked gated delta rule: one cube per (tile of BV value
columns, batch·head) walks the chunks in order with its K×BV slice of the state in shared
memory, reading what chunk_prepare.py wrote. Per chunk (G_L its last cumulative decay):

    Δ = u − w·S                                   (the chunk's deltas, C×BV, shared)
    o = e^G·scale·(q·S) + p·Δ                     (rows past T not stored)
    S ← e^(G_L)·S + (e^(G_L − G)·k)ᵀ·Δ

Unit (x, y) of the BV×NY cube owns column x and the rows y, y + NY, … of each product, so
every shared access is a row of BV consecutive floats.
"""
from __future__ import annotations

import kerneldsl as kd


@kd.kernel
def chunk_sweep(q: kd.Tensor, k: kd.Tensor, gc: kd.Tensor[kd.f32], w: kd.Tensor[kd.f32], u: kd.Tensor[kd.f32],
                p: kd.Tensor, s0: kd.Tensor[kd.f32], out: kd.Tensor, s1: kd.Tensor[kd.f32], T: kd.i32,
                scale: kd.f32, K: kd.Const[int], V: kd.Const[int], C: kd.Const[int], BV: kd.Const[int]):
    """out[bh, :, cols] and s1[bh, :, cols] for the cube's columns (a one-dimensional grid of (bh, tile))."""
    NY = kd.cube_dim_y()
    x = kd.unit_pos_x()
    y = kd.unit_pos_y()
    bh = kd.cube_pos_x() // ((V + BV - 1) // BV)
    col = kd.cube_pos_x() % ((V + BV - 1) // BV) * BV + x
    vc = kd.min(col, V - 1)
    chunks = (T + C - 1) // C
    Tp = chunks * C
    sbase = kd.i64(bh) * (K * V) + vc
    S = kd.shared(kd.f32, K * BV)
    D = kd.shared(kd.f32, C * BV)
    E = kd.shared(kd.f32, C)
    for r in range(y, K, NY):
        S[r * BV + x] = s0[sbase + r * V]
    kd.sync_cube()
    for n in range(chunks):
        t0 = n * C
        row_p = kd.i64(bh) * Tp + t0
        row_t = kd.i64(bh) * T + t0
        gl = gc[row_p + C - 1]
        for i in range(kd.unit_pos(), C, kd.cube_units()):
            E[i] = kd.select(t0 + i < T, kd.exp(gl - gc[row_p + i]), kd.f32(0))
        kd.sync_cube()  # E ready
        for i in range(y, C, NY):
            acc = u[(row_p + i) * V + vc]
            for c in range(K):
                acc -= w[(row_p + i) * K + c] * S[c * BV + x]
            D[i * BV + x] = acc
        kd.sync_cube()  # D ready
        for i in range(y, kd.min(C, T - t0), NY):
            acc = kd.f32(0)
            for c in range(K):
                acc += kd.f32(q[(row_t + i) * K + c]) * S[c * BV + x]
            acc *= scale * kd.exp(gc[row_p + i])
            for j in range(i + 1):
                acc += p[(row_p + i) * C + j] * D[j * BV + x]
            if col < V:
                out[(row_t + i) * V + col] = acc
        kd.sync_cube()  # every read of S done
        el = kd.exp(gl)
        for r in range(y, K, NY):
            acc = el * S[r * BV + x]
            for i in range(kd.min(C, T - t0)):
                acc += kd.f32(k[(row_t + i) * K + r]) * E[i] * D[i * BV + x]
            S[r * BV + x] = acc
        kd.sync_cube()  # S updated; D and E free for the next chunk
    for r in range(y, K, NY):
        if col < V:
            s1[sbase + r * V] = S[r * BV + x]
