"""The GPU forward for inputs with many channels, chosen on the device from the grid: a
random grid's taps are far apart, and the channels-last form (channels_last.py: a transposed
copy of the input, a tap's channels in one line) wins; a smooth grid's (affine warps,
resizes) lie close, and sampling the input as it is in chunks of channels (chunks.py) wins,
with no copy. Sizes cannot tell them apart (both map as many points to as many pixels), and
reading the grid on the host would wait for the device, so three launches decide there:

1. `probe_grid`, one cube: planes of consecutive grid points spread evenly over the grid
   each ask chunks.plane_compact whether their taps lie close; smooth[0] = 1 where at least
   half of them do;
2. channels_last.to_channels_last_unless: the transpose, skipped (every cube returns at
   once) where smooth[0] is set;
3. `sample_chosen`: chunks.sample_chunk_cube where smooth[0] is set, else
   channels_last.sample_last_cube, over as many cubes as the larger form needs.

Either way the samples are sample.channel_sample's bit for bit, so the choice changes the
time only."""
from __future__ import annotations

import kerneldsl as kd

from .channels_last import flat_point_taps, sample_last_cube
from .chunks import plane_compact, sample_chunk_cube
from .sample import tap_layout

PROBE_UNITS = 256   # the probe's one cube
PROBE_ROUNDS = 8    # blocks of consecutive points each of its planes looks at


@kd.kernel
def probe_grid(grid: kd.Tensor, smooth: kd.Tensor, total: kd.i32, size_d: kd.i32, size_h: kd.i32, size_w: kd.i32,
               pad_mode: kd.i32, align: kd.i32, MODE: kd.Const[str], DIMS: kd.Const[int], AREA: kd.Const[int],
               ROUNDS: kd.Const[int]):
    """smooth[0] = 1 where at least half of the sampled blocks of consecutive points of grid
    [total, DIMS] (flat) have their taps within AREA pixels a lane of their first point's
    (chunks.plane_compact), else 0. One cube: plane p's round r looks at block r·planes + p
    of planes·ROUNDS blocks spread evenly from the first point to the last."""
    lanes = kd.cube_dim_x() // kd.plane_count()
    blocks = kd.plane_count() * ROUNDS
    spread = kd.i64(kd.max(total - lanes, 0))
    compact = kd.f32(0)
    for r in kd.unroll(ROUNDS):
        b = r * kd.plane_count() + kd.plane_pos()
        e = kd.min(spread * b // kd.max(blocks - 1, 1) + kd.lane_pos(), kd.i64(total - 1))
        t = flat_point_taps(grid, e, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
        TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
        if plane_compact(t, Z, Y, X, DIMS, kd.f32(AREA * lanes)):
            compact += 1.0
    planes = kd.cube_sum(compact) / kd.f32(lanes)   # every lane of a plane holds its count
    if kd.unit_pos_x() == 0:
        smooth[0] = kd.select(planes * 2.0 >= kd.f32(blocks), 1, 0)


@kd.kernel
def sample_chosen(x: kd.Tensor, xl: kd.Tensor, grid: kd.Tensor, y: kd.Tensor, smooth: kd.Tensor, total: kd.i32,
                  locations: kd.i32, channels: kd.i32, chunks: kd.i32, chunk_cubes: kd.i32, last_cubes: kd.i32,
                  size_d: kd.i32, size_h: kd.i32, size_w: kd.i32, pad_mode: kd.i32, align: kd.i32,
                  MODE: kd.Const[str], DIMS: kd.Const[int], K: kd.Const[int], AREA: kd.Const[int], L: kd.Const[int],
                  VECS: kd.Const[int], G: kd.Const[int]):
    """y sampled from x [N, C, S] in chunks of K channels (chunk_cubes cubes) where smooth[0]
    is set, else from its channels-last copy xl (last_cubes cubes); cubes past the chosen
    form's count return at once."""
    q = kd.cube_pos_x()
    if smooth[0] != 0:   # the same for every unit
        if q < chunk_cubes:
            sample_chunk_cube(q, x, grid, y, total, locations, channels, chunks, size_d, size_h, size_w, pad_mode,
                              align, MODE, DIMS, K, AREA)
    elif q < last_cubes:
        sample_last_cube(q, xl, grid, y, total, locations, size_d, size_h, size_w, pad_mode, align, MODE, DIMS, L,
                         VECS, G)
