"""Per-chunk preparation of the chunked gated delta rule (the WY/UT form), one cube per
(chunk, batch·head), all chunks at once; chunk_sweep.py then walks the chunks in order.

For a chunk of C positions (the tail zero-padded: β = g = k = v = 0 there), with G the
cumulative log decay inside the chunk and A the strictly lower triangular system
A[i, j] = β_i·e^(G_i − G_j)·(k_i·k_j) (j < i), it writes, in F32:

    gc = G;  w = (I + A)⁻¹·(β·e^G·k);  u = (I + A)⁻¹·(β·v);
    p[i, j] = scale·e^(G_i − G_j)·(q_i·k_j) for j ≤ i, else 0  (the intra-chunk attention),

so that a chunk starting from state S has deltas u − w·S. A and G live in the cube's
shared memory (SPEC's 4·(c² + c)-byte workspace); (I + A)⁻¹ is never formed: each unit
solves the system for some columns of the right-hand side by forward substitution.
"""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def cumulative_decay(G, gc, g, row_t, row_p, t0, T, C):
    """G[i] (shared) and gc[row_p + i] = the sum of g over the chunk's positions 0..i before T."""
    for i in range(kd.unit_pos(), C, kd.cube_units()):
        total = kd.f32(0)
        for j in range(0, kd.min(i + 1, T - t0)):
            total += g[row_t + t0 + j]
        G[i] = total
        gc[row_p + i] = total


@kd.kernel
def chunk_prepare(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, beta: kd.Tensor, g: kd.Tensor[kd.f32],
                  gc: kd.Tensor[kd.f32], w: kd.Tensor[kd.f32], u: kd.Tensor[kd.f32], p: kd.Tensor[kd.f32],
                  T: kd.i32, scale: kd.f32, K: kd.Const[int], V: kd.Const[int], C: kd.Const[int]):
    """gc, w, u, p of one chunk of one row bh (layouts [bh, Tp(, K | V | C)])."""
    NU = kd.cube_units()
    me = kd.unit_pos()
    chunks = (T + C - 1) // C
    bh = kd.cube_pos_x() // chunks  # a one-dimensional grid of (bh, chunk)
    t0 = kd.cube_pos_x() % chunks * C
    Tp = chunks * C
    row_t = kd.i64(bh) * T        # first position of this row in the [B·H, T] inputs
    row_p = kd.i64(bh) * Tp + t0  # first position of this chunk in the padded workspaces
    G = kd.shared(kd.f32, C)
    A = kd.shared(kd.f32, C * C)
    cumulative_decay(G, gc, g, row_t, row_p, t0, T, C)
    kd.sync_cube()
    for e in range(me, C * C, NU):
        i = e // C
        j = e % C
        kk = kd.f32(0)
        qk = kd.f32(0)
        if j <= i and t0 + i < T:
            ki = (row_t + t0 + i) * K
            kj = (row_t + t0 + j) * K
            for c in range(K):
                kjc = kd.f32(k[kj + c])
                kk += kd.f32(k[ki + c]) * kjc
                qk += kd.f32(q[ki + c]) * kjc
        dec = kd.exp(G[i] - G[kd.min(j, i)])
        bi = kd.f32(beta[row_t + kd.min(t0 + i, T - 1)])
        A[e] = kd.select(j < i, bi * dec * kk, kd.f32(0))
        p[(row_p + i) * C + j] = kd.select(j <= i, scale * dec * qk, kd.f32(0))
    kd.sync_cube()
    for col in range(me, K + V, NU):
        for i in range(C):
            live = t0 + i < T
            ti = row_t + kd.min(t0 + i, T - 1)
            bi = kd.select(live, kd.f32(beta[ti]), kd.f32(0))
            if col < K:
                x = bi * kd.exp(G[i]) * kd.f32(k[ti * K + col])
                for j in range(i):
                    x -= A[i * C + j] * w[(row_p + j) * K + col]
                w[(row_p + i) * K + col] = x
            else:
                x = bi * kd.f32(v[ti * V + col - K])
                for j in range(i):
                    x -= A[i * C + j] * u[(row_p + j) * V + col - K]
                u[(row_p + i) * V + col - K] = x
