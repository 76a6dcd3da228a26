"""The sequential half of the chunked gated delta rule: one cube per (tile of BV value
columns, batch·head) walks the chunks in order with its K×BV slice of the state in shared
memory, reading what chunk_prepare.py wrote. Per chunk (G_L its last cumulative decay):

    Δ = u − w·S                                   (the chunk's deltas, C×BV, shared)
    o = e^G·scale·(q·S) + p·Δ                     (rows past T not stored)
    S ← e^(G_L)·S + (e^(G_L − G)·k)ᵀ·Δ

Unit (x, y) of the BV×NY cube owns column x and the rows y, y + NY, … of each product, so
every shared access is a row of BV consecutive floats. Every loop's trip count is the
same for all units (rows past the end are clamped onto the last and not stored), so where
units are SIMD lanes the loops run outside the loop over the units and each step is a
vector operation across them.
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
    for r0 in range(0, K, NY):
        r = r0 + y
        if r < K:
            S[r * BV + x] = s0[sbase + r * V]
    kd.sync_cube()
    for n in range(chunks):
        t0 = n * C
        row_p = kd.i64(bh) * Tp + t0
        row_t = kd.i64(bh) * T + t0
        live = kd.min(C, T - t0)  # the chunk's positions before T
        gl = gc[row_p + C - 1]
        for i0 in range(0, C, kd.cube_units()):
            i = i0 + kd.unit_pos()
            if i < C:
                E[i] = kd.select(i < live, kd.exp(gl - gc[row_p + i]), kd.f32(0))
        kd.sync_cube()  # E ready
        for i0 in range(0, C, NY):
            i = kd.min(i0 + y, C - 1)  # (rows past C recompute the last one and store nothing)
            acc = u[(row_p + i) * V + vc]
            for c in range(K):
                acc -= w[(row_p + i) * K + c] * S[c * BV + x]
            if i0 + y < C:
                D[i * BV + x] = acc
        kd.sync_cube()  # D ready
        for i0 in range(0, live, NY):
            i = kd.min(i0 + y, live - 1)
            acc = kd.f32(0)
            for c in range(K):
                acc += kd.f32(q[(row_t + i) * K + c]) * S[c * BV + x]
            acc *= scale * kd.exp(gc[row_p + i])
            for j in range(kd.min(i0 + NY, live)):  # p is zero past the diagonal (j > i)
                acc += p[(row_p + i) * C + j] * D[j * BV + x]
            if i0 + y < live and col < V:
                out[(row_t + i) * V + col] = acc
        kd.sync_cube()  # every read of S done
        el = kd.exp(gl)
        for r0 in range(0, K, NY):
            r = kd.min(r0 + y, K - 1)
            acc = el * S[r * BV + x]
            for i in range(live):
                acc += kd.f32(k[(row_t + i) * K + r]) * E[i] * D[i * BV + x]
            if r0 + y < K:
                S[r * BV + x] = acc
        kd.sync_cube()  # S updated; D and E free for the next chunk
    for r0 in range(0, K, NY):
        r = r0 + y
        if r < K and col < V:
            s1[sbase + r * V] = S[r * BV + x]
