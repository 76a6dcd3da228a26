"""Per-chunk preparation on the matrix primitive (F16/BF16), the operands of
chunk_sweep_mma.py; one cube of 4 planes per (chunk, batch·head), all chunks at once.
The inputs are read as whole 16-row tiles, so a T that is not a multiple of the chunk
comes zero-padded (`pad_tokens`). With G the chunk's cumulative decay (G_L its last):

    A = strictly lower part of β_i·e^(G_i − G_j)·(k·kᵀ)      (F32, shared: SPEC's workspace)
    Tm = (I + A)⁻¹                                         (forward substitution, one column a unit)
    wn = −(Tm·diag(β·e^G))·k,  u = (Tm·diag(β))·v          (products on fragments)
    p = lower part of scale·e^(G_i − G_j)·(q·kᵀ),  qg = scale·e^G·q,  kd = e^(G_L − G)·k

k·kᵀ and q·kᵀ are fragment products whose elements are then decayed in place (the decay
is never split into e^(G_i)·e^(−G_j), which would overflow for strong decays).
"""
from __future__ import annotations

import kerneldsl as kd

from .chunk_prepare import cumulative_decay
from .chunk_sweep_mma import PLANES, tile_of


@kd.func
def tile_product(acc, fa, fb, a, a_at, a_stride, b, b_at, b_stride, b_step, steps):
    """acc = Σ over `steps` 16-wide steps of a's tile (from a_at, moving 16 columns a step)
    times b's tile (from b_at, moving b_step elements a step)."""
    kd.fill_fragment(acc, 0.0)
    for s in range(steps):
        kd.load_fragment(fa, a, a_at + s * 16, a_stride)
        kd.load_fragment(fb, b, b_at + s * b_step, b_stride)
        kd.mma(acc, fa, fb)


@kd.kernel
def pad_tokens(src: kd.Tensor, dst: kd.Tensor, T: kd.i32, Tp: kd.i32, D: kd.i32, n: kd.i64):
    """dst[r, t, :] = src[r, t, :] for t < T, zeros for T <= t < Tp (both contiguous; n elements in dst)."""
    e = kd.i64(kd.cube_pos_x()) * kd.cube_units() + kd.unit_pos()
    if e < n:
        r = e // (kd.i64(Tp) * D)
        t = (e // D) % Tp
        if t < T:
            dst[e] = src[(r * T + t) * D + e % D]
        else:
            dst[e] = 0.0


@kd.kernel
def chunk_prepare_mma(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, beta: kd.Tensor, g: kd.Tensor[kd.f32],
                      gc: kd.Tensor[kd.f32], wn: kd.Tensor, u: kd.Tensor, p: kd.Tensor, qg: kd.Tensor,
                      kdk: kd.Tensor, T: kd.i32, scale: kd.f32, K: kd.Const[int], V: kd.Const[int],
                      C: kd.Const[int], DT: kd.Const[object]):
    """The operands of one chunk of one row bh; q, k, v padded to Tp rows."""
    NU = kd.cube_units()
    me = kd.unit_pos()
    pl = kd.plane_pos()
    CT = C // 16
    chunks = (T + C - 1) // C
    bh = kd.cube_pos_x() // chunks  # a one-dimensional grid of (bh, chunk)
    t0 = kd.cube_pos_x() % chunks * C
    Tp = chunks * C
    row_t = kd.i64(bh) * T        # first position of this row in beta and g ([B·H, T])
    row_p = kd.i64(bh) * Tp + t0  # first position of this chunk in the padded tensors
    G = kd.shared(kd.f32, C)
    Bt = kd.shared(kd.f32, C)
    A = kd.shared(kd.f32, C * C)
    Tf = kd.shared(kd.f32, C * C)  # (I + A)⁻¹
    TW = kd.shared(DT, C * C)     # Tm·diag(β·e^G), row-major
    TU = kd.shared(DT, C * C)     # Tm·diag(β)
    fa = kd.fragment_a(DT, 16, 16, 16)
    fbt = kd.fragment_b(DT, 16, 16, 16, layout="col")
    fb = kd.fragment_b(DT, 16, 16, 16)
    acc = kd.fragment_acc(16, 16, 16)
    n_el = kd.fragment_len(acc)
    cumulative_decay(G, gc, g, row_t, row_p, t0, T, C)
    for i in range(me, C, NU):
        Bt[i] = kd.select(t0 + i < T, kd.f32(beta[row_t + kd.min(t0 + i, T - 1)]), kd.f32(0))
    kd.sync_cube()
    for j in kd.unroll(CT * CT // PLANES):  # k·kᵀ -> A, q·kᵀ -> p
        it, jt = tile_of(pl + PLANES * j, CT)
        tile_product(acc, fa, fbt, k, (row_p + it * 16) * K, K, k, (row_p + jt * 16) * K, K, 16, K // 16)
        for e in kd.unroll(n_el):
            i = it * 16 + kd.fragment_row(acc, e)
            c = jt * 16 + kd.fragment_col(acc, e)
            A[i * C + c] = kd.select(c < i, Bt[i] * kd.exp(G[i] - G[kd.min(c, i)]) * kd.fragment_get(acc, e), 0.0)
        tile_product(acc, fa, fbt, q, (row_p + it * 16) * K, K, k, (row_p + jt * 16) * K, K, 16, K // 16)
        for e in kd.unroll(n_el):
            i = it * 16 + kd.fragment_row(acc, e)
            c = jt * 16 + kd.fragment_col(acc, e)
            p[(row_p + i) * C + c] = kd.select(c <= i, scale * kd.exp(G[i] - G[kd.min(c, i)]) * kd.fragment_get(acc, e),
                                               0.0)
    for e in range(me, C * K, NU):
        i = e // K
        qg[row_p * K + e] = scale * kd.exp(G[i]) * kd.f32(q[row_p * K + e])
        kdk[row_p * K + e] = kd.exp(G[C - 1] - G[i]) * kd.f32(k[row_p * K + e])
    kd.sync_cube()
    for c in range(me, C, NU):  # column c of Tm = (I + A)⁻¹ by forward substitution, kept in F32 in Tf
        for i in range(C):
            x = kd.select(i == c, kd.f32(1), kd.f32(0))
            for j in range(c, i):
                x -= A[i * C + j] * Tf[j * C + c]
            Tf[i * C + c] = x
            TW[i * C + c] = x * Bt[c] * kd.exp(G[c])
            TU[i * C + c] = x * Bt[c]
    kd.sync_cube()
    for j in kd.unroll(CT * (K // 16) // PLANES):  # wn = −TW·k
        it, kt = tile_of(pl + PLANES * j, K // 16)
        tile_product(acc, fa, fb, TW, it * 16 * C, C, k, row_p * K + kt * 16, K, 16 * K, CT)
        for e in kd.unroll(n_el):
            kd.fragment_set(acc, e, -kd.fragment_get(acc, e))
        kd.store_fragment(wn, (row_p + it * 16) * K + kt * 16, acc, K)
    for j in kd.unroll(CT * (V // 16) // PLANES):  # u = TU·v
        it, vt = tile_of(pl + PLANES * j, V // 16)
        tile_product(acc, fa, fb, TU, it * 16 * C, C, v, row_p * V + vt * 16, V, 16 * V, CT)
        kd.store_fragment(u, (row_p + it * 16) * V + vt * 16, acc, V)
