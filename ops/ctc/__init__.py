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

from . import gradient as _grad
from . import plane as _plane
from . import recursion as _rec
from .problem import REDUCTIONS, CtcError, CtcProblem, ctc_problem, grad_out_scale
from .tuning import cube_units, grad_plan, recursion_plan

__all__ = ["CtcError", "ctc_loss", "ctc_alpha_beta", "ctc_loss_backward"]

_MODES = dict(zip(REDUCTIONS, (_grad.NONE, _grad.SUM, _grad.MEAN)))


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False) -> kd.Tensor:
    """The CTC loss: [N] per-sample nll for "none", else their sum or mean (each ÷ max(target
    length, 1)); infinite losses are 0 under zero_infinity. In log_probs' dtype."""
    p = ctc_problem("ctc_loss", log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
    rt = p.runtime
    if p.N == 0:  # nothing to launch: an empty [0], or the sum (0) or mean (NaN) of no losses
        return rt.tensor(np.full(p.loss_shape, np.nan if p.reduction == "mean" else 0.0, p.log_probs.dtype.np))
    out = rt.empty(p.loss_shape, p.log_probs.dtype)
    samples = _sample_tensors(rt, p)
    _, _, nll = _recursions(p, samples, store=False)
    units = cube_units(rt.capabilities, p.N)
    _grad.reduce_loss[1, units](nll, samples[3], out.reshape(max(out.size, 1)), p.N, _mode(p), p.zero_infinity,
                                units)
    return out


def ctc_alpha_beta(log_probs, targets, input_lengths, target_lengths, blank=0) -> tuple:
    """(alpha, beta, nll): F32 [T, N, 2S + 1] log-space forward and backward variables (each
    including the emission at t; -inf outside a sample's range) and the F32 [N] nll.
    Unbatched input gives [T, 2S + 1] and a scalar nll."""
    p = ctc_problem("ctc_alpha_beta", log_probs, targets, input_lengths, target_lengths, blank)
    alpha, beta, nll = _recursions(p, _sample_tensors(p.runtime, p) if p.N else None, store=True)
    if p.batched:
        return alpha, beta, nll
    return alpha.reshape(p.T, p.states), beta.reshape(p.T, p.states), nll.reshape(())


def ctc_loss_backward(log_probs, targets, input_lengths, target_lengths, grad_out, blank=0, reduction="mean",
                      zero_infinity=False) -> kd.Tensor:
    """What PyTorch's autograd gives as log_probs.grad for ctc_loss(...) and `grad_out` (the
    loss's shape; a number for a scalar loss), in log_probs' dtype."""
    fn = "ctc_loss_backward"
    p = ctc_problem(fn, log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
    g = grad_out_scale(fn, p, grad_out)
    rt = p.runtime
    grad = rt.empty(log_probs.shape, log_probs.dtype)
    if p.N == 0 or p.T == 0 or p.C == 0:
        return grad
    samples = _sample_tensors(rt, p)
    alpha, beta, nll = _recursions(p, samples, store=True)
    scalar = not isinstance(g, kd.Tensor)
    g_t = nll if scalar else g.contiguous().reshape(max(g.size, 1))
    mode = _mode(p)
    plan = grad_plan(rt.capabilities, p.T, p.N, p.C, p.states)
    _grad.ctc_grad[plan.grid(p.N, p.T), plan.units](
        p.log_probs, alpha, beta, nll, *samples, g_t, g if scalar else 0.0,
        grad.reshape(p.T, p.N, p.C), p.blank, p.N, plan.steps, mode, p.zero_infinity, scalar, plan.class_chunk,
        plan.units)
    return grad


# ---------------------------------------------------------------------------- helpers
def _mode(p: CtcProblem) -> int:
    """The reduction code; an unbatched "none" loss is its one sample's (a sum of one)."""
    return _MODES["sum" if p.reduction == "none" and not p.batched else p.reduction]


def _sample_tensors(rt, p: CtcProblem) -> tuple:
    """(labels, offsets, input lengths, target lengths) as I32 views of one upload; labels
    never empty (one spare element)."""
    parts = (p.labels, np.zeros(1, np.int32), p.offsets, p.input_lengths, p.target_lengths)
    packed = rt.tensor(np.concatenate(parts).astype(np.int32))
    cut = np.cumsum([0, p.labels.size + 1, p.N, p.N, p.N])
    return tuple(packed[int(a):int(b)] for a, b in zip(cut[:-1], cut[1:]))


def _recursions(p: CtcProblem, samples, store: bool) -> tuple:
    """alpha and beta ([T, N, 2S + 1] F32, when `store`) and nll ([N] F32); `samples` from _sample_tensors."""
    rt = p.runtime
    shape = (p.T, p.N, p.states)
    alpha = rt.empty(shape, kd.f32) if store else rt.empty((1, 1, 1), kd.f32)
    beta = rt.empty(shape, kd.f32) if store else alpha
    nll = rt.empty((p.N,), kd.f32)
    if p.N == 0:
        return alpha, beta, nll
    directions = 2 if store else 1
    plan = recursion_plan(rt.capabilities, int(2 * p.target_lengths.max() + 1), p.N * directions)
    args = (p.log_probs, *samples, alpha, beta, nll)
    if plan.per_lane:
        per_cube = plan.samples_per_cube(rt.plane_dim)
        _plane.ctc_plane[(-(-p.N // per_cube), directions), plan.units](*args, p.blank, plan.per_lane, store)
        return alpha, beta, nll
    grid = (p.N, directions)
    if plan.shared:
        _rec.ctc_shared[grid, plan.units](*args, p.blank, plan.plane, store, plan.units)
    else:
        work = rt.empty((grid[0] * grid[1] * 2 * plan.plane,), kd.f32)
        _rec.ctc_global[grid, plan.units](*args, work, p.blank, plan.plane, store, plan.units)
    return alpha, beta, nll

