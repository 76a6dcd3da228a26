"""Launch plans of rudnn.grid_sample: the cube size, the 5-D views every kernel works on,
and the fixed-point headroom of the input-gradient scatter."""
from __future__ import annotations

import math
from dataclasses import dataclass

import kerneldsl as kd

from .options import GridSampleMode

UNITS = 256  # units per cube: one grid point (or one element) per unit
MAX_CUBES = 1024  # cubes of the abs-max pass (each strides over the tensor, then one atomic)
TAP_WEIGHT_BOUND = {GridSampleMode.Bilinear: 1.0, GridSampleMode.Nearest: 1.0, GridSampleMode.Bicubic: 2.0}


# the channels-last forward (channels_last.py) where a grid point's channels fill at least
# this many bytes: one memory line a tap (a warp's load then touches a line per grid point,
# not one per point and channel)
CHANNELS_LAST_MIN_BYTES = 128
# on by default since session 20: H200, [32, 64, 256²] bilinear zeros, device time alone
# (`BENCH_TIMING=queued python -m benchmarks.grid_variants`), with two 16-byte vectors a tap
# and a transpose of 4 elements a unit access (its copy of the f32 input 0.296 ms, 3.6 TB/s):
# random grid f32 0.674 ms against the direct kernel's 1.577 (torch 1.707: 2.53× / 1.08×);
# affine grid f32 0.611 against 0.767 (torch 0.538: 0.88× / 0.70×), bf16 0.416 against 0.522
# (torch 0.447: 1.08× / 0.86×). The first form (single elements a transpose access, one
# vector a tap) lost on the affine grid: 0.680 against 0.546 ms (bf16).
CHANNELS_LAST = True
GRID_Z = 65535   # batch items of the transpose (one a grid z step)
CHANNELS_LAST_VECTORS = 2   # vectors a unit of the channels-last forward loads a tap (where they divide)
TRANSPOSE_LANES = 4         # elements a unit access of the transpose (where they divide the sizes)


def channels_last_lanes(caps, channels: int, batch: int, itemsize: int) -> int:
    """Channels a unit of the channels-last forward loads as one vector (L), or 0 where the
    direct kernel serves: while CHANNELS_LAST is off, on devices whose units are SIMD lanes
    (no gathers across units to save), channels filling fewer than CHANNELS_LAST_MIN_BYTES,
    or no L (dividing 16 bytes and the channels) with G = channels / L dividing UNITS."""
    if (not CHANNELS_LAST or caps.units_are_simd_lanes or channels * itemsize < CHANNELS_LAST_MIN_BYTES
            or batch > GRID_Z):
        return 0
    lanes = 16 // itemsize
    while lanes >= 2:
        if channels % lanes == 0 and UNITS % (channels // lanes) == 0:
            return lanes
        lanes //= 2
    return 0


def channels_last_vectors(channels: int, lanes: int) -> int:
    """Vectors of `lanes` channels a unit of the channels-last forward loads a tap:
    CHANNELS_LAST_VECTORS where the channels then split into a group of units dividing UNITS, else 1."""
    k = CHANNELS_LAST_VECTORS * lanes
    return CHANNELS_LAST_VECTORS if channels % k == 0 and UNITS % (channels // k) == 0 else 1


def transpose_lanes(channels: int, spatial: int, itemsize: int) -> int:
    """Elements a unit access of the channels-last transpose: TRANSPOSE_LANES (or fewer)
    where they divide both the channels and the spatial size, and at most 8 bytes (its
    tile of (32·V)² elements then fits the 48 KiB of static shared memory)."""
    v = min(TRANSPOSE_LANES, 8 // itemsize)
    while v > 1 and (channels % v or spatial % v):
        v //= 2
    return v


# the channels-last backward (backward_last.py): G units a grid point (BACKWARD_GROUP, or the
# largest power of two below it dividing the channels), where the device adds i64 words
# atomically. H200, same cases as above: G = 8 was the best of 8/16/32 (and of the forms reading
# out_grad through shared memory): random grid f32 4.15 ms against the direct kernel's 12.76
# (torch 6.13: 1.48× / 0.48×), affine f32 3.80 against 6.28 (torch 2.76: 0.72× / 0.44×), affine
# bf16 3.14 against 5.76 (torch 4.46: 1.42× / 0.77×).
BACKWARD_CHANNELS_LAST = True
BACKWARD_GROUP = 8
# out_grad read by the channels-last backward from its own layout through shared memory (a
# cube's rows of points), instead of a channels-last copy, for at most this many channels
# (the kernel is then specialised per channel count); 0: always the copy
BACKWARD_STAGED_CHANNELS = 0
BACKWARD_STAGED_BYTES = 32 * 1024   # its F32 rows: a static shared array


def backward_staged_channels(channels: int, group: int) -> int:
    """The channel count the channels-last backward is specialised for when it reads out_grad
    through shared memory (BACKWARD_STAGED_CHANNELS, its rows within BACKWARD_STAGED_BYTES),
    else 0 (out_grad copied channels-last)."""
    fits = channels * (UNITS // group) * 4 <= BACKWARD_STAGED_BYTES
    return channels if channels <= BACKWARD_STAGED_CHANNELS and fits else 0


def backward_group(caps, channels: int, batch: int) -> int:
    """Units a grid point of the channels-last backward, or 0 where sample.sample_backward
    serves: while BACKWARD_CHANNELS_LAST is off, where units are SIMD lanes (lanes.py),
    without a native i64 atomic add, or more batch items than the transposes' grid."""
    if (not BACKWARD_CHANNELS_LAST or caps.units_are_simd_lanes or kd.i64 not in caps.atomics.get("add", ())
            or batch > GRID_Z):
        return 0
    g = min(BACKWARD_GROUP, UNITS)
    while g > 1 and channels % g:
        g //= 2
    return g


# the direct forward (sample.sample_forward): a cube takes a tile of UNITS / FORWARD_TILE_W rows
# of FORWARD_TILE_W grid points (0: UNITS consecutive points). On a smooth (affine) grid a
# warp's taps then fall in a few short rows of the input rather than along a long slanted
# line: fewer memory sectors a load. Not measured on a GPU yet (benchmarks/grid_variants.py).
FORWARD_TILE_W = 0


# the direct forward split over channels (chunks.py), on by default: at most FORWARD_CHANNELS
# channels a unit (0: sample.sample_forward, a unit all channels); a plane (warp) whose taps lie
# within a box of FORWARD_AREA pixels a lane of its first lane's loads all its channels' taps at
# once, any other one channel at a time. H200, [32, 16, 256²] f32, affine grid: 0.127 ms in
# chunks of 16, 0.138 of 8, 0.193 of 4 (sample_forward 0.219, torch 0.152); random grid 0.403 /
# 0.408 / 0.408 (sample_forward 0.394, torch 0.413). The channels-last form, where it applies,
# comes first: on the random grid of [32, 64, 256²] it took 0.672 ms against 1.628 in chunks.
FORWARD_CHANNELS = 16
FORWARD_AREA = 32
# chunks of fewer channels load them one at a time everywhere (H200, affine grid, 3 channels:
# 0.038 ms one at a time against 0.042 at once, f32; 8 channels: 0.082 against 0.070)
FORWARD_AT_ONCE_CHANNELS = 8


def forward_area(chunk: int) -> int:
    """chunks.sample_chunks' AREA for chunks of `chunk` channels: FORWARD_AREA, or 0 (a
    channel at a time) below FORWARD_AT_ONCE_CHANNELS."""
    return FORWARD_AREA if chunk >= FORWARD_AT_ONCE_CHANNELS else 0


def forward_chunk(channels: int, plane: int) -> int:
    """Channels a unit of chunks.sample_chunks (the fewest chunks of at most FORWARD_CHANNELS,
    as even as can be), or 0 where sample.sample_forward serves: while FORWARD_CHANNELS is off,
    or planes of 2^31 elements or more (its tap offsets are 32-bit). (Devices whose units are
    SIMD lanes take lanes.py before either.)"""
    if FORWARD_CHANNELS <= 0 or plane >= 2 ** 31:
        return 0
    chunks = -(-channels // FORWARD_CHANNELS)
    return -(-channels // chunks)


# where the channels-last forward serves (channels_last_lanes), the device may choose instead
# chunks.py's form, a channel at a time in chunks of at most FORWARD_CHOOSE_CHANNELS (0: never),
# from the grid's smoothness (gate.py, as the gathered backward): on a smooth grid the chunks
# read [N, C, *S] in whole lines and skip the transpose; on a random one the transpose pays. H100
# [32, 64, 256²], session 38, device ms, chunks K8 A0 / channels-last / torch: f32 affine 0.514 /
# 0.756 / 0.594, bf16 affine 0.404 / 0.455 / 0.483; f32 random 2.009 / 0.818 / 2.023. The choice
# itself, H100, session 47 (`grid_variants --only fwd --forms "last V2,choose K8"`, device ms,
# channels-last alone / choose K8 / torch): f32 affine 0.757 / 0.595 / 0.593, f32 random 0.819 /
# 0.880 / 2.024, bf16 affine 0.454 / 0.453 / 0.483, bf16 random 0.486 / 0.544 / 1.754: smooth
# grids gain up to 21%, random ones pay the count and the skipped launches (7-12%, still 2.3-3.2x
# torch). With the gated transpose looping (GATED_CUBES_PER_UNIT 8) affine f32 took 0.577 and
# random 0.928: not taken. H200, session 48, same run, choose K4 / K8 / K16 (channels-last
# alone, chunks K8 A0 alone, torch): f32 affine 0.597 / 0.526 / 0.500 (0.614, 0.447, 0.538), f32
# random 0.780 / 0.740 / 0.719 (0.676, 1.700, 1.706); bf16 affine 0.521 / 0.429 / 0.400 (0.416,
# 0.379, 0.447), bf16 random 0.531 / 0.492 / 0.471 (0.432, 1.589, 1.502): 16 on every case (the
# gate's count and skipped launches still cost 0.02-0.05 ms against the better form alone)
FORWARD_CHOOSE_CHANNELS = 16


def forward_choose_chunk(channels: int, plane: int) -> int:
    """Channels a unit of the chunks form the device may choose beside the channels-last
    forward (FORWARD_CHOOSE_CHANNELS), or 0 for the channels-last form alone."""
    if FORWARD_CHOOSE_CHANNELS <= 0 or plane >= 2 ** 31:
        return 0
    chunks = -(-channels // FORWARD_CHOOSE_CHANNELS)
    return -(-channels // chunks)


def forward_tiles(out_spatial: tuple, batch_planes: int) -> tuple:
    """(TW, cubes) of the direct forward for output planes of `out_spatial` (Ho, Wo),
    `batch_planes` = N·Do of them: FORWARD_TILE_W where set (and below UNITS), else flat."""
    tw = FORWARD_TILE_W
    if tw <= 0 or tw >= UNITS or UNITS % tw:
        return 0, cubes(batch_planes * out_spatial[0] * out_spatial[1])
    th = UNITS // tw
    return tw, batch_planes * -(-out_spatial[0] // th) * -(-out_spatial[1] // tw)


# the staged 2-D forward (staged.py): a cube a tile of UNITS / STAGED_TILE_W rows of
# STAGED_TILE_W grid points; where its taps' input box holds at most STAGED_AREA pixels, that
# box is copied to shared memory, STAGED_CHANNELS channels at a time (else the cube gathers
# as the direct kernel). Not measured on a GPU yet: off (benchmarks/grid_variants.py).
STAGED_FORWARD = False
STAGED_TILE_W = 16
STAGED_CHANNELS = 4
STAGED_AREA = 1024
STAGED_MAX_BYTES = 32 * 1024   # the stage is a static shared array (48 KiB at most on CUDA)


def staged_plan(caps, dims: int, in_spatial: tuple, itemsize: int) -> tuple | None:
    """(TW, CH, AREA) of the staged forward, or None where the direct kernel serves: while
    STAGED_FORWARD is off, where units are SIMD lanes, for 3-D calls, inputs of 2^24 pixels
    a side or more (the box's bounds pass through F32), or a stage above STAGED_MAX_BYTES or
    half the shared memory."""
    tw, ch, area = STAGED_TILE_W, STAGED_CHANNELS, STAGED_AREA
    if (not STAGED_FORWARD or caps.units_are_simd_lanes or dims != 2 or max(in_spatial) >= 2 ** 24
            or tw <= 0 or UNITS % tw or ch * area * itemsize > min(STAGED_MAX_BYTES, caps.max_shared_bytes // 2)):
        return None
    return tw, ch, area


def cubes(total: int) -> int:
    return -(-total // UNITS)


def as_5d(t: kd.Tensor, dims: int, axis: int) -> kd.Tensor:
    """A 2-D call's tensor with a depth axis of 1 inserted at `axis` (3-D calls unchanged)."""
    if dims == 3:
        return t
    return t.reshape(*t.shape[:axis], 1, *t.shape[axis:])


def headroom(locations: int, mode: GridSampleMode) -> int:
    """log2 of a bound on the summed |weight| one pixel can receive from one plane's grid
    points (each point's taps weigh at most TAP_WEIGHT_BOUND together), plus one bit."""
    return max(1, math.ceil(math.log2(max(1.0, locations * TAP_WEIGHT_BOUND[mode])))) + 1


# lanes.py (devices whose units are SIMD lanes): a cube takes at most LANE_UNITS consecutive
# grid points of a batch item (all of them where they fit, else the largest divisor of the
# item's points of at least LANE_MIN_UNITS, else LANE_UNITS with the item's last cube masked).
# Zen 5, f32 [4, 16, 128²] random grid, whole calls (no replay), best ms of three rounds for
# 128 / 256 / 512 / 1024: forward 1.14-1.45 / 1.11-1.42 / 1.10-1.37 / 1.45-1.71, backward
# 2.38-3.48 / 2.35-2.72 / 2.46-3.32 / 2.96-4.20 (load 1; at load 3 the same order).
LANE_UNITS = 256
LANE_MIN_UNITS = 64
TAPS = {GridSampleMode.Bilinear: 2, GridSampleMode.Nearest: 1, GridSampleMode.Bicubic: 4}


# planes a cube of lanes' input-gradient scatter, at most (a divisor of the channels), and
# its units (they zero and store the planes; at most the device's cube size). Zen 5, f32
# [4, 16, 128²], the scatter alone, best ms of 1 / 2 / 4 planes a cube: 2.80-2.86 /
# 1.86-2.01 / 1.69-1.80 (the unit's read-modify-writes of different planes overlap; a
# point's taps are read once); 1024 or 2048 units: the same.
SCATTER_PLANES = 4
SCATTER_UNITS = 1024
# channels in whole groups of 8 take lanes_scatter.scatter_planes instead (a one-unit cube 8
# planes interleaved in a scratch: a tap's 8 planes one vector read-modify-write); measured in
# benchmarks/RESULTS.md, session 52
VECTOR_SCATTER = True


@dataclass(frozen=True)
class LanePlan:
    """lanes.py's launch: `bx` points a cube, `exact` where the cubes tile a batch item's
    points, `taps` a grid point, `planes` a cube of the input gradient's scatter and
    `scatter_units` its units, `shared` where the planes' F32 copies fit half the shared
    memory (else they live in a scratch tensor); `vector_planes` where the scatter is
    lanes_scatter.scatter_planes instead (8 planes a one-unit cube)."""

    bx: int
    exact: bool
    taps: int
    planes: int
    scatter_units: int
    shared: bool
    vector_planes: bool = False


def lane_plan(caps, mode: GridSampleMode, dims: int, in_spatial: int, points: int, channels: int) -> LanePlan | None:
    """lanes.py's plan for `points` grid points a batch item over planes of `in_spatial` pixels,
    or None where units are not SIMD lanes (GPUs keep sample.py: a unit a flat grid point)
    or a plane's offsets would not fit 32 bits."""
    if not caps.units_are_simd_lanes or in_spatial >= 2 ** 31 - 1:
        return None
    if points <= LANE_UNITS:
        bx = points
    else:
        bx = next((b for b in range(LANE_UNITS, LANE_MIN_UNITS - 1, -1) if points % b == 0), LANE_UNITS)
    planes = SCATTER_PLANES
    while channels % planes:
        planes //= 2
    shared = planes * (in_spatial + 1) * 4 <= caps.max_shared_bytes // 2
    return LanePlan(bx, points % bx == 0, TAPS[mode] ** dims, planes, min(SCATTER_UNITS, caps.max_cube_units),
                    shared, VECTOR_SCATTER and channels % 8 == 0)


# lanes_last.py (devices whose units are SIMD lanes, session 21): the input copied to
# channels-last F32 rows, a cube's units channels (vector loads of a tap's channels instead of
# gathers). LAST_UNITS channels a vector (the cube's units: 16 lets LLVM vectorise the unit
# loop, 8 was unrolled to scalar code), LAST_VECTORS such vectors a cube at most (where they
# divide the channels), LAST_POINTS grid points a cube (a multiple of LAST_UNITS). Channels
# that LAST_UNITS does not divide (1, 3, 17...) keep lanes.py. 2-core Zen box shared with two
# other helpers (load 2.7-3.4), process CPU ms (every thread's), median of 5 rounds of best-of-5,
# `python -m benchmarks.grid_lanes_cpu`:
# [4, 16, 128²] forward f32 random 3.14 against lanes.py's 5.21, affine 2.88 against 4.08;
# bf16 random 2.83 against 3.54, affine 2.60 against 2.69. [2, 64, 128²] f32 forward, 1 / 2 / 4
# vectors a cube: random 6.36 / 8.98 / 10.38 (lanes.py 9.5-10.1), affine 5.98 / 8.19 / 10.00
# (lanes.py 8.2-8.4): more vectors a cube lose (the unit loop no longer vectorises well).
# Where lanes.py serves the call too, lane_forms.py times both for large calls (an Intel
# core's fast gathers made lanes.py the faster F32 form there, session 57).
LANE_LAST = True
# the backward too (input and out_grad copied to rows, grid_grad_last, scatter_last): off by
# default. Same runs, process CPU ms, [4, 16, 128²] f32: random grid 10.9 against lanes.py's
# 12.3, affine 10.1 against 7.8; [2, 64, 128²] (1 vector): random 18.4 against 21.9, affine
# 17.8 against 16.8. Kernels alone ([4, 16, 128²]): grid gradient 5.0-7.6 random / 3.9-4.6
# affine against lanes.py's 8.7-10.4 / 4.1-4.5, scatter 3.3-4.1 / 4.1 against 4.8-6.3 /
# 3.9-4.2; the two copies to rows (1.3-1.9 each) lose the affine grid's case.
LANE_LAST_BACKWARD = False
LAST_UNITS = 16
LAST_VECTORS = 1
LAST_POINTS = 256
# element sizes it serves (the rows are F32 whatever the dtype)
LAST_ITEMSIZES = (2, 4)


# lanes_last's copy to channels-last rows (to_rows): a one-unit cube ROWS_SPAN positions, 8
# channels × 8 positions a step transposed in vectors where rows and planes start at multiples of
# 8 elements (ROWS_BLOCK channels a step; rows_copy). It replaced a unit a channel (a gather a
# position; channel planes a multiple of 4 KiB apart also fell into one L1 set) and, for such
# planes, a V×V tile in shared memory. The copies alone, 2-core Zen 4, ms, best of 15 in one
# process, unit a channel / tile / this (SB 64 / 256): [4, 16, 128²] f32 0.43 / 0.28 / 0.15 /
# 0.16, bf16 0.83 / 0.54 / 0.28 / 0.16; [2, 64, 125²] (element by element here) f32 0.38 / 0.52 /
# 0.30 / 0.26, bf16 0.32 / 0.50 / 0.25 / 0.23; [8, 32, 56²] f32 0.19 / 0.25 / 0.13 / 0.12;
# [4, 16, 256²] f32 1.57 / 1.09 / 0.62 / 0.60; [32, 64, 64²] (33 MB) f32 3.38 / 2.90 / 3.24 / 2.95.
ROWS_SPAN = 256
ROWS_BLOCK = 8


def rows_copy(channels: int, spatial: int, offset: int, span: int) -> tuple:
    """(CB, VEC) of to_rows for `channels` channel planes of `spatial` elements, the input's
    first element at `offset` elements, `span` positions a cube: CB the most channels (8, 4,
    2 or 1) a step that divide the channels; VEC where CB is 8 and planes, rows and cubes
    start at multiples of 8 (its whole vectors then lie aligned, as GPUs need: the forced
    tests run it everywhere)."""
    cb = ROWS_BLOCK
    while channels % cb:
        cb //= 2
    return cb, cb == 8 and spatial % 8 == 0 and offset % 8 == 0 and span % 8 == 0


@dataclass(frozen=True)
class LastPlan:
    """lanes_last.py's launch: `units` channels a vector (the cube's units), `vectors` such
    vectors a cube (blocks = channels / (units·vectors) cubes along y), `points` grid points
    a cube of the sampling kernels, `span` positions a cube of the copy to rows."""

    units: int
    vectors: int
    blocks: int
    points: int
    span: int


def lane_last_plan(caps, channels: int, batch: int, in_spatial: int, itemsize: int,
                   backward: bool = False) -> LastPlan | None:
    """lanes_last.py's plan, or None (lanes.py or the GPU kernels): while LANE_LAST (for the
    backward: LANE_LAST_BACKWARD) is off,
    where units are not SIMD lanes, for element sizes not in LAST_ITEMSIZES, where LAST_UNITS
    does not divide the channels, the batch exceeds the grid's z axis or the channels-last
    rows (N·S + 1) would not fit an I32."""
    if (not (LANE_LAST_BACKWARD if backward else LANE_LAST) or not caps.units_are_simd_lanes or itemsize not in LAST_ITEMSIZES or channels % LAST_UNITS
            or batch > GRID_Z
            or batch * in_spatial + 1 >= 2 ** 31 or LAST_UNITS > caps.max_cube_units):
        return None
    h = LAST_VECTORS
    while channels % (h * LAST_UNITS):
        h -= 1
    return LastPlan(LAST_UNITS, h, channels // (h * LAST_UNITS), LAST_POINTS, ROWS_SPAN)


# the gathered input gradient (backward_gather.py, issue 19): grid points bucketed by the cell
# their taps start from, then one unit a pixel and BACKWARD_GATHER_CHANNELS channels (K, or
# the largest power of two below dividing the channels) walks the lists of the cells reaching
# it and sums the fixed-point contributions in registers: no atomic a contribution (the
# channels-last backward's ~537M i64 atomics for [32, 64, 256²]), dx bit for bit the same.
# Bilinear and nearest only (bicubic keeps the scatter). The grid gradient is still
# backward_last's per-point sum (its scatter off), so the same copies of input and out_grad.
# Byte estimate for [32, 64, 256²] f32 (H200, ~4 TB/s): copies ~0.6 ms, grid gradient
# 0.3-0.7 ms, gather 0.3-0.7 ms, bucketing ~0.1 ms: ~1.3-2.2 ms against 3.8-4.2 ms measured
# for the scatter. On by default; timed on the H200 in session 21 (benchmarks/RESULTS.md):
# ahead of the scatter except the random grid in BF16 (3.58 against 3.29 ms).
BACKWARD_GATHER = True
# channels a unit sums: on the H200 ([32, 64, 256²], random and affine grids) 8 beat 4 and 16
# in F32 and BF16 alike (BF16 8 / 16: affine 2.62 / 2.74 ms, random 3.58 / 4.07; F32 8 / 16:
# 3.00 / 3.17, 4.02 / 4.45); BACKWARD_GATHER_BYTES, where set, gives bytes instead
BACKWARD_GATHER_CHANNELS = 8
BACKWARD_GATHER_BYTES = None
BACKWARD_GATHER_LAST = True   # read out_grad's channels-last copy (else [N, C, points] itself)
BACKWARD_GATHER_VECTOR = 16   # bytes a load of that copy (1 element: scalar loads)
# channels whose 3 NaN/±inf flag bits share a u32 register (1..10). With
# BACKWARD_GATHER_FINITE_PATH, 10 was the faster on the H200 (figures there); sm_90a then used
# 58 registers and spilled nothing in 2-D f32 and bf16, 12 bytes in 3-D (1: 64 registers and
# an 8-byte spill in 2-D f32)
BACKWARD_GATHER_FLAGS = 10
# the grid gradient by sample.sample_backward (a unit a point, all channels, [N, C, *S] reads;
# its scatter off) and no channels-last copies: smooth grids read coalesced without them
BACKWARD_GATHER_GRID_DIRECT = False
# the gather's walk without NaN/±inf flags where abs_max_bits found no such out_grad value.
# H200 [32, 64, 256²] backward, device ms (flags 1 / this with flags 1 / this with flags 10):
# f32 random 3.50 / 3.14 / 3.11, affine 2.60 / 2.46 / 2.43; bf16 random 3.10 / 2.74 / 2.71,
# affine 2.26 / 2.04 / 2.02 (torch 6.13, 2.75, 6.20, 4.46)
BACKWARD_GATHER_FINITE_PATH = True
# the point lists hold records (backward_gather.record_words: a bilinear point's index and its
# weights, a nearest point's index), so the walk neither reloads the grid nor recomputes taps.
# H100 [32, 64, 256²] backward, device ms, records / indices: f32 random 2.90 / 3.33, affine
# 2.45 / 2.61; bf16 random 2.36 / 2.79, affine 1.90 / 2.09 (with records, K = 16 channels:
# 3.02, 2.53, 2.46, 1.94; K = 4: 3.32, 2.94, 2.73, 2.43: 8 stays)
BACKWARD_GATHER_RECORDS = True
# the lists of a pixel's cells walked as one (a loop over their total, this many entries an
# iteration, their loads issued together), not a loop a cell (0): a warp's units wait for the
# longest total, not for the longest list of each cell in turn. H100 [32, 64, 256²] backward,
# device ms, FLAT 2 / 1 / 4 / 0: f32 random 2.61 / 2.65 / 3.06 / 2.89, affine 2.41 / 2.39 / 2.82
# / 2.45; bf16 random 1.99 / 2.03 / 2.07 / 2.35, affine 1.80 / 1.81 / 1.91 / 1.88
BACKWARD_GATHER_FLAT = 2
# both forms of the gathered backward launched, the device choosing (gate.py): without copies
# (as BACKWARD_GATHER_GRID_DIRECT) where the grid is smooth, with them where it is not; their
# walks in one gather launch (TWO), max |out_grad| found by sample_backward as it reads it
# (MAX). H100 [32, 64, 256²] backward, device ms, session 37, choose / copies / no copies /
# torch: f32 random 2.665 / 2.616 / 4.944 / 7.157, affine 1.652 / 2.408 / 1.551 / 3.218; bf16
# random 2.033 / 1.988 / 4.597 / 7.236, affine 1.458 / 1.813 / 1.374 / 5.143. Its cost where
# the copies win (random): 2% (count_rough 0.016 ms, the gate); what it saves where the grid
# is smooth: 31% (f32) and 20% (bf16). Profile, affine f32: gather 0.819, sample_backward
# 0.649, the gated-off copies 0.041 and backward_last 0.040, count_rough 0.016
BACKWARD_GATHER_CHOOSE = True
# channels a step of the grid gradient's channel loop in sample.sample_backward, the smooth
# form's kernel (a unit a point): their out_grad and tap loads issued together, their terms
# added in the same order (the same bits). H100, [32, 64, 256²], the gathered backward with
# choose (session 53, `grid_variants --only bwd --forms "grid gradient CU"`, device ms, CU 1 / 2
# / 3 / 4 / 8, torch): f32 affine 1.648 / 1.489 / 1.691 / 1.713 / 2.533 (3.217), bf16 affine
# 1.449 / 1.308 / 1.660 / 1.545 / 2.308 (5.161); random grids take the copies' form, unchanged
# (f32 2.657, bf16 2.026). With 3 or more the kernel slows (more registers a unit).
GRID_GRAD_CHANNELS = 2
# cubes a compute unit of a gated launch (gate.py) of the channels-last copies and backward:
# each cube loops over the blocks (or batch items) a launch of a cube each would give (their
# LOOP constant), so a launch the gate skips costs about a thousand cubes, not 65,536; 0: a cube
# a block, as the ungated launches. H100 [32, 64, 256²] backward, device ms, session 38, choose
# with 8 / 32 / 0 (copies, torch): f32 affine 1.574 / 1.581 / 1.649 (2.403, 3.218), random
# 2.912 / 2.992 / 2.661 (2.610, 7.163); bf16 affine 1.401 / 1.406 / 1.457, random 2.356 / 2.324
# / 2.034 (1.988, 7.250); 2 and 4 cubes, random f32 3.128 / 2.853. On smooth grids it saves the
# skipped launches (0.081 ms, f32: 5%); where the looping kernels run (rough grids) they are
# slower than a cube a block at every count (f32: the two copies 0.900 against 0.734 ms, the
# backward 0.892 against 0.813; 7-17% of the call), and two tiles or arrays in turn (no barrier
# at the end of a round) were slower still (the backward 1.032 ms). With the copy's halves in one
# move_tile func, 8: f32 random 2.845 (0: 2.669), affine 1.576 (1.653); bf16 2.189 (2.041), 1.402
# (1.457). Off: it loses more on rough grids (7%) than it saves on smooth ones (4-5%). H200,
# session 55, the backward with GRID_GRAD_CHANNELS 2, 0 / 8 (torch): f32 random 2.441 / 2.552
# (6.126), affine 1.365 / 1.287 (2.753); bf16 random 1.951 / 2.112 (6.206), affine 1.281 / 1.223
# (4.445): the same trade, still off
GATED_CUBES_PER_UNIT = 0


def gated_cubes(caps, blocks: int, gated: bool) -> int:
    """Cubes of a launch of `blocks` blocks that loops over them: all of them ungated, at most
    GATED_CUBES_PER_UNIT a compute unit where the launch is gated."""
    if not gated or GATED_CUBES_PER_UNIT <= 0:
        return blocks
    return max(1, min(blocks, GATED_CUBES_PER_UNIT * max(caps.compute_units, 1)))


def backward_gather_vector(k: int, itemsize: int) -> int:
    """Channels a vector load of the gather's channels-last out_grad: BACKWARD_GATHER_VECTOR
    bytes (at most K; powers of two, so it divides K), or 1."""
    return max(1, min(k, BACKWARD_GATHER_VECTOR // itemsize))


def gather_cells(mode: GridSampleMode, dims: int, in_spatial: tuple) -> int:
    """Cells a batch item of backward_gather's buckets, for input spatial axes (D, H, W) (D = 1
    in 2-D): size + T − 1 along each axis of T taps a point (a 2-D call's depth: one)."""
    t = 2 if mode is GridSampleMode.Bilinear else 1
    d, h, w = in_spatial
    return (d + (t - 1 if dims == 3 else 0)) * (h + t - 1) * (w + t - 1)


def backward_gather_group(channels: int) -> int:
    """Units a grid point of the gathered backward's grid-gradient pass (backward_last's kernel,
    scatter off): BACKWARD_GROUP or the largest power of two below it dividing the channels."""
    g = min(BACKWARD_GROUP, UNITS)
    while g > 1 and channels % g:
        g //= 2
    return g


def backward_gather_channels(caps, mode: GridSampleMode, dims: int, in_spatial: tuple, channels: int, batch: int,
                             points: int, itemsize: int) -> int:
    """K, the channels a unit of the gathered input gradient sums (in_spatial: (D, H, W), D = 1
    in 2-D), or 0 where it does not
    serve: while BACKWARD_GATHER is off, bicubic, where units are SIMD lanes (lanes.py),
    more batch items than a grid's z steps, or cells or points beyond 32-bit indices."""
    if (not BACKWARD_GATHER or mode is GridSampleMode.Bicubic or caps.units_are_simd_lanes or batch > GRID_Z
            or batch * gather_cells(mode, dims, in_spatial) >= 2 ** 31 - UNITS
            or points >= 2 ** 31):
        return 0
    k = BACKWARD_GATHER_CHANNELS if BACKWARD_GATHER_BYTES is None else max(1, BACKWARD_GATHER_BYTES // itemsize)
    while k > 1 and channels % k:
        k //= 2
    return k


SMALL_BACKWARD_POINTS = 64          # grid points a sample, at most, for small.small_backward
SMALL_BACKWARD_ELEMENTS = 1 << 16   # input elements, at most, for small.small_backward


def small_backward(elements: int, locations: int) -> bool:
    """Whether a backward of `elements` input elements and `locations` grid points a sample
    takes small.small_backward: one launch, but each input element's unit walks every grid
    point of its sample (a chain of dependent loads), so only small calls. H200, f32, device
    time a call: [1, 4, 8²] on an 8² grid, bilinear 18.7 µs against the bucketed gather's
    ~80 µs of host time (ten launches); on 16² grids 64 µs (bicubic 151 µs against 41)."""
    return locations <= SMALL_BACKWARD_POINTS and elements <= SMALL_BACKWARD_ELEMENTS
