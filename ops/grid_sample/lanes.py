"""grid_sample kernels for devices whose units are SIMD lanes (the cpu runtime), chosen by
tuning.lane_plan. sample.py's unit takes a flat grid point: its (n, od, oh, ow) come from
run-time divisions (scalar on a CPU) and its grid reads are gathers. Here a cube takes BX
consecutive grid points of one batch item and a unit one of them (its index affine in the
unit), so the grid coordinates are interleaved vector loads, the output stores are vector
stores, and each unit's taps (offsets in the plane, weights, inside flags) are computed
once and reused by every channel (a uniform channel loop: the cpu back end runs it around
the unit loop, the taps kept in per-unit arrays); only the tap reads themselves are
gathers. The padding mode is a compile-time constant PAD here: reflection's float
remainder is a libm call per lane, which the vectorised unit loop would otherwise pay in
every mode.

Forward: the same sums in the same order as sample.channel_sample (bit-identical in F32).
Backward: the grid gradient as a per-point sum over channels (grid_grad_lanes, as
sample_backward's, its tap factors multiplied once a point), which also writes every
point's tap offsets and weights; then the input gradient by scatter_input_grad: a cube
takes PLANES planes of a batch item and one unit adds every grid point's contributions,
point by point in order, into F32 copies of the planes in cube-shared memory (no atomics,
no fixed point, the same sum on every run), then the cube stores them cast once (as
pooling's scatter.py; scatter_input_grad_global keeps them in memory where they do not
fit). The scatter is scalar (lanes could collide); a point's taps are read once for all
PLANES planes, whose read-modify-writes are independent.

Tensors are flat views of contiguous ones: input [N, C, D, H, W], grid [N, Do, Ho, Wo,
DIMS], output / out_grad [N, C, Do, Ho, Wo]; `points` = Do·Ho·Wo (grid points a batch item)."""
from __future__ import annotations

import kerneldsl as kd

from ..pooling.scatter import zero_plane
from .coords import axis_taps
from .sample import tap_layout

UNROLL = 4  # channels sampled per step of the forward's channel loop (their gathers are independent)


@kd.func
def chunk_point(points, BX, EXACT):
    """(n, j, live): the batch item and in-item index of this unit's grid point, and whether
    the point exists; cube x takes the BX points from cube_pos_x·BX on, all of one batch item
    (BX divides the item's points, or the last cube of an item is masked: j clamped, EXACT
    False). j is I64 and affine in the unit, so the addresses built on it stay vector loads
    and stores."""
    cubes = (points + BX - 1) // BX
    n = kd.cube_pos_x() // cubes
    j = kd.i64(kd.cube_pos_x() - n * cubes) * BX + kd.unit_pos_x()
    live = j < points
    if not EXACT:
        j = kd.min(j, kd.i64(points - 1))
    return n, j, live


@kd.func
def grid_taps(grid, at, size_d, size_h, size_w, MODE, pad_mode, align, DIMS):
    """The (depth, height, width) taps (coords.axis_taps) of the point whose coordinates
    start at grid[at]."""
    tx = axis_taps(kd.f32(grid[at]), size_w, MODE, pad_mode, align)
    ty = axis_taps(kd.f32(grid[at + 1]), size_h, MODE, pad_mode, align)
    if DIMS == 3:
        tz = axis_taps(kd.f32(grid[at + 2]), size_d, MODE, pad_mode, align)
    else:
        tz = axis_taps(kd.f32(0.0), 1, "Off", pad_mode, align)
    return tz + ty + tx


@kd.func
def tap_terms(t, size_h, size_w, DIMS):
    """From grid_taps' tuple: each tap's offset in the plane (I32), weight wz·wy·wx (as
    sample.channel_sample multiplies it) and inside flag (I32 1 or 0: flags that live across
    the channel loop are per-unit arrays, and bytes of bools become vector masks bit by bit),
    as three tuples in tap order."""
    TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
    offs = ()
    ws = ()
    oks = ()
    for a in kd.unroll(TZ):
        for b in kd.unroll(TX):
            for k in kd.unroll(TX):
                offs = offs + (((t[Z + a] * size_h + t[Y + b]) * size_w + t[X + k]),)
                ws = ws + (t[Z + TZ + a] * t[Y + TX + b] * t[X + TX + k],)
                oks = oks + (kd.select(t[Z + 3 * TZ + a] and t[Y + 3 * TX + b] and t[X + 3 * TX + k], 1, 0),)
    return offs, ws, oks


@kd.func
def sample_plane(x, base, offs, ws, oks):
    """The sample of the plane starting at `base` from a point's tap terms (F32)."""
    acc = kd.f32(0)
    for k in kd.unroll(len(offs)):
        acc += ws[k] * kd.select(oks[k] != 0, kd.f32(x[base + offs[k]]), 0.0)
    return acc


@kd.kernel
def forward_lanes(x: kd.Tensor, grid: kd.Tensor, y: kd.Tensor, channels: kd.i32, points: kd.i32, size_d: kd.i32,
                  size_h: kd.i32, size_w: kd.i32, PAD: kd.Const[int], align: kd.i32, MODE: kd.Const[str],
                  DIMS: kd.Const[int], EXACT: kd.Const[bool], BX: kd.Const[int]):
    """y = x sampled at grid, a unit a grid point (chunk_point; `points` a batch item)."""
    n, j, live = chunk_point(points, BX, EXACT)
    t = grid_taps(grid, (kd.i64(n) * points + j) * DIMS, size_d, size_h, size_w, MODE, PAD, align, DIMS)
    offs, ws, oks = tap_terms(t, size_h, size_w, DIMS)
    plane_in = kd.i64(size_d * size_h) * size_w
    whole = channels - channels % UNROLL
    for c0 in range(0, whole, UNROLL):  # uniform: the taps stay in per-unit arrays
        for u in kd.unroll(UNROLL):
            p = kd.i64(n) * channels + c0 + u
            v = sample_plane(x, p * plane_in, offs, ws, oks)
            if EXACT:
                y[p * points + j] = v
            elif live:
                y[p * points + j] = v
    for c in range(whole, channels):
        p = kd.i64(n) * channels + c
        v = sample_plane(x, p * plane_in, offs, ws, oks)
        if EXACT:
            y[p * points + j] = v
        elif live:
            y[p * points + j] = v


@kd.func
def add_channel(x, g, sums, p, points, j, plane_in, offs, oks, sx, sy, sz, DIMS):
    """(gx, gy, gz) plus plane p's terms at point j: g × each tap's value × its slopes."""
    gx, gy, gz = sums
    go = kd.f32(g[p * points + j])
    base = p * plane_in
    for k in kd.unroll(len(offs)):
        vg = kd.select(oks[k] != 0, kd.f32(x[base + offs[k]]), 0.0) * go
        gx += vg * sx[k]
        gy += vg * sy[k]
        if DIMS == 3:
            gz += vg * sz[k]
    return (gx, gy, gz)


@kd.kernel
def grid_grad_lanes(x: kd.Tensor, grid: kd.Tensor, g: kd.Tensor, grad_grid: kd.Tensor,
                    tap_at: kd.Tensor[kd.i32, 1], tap_w: kd.Tensor[kd.f32, 1], channels: kd.i32, points: kd.i32,
                    size_d: kd.i32, size_h: kd.i32, size_w: kd.i32, PAD: kd.Const[int],
                    align: kd.i32, MODE: kd.Const[str], DIMS: kd.Const[int], EXACT: kd.Const[bool],
                    BX: kd.Const[int]):
    """grad_grid = d(Σ g·y)/d grid, a unit a grid point as in forward_lanes: Σ over channels of g·(each tap's value × its weight's slopes), times
    d(pixel coordinate)/d(grid coordinate) per axis. Also writes each point's taps for
    scatter_input_grad: tap_at[point, k] = the tap's offset in the plane (the plane size, a
    slot never stored, where the tap is outside), tap_w[point, k] = its weight."""
    n, j, live = chunk_point(points, BX, EXACT)
    point = kd.i64(n) * points + j
    at = point * DIMS
    t = grid_taps(grid, at, size_d, size_h, size_w, MODE, PAD, align, DIMS)
    TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
    offs, ws, oks = tap_terms(t, size_h, size_w, DIMS)
    sx = ()   # each tap's d weight / d x, y, z: the slope along that axis times the other weights
    sy = ()
    sz = ()
    for a in kd.unroll(TZ):
        for b in kd.unroll(TX):
            for k in kd.unroll(TX):
                wz = t[Z + TZ + a]
                wy = t[Y + TX + b]
                wx = t[X + TX + k]
                sx = sx + (t[X + 2 * TX + k] * wy * wz,)
                sy = sy + (t[Y + 2 * TX + b] * wx * wz,)
                sz = sz + (t[Z + 2 * TZ + a] * wx * wy,)
    plane_in = size_d * size_h * size_w
    sums = (kd.f32(0), kd.f32(0), kd.f32(0))
    whole = channels - channels % UNROLL
    for c0 in range(0, whole, UNROLL):  # uniform; UNROLL channels a step, added in order
        for u in kd.unroll(UNROLL):
            sums = add_channel(x, g, sums, kd.i64(n) * channels + c0 + u, points, j, plane_in, offs, oks, sx, sy,
                               sz, DIMS)
    for c in range(whole, channels):
        sums = add_channel(x, g, sums, kd.i64(n) * channels + c, points, j, plane_in, offs, oks, sx, sy, sz, DIMS)
    gx, gy, gz = sums
    T = len(offs)
    if EXACT or live:
        grad_grid[at] = gx * t[X + 4 * TX]
        grad_grid[at + 1] = gy * t[Y + 4 * TX]
        if DIMS == 3:
            grad_grid[at + 2] = gz * t[Z + 4 * TZ]
        for k in kd.unroll(T):
            tap_at[point * T + k] = kd.select(oks[k] != 0, offs[k], plane_in)
            tap_w[point * T + k] = ws[k]


@kd.func
def scatter_points(g, tap_at, tap_w, acc, first, n, p0, points, TAPS, IS, PLANES):
    """Unit 0 adds g[p0 + q, j] × each tap's weight of every grid point j of batch item n, in
    order, to acc[first + q·(IS + 1) + the tap's offset] for the PLANES planes q (an outside
    tap's offset is IS: a slot never stored, so no branch)."""
    if kd.unit_pos_x() == 0:
        e0 = kd.i64(n) * points * TAPS
        for j in range(points):
            gs = ()
            for q in kd.unroll(PLANES):
                gs = gs + (kd.f32(g[kd.i64(p0 + q) * points + j]),)
            e = e0 + kd.i64(j) * TAPS
            for k in kd.unroll(TAPS):
                o = first + tap_at[e + k]
                w = tap_w[e + k]
                for q in kd.unroll(PLANES):
                    acc[o + q * (IS + 1)] = acc[o + q * (IS + 1)] + w * gs[q]


@kd.kernel
def scatter_input_grad(g: kd.Tensor, tap_at: kd.Tensor[kd.i32, 1], tap_w: kd.Tensor[kd.f32, 1],
                       dx: kd.Tensor, channels: kd.i32, points: kd.i32, TAPS: kd.Const[int], IS: kd.Const[int],
                       PLANES: kd.Const[int]):
    """dx[p] = Σ over the grid points of plane p's batch item (in order) and their taps (in
    order) inside the input of g[p, point] × the tap's weight (grid_grad_lanes' tap_at,
    tap_w), PLANES planes p = (n, c) of one batch item a cube (IS pixels each), summed in
    F32 copies of the planes in shared memory (scatter_points), then stored by every unit
    (vectors)."""
    p0 = kd.cube_pos_x() * PLANES
    acc = kd.shared(kd.f32, PLANES * (IS + 1))
    zero_plane(acc, PLANES * (IS + 1))
    scatter_points(g, tap_at, tap_w, acc, 0, p0 // channels, p0, points, TAPS, IS, PLANES)
    kd.sync_cube()
    BX = kd.cube_dim_x()
    for q in kd.unroll(PLANES):
        base = kd.i64(p0 + q) * IS
        for i0 in range(0, IS, BX):
            i = i0 + kd.unit_pos_x()
            if i < IS:
                dx[base + i] = acc[q * (IS + 1) + i]


@kd.kernel
def scatter_input_grad_global(g: kd.Tensor, tap_at: kd.Tensor[kd.i32, 1], tap_w: kd.Tensor[kd.f32, 1],
                              acc: kd.Tensor[kd.f32, 1], dx: kd.Tensor, channels: kd.i32, points: kd.i32,
                              plane: kd.i32, TAPS: kd.Const[int], PLANES: kd.Const[int]):
    """scatter_input_grad for planes whose F32 copies do not fit the shared memory: the
    copies live in acc (PLANES · (plane + 1) F32 a cube), zeroed and stored by every unit."""
    p0 = kd.cube_pos_x() * PLANES
    BX = kd.cube_dim_x()
    span = kd.i64(plane + 1)
    first = kd.i64(kd.cube_pos_x()) * PLANES * span
    for i0 in range(0, PLANES * span, BX):
        i = i0 + kd.unit_pos_x()
        if i < PLANES * span:
            acc[first + i] = kd.f32(0)
    kd.sync_cube()
    scatter_points(g, tap_at, tap_w, acc, first, p0 // channels, p0, points, TAPS, plane, PLANES)
    kd.sync_cube()
    for q in kd.unroll(PLANES):
        base = kd.i64(p0 + q) * plane
        for i0 in range(0, plane, BX):
            i = i0 + kd.unit_pos_x()
            if i < plane:
                dx[base + i] = acc[first + q * span + i]
