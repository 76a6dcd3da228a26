"""Per-chunk preparation on the matrix primitive (F16/BF16), the operands of
chunk_sweep_mma.py; one cube of 4 planes per (chunk, batch·head), all chunks at once.
The inputs are read as whole 16-row tiles, so a T that is not a multiple of the chunk
comes zero-padded (`pad_tokens`). With G the chunk's cumulative decay (G_L its last):

    A = strictly lower part of β_i·e^(G_i − G_j)·(k·kᵀ)      (F32, shared: SPEC's workspace)
    Tm = (I + A)⁻¹                                         (by blocks of 16: invert_unit_lower)
    wn = −(Tm·diag(β·e^G))·k,  u = (Tm·diag(β))·v          (products on fragments)
    p = lower part of scale·e^(G_i − G_j)·(q·kᵀ),  qg = scale·e^G·q,  kd = e^(G_L − G)·k

The decays (e^G, β·e^G, e^(G_L − G)) are computed once per chunk (chunk_decays).
k·kᵀ and q·kᵀ are fragment products whose elements are then decayed in place (the decay
is never split into e^(G_i)·e^(−G_j), which would overflow for strong decays).
"""
from __future__ import annotations

import kerneldsl as kd

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


@kd.func
def chunk_decays(G, Bt, BE, EG, EL, Gs, gc, g, beta, row_t, row_p, t0, T, C):
    """The chunk's decays, once (shared; zeros past T): β, the cumulative decay G (also to gc),
    β·e^G, e^G and e^(G_L − G). g is read once, by one unit a position, into the scratch Gs
    (C F32 words of shared memory that the caller writes only after this), then each unit
    sums its prefix and the whole chunk's (unrolled: C loads that wait on nothing, in the
    order of a loop, so G_L is the same number in every unit), which saves the barrier
    between G and the decays made from it. Ends with a cube barrier."""
    me = kd.unit_pos()
    NU = kd.cube_units()
    for i in range(me, C, NU):
        live = t0 + i < T
        at = row_t + kd.min(t0 + i, T - 1)
        Gs[i] = kd.select(live, g[at], kd.f32(0))
        Bt[i] = kd.select(live, kd.f32(beta[at]), kd.f32(0))
    kd.sync_cube()
    for i in range(me, C, NU):
        total = kd.f32(0)
        last = kd.f32(0)
        for j in kd.unroll(C):
            x = Gs[j]
            total += kd.select(j <= i, x, kd.f32(0))
            last += x
        G[i] = total
        gc[row_p + i] = total
        EG[i] = kd.exp(total)
        BE[i] = Bt[i] * EG[i]
        EL[i] = kd.exp(last - total)
    kd.sync_cube()


@kd.func
def invert_unit_lower(A, Tf, Xs, C):
    """Tf = (I + A)⁻¹ on and below the diagonal, A strictly lower (F32, C×C row-major, shared;
    C a multiple of 16), by blocks of 16: each diagonal block by forward substitution (one
    column a unit, at most 15 steps deep), then block row by block row
    Tf_ij = −Tf_ii·Σ_(j ≤ m < i) A_im·Tf_mj, every element of a block row at once, the sums
    in Xs (16×C F32).
    The unit-per-column substitution over the whole chunk was a chain C deep. Ends with a
    cube barrier."""
    me = kd.unit_pos()
    NU = kd.cube_units()
    for c in range(me, C, NU):
        b0 = c // 16 * 16
        for i in range(b0, b0 + 16):
            x = kd.select(i == c, kd.f32(1), kd.f32(0))
            for j in range(c, i):
                x -= A[i * C + j] * Tf[j * C + c]
            Tf[i * C + c] = x
    kd.sync_cube()
    for bi in range(1, C // 16):
        r0 = bi * 16
        for e in range(me, 16 * r0, NU):
            r = e // r0
            c = e % r0
            x = kd.f32(0)
            for m in range(c, r0):
                x += A[(r0 + r) * C + m] * Tf[m * C + c]
            Xs[r * C + c] = x
        kd.sync_cube()
        for e in range(me, 16 * r0, NU):
            r = e // r0
            c = e % r0
            x = kd.f32(0)
            for m in range(r + 1):
                x -= Tf[(r0 + r) * C + r0 + m] * Xs[m * C + c]
            Tf[(r0 + r) * C + c] = x
        kd.sync_cube()


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
                      gc: kd.Tensor[kd.f32], wn: kd.Tensor, u: kd.Tensor[kd.f32], p: kd.Tensor, qg: kd.Tensor,
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
    BE = kd.shared(kd.f32, C)      # β·e^G
    EG = kd.shared(kd.f32, C)      # e^G
    EL = kd.shared(kd.f32, C)      # e^(G_L − G)
    A = kd.shared(kd.f32, C * C)
    Tf = kd.shared(kd.f32, C * C)  # (I + A)⁻¹
    Xs = kd.shared(kd.f32, 16 * C)  # one block row of the block substitution
    TW = kd.shared(DT, C * C)     # Tm·diag(β·e^G), row-major
    TU = kd.shared(DT, C * C)     # Tm·diag(β)
    fa = kd.fragment_a(DT, 16, 16, 16)
    fbt = kd.fragment_b(DT, 16, 16, 16, layout="col")
    fb = kd.fragment_b(DT, 16, 16, 16)
    acc = kd.fragment_acc(16, 16, 16)
    n_el = kd.fragment_len(acc)
    chunk_decays(G, Bt, BE, EG, EL, Tf, gc, g, beta, row_t, row_p, t0, T, C)  # Tf: written after
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
            p[(row_p + i) * C + c] = kd.select(c <= i, scale * kd.exp(G[i] - G[kd.min(c, i)]) *
                                               kd.fragment_get(acc, e), 0.0)
    for e in range(me, C * K, NU):
        i = e // K
        qg[row_p * K + e] = scale * EG[i] * kd.f32(q[row_p * K + e])
        kdk[row_p * K + e] = EL[i] * kd.f32(k[row_p * K + e])
    kd.sync_cube()
    invert_unit_lower(A, Tf, Xs, C)
    for e in range(me, C * C, NU):
        x = kd.select(e % C <= e // C, Tf[e], kd.f32(0))
        TW[e] = x * BE[e % C]
        TU[e] = x * Bt[e % C]
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
