"""The recurrent gated delta rule with the state's K rows across a plane's lanes (GPU decode).

A plane owns C = W·NV value columns of one (batch·head) for all K rows: lane l holds rows
l, l + PLANE_DIM, … (RK of them) of those columns, read and written as NV accesses of W
columns a row (W·4 bytes wide: whole 32-byte sectors of the F32 state at W·NV = 8). The
three sums over K of each step (Sᵀk, Sᵀq, k·q) are a lane's partial sums over its RK rows
added across the plane with plane sums: no shared memory and no barrier. A cube is P
independent planes over adjacent column groups of one (b, h) (they share its q, k rows
in cache). Each step then applies, as recurrent.py does,

    δ = β·(v − e^g·Sᵀk),  o = scale·(e^g·Sᵀq + δ·(k·q)),  S ← e^g·S + k ⊗ δ,

and the next step's q, k, v, β and g are loaded before this step's sums, so their latency
overlaps the reductions when T > 1.
"""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def load_f32(x, off, W):
    """W consecutive elements of x from `off` as a tuple of F32 (one wide access when W > 1)."""
    if W == 1:
        t = (kd.f32(x[off]),)
    else:
        w = kd.load_vec(x, off, W)
        t = ()
        for i in kd.unroll(W):
            t = t + (kd.f32(w[i]),)
    return t


@kd.func
def part(t, start, n):
    """Elements start … start + n − 1 of tuple t (compile-time positions)."""
    p = ()
    for i in kd.unroll(n):
        p = p + (t[start + i],)
    return p


@kd.func
def store_cols(x, off, t, W):
    """Store the W values of tuple t to x[off : off + W] (one wide access when W > 1)."""
    if W == 1:
        x[off] = t[0]
    elif W == 2:
        kd.store_vec(x, off, kd.cast(kd.make_vec(t[0], t[1]), x.dtype))
    elif W == 4:
        kd.store_vec(x, off, kd.cast(kd.make_vec(t[0], t[1], t[2], t[3]), x.dtype))
    else:
        kd.store_vec(x, off, kd.cast(kd.make_vec(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]), x.dtype))


@kd.func
def load_token(q, k, v, beta, g, tok, lane, c0, K, V, W, NV, RK):
    """Token `tok`'s inputs as this lane uses them: (e^g, β, its RK k and q rows (0 past K),
    the plane's C values of v (clamped columns: in bounds, stored only where valid))."""
    d = kd.exp(g[tok])
    bt = kd.f32(beta[tok])
    kbase = tok * K
    kk = ()
    qq = ()
    for r in kd.unroll(RK):
        row = lane + kd.PLANE_DIM * r
        if K % kd.PLANE_DIM == 0:
            kk = kk + (kd.f32(k[kbase + row]),)
            qq = qq + (kd.f32(q[kbase + row]),)
        else:
            kk = kk + (kd.select(row < K, kd.f32(k[kbase + kd.min(row, K - 1)]), kd.f32(0)),)
            qq = qq + (kd.select(row < K, kd.f32(q[kbase + kd.min(row, K - 1)]), kd.f32(0)),)
    vv = ()
    for n in kd.unroll(NV):
        vv = vv + load_f32(v, tok * V + kd.min(c0 + n * W, V - W), W)
    return d, bt, kk, qq, vv


@kd.kernel
def gated_delta_recurrent_planes(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, beta: kd.Tensor,
                                 g: kd.Tensor[kd.f32], s0: kd.Tensor[kd.f32], out: kd.Tensor,
                                 s1: kd.Tensor[kd.f32], T: kd.i32, scale: kd.f32,
                                 K: kd.Const[int], V: kd.Const[int], W: kd.Const[int], NV: kd.Const[int],
                                 P: kd.Const[int]):
    """out[bh, t, cols] and s1[bh, :, cols] for the plane's C = W·NV columns (V a multiple of W;
    the grid is one-dimensional, the column tiles of one (b, h) adjacent)."""
    C = W * NV
    RK = (K + kd.PLANE_DIM - 1) // kd.PLANE_DIM
    tiles = (V + P * C - 1) // (P * C)
    lane = kd.lane_pos()
    bh = kd.cube_pos_x() // tiles
    c0 = kd.cube_pos_x() % tiles * (P * C) + kd.plane_pos() * C
    sbase = kd.i64(bh) * (K * V)
    s = ()
    for r in kd.unroll(RK):
        row = lane + kd.PLANE_DIM * r
        for n in kd.unroll(NV):
            vals = load_f32(s0, sbase + kd.min(row, K - 1) * V + kd.min(c0 + n * W, V - W), W)
            for i in kd.unroll(W):
                if K % kd.PLANE_DIM == 0:
                    s = s + (vals[i],)
                else:
                    s = s + (kd.select(row < K, vals[i], kd.f32(0)),)
    row_t = kd.i64(bh) * T
    d, bt, kk, qq, vv = load_token(q, k, v, beta, g, row_t, lane, c0, K, V, W, NV, RK)
    for t in range(T):
        tok = row_t + t
        nxt = row_t + kd.min(t + 1, T - 1)  # the next token's inputs, read before this step's sums
        d2, bt2, kk2, qq2, vv2 = load_token(q, k, v, beta, g, nxt, lane, c0, K, V, W, NV, RK)
        kq = kd.f32(0)
        for r in kd.unroll(RK):
            kq = kd.fma(kk[r], qq[r], kq)
        kqs = kd.plane_sum(kq)
        delta = ()
        o = ()
        for c in kd.unroll(C):
            a = kd.f32(0)
            b = kd.f32(0)
            for r in kd.unroll(RK):
                a = kd.fma(s[r * C + c], kk[r], a)
                b = kd.fma(s[r * C + c], qq[r], b)
            dc = bt * (vv[c] - d * kd.plane_sum(a))
            delta = delta + (dc,)
            o = o + (scale * kd.fma(dc, kqs, d * kd.plane_sum(b)),)
        if lane == 0:
            for n in kd.unroll(NV):
                if c0 + n * W < V:
                    store_cols(out, tok * V + c0 + n * W, part(o, n * W, W), W)
        s2 = ()
        for r in kd.unroll(RK):
            for c in kd.unroll(C):
                s2 = s2 + (kd.fma(kk[r], delta[c], d * s[r * C + c]),)
        s = s2
        d, bt, kk, qq, vv = d2, bt2, kk2, qq2, vv2
    for r in kd.unroll(RK):
        row = lane + kd.PLANE_DIM * r
        for n in kd.unroll(NV):
            if row < K and c0 + n * W < V:
                store_cols(s1, sbase + row * V + c0 + n * W, part(s, r * C + n * W, W), W)
