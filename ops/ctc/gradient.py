"""The CTC gradient w.r.t. log_probs from alpha, beta and the nll, as PyTorch's autograd
gives it: grad[t, n, c] = g_n·(exp(lp[t, n, c]) − Σ_{s: l'_s = c} exp(α_t(s) + β_t(s) −
lp[t, n, c] + nll_n)) for t < input_length, 0 beyond; g_n is grad_out scaled for the
reduction (and 0 for an infinite loss under zero_infinity; an infinite loss otherwise
gives NaN, as PyTorch's does). The occupancies exp(α + β − lp + nll) are at most 1, so
the sums are taken in linear space.

One cube per (sample, block of TT time steps); per step and per chunk of CB classes the
units scatter the occupancies of their states into a shared F32 array with atomic adds,
then write the chunk's classes. Where units are SIMD lanes (the cpu runtime) a step's
occupancies are first computed into a shared array of STAGED floats by a loop with no
atomic in it, so its exponentials vectorise; the scatter then only adds (an atomic keeps a
unit loop scalar). Loss reduction (ctc_loss) is `reduce_loss`, one cube."""
from __future__ import annotations

import kerneldsl as kd

from .recursion import state_label

NONE, SUM, MEAN = 0, 1, 2  # reduction codes (Const)


@kd.func
def sample_loss(nll, tg_len, n, MODE, ZERO_INF):
    """Sample n's loss before the batch sum: nll (0 if infinite under zero_infinity), ÷ max(len, 1) for mean."""
    v = nll[n]
    if ZERO_INF:
        v = kd.select(kd.isinf(v), kd.f32(0.0), v)
    if MODE == MEAN:
        v = v / kd.f32(kd.max(tg_len[n], 1))
    return v


@kd.kernel
def reduce_loss(nll: kd.Tensor[kd.f32, 1], tg_len: kd.Tensor[kd.i32, 1], out: kd.Tensor, N: kd.i32,
                MODE: kd.Const[int], ZERO_INF: kd.Const[bool], B: kd.Const[int]):
    """The loss from the per-sample nll: [N] (MODE NONE) or the batch sum / mean (one value)."""
    u = kd.unit_pos_x()
    acc = kd.f32(0.0)
    for n0 in range(0, N, B):
        n = n0 + u
        if n < N:
            v = sample_loss(nll, tg_len, n, MODE, ZERO_INF)
            if MODE == NONE:
                out[n] = v
            acc += v
    if MODE != NONE:
        total = kd.cube_sum(acc)
        if u == 0:
            if MODE == MEAN:
                total = total / kd.f32(N)
            out[0] = total


@kd.kernel
def ctc_grad(lp: kd.Tensor, alpha: kd.Tensor[kd.f32, 3], beta: kd.Tensor[kd.f32, 3], nll: kd.Tensor[kd.f32, 1],
             labels: kd.Tensor[kd.i32, 1], offsets: kd.Tensor[kd.i32, 1], in_len: kd.Tensor[kd.i32, 1],
             tg_len: kd.Tensor[kd.i32, 1], grad_out: kd.Tensor, gscale: kd.f32, grad: kd.Tensor, blank: kd.i32,
             N: kd.i32, TT: kd.i32, MODE: kd.Const[int], ZERO_INF: kd.Const[bool], SCALAR: kd.Const[bool],
             CB: kd.Const[int], STAGED: kd.Const[int], B: kd.Const[int]):
    """grad[t, n, :] for t in the cube's block; grad_out is read at [n] (MODE NONE) or [0]
    unless SCALAR (a number, gscale). STAGED: 0, or the occupancies' shared array size (at
    least alpha's last axis; module docstring)."""
    acc = kd.shared(kd.f32, CB)
    occs = kd.shared(kd.f32, STAGED + 1)
    u = kd.unit_pos_x()
    n = kd.cube_pos_x()
    T = lp.shape[0]
    C = lp.shape[2]
    tn = in_len[n]
    sn = tg_len[n]
    off = offsets[n]
    L = 2 * sn + 1
    nl = nll[n]
    g = gscale
    if not SCALAR:
        g = kd.f32(grad_out[n if MODE == NONE else 0])
    if MODE == MEAN:
        g = g / (kd.f32(kd.max(sn, 1)) * kd.f32(N))
    dead = kd.isinf(nl)
    t_end = kd.min(kd.cube_pos_y() * TT + TT, T)
    for t in range(kd.cube_pos_y() * TT, t_end):
        live = t < tn  # (steps past the sample's length store zeros, through the same loops:
        #                 no loop bound then depends on memory, kerneldsl/loop_bounds.py)
        if STAGED:  # (each unit reads back only the slots it wrote: no barrier)
            for s0 in range(0, alpha.shape[2], B):
                s = s0 + u
                if live and s < L:
                    lab = state_label(labels, off, s, blank)
                    occs[s] = kd.exp(alpha[t, n, s] + beta[t, n, s] - kd.f32(lp[t, n, lab]) + nl)
        for k0 in range(0, C, CB):  # classes k0 .. k0 + CB
            for c0 in range(0, CB, B):
                c = c0 + u
                if c < CB:
                    acc[c] = 0.0
            kd.sync_cube()
            for s0 in range(0, alpha.shape[2], B):  # (the widest sample's states)
                s = s0 + u
                if live and s < L:
                    lab = state_label(labels, off, s, blank)
                    if lab >= k0 and lab < k0 + CB:
                        if STAGED:
                            kd.atomic_add(acc, lab - k0, occs[s])
                        else:
                            kd.atomic_add(acc, lab - k0, kd.exp(alpha[t, n, s] + beta[t, n, s]
                                                                 - kd.f32(lp[t, n, lab]) + nl))
            kd.sync_cube()
            width = kd.min(CB, C - k0)
            for c0 in range(0, width, B):
                c = c0 + u
                if c < width:
                    x = kd.f32(lp[t, n, k0 + c])
                    v = g * (kd.exp(x) - kd.select(dead, kd.nan, acc[c]))
                    if ZERO_INF:
                        v = kd.select(dead, kd.f32(0.0), v)
                    grad[t, n, k0 + c] = kd.select(live, v, kd.f32(0.0))
            kd.sync_cube()
