"""The `Scalar` grouped GEMM: plain f32 arithmetic, every runtime and float dtype.

Rows of the dispatched matrix are grouped by expert. One launch covers every
expert: a 1-D grid over (row tiles of all experts) x (output column tiles), in
groups of GM row tiles per column sweep so both operands stay in cache; each cube
finds its expert by a binary search of the tile offsets (see `tiles.py`).
A cube computes a 4 x TN output tile with its units spread along the reduction
axis K, which is contiguous in both operands (unit-strided vector loads on the
CPU, coalesced loads on GPUs); the per-unit partial sums meet through plane sums
and shared memory at the end (where units are SIMD lanes: through shared memory alone,
added in halves). K runs in full blocks plus one guarded tail block
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
def mac_step(acc, x, m, k, live, e, wa, ca, wb, cb):
    """One k of a 4 x 4 tile: acc (16 sums, row-major) += x[m[i], k] times the weights
    wa[e, ca[0..1], k] and wb[e, cb[0..1], k] (the tile's four columns)."""
    xs = load_x4(x, m, k, live)
    w0, w1 = load_w2(wa, e, ca, k)
    w2, w3 = load_w2(wb, e, cb, k)
    out = ()
    for i in kd.unroll(4):
        out = out + fma4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3], xs[i], w0, w1, w2, w3)
    return out


@kd.func
def tile_sums(x, m, r0, rend, K, e, wa, ca, wb, cb, BLOCK):
    """The 4 x 4 tile's per-unit partial sums over K: units spread along K, full blocks
    then one guarded tail block; empty tiles (r0 == rend) skip the loop (no barrier in it)."""
    t = kd.unit_pos_x()
    acc = (kd.f32(0),) * 16
    full = K - K % BLOCK
    if r0 < rend:
        for k0 in range(0, full + BLOCK, BLOCK):
            if k0 < full:                   # uniform: the region loop of each branch stays branch-free
                acc = mac_step(acc, x, m, k0 + t, True, e, wa, ca, wb, cb)
            elif full < K:
                acc = mac_step(acc, x, m, kd.min(k0 + t, K - 1), k0 + t < K, e, wa, ca, wb, cb)
    return acc


@kd.func
def tile_partials(acc, LANES):
    """Every unit's 16 sums into shared memory as a cube's partial sums, then a barrier:
    part[slot, i] for i below `partial_count`. GPUs sum each slot over its plane first (a
    plane op a slot, i = the plane). Where units are SIMD lanes (LANES) each unit's sums go
    in as they are (i = the unit) and are added in halves into each slot's first
    (`sum_in_halves`): plane ops on such devices each cut the kernel into another pair of
    loops over the units, and one unit adding up a slot gathers across them."""
    part = kd.shared(kd.f32, 16 * partial_count(LANES))
    if LANES:
        for j in kd.unroll(16):
            part[j * kd.cube_dim_x() + kd.unit_pos_x()] = acc[j]
        sum_in_halves(part)
    else:
        for j in kd.unroll(16):
            plane_partial(acc[j], part, j)
    kd.sync_cube()
    return part


@kd.func
def sum_in_halves(part):
    """Each of the 16 slots' cube_dim_x() partial sums (a power of two up to 128, consecutive)
    added into the slot's first: half of them a level, a barrier before each level. Every level
    reads and writes consecutive floats (vectors where units are SIMD lanes)."""
    n = kd.cube_dim_x()
    u = kd.unit_pos_x()
    for level in kd.unroll(1, 8):
        h = n >> level
        if h >= 1:
            kd.sync_cube()
            if u < h:
                for j in kd.unroll(16):
                    part[j * n + u] += part[j * n + u + h]


@kd.func
def partial_count(LANES):
    """Partial sums a slot of tile_partials: one a unit (LANES) or one a plane."""
    return kd.cube_dim_x() if LANES else kd.plane_count()


@kd.func
def plane_partial(v, part, slot):
    """Sum v over the plane and leave the plane's total in part[slot, plane]."""
    s = kd.plane_sum(v)
    if kd.lane_pos() == 0:
        part[slot * kd.plane_count() + kd.plane_pos()] = s


@kd.func
def cube_total(part, slot, LANES):
    """The cube-wide sum of a slot written by tile_partials (after its barrier): its first
    partial where units are SIMD lanes (summed in halves already), else its planes' sum."""
    n = partial_count(LANES)
    s = part[slot * n]
    if not LANES:
        for p in range(1, n):
            s += part[slot * n + p]
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
                 BLOCK: kd.Const[int], GM: kd.Const[int], LANES: kd.Const[bool]):
    """y[r, n] = sum_k x[r, k] * w[e(r), n, k] for the rows r of each expert e (LANES: the
    device's units are SIMD lanes, see tile_partials)."""
    t = kd.unit_pos_x()
    tile, col = swizzle(ROWS, COLS, GM)
    e, r0, rend = find_tile(offsets, tile_offsets, E, tile, TM)
    if r0 == rend:
        return  # a tile past the last one (the grid is sized for the worst spread of rows)
    N = w.shape[1]
    n0 = col * TN_DOWN
    c01 = (n0, kd.min(n0 + 1, N - 1))
    c23 = (kd.min(n0 + 2, N - 1), kd.min(n0 + 3, N - 1))
    acc = tile_sums(x, tile_rows(r0, rend), r0, rend, x.shape[1], e, w, c01, w, c23, BLOCK)
    part = tile_partials(acc, LANES)
    for o0 in range(0, 16, BLOCK):  # the 16 outputs, by as few as 8 units
        o = o0 + t
        r = r0 + o // 4
        n = n0 + o % 4
        if o < 16 and r < rend and n < N:
            y[r, n] = cube_total(part, o, LANES)


@kd.kernel
def grouped_gemm_swiglu(x: kd.Tensor, gate: kd.Tensor, up: kd.Tensor, h: kd.Tensor,
                        offsets: kd.Tensor[kd.u32, 1], tile_offsets: kd.Tensor[kd.u32, 1], E: kd.i32,
                        ROWS: kd.i32, COLS: kd.i32, BLOCK: kd.Const[int], GM: kd.Const[int],
                        LANES: kd.Const[bool]):
    """h[r, n] = silu(x[r]·gate[e, n]) * (x[r]·up[e, n]): both projections and the gating in one pass."""
    t = kd.unit_pos_x()
    tile, col = swizzle(ROWS, COLS, GM)
    e, r0, rend = find_tile(offsets, tile_offsets, E, tile, TM)
    if r0 == rend:
        return
    N = gate.shape[1]
    n0 = col * TN_FUSED
    c = (n0, kd.min(n0 + 1, N - 1))
    # tile columns: gate n0, n0 + 1, then up n0, n0 + 1
    acc = tile_sums(x, tile_rows(r0, rend), r0, rend, x.shape[1], e, gate, c, up, c, BLOCK)
    part = tile_partials(acc, LANES)
    if t < 8:  # (a cube has at least 8 units)
        r = r0 + t // 2
        n = n0 + t % 2
        if r < rend and n < N:
            slot = t // 2 * 4 + t % 2
            h[r, n] = silu(cube_total(part, slot, LANES)) * cube_total(part, slot + 2, LANES)
