"""Launch plans of rudnn.interpolation: per-axis scales and modes, the cube size, and for
the backward pass the range of outputs whose taps can touch each input index."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .options import InterpolateMode

UNITS = 256            # units per cube (at most)
# A unit of the resample kernels takes UNIT_PLANES planes (fewer where the grid would not
# fill the device), reading its taps once for all; a forward unit on devices whose units are
# hardware threads also up to FORWARD_OUTS neighbouring outputs of a row (one vector store of
# at most `vector_bytes`). H200, ×2 of [32, 64, 256²], device time (outputs × planes a unit;
# bilinear / nearest): f32 1×1 3.64 / 2.98 ms, 1×8 1.21 / 0.71, 2×8 1.09 / 0.67, 4×4 1.32 /
# 0.66, 4×8 1.07 / 0.67; bf16 1×1 3.70 / 3.03, 2×8 1.03 / 0.53, 4×8 0.90 / 0.41 (torch: f32
# 2.01 / 1.35, bf16 1.72 / 1.17). Backward, planes a unit 1 / 4 / 8: bilinear f32 5.12 / 1.91
# / 1.40 ms, bf16 4.98 / 1.76 / 1.36; nearest f32 1.96 / 0.77 / 0.90, bf16 1.94 / 0.81 / 0.82
# (one-tap modes walking their columns in a loop take ONE_TAP_BACKWARD_PLANES); nearest with
# the walk unrolled (span 2), 4 / 8 planes: f32 0.72 / 0.67 ms, bf16 0.64 / 0.51 (torch 0.82 /
# 0.74). Bilinear ×2 (span 5) walks in a loop: unrolled with 5 lines read each, it was slower.
FORWARD_OUTS = 4
UNIT_PLANES = 8
ONE_TAP_BACKWARD_PLANES = 4
# the backward kernel unrolls its walk along the height and width axes where no input index
# is touched by more than this many outputs there (×2 upsampling: 2 nearest, 5 linear with
# touch_ranges' margin); measured on the H200 at span 2 only
MAX_UNROLLED_SPAN = 4
FILL_UNITS = 2048      # units a compute unit keeps resident (an H200 SM: 2048 threads)
ROUNDING = 1e-5        # relative margin of touch_ranges' source coordinates (F32 is ~6e-8)
TAP_REACH = {"Off": (0, 0), "Nearest": (0, 0), "NearestExact": (0, 0), "Linear": (0, 1), "Bicubic": (-1, 2),
             "Lanczos3": (-2, 3)}


@dataclass(frozen=True)
class Axis:
    """One of the three spatial axes of the 4-D view: sizes, kernel mode name, F32 scale."""

    size_in: int
    size_out: int
    mode: str
    scale: float
    align: bool = False


def axes(in_size: tuple, out_size: tuple, mode: InterpolateMode, align: bool) -> tuple:
    """Three Axis records (leading "Off" axes of size 1 for inputs with fewer spatial axes);
    scales are torch's area_pixel_compute_scale, rounded to F32 as torch computes them."""
    pad = 3 - len(in_size)
    out = [Axis(1, 1, "Off", 1.0, align)] * pad
    for i, o in zip(in_size, out_size):
        if align:
            scale = np.float32(i - 1) / np.float32(o - 1) if o > 1 else np.float32(0)
        else:
            scale = np.float32(i) / np.float32(o)
        out.append(Axis(i, o, mode.value, float(scale), align))
    return tuple(out)


def touch_ranges(axis: Axis) -> np.ndarray:
    """[lo_0, hi_0, lo_1, hi_1, ...]: for each input index i, the outputs lo_i..hi_i whose taps
    may land on i. Nearest modes use the device's exact integer formulas. Other modes floor
    the source coordinate (float64 here) with a margin of ROUNDING·(1 + |x|) either side,
    far above the few-ulp difference of the device's F32 arithmetic, so a coordinate within
    rounding of an integer counts both ways; the kernel weighs each output exactly."""
    i_n, o_n = axis.size_in, axis.size_out
    if axis.mode == "Off":
        return np.zeros(2, np.int32)
    j = np.arange(o_n, dtype=np.int64)
    if axis.mode == "Nearest":
        first = last = j * i_n // o_n
    elif axis.mode == "NearestExact":
        first = last = np.minimum((2 * j + 1) * i_n // (2 * o_n), i_n - 1)
    else:
        x = j * axis.scale if axis.align else axis.scale * (j + 0.5) - 0.5
        if axis.mode == "Linear":
            x = np.maximum(x, 0.0)
        margin = ROUNDING * (1.0 + np.abs(x))
        first, last = np.floor(x - margin), np.floor(x + margin)
    low, high = TAP_REACH[axis.mode]
    t_min = np.clip(first + low, 0, i_n - 1)
    t_max = np.clip(last + high, 0, i_n - 1)
    i = np.arange(i_n)
    lo = np.searchsorted(t_max, i, side="left")
    hi = np.searchsorted(t_min, i, side="right") - 1
    return np.stack([lo, hi], axis=1).reshape(-1).astype(np.int32)


def touch_span(ranges: np.ndarray) -> int:
    """The most outputs any input index of an axis is touched by (touch_ranges' [lo, hi]
    pairs; at least 0)."""
    return max(0, int((ranges[1::2] - ranges[0::2]).max()) + 1)


def unrolled_span(caps, ranges: np.ndarray) -> int:
    """touch_span, if at most MAX_UNROLLED_SPAN (the backward kernel unrolls that walk), else 0;
    0 where units are SIMD lanes (the cpu runtime, nearest ×2 f32 [4, 16, 128²]: 6.8-12.5 ms
    unrolled against 3.2 ms in a loop, bf16 alike)."""
    span = touch_span(ranges)
    return span if span <= MAX_UNROLLED_SPAN and not caps.units_are_simd_lanes else 0


@dataclass(frozen=True)
class LaunchPlan:
    """A resample kernel's launch: `outs` neighbouring elements of a row and `planes` planes
    a unit, `vec` (outputs stored as one vector), `bx` units a cube along the row, the grid
    (x: rows of plane groups, y: a row's cubes), `wide` (64-bit element offsets)."""

    outs: int
    planes: int
    vec: bool
    bx: int
    grid: tuple
    wide: bool = False

    @property
    def units(self) -> int:
        return self.grid[0] * self.grid[1] * self.bx


def forward_plan(caps, shape: tuple, in_elements: int, itemsize: int) -> LaunchPlan:
    """resample_forward's launch for output [planes, D, H, W] of an input of `in_elements`:
    one output a plane where units are SIMD lanes (the cpu runtime: the loop over units is
    the vector), else FORWARD_OUTS outputs or as many as one vector store holds, if fewer
    (a vector store where the width allows)."""
    outs = 1 if caps.units_are_simd_lanes else min(FORWARD_OUTS, max(1, caps.vector_bytes // itemsize))
    return _fill(caps, shape, in_elements, outs, UNIT_PLANES)


def backward_plan(caps, shape: tuple, grad_elements: int, taps: int, unrolled: bool) -> LaunchPlan:
    """resample_backward's launch for the gradient [planes, D, H, W] of the input, the
    output's gradient having `grad_elements` and each output `taps` taps, the walk along the
    width `unrolled` or not: one element a unit, UNIT_PLANES planes (ONE_TAP_BACKWARD_PLANES
    for one tap walked in a loop)."""
    planes = UNIT_PLANES if taps > 1 or unrolled else ONE_TAP_BACKWARD_PLANES
    return _fill(caps, shape, grad_elements, 1, planes)


def _fill(caps, shape: tuple, other_elements: int, outs: int, planes: int) -> LaunchPlan:
    """`planes` planes a unit, halved while the grid holds fewer than FILL_UNITS units a
    compute unit."""
    group = min(planes, shape[0])
    while group > 1 and plan_launch(shape, other_elements, outs, group).units < caps.compute_units * FILL_UNITS:
        group //= 2
    return plan_launch(shape, other_elements, outs, group)


def plan_launch(shape: tuple, other_elements: int, outs: int, planes: int) -> LaunchPlan:
    """The launch over [planes, D, H, W] (the tensor a unit writes; `other_elements` in the
    one it reads) with `outs` elements and `planes` planes a unit: the fewest units a cube
    (a power of two, 32 to UNITS) that cover a row, one vector store where the row width is
    a multiple of `outs`."""
    rows, width = shape[1] * shape[2], shape[3]
    per_row = -(-width // outs)
    bx = min(UNITS, max(32, 1 << (per_row - 1).bit_length()))
    wide = max(other_elements, shape[0] * rows * width) >= 2**31
    return LaunchPlan(outs, planes, outs > 1 and width % outs == 0, bx,
                      (-(-shape[0] // planes) * rows, -(-per_row // bx)), wide)


# planes a unit of lanes.py (units as SIMD lanes), at most: the largest power of two up to it
# that divides the plane count (no part-full group: unmasked stores). 2-core Zen 5, ×2 of
# f32 [4, 16, 128²], best ms for 1 / 4 / 8 planes (two runs, load 6): bilinear forward
# 2.02-2.50 / 1.25-1.33 / 1.58-2.88, nearest forward 0.72-1.32 / 0.83-0.94 / 0.62-1.06,
# bilinear backward 4.78-7.40 / 2.21-2.28 / 2.15-2.50, nearest backward 1.44-2.03 / 0.99-1.00
# / 1.13-1.23.
LANE_PLANES = 4


def lane_factor(axis: Axis) -> int:
    """S where the width axis upsamples by the integer factor S ≥ 2 with every output S·i + k
    tapping only input columns i − 1 .. i + 1 (lanes.py's kernels), else 0: Nearest and
    NearestExact at out = S·in (their index is exactly i), Linear at out = S·in (source
    coordinate i + (k + ½)/S − ½, at least ½/S from the columns i − 1 and i + 1), or with
    aligned corners at out − 1 = S·(in − 1) (coordinate i + k/S)."""
    i_n, o_n = axis.size_in, axis.size_out
    if axis.mode in ("Nearest", "NearestExact") or (axis.mode == "Linear" and not axis.align):
        s = o_n // i_n
        return s if s >= 2 and o_n == s * i_n else 0
    if axis.mode == "Linear" and i_n > 1:
        s = (o_n - 1) // (i_n - 1)
        return s if s >= 2 and o_n - 1 == s * (i_n - 1) else 0
    return 0


def width_phases(axis: Axis, factor: int) -> bool:
    """Whether lanes.forward_lanes may work out the width's Linear taps a phase (PHASES,
    lanes.phase_row): the factor S a power of two, so that the scale is 1/S and every source
    coordinate, i + (2k + 1 − S)/(2S) or i + k/S, is exact in F32 (outputs below 2^23), and
    each phase's weights are constants. 2-core Zen 4, ×2 bilinear forward f32, best ms, general
    taps -> phases (torch CPU): [4, 16, 128²] 0.83-0.84 -> 0.50-0.51 (2.93-2.95); [32, 64, 256²]
    101.7-104.2 -> 82.0-85.1 (905-911); aligned corners, [4, 16, 128²] to 255² 1.65-1.66 ->
    1.28-1.31 (2.91-2.94) (RESULTS.md, session 54)."""
    return (axis.mode == "Linear" and factor >= 2 and factor & (factor - 1) == 0 and axis.size_out < 2 ** 23)


def lane_plan(caps, shape: tuple, elements: int, factor: int, planes: int | None = None) -> LaunchPlan | None:
    """lanes.py's launch over `shape` [planes, D, H, W] (the rows its cubes write, the input's
    width), a unit per input column, `planes` planes a unit (default: LANE_PLANES or fewer,
    dividing the plane count), or None where units are not SIMD lanes or the width is not
    upsampled by an integer factor (`factor` 0)."""
    if not caps.units_are_simd_lanes or factor < 2:
        return None
    if planes is None:
        planes = LANE_PLANES
        while shape[0] % planes:
            planes //= 2
    return lane_launch(shape, elements, planes)


def lane_launch(shape: tuple, elements: int, planes: int, bx: int | None = None) -> LaunchPlan:
    """lanes.py's cube and grid over `shape` (width: the input row): `bx` units a cube (default:
    lane_units), `vec` (EXACT: no masks) where the cube width divides the row and `planes`
    the plane count."""
    plan = plan_launch(shape, elements, 1, planes)
    bx = bx or lane_units(shape[3])
    grid = (plan.grid[0], -(-shape[3] // bx))
    return LaunchPlan(1, planes, shape[3] % bx == 0 and shape[0] % planes == 0, bx, grid, plan.wide)


def lane_units(width: int) -> int:
    """Units a cube of lanes.py's kernels for an input row of `width`: the fewest cubes of at
    most UNITS that split the row evenly (a row of up to UNITS is one cube), so that no cube
    is part full: a part-full cube's loads and stores are masked, which the cpu runtime turns
    into gathers and scatters. 2-core Zen 5, ×2 of [16, 48²] (4 planes a unit, kernel alone):
    a cube of 64 (part full) f32 nearest 204 us, bilinear 150, bf16 325 / 982; of 48 (the
    row) 19.5 / 105, bf16 24.6 / 85; of 16 28 / 108, bf16 29 / 91. Where no split of up to
    twice the fewest cubes is even, the power-of-two cube plan_launch picks (masked)."""
    fewest = -(-width // UNITS)
    for cubes in range(fewest, 2 * fewest + 1):
        if width % cubes == 0:
            return width // cubes
    return plan_launch((1, 1, 1, width), 0, 1, 1).bx


# input rows and units a cube of nearest.nearest_backward_sums: where units are SIMD lanes,
# NEAREST_ROWS rows (fewer where the grid would not give every compute unit
# NEAREST_CUBES_PER_UNIT cubes) and the row's width rounded up to a power of two, from 8 to
# NEAREST_UNITS; elsewhere NEAREST_THREAD_ROWS rows of NEAREST_THREADS units (H100, ×2 of
# [32, 64, 256²] f32, device time: rows × units 8 × 64 0.899 ms, 1 × 256 0.875, 2 × 128 0.863,
# 4 × 256 0.874; the gather kernel 0.870, torch 0.998). With 512-bit vectors (session 48), 32
# units beat 64: 2-core Emerald Rapids, ×2 backward, best ms, 64 → 32 units: [32, 64, 256²] f32
# 100.7-103.4 → 80.2-84.3 (torch 278), bf16 57.8-63.5 → 59.7-60.8; [4, 16, 128²] f32 0.65-0.85 →
# 0.49-0.51; [64, 64, 56²] f32 10.6-11.4 → 8.1-9.1 (16 units: 160 ms at the first shape)
NEAREST_ROWS = 8
NEAREST_CUBES_PER_UNIT = 4
NEAREST_UNITS = 32
NEAREST_THREAD_ROWS = 2
NEAREST_THREADS = 128
# where units are SIMD lanes, nearest.nearest_backward_rows reads a block's output rows one
# after another, keeping the partial sums of up to NEAREST_ROW_CHUNK columns in shared memory
# (0: nearest_backward_sums there too). 2-core Zen 4, ×2 of [32, 64, 256²] f32, best ms, one
# thread / two: block sums 187 / 99, rows with chunks of 256 / 512 / 1024 columns 74 / 61, 76 / 62,
# 75 / 64; 64 units 150 / 91; [4, 16, 128²] (in cache) 0.2 either way (RESULTS.md, session 54)
NEAREST_ROW_CHUNK = 256


def nearest_factors(caps, ax: tuple, itemsize: int) -> tuple | None:
    """(SD, SH, SW) where nearest.nearest_backward_sums takes a backward call, else None: every
    axis Nearest or NearestExact (or a leading "Off" one) upsampled by a whole factor S ≥ 1,
    out = S·in, so that output j reads input j // S (as lane_factor says); on devices whose
    units are SIMD lanes, or for 4-byte dtypes elsewhere (the same time as the gather kernel
    and torch's sums bit for bit; 16-bit: 0.539 against 0.499 ms, H100, [32, 64, 256²])."""
    if not caps.units_are_simd_lanes and itemsize < 4:
        return None
    factors = []
    for a in ax:
        if a.mode == "Off":
            factors.append(1)
        elif a.mode in ("Nearest", "NearestExact") and a.size_in > 0 and a.size_out % a.size_in == 0:
            factors.append(a.size_out // a.size_in)
        else:
            return None
    return tuple(factors)


def nearest_plan(caps, rows: int, width: int) -> tuple | None:
    """(cubes, units a cube, rows a cube, chunk) of the nearest backward over `rows` input rows
    of `width`: chunk > 0 for nearest.nearest_backward_rows (its columns a pass), 0 for
    nearest_backward_sums; None where the rows pass its 32-bit row index or the cubes the
    grid's x axis (the caller keeps the other kernels)."""
    chunk = 0
    if not caps.units_are_simd_lanes:
        units, per = NEAREST_THREADS, NEAREST_THREAD_ROWS
    else:
        units = min(NEAREST_UNITS, max(8, 1 << max(width - 1, 0).bit_length()))
        per = NEAREST_ROWS
        while per > 1 and -(-rows // per) < NEAREST_CUBES_PER_UNIT * max(caps.compute_units, 1):
            per //= 2
        chunk = NEAREST_ROW_CHUNK
    cubes = -(-rows // per)
    if rows >= 2**31 or cubes > caps.max_grid[0]:
        return None
    return cubes, units, per, chunk
