"""The grid_sample forward on [N, C, *S] inputs on GPUs, a unit a grid point and K channels
(a chunk): the direct kernel (sample.sample_forward) split over channels, with a plane
offset computed once a tap (flat 32-bit offsets, one 64-bit plane base a chunk) instead of
a 5-D address a load. A chunk's cubes come one after another for the same points, so
their grid reads repeat from cache.

How many loads a unit keeps in flight is chosen per plane (warp), on the device, from how
far the plane's taps lie from its first lane's (a broadcast an axis and a vote):
- close (a smooth grid: affine warps, resizes): all K channels' taps at once. The warp's
  loads then hit the same few lines, and more of them in flight hides the latency (H200,
  affine grid, [32, 8, 256²] f32: 0.070 ms against 0.082 one channel at a time);
- far apart (a random grid): one channel's taps at a time, as the direct kernel. Each load
  then touches a line per lane, and more of them at once only thrashes the cache (H200,
  random grid, 16 channels: 0.454 ms all at once against 0.408).
Chunks of fewer than tuning.FORWARD_AT_ONCE_CHANNELS always go one channel at a time: with
3 channels that was faster on either grid, and the vote alone cost 0.006 of 0.038 ms. A
choice per cube (a cube-wide box through shared memory and barriers) cost 14-45 % of an
affine call.

Where the channels-last forward serves (channels filling a memory line), this form is
launched beside it a channel at a time (tuning.FORWARD_CHOOSE_CHANNELS), both behind
gate.py's gate: the device runs this one where the grid is smooth, skipping the transpose.

Same taps (coords.py) and the same sums in the same order as sample.channel_sample either
way: its results bit for bit."""
from __future__ import annotations

import kerneldsl as kd

from .channels_last import flat_point_taps
from .gate import gate_open
from .sample import tap_layout


@kd.func
def plane_compact(t, Z, Y, X, DIMS, limit):
    """Whether every lane's first tap lies within a box of at most `limit` pixels from the
    first lane's (the box's sides from the lane's distance to it along each axis): one
    broadcast an axis and one vote. Every lane of the plane must reach it."""
    dy = kd.abs(t[Y] - kd.plane_broadcast(t[Y], 0))
    dx = kd.abs(t[X] - kd.plane_broadcast(t[X], 0))
    box = kd.f32(dy + 1) * kd.f32(dx + 1)
    if DIMS == 3:
        box = box * kd.f32(kd.abs(t[Z] - kd.plane_broadcast(t[Z], 0)) + 1)
    return kd.plane_all(box <= limit)


@kd.func
def chunk_sample(x, taps, j, plane):
    """The sample of the chunk's channel j (its plane j·plane past the chunk's base) from the
    taps' (inside, weight, offset) triples, in sample.channel_sample's order."""
    acc = kd.f32(0)
    for i in kd.unroll(len(taps) // 3):
        v = kd.select(taps[3 * i], kd.f32(x[taps[3 * i + 2] + j * plane]), 0.0)
        acc += taps[3 * i + 1] * v
    return acc


@kd.func
def chunk_points(x, grid, y, total, locations, channels, chunks, size_d, size_h, size_w, pad_mode, align, MODE, DIMS,
                 K, AREA):
    """sample_chunks' work for its cube (its docstring)."""
    q = kd.cube_pos_x()
    chunk = q % chunks
    e = (q // chunks) * kd.cube_dim_x() + kd.unit_pos_x()
    # units past the last point take it (their taps stay near the plane's)
    t = flat_point_taps(grid, kd.min(e, total - 1), size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
    TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
    # the same for every lane of the plane (F32 boxes: tap indices below 2^24 are exact;
    # larger ones only blur the choice)
    if AREA > 0:
        compact = plane_compact(t, Z, Y, X, DIMS, kd.f32(AREA * (kd.cube_dim_x() // kd.plane_count())))
    else:   # (compile time) every plane a channel at a time
        compact = False
    if e < total:
        n = e // locations
        plane = kd.i64(size_d * size_h) * size_w
        c0 = chunk * K
        base = (kd.i64(n) * channels + c0) * plane
        count = kd.min(K, channels - c0)   # channels of this chunk
        taps = ()   # (inside, weight, offset) a tap, in channel_sample's order
        for a in kd.unroll(TZ):
            for b in kd.unroll(TX):
                for k in kd.unroll(TX):
                    taps = taps + (t[Z + 3 * TZ + a] and t[Y + 3 * TX + b] and t[X + 3 * TX + k],
                                   t[Z + TZ + a] * t[Y + TX + b] * t[X + TX + k],
                                   base + (t[Z + a] * size_h + t[Y + b]) * size_w + t[X + k])
        out = (kd.i64(n) * channels + c0) * locations + e - n * locations
        if compact:   # every sum before any store: the K channels' loads are in flight together
            sums = ()
            for j in kd.unroll(K):   # channels past the chunk's end read its last one, unstored
                sums = sums + (chunk_sample(x, taps, kd.min(j, count - 1), plane),)
            for j in kd.unroll(K):
                if j < count:
                    y[out + j * kd.i64(locations)] = sums[j]
        else:
            for j in range(count):
                y[out + j * kd.i64(locations)] = chunk_sample(x, taps, j, plane)


@kd.kernel
def sample_chunks(x: kd.Tensor, grid: kd.Tensor, y: kd.Tensor, total: kd.i32, locations: kd.i32, channels: kd.i32,
                  chunks: kd.i32, size_d: kd.i32, size_h: kd.i32, size_w: kd.i32, pad_mode: kd.i32, align: kd.i32,
                  MODE: kd.Const[str], DIMS: kd.Const[int], K: kd.Const[int], AREA: kd.Const[int],
                  gate: kd.Tensor[kd.u32, 1], limit: kd.i32, WHEN: kd.Const[int]):
    """y [N, C, locations] (flat) sampled from x [N, C, S] (flat) at grid [N·locations, DIMS]
    (flat): cube q takes chunk q % chunks (channels K·chunk .. + K, those past C skipped) of
    the cube_dim_x grid points of block q // chunks, a unit a point; all K channels' loads at
    once where a plane's taps lie within AREA pixels a lane of its first lane's (plane_compact),
    else a channel at a time (always where AREA is 0). gate, limit, WHEN: gate.py (the whole
    kernel skipped where the device chose the other forward form)."""
    if gate_open(gate, limit, WHEN):
        chunk_points(x, grid, y, total, locations, channels, chunks, size_d, size_h, size_w, pad_mode, align,
                     MODE, DIMS, K, AREA)
