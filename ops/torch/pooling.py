"""rudnn.torch's pooling ops (SPEC §7): max (with indices), average, adaptive average and
adaptive max pooling over 1-3 spatial axes, and their backward passes, with autograd
through the backward kernels.

Eight custom ops take the number of spatial axes as `dims`; the functions named as the
family's (max_pool2d, adaptive_avg_pool3d_backward, ...) fix it. Window arguments are
lists of `dims` ints here (the functions also take one int for every axis)."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

import rudnn.pooling as P

from .bridge import needs_grad, session, spatial_tuple, to_kd, to_torch

IntOrInts = Union[int, Sequence[int]]


def _family(name: str, dims: int):
    return getattr(P, name.replace("#", str(dims)))


def _kd(rt, *ts):
    return [to_kd(rt, t) for t in ts]


# ---------------------------------------------------------------------------- ops
@torch.library.custom_op("rudnn::max_pool", mutates_args=())
def max_pool_op(input: Tensor, dims: int, kernel_size: list[int], stride: Optional[list[int]],  # noqa: A002
                padding: list[int], dilation: list[int], ceil_mode: bool) -> Tensor:
    """Max pooling over the last `dims` axes of [N, C, *S] (or [C, *S])."""
    with session(input) as rt:
        return to_torch(_family("max_pool#d", dims)(to_kd(rt, input), kernel_size, stride, padding, dilation,
                                                    ceil_mode))


@torch.library.custom_op("rudnn::max_pool_with_indices", mutates_args=())
def max_pool_with_indices_op(input: Tensor, dims: int, kernel_size: list[int],  # noqa: A002
                             stride: Optional[list[int]], padding: list[int], dilation: list[int],
                             ceil_mode: bool) -> tuple[Tensor, Tensor]:
    """(out, I64 flat per-plane indices of the maxima)."""
    with session(input) as rt:
        out = _family("max_pool#d_with_indices", dims)(to_kd(rt, input), kernel_size, stride, padding, dilation,
                                                       ceil_mode)
        return tuple(to_torch(x) for x in out)


@torch.library.custom_op("rudnn::avg_pool", mutates_args=())
def avg_pool_op(input: Tensor, dims: int, kernel_size: list[int], stride: Optional[list[int]],  # noqa: A002
                padding: list[int], ceil_mode: bool, count_include_pad: bool,
                divisor_override: Optional[int]) -> Tensor:
    """Average pooling over the last `dims` axes."""
    with session(input) as rt:
        return to_torch(_family("avg_pool#d", dims)(to_kd(rt, input), kernel_size, stride, padding, ceil_mode,
                                                    count_include_pad, divisor_override))


@torch.library.custom_op("rudnn::adaptive_avg_pool", mutates_args=())
def adaptive_avg_pool_op(input: Tensor, dims: int, output_size: list[int]) -> Tensor:  # noqa: A002
    """Adaptive average pooling to output_size (bins [floor(i·I/O), ceil((i+1)·I/O)))."""
    with session(input) as rt:
        return to_torch(_family("adaptive_avg_pool#d", dims)(to_kd(rt, input), output_size))


@torch.library.custom_op("rudnn::adaptive_max_pool", mutates_args=())
def adaptive_max_pool_op(input: Tensor, dims: int, output_size: list[int]) -> tuple[Tensor, Tensor]:  # noqa: A002
    """Adaptive max pooling to output_size: (out, I64 indices)."""
    with session(input) as rt:
        return tuple(to_torch(x) for x in _family("adaptive_max_pool#d", dims)(to_kd(rt, input), output_size))


@torch.library.custom_op("rudnn::max_pool_backward", mutates_args=())
def max_pool_backward_op(input: Tensor, grad: Tensor, indices: Tensor, dims: int,  # noqa: A002
                         kernel_size: list[int], stride: Optional[list[int]], padding: list[int],
                         dilation: list[int], ceil_mode: bool) -> Tensor:
    """The input gradient of max_pool given the output gradient and the forward's indices."""
    with session(input) as rt:
        return to_torch(_family("max_pool#d_backward", dims)(*_kd(rt, input, grad, indices), kernel_size, stride,
                                                             padding, dilation, ceil_mode))


@torch.library.custom_op("rudnn::avg_pool_backward", mutates_args=())
def avg_pool_backward_op(input: Tensor, grad: Tensor, dims: int, kernel_size: list[int],  # noqa: A002
                         stride: Optional[list[int]], padding: list[int], ceil_mode: bool,
                         count_include_pad: bool, divisor_override: Optional[int]) -> Tensor:
    """The input gradient of avg_pool given the output gradient."""
    with session(input) as rt:
        return to_torch(_family("avg_pool#d_backward", dims)(*_kd(rt, input, grad), kernel_size, stride, padding,
                                                             ceil_mode, count_include_pad, divisor_override))


@torch.library.custom_op("rudnn::adaptive_avg_pool_backward", mutates_args=())
def adaptive_avg_pool_backward_op(input: Tensor, grad: Tensor, dims: int) -> Tensor:  # noqa: A002
    """The input gradient of adaptive_avg_pool (its output size read from grad)."""
    with session(input) as rt:
        return to_torch(_family("adaptive_avg_pool#d_backward", dims)(*_kd(rt, input, grad)))


@torch.library.custom_op("rudnn::adaptive_max_pool_backward", mutates_args=())
def adaptive_max_pool_backward_op(input: Tensor, grad: Tensor, indices: Tensor, dims: int) -> Tensor:  # noqa: A002
    """The input gradient of adaptive_max_pool given the forward's indices."""
    with session(input) as rt:
        return to_torch(_family("adaptive_max_pool#d_backward", dims)(*_kd(rt, input, grad, indices)))


# ---------------------------------------------------------------------------- fake impls (torch's sizes)
def _window_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:  # a last window must start inside the input or left padding
        out -= 1
    return out


def _pooled(input, dims, kernel_size, stride, padding, dilation, ceil_mode):  # noqa: A002
    stride = stride or kernel_size
    lead, sizes = input.shape[:-dims], input.shape[-dims:]
    out = [_window_out(*a, ceil_mode) for a in zip(sizes, kernel_size, stride, padding, dilation)]
    return input.new_empty((*lead, *out))


def _indices(like: Tensor) -> Tensor:
    return like.new_empty(like.shape, dtype=torch.int64)


max_pool_op.register_fake(lambda input, dims, k, s, p, d, c: _pooled(input, dims, k, s, p, d, c))


@max_pool_with_indices_op.register_fake
def _(input, dims, kernel_size, stride, padding, dilation, ceil_mode):  # noqa: A002
    out = _pooled(input, dims, kernel_size, stride, padding, dilation, ceil_mode)
    return out, _indices(out)


avg_pool_op.register_fake(lambda input, dims, k, s, p, c, cip, div: _pooled(input, dims, k, s, p, [1] * dims, c))
adaptive_avg_pool_op.register_fake(lambda input, dims, size: input.new_empty((*input.shape[:-dims], *size)))


@adaptive_max_pool_op.register_fake
def _(input, dims, output_size):  # noqa: A002
    out = input.new_empty((*input.shape[:-dims], *output_size))
    return out, _indices(out)


for _op in (max_pool_backward_op, avg_pool_backward_op, adaptive_avg_pool_backward_op, adaptive_max_pool_backward_op):
    _op.register_fake(lambda input, *rest: torch.empty_like(input))


# ---------------------------------------------------------------------------- autograd
def _save(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], *(output[1:] if isinstance(output, tuple) else ()))
    ctx.args = inputs[1:]


def _max_pool_grad(ctx, grad, _grad_indices):
    input, indices = ctx.saved_tensors  # noqa: A001
    return (max_pool_backward_op(input, grad.contiguous(), indices, *ctx.args),) + (None,) * len(ctx.args)


def _avg_pool_grad(ctx, grad):
    (input,) = ctx.saved_tensors  # noqa: A001
    return (avg_pool_backward_op(input, grad.contiguous(), *ctx.args),) + (None,) * len(ctx.args)


def _adaptive_avg_grad(ctx, grad):
    (input,) = ctx.saved_tensors  # noqa: A001
    return adaptive_avg_pool_backward_op(input, grad.contiguous(), ctx.args[0]), None, None


def _adaptive_max_grad(ctx, grad, _grad_indices):
    input, indices = ctx.saved_tensors  # noqa: A001
    return adaptive_max_pool_backward_op(input, grad.contiguous(), indices, ctx.args[0]), None, None


def _max_pool_recomputed_grad(ctx, grad):
    """The plain op's backward: the indices recomputed (rudnn.torch's max_pool functions
    avoid this by calling max_pool_with_indices when a gradient is needed)."""
    (input,) = ctx.saved_tensors  # noqa: A001
    _, indices = max_pool_with_indices_op(input, *ctx.args)
    return (max_pool_backward_op(input, grad.contiguous(), indices, *ctx.args),) + (None,) * len(ctx.args)


max_pool_op.register_autograd(_max_pool_recomputed_grad, setup_context=_save)
max_pool_with_indices_op.register_autograd(_max_pool_grad, setup_context=_save)
avg_pool_op.register_autograd(_avg_pool_grad, setup_context=_save)
adaptive_avg_pool_op.register_autograd(_adaptive_avg_grad, setup_context=_save)
adaptive_max_pool_op.register_autograd(_adaptive_max_grad, setup_context=_save)


# ---------------------------------------------------------------------------- user-facing functions
def _window(dims, kernel_size, stride, padding, dilation=1) -> tuple:
    """The window arguments as lists of dims ints (stride None stays None)."""
    k = spatial_tuple(kernel_size, dims, "kernel_size")
    s = None if stride is None else spatial_tuple(stride, dims, "stride")
    return k, s, spatial_tuple(padding, dims, "padding"), spatial_tuple(dilation, dims, "dilation")


def _max_pool_fn(dims: int, with_indices: bool):
    def fn(input: Tensor, kernel_size: IntOrInts, stride: Optional[IntOrInts] = None,  # noqa: A002
           padding: IntOrInts = 0, dilation: IntOrInts = 1, ceil_mode: bool = False):
        args = (input, dims, *_window(dims, kernel_size, stride, padding, dilation), ceil_mode)
        if with_indices or needs_grad(input):
            out = max_pool_with_indices_op(*args)
            return out if with_indices else out[0]
        return max_pool_op(*args)
    return fn


def _avg_pool_fn(dims: int):
    def fn(input: Tensor, kernel_size: IntOrInts, stride: Optional[IntOrInts] = None,  # noqa: A002
           padding: IntOrInts = 0, ceil_mode: bool = False, count_include_pad: bool = True,
           divisor_override: Optional[int] = None):
        k, s, p, _ = _window(dims, kernel_size, stride, padding)
        return avg_pool_op(input, dims, k, s, p, ceil_mode, count_include_pad, divisor_override)
    return fn


def _adaptive_fn(dims: int, maximum: bool):
    def fn(input: Tensor, output_size: IntOrInts):  # noqa: A002
        size = spatial_tuple(output_size, dims, "output_size")
        return (adaptive_max_pool_op if maximum else adaptive_avg_pool_op)(input, dims, size)
    return fn


def _max_pool_backward_fn(dims: int):
    def fn(input: Tensor, grad: Tensor, indices: Tensor, kernel_size: IntOrInts,  # noqa: A002
           stride: Optional[IntOrInts] = None, padding: IntOrInts = 0, dilation: IntOrInts = 1,
           ceil_mode: bool = False):
        return max_pool_backward_op(input, grad, indices, dims, *_window(dims, kernel_size, stride, padding, dilation),
                                    ceil_mode)
    return fn


def _avg_pool_backward_fn(dims: int):
    def fn(input: Tensor, grad: Tensor, kernel_size: IntOrInts, stride: Optional[IntOrInts] = None,  # noqa: A002
           padding: IntOrInts = 0, ceil_mode: bool = False, count_include_pad: bool = True,
           divisor_override: Optional[int] = None):
        k, s, p, _ = _window(dims, kernel_size, stride, padding)
        return avg_pool_backward_op(input, grad, dims, k, s, p, ceil_mode, count_include_pad, divisor_override)
    return fn


def _adaptive_backward_fn(dims: int, maximum: bool):
    if maximum:
        def fn(input: Tensor, grad: Tensor, indices: Tensor, output_size=None):  # noqa: A002
            return adaptive_max_pool_backward_op(input, grad, indices, dims)
    else:
        def fn(input: Tensor, grad: Tensor, output_size=None):  # noqa: A002
            return adaptive_avg_pool_backward_op(input, grad, dims)
    return fn


_FACTORIES = {"max_pool#d": lambda d: _max_pool_fn(d, False),
              "max_pool#d_with_indices": lambda d: _max_pool_fn(d, True),
              "avg_pool#d": _avg_pool_fn, "adaptive_avg_pool#d": lambda d: _adaptive_fn(d, False),
              "adaptive_max_pool#d": lambda d: _adaptive_fn(d, True), "max_pool#d_backward": _max_pool_backward_fn,
              "avg_pool#d_backward": _avg_pool_backward_fn,
              "adaptive_avg_pool#d_backward": lambda d: _adaptive_backward_fn(d, False),
              "adaptive_max_pool#d_backward": lambda d: _adaptive_backward_fn(d, True)}

__all__ = []
for _pattern, _factory in _FACTORIES.items():
    for _dims in (1, 2, 3):
        _name = _pattern.replace("#", str(_dims))
        _fn = _factory(_dims)
        _fn.__name__ = _fn.__qualname__ = _name
        _fn.__doc__ = (f"rudnn.pooling.{_name} on torch tensors (torch.ops.rudnn.{_pattern.replace('#d', '')}"
                       f" with dims={_dims}); the forward functions are differentiable.")
        globals()[_name] = _fn
        __all__.append(_name)
