"""rudnn.torch's convolution ops (SPEC §6), 1-3 spatial dims, NCHW and channels-last, with
autograd through conv_data_backward and conv_weight_backward (the bias gradient is the
output gradient's sum over batch and space).

ConvOptions becomes plain arguments: stride, padding, dilation (lists of N ints; the
Python functions also take one int for every axis), groups; ConvStrategy its member name."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
from torch import Tensor

import rudnn.convolution as C

from .bridge import enum_member, session, spatial_tuple, to_kd, to_torch

IntOrInts = Union[int, Sequence[int]]


def _options(stride, padding, dilation, groups) -> C.ConvOptions:
    return C.ConvOptions(tuple(stride), tuple(padding), tuple(dilation), groups)


def _strategy(name: str) -> C.ConvStrategy:
    return enum_member(C.ConvStrategy, name, "strategy")


def _out_sizes(sizes, kernel, stride, padding, dilation) -> list:
    return [(s + 2 * p - d * (k - 1) - 1) // st + 1 for s, k, st, p, d in zip(sizes, kernel, stride, padding, dilation)]


def _run_forward(family_fn, input, weight, bias, stride, padding, dilation, groups, strategy) -> Tensor:  # noqa: A002
    with session(input) as rt:
        return to_torch(family_fn(to_kd(rt, input), to_kd(rt, weight), to_kd(rt, bias),
                                  _options(stride, padding, dilation, groups), _strategy(strategy)))


# ---------------------------------------------------------------------------- ops
@torch.library.custom_op("rudnn::conv_forward", mutates_args=())
def conv_forward_op(input: Tensor, weight: Tensor, bias: Optional[Tensor], stride: list[int],  # noqa: A002
                    padding: list[int], dilation: list[int], groups: int, strategy: str) -> Tensor:
    """NCHW convolution: input [B, Cin, *S], weight [Cout, Cin/groups, *K] -> [B, Cout, *O]."""
    return _run_forward(C.conv_forward, input, weight, bias, stride, padding, dilation, groups, strategy)


@torch.library.custom_op("rudnn::conv_forward_nhwc", mutates_args=())
def conv_forward_nhwc_op(input: Tensor, weight: Tensor, bias: Optional[Tensor], stride: list[int],  # noqa: A002
                         padding: list[int], dilation: list[int], groups: int, strategy: str) -> Tensor:
    """Channels-last convolution: input [B, *S, Cin], weight [Cout, *K, Cin/groups] -> [B, *O, Cout]."""
    return _run_forward(C.conv_forward_nhwc, input, weight, bias, stride, padding, dilation, groups, strategy)


@torch.library.custom_op("rudnn::conv_data_backward", mutates_args=())
def conv_data_backward_op(out_grad: Tensor, weight: Tensor, in_shape: list[int], stride: list[int],
                          padding: list[int], dilation: list[int], groups: int, strategy: str) -> Tensor:
    """The input gradient (shape in_shape, NCHW) of conv_forward given its output gradient."""
    with session(out_grad) as rt:
        return to_torch(C.conv_data_backward(to_kd(rt, out_grad), to_kd(rt, weight), tuple(in_shape),
                                             _options(stride, padding, dilation, groups), _strategy(strategy)))


@torch.library.custom_op("rudnn::conv_weight_backward", mutates_args=())
def conv_weight_backward_op(input: Tensor, out_grad: Tensor, weight_shape: list[int], stride: list[int],  # noqa: A002
                            padding: list[int], dilation: list[int], groups: int, strategy: str) -> Tensor:
    """The weight gradient (shape weight_shape, [Cout, Cin/groups, *K]) of conv_forward."""
    with session(input) as rt:
        return to_torch(C.conv_weight_backward(to_kd(rt, input), to_kd(rt, out_grad), tuple(weight_shape),
                                               _options(stride, padding, dilation, groups), _strategy(strategy)))


@conv_forward_op.register_fake
def _(input, weight, bias, stride, padding, dilation, groups, strategy):  # noqa: A002
    o = _out_sizes(input.shape[2:], weight.shape[2:], stride, padding, dilation)
    return input.new_empty((input.shape[0], weight.shape[0], *o))


@conv_forward_nhwc_op.register_fake
def _(input, weight, bias, stride, padding, dilation, groups, strategy):  # noqa: A002
    o = _out_sizes(input.shape[1:-1], weight.shape[1:-1], stride, padding, dilation)
    return input.new_empty((input.shape[0], *o, weight.shape[0]))


conv_data_backward_op.register_fake(lambda out_grad, weight, in_shape, *rest: out_grad.new_empty(in_shape))
conv_weight_backward_op.register_fake(lambda input, out_grad, weight_shape, *rest: input.new_empty(weight_shape))


# ---------------------------------------------------------------------------- autograd
def _save(ctx, inputs, output):
    input, weight, bias, *geometry = inputs  # noqa: A001
    ctx.save_for_backward(input, weight)
    ctx.geometry = geometry
    ctx.has_bias = bias is not None


def _grads(ctx, grad, channels_last: bool):
    input, weight = ctx.saved_tensors  # noqa: A001
    grad = grad.contiguous()
    if channels_last:  # the backward kernels take NCHW: channels-last tensors seen as NCHW views
        input, weight, grad = (t.movedim(-1, 1) for t in (input, weight, grad))  # noqa: A001
    dx = dw = db = None
    if ctx.needs_input_grad[0]:
        dx = conv_data_backward_op(grad, weight, list(input.shape), *ctx.geometry)
    if ctx.needs_input_grad[1]:
        dw = conv_weight_backward_op(input, grad, list(weight.shape), *ctx.geometry)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        db = grad.sum(dim=[d for d in range(grad.ndim) if d != 1])
    if channels_last:
        dx, dw = (None if t is None else t.movedim(1, -1) for t in (dx, dw))
    return dx, dw, db, None, None, None, None, None


conv_forward_op.register_autograd(lambda ctx, grad: _grads(ctx, grad, False), setup_context=_save)
conv_forward_nhwc_op.register_autograd(lambda ctx, grad: _grads(ctx, grad, True), setup_context=_save)


# ---------------------------------------------------------------------------- user-facing functions
def _geometry(n: int, stride, padding, dilation) -> list:
    """stride, padding and dilation as lists of n ints."""
    return [spatial_tuple(v, n, name) for v, name in ((stride, "stride"), (padding, "padding"),
                                                       (dilation, "dilation"))]


def conv_forward(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrInts = 1,  # noqa: A002
                 padding: IntOrInts = 0, dilation: IntOrInts = 1, groups: int = 1,
                 strategy: str = "Autotune") -> Tensor:
    """As torch.nn.functional.conv{1,2,3}d (NCHW); differentiable in input, weight and bias."""
    geometry = _geometry(weight.ndim - 2, stride, padding, dilation)
    return conv_forward_op(input, weight, bias, *geometry, groups, strategy)


def conv_forward_nhwc(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None,  # noqa: A002
                      stride: IntOrInts = 1, padding: IntOrInts = 0, dilation: IntOrInts = 1, groups: int = 1,
                      strategy: str = "Autotune") -> Tensor:
    """Channels-last convolution (input [B, *S, Cin], weight [Cout, *K, Cin/groups]); differentiable."""
    geometry = _geometry(weight.ndim - 2, stride, padding, dilation)
    return conv_forward_nhwc_op(input, weight, bias, *geometry, groups, strategy)


def conv_data_backward(out_grad: Tensor, weight: Tensor, in_shape: Sequence[int], stride: IntOrInts = 1,
                       padding: IntOrInts = 0, dilation: IntOrInts = 1, groups: int = 1,
                       strategy: str = "Autotune") -> Tensor:
    """The input gradient of conv_forward (as torch.nn.grad.conv*d_input)."""
    geometry = _geometry(weight.ndim - 2, stride, padding, dilation)
    return conv_data_backward_op(out_grad, weight, list(in_shape), *geometry, groups, strategy)


def conv_weight_backward(input: Tensor, out_grad: Tensor, weight_shape: Sequence[int],  # noqa: A002
                         stride: IntOrInts = 1, padding: IntOrInts = 0, dilation: IntOrInts = 1, groups: int = 1,
                         strategy: str = "Autotune") -> Tensor:
    """The weight gradient of conv_forward (as torch.nn.grad.conv*d_weight)."""
    geometry = _geometry(len(weight_shape) - 2, stride, padding, dilation)
    return conv_weight_backward_op(input, out_grad, list(weight_shape), *geometry, groups, strategy)


__all__ = ["conv_forward", "conv_forward_nhwc", "conv_data_backward", "conv_weight_backward"]
