"""The `Scalar` grouped GEMM: plain f32 arithmetic, every runtime and float dtype.

Rows of the dispatched matrix are grouped by expert. One launch covers every
expert: a 1-D grid over (row tiles of all experts) x (output column tiles), in
groups of GM row tiles per column sweep so both operands stay in cache; each cube
finds its expert by a binary search of the tile offsets (see `tiles.py`).
A cube computes a 4 x TN output tile with its units spread along the reduction
axis K, which is contiguous in both operands (unit-strided vector loads on the
CPU, coalesced loads on GPUs); the per-unit partial sums meet through plane sums
and shared memory at the end. K runs in full blocks plus one guarded tail block
so the hot loop has no per-element tests. Rows past the expert's end and columns
past N are clamped for loading and skipped when storing.
"""
from __future__ import annotations

import kerneldsl as kd

from .tiles import find_tile

TM = 4          # rows per cube (both kernels)
TN_DOWN = 4     # output columns per cube, plain projection
TN_FUSED = 2    # output columns per cube and per matrix, fused gate/up projection
GM = 8          # row tiles per group of the cube order (see swizzle)


@kd.func
def fma4(a0, a1, a2, a3, x, w0, w1, w2, w3):
    """Four accumulators of one row updated with one x value and four weights."""
    return a0 + x * w0, a1 + x * w1, a2 + x * w2, a3 + x * w3


@kd.func
def load_x4(x, m, k, live):
    """x[m[i], k] for four rows, as f32; zero where not `live` (the K tail)."""
    return (kd.select(live, kd.f32(x[m[0], k]), 0.0), kd.select(live, kd.f32(x[m[1], k]), 0.0),
            kd.select(live, kd.f32(x[m[2], k]), 0.0), kd.select(live, kd.f32(x[m[3], k]), 0.0))


@kd.func
def load_w2(w, e, c, k):
    """w[e, c[i], k] for two output columns, as f32."""
    return kd.f32(w[e, c[0], k]), kd.f32(w[e, c[1], k])


@kd.func
def plane_partial(v, part, slot):
    """Sum v over the plane and leave the plane's total in part[slot, plane]."""
    s = kd.plane_sum(v)
    if kd.lane_pos() == 0:
        part[slot * kd.plane_count() + kd.plane_pos()] = s


@kd.func
def cube_total(part, slot):
    """The cube-wide sum of a slot written by plane_partial (after a barrier)."""
    s = kd.f32(0)
    for p in range(kd.plane_count()):
        s += part[slot * kd.plane_count() + p]
    return s


@kd.func
def swizzle(rows, cols, GM):
    """(row tile, column tile) of this cube: GM row tiles share each column tile in turn,
    so a group's rows of x and the current rows of w are both reused from cache."""
    L = kd.cube_pos_x()
    first = L // (GM * cols) * GM
    size = kd.min(rows - first, GM)
    inner = L % (GM * cols)
    return first + inner % size, inner // size


@kd.func
def silu(g):
    """g * sigmoid(g), without overflow for large |g|."""
    e = kd.exp(-kd.abs(g))
    return kd.select(g >= 0.0, g / (1.0 + e), g * e / (1.0 + e))


@kd.func
def tile_rows(r0, rend):
    """The four row indices of a tile, clamped into the expert's rows for loading."""
    return r0, kd.min(r0 + 1, rend - 1), kd.min(r0 + 2, rend - 1), kd.min(r0 + 3, rend - 1)


@kd.kernel
def grouped_gemm(x: kd.Tensor, w: kd.Tensor, y: kd.Tensor, offsets: kd.Tensor[kd.u32, 1],
                 tile_offsets: kd.Tensor[kd.u32, 1], E: kd.i32, ROWS: kd.i32, COLS: kd.i32,
                 BLOCK: kd.Const[int], GM: kd.Const[int]):
    """y[r, n] = sum_k x[r, k] * w[e(r), n, k] for the rows r of each expert e."""
    t = kd.unit_pos_x()
    tile, col = swizzle(ROWS, COLS, GM)
    e, r0, rend = find_tile(offsets, tile_offsets, E, tile, TM)
    N = w.shape[1]
    K = x.shape[1]
    n0 = col * TN_DOWN
    m = tile_rows(r0, rend)
    c01 = (n0, kd.min(n0 + 1, N - 1))
    c23 = (kd.min(n0 + 2, N - 1), kd.min(n0 + 3, N - 1))
    a00 = kd.f32(0); a01 = kd.f32(0); a02 = kd.f32(0); a03 = kd.f32(0)  # noqa: E702
    a10 = kd.f32(0); a11 = kd.f32(0); a12 = kd.f32(0); a13 = kd.f32(0)  # noqa: E702
    a20 = kd.f32(0); a21 = kd.f32(0); a22 = kd.f32(0); a23 = kd.f32(0)  # noqa: E702
    a30 = kd.f32(0); a31 = kd.f32(0); a32 = kd.f32(0); a33 = kd.f32(0)  # noqa: E702
    full = K - K % BLOCK
    if r0 < rend:                       # no barrier inside: empty tiles skip only the loop
        for k0 in range(0, full + BLOCK, BLOCK):
            if k0 < full:                   # uniform: the region loop of each branch stays branch-free
                k = k0 + t
                x0, x1, x2, x3 = load_x4(x, m, k, True)
                w0, w1 = load_w2(w, e, c01, k)
                w2, w3 = load_w2(w, e, c23, k)
                a00, a01, a02, a03 = fma4(a00, a01, a02, a03, x0, w0, w1, w2, w3)
                a10, a11, a12, a13 = fma4(a10, a11, a12, a13, x1, w0, w1, w2, w3)
                a20, a21, a22, a23 = fma4(a20, a21, a22, a23, x2, w0, w1, w2, w3)
                a30, a31, a32, a33 = fma4(a30, a31, a32, a33, x3, w0, w1, w2, w3)
            elif full < K:
                k = kd.min(k0 + t, K - 1)
                x0, x1, x2, x3 = load_x4(x, m, k, k0 + t < K)
                w0, w1 = load_w2(w, e, c01, k)
                w2, w3 = load_w2(w, e, c23, k)
                a00, a01, a02, a03 = fma4(a00, a01, a02, a03, x0, w0, w1, w2, w3)
                a10, a11, a12, a13 = fma4(a10, a11, a12, a13, x1, w0, w1, w2, w3)
                a20, a21, a22, a23 = fma4(a20, a21, a22, a23, x2, w0, w1, w2, w3)
                a30, a31, a32, a33 = fma4(a30, a31, a32, a33, x3, w0, w1, w2, w3)
    part = kd.shared(kd.f32, 16 * kd.plane_count())
    plane_partial(a00, part, 0); plane_partial(a01, part, 1)    # noqa: E702
    plane_partial(a02, part, 2); plane_partial(a03, part, 3)    # noqa: E702
    plane_partial(a10, part, 4); plane_partial(a11, part, 5)    # noqa: E702
    plane_partial(a12, part, 6); plane_partial(a13, part, 7)    # noqa: E702
    plane_partial(a20, part, 8); plane_partial(a21, part, 9)    # noqa: E702
    plane_partial(a22, part, 10); plane_partial(a23, part, 11)  # noqa: E702
    plane_partial(a30, part, 12); plane_partial(a31, part, 13)  # noqa: E702
    plane_partial(a32, part, 14); plane_partial(a33, part, 15)  # noqa: E702
    kd.sync_cube()
    if t < 16:
        r = r0 + t // 4
        n = n0 + t % 4
        if r < rend and n < N:
            y[r, n] = cube_total(part, t)


@kd.kernel
def grouped_gemm_swiglu(x: kd.Tensor, gate: kd.Tensor, up: kd.Tensor, h: kd.Tensor,
                        offsets: kd.Tensor[kd.u32, 1], tile_offsets: kd.Tensor[kd.u32, 1], E: kd.i32,
                        ROWS: kd.i32, COLS: kd.i32, BLOCK: kd.Const[int], GM: kd.Const[int]):
    """h[r, n] = silu(x[r]·gate[e, n]) * (x[r]·up[e, n]): both projections and the gating in one pass."""
    t = kd.unit_pos_x()
    tile, col = swizzle(ROWS, COLS, GM)
    e, r0, rend = find_tile(offsets, tile_offsets, E, tile, TM)
    N = gate.shape[1]
    K = x.shape[1]
    n0 = col * TN_FUSED
    m = tile_rows(r0, rend)
    c = (n0, kd.min(n0 + 1, N - 1))
    g00 = kd.f32(0); g01 = kd.f32(0); u00 = kd.f32(0); u01 = kd.f32(0)  # noqa: E702
    g10 = kd.f32(0); g11 = kd.f32(0); u10 = kd.f32(0); u11 = kd.f32(0)  # noqa: E702
    g20 = kd.f32(0); g21 = kd.f32(0); u20 = kd.f32(0); u21 = kd.f32(0)  # noqa: E702
    g30 = kd.f32(0); g31 = kd.f32(0); u30 = kd.f32(0); u31 = kd.f32(0)  # noqa: E702
    full = K - K % BLOCK
    if r0 < rend:                       # no barrier inside: empty tiles skip only the loop
        for k0 in range(0, full + BLOCK, BLOCK):
            if k0 < full:
                k = k0 + t
                x0, x1, x2, x3 = load_x4(x, m, k, True)
                wg0, wg1 = load_w2(gate, e, c, k)
                wu0, wu1 = load_w2(up, e, c, k)
                g00, g01, u00, u01 = fma4(g00, g01, u00, u01, x0, wg0, wg1, wu0, wu1)
                g10, g11, u10, u11 = fma4(g10, g11, u10, u11, x1, wg0, wg1, wu0, wu1)
                g20, g21, u20, u21 = fma4(g20, g21, u20, u21, x2, wg0, wg1, wu0, wu1)
                g30, g31, u30, u31 = fma4(g30, g31, u30, u31, x3, wg0, wg1, wu0, wu1)
            elif full < K:
                k = kd.min(k0 + t, K - 1)
                x0, x1, x2, x3 = load_x4(x, m, k, k0 + t < K)
                wg0, wg1 = load_w2(gate, e, c, k)
                wu0, wu1 = load_w2(up, e, c, k)
                g00, g01, u00, u01 = fma4(g00, g01, u00, u01, x0, wg0, wg1, wu0, wu1)
                g10, g11, u10, u11 = fma4(g10, g11, u10, u11, x1, wg0, wg1, wu0, wu1)
                g20, g21, u20, u21 = fma4(g20, g21, u20, u21, x2, wg0, wg1, wu0, wu1)
                g30, g31, u30, u31 = fma4(g30, g31, u30, u31, x3, wg0, wg1, wu0, wu1)
    part = kd.shared(kd.f32, 16 * kd.plane_count())
    plane_partial(g00, part, 0); plane_partial(g01, part, 1)    # noqa: E702
    plane_partial(g10, part, 2); plane_partial(g11, part, 3)    # noqa: E702
    plane_partial(g20, part, 4); plane_partial(g21, part, 5)    # noqa: E702
    plane_partial(g30, part, 6); plane_partial(g31, part, 7)    # noqa: E702
    plane_partial(u00, part, 8); plane_partial(u01, part, 9)    # noqa: E702
    plane_partial(u10, part, 10); plane_partial(u11, part, 11)  # noqa: E702
    plane_partial(u20, part, 12); plane_partial(u21, part, 13)  # noqa: E702
    plane_partial(u30, part, 14); plane_partial(u31, part, 15)  # noqa: E702
    kd.sync_cube()
    if t < 8:
        r = r0 + t // 2
        n = n0 + t % 2
        if r < rend and n < N:
            g = cube_total(part, t)
            u = cube_total(part, t + 8)
            h[r, n] = silu(g) * u
