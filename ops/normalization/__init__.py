"""rudnn.normalization: LayerNorm, RMSNorm and softmax over the last axis, with row
statistics and backward passes (SPEC §1), on every runtime.

Each entry point validates its call into a problem (problem.py), returns empty results
for zero rows without launching, views the input as [rows, W] (copying only if its
layout needs it), chooses a cube shape from W and the device's capabilities (tuning.py),
and launches the kernels of forward.py (rows held in registers), persistent.py and
paired.py (on GPUs with hardware async copies, LayerNorm/RMSNorm rows of 64 KiB or more
and bf16 LayerNorm rows of 8-32 KiB: persistent cubes that prefetch their next row into
shared memory, or several rows a cube sharing gamma and beta; see tuning.long_row_plan
and tuning.short_row_plan), packed.py (bf16 rows held in registers as packed pairs, when
their 16-byte chunks tile the row), looped.py (longer rows, and devices whose units are
SIMD lanes) or backward.py. Statistics are F32; outputs are cast once to the input dtype;
gamma, beta, mean, rstd, dgamma and dbeta are F32.
"""
from __future__ import annotations

import dataclasses

import kerneldsl as kd
from kerneldsl.replay import replayable

from . import backward as _bwd
from . import forward as _fwd
from . import looped as _loop
from . import packed as _packed
from . import paired as _paired
from . import persistent as _persist
from .problem import NormalizationError, backward_problem, forward_problem, softmax_problem
from ..streaming import streams
from .tuning import (PACKED_LN_CHUNKS, choose_shape, deepen, long_row_plan, persistent_grid, rows_view,
                     short_row_plan, vector_lanes, words_view)

__all__ = ["NormalizationError", "layer_norm", "rms_norm", "softmax_last_axis", "layer_norm_with_stats",
           "layer_norm_backward", "rms_norm_with_stats", "rms_norm_backward"]

COL_UNITS = 256          # units per cube of the dgamma/dbeta column kernels
COL_TARGET_CUBES = 1024  # cubes the column-partial pass aims for (sets the rows per block)
ONE_PASS_ROWS = 64       # up to this many rows, dgamma/dbeta come from one launch (no partials)
ONE_LAUNCH_ELEMENTS = 16384  # and up to this many elements, dx too (backward.norm_bwd_small)
SOFTMAX_SCRATCH = 32768  # f32 row of shared memory (128 KiB) a SIMD-lane softmax keeps its exps in (looped.py)


@replayable
def layer_norm(input, gamma, beta=None, epsilon=1e-5) -> kd.Tensor:
    """(x - mean)·rsqrt(var + eps)·gamma (+ beta) over the last axis."""
    return _norm("layer_norm", input, gamma, beta, epsilon, rms=False)[0]


@replayable
def layer_norm_with_stats(input, gamma, beta=None, epsilon=1e-5) -> tuple:
    """(out, mean, rstd); mean and rstd are F32 of the input's shape without the last axis."""
    return _norm("layer_norm_with_stats", input, gamma, beta, epsilon, rms=False)


@replayable
def rms_norm(input, gamma, epsilon=1e-6) -> kd.Tensor:
    """x·rsqrt(mean(x²) + eps)·gamma over the last axis."""
    return _norm("rms_norm", input, gamma, None, epsilon, rms=True)[0]


@replayable
def rms_norm_with_stats(input, gamma, epsilon=1e-6) -> tuple:
    """(out, rstd); rstd is F32 of the input's shape without the last axis."""
    out, _, rstd = _norm("rms_norm_with_stats", input, gamma, None, epsilon, rms=True)
    return out, rstd


@replayable
def softmax_last_axis(input) -> kd.Tensor:
    """exp(x - max) / Σ exp(x - max) over the last axis, computed in F32."""
    p = softmax_problem("softmax_last_axis", input)
    rt, rows, width = p.runtime, p.rows, p.width
    out = rt.empty(input.shape, input.dtype)
    if rows == 0:
        return out
    x2, xs = rows_view(input)
    lanes = vector_lanes(input.dtype.itemsize, width, xs, x2.offset)
    shape = choose_shape(rt.capabilities, width, lanes)
    # units that are SIMD lanes: a polynomial exp (device.py); f32 rows scaled in place (looped.py)
    simd = rt.capabilities.units_are_simd_lanes
    y2 = out.reshape(rows, width)
    if shape.cached:
        _fwd.softmax_cached[shape.grid(rows), shape.block](x2, y2, rows, width, xs, simd, shape.ragged(width),
                                                           shape.bx, shape.ry, shape.chunks, shape.lanes)
    else:
        stage = 0
        if simd and input.dtype is kd.f32:
            stage = 1
        elif simd and shape.ry == 1 and shape.lanes == 1 and width <= SOFTMAX_SCRATCH:
            stage = 2
        _loop.softmax_looped[shape.grid(rows), shape.block](x2, y2, rows, width, xs, simd, stage, SOFTMAX_SCRATCH,
                                                           shape.bx, shape.ry, shape.chunks, shape.lanes)
    return out


@replayable
def layer_norm_backward(input, gamma, grad, mean, rstd) -> tuple:
    """(dx, dgamma, dbeta) of layer_norm, from the forward pass's mean and rstd."""
    return _norm_backward("layer_norm_backward", input, gamma, grad, mean, rstd, rms=False)


@replayable
def rms_norm_backward(input, gamma, grad, rstd) -> tuple:
    """(dx, dgamma) of rms_norm, from the forward pass's rstd."""
    dx, dgamma, _ = _norm_backward("rms_norm_backward", input, gamma, grad, None, rstd, rms=True)
    return dx, dgamma


# ---------------------------------------------------------------------------- forward
def _norm(fn, input, gamma, beta, epsilon, rms: bool) -> tuple:
    p = forward_problem(fn, input, gamma, beta, epsilon)
    rt, rows, width, eps = p.runtime, p.rows, p.width, p.epsilon
    out = rt.empty(input.shape, input.dtype)
    mean = rt.empty(p.stat_shape, kd.f32) if not rms else None
    rstd = rt.empty(p.stat_shape, kd.f32)
    if rows == 0:
        return out, mean, rstd
    x2, xs = rows_view(input)
    g = gamma.contiguous()
    b = beta.contiguous() if beta is not None else g
    lanes = vector_lanes(input.dtype.itemsize, width, xs, x2.offset, g.offset, b.offset)
    shape = choose_shape(rt.capabilities, width, lanes)
    r_out = rstd.reshape(rows)
    m_out = mean.reshape(rows) if mean is not None else r_out  # RMSNorm never stores a mean
    args = (x2, g, b, out.reshape(rows, width), m_out, r_out, rows, width, xs, eps, rms, beta is not None)
    plan = long_row_plan(rt.capabilities, shape, width, input.dtype.itemsize, rms)
    if plan is None:
        plan = short_row_plan(rt.capabilities, shape, width, input.dtype, rms)
    if plan is not None and plan.kernel == "persistent":
        _persist.norm_persistent[persistent_grid(rt, rows), shape.bx](*args, shape.bx, shape.chunks, shape.lanes)
    elif plan is not None:
        words = input.dtype is kd.bf16  # bf16 rows copied and widened as packed pairs (paired.py)
        xw, ws = words_view(x2, xs) if words else (x2, xs)
        _paired.norm_paired[dataclasses.replace(shape, ry=plan.nr).grid(rows), shape.bx](
            xw, *args[1:8], ws, *args[9:], shape.bx, shape.chunks, shape.lanes, plan.nr, plan.reg, words)
    elif shape.cached and input.dtype is kd.bf16 and shape.lanes == 8 and not shape.ragged(width):
        if not rms:
            shape = deepen(rt.capabilities, shape, width, PACKED_LN_CHUNKS)
        words, ws = words_view(x2, xs)
        keys = (_packed.SHIFT, _packed.HIGH) * 3
        _packed.norm_packed[shape.grid(rows), shape.block](words, *args[1:8], ws, eps, *keys, rms, beta is not None,
                                                           shape.bx, shape.ry, shape.chunks)
    elif shape.cached:
        _fwd.norm_cached[shape.grid(rows), shape.block](*args, shape.ragged(width), shape.bx, shape.ry, shape.chunks,
                                                        shape.lanes)
    else:
        _loop.norm_looped[shape.grid(rows), shape.block](*args, shape.bx, shape.ry, shape.chunks, shape.lanes,
                                                         streams(rt.capabilities, out.size * out.dtype.itemsize,
                                                                 out.shape[-1] * out.dtype.itemsize))
    return out, mean, rstd


# ---------------------------------------------------------------------------- backward
def _norm_backward(fn, input, gamma, grad, mean, rstd, rms: bool) -> tuple:
    p = backward_problem(fn, input, gamma, grad, mean, rstd, rms)
    rt, rows, width = p.runtime, p.rows, p.width
    dx = rt.empty(input.shape, input.dtype)
    if rows == 0:
        return dx, rt.zeros((width,), kd.f32), (None if rms else rt.zeros((width,), kd.f32))
    x2, xs = rows_view(input)
    g2, gs = rows_view(grad)
    gam = gamma.contiguous()
    rs = rstd.contiguous().reshape(rows)
    mu = mean.contiguous().reshape(rows) if not rms else rs
    if rows <= ONE_PASS_ROWS and rows * width <= ONE_LAUNCH_ELEMENTS:   # one launch: backward.norm_bwd_small
        dgamma = rt.empty((width,), kd.f32)
        dbeta = None if rms else rt.empty((width,), kd.f32)
        bx = min(COL_UNITS, max(32, 1 << (width - 1).bit_length()))
        _bwd.norm_bwd_small[-(-width // bx), bx](x2, gam, g2, mu, rs, dx.reshape(rows, width), dgamma,
                                                 dgamma if rms else dbeta, rows, width, xs, gs, rms, not rms, bx)
        return dx, dgamma, dbeta
    lanes = vector_lanes(min(input.dtype.itemsize, grad.dtype.itemsize), width, xs, gs, x2.offset, g2.offset,
                         gam.offset)
    shape = choose_shape(rt.capabilities, width, lanes)
    args = (x2, gam, g2, mu, rs, dx.reshape(rows, width), rows, width, xs, gs, rms)
    if shape.cached:
        _bwd.norm_bwd_cached[shape.grid(rows), shape.block](*args, shape.ragged(width), shape.bx, shape.ry,
                                                            shape.chunks, shape.lanes)
    else:
        _bwd.norm_bwd_looped[shape.grid(rows), shape.block](*args, shape.bx, shape.ry, shape.chunks, shape.lanes)
    dgamma, dbeta = _column_sums(rt, x2, g2, mu, rs, rows, width, xs, gs, rms)
    return dx, dgamma, dbeta


def _column_sums(rt, x2, g2, mu, rs, rows, width, xs, gs, rms) -> tuple:
    """dgamma (and dbeta for LayerNorm) as fixed-order sums of per-row-block partials, added in
    block order; for at most ONE_PASS_ROWS rows, one block summed in row order by one launch."""
    col_cubes = -(-width // COL_UNITS)
    blocks = 1 if rows <= ONE_PASS_ROWS else max(1, min(rows, -(-COL_TARGET_CUBES // col_cubes)))
    per_block = -(-rows // blocks)
    blocks = -(-rows // per_block)
    beta = not rms
    dgamma = rt.empty((width,), kd.f32)
    dbeta = rt.empty((width,), kd.f32) if beta else None
    if blocks == 1:
        part_g, part_b = dgamma, dbeta if beta else dgamma
    else:
        part_g = rt.empty((blocks * width,), kd.f32)
        part_b = rt.empty((blocks * width,), kd.f32) if beta else part_g
    _bwd.col_partials[(col_cubes, blocks), COL_UNITS](x2, g2, mu, rs, part_g, part_b, rows, width, xs, gs, per_block,
                                                     rms, beta, COL_UNITS)
    if blocks > 1:
        _bwd.col_finish[col_cubes, COL_UNITS](part_g, part_b, dgamma, dbeta if beta else dgamma, blocks, width, beta,
                                              COL_UNITS)
    return dgamma, dbeta
