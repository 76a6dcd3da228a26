"""rudnn.interpolation: Nearest, NearestExact, Linear, Bicubic and Lanczos3 resampling of
[N, C, *S] inputs with 1-3 spatial axes, and its exact adjoint (SPEC §8), on every runtime.

Each entry point validates its call (problem.py), returns an empty result for N·C = 0
without launching, views input and output as [planes, D, H, W] (copying strided inputs to
contiguous), and launches resample.py with a plan from tuning.py: the forward kernel
gathers each output's taps (taps.py), F32 accumulation, one cast to the input dtype; the
backward kernel gathers each input element's gradient from the outputs whose taps touch
it, in a fixed order (deterministic, no atomics). Where units are SIMD lanes and the width
is upsampled by an integer factor (tuning.lane_factor), lanes.py's kernels run instead: a
unit per input column, so every load and store is a vector (same arithmetic and order). The
backward pass of Nearest by whole factors on every axis is nearest.py's block sums there, and
for 4-byte dtypes everywhere (torch's order: f32 gradients equal torch's bit for bit)."""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl import replay
from kerneldsl.replay import replayable

from . import lanes as _lanes
from . import nearest as _nearest
from . import resample as _resample
from .options import InterpolateMode, InterpolateOptions
from .problem import InterpolationError, resample_problem
from .taps import TAPS
from ..streaming import streams
from .tuning import (UNITS, axes, backward_plan, forward_plan, lane_factor, lane_plan, nearest_factors, nearest_plan,
                     touch_ranges, touch_span, unrolled_span, width_phases)

__all__ = ["InterpolationError", "InterpolateMode", "InterpolateOptions", "interpolate", "interpolate_backward"]


@replayable
def interpolate(input, output_size, options: InterpolateOptions) -> kd.Tensor:
    """input [N, C, *S] (1-3 spatial axes) resampled to [N, C, *output_size]."""
    p = resample_problem("interpolate", input, output_size, options)
    rt = p.runtime
    out = rt.empty(p.out_shape, input.dtype)
    if p.planes == 0:
        return out
    ax = axes(p.in_size, p.out_size, p.mode, p.align_corners)
    x4 = _view4(input.contiguous(), p.planes, ax, "size_in")
    y4 = _view4(out, p.planes, ax, "size_out")
    factor = lane_factor(ax[2])
    lanes = lane_plan(rt.capabilities, (*y4.shape[:3], x4.shape[3]), max(x4.numel, y4.numel), factor)
    if lanes is not None:   # units are SIMD lanes: a unit per input column, affine loads
        # (unmasked stores only where every column has its S outputs: not with aligned corners)
        exact = lanes.vec and y4.shape[3] == factor * x4.shape[3]
        # large outputs stream past the caches (ops/streaming.py), for one-tap widths: Linear's
        # forward computes more a store and ran 3% slower so (bilinear ×2 of [32, 64, 256²]:
        # 163-165 → 168-170 ms on a 2-core Emerald Rapids; nearest 151 → 48-50)
        item = out.dtype.itemsize  # (a row of the output at a time)
        stream = streams(rt.capabilities, out.size * item, y4.shape[3] * item) and ax[2].mode != "Linear"
        _lanes.forward_lanes[lanes.grid, lanes.bx](x4, y4, y4.shape[1] * y4.shape[2], *(a.scale for a in ax),
                                                   tuple(a.mode for a in ax), p.align_corners, factor, lanes.planes,
                                                   exact, lanes.wide, lanes.bx, stream, width_phases(ax[2], factor))
        return out
    tables, taps = _tables(rt, ax)
    plan = forward_plan(rt.capabilities, y4.shape, x4.numel, input.dtype.itemsize)
    _resample.resample_forward[plan.grid, plan.bx](x4, y4, *tables, y4.shape[1] * y4.shape[2], *taps, plan.outs,
                                                   plan.planes, plan.vec, plan.wide, plan.bx)
    return out


@replayable
def interpolate_backward(input, out_grad, output_size, options: InterpolateOptions) -> kd.Tensor:
    """The gradient w.r.t. input of interpolate(input, output_size, options) given the
    gradient of its output: the exact adjoint of the forward map, in the input's dtype."""
    p = resample_problem("interpolate_backward", input, output_size, options, out_grad, backward=True)
    rt = p.runtime
    dx = rt.empty(input.shape, input.dtype)
    if p.planes == 0:
        return dx
    ax = axes(p.in_size, p.out_size, p.mode, p.align_corners)
    g4 = _view4(out_grad.contiguous(), p.planes, ax, "size_out")
    d4 = _view4(dx, p.planes, ax, "size_in")
    factors = nearest_factors(rt.capabilities, ax, dx.dtype.itemsize)   # (None where an axis is empty)
    width = ax[2].size_in
    plan = nearest_plan(rt.capabilities, dx.size // width, width) if factors is not None else None
    if plan is not None:   # Nearest by whole factors: block sums in torch's order
        (cubes, units, per, chunk), rows, item = plan, dx.size // width, dx.dtype.itemsize
        args = (g4.reshape(g4.size), dx.reshape(dx.size), rows, ax[1].size_in, width, *factors, per, units)
        stream = streams(rt.capabilities, dx.size * item, width * item)
        if chunk:   # units are SIMD lanes: a block's output rows one after another
            _nearest.nearest_backward_rows[cubes, units](*args, chunk, stream)
        else:
            _nearest.nearest_backward_sums[cubes, units](*args, stream)
        return dx
    ranges, spans, walks = zip(*(_touch_ranges(rt, a) for a in ax))
    tables, taps = _tables(rt, ax)
    factor = lane_factor(ax[2])
    lanes = lane_plan(rt.capabilities, d4.shape, g4.numel, factor)
    if lanes is not None:   # units are SIMD lanes: a unit per input column, affine loads
        _lanes.backward_lanes[lanes.grid, lanes.bx](g4, d4, *ranges[:2], *tables[:4], d4.shape[1] * d4.shape[2],
                                                    ax[2].scale, *walks[:2], *taps[:2], ax[2].mode, p.align_corners,
                                                    factor, lanes.planes, lanes.vec, lanes.wide, lanes.bx,
                                                    streams(rt.capabilities, dx.size * dx.dtype.itemsize,
                                                            d4.shape[3] * dx.dtype.itemsize))
        return dx
    plan = backward_plan(rt.capabilities, d4.shape, g4.numel, taps[0] * taps[1] * taps[2], spans[2] > 0)
    _resample.resample_backward[plan.grid, plan.bx](g4, d4, *ranges, *tables, d4.shape[1] * d4.shape[2], *taps,
                                                    spans[1], spans[2], plan.planes, plan.wide, plan.bx)
    return dx


_RANGES: dict = {}  # (runtime, Axis) -> its touch ranges there and their spans: uploaded once


def _touch_ranges(rt, axis) -> tuple:
    """The axis's touch ranges (tuning.touch_ranges) on `rt`, uploaded on first use (a later
    call uploads nothing, so it can be replayed: kerneldsl/replay.py), the span the backward
    kernel unrolls (tuning.unrolled_span) and the longest range (tuning.touch_span)."""
    entry = _RANGES.get((rt, axis))
    if entry is None:
        host = touch_ranges(axis)
        entry = (rt.tensor(host), unrolled_span(rt.capabilities, host), touch_span(host))
        if len(_RANGES) < 1024:
            _RANGES[rt, axis] = entry
    return entry


_TABLES: dict = {}  # (runtime, Axis) -> its [O, T] index and weight tables there: made once
TABLE_CACHE_BYTES = 64 << 20  # device bytes the kept tables may take, all runtimes together
_table_bytes = 0


def _tables(rt, ax: tuple) -> tuple:
    """Each axis's taps as [O, T] index and weight tables (axis_table, made on the device the
    first time an axis is met there and kept: a later call launches only its resampling
    kernel, and is replayed with the tables as they are); returns the six tables (depth,
    height, width) and the three tap counts."""
    tables = []
    for a in ax:
        tables += _axis_tables(rt, a)
    return tables, tuple(TAPS[a.mode] for a in ax)


def _axis_tables(rt, a) -> tuple:
    """(index, weight) tables of one axis on `rt`: kept ones, or made now. A call that makes
    them is not recorded for replay (its record would make them again each time), and waits
    for them once, so that a later call on another stream reads finished tables. Past
    TABLE_CACHE_BYTES, tables are made for the call alone."""
    global _table_bytes
    entry = _TABLES.get((rt, a))
    if entry is not None:
        return entry
    t = TAPS[a.mode]
    idx, w = rt.empty((a.size_out, t), kd.i32), rt.empty((a.size_out, t), kd.f32)
    _resample.axis_table[-(-a.size_out // UNITS), UNITS](idx, w, a.size_in, a.scale, a.mode, a.align, UNITS)
    nbytes = 8 * a.size_out * t
    if _table_bytes + nbytes <= TABLE_CACHE_BYTES:
        recording = replay.active()
        if recording is not None:
            recording.refuse("interpolation tables made")
        rt.synchronize()
        _TABLES[rt, a] = (idx, w)
        _table_bytes += nbytes
    return idx, w


def _view4(t: kd.Tensor, planes: int, ax: tuple, size: str) -> kd.Tensor:
    return t.reshape(planes, *(getattr(a, size) for a in ax))
