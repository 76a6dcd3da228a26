"""Forward kernels for rows longer than the registers hold (and for the cpu runtime):
units stride over the row U chunks of L elements per step, once per statistic and
once to write; the re-reads hit the cache the previous pass just filled.

Each pass is a main loop over whole steps, with no test on any load (units past the
last row read the last row and store nothing), and one masked tail step: on the cpu
runtime the main loops then run as plain SIMD loops. The main loops handle a step
chunk by chunk (LLVM vectorises that order best; with no branch between the loads a
GPU compiler still issues them together); the tail step loads all its chunks first.
The per-chunk work is a device function shared with forward.py's kernels.
Same [rows, width] view and outputs as forward.py.
"""
from __future__ import annotations

import kerneldsl as kd

from .device import chunk_in, exp_minus, lanes_sum, load_chunks, row_max, row_offsets, row_sum, store
from .forward import lanes_max_ignoring_nan, masked_exp, masked_sq_dev, max_ignoring_nan, write_normalized


@kd.func
def add_moments(acc, vals, RMS, N, L):
    """acc + Σ x (LayerNorm) or Σ x² (RMSNorm) over N chunks (outside the row they are 0)."""
    a = acc
    for k in kd.unroll(N):
        if RMS:
            a += lanes_sum(vals[k] * vals[k], L)
        else:
            a += lanes_sum(vals[k], L)
    return a


@kd.func
def add_sq_devs(q, vals, mean, first, t, width, MASK, BX, N, L):
    """q + Σ (x - mean)² over N chunks."""
    a = q
    for k in kd.unroll(N):
        a += lanes_sum(masked_sq_dev(vals[k], mean, chunk_in(first, k, t, width, MASK, BX, L)), L)
    return a


@kd.kernel
def norm_looped(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], beta: kd.Tensor[kd.f32, 1], y: kd.Tensor,
                mean_out: kd.Tensor[kd.f32, 1], rstd_out: kd.Tensor[kd.f32, 1],
                rows: kd.i32, width: kd.i32, x_stride: kd.i64, eps: kd.f32,
                RMS: kd.Const[bool], HAS_BETA: kd.Const[bool],
                BX: kd.Const[int], RY: kd.Const[int], U: kd.Const[int], L: kd.Const[int], STREAM: kd.Const[bool]):
    """LayerNorm / RMSNorm of rows of any width (module docstring). STREAM: y is large
    (ops/streaming.py) and written once, never read here: its stores bypass the caches."""
    if STREAM:
        kd.streaming_stores()
    t = kd.unit_pos_x()
    row, live, xb, yb = row_offsets(rows, width, x_stride, RY)
    STEP = BX * L * U
    full = width - width % STEP
    acc = kd.f32(0)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            f = i + u * BX * L
            acc = add_moments(acc, load_chunks(x, xb, f, t, width, 0.0, False, BX, 1, L), RMS, 1, L)
    if full < width:
        acc = add_moments(acc, load_chunks(x, xb, full, t, width, 0.0, True, BX, U, L), RMS, U, L)
    inv_w = 1.0 / kd.f32(width)
    mean = kd.f32(0)
    if RMS:
        ms = row_sum(acc, BX, RY) * inv_w
    else:
        mean = row_sum(acc, BX, RY) * inv_w
        q = kd.f32(0)
        for i in range(0, full, STEP):
            for u in kd.unroll(U):
                f = i + u * BX * L
                q = add_sq_devs(q, load_chunks(x, xb, f, t, width, 0.0, False, BX, 1, L), mean, f, t, width, False, BX,
                                1, L)
        if full < width:
            q = add_sq_devs(q, load_chunks(x, xb, full, t, width, 0.0, True, BX, U, L), mean, full, t, width, True, BX,
                            U, L)
        ms = row_sum(q, BX, RY) * inv_w
    rstd = kd.rsqrt(ms + eps)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            f = i + u * BX * L
            write_normalized(y, yb, load_chunks(x, xb, f, t, width, 0.0, False, BX, 1, L), gamma, beta, mean, rstd, f,
                             t, width, live, False, RMS, HAS_BETA, BX, 1, L)
    if full < width:
        write_normalized(y, yb, load_chunks(x, xb, full, t, width, 0.0, True, BX, U, L), gamma, beta, mean, rstd,
                         full, t, width, live, True, RMS, HAS_BETA, BX, U, L)
    if live and t == 0:
        if not RMS:
            mean_out[row] = mean
        rstd_out[row] = rstd


@kd.func
def max_of(m, vals, N, L):
    """The running max with N more chunks (NaNs skipped: see forward.max_ignoring_nan)."""
    a = m
    for k in kd.unroll(N):
        a = max_ignoring_nan(a, lanes_max_ignoring_nan(vals[k], L))
    return a


@kd.func
def add_exps(s, vals, y, scratch, yb, m, first, t, width, live, MASK, FAST, STAGE, BX, N, L):
    """s + Σ exp(x - m) over N chunks; the exps are also kept in y (STAGE 1) or in the
    cube's scratch row (STAGE 2, scalar chunks)."""
    a = s
    for k in kd.unroll(N):
        col = first + (k * BX + t) * L
        inside = chunk_in(first, k, t, width, MASK, BX, L)
        e = masked_exp(vals[k], m, inside, FAST, L)
        if STAGE == 1:
            if live and inside:
                store(y, yb + col, e, L)
        elif STAGE == 2:
            if inside:
                scratch[col] = e
        a += lanes_sum(e, L)
    return a


@kd.func
def write_softmax(x, y, scratch, xb, yb, m, inv, first, t, width, live, MASK, FAST, STAGE, BX, N, L):
    """Store N chunks of exp(x - m) * inv: from the staged exps (STAGE 1: y, 2: scratch)
    or computed again from x (STAGE 0)."""
    if STAGE == 1:
        vals = load_chunks(y, yb, first, t, width, 0.0, MASK, BX, N, L, cond=live)  # y exists for live rows only
    elif STAGE == 0:
        vals = load_chunks(x, xb, first, t, width, 0.0, MASK, BX, N, L)
    for k in kd.unroll(N):
        col = first + (k * BX + t) * L
        if live and chunk_in(first, k, t, width, MASK, BX, L):
            if STAGE == 1:
                store(y, yb + col, vals[k] * inv, L)
            elif STAGE == 2:
                store(y, yb + col, scratch[col] * inv, L)
            else:
                store(y, yb + col, exp_minus(vals[k], m, FAST, L) * inv, L)


@kd.kernel
def softmax_looped(x: kd.Tensor, y: kd.Tensor, rows: kd.i32, width: kd.i32, x_stride: kd.i64,
                   FAST: kd.Const[bool], STAGE: kd.Const[int], SCRATCH: kd.Const[int], BX: kd.Const[int],
                   RY: kd.Const[int], U: kd.Const[int], L: kd.Const[int]):
    """One exp per element instead of two where the exps can wait for the row's sum:
    STAGE 1 (f32 outputs) writes them to y and scales y in place; STAGE 2 (one row per
    cube, scalar chunks, width <= SCRATCH) keeps them in an f32 shared-memory row, so
    f16/bf16 outputs are still rounded once. STAGE 0 computes each exp twice."""
    t = kd.unit_pos_x()
    row, live, xb, yb = row_offsets(rows, width, x_stride, RY)
    STEP = BX * L * U
    full = width - width % STEP
    if STAGE == 2:
        scratch = kd.shared(kd.f32, SCRATCH)
    else:
        scratch = y  # not used
    m = -kd.inf
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            m = max_of(m, load_chunks(x, xb, i + u * BX * L, t, width, -kd.inf, False, BX, 1, L), 1, L)
    if full < width:
        m = max_of(m, load_chunks(x, xb, full, t, width, -kd.inf, True, BX, U, L), U, L)
    m = row_max(m, BX, RY)
    s = kd.f32(0)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            f = i + u * BX * L
            s = add_exps(s, load_chunks(x, xb, f, t, width, -kd.inf, False, BX, 1, L), y, scratch, yb, m, f, t, width,
                         live, False, FAST, STAGE, BX, 1, L)
    if full < width:
        s = add_exps(s, load_chunks(x, xb, full, t, width, -kd.inf, True, BX, U, L), y, scratch, yb, m, full, t,
                     width, live, True, FAST, STAGE, BX, U, L)
    inv = 1.0 / row_sum(s, BX, RY)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            write_softmax(x, y, scratch, xb, yb, m, inv, i + u * BX * L, t, width, live, False, FAST, STAGE, BX, 1, L)
    if full < width:
        write_softmax(x, y, scratch, xb, yb, m, inv, full, t, width, live, True, FAST, STAGE, BX, U, L)
