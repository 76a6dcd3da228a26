"""rudnn.torch's normalization ops (SPEC §1): layer_norm, rms_norm, softmax_last_axis, their
with-stats forms and backward passes; autograd runs our backward kernels.

gamma and beta may be any float dtype here (the family takes F32: they are cast, a no-op
for F32); their gradients come back in their own dtype. softmax's backward has no kernel
in the family: it is y·(g − Σ g·y), torch arithmetic on our forward's output."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

import rudnn.normalization as N

from .bridge import needs_grad, session, to_kd, to_torch


def _f32(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.float()


# ---------------------------------------------------------------------------- forward ops
@torch.library.custom_op("rudnn::layer_norm", mutates_args=())
def layer_norm_op(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None,  # noqa: A002
                  eps: float = 1e-5) -> Tensor:
    """(x − mean)·rsqrt(var + eps)·weight (+ bias) over the last axis."""
    with session(input) as rt:
        return to_torch(N.layer_norm(to_kd(rt, input), to_kd(rt, _f32(weight)), to_kd(rt, _f32(bias)), eps))


@torch.library.custom_op("rudnn::layer_norm_with_stats", mutates_args=())
def layer_norm_with_stats_op(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None,  # noqa: A002
                             eps: float = 1e-5) -> tuple[Tensor, Tensor, Tensor]:
    """(out, mean, rstd); mean and rstd are F32 of the input's shape without the last axis."""
    with session(input) as rt:
        out = N.layer_norm_with_stats(to_kd(rt, input), to_kd(rt, _f32(weight)), to_kd(rt, _f32(bias)), eps)
        return tuple(to_torch(x) for x in out)


@torch.library.custom_op("rudnn::rms_norm", mutates_args=())
def rms_norm_op(input: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:  # noqa: A002
    """x·rsqrt(mean(x²) + eps)·weight over the last axis."""
    with session(input) as rt:
        return to_torch(N.rms_norm(to_kd(rt, input), to_kd(rt, _f32(weight)), eps))


@torch.library.custom_op("rudnn::rms_norm_with_stats", mutates_args=())
def rms_norm_with_stats_op(input: Tensor, weight: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:  # noqa: A002
    """(out, rstd); rstd is F32 of the input's shape without the last axis."""
    with session(input) as rt:
        return tuple(to_torch(x) for x in N.rms_norm_with_stats(to_kd(rt, input), to_kd(rt, _f32(weight)), eps))


@torch.library.custom_op("rudnn::softmax_last_axis", mutates_args=())
def softmax_op(input: Tensor) -> Tensor:  # noqa: A002
    """exp(x − max) / Σ exp(x − max) over the last axis, computed in F32."""
    with session(input) as rt:
        return to_torch(N.softmax_last_axis(to_kd(rt, input)))


# ---------------------------------------------------------------------------- backward ops
@torch.library.custom_op("rudnn::layer_norm_backward", mutates_args=())
def layer_norm_backward_op(input: Tensor, weight: Tensor, grad: Tensor, mean: Tensor,  # noqa: A002
                           rstd: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(dx in the input's dtype, dgamma F32, dbeta F32)."""
    with session(input) as rt:
        out = N.layer_norm_backward(to_kd(rt, input), to_kd(rt, _f32(weight)), to_kd(rt, grad),
                                    to_kd(rt, mean), to_kd(rt, rstd))
        return tuple(to_torch(x) for x in out)


@torch.library.custom_op("rudnn::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(input: Tensor, weight: Tensor, grad: Tensor,  # noqa: A002
                         rstd: Tensor) -> tuple[Tensor, Tensor]:
    """(dx in the input's dtype, dgamma F32)."""
    with session(input) as rt:
        out = N.rms_norm_backward(to_kd(rt, input), to_kd(rt, _f32(weight)), to_kd(rt, grad), to_kd(rt, rstd))
        return tuple(to_torch(x) for x in out)


# ---------------------------------------------------------------------------- fake impls
def _stats(input: Tensor) -> Tensor:  # noqa: A002
    return input.new_empty(input.shape[:-1], dtype=torch.float32)


layer_norm_op.register_fake(lambda input, weight, bias=None, eps=1e-5: torch.empty_like(input))
layer_norm_with_stats_op.register_fake(
    lambda input, weight, bias=None, eps=1e-5: (torch.empty_like(input), _stats(input), _stats(input)))
rms_norm_op.register_fake(lambda input, weight, eps=1e-6: torch.empty_like(input))
rms_norm_with_stats_op.register_fake(lambda input, weight, eps=1e-6: (torch.empty_like(input), _stats(input)))
softmax_op.register_fake(lambda input: torch.empty_like(input))
layer_norm_backward_op.register_fake(lambda input, weight, grad, mean, rstd: (
    torch.empty_like(input), weight.new_empty(weight.shape, dtype=torch.float32),
    weight.new_empty(weight.shape, dtype=torch.float32)))
rms_norm_backward_op.register_fake(lambda input, weight, grad, rstd: (
    torch.empty_like(input), weight.new_empty(weight.shape, dtype=torch.float32)))


# ---------------------------------------------------------------------------- autograd
def _save_norm(ctx, inputs, output):
    input, weight = inputs[0], inputs[1]  # noqa: A001
    bias = inputs[2] if len(inputs) >= 3 and isinstance(inputs[2], Tensor) else None
    ctx.save_for_backward(input, weight, *output[1:])
    ctx.bias_dtype = None if bias is None else bias.dtype


def _layer_norm_grad(ctx, grad, _grad_mean, _grad_rstd):
    input, weight, mean, rstd = ctx.saved_tensors  # noqa: A001
    dx, dw, db = layer_norm_backward_op(input, weight, grad.contiguous(), mean, rstd)
    return dx, dw.to(weight.dtype), None if ctx.bias_dtype is None else db.to(ctx.bias_dtype), None


def _rms_norm_grad(ctx, grad, _grad_rstd):
    input, weight, rstd = ctx.saved_tensors  # noqa: A001
    dx, dw = rms_norm_backward_op(input, weight, grad.contiguous(), rstd)
    return dx, dw.to(weight.dtype), None


def _save_softmax(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_grad(ctx, grad):
    (y,) = ctx.saved_tensors
    g = grad.float() * y.float()
    return (g - y.float() * g.sum(-1, keepdim=True)).to(y.dtype)


def _save_plain(ctx, inputs, output):
    ctx.save_for_backward(*(t for t in inputs if isinstance(t, Tensor)))
    ctx.eps = inputs[-1]  # the schema fills defaults: eps is always the last input


def _layer_norm_recomputed_grad(ctx, grad):
    """The plain op's backward: the statistics recomputed (rudnn.torch.layer_norm avoids
    this by calling layer_norm_with_stats when a gradient is needed)."""
    input, weight, *bias = ctx.saved_tensors  # noqa: A001
    _, mean, rstd = layer_norm_with_stats_op(input, weight, bias[0] if bias else None, ctx.eps)
    dx, dw, db = layer_norm_backward_op(input, weight, grad.contiguous(), mean, rstd)
    return dx, dw.to(weight.dtype), None if not bias else db.to(bias[0].dtype), None


def _rms_norm_recomputed_grad(ctx, grad):
    """The plain op's backward, rstd recomputed."""
    input, weight = ctx.saved_tensors  # noqa: A001
    _, rstd = rms_norm_with_stats_op(input, weight, ctx.eps)
    dx, dw = rms_norm_backward_op(input, weight, grad.contiguous(), rstd)
    return dx, dw.to(weight.dtype), None


layer_norm_op.register_autograd(_layer_norm_recomputed_grad, setup_context=_save_plain)
rms_norm_op.register_autograd(_rms_norm_recomputed_grad, setup_context=_save_plain)
layer_norm_with_stats_op.register_autograd(_layer_norm_grad, setup_context=_save_norm)
rms_norm_with_stats_op.register_autograd(_rms_norm_grad, setup_context=_save_norm)
softmax_op.register_autograd(_softmax_grad, setup_context=_save_softmax)


# ---------------------------------------------------------------------------- user-facing functions
def layer_norm(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:  # noqa: A002
    """LayerNorm over the last axis (weight, bias: [W]); differentiable in all three."""
    if needs_grad(input, weight, bias):
        return layer_norm_with_stats_op(input, weight, bias, eps)[0]
    return layer_norm_op(input, weight, bias, eps)


def rms_norm(input: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:  # noqa: A002
    """RMSNorm over the last axis (weight: [W]); differentiable in both."""
    if needs_grad(input, weight):
        return rms_norm_with_stats_op(input, weight, eps)[0]
    return rms_norm_op(input, weight, eps)


def softmax_last_axis(input: Tensor) -> Tensor:  # noqa: A002
    """Softmax over the last axis; differentiable."""
    return softmax_op(input)


layer_norm_with_stats = layer_norm_with_stats_op
rms_norm_with_stats = rms_norm_with_stats_op
layer_norm_backward = layer_norm_backward_op
rms_norm_backward = rms_norm_backward_op

__all__ = ["layer_norm", "rms_norm", "softmax_last_axis", "layer_norm_with_stats", "rms_norm_with_stats",
           "layer_norm_backward", "rms_norm_backward"]
