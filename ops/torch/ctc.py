"""rudnn.torch's CTC ops (SPEC §10): ctc_loss with autograd through ctc_loss_backward (w.r.t.
log_probs), ctc_alpha_beta and ctc_loss_backward.

Targets and lengths are integer tensors (the functions also take lists of lengths, as
torch.nn.functional.ctc_loss does) and are moved to log_probs' device: the family reads
their values on the host to validate them, so a CUDA call copies them back (a sync)."""
from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor

import rudnn.ctc as K

from .bridge import session, to_kd, to_torch

Lengths = Union[Tensor, Sequence[int]]


def _kd(rt, *ts):
    return [to_kd(rt, t) for t in ts]


@torch.library.custom_op("rudnn::ctc_loss", mutates_args=())
def ctc_loss_op(log_probs: Tensor, targets: Tensor, input_lengths: Tensor, target_lengths: Tensor, blank: int,
                reduction: str, zero_infinity: bool) -> Tensor:
    """The CTC loss, in log_probs' dtype: [N] for "none", else a scalar."""
    with session(log_probs) as rt:
        return to_torch(K.ctc_loss(*_kd(rt, log_probs, targets, input_lengths, target_lengths), blank, reduction,
                                   zero_infinity))


@torch.library.custom_op("rudnn::ctc_alpha_beta", mutates_args=())
def ctc_alpha_beta_op(log_probs: Tensor, targets: Tensor, input_lengths: Tensor, target_lengths: Tensor,
                      blank: int) -> tuple[Tensor, Tensor, Tensor]:
    """(alpha, beta, nll): F32 [T, N, 2S + 1] log-space variables and the F32 [N] nll."""
    with session(log_probs) as rt:
        out = K.ctc_alpha_beta(*_kd(rt, log_probs, targets, input_lengths, target_lengths), blank)
        return tuple(to_torch(x) for x in out)


@torch.library.custom_op("rudnn::ctc_loss_backward", mutates_args=())
def ctc_loss_backward_op(log_probs: Tensor, targets: Tensor, input_lengths: Tensor, target_lengths: Tensor,
                         grad_out: Tensor, blank: int, reduction: str, zero_infinity: bool) -> Tensor:
    """log_probs' gradient of ctc_loss for the loss's gradient grad_out, in log_probs' dtype."""
    with session(log_probs) as rt:
        return to_torch(K.ctc_loss_backward(*_kd(rt, log_probs, targets, input_lengths, target_lengths, grad_out),
                                            blank, reduction, zero_infinity))


@ctc_loss_op.register_fake
def _(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity):
    batched = log_probs.ndim == 3
    shape = (log_probs.shape[1],) if reduction == "none" and batched else ()
    return log_probs.new_empty(shape)


@ctc_alpha_beta_op.register_fake
def _(log_probs, targets, input_lengths, target_lengths, blank):
    batched = log_probs.ndim == 3
    if batched and targets.ndim == 1:  # concatenated targets: 2·max(target_lengths) + 1 states (data)
        states = torch.library.get_ctx().new_dynamic_size(min=1)
    else:
        states = 2 * targets.shape[-1] + 1
    lead = (log_probs.shape[0], log_probs.shape[1]) if batched else (log_probs.shape[0],)
    ab = log_probs.new_empty((*lead, states), dtype=torch.float32)
    nll = log_probs.new_empty((log_probs.shape[1],) if batched else (), dtype=torch.float32)
    return ab, torch.empty_like(ab), nll


ctc_loss_backward_op.register_fake(lambda log_probs, *rest: torch.empty_like(log_probs))


def _save(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:4])
    ctx.args = inputs[4:]


def _grad(ctx, grad):
    log_probs, targets, input_lengths, target_lengths = ctx.saved_tensors
    blank, reduction, zero_infinity = ctx.args
    g = ctc_loss_backward_op(log_probs, targets, input_lengths, target_lengths, grad.contiguous(), blank, reduction,
                             zero_infinity)
    return g, None, None, None, None, None, None


ctc_loss_op.register_autograd(_grad, setup_context=_save)


def _on(log_probs: Tensor, *ts) -> list:
    """Targets and lengths as integer tensors on log_probs' device."""
    return [torch.as_tensor(t, dtype=torch.int64 if not isinstance(t, Tensor) else None).to(log_probs.device)
            for t in ts]


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Lengths, target_lengths: Lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """As torch.nn.functional.ctc_loss; differentiable in log_probs."""
    return ctc_loss_op(log_probs, *_on(log_probs, targets, input_lengths, target_lengths), blank, reduction,
                       zero_infinity)


def ctc_alpha_beta(log_probs: Tensor, targets: Tensor, input_lengths: Lengths, target_lengths: Lengths,
                   blank: int = 0) -> tuple:
    """(alpha, beta, nll) of the CTC recursions."""
    return ctc_alpha_beta_op(log_probs, *_on(log_probs, targets, input_lengths, target_lengths), blank)


def ctc_loss_backward(log_probs: Tensor, targets: Tensor, input_lengths: Lengths, target_lengths: Lengths,
                      grad_out: Union[Tensor, float], blank: int = 0, reduction: str = "mean",
                      zero_infinity: bool = False) -> Tensor:
    """log_probs' gradient of ctc_loss for the loss's gradient grad_out (a tensor of the loss's
    shape, or a number for a scalar loss)."""
    if not isinstance(grad_out, Tensor):
        grad_out = torch.tensor(float(grad_out), dtype=log_probs.dtype, device=log_probs.device)
    return ctc_loss_backward_op(log_probs, *_on(log_probs, targets, input_lengths, target_lengths), grad_out, blank,
                                reduction, zero_infinity)


__all__ = ["ctc_loss", "ctc_alpha_beta", "ctc_loss_backward"]
