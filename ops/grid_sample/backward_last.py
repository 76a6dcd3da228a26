"""The grid_sample backward in channels-last order, for devices with a native 64-bit atomic add
(caps.atomics["add"] lists i64) whose units are not SIMD lanes.

sample.sample_backward scatters into [N, C, D, H, W] words, one unit a grid point: the 32
lanes of a warp add to 32 pixels far apart (a memory line each, for a random grid), and
each contribution costs two 32-bit atomics and a hand-made carry (fixed_point.add_fixed).
Here the input and out_grad are first copied to channels-last order (channels_last.py's
transpose), G units share a grid point and take its channels c ≡ unit (mod G), so a warp's
atomic on one tap adds to G consecutive 64-bit words of [N, D·H·W, C] (G·8 bytes, one or
two lines), one native i64 atomic a contribution. The sums are the same integers as
fixed_point's (same scale, same rounding of each contribution), so the input gradient is
bit for bit the direct kernel's, in any launch order. The grid gradient (a per-point sum
over channels) is summed by each unit over its channels, then over the G units in order
through shared memory: deterministic, within rounding of the direct kernel's order.
`finish_channels_last` converts the words back to [N, C, D, H, W] in the input's dtype
through a 32 × 32 tile in shared memory (reads and writes in order). The flag words beside
the accumulator (NaN/±inf contributions) are only cleared, set and read where max_bits[1]
says out_grad holds a non-finite (or huge) value: nothing to touch in the common case."""
from __future__ import annotations

import kerneldsl as kd

from .channels_last import flat_point_taps, tile_corner
from .fixed_point import NAN_BIT, NEG_INF_BIT, POS_INF_BIT, fixed_of, fixed_scale, scale_exponent
from .gate import gate_open
from .sample import tap_gradient, tap_layout

FINISH_UNITS = (32, 8)   # finish_channels_last's cube: 32 units along a row, 8 rows at a time


@kd.func
def add_wide(acc, flags, at, v, scale):
    """Adds F32 v to word `at` as the integer fixed_point.fixed_of(v, scale), with one
    native 64-bit atomic (none for a zero); a non-finite v sets a flag bit instead."""
    if kd.abs(v) < kd.inf:
        q = fixed_of(v, scale)
        if q != 0:
            kd.atomic_add(acc, at, q)
    else:
        bit = kd.select(v != v, NAN_BIT, kd.select(v > 0.0, POS_INF_BIT, NEG_INF_BIT))
        kd.atomic_or(flags, at, kd.u32(bit))


@kd.kernel
def clear_flags(flags: kd.Tensor[kd.u32, 1], max_bits: kd.Tensor[kd.u32, 1], total: kd.i64):
    """flags = 0 where out_grad has a non-finite or huge value (max_bits[1]), else nothing."""
    e = kd.i64(kd.cube_pos_x()) * kd.cube_dim_x() + kd.unit_pos_x()
    if max_bits[1] != 0 and e < total:
        flags[e] = kd.u32(0)


@kd.func
def point_block(xl, grid, gl, grad_grid, acc, flags, max_bits, parts, rows, first, total, locations, C, size_d,
                size_h, size_w, pad_mode, align, MODE, DIMS, HEADROOM, G, STAGED_C, SCATTER):
    """backward_channels_last's work on the block of PTS = UNITS / G points from `first`."""
    UNITS = kd.cube_dim_x()
    PTS = UNITS // G
    u = kd.unit_pos_x()
    chunk = u % G
    wanted = first + u // G
    if STAGED_C > 0:
        for i in kd.unroll(-(-(STAGED_C * PTS) // UNITS)):
            slot = u + i * UNITS
            f = first + slot % PTS
            if slot < STAGED_C * PTS:
                v = kd.f32(0)
                if f < total:   # (points past the last: zeros, read by units that add nothing)
                    m = f // locations
                    v = kd.f32(gl[(kd.i64(m) * STAGED_C + slot // PTS) * locations + f - m * locations])
                rows[slot] = v
        kd.sync_cube()
    live = wanted < total          # units past the last point compute a copy of it, add nothing
    e = kd.min(wanted, total - 1)
    t = flat_point_taps(grid, e, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
    TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
    scale = fixed_scale(max_bits[0], HEADROOM)
    base = kd.i64(e // locations) * size_d * size_h * size_w
    row = kd.i64(e) * C
    gx = kd.f32(0)
    gy = kd.f32(0)
    gz = kd.f32(0)
    for c in range(chunk, C, G):
        if STAGED_C > 0:
            go = rows[c * PTS + u // G]
        else:
            go = kd.f32(gl[row + c])
        for a in kd.unroll(TZ):
            for b in kd.unroll(TX):
                for k in kd.unroll(TX):
                    ok = t[Z + 3 * TZ + a] and t[Y + 3 * TX + b] and t[X + 3 * TX + k]
                    at = (base + (t[Z + a] * size_h + t[Y + b]) * size_w + t[X + k]) * C + c
                    v = kd.select(ok, kd.f32(xl[at]), 0.0)
                    gx, gy, gz, w = tap_gradient(t, v, go, a, b, k, gx, gy, gz, TZ, TX, Z, Y, X)
                    if SCATTER and ok and live:
                        add_wide(acc, flags, at, w * go, scale)
    parts[u] = gx
    parts[UNITS + u] = gy
    parts[2 * UNITS + u] = gz
    kd.sync_cube()
    if chunk == 0 and live:
        sx = kd.f32(0)
        sy = kd.f32(0)
        sz = kd.f32(0)
        for j in kd.unroll(G):   # in order: the same sum whatever order the units ran in
            sx += parts[u + j]
            sy += parts[UNITS + u + j]
            sz += parts[2 * UNITS + u + j]
        grad_grid[kd.i64(e) * DIMS] = sx * t[X + 4 * TX]
        grad_grid[kd.i64(e) * DIMS + 1] = sy * t[Y + 4 * TX]
        if DIMS == 3:
            grad_grid[kd.i64(e) * DIMS + 2] = sz * t[Z + 4 * TZ]


@kd.kernel
def backward_channels_last(xl: kd.Tensor, grid: kd.Tensor, gl: kd.Tensor, grad_grid: kd.Tensor,
                           acc: kd.Tensor[kd.i64, 1], flags: kd.Tensor[kd.u32, 1], max_bits: kd.Tensor[kd.u32, 1],
                           total: kd.i32, locations: kd.i32, C: kd.i32, size_d: kd.i32, size_h: kd.i32,
                           size_w: kd.i32, pad_mode: kd.i32, align: kd.i32, MODE: kd.Const[str],
                           DIMS: kd.Const[int], HEADROOM: kd.Const[int], G: kd.Const[int], STAGED_C: kd.Const[int],
                           SCATTER: kd.Const[bool], gate: kd.Tensor[kd.u32, 1], limit: kd.i32,
                           WHEN: kd.Const[int], LOOP: kd.Const[bool]):
    """xl [N, S, C] (flat, channels last), grid [N·locations, DIMS] (flat): unit u of a cube
    takes channels u % G + i·G of the cube's point u // G, adds its contributions to acc
    [N, S, C] (flags beside it) and its share of the grid gradient, which the point's first
    unit sums over the G units into grad_grid [N·locations, DIMS]. out_grad: gl [N·locations,
    C] (flat, channels last) where STAGED_C = 0; else gl is out_grad itself, [N, C, locations]
    (flat, C = STAGED_C), whose rows of the cube's points are first copied to shared memory
    (consecutive units reading consecutive points: no transpose pass). SCATTER False: the grid
    gradient alone (acc and flags untouched; backward_gather.py sums the input gradient).
    A cube takes the block of PTS = UNITS / G points at cube_pos_x; with LOOP, blocks
    cube_pos_x, + cube_count_x, ... (a gated launch of fewer cubes than blocks,
    tuning.GATED_CUBES_PER_UNIT, so that one the gate skips costs little). gate, limit, WHEN:
    gate.py."""
    if gate_open(gate, limit, WHEN):   # (gate.py: the other form of the call was chosen)
        PTS = kd.cube_dim_x() // G
        parts = kd.shared(kd.f32, 3 * kd.cube_dim_x())
        rows = parts
        if STAGED_C > 0:
            rows = kd.shared(kd.f32, STAGED_C * PTS)
        if LOOP:
            for block in range(kd.cube_pos_x(), (total + PTS - 1) // PTS, kd.cube_count_x()):
                point_block(xl, grid, gl, grad_grid, acc, flags, max_bits, parts, rows, block * PTS, total, locations,
                            C, size_d, size_h, size_w, pad_mode, align, MODE, DIMS, HEADROOM, G, STAGED_C, SCATTER)
                kd.sync_cube()   # (parts and rows are filled again for the next block)
        else:
            point_block(xl, grid, gl, grad_grid, acc, flags, max_bits, parts, rows, kd.cube_pos_x() * PTS, total,
                        locations, C, size_d, size_h, size_w, pad_mode, align, MODE, DIMS, HEADROOM, G, STAGED_C,
                        SCATTER)


@kd.kernel
def finish_channels_last(acc: kd.Tensor[kd.i64, 1], flags: kd.Tensor[kd.u32, 1], max_bits: kd.Tensor[kd.u32, 1],
                         dx: kd.Tensor, C: kd.i32, S: kd.i32, HEADROOM: kd.Const[int]):
    """dx[n, c, s] = the fixed-point word acc[n, s, c] as a float (NaN/±inf where flagged, as
    fixed_point.finish): a cube converts a 32 × 32 tile of batch item cube_pos_z, reading rows
    of acc and writing rows of dx in order through shared memory."""
    T = kd.cube_dim_x()
    R = kd.cube_dim_y()
    tile = kd.shared(kd.f32, (T, T + 1))
    n, s0, c0, tx, ty = tile_corner(T, kd.cube_pos_z())
    unit = kd.exp2(kd.f64(-scale_exponent(max_bits[0], HEADROOM)))
    special = max_bits[1] != 0
    for i in kd.unroll(T // R):
        s = s0 + ty + i * R
        if s < S and c0 + tx < C:
            at = (n * S + s) * C + c0 + tx
            v = kd.f32(kd.f64(acc[at]) * unit)
            f = kd.u32(0)
            if special:
                f = flags[at]
            if f != 0:
                pos = (f & POS_INF_BIT) != 0
                neg = (f & NEG_INF_BIT) != 0
                v = kd.select((f & NAN_BIT) != 0 or (pos and neg), kd.nan, kd.select(pos, kd.inf, -kd.inf))
            tile[ty + i * R, tx] = v
    kd.sync_cube()
    for i in kd.unroll(T // R):
        c = c0 + ty + i * R
        if c < C and s0 + tx < S:
            dx[(n * C + c) * S + s0 + tx] = tile[tx, ty + i * R]
