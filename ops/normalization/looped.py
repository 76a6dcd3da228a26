"""Forward kernels for rows longer than the registers hold (and for the cpu runtime):
units stride over the row U chunks of L elements per step, once per statistic and
once to write; the re-reads hit the cache the previous pass just filled.

Each pass is a main loop over whole steps, where only the row's own `live` flag
guards the accesses, and one masked tail step: on the cpu runtime the main loops
then run as plain SIMD loops. The per-chunk work of a pass is a device function
(`*_step`) called from both. Same [rows, width] view and outputs as forward.py.
"""
from __future__ import annotations

import kerneldsl as kd

from .device import exp_nonpos, lanes_sum, load_f32, row_index, row_max, row_sum, store
from .forward import lanes_max_ignoring_nan, masked_exp, masked_sq_dev, max_ignoring_nan, norm_out


@kd.func
def moment_step(acc, x, off, ok, RMS, L):
    """acc + Σ x (LayerNorm) or Σ x² (RMSNorm) over one chunk."""
    v = load_f32(x, off, ok, 0.0, L)
    if RMS:
        a = acc + lanes_sum(v * v, L)
    else:
        a = acc + lanes_sum(v, L)
    return a


@kd.func
def sq_dev_step(q, x, off, mean, ok, L):
    """q + Σ (x - mean)² over one chunk."""
    a = q + lanes_sum(masked_sq_dev(load_f32(x, off, ok, 0.0, L), mean, ok), L)
    return a


@kd.func
def norm_write_step(x, gamma, beta, y, xoff, yoff, col, mean, rstd, ok, RMS, HAS_BETA, L):
    if ok:
        store(y, yoff, norm_out(load_f32(x, xoff, True, 0.0, L), mean, rstd, gamma, beta, col, RMS, HAS_BETA, L), L)


@kd.kernel
def norm_looped(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], beta: kd.Tensor[kd.f32, 1], y: kd.Tensor,
                mean_out: kd.Tensor[kd.f32, 1], rstd_out: kd.Tensor[kd.f32, 1],
                rows: kd.i32, width: kd.i32, x_stride: kd.i64, eps: kd.f32,
                RMS: kd.Const[bool], HAS_BETA: kd.Const[bool],
                BX: kd.Const[int], RY: kd.Const[int], U: kd.Const[int], L: kd.Const[int]):
    row = row_index(RY)
    t = kd.unit_pos_x()
    live = row < rows
    xb = kd.i64(row) * x_stride
    yb = kd.i64(row) * width
    STEP = BX * L * U
    full = width - width % STEP
    acc = kd.f32(0)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            acc = moment_step(acc, x, xb + i + (u * BX + t) * L, live, RMS, L)
    if full < width:
        for u in kd.unroll(U):
            col = full + (u * BX + t) * L
            acc = moment_step(acc, x, xb + col, live and col < width, RMS, L)
    inv_w = 1.0 / kd.f32(width)
    mean = kd.f32(0)
    if RMS:
        ms = row_sum(acc, BX, RY) * inv_w
    else:
        mean = row_sum(acc, BX, RY) * inv_w
        q = kd.f32(0)
        for i in range(0, full, STEP):
            for u in kd.unroll(U):
                q = sq_dev_step(q, x, xb + i + (u * BX + t) * L, mean, live, L)
        if full < width:
            for u in kd.unroll(U):
                col = full + (u * BX + t) * L
                q = sq_dev_step(q, x, xb + col, mean, live and col < width, L)
        ms = row_sum(q, BX, RY) * inv_w
    rstd = kd.rsqrt(ms + eps)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            c = i + (u * BX + t) * L
            norm_write_step(x, gamma, beta, y, xb + c, yb + c, c, mean, rstd, live, RMS, HAS_BETA, L)
    if full < width:
        for u in kd.unroll(U):
            col = full + (u * BX + t) * L
            norm_write_step(x, gamma, beta, y, xb + col, yb + col, col, mean, rstd, live and col < width, RMS,
                            HAS_BETA, L)
    if live and t == 0:
        if not RMS:
            mean_out[row] = mean
        rstd_out[row] = rstd


@kd.func
def max_step(m, x, off, ok, L):
    a = max_ignoring_nan(m, lanes_max_ignoring_nan(load_f32(x, off, ok, -kd.inf, L), L))
    return a


@kd.func
def exp_step(s, x, y, scratch, xoff, yoff, col, m, ok, FAST, STAGE, L):
    """s + Σ exp(x - m) over one chunk; the exps are also kept in y (STAGE 1) or in the
    cube's scratch row (STAGE 2, scalar chunks)."""
    e = masked_exp(load_f32(x, xoff, ok, -kd.inf, L), m, ok, FAST, L)
    if STAGE == 1:
        if ok:
            store(y, yoff, e, L)
    elif STAGE == 2:
        if ok:
            scratch[col] = e
    a = s + lanes_sum(e, L)
    return a


@kd.func
def softmax_write_step(x, y, scratch, xoff, yoff, col, m, inv, ok, FAST, STAGE, L):
    if ok:
        if STAGE == 1:
            store(y, yoff, load_f32(y, yoff, True, 0.0, L) * inv, L)
        elif STAGE == 2:
            store(y, yoff, scratch[col] * inv, L)
        else:
            store(y, yoff, exp_nonpos(load_f32(x, xoff, True, 0.0, L) - m, FAST, L) * inv, L)


@kd.kernel
def softmax_looped(x: kd.Tensor, y: kd.Tensor, rows: kd.i32, width: kd.i32, x_stride: kd.i64,
                   FAST: kd.Const[bool], STAGE: kd.Const[int], SCRATCH: kd.Const[int], BX: kd.Const[int],
                   RY: kd.Const[int], U: kd.Const[int], L: kd.Const[int]):
    """One exp per element instead of two where the exps can wait for the row's sum:
    STAGE 1 (f32 outputs) writes them to y and scales y in place; STAGE 2 (one row per
    cube, scalar chunks, width <= SCRATCH) keeps them in an f32 shared-memory row, so
    f16/bf16 outputs are still rounded once. STAGE 0 computes each exp twice."""
    row = row_index(RY)
    t = kd.unit_pos_x()
    live = row < rows
    xb = kd.i64(row) * x_stride
    yb = kd.i64(row) * width
    STEP = BX * L * U
    full = width - width % STEP
    if STAGE == 2:
        scratch = kd.shared(kd.f32, SCRATCH)
    else:
        scratch = y  # not used
    m = -kd.inf
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            m = max_step(m, x, xb + i + (u * BX + t) * L, live, L)
    if full < width:
        for u in kd.unroll(U):
            col = full + (u * BX + t) * L
            m = max_step(m, x, xb + col, live and col < width, L)
    m = row_max(m, BX, RY)
    s = kd.f32(0)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            c = i + (u * BX + t) * L
            s = exp_step(s, x, y, scratch, xb + c, yb + c, c, m, live, FAST, STAGE, L)
    if full < width:
        for u in kd.unroll(U):
            col = full + (u * BX + t) * L
            s = exp_step(s, x, y, scratch, xb + col, yb + col, col, m, live and col < width, FAST, STAGE, L)
    inv = 1.0 / row_sum(s, BX, RY)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            c = i + (u * BX + t) * L
            softmax_write_step(x, y, scratch, xb + c, yb + c, c, m, inv, live, FAST, STAGE, L)
    if full < width:
        for u in kd.unroll(U):
            col = full + (u * BX + t) * L
            softmax_write_step(x, y, scratch, xb + col, yb + col, col, m, inv, live and col < width, FAST, STAGE,
                               L)
