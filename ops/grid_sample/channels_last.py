"""The grid_sample forward for inputs with many channels on GPUs: the input is first copied
to channels-last order ([N, C, S] -> [N, S, C], S the spatial size, a tiled transpose through
shared memory), so one tap of one grid point reads all its channels from consecutive memory.
In the [N, C, H, W] order every tap of every channel is a separate gather: a warp's load
touches as many memory lines as the warp has grid points far apart (32 for a random grid),
and the loads' line count, not the bytes, bounds the direct kernel (sample.sample_forward).
Here G units share a grid point, each loading L channels of a tap as one vector, and a
cube's samples pass through shared memory so its stores go out [N, C, points] in order.
Same taps (coords.py) and the same sums, in the same order, as sample.channel_sample. It
costs a temporary copy of the input; off by default (tuning.CHANNELS_LAST: on the H200 it
halved a random grid's time but was slower than the direct kernel on an affine grid)."""
from __future__ import annotations

import kerneldsl as kd

from ..normalization.device import vec_of
from .coords import axis_taps
from .fixed_point import publish_max, track_abs_max
from .gate import gate_open
from .sample import tap_layout

TILE_UNITS = (32, 8)   # the transpose's cube: 32 units along a row, 8 rows at a time


@kd.func
def tile_corner(T, z):
    """(batch item, first position, first channel, unit x, unit y) of a transpose cube's T × T
    tile: cube (x, y, ·) takes positions x·T.., channels y·T.. of batch item z."""
    return (kd.i64(z), kd.cube_pos_x() * T, kd.cube_pos_y() * T, kd.unit_pos_x(), kd.unit_pos_y())


@kd.func
def move_tile(x, xl, tile, z, C, S, V, MAX, m, bad, WRITE):
    """Half of to_channels_last's work on batch item z's T × T tile: x's rows (channels) into
    `tile`, with MAX (m, bad) of fixed_point.track_abs_max carried on over what it read; or,
    with WRITE, `tile` out to xl's rows (positions). Unit (tx, ty) moves V elements a line."""
    T = kd.cube_dim_x() * V
    R = kd.cube_dim_y()
    n, s0, c0, tx, ty = tile_corner(T, z)
    for i in kd.unroll(T // R):
        line = ty + i * R
        if WRITE:
            if s0 + line < S and c0 + tx * V < C:
                column = ()
                for j in kd.unroll(V):
                    column = column + (tile[tx * V + j, line],)
                at = (n * S + s0 + line) * C + c0 + tx * V
                if V == 1:
                    xl[at] = column[0]
                else:
                    kd.store_vec(xl, at, vec_of(column, V))
        elif c0 + line < C and s0 + tx * V < S:
            at = (n * C + c0 + line) * S + s0 + tx * V
            if V == 1:
                e = x[at]
                tile[line, tx] = e
                if MAX:
                    m, bad = track_abs_max(m, bad, e)
            else:
                v = kd.load_vec(x, at, V)
                for j in kd.unroll(V):
                    tile[line, tx * V + j] = v[j]
                    if MAX:
                        m, bad = track_abs_max(m, bad, v[j])
    return m, bad


@kd.kernel
def to_channels_last(x: kd.Tensor, xl: kd.Tensor, stats: kd.Tensor[kd.u32, 1], N: kd.i32, C: kd.i32, S: kd.i32,
                     V: kd.Const[int], MAX: kd.Const[bool], gate: kd.Tensor[kd.u32, 1], limit: kd.i32,
                     WHEN: kd.Const[int], LOOP: kd.Const[bool]):
    """xl[n, s, c] = x[n, c, s] (both flat): a cube moves a T × T tile (T = 32·V) of batch item
    cube_pos_z (with LOOP, of items cube_pos_z, + cube_count_z, ... below N) through shared
    memory, reading rows of x and writing rows of xl in order, V consecutive elements a unit
    access (S and C multiples of V). With MAX, it also does fixed_point.abs_max_bits' work on x
    (stats as its `out`, zeroed first): the backward's out_grad is read once, not twice;
    without, stats is not touched. gate, limit, WHEN: gate.py (the whole copy skipped where
    the other form of the call was chosen); LOOP: a gated launch of fewer cubes
    (tuning.GATED_CUBES_PER_UNIT), so that a skipped copy costs little."""
    if gate_open(gate, limit, WHEN):   # (gate.py: the other form of the call was chosen)
        m = kd.f32(0)
        bad = 0
        tile = kd.shared(x.dtype, (kd.cube_dim_x() * V, kd.cube_dim_x() * V + 1))
        if LOOP:
            for z in range(kd.cube_pos_z(), N, kd.cube_count_z()):
                m, bad = move_tile(x, xl, tile, z, C, S, V, MAX, m, bad, False)
                kd.sync_cube()
                move_tile(x, xl, tile, z, C, S, V, MAX, m, bad, True)
                kd.sync_cube()   # (the tile is filled again for the next batch item)
            if MAX:
                publish_max(stats, m, bad)
        else:
            m, bad = move_tile(x, xl, tile, kd.cube_pos_z(), C, S, V, MAX, m, bad, False)
            kd.sync_cube()
            if MAX:
                publish_max(stats, m, bad)
            move_tile(x, xl, tile, kd.cube_pos_z(), C, S, V, MAX, m, bad, True)


@kd.func
def flat_point_taps(grid, e, size_d, size_h, size_w, MODE, pad_mode, align, DIMS):
    """sample.point_taps for grid point e of a contiguous grid seen flat ([points, DIMS])."""
    tx = axis_taps(kd.f32(grid[kd.i64(e) * DIMS]), size_w, MODE, pad_mode, align)
    ty = axis_taps(kd.f32(grid[kd.i64(e) * DIMS + 1]), size_h, MODE, pad_mode, align)
    if DIMS == 3:
        tz = axis_taps(kd.f32(grid[kd.i64(e) * DIMS + 2]), size_d, MODE, pad_mode, align)
    else:
        tz = axis_taps(kd.f32(0.0), 1, "Off", pad_mode, align)
    return tz + ty + tx


@kd.kernel
def sample_channels_last(xl: kd.Tensor, grid: kd.Tensor, y: kd.Tensor, total: kd.i32, locations: kd.i32,
                         size_d: kd.i32, size_h: kd.i32, size_w: kd.i32, pad_mode: kd.i32, align: kd.i32,
                         MODE: kd.Const[str], DIMS: kd.Const[int], L: kd.Const[int], VECS: kd.Const[int],
                         G: kd.Const[int], gate: kd.Tensor[kd.u32, 1], limit: kd.i32, WHEN: kd.Const[int]):
    """y [N, C, locations] (flat) sampled from xl [N, S, C] (flat, C = G·VECS·L channels) at
    the points of grid [N·locations, DIMS] (flat): unit u of a cube takes channels (u % G)·K ..
    + K (K = VECS·L, VECS vectors of L a tap) of the cube's point u // G; the cube's 256 // G
    points then leave through shared memory, a channel's points in order. gate, limit, WHEN:
    gate.py (the whole kernel skipped where the device chose the other forward form)."""
    if gate_open(gate, limit, WHEN):
        K = VECS * L
        C = G * K
        UNITS = kd.cube_dim_x()
        PTS = UNITS // G
        stage = kd.shared(kd.f32, C * (PTS + 1))
        u = kd.unit_pos_x()
        chunk = u % G
        first = kd.cube_pos_x() * PTS
        e = kd.min(first + u // G, total - 1)
        t = flat_point_taps(grid, e, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
        TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
        base = kd.i64(e // locations) * size_d * size_h * size_w
        acc = ()
        for j in kd.unroll(K):
            acc = acc + (kd.f32(0),)
        for a in kd.unroll(TZ):
            for b in kd.unroll(TX):
                for k in kd.unroll(TX):
                    ok = t[Z + 3 * TZ + a] and t[Y + 3 * TX + b] and t[X + 3 * TX + k]
                    at = (base + (t[Z + a] * size_h + t[Y + b]) * size_w + t[X + k]) * C + chunk * K
                    w = t[Z + TZ + a] * t[Y + TX + b] * t[X + TX + k]
                    summed = ()
                    for h in kd.unroll(VECS):
                        v = kd.cast(kd.load_vec(xl, at + h * L, L), kd.f32)
                        for j in kd.unroll(L):
                            summed = summed + (acc[h * L + j] + w * kd.select(ok, v[j], 0.0),)
                    acc = summed
        for j in kd.unroll(K):
            stage[(chunk * K + j) * (PTS + 1) + u // G] = acc[j]
        kd.sync_cube()
        p = u % PTS                  # this unit's point in the store phase, the same for every i
        f = first + p
        m = f // locations
        at = (kd.i64(m) * C + u // PTS) * locations + f - m * locations
        for i in kd.unroll(K):       # C·PTS = K·UNITS samples: channels u // PTS + i·UNITS / PTS
            if f < total:
                y[at + kd.i64(i * (UNITS // PTS)) * locations] = stage[(u // PTS + i * (UNITS // PTS)) * (PTS + 1) + p]
