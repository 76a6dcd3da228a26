"""rudnn.ctc: the CTC loss of speech recognition, its alpha/beta recursions and its gradient,
with the semantics of torch.nn.functional.ctc_loss (SPEC §10), on every runtime.

Each entry point validates its call into a problem (problem.py: targets packed back to
back as I32 with per-sample offsets, unbatched input seen as N = 1), chooses the recursion
and its cube shapes (tuning.py) and launches the log-space recursions: recursion.py (one
cube per sample and direction, states in shared memory or a global workspace; the default,
any length) or plane.py (one plane per sample and direction, states in registers; targets
with 2S + 1 <= 16·PLANE_DIM, when tuning.PLANE_PATH or a test asks), then the loss
reduction or the gradient (gradient.py, the same after either recursion). Recursions run in F32; the loss and the
gradient are cast once to log_probs' dtype; alpha, beta and nll are F32.
"""
from __future__ import annotations

import kerneldsl as kd
import numpy as np
from kerneldsl.replay import replayable

from . import gradient as _grad
from . import plane as _plane
from . import recursion as _rec
from .problem import REDUCTIONS, CtcCall, CtcError, ctc_problem, grad_out_scale
from .tuning import cube_units, grad_plan, recursion_plan

__all__ = ["CtcError", "ctc_loss", "ctc_alpha_beta", "ctc_loss_backward"]

_MODES = dict(zip(REDUCTIONS, (_grad.NONE, _grad.SUM, _grad.MEAN)))


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False) -> kd.Tensor:
    """The CTC loss: [N] per-sample nll for "none", else their sum or mean (each ÷ max(target
    length, 1)); infinite losses are 0 under zero_infinity. In log_probs' dtype."""
    p = ctc_problem("ctc_loss", log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
    if p.N == 0:  # nothing to launch: an empty [0], or the sum (0) or mean (NaN) of no losses
        return p.runtime.tensor(np.full(p.loss_shape, np.nan if p.reduction == "mean" else 0.0, p.log_probs.dtype.np))
    return _loss(p)


def ctc_alpha_beta(log_probs, targets, input_lengths, target_lengths, blank=0) -> tuple:
    """(alpha, beta, nll): F32 [T, N, 2S + 1] log-space forward and backward variables (each
    including the emission at t; -inf outside a sample's range) and the F32 [N] nll.
    Unbatched input gives [T, 2S + 1] and a scalar nll."""
    p = ctc_problem("ctc_alpha_beta", log_probs, targets, input_lengths, target_lengths, blank)
    if p.N == 0:
        alpha, beta, nll = _outputs(p, store=True)
        return alpha, beta, nll
    return _alpha_beta(p)


def ctc_loss_backward(log_probs, targets, input_lengths, target_lengths, grad_out, blank=0, reduction="mean",
                      zero_infinity=False) -> kd.Tensor:
    """What PyTorch's autograd gives as log_probs.grad for ctc_loss(...) and `grad_out` (the
    loss's shape; a number for a scalar loss), in log_probs' dtype."""
    fn = "ctc_loss_backward"
    p = ctc_problem(fn, log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
    g = grad_out_scale(fn, p, grad_out)
    if p.N == 0 or p.T == 0 or p.C == 0:
        return p.runtime.empty(log_probs.shape, log_probs.dtype)
    return _backward(p, g, tuple(log_probs.shape))


# ---------------------------------------------------------------------------- launches
# Validation reads targets and lengths on the host (problem.py); what follows depends only on
# the CtcCall's layout and plain values, so it is replayed per layout (kerneldsl/replay.py),
# the packed samples uploaded afresh each call.
@replayable
def _loss(c: CtcCall) -> kd.Tensor:
    rt = c.runtime
    out = rt.empty(c.loss_shape, c.log_probs.dtype)
    samples = _sample_tensors(rt, c)
    _, _, nll = _recursions(c, c.batched_log_probs(), samples, store=False)
    units = cube_units(rt.capabilities, c.N)
    _grad.reduce_loss[1, units](nll, samples[3], out.reshape(max(out.size, 1)), c.N, _mode(c), c.zero_infinity,
                                units)
    return out


@replayable
def _alpha_beta(c: CtcCall) -> tuple:
    alpha, beta, nll = _recursions(c, c.batched_log_probs(), _sample_tensors(c.runtime, c), store=True)
    if c.batched:
        return alpha, beta, nll
    return alpha.reshape(c.T, c.states), beta.reshape(c.T, c.states), nll.reshape(())


@replayable
def _backward(c: CtcCall, g, shape: tuple) -> kd.Tensor:
    """`g`: grad_out's tensor, or its number for a scalar loss (part of the replay key)."""
    rt = c.runtime
    grad = rt.empty(shape, c.log_probs.dtype)
    samples = _sample_tensors(rt, c)
    lp = c.batched_log_probs()
    alpha, beta, nll = _recursions(c, lp, samples, store=True)
    scalar = not isinstance(g, kd.Tensor)
    g_t = nll if scalar else g.contiguous().reshape(max(g.size, 1))
    plan = grad_plan(rt.capabilities, c.T, c.N, c.C, c.states)
    _grad.ctc_grad[plan.grid(c.N, c.T), plan.units](
        lp, alpha, beta, nll, *samples, g_t, g if scalar else 0.0,
        grad.reshape(c.T, c.N, c.C), c.blank, c.N, plan.steps, _mode(c), c.zero_infinity, scalar, plan.class_chunk,
        plan.staged, plan.units)
    return grad


# ---------------------------------------------------------------------------- helpers
def _mode(p) -> int:
    """The reduction code; an unbatched "none" loss is its one sample's (a sum of one)."""
    return _MODES["sum" if p.reduction == "none" and not p.batched else p.reduction]


def _sample_tensors(rt, c: CtcCall) -> tuple:
    """(labels, offsets, input lengths, target lengths) as I32 views of one upload of
    `c.samples`; labels never empty (one spare element)."""
    packed = rt.tensor(c.samples)
    cut = (0, c.labels + 1, c.labels + 1 + c.N, c.labels + 1 + 2 * c.N, c.labels + 1 + 3 * c.N)
    return tuple(packed[a:b] for a, b in zip(cut[:-1], cut[1:]))


def _outputs(p, store: bool) -> tuple:
    """alpha and beta ([T, N, 2S + 1] F32, when `store`; else a [1, 1, 1] stand-in) and nll ([N] F32)."""
    rt = p.runtime
    shape = (p.T, p.N, p.states)
    alpha = rt.empty(shape, kd.f32) if store else rt.empty((1, 1, 1), kd.f32)
    beta = rt.empty(shape, kd.f32) if store else alpha
    nll = rt.empty((p.N,), kd.f32)
    return alpha, beta, nll


def _recursions(c: CtcCall, lp: kd.Tensor, samples, store: bool) -> tuple:
    """alpha, beta and nll (`_outputs`) of a call of N >= 1 samples; `lp`: its log_probs as
    [T, N, C] (`CtcCall.batched_log_probs`), `samples` from _sample_tensors."""
    rt = c.runtime
    alpha, beta, nll = _outputs(c, store)
    directions = 2 if store else 1
    plan = recursion_plan(rt.capabilities, c.longest, c.N * directions)
    args = (lp, *samples, alpha, beta, nll)
    if plan.per_lane:
        per_cube = plan.samples_per_cube(rt.plane_dim)
        _plane.ctc_plane[(-(-c.N // per_cube), directions), plan.units](*args, c.blank, plan.per_lane, store)
        return alpha, beta, nll
    grid = (c.N, directions)
    if plan.shared:
        _rec.ctc_shared[grid, plan.units](*args, c.blank, plan.plane, store, plan.labels, plan.units)
    else:
        work = rt.empty((grid[0] * grid[1] * 2 * plan.plane,), kd.f32)
        _rec.ctc_global[grid, plan.units](*args, work, c.blank, plan.plane, store, plan.units)
    return alpha, beta, nll
