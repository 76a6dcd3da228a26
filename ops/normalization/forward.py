"""Forward kernels that keep the row in registers: LayerNorm / RMSNorm (one kernel,
`RMS` picks the statistic) and softmax over the last axis. (looped.py has the forms
for rows too long for registers, and for the cpu runtime.)

Each unit loads CH chunks of L elements (chunk c of unit t starts at column
(c*BX + t)*L, so consecutive units read consecutive memory), all loads issued
before any is used, reduces, and writes from the values it holds: the input is read
from memory once. MASK is False when the chunks tile the row exactly (the usual
power-of-two widths): no load or store then needs a test.

Every kernel works on a [rows, width] view with unit stride along the row and
`x_stride` elements between rows; outputs are packed. Statistics are f32; the norm
kernels always store rstd (and mean for LayerNorm): 8 bytes a row, and one kernel
fewer to compile than making it optional.
"""
from __future__ import annotations

import kerneldsl as kd

from .device import (chunk_in, chunks_total, exp_minus, lanes_of, lanes_sum, load_chunks, row_max, row_mean_m2,
                     row_offsets, row_sum, store, sum_sq_dev, vec_of)


@kd.func
def masked_sq_dev(v, mean, ok):
    """(v - mean)^2, or 0 for a chunk outside the row."""
    d = kd.select(ok, v - mean, 0.0)
    return d * d


@kd.func
def max_ignoring_nan(m, v):
    """The running row max: NaNs need not reach it, since exp(NaN - max) makes the sum,
    and so the whole row, NaN anyway (two instructions on a CPU instead of six)."""
    r = kd.select(v > m, v, m)
    return r


@kd.func
def lanes_max_ignoring_nan(v, L):
    """The largest lane of a chunk, NaNs skipped (see max_ignoring_nan)."""
    if L == 1:
        m = v
    else:
        m = v[0]
        for k in kd.unroll(1, L):
            m = max_ignoring_nan(m, v[k])
    return m


@kd.func
def masked_exp(v, m, ok, FAST, L):
    """exp(v - m), or 0 for a chunk outside the row."""
    e = kd.select(ok, exp_minus(v, m, FAST, L), 0.0)
    return e


@kd.func
def unit_moments(vals, acc, BX, RY, CH, L):
    """(mean, M2) of a row whose chunks tile it exactly: each unit's own mean (acc / its
    CH*L values) and M2 from the values it holds, merged over the row (row_mean_m2)."""
    mu = acc * (1.0 / (CH * L))
    q = kd.f32(0)
    for c in kd.unroll(CH):
        q += sum_sq_dev(vals[c], mu, L)
    return row_mean_m2(mu, q, CH * L, BX, RY)


@kd.func
def exact_stats(vals, acc, inv_w, eps, RMS, BX, RY, CH, L):
    """(mean, rstd) of a row whose chunks tile it exactly, from each unit's chunks and its
    chunks_total acc (mean 0 for RMS)."""
    mean = kd.f32(0)
    if RMS:
        ms = row_sum(acc, BX, RY) * inv_w
    else:
        mean, ms = unit_moments(vals, acc, BX, RY, CH, L)
        ms = ms * inv_w
    return (mean, kd.rsqrt(ms + eps))


@kd.func
def affine(v, mean, rstd, g, b, RMS, HAS_BETA, L):
    """One chunk of the normalised output: (v - mean)*rstd*g (+ b); v*rstd*g for RMS.
    Vector chunks (GPU runtimes; the cpu runtime's chunks are scalars) add beta with one
    fma a lane, (v - mean)*(rstd*g) + b: one instruction fewer per element."""
    if RMS:
        o = v * rstd * g
        if HAS_BETA:
            o = o + b
    elif HAS_BETA and L > 1:
        tv, tg, tb = lanes_of(v, L), lanes_of(g, L), lanes_of(b, L)
        a = ()
        for k in kd.unroll(L):
            a = a + (kd.fma(tv[k] - mean, rstd * tg[k], tb[k]),)
        o = vec_of(a, L)
    else:
        o = (v - mean) * rstd * g
        if HAS_BETA:
            o = o + b
    return o


@kd.func
def write_normalized(y, yb, vals, gamma, beta, mean, rstd, first, t, width, live, MASK, RMS, HAS_BETA, BX, N, L):
    """Store N chunks of output (live rows only). gamma and beta are loaded chunk by chunk:
    every row reads them, so they come from the nearest cache, and holding them all would
    cost a GPU as many registers again as the row itself."""
    for k in kd.unroll(N):
        f = first + k * BX * L
        g = load_chunks(gamma, 0, f, t, width, 0.0, MASK, BX, 1, L)[0]
        b = load_chunks(beta, 0, f, t, width, 0.0, MASK, BX, 1, L)[0] if HAS_BETA else g
        o = affine(vals[k], mean, rstd, g, b, RMS, HAS_BETA, L)
        if live and chunk_in(f, 0, t, width, MASK, BX, L):
            store(y, yb + f + t * L, o, L)


@kd.kernel
def norm_cached(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], beta: kd.Tensor[kd.f32, 1], y: kd.Tensor,
                mean_out: kd.Tensor[kd.f32, 1], rstd_out: kd.Tensor[kd.f32, 1],
                rows: kd.i32, width: kd.i32, x_stride: kd.i64, eps: kd.f32,
                RMS: kd.Const[bool], HAS_BETA: kd.Const[bool], MASK: kd.Const[bool],
                BX: kd.Const[int], RY: kd.Const[int], CH: kd.Const[int], L: kd.Const[int]):
    t = kd.unit_pos_x()
    row, live, xb, yb = row_offsets(rows, width, x_stride, RY)
    vals = load_chunks(x, xb, 0, t, width, 0.0, MASK, BX, CH, L)
    acc = chunks_total(vals, RMS, CH, L)
    inv_w = 1.0 / kd.f32(width)
    if MASK and not RMS:  # a ragged row: the mean first, then squares of the live lanes
        mean = row_sum(acc, BX, RY) * inv_w
        q = kd.f32(0)
        for c in kd.unroll(CH):
            q += lanes_sum(masked_sq_dev(vals[c], mean, chunk_in(0, c, t, width, MASK, BX, L)), L)
        rstd = kd.rsqrt(row_sum(q, BX, RY) * inv_w + eps)
    else:
        mean, rstd = exact_stats(vals, acc, inv_w, eps, RMS, BX, RY, CH, L)
    write_normalized(y, yb, vals, gamma, beta, mean, rstd, 0, t, width, live, MASK, RMS, HAS_BETA, BX, CH, L)
    if live and t == 0:
        if not RMS:
            mean_out[row] = mean
        rstd_out[row] = rstd


@kd.kernel
def softmax_cached(x: kd.Tensor, y: kd.Tensor, rows: kd.i32, width: kd.i32, x_stride: kd.i64,
                   FAST: kd.Const[bool], MASK: kd.Const[bool], BX: kd.Const[int], RY: kd.Const[int],
                   CH: kd.Const[int], L: kd.Const[int]):
    t = kd.unit_pos_x()
    row, live, xb, yb = row_offsets(rows, width, x_stride, RY)
    vals = load_chunks(x, xb, 0, t, width, -kd.inf, MASK, BX, CH, L)
    m = -kd.inf
    for c in kd.unroll(CH):
        m = max_ignoring_nan(m, lanes_max_ignoring_nan(vals[c], L))
    m = row_max(m, BX, RY)
    exps = ()
    s = kd.f32(0)
    for c in kd.unroll(CH):
        exps = exps + (masked_exp(vals[c], m, chunk_in(0, c, t, width, MASK, BX, L), FAST, L),)
        s += lanes_sum(exps[c], L)
    inv = 1.0 / row_sum(s, BX, RY)
    for c in kd.unroll(CH):
        if live and chunk_in(0, c, t, width, MASK, BX, L):
            store(y, yb + (c * BX + t) * L, exps[c] * inv, L)
