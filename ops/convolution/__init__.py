"""rudnn.convolution: 1-, 2- and 3-D convolution, forward (NCHW and NHWC) and both
backward passes (SPEC §6).

    y = conv_forward(x, w, bias=None, options=ConvOptions(stride, padding, dilation, groups),
                     strategy=ConvStrategy.Autotune)
    dx = conv_data_backward(dy, w, x.shape, options)       # gradient w.r.t. the input
    dw = conv_weight_backward(x, dy, w.shape, options)     # gradient w.r.t. the weight

x [B, Cin, *S], w [Cout, Cin/groups, *K] -> y [B, Cout, *O] (conv_forward_nhwc: x [B, *S, Cin],
w [Cout, *K, Cin/groups] -> y [B, *O, Cout]); F32/F16/BF16 with F32 accumulation. `Direct`
covers every configuration (where a cube's units are SIMD lanes, the CPU, its three passes
take the row-vector plan of rows.py, elsewhere depthwise passes take depthwise.py:
tuning.direct_plan); `ImplicitGemm` runs
a GEMM over the implicit im2col matrix where it covers the call (tuning.py says when) and
`Direct` otherwise; `Autotune` times the valid ones once per shape bucket and remembers the
fastest.
"""
from __future__ import annotations

from kerneldsl.replay import replayable

from . import depthwise, direct, implicit_gemm, rows, tuning
from .options import ConvOptions, ConvStrategy
from .problem import (ConvSetupError, as_5d, check_strategy, user_shape, validate_data_backward,
                      validate_forward, validate_weight_backward)

_DEFAULT_OPTIONS = ConvOptions()
_DUMMIES: dict = {}


def _dummy(rt):
    """A stand-in passed for an absent bias (never read)."""
    d = _DUMMIES.get(id(rt))
    if d is None or d[0] is not rt:
        d = _DUMMIES[id(rt)] = (rt, rt.zeros((1,), "f32"))
    return d[1]


def _direct_forward(p, y5) -> None:
    """The `Direct` forward pass, through the plan tuning.direct_plan picks for the device."""
    plan = tuning.direct_plan(p, "forward")
    if plan == "rows":
        rows.run_forward(p, y5)
    elif plan == "depthwise":
        depthwise.run_forward(p, y5, _dummy(p.runtime))
    else:
        direct.run_forward(p, y5, _dummy(p.runtime))


def _direct_data_backward(p, dx5) -> None:
    """The `Direct` data backward pass, through the plan tuning.direct_plan picks."""
    plan = tuning.direct_plan(p, "data")
    if plan == "rows":
        rows.run_data_backward(p, dx5)
    elif plan == "depthwise":
        depthwise.run_data_backward(p, dx5, _dummy(p.runtime))
    else:
        direct.run_data_backward(p, dx5)


def _direct_weight_backward(p, dw5) -> None:
    """The `Direct` weight backward pass, through the plan tuning.direct_plan picks."""
    plan = tuning.direct_plan(p, "weight")
    if plan == "rows":
        rows.run_weight_backward(p, dw5)
    elif plan == "depthwise":
        depthwise.run_weight_backward(p, dw5)
    else:
        direct.run_weight_backward(p, dw5)


def _forward(fn, input, weight, bias, options, strategy, channels_last):  # noqa: A002
    p = validate_forward(fn, input, weight, bias, options, channels_last)
    strategy = check_strategy(strategy)
    g = p.geo
    out = p.runtime.empty(user_shape((g.B, g.K, *g.O), g.rank, channels_last), p.dtype)
    if out.size == 0:
        return out
    y5 = as_5d(out, g.rank, channels_last)
    runners = {"Direct": lambda: _direct_forward(p, y5),
               "ImplicitGemm": lambda: implicit_gemm.run_forward(p, y5, _dummy(p.runtime))}
    runners[tuning.resolve(p, "forward", strategy, runners)]()
    return out


@replayable
def conv_forward(input, weight, bias=None, options: ConvOptions = _DEFAULT_OPTIONS,  # noqa: A002
                 strategy: ConvStrategy = ConvStrategy.Autotune):
    """y[b, co, o] = bias[co] + sum over the group's input channels and the kernel taps of
    x[b, ci, o·stride + k·dilation − padding]·w[co, ci', k] (zero outside); NCHW layout."""
    return _forward("conv_forward", input, weight, bias, options, strategy, False)


@replayable
def conv_forward_nhwc(input, weight, bias=None, options: ConvOptions = _DEFAULT_OPTIONS,  # noqa: A002
                      strategy: ConvStrategy = ConvStrategy.Autotune):
    """conv_forward with channels last: x [B, *S, Cin], w [Cout, *K, Cin/groups], y [B, *O, Cout]."""
    return _forward("conv_forward_nhwc", input, weight, bias, options, strategy, True)


@replayable
def conv_data_backward(out_grad, weight, in_shape, options: ConvOptions = _DEFAULT_OPTIONS,
                       strategy: ConvStrategy = ConvStrategy.Autotune):
    """The gradient of conv_forward w.r.t. its input (shape `in_shape`, NCHW), given the
    output gradient: the adjoint of the forward map."""
    p = validate_data_backward(out_grad, weight, in_shape, options)
    strategy = check_strategy(strategy)
    g = p.geo
    out = p.runtime.empty(tuple(in_shape), p.dtype)
    if out.size == 0:
        return out
    if g.K == 0:  # no output channels: the gradient is zero (the kernels' channel blocks would be empty)
        return p.runtime.zeros(tuple(in_shape), p.dtype)
    dx5 = as_5d(out, g.rank, False)
    runners = {"Direct": lambda: _direct_data_backward(p, dx5),
               "ImplicitGemm": lambda: implicit_gemm.run_data_backward(p, dx5, _dummy(p.runtime))}
    runners[tuning.resolve(p, "data", strategy, runners)]()
    return out


@replayable
def conv_weight_backward(input, out_grad, weight_shape, options: ConvOptions = _DEFAULT_OPTIONS,  # noqa: A002
                         strategy: ConvStrategy = ConvStrategy.Autotune):
    """The gradient of conv_forward w.r.t. its weight (shape `weight_shape`, [Cout, Cin/groups,
    *K]), given the input and the output gradient; deterministic (fixed reduction order)."""
    p = validate_weight_backward(input, out_grad, weight_shape, options)
    strategy = check_strategy(strategy)
    g = p.geo
    out = p.runtime.empty(tuple(weight_shape), p.dtype)
    if out.size == 0:
        return out
    if g.B == 0:  # no samples: the gradient is zero
        return p.runtime.zeros(tuple(weight_shape), p.dtype)
    dw5 = as_5d(out, g.rank, False)
    runners = {"Direct": lambda: _direct_weight_backward(p, dw5),
               "ImplicitGemm": lambda: implicit_gemm.run_weight_backward(p, dw5)}
    runners[tuning.resolve(p, "weight", strategy, runners)]()
    return out


__all__ = ["ConvOptions", "ConvStrategy", "conv_forward", "conv_forward_nhwc", "conv_data_backward",
           "conv_weight_backward", "ConvSetupError"]
