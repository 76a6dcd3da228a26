"""rudnn.pooling: max, average, adaptive average and adaptive max pooling over 1, 2 or 3
spatial axes, with indices and backward passes, with torch.nn.functional's semantics
(SPEC §7), on every runtime.

Each entry point validates its call into a problem (problem.py: the input seen as
[planes, D, H, W], 1- and 2-D calls padded with leading axes of 1, so one code path
serves every rank), returns empty results for zero planes without launching, and
launches rows.pool_rows (max and average pooling over 1 or 2 axes on GPUs: a unit takes a
few outputs of a row and reads each input row as one aligned vector; sizes compile-time),
forward.pool_forward(_taps) (one unit per output; _taps: small windows unrolled),
reduction.plane_mean (global average pooling, a row reduction) or
backward.pool_backward(_taps) (one unit per input element, gathering from the outputs
that cover it: deterministic, no atomics; _cells: a unit the inputs that share their
candidate outputs, for unrollable windows without dilation). Devices whose units are SIMD
lanes (the cpu runtime) take CPU-shaped kernels where those would not vectorise: bins.pool_bins (equal
adaptive bins in narrow rows: a one-unit cube a plane, scalar code; tuning.bin_rows; for the
max, columns.max_bins_columns: a unit an input column, then a unit a bin; tuning.column_plan),
lanes.pool_lanes (a unit an output column: unrollable windows and equal adaptive bins;
tuning.lane_plan),
forward.pool_forward_masked for other looped windows, reduction.lane_row_mean / spread_mean
(reduction.vector_row_mean: a one-unit cube a few rows as vectors, tuning.vector_row_plan)
for global average and its backward, and scatter.py's backward passes (a cube a plane,
summed in torch's order into shared memory; chosen by tuning.scatter_backward; averages of
unrollable 1-/2-D windows a unit an output column, scatter.cols_avg_backward; max pooling
whose windows tile large planes, tiles.tiled_max_backward, a unit an output writing its
window, with the scatter gated to planes whose indices stray). Sums are F32 and
results are cast once to the input dtype; indices are I64 flat positions in a plane.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.replay import replayable

from .backward import pool_backward, pool_backward_cells, pool_backward_taps
from .bins import pool_bins
from .columns import max_bins_columns
from .forward import pool_forward, pool_forward_masked, pool_forward_taps, widen
from .lanes import pool_lanes, pool_plane_lanes
from .problem import PoolingError, PoolProblem, adaptive_problem, check_grad, window_problem
from .reduction import lane_row_mean, plane_mean, spread_mean, vector_row_mean
from .scatter import cols_avg_backward, rows_avg_backward, scatter_avg_backward, scatter_max_backward
from .tiles import tiled_max_backward
from ..validation import aligned
from ..streaming import streams
from .rows import pool_rows
from .tuning import (BIN_F32_POSITIONS, ELEMENT_UNITS, GRID_Y, LANE_UNITS, bin_packing,
                     bin_row_widening, bin_rows, cell_backward, cells, column_plan, column_units, element_plan,
                     f64_positions, lane_plan, lane_row_plan, outputs_per_unit, plane_in_shared, reduction_plan,
                     row_vector_outputs, scatter_backward, tiled_plan, tiled_windows, unrolled_taps, vector_row_plan,
                     vector_lanes, widened_input, window_taps)

__all__ = ["PoolingError",
           "max_pool1d", "max_pool2d", "max_pool3d",
           "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
           "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
           "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
           "max_pool1d_backward", "max_pool2d_backward", "max_pool3d_backward",
           "avg_pool1d_backward", "avg_pool2d_backward", "avg_pool3d_backward",
           "adaptive_avg_pool1d_backward", "adaptive_avg_pool2d_backward", "adaptive_avg_pool3d_backward",
           "adaptive_max_pool1d_backward", "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward"]


# ---------------------------------------------------------------------------- generic forms
def _max_pool(fn, dims, input, kernel_size, stride, padding, dilation, ceil_mode, indices: bool):  # noqa: A002
    p = window_problem(fn, dims, input, kernel_size, stride, padding, dilation, ceil_mode)
    out, idx = _forward(p, maximum=True, indices=indices)
    return (out, idx) if indices else out


def _avg_pool(fn, dims, input, kernel_size, stride, padding, ceil_mode, count_include_pad,  # noqa: A002
              divisor_override):
    p = window_problem(fn, dims, input, kernel_size, stride, padding, 1, ceil_mode, count_include_pad,
                       divisor_override)
    return _forward(p, maximum=False, indices=False)[0]


def _adaptive(fn, dims, input, output_size, maximum: bool):  # noqa: A002
    p = adaptive_problem(fn, dims, input, output_size)
    out, idx = _forward(p, maximum=maximum, indices=maximum)
    return (out, idx) if maximum else out


def _max_pool_backward(fn, dims, input, grad, indices, kernel_size, stride, padding, dilation,  # noqa: A002
                       ceil_mode):
    p = window_problem(fn, dims, input, kernel_size, stride, padding, dilation, ceil_mode)
    check_grad(fn, p, grad, indices)
    return _backward(p, grad, indices, maximum=True)


def _avg_pool_backward(fn, dims, input, grad, kernel_size, stride, padding, ceil_mode,  # noqa: A002
                       count_include_pad, divisor_override):
    p = window_problem(fn, dims, input, kernel_size, stride, padding, 1, ceil_mode, count_include_pad,
                       divisor_override)
    check_grad(fn, p, grad)
    return _backward(p, grad, None, maximum=False)


def _adaptive_backward(fn, dims, input, grad, indices, output_size, maximum: bool):  # noqa: A002
    if output_size is None and isinstance(grad, kd.Tensor) and grad.ndim >= dims:
        output_size = tuple(grad.shape[-dims:])  # the forward's output size, read from grad
    p = adaptive_problem(fn, dims, input, output_size)
    check_grad(fn, p, grad, indices)
    return _backward(p, grad, indices, maximum=maximum)


# ---------------------------------------------------------------------------- launches
def _geometry(p: PoolProblem) -> tuple:
    """The kernels' 19 geometry arguments: sizes, outputs, kernels, strides, paddings,
    dilations (depth, height, width each) and divisor_override (0 for none)."""
    ax = p.axes
    return (*(a.size for a in ax), *(a.out for a in ax), *(a.kernel for a in ax), *(a.stride for a in ax),
            *(a.padding for a in ax), *(a.dilation for a in ax), p.divisor)


def _unrolled_geometry(p: PoolProblem) -> tuple:
    """The unrolled-taps kernels' geometry: sizes, outputs, paddings, dilations and
    divisor_override as run-time values, then kernel sizes and strides (compile-time)."""
    ax = p.axes
    return (*(a.size for a in ax), *(a.out for a in ax), *(a.padding for a in ax), *(a.dilation for a in ax),
            p.divisor, *(a.kernel for a in ax), *(a.stride for a in ax))


def _forward(p: PoolProblem, maximum: bool, indices: bool) -> tuple:
    rt, x = p.runtime, p.input
    out = rt.empty(p.out_shape, x.dtype)
    idx = rt.empty(p.out_shape, kd.i64) if indices else None
    if p.planes == 0:
        return out, idx
    flat_in = x.contiguous().reshape(p.planes * p.in_spatial)
    total = p.planes * p.out_spatial
    if p.is_global_average and not maximum and rt.capabilities.units_are_simd_lanes:
        rows = vector_row_plan(p.planes, p.in_spatial, x.dtype.itemsize)
        if rows is not None:
            vector_row_mean[rows.grid, 1](flat_in, out.reshape(total), p.planes, p.in_spatial, rows.size,
                                          rows.rows_per_cube, rows.lanes, rows.accumulators)
            return out, idx
        grid, block = lane_row_plan(rt.capabilities, p.planes, p.in_spatial)
        lane_row_mean[grid, block](flat_in, out.reshape(total), p.planes, p.in_spatial)
        return out, idx
    if p.is_global_average and not maximum:
        lanes = vector_lanes(x.dtype.itemsize, p.in_spatial, flat_in.offset)
        plan = reduction_plan(rt.capabilities, p.planes, p.in_spatial, lanes)
        if plan is not None:
            plane_mean[plan.grid, plan.block](flat_in, out.reshape(total), p.planes, p.in_spatial, lanes, plan.seg)
            return out, idx
    sink = idx.reshape(total) if indices else rt.empty((1,), kd.i64)
    if _rows(p, flat_in, out.reshape(total), sink, maximum, indices):
        return out, idx
    columns = column_plan(rt.capabilities, p) if maximum and indices else None
    if columns:   # units are SIMD lanes, equal adaptive max bins: down the columns, then across
        od, oh, ih, iw, ow, *bins = columns.geometry
        gy = -(-p.planes // GRID_Y)
        max_bins_columns[(-(-p.planes // gy), gy), iw](flat_in, out.reshape(total), sink, p.planes, od, oh, ih, iw, ow,
                                                       *bins, columns.rows, columns.step)
        return out, idx
    if bin_rows(rt.capabilities, p):   # units are SIMD lanes, equal adaptive bins, narrow rows: scalar units
        ax = p.axes
        gy = -(-p.planes // GRID_Y)
        pool_bins[(-(-p.planes // gy), gy), 1](flat_in, out.reshape(total), sink, p.planes, ax[0].out, ax[1].out,
                                               ax[1].size, ax[2].size, ax[2].out, *(a.size // a.out for a in ax),
                                               maximum, indices, p.in_spatial < BIN_F32_POSITIONS,
                                               bin_row_widening(p, flat_in.dtype, maximum),
                                               bin_packing(flat_in.dtype))
        return out, idx
    lanes = lane_plan(rt.capabilities, p)
    if lanes is not None and lanes.flat:   # units are SIMD lanes, narrow rows: a unit an output of the plane
        ax, (kd_, kh, kw) = p.axes, lanes.windows
        pool_plane_lanes[lanes.grid, lanes.bx](flat_in, out.reshape(total), sink, *(a.size for a in ax),
                                               *(a.out for a in ax), kd_[2], kh[2], kw[2], p.divisor, kd_[0], kh[0],
                                               kw[0], kd_[1], kh[1], kw[1], kd_[3], kh[3], kw[3], maximum, p.adaptive,
                                               p.count_include_pad, indices, lanes.planes, lanes.bx)
        return out, idx
    if lanes is not None:   # units are SIMD lanes: a unit an output column, its taps vector loads
        ax, (kd_, kh, kw) = p.axes, lanes.windows
        pool_lanes[lanes.grid, lanes.bx](flat_in, out.reshape(total), sink, ax[0].out * ax[1].out,
                                         *(a.size for a in ax), *(a.out for a in ax), kd_[2], kh[2], kw[2],
                                         p.divisor, kd_[0], kh[0], kw[0], kd_[1], kh[1], kw[1], kd_[3], kh[3],
                                         kw[3], maximum, p.adaptive, p.count_include_pad, indices, lanes.planes,
                                         lanes.bx)
        return out, idx
    rows, width = total // p.axes[2].out, p.axes[2].out
    if unrolled_taps(p):
        if widened_input(rt.capabilities, x.dtype.itemsize):
            flat_in = _widened(flat_in)
        outs = outputs_per_unit(rt.capabilities, width)
        plan = element_plan(rows, -(-width // outs))
        pool_forward_taps[plan.grid, plan.block](flat_in, out.reshape(total), sink, rows, *_unrolled_geometry(p),
                                                 maximum, p.dims, p.count_include_pad, indices, outs,
                                                 f64_positions(rt.capabilities, flat_in.dtype.itemsize))
        return out, idx
    plan = element_plan(rows, width)
    if rt.capabilities.units_are_simd_lanes:
        pool_forward_masked[plan.grid, plan.block](flat_in, out.reshape(total), sink, rows, *_geometry(p),
                                                   *window_taps(p), maximum, p.adaptive, p.wide, p.dims,
                                                   p.count_include_pad, indices)
        return out, idx
    pool_forward[plan.grid, plan.block](flat_in, out.reshape(total), sink, rows, *_geometry(p), maximum,
                                        p.adaptive, p.wide, p.dims, p.count_include_pad, indices)
    return out, idx


def _widened(flat: kd.Tensor) -> kd.Tensor:
    """An f32 copy of a 1-D tensor (forward.widen)."""
    n = flat.shape[0]
    wide = flat.runtime.empty((n,), kd.f32)
    cubes = -(-n // ELEMENT_UNITS)
    gy = -(-cubes // GRID_Y)
    widen[(-(-cubes // gy), gy), ELEMENT_UNITS](flat, wide, n)
    return wide


def _rows(p: PoolProblem, flat_in, flat_out, sink, maximum: bool, indices: bool) -> bool:
    """Launch rows.pool_rows where it applies (tuning.row_vector_outputs); False where not."""
    outs = row_vector_outputs(p.runtime.capabilities, p, flat_in.dtype.itemsize, flat_in.offset)
    if outs == 0 or not aligned(flat_in, outs * p.axes[2].stride):  # (imported memory may start anywhere)
        return False
    h, w = p.axes[1], p.axes[2]
    units = p.planes * h.out * -(-w.out // outs)
    cubes = -(-units // ELEMENT_UNITS)
    gy = -(-cubes // GRID_Y)
    pool_rows[(-(-cubes // gy), gy), ELEMENT_UNITS](flat_in, flat_out, sink, units, p.divisor, h.size, w.size, h.out,
                                                    w.out, h.kernel, w.kernel, h.stride, w.stride, h.padding,
                                                    w.padding, outs, maximum, p.count_include_pad, indices)
    return True


def _backward(p: PoolProblem, grad, indices, maximum: bool) -> kd.Tensor:
    rt, x = p.runtime, p.input
    dx = rt.empty(x.shape, x.dtype)
    if p.planes == 0:
        return dx
    total = p.planes * p.in_spatial
    outs = p.planes * p.out_spatial
    g = grad.contiguous().reshape(outs)
    caps = rt.capabilities
    if p.is_global_average and not maximum and caps.units_are_simd_lanes:
        grid, block = lane_row_plan(caps, p.planes, p.in_spatial)
        spread_mean[grid, block](g, dx.reshape(total), p.planes, *(a.size for a in p.axes),
                                 streams(caps, total * x.dtype.itemsize, p.in_spatial * x.dtype.itemsize))
        return dx
    windows = tiled_windows(caps, p) if maximum else None
    if windows:   # each input in one window: written once from its window's output, strays redone below
        idx = indices.contiguous().reshape(outs)
        stray = rt.zeros((p.planes,), kd.i32)
        ax = p.axes
        rows = p.planes * ax[0].out * ax[1].out
        grid, units = tiled_plan(rows, ax[2].out)
        tiled_max_backward[grid, units](g, idx, dx.reshape(total), stray, rows, ax[0].out, ax[1].out, ax[2].out,
                                        ax[1].size, ax[2].size, *windows, units,
                                        streams(caps, total * x.dtype.itemsize))
        _scatter(p, g, idx, dx.reshape(total), maximum, stray)
        return dx
    if scatter_backward(caps, p, maximum):
        _scatter(p, g, indices, dx.reshape(total), maximum)
        return dx
    idx = indices.contiguous().reshape(outs) if maximum else rt.empty((1,), kd.i64)
    if cell_backward(p):
        ax = p.axes
        cd, ch, cw = (cells(a) for a in ax)
        plan = element_plan(p.planes * cd * ch, cw)
        pool_backward_cells[plan.grid, plan.block](
            g, idx, dx.reshape(total), p.planes * cd * ch, *(a.size for a in ax), *(a.out for a in ax), cd, ch, cw,
            *(a.padding for a in ax), p.divisor, *(a.kernel for a in ax), *(a.stride for a in ax),
            *(-(-a.kernel // a.stride) for a in ax), maximum, p.dims, p.count_include_pad)
        return dx
    rows, width = total // p.axes[2].size, p.axes[2].size
    plan = element_plan(rows, width)
    if unrolled_taps(p):
        pool_backward_taps[plan.grid, plan.block](g, idx, dx.reshape(total), rows, *_unrolled_geometry(p), maximum,
                                                  p.dims, p.count_include_pad)
        return dx
    pool_backward[plan.grid, plan.block](g, idx, dx.reshape(total), rows, *_geometry(p), maximum, p.adaptive,
                                         p.wide, p.dims, p.count_include_pad, p.is_global_average and not maximum)
    return dx


def _scatter(p: PoolProblem, g, indices, flat_dx, maximum: bool, stray=None) -> None:
    """scatter.py's backward kernels, a cube a plane: max pooling through the indices (planes
    too large for shared memory summed in global memory: an F32 dx itself, else a workspace
    plane a core, each core's cube taking its share of the planes; with `stray`, the planes it
    marks only, after tiles.tiled_max_backward);
    average pooling of 1 or 2 axes with windows small enough to unroll a unit an output column
    (cols_avg_backward, where its padded plane fits; else by rows of the plane), other
    averages one output at a time."""
    gy = -(-p.planes // GRID_Y)
    grid = (-(-p.planes // gy), gy)
    caps = p.runtime.capabilities
    item = flat_dx.dtype.itemsize
    stream = streams(caps, flat_dx.size * item, p.in_spatial * item)  # (dx is only written, a plane at a time)
    if maximum:
        idx = indices.contiguous().reshape(p.planes * p.out_spatial)
        shared = plane_in_shared(caps, p)
        in_place = not shared and flat_dx.dtype == kd.f32
        if not shared and not in_place:  # a cube a core, each summing its planes in one F32 plane of `work`
            grid = (min(p.planes, max(caps.compute_units, 1)), 1)
        work = flat_dx if in_place else p.runtime.empty((1 if shared else grid[0] * p.in_spatial,), kd.f32)
        gate = stray if stray is not None else p.runtime.empty((1,), kd.i32)
        scatter_max_backward[grid, LANE_UNITS](g, idx, flat_dx, work, gate, p.planes, p.out_spatial, p.in_spatial,
                                               not shared, in_place, stream and shared, stray is not None)
        return
    ax = p.axes
    if p.dims <= 2 and not p.adaptive and unrolled_taps(p):
        h, w = ax[1], ax[2]
        stream = streams(caps, flat_dx.size * item, w.size * item)  # (a row at a time)
        bx = column_units(caps, p)
        if bx:
            cols_avg_backward[grid, bx](g, flat_dx, p.planes, p.divisor, h.size, w.size, h.out, w.out, h.kernel,
                                        w.kernel, h.stride, w.stride, h.padding, w.padding, p.count_include_pad, bx,
                                        stream)
            return
        rows_avg_backward[grid, LANE_UNITS](g, flat_dx, p.planes, p.divisor, h.size, w.size, h.out, w.out, h.kernel,
                                            w.kernel, h.stride, w.stride, h.padding, w.padding, p.count_include_pad,
                                            stream)
        return
    scatter_avg_backward[grid, LANE_UNITS](g, flat_dx, p.planes, *(a.out for a in ax), *(a.kernel for a in ax),
                                           *(a.stride for a in ax), *(a.padding for a in ax), p.divisor,
                                           *(a.size for a in ax), p.adaptive, p.wide, p.dims, p.count_include_pad,
                                           stream)


# ---------------------------------------------------------------------------- max pooling
@replayable
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False) -> kd.Tensor:  # noqa: A002
    """Max over windows of [N, C, L] (or [C, L]), as torch.nn.functional.max_pool1d."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, False)


@replayable
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False) -> kd.Tensor:  # noqa: A002
    """Max over windows of [N, C, H, W] (or [C, H, W]), as torch.nn.functional.max_pool2d."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, False)


@replayable
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False) -> kd.Tensor:  # noqa: A002
    """Max over windows of [N, C, D, H, W] (or [C, D, H, W]), as torch.nn.functional.max_pool3d."""
    return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, False)


@replayable
def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False) -> tuple:
    """(out, indices): max_pool1d and the I64 position of each maximum in its plane."""
    return _max_pool("max_pool1d_with_indices", 1, input, kernel_size, stride, padding, dilation, ceil_mode, True)


@replayable
def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False) -> tuple:
    """(out, indices): max_pool2d and the I64 flat position (h·W + w) of each maximum in its plane."""
    return _max_pool("max_pool2d_with_indices", 2, input, kernel_size, stride, padding, dilation, ceil_mode, True)


@replayable
def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False) -> tuple:
    """(out, indices): max_pool3d and the I64 flat position ((d·H + h)·W + w) of each maximum."""
    return _max_pool("max_pool3d_with_indices", 3, input, kernel_size, stride, padding, dilation, ceil_mode, True)


# ---------------------------------------------------------------------------- average pooling
@replayable
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,  # noqa: A002
               divisor_override=None) -> kd.Tensor:
    """Mean over windows of [N, C, L], as torch.nn.functional.avg_pool1d."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@replayable
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,  # noqa: A002
               divisor_override=None) -> kd.Tensor:
    """Mean over windows of [N, C, H, W], as torch.nn.functional.avg_pool2d."""
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@replayable
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,  # noqa: A002
               divisor_override=None) -> kd.Tensor:
    """Mean over windows of [N, C, D, H, W], as torch.nn.functional.avg_pool3d."""
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


# ---------------------------------------------------------------------------- adaptive pooling
@replayable
def adaptive_avg_pool1d(input, output_size) -> kd.Tensor:  # noqa: A002
    """Mean over the bins [floor(i·L/O), ceil((i+1)·L/O)), as torch.nn.functional.adaptive_avg_pool1d."""
    return _adaptive("adaptive_avg_pool1d", 1, input, output_size, False)


@replayable
def adaptive_avg_pool2d(input, output_size) -> kd.Tensor:  # noqa: A002
    """Mean over adaptive bins of H and W; output_size 1 is global average pooling."""
    return _adaptive("adaptive_avg_pool2d", 2, input, output_size, False)


@replayable
def adaptive_avg_pool3d(input, output_size) -> kd.Tensor:  # noqa: A002
    """Mean over adaptive bins of D, H and W."""
    return _adaptive("adaptive_avg_pool3d", 3, input, output_size, False)


@replayable
def adaptive_max_pool1d(input, output_size) -> tuple:  # noqa: A002
    """(out, indices): max over adaptive bins of L, as torch.nn.functional.adaptive_max_pool1d."""
    return _adaptive("adaptive_max_pool1d", 1, input, output_size, True)


@replayable
def adaptive_max_pool2d(input, output_size) -> tuple:  # noqa: A002
    """(out, indices): max over adaptive bins of H and W."""
    return _adaptive("adaptive_max_pool2d", 2, input, output_size, True)


@replayable
def adaptive_max_pool3d(input, output_size) -> tuple:  # noqa: A002
    """(out, indices): max over adaptive bins of D, H and W."""
    return _adaptive("adaptive_max_pool3d", 3, input, output_size, True)


# ---------------------------------------------------------------------------- backward
@replayable
def max_pool1d_backward(input, grad, indices, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                        ceil_mode=False) -> kd.Tensor:
    """The gradient w.r.t. input of max_pool1d, from the forward's indices."""
    return _max_pool_backward("max_pool1d_backward", 1, input, grad, indices, kernel_size, stride, padding,
                              dilation, ceil_mode)


@replayable
def max_pool2d_backward(input, grad, indices, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                        ceil_mode=False) -> kd.Tensor:
    """The gradient w.r.t. input of max_pool2d, from the forward's indices."""
    return _max_pool_backward("max_pool2d_backward", 2, input, grad, indices, kernel_size, stride, padding,
                              dilation, ceil_mode)


@replayable
def max_pool3d_backward(input, grad, indices, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                        ceil_mode=False) -> kd.Tensor:
    """The gradient w.r.t. input of max_pool3d, from the forward's indices."""
    return _max_pool_backward("max_pool3d_backward", 3, input, grad, indices, kernel_size, stride, padding,
                              dilation, ceil_mode)


@replayable
def avg_pool1d_backward(input, grad, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
                        count_include_pad=True, divisor_override=None) -> kd.Tensor:
    """The gradient w.r.t. input of avg_pool1d."""
    return _avg_pool_backward("avg_pool1d_backward", 1, input, grad, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@replayable
def avg_pool2d_backward(input, grad, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
                        count_include_pad=True, divisor_override=None) -> kd.Tensor:
    """The gradient w.r.t. input of avg_pool2d."""
    return _avg_pool_backward("avg_pool2d_backward", 2, input, grad, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@replayable
def avg_pool3d_backward(input, grad, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
                        count_include_pad=True, divisor_override=None) -> kd.Tensor:
    """The gradient w.r.t. input of avg_pool3d."""
    return _avg_pool_backward("avg_pool3d_backward", 3, input, grad, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@replayable
def adaptive_avg_pool1d_backward(input, grad, output_size=None) -> kd.Tensor:  # noqa: A002
    """The gradient w.r.t. input of adaptive_avg_pool1d (output_size defaults to grad's)."""
    return _adaptive_backward("adaptive_avg_pool1d_backward", 1, input, grad, None, output_size, False)


@replayable
def adaptive_avg_pool2d_backward(input, grad, output_size=None) -> kd.Tensor:  # noqa: A002
    """The gradient w.r.t. input of adaptive_avg_pool2d (output_size defaults to grad's)."""
    return _adaptive_backward("adaptive_avg_pool2d_backward", 2, input, grad, None, output_size, False)


@replayable
def adaptive_avg_pool3d_backward(input, grad, output_size=None) -> kd.Tensor:  # noqa: A002
    """The gradient w.r.t. input of adaptive_avg_pool3d (output_size defaults to grad's)."""
    return _adaptive_backward("adaptive_avg_pool3d_backward", 3, input, grad, None, output_size, False)


@replayable
def adaptive_max_pool1d_backward(input, grad, indices, output_size=None) -> kd.Tensor:  # noqa: A002
    """The gradient w.r.t. input of adaptive_max_pool1d, from the forward's indices."""
    return _adaptive_backward("adaptive_max_pool1d_backward", 1, input, grad, indices, output_size, True)


@replayable
def adaptive_max_pool2d_backward(input, grad, indices, output_size=None) -> kd.Tensor:  # noqa: A002
    """The gradient w.r.t. input of adaptive_max_pool2d, from the forward's indices."""
    return _adaptive_backward("adaptive_max_pool2d_backward", 2, input, grad, indices, output_size, True)


@replayable
def adaptive_max_pool3d_backward(input, grad, indices, output_size=None) -> kd.Tensor:  # noqa: A002
    """The gradient w.r.t. input of adaptive_max_pool3d, from the forward's indices."""
    return _adaptive_backward("adaptive_max_pool3d_backward", 3, input, grad, indices, output_size, True)
