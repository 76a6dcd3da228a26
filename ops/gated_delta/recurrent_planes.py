"""The recurrent gated delta rule with the state's K rows across a plane's lanes (GPU decode).

A plane owns LC·W value columns of one (batch·head) for all K rows: lane (rl, cl) =
(lane // LC, lane % LC) holds W columns of rows rl, rl + LR, … (LR = PLANE_DIM / LC; RK
rows), so one access of a plane reads LC·W·4 adjacent bytes of each of LR rows. What decides
the decode speed is how few rows (cache lines) one access touches: LC = 4 lanes of 16 bytes
(64 bytes a row, 8 rows an access) ran the H200 decode at 3.8 TB/s where one lane a row
(16 bytes, 32 rows) ran it at 1.4. The three sums over K of each step (Sᵀk, Sᵀq, k·q) are a
lane's partial sums over its rows added over the LR lanes of its column group with xor
shuffles: no shared memory, no barrier. A cube is P independent planes over adjacent column
groups of one (b, h). Each step then applies, as recurrent.py does,

    δ = β·(v − e^g·Sᵀk),  o = scale·(e^g·Sᵀq + δ·(k·q)),  S ← e^g·S + k ⊗ δ.

With PREFETCH the first token's inputs load before the loop and each next token's a step
early, so their latency overlaps the current step (a grid that runs at once, where each
step's latency is the time).
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


def log2(n: int) -> int:
    """log₂ of a power of two (run at compile time on constants)."""
    return n.bit_length() - 1


@kd.func
def rows_sum(x, LC):
    """x summed over the lanes of this lane's column group (lanes equal modulo LC), given to each."""
    for m in kd.unroll(log2(kd.PLANE_DIM // LC)):
        x = x + kd.plane_shuffle_xor(x, LC << m)
    return x


@kd.func
def load_token(q, k, v, beta, g, tok, rl, c0, K, V, W, LC, RK):
    """Token `tok`'s inputs as this lane uses them: (e^g, β, its RK k and q rows (0 past K),
    its W values of v (clamped columns: in bounds, stored only where valid))."""
    d = kd.exp(g[tok])
    bt = kd.f32(beta[tok])
    kbase = tok * K
    LR = kd.PLANE_DIM // LC
    kk = ()
    qq = ()
    for r in kd.unroll(RK):
        row = rl + LR * r
        if K % LR == 0:
            kk = kk + (kd.f32(k[kbase + row]),)
            qq = qq + (kd.f32(q[kbase + row]),)
        else:
            kk = kk + (kd.select(row < K, kd.f32(k[kbase + kd.min(row, K - 1)]), kd.f32(0)),)
            qq = qq + (kd.select(row < K, kd.f32(q[kbase + kd.min(row, K - 1)]), kd.f32(0)),)
    return d, bt, kk, qq, load_f32(v, tok * V + kd.min(c0, V - W), W)


@kd.kernel
def gated_delta_recurrent_planes(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, beta: kd.Tensor,
                                 g: kd.Tensor[kd.f32], s0: kd.Tensor[kd.f32], out: kd.Tensor,
                                 s1: kd.Tensor[kd.f32], T: kd.i32, scale: kd.f32,
                                 K: kd.Const[int], V: kd.Const[int], W: kd.Const[int], LC: kd.Const[int],
                                 P: kd.Const[int], PREFETCH: kd.Const[bool]):
    """out[bh, t, cols] and s1[bh, :, cols] for the plane's LC·W columns (V a multiple of W,
    LC a power of two dividing PLANE_DIM; the grid is one-dimensional, the column tiles of one
    (b, h) adjacent). Lane (rl, cl) = (lane // LC, lane % LC) holds rows rl + (PLANE_DIM/LC)·r
    of the W columns from c0: the LC lanes of a row read LC·W adjacent columns, one access each."""
    LR = kd.PLANE_DIM // LC
    RK = (K + LR - 1) // LR
    tile = P * LC * W
    tiles = (V + tile - 1) // tile
    lane = kd.lane_pos()
    rl = lane // LC
    bh = kd.cube_pos_x() // tiles
    c0 = kd.cube_pos_x() % tiles * tile + kd.plane_pos() * (LC * W) + lane % LC * W
    sbase = kd.i64(bh) * (K * V)
    s = ()
    for r in kd.unroll(RK):
        row = rl + LR * r
        vals = load_f32(s0, sbase + kd.min(row, K - 1) * V + kd.min(c0, V - W), W)
        for i in kd.unroll(W):
            if K % LR == 0:
                s = s + (vals[i],)
            else:
                s = s + (kd.select(row < K, vals[i], kd.f32(0)),)
    row_t = kd.i64(bh) * T
    if PREFETCH:
        d, bt, kk, qq, vv = load_token(q, k, v, beta, g, row_t, rl, c0, K, V, W, LC, RK)
    for t in range(T):
        tok = row_t + t
        if PREFETCH:  # the next token's inputs, read before this step's sums
            d2, bt2, kk2, qq2, vv2 = load_token(q, k, v, beta, g, row_t + kd.min(t + 1, T - 1), rl, c0, K, V, W,
                                                LC, RK)
        else:
            d, bt, kk, qq, vv = load_token(q, k, v, beta, g, tok, rl, c0, K, V, W, LC, RK)
        kq = kd.f32(0)
        for r in kd.unroll(RK):
            kq = kd.fma(kk[r], qq[r], kq)
        kqs = rows_sum(kq, LC)
        delta = ()
        o = ()
        for c in kd.unroll(W):
            a = kd.f32(0)
            b = kd.f32(0)
            for r in kd.unroll(RK):
                a = kd.fma(s[r * W + c], kk[r], a)
                b = kd.fma(s[r * W + c], qq[r], b)
            dc = bt * (vv[c] - d * rows_sum(a, LC))
            delta = delta + (dc,)
            o = o + (scale * kd.fma(dc, kqs, d * rows_sum(b, LC)),)
        if rl == 0 and c0 < V:
            store_cols(out, tok * V + c0, o, W)
        s2 = ()
        for r in kd.unroll(RK):
            for c in kd.unroll(W):
                s2 = s2 + (kd.fma(kk[r], delta[c], d * s[r * W + c]),)
        s = s2
        if PREFETCH:
            d, bt, kk, qq, vv = d2, bt2, kk2, qq2, vv2
    for r in kd.unroll(RK):
        row = rl + LR * r
        if row < K and c0 < V:
            store_cols(s1, sbase + row * V + c0, part(s, r * W, W), W)
