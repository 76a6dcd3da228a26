"""Launch shapes of the pooling kernels, from the problem and the device's capabilities.
The element kernels see their tensor as [rows, width] (width = the last spatial axis):
units along x take consecutive columns, so neighbouring units touch neighbouring memory
and a unit's position needs no division by the width; rows fill the rest of a cube of
ELEMENT_UNITS and the grid (y, wrapping into z). Global average pooling is a row
reduction: an aligned group of lanes a row for short rows (a plane, or part of one), a cube
a row for long ones, with no more units a row than filling the device needs."""
from __future__ import annotations

import math
from dataclasses import dataclass

GRID_Y = 65535         # cubes along y (and z) before the grid wraps (the portable limit)
ELEMENT_UNITS = 256    # units per cube of the element kernels
# units along a row of the element kernels: 1 for width 1 (global max pooling), else
# NARROW_UNITS, WIDE_MIN_UNITS or a power of two up to ELEMENT_UNITS (the cube shape is
# part of a kernel's specialisation: few shapes, few compilations)
NARROW_UNITS, WIDE_MIN_UNITS = 8, 32
MAX_UNROLLED_TAPS, MAX_UNROLLED_STRIDE = 27, 4   # backward windows unrolled (3x3x3 at most)
# the backward of small windows without dilation by cells (backward.pool_backward_cells): a
# unit the inputs that share their candidate outputs, each candidate read once (cell_backward).
# Intel's CPU OpenCL (units not SIMD lanes), f32 3×3 s2 p1 backward, ms, taps kernel -> cells:
# [8, 16, 112²] max 14.3 -> 2.8, average 9.2 -> 1.9; [2, 8, 512²] max 34.8 -> 14.5, average
# 24.6 -> 9.1. The cpu runtime's average backward of planes past its shared memory (the gather
# path there): [2, 8, 512²] 3×3 s2 p1 17.0-19.8 -> 4.6-5.3 (torch CPU 5.0), [2, 32, 512²] 2×2
# 47.1-48.0 -> 12.0-12.3 (torch 34.4). H100, device time (`python -m benchmarks.spatial --runtimes
# cuda --queued --cases max_pool2d_backward,avg_pool2d_backward --pool-backward taps|cells`),
# [64, 64, 112²] 3×3 s2 p1 f32 / bf16, ms: max 0.649 / 0.660 -> 0.138 / 0.135 (torch 0.627 /
# 0.590), average 0.920 / 0.936 -> 0.164 / 0.166 (torch 1.104 / 1.119); [2, 32, 512²] max 2×2
# 0.113 / 0.117 -> 0.044 / 0.031 (torch 0.181 / 0.169).
CELL_BACKWARD = True
# adaptive bins of equal size that lanes.pool_lanes / pool_plane_lanes unroll (devices whose
# units are SIMD lanes; larger bins take forward.pool_forward_masked). 2-core dev box, f32
# [64, 256, 56²] to 7×7 (8×8 bins), ms, 27 -> 64 taps: average 47.5-48.2 -> 28.8-37.6, max
# 115-127 -> 23.9-27.5 (torch CPU 18.3-19.3 / 43.8-44.1)
MAX_LANE_BIN_TAPS = 64
# outputs a unit of the unrolled-taps forward kernel takes on devices whose units are not SIMD
# lanes: H200, bf16 [64, 64, 112²] 3×3 s2 p1 (device time): max_pool2d 0.150 -> 0.122 ms with 2,
# avg_pool2d 0.154 -> 0.117 ms; 4 was slower (0.224 ms: 14 units a 56-output row leave most of
# a 32-unit x extent idle)
OUTPUTS_PER_UNIT = 2
MAX_ROW_UNITS = 256    # units per row of the long-row reduction
MIN_ROW_UNITS = 64     # ... and at least this many where filling the device asks for fewer
FILL_UNITS = 2048      # units a compute unit keeps resident (an H200 SM: 2048 threads)
PLANE_ROW_CHUNKS = 16  # rows of at most this many chunks a lane take a plane (or part of one) a row
SEGMENT_CHUNKS = 8     # lanes a short row: the fewest (a power of two) with at most this many chunks each
# measured on the H200 (bf16 [64, 256, 56²], 392 chunks a row): a cube of 256 a row 2.9 TB/s,
# 64 units or a plane a row 3.75 TB/s; [64, 2048, 7²] (49 elements): a plane a row 0.67 TB/s
# devices whose units are SIMD lanes (the cpu runtime): rows shorter than this take the
# element kernel, one unit a plane, rather than a reduction with its per-cube split points
# (reduction_plan; rudnn.pooling itself gives such devices reduction.lane_row_mean instead)
SIMD_ROW_MIN = 1024
# devices whose units are SIMD lanes: units a cube of scatter.py's kernels (their zeroing and
# storing run across them) and the most units a row of reduction.lane_row_mean / spread_mean
# (a cube a row: 1/16 of the row's length, at least MIN_LANE_UNITS). Measured on the 2-core
# dev box (f32, single worker, load 2-3): rows of 49 took 21 us with 8 units, 40 us with 16;
# of 784, 30 us with 32 (4 partial sums a unit), 48 with 16 (one sum)
LANE_UNITS = 64
MIN_LANE_UNITS = 8


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class LaunchPlan:
    """Cube (bx, by) and grid of a launch; `lanes`: elements a chunk and `seg`: units a row
    reduced together, 0 for the whole cube (row reductions)."""
    bx: int
    by: int
    grid: tuple
    lanes: int = 1
    seg: int = 0

    @property
    def block(self) -> tuple:
        return (self.bx, self.by)


def element_plan(rows: int, width: int) -> LaunchPlan:
    """A [rows, width] element kernel: bx units along the width, by rows a cube, the grid's
    rows along y wrapping into z."""
    bx = 1 if width == 1 else min(max(_pow2_at_least(width), NARROW_UNITS), ELEMENT_UNITS)
    if NARROW_UNITS < bx < WIDE_MIN_UNITS:
        bx = WIDE_MIN_UNITS
    by = ELEMENT_UNITS // bx
    cubes = -(-rows // by)
    gz = -(-cubes // GRID_Y)
    return LaunchPlan(bx, by, (-(-width // bx), -(-cubes // gz), gz))


def outputs_per_unit(caps, width: int) -> int:
    """Neighbouring outputs of a row a unit of the unrolled-taps forward kernel takes: 1 where
    units are SIMD lanes (the cpu runtime vectorises across units), else OUTPUTS_PER_UNIT for
    rows at least WIDE_MIN_UNITS wide (a GPU: the kernel is instruction-bound there, and
    neighbouring windows share loads and position arithmetic)."""
    if caps.units_are_simd_lanes or width < WIDE_MIN_UNITS:
        return 1
    return OUTPUTS_PER_UNIT


def row_vector_outputs(caps, problem, itemsize: int, offset: int) -> int:
    """Outputs a unit of the row-vector pooling kernel (rows.pool_rows) takes, or 0 where it
    does not apply. It serves max and average pooling over 1 or 2 axes without dilation on
    devices whose units are not SIMD lanes (a GPU: there the pooling kernels are instruction-
    bound), with windows small enough to unroll and sizes that let each unit read its row
    as one aligned vector of V = outputs·stride elements (V dividing 16 bytes, the row
    width and the input's offset, and the last unit's vector inside the row): the widest
    such vector."""
    if caps.units_are_simd_lanes or problem.adaptive or problem.dims > 2 or not unrolled_taps(problem):
        return 0
    h, w = problem.axes[1], problem.axes[2]
    if h.dilation != 1 or w.dilation != 1 or problem.planes * h.out * w.out >= 2**31 or h.size * w.size >= 2**31:
        return 0   # (positions in a plane and unit numbers are 32-bit)
    lanes = 16 // itemsize
    while lanes >= 2:
        outs = lanes // w.stride
        if (lanes % w.stride == 0 and w.size % lanes == 0 and offset % lanes == 0
                and -(-w.out // outs) * lanes <= w.size):
            return outs
        lanes //= 2
    return 0


def vector_lanes(itemsize: int, *counts: int) -> int:
    """The widest chunk (<= 16 bytes) that divides every count, so every vector access is
    aligned: a power of two, as the gcd with 16 // itemsize is."""
    return math.gcd(16 // itemsize, *counts)


def reduction_plan(caps, rows: int, size: int, lanes: int) -> LaunchPlan | None:
    """The row reduction for `rows` rows of `size` elements (seg > 0: bx = seg lanes, a
    power of two up to the plane size, reduce each row and a cube holds by rows; seg == 0:
    a cube a row; the grid wraps from x into y), or None where the element kernel is better
    (short rows on devices whose units are SIMD lanes)."""
    if caps.units_are_simd_lanes and size < SIMD_ROW_MIN:
        return None
    chunks = -(-size // lanes)
    if chunks <= PLANE_ROW_CHUNKS * caps.plane_dim and caps.plane_dim < ELEMENT_UNITS:
        seg = min(caps.plane_dim, _pow2_at_least(-(-chunks // SEGMENT_CHUNKS)))
        bx, by = seg, max(1, min(ELEMENT_UNITS, caps.max_cube_units) // seg)
    else:
        seg, fill = 0, MAX_ROW_UNITS
        if not caps.units_are_simd_lanes and caps.compute_units:  # GPUs: enough units a row to fill it
            fill = max(MIN_ROW_UNITS, _pow2_at_least(-(-caps.compute_units * FILL_UNITS // rows)))
        bx, by = max(caps.plane_dim, min(_pow2_at_least(chunks), MAX_ROW_UNITS, caps.max_cube_units, fill)), 1
    cubes = -(-rows // by)
    gy = -(-cubes // GRID_Y)
    return LaunchPlan(bx, by, (-(-cubes // gy), gy), lanes, seg)


def unrolled_taps(problem) -> bool:
    """Whether the backward pass takes the kernel with every window tap unrolled
    (backward.pool_backward_taps): pooling windows of at most MAX_UNROLLED_TAPS taps with
    strides up to MAX_UNROLLED_STRIDE (sizes and strides become compile-time: each
    combination is one more compilation)."""
    if problem.adaptive:
        return False
    taps = 1
    for a in problem.axes:
        taps *= a.kernel
    return taps <= MAX_UNROLLED_TAPS and all(a.stride <= MAX_UNROLLED_STRIDE for a in problem.axes)


def cell_backward(problem) -> bool:
    """Whether the gather backward takes backward.pool_backward_cells: where CELL_BACKWARD is
    on, for windows the taps kernel unrolls (unrolled_taps) without dilation (a cell's inputs
    then share their candidate outputs)."""
    return CELL_BACKWARD and unrolled_taps(problem) and all(a.dilation == 1 for a in problem.axes)


def cells(axis) -> int:
    """Cells of an axis for pool_backward_cells: the inputs whose last covering window starts
    at output c, for c = 0 .. ceil((size + padding) / stride) − 1."""
    return -(-(axis.size + axis.padding) // axis.stride)


# global average pooling on devices whose units are SIMD lanes: reduction.vector_row_mean (a
# one-unit cube several rows, each row as vectors of ROW_LANES elements) for F32 rows of any
# length and 16-bit rows of at most SHORT_ROW elements, instead of lane_row_mean (a cube a
# row). Rows of at most SHORT_ROW_WIDE elements are unrolled (one chain, vectors of 4 for rows
# under 6 vectors of 8), SHORT_ROW_CUBE rows a cube; longer F32 rows loop over ROW_ACCUMULATORS
# vectors a step, LONG_ROW_CUBE rows a cube. 2-core Zen 4, ms, best of 11, about 6.4M elements
# (torch CPU / lane_row_mean, or the unit-a-row kernel it replaced below 64 / vector_row_mean):
# f32 7² [130560 rows] 0.39 / 0.51 / 0.33-0.35 (the ResNet head), 4² 0.92 / 1.93 / 0.43, 1²
# 1.75 / 2.16 / 0.78, 10² 0.28 / 0.88-1.11 / 0.31-0.58, 16² 0.25 / 0.39 / 0.27; bf16 7² 1.26-1.37
# / 0.65-0.68 / 0.54-0.55, 3² 2.43 / 0.91 / 0.75, 2² and 4² even. Looped, 16M elements: f32 20²
# 1.14-1.24 / 1.80-1.86 / 1.20-1.22, 56² 1.09-1.13 / 1.29-1.46 / 1.20-1.27 (the [64, 256, 56²]
# row, 205 MB: 5.0-5.3 / 5.9-6.4 / 5.0-5.2), 112² 1.06-1.07 / 1.48-1.61 / 1.08-1.09: memory-bound,
# even with torch; but bf16 16² 1.02-1.14 against 1.24-1.27, 56² 0.53-0.55 against 1.12-1.14:
# converting 16-bit vectors costs more than the cube's reduction over long rows.
SHORT_ROW = 63
SHORT_ROW_WIDE = 256
SHORT_ROW_CUBE = 64
LONG_ROW_CUBE = 16
ROW_LANES = 8
ROW_ACCUMULATORS = 2


@dataclass(frozen=True)
class RowMeanPlan:
    """reduction.vector_row_mean's launch: `size` (SIZE: the row length where unrolled, else
    0), `rows_per_cube` (RPC), `lanes` (L), `accumulators` (A) and the grid."""

    grid: tuple
    size: int
    rows_per_cube: int
    lanes: int
    accumulators: int


def vector_row_plan(rows: int, size: int, itemsize: int) -> RowMeanPlan | None:
    """vector_row_mean's plan for `rows` rows of `size` elements of `itemsize` bytes, or None
    (lane_row_mean: 16-bit rows longer than SHORT_ROW); the grid wraps from x into y."""
    if size > SHORT_ROW and itemsize < 4:
        return None
    short = size <= SHORT_ROW_WIDE
    per_cube = SHORT_ROW_CUBE if short else LONG_ROW_CUBE
    lanes = ROW_LANES if size >= 6 * ROW_LANES or not short else 4
    cubes = -(-rows // per_cube)
    gy = -(-cubes // GRID_Y)
    return RowMeanPlan((-(-cubes // gy), gy), size if short else 0, per_cube, lanes, ROW_ACCUMULATORS)


def lane_row_plan(caps, rows: int, size: int) -> tuple:
    """(grid, block) of reduction.lane_row_mean and reduction.spread_mean: a cube a row, of
    1/16 of the row's length in units (a power of two) between MIN_LANE_UNITS and two
    vectors of f32 (at most LANE_UNITS); the grid wraps from x into y."""
    widest = max(MIN_LANE_UNITS, min(LANE_UNITS, 2 * caps.vector_bytes // 4))
    bx = max(MIN_LANE_UNITS, min(widest, _pow2_at_least(size) // 16))
    gy = -(-rows // GRID_Y)
    return (-(-rows // gy), gy), (bx, 1)


def scatter_backward(caps, problem, maximum: bool = False) -> bool:
    """Whether a backward pass takes scatter.py's kernels (a cube a plane, one unit scattering
    in torch's order into an F32 copy of the plane) rather than the gather kernels: on devices
    whose units are SIMD lanes (where one unit's scalar loop is what torch's CPU kernels run; on
    a GPU it would serialise), for max pooling (any window: the indices say where; planes too
    large for shared memory are summed in global memory, `plane_in_shared`) and average
    pooling (dilation is 1) whose planes fit shared memory."""
    return caps.units_are_simd_lanes and (maximum or plane_in_shared(caps, problem))


# Max pooling backward through windows that tile the input (tiles.tiled_max_backward, devices
# whose units are SIMD lanes): planes of at least TILED_PLANE elements, windows 1, 2 or 4 wide
# (TILED_WIDTHS: a window row is one interleaved store across the units), TILED_UNITS units
# across an output row (narrower rows: a unit an output). 2-core Zen 4 box, whole calls in turn
# with the scatter kernels in one process, three rounds, ms, scatter -> tiled (torch CPU):
# - 2×2 of [2, 32, 512²]: f32 4.6-5.3 -> 2.6-2.7 (25), bf16 3.3-3.9 -> 1.9-3.0 (17);
# - 2×2 of [8, 32, 256²]: f32 4.9-5.5 -> 1.7-2.3 (26), bf16 4.9-6.3 -> 2.7-3.1 (18);
# - 2×2 of [16, 32, 128²]: f32 2.6 -> 1.7-2.2 (13), bf16 1.7-2.2 -> 0.9-1.1 (2.2);
# - 2×2 of [64, 64, 112²]: f32 16.7-17.4 -> 8.9-9.3 (60), bf16 11.2-12.5 -> 7.2-8.1 (37);
# - 2×2 of [64, 64, 64²]: f32 4.8-5.2 -> 2.2-2.3 (25), bf16 3.2 -> 2.0-2.2 (14);
# - 2×2 of [64, 64, 56²] (below TILED_PLANE): f32 2.8-3.2 -> 2.7-3.1, bf16 2.1-3.0 -> 2.6-3.2;
#   [256, 32, 32²]: f32 1.4-1.6 -> 1.6-1.8, bf16 1.2 -> 1.4;
# - 4×4 of [2, 32, 512²]: f32 3.2 -> 1.5-2.7, bf16 2.3-4.0 -> 2.0-2.2;
# - 3×3 of [2, 16, 384²]: f32 0.60-0.72 -> 0.83-0.97 (so width 3 is left out), bf16 0.62-0.75 ->
#   0.48-0.91;
# - adaptive 8×8 bins of [64, 256, 56²]: f32 8.0 -> 13.3, bf16 4.0 -> 20 (eight-way interleaves).
# A row's last, partial vector of outputs as a masked one took 7x as long (bf16 [64, 64, 112²]
# 84 ms): the kernel writes the row's last TILED_UNITS outputs again instead.
TILED_PLANE = 4096
TILED_WIDTHS = (1, 2, 4)
TILED_UNITS = 16


def tiled_windows(caps, problem) -> tuple | None:
    """(KD, KH, KW) where max pooling's backward takes tiles.tiled_max_backward: devices whose
    units are SIMD lanes, windows that tile the input (kernel = stride without padding or
    dilation, or adaptive bins of one size; every axis a whole number of them), of a width in
    TILED_WIDTHS, planes of TILED_PLANE elements or more (and below 2^31); else None."""
    if not caps.units_are_simd_lanes or not TILED_PLANE <= problem.in_spatial < 2**31:   # (I32 in-plane offsets)
        return None
    for a in problem.axes:
        if a.size % a.out or (not problem.adaptive and (a.kernel != a.stride or a.padding or a.dilation != 1
                                                         or a.size != a.out * a.kernel)):
            return None
    windows = tuple(a.size // a.out for a in problem.axes)
    return windows if windows[2] in TILED_WIDTHS else None


def tiled_plan(rows: int, width: int) -> tuple:
    """(grid, units) of tiles.tiled_max_backward: a cube an output row of `width` outputs,
    TILED_UNITS units (or `width`, where narrower); the grid wraps from x into y."""
    gy = -(-rows // GRID_Y)
    return (-(-rows // gy), gy), min(TILED_UNITS, width)


def plane_in_shared(caps, problem) -> bool:
    """Whether an F32 plane (and its outputs' shares) take at most half the device's shared
    memory. 2-core dev box, max_pool2d 3×3 s2 p1 backward of [2, 8, 512²] f32, where they do
    not: the gather kernels took 7.6-15 ms, torch CPU 0.95."""
    return (problem.in_spatial + problem.out_spatial) * 4 <= caps.max_shared_bytes // 2


def window_taps(problem) -> tuple:
    """(TD, TH, TW): forward.pool_forward_masked's loop bounds, the most taps a window has on
    each axis."""
    if not problem.adaptive:
        return tuple(min(a.kernel, -(-a.size // a.dilation)) for a in problem.axes)
    return tuple(_adaptive_taps(a.size, a.out) for a in problem.axes)


def _adaptive_taps(size: int, out: int) -> int:
    """At least the widest adaptive bin [floor(o·size/out), ceil((o+1)·size/out)): size / out
    where out divides size (every bin), else at most ceil(size / out) + 1."""
    return size // out if size % out == 0 else min(size, -(-size // out) + 1)


def f64_positions(caps, itemsize: int) -> bool:
    """Whether forward.pool_forward_taps divides its positions through f64 (window.quotient):
    on devices whose units are SIMD lanes, for 4-byte inputs. Measured on the 2-core dev box,
    [4, 16, 56²] 3×3 s2: f32 max_pool2d 0.62-1.37 -> 0.38-0.79 ms, with indices 1.6-3.6 ->
    0.44-1.28 ms, avg_pool2d 0.82-1.66 -> 0.27-0.69 ms; bf16 avg_pool2d went the other way
    (0.78-2.0 -> 1.28-2.37 ms, max_pool2d mixed) while they were read as they are; they now
    reach the kernel as an f32 copy (widened_input), measured with the f64 divisions."""
    return caps.units_are_simd_lanes and itemsize == 4


def widened_input(caps, itemsize: int) -> bool:
    """Whether the unrolled-taps forward kernel reads an f32 copy of a 2-byte input (forward.widen):
    on devices whose units are SIMD lanes, whose units' strided taps are gathers, which the
    cpu runtime has for 4-byte elements only. Measured on the 2-core dev box, bf16 [4, 16,
    56²] 3×3 s2 (load 4.6): max_pool2d 1.7-2.1 -> 0.64-0.91 ms, with indices 2.3-4.1 ->
    0.77-1.2 ms, avg_pool2d 1.35-2.0 -> 0.39-0.85 ms, the copy included (66-96 us). The
    masked kernel (adaptive bins) went the other way with it (bf16 [8, 64, 28²] to 7×7:
    average 0.37-0.40 -> 0.42-0.59 ms), so it reads the input as it is."""
    return caps.units_are_simd_lanes and itemsize == 2


# devices whose units are SIMD lanes: units a cube of lanes.pool_lanes (an output row, or an
# even split of it) and planes a cube (the most of LANE_PLANES, 2, 1 dividing the planes).
# 2-core dev box, f32 [64, 16, 56²] 3×3 s2 p1, kernel alone, 1 / 2 / 4 planes: average 60 /
# 59 / 49 ns a plane row of 28 outputs, max 109 / 59 / 50; a cube of 32 units (part full,
# masked stores) instead of 28: average 100 / 100 / 93, max 69 / 65 / 63.
LANE_ROW_UNITS = 256
LANE_PLANES = 4
# output rows narrower than this take lanes.pool_plane_lanes (a unit an output of the plane,
# full lanes; the taps are gathers either way): [8, 64, 28²] to 7×7, three rounds (load 2),
# a unit a column / an output: f32 average 0.166-0.181 / 0.129-0.199 ms, max 0.202-0.214 /
# 0.194-0.226; bf16 average 0.232-0.236 / 0.151-0.166, max 0.949-0.961 / 0.158-0.194
NARROW_ROW = 8


# planes of fewer elements than this track the max's position in F32 in bins.pool_bins (exact;
# same box and shape, max with indices: 51.5 ms with I64 positions, 26.5 ms with F32)
BIN_F32_POSITIONS = 2**24


def bin_rows(caps, problem) -> bool:
    """Whether bins.pool_bins takes a forward call: devices whose units are SIMD lanes,
    adaptive pooling into bins of one size (each input axis a multiple of its output, at most
    MAX_LANE_BIN_TAPS taps a bin), output rows narrower than NARROW_ROW, in-plane positions
    below 2^31. (2-core Zen 4 box, f32 [64, 256, 56²] to 7×7: average 5.9 ms, against 40.5 ms
    by lanes.pool_plane_lanes and 13.1 ms by torch.)"""
    ax = problem.axes
    return (caps.units_are_simd_lanes and problem.adaptive and ax[2].out < NARROW_ROW
            and not any(a.size % a.out for a in ax) and problem.in_spatial < 2**31
            and math.prod(a.size // a.out for a in ax) <= MAX_LANE_BIN_TAPS)


# bins.pool_bins for 16-bit inputs: its chains packed into vectors by LLVM's SLP vectoriser
# (BIN_PACKED_ITEMSIZES; F32 chains stay scalar, kd.scalar_statements()), each tap converted
# in the chains, except f16 maxima, whose rows are first widened to F32 in shared memory (rows
# up to BIN_WIDEN_ROW elements). 2-core Zen 4 box, the kernel alone in one process, two
# rounds, ms, scalar chains of widened rows -> packed chains converting their taps:
# - bf16 [64, 256, 56²] to 7×7, average: 8.8-10.0 -> 5.4-6.3 (torch 19.5-21.6); max (no
#   indices) 25.6-27.5 -> 20.0-20.5; [64, 512, 28²] to 7×7 average 5.6 -> 2.7-2.8, max 12.0-14.1
#   -> 9.1-10.4; [32, 256, 14²] to 7×7 0.84-0.87 -> 0.26-0.28; [64, 256, 32²] to 4² 3.7-4.1 ->
#   1.9-2.3;
# - f16: average [64, 256, 56²] to 7×7 8.6-9.8 -> 6.5-6.9, [64, 256, 32²] to 4² 3.8-3.9 -> 2.4;
#   but the max of [64, 512, 28²] to 7×7 11.6-13.7 -> 47.5 (the conversion then is not
#   vectorised), packed with widened rows 11.5-12.6;
# - f32, scalar -> packed: even ([64, 512, 28²] to 7×7 average 3.7-4.3 -> 3.7-3.9, max 10.2 ->
#   10.1-12.0; [64, 256, 56²] max 23.3-27.7 -> 22.7-27.7).
# (Emerald Rapids box, earlier, scalar chains: bf16 [64, 256, 56²] to 7×7 average 8.4-8.6 ms
# converting in the chains, 6.6 widened first.)
BIN_PACKED_ITEMSIZES = (2,)
BIN_WIDEN_ROW = 4096


def bin_packing(dtype) -> bool:
    """pool_bins' PACKED: whether its chains may be packed into vectors (16-bit inputs)."""
    return dtype.itemsize in BIN_PACKED_ITEMSIZES


def bin_row_widening(problem, dtype, maximum: bool) -> int:
    """pool_bins' ROW: the input row's length where its rows are widened to F32 first (a
    vector loop; the chains then add F32 loads): f16 maxima, rows up to BIN_WIDEN_ROW; else 0
    (each tap converted in the chain)."""
    width = problem.axes[2].size
    return width if dtype.name == "f16" and maximum and width <= BIN_WIDEN_ROW else 0


# output rows (od, oh) a pass of columns.max_bins_columns (their column results in shared
# memory; more rows a pass fill more lanes when the bins are merged; 0: the form is off).
# 2-core Zen 4 box, f32 [64, 256, 56²] to 7×7 (7 rows), ms: 1 row a pass 26.6, 2 17.5, 7 8.7.
COLUMN_ROWS = 16
# bins columns.max_bins_columns takes (2-core Zen 4 box, f32, ms, the column form against the
# form the call takes without it, interleaved):
# - up to COLUMN_TAPS taps down a column unrolled, more in unrolled steps of 8, 4 or 2 (32
#   unrolled: LLVM turned half the row loads into gathers, [16, 64, 896, 56] to 28×7 152
#   against 57.7);
# - at least COLUMN_WIDTH columns across, and at least COLUMN_SHORT_WIDTH where fewer than
#   COLUMN_DOWN taps go down a column: [64, 64, 112²] to 56×28 (2 down, 4 across) 19.5-20.4
#   against 12.7-14.0, to 56² (2, 2) 19.6-21.6 against 13.6-14.4, [64, 64, 96²] to 32² (3, 3)
#   10.8-12.8 against 9.3-11.1; but to 56×14 (2, 8) 19.2-21.8 against 27.5-28.8, [64, 64, 96²]
#   to 32×12 (3, 8) 9.6 against 23.4-23.9, [64, 64, 112²] to 28×56 (4, 2) 11.8-13.2 against
#   18.2-18.5, to 7×56 (16, 2) 13.3 against 37.6; one column across, to 28×112 (4, 1),
#   17.9-23.7 against 16.3-17.3;
# - planes of COLUMN_PLANE elements or more: a cube's fixed cost is about 0.2 µs ([256, 256,
#   8²] to 2², 5.7 against 2.5 by bins.pool_bins; [64, 256, 16²] to 4², 2.0 against 3.8).
COLUMN_TAPS = 16
COLUMN_WIDTH = 2
COLUMN_DOWN = 4
COLUMN_SHORT_WIDTH = 8
COLUMN_PLANE = 256


@dataclass(frozen=True)
class ColumnPlan:
    """columns.max_bins_columns' launch: the geometry (OD, OH, IH, IW, OW, KD, KH, KW) it
    sees the planes in, output rows a pass and taps a step down a column."""
    geometry: tuple
    rows: int
    step: int


def _row_width(size: int) -> int:
    """The row width a bin of `size` consecutive elements is seen in (a global max, or a bin
    of a 1-D call: any row width keeps its scan order), or 0: a multiple of 8 from 16 to 64
    dividing it, giving a multiple of 8 rows (whole steps of 8 taps) where one does."""
    widths = [w for w in range(64, 15, -8) if size % w == 0 and size // w >= 2]
    return next((w for w in widths if size // w % 8 == 0), widths[0] if widths else 0)


def column_plan(caps, problem) -> ColumnPlan | None:
    """columns.max_bins_columns' launch where it takes an adaptive max pooling call, else
    None: devices whose units are SIMD lanes, bins of one size (each input axis a multiple
    of its output) with at least 2 taps down a column (unrolled up to COLUMN_TAPS, else in
    steps of 8, 4 or 2 dividing them) and from COLUMN_WIDTH (COLUMN_SHORT_WIDTH below
    COLUMN_DOWN taps down) to MAX_LANE_BIN_TAPS across, planes of COLUMN_PLANE elements or
    more, positions tracked in F32 (planes below BIN_F32_POSITIONS elements) and an input
    row that fits a cube's units. Bins of
    consecutive elements (a global max of any rank, 1-D calls) are seen as rows of 16 to 64
    elements (_row_width), a bin an output row."""
    ax = problem.axes
    if not (caps.units_are_simd_lanes and problem.adaptive and COLUMN_ROWS) or any(a.size % a.out for a in ax):
        return None
    if not COLUMN_PLANE <= problem.in_spatial < BIN_F32_POSITIONS:
        return None
    if problem.out_spatial == 1 or ax[0].size == ax[1].size == 1:   # bins of consecutive elements
        bins, size = problem.out_spatial, problem.in_spatial // problem.out_spatial
        width = _row_width(size)
        if not width:
            return None
        geometry = (1, bins, bins * size // width, width, 1, 1, size // width, width)
    else:
        geometry = (ax[0].out, ax[1].out, ax[1].size, ax[2].size, ax[2].out, *(a.size // a.out for a in ax))
    od, oh, _, iw, ow, kd_, kh, kw = geometry
    down = kd_ * kh
    wide = COLUMN_WIDTH if down >= COLUMN_DOWN else COLUMN_SHORT_WIDTH
    if down < 2 or not wide <= kw <= MAX_LANE_BIN_TAPS or iw > caps.max_cube_units:
        return None
    step = down if down <= COLUMN_TAPS else next(s for s in (8, 4, 2, 1) if down % s == 0)
    rows = max(1, min(COLUMN_ROWS, od * oh, caps.max_shared_bytes // (8 * iw)))
    return ColumnPlan(geometry, rows, step)


@dataclass(frozen=True)
class LanePlan:
    """lanes.pool_lanes' launch: `bx` units a cube (dividing the output row), `planes` planes
    a cube (dividing the plane count), the grid, and each axis's window as (kernel, stride,
    padding, dilation) (adaptive bins of equal size as kernel = stride = size / out); `flat`:
    a cube every output of its planes (lanes.pool_plane_lanes), else an output row."""
    bx: int
    planes: int
    grid: tuple
    windows: tuple
    flat: bool = False


def lane_plan(caps, problem) -> LanePlan | None:
    """lanes.pool_lanes' launch where it applies, else None: devices whose units are SIMD
    lanes; windows small enough to unroll (unrolled_taps), or adaptive bins that all have
    the same size (each input axis a multiple of its output, at most MAX_LANE_BIN_TAPS taps);
    an output row that splits evenly into cubes of at most LANE_ROW_UNITS, or for rows
    narrower than NARROW_ROW (`flat`: lanes.pool_plane_lanes) a plane's outputs that do;
    in-plane positions below 2^31."""
    if not caps.units_are_simd_lanes or problem.in_spatial >= 2**31 or problem.out_spatial >= 2**31:
        return None
    if problem.adaptive:
        if any(a.size % a.out for a in problem.axes) or math.prod(a.size // a.out for a in problem.axes) > \
                MAX_LANE_BIN_TAPS:
            return None
        windows = tuple((a.size // a.out, a.size // a.out, 0, 1) for a in problem.axes)
    elif unrolled_taps(problem):
        windows = tuple((a.kernel, a.stride, a.padding, a.dilation) for a in problem.axes)
    else:
        return None
    planes = LANE_PLANES
    while problem.planes % planes:
        planes //= 2
    width = problem.axes[2].out
    if width < NARROW_ROW:   # a unit an output of the plane (lanes.pool_plane_lanes)
        cubes = -(-problem.out_spatial // LANE_ROW_UNITS)
        if problem.out_spatial % cubes:
            return None
        return LanePlan(problem.out_spatial // cubes, planes, (problem.planes // planes, cubes), windows, True)
    cubes = -(-width // LANE_ROW_UNITS)
    if width % cubes:
        return None
    rows = problem.axes[0].out * problem.axes[1].out * (problem.planes // planes)
    if rows >= 2**31:
        return None
    return LanePlan(width // cubes, planes, (rows, cubes), windows)


def column_units(caps, problem) -> int:
    """Units a cube of scatter.cols_avg_backward (a unit an output column: the smallest power of
    two from 16 to LANE_UNITS covering the output row, or LANE_UNITS with the row in several
    passes), or 0 where its plane sum (rows padded past both ends of the units' reach) and
    the outputs' shares pass half the device's shared memory (rows_avg_backward then).
    2-core dev box, f32 [4, 16, 56²] 3×3 s2 p1 (64 planes, one worker): 0.27 ms by rows
    (gathers from the plane sum), 0.13 ms by columns; bf16 0.27 -> 0.20 ms."""
    h, w = problem.axes[1], problem.axes[2]
    bx = min(LANE_UNITS, max(16, _pow2_at_least(w.out)))
    covered = -(-w.out // bx) * bx
    row = (covered + -(-w.kernel // w.stride)) * w.stride
    return bx if (h.size * row + h.out * covered) * 4 <= caps.max_shared_bytes // 2 else 0
