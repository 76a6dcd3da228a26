"""Validation for `rudnn.convolution` (SPEC §0, §6): every rule checked before any launch,
turning a call into one `Problem` (all ranks lifted to 3 spatial axes, both layouts seen
as [B, C, D, H, W] views), or raising ConvSetupError naming the argument."""
from __future__ import annotations

import math
from dataclasses import dataclass

from kerneldsl.tensor import Tensor

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks
from .options import ConvOptions, ConvStrategy


class ConvSetupError(RudnnError):
    """Bad input to a `rudnn.convolution` entry point (shapes, dtypes, runtimes, options, strategy)."""


CHECKS = Checks(ConvSetupError)


@dataclass(frozen=True)
class Geometry:
    """The sizes of one convolution, lifted to three spatial axes (missing leading axes have
    size 1, stride 1, padding 0, dilation 1). `rank` is the caller's N."""

    rank: int
    B: int
    C: int          # input channels
    K: int          # output channels
    groups: int
    S: tuple        # input spatial sizes (D, H, W)
    R: tuple        # kernel sizes
    O: tuple        # output spatial sizes
    stride: tuple
    pad: tuple
    dil: tuple

    @property
    def Cg(self) -> int:
        return self.C // self.groups

    @property
    def Kg(self) -> int:
        return self.K // self.groups

    @property
    def taps(self) -> int:
        return math.prod(self.R)

    @property
    def pixels(self) -> int:
        return math.prod(self.O)

    @property
    def in_pixels(self) -> int:
        return math.prod(self.S)

    def consts(self) -> tuple:
        """Kernel specialisation: (SD, SH, SW, PD, PH, PW, DD, DH, DW, KD, KH, KW)."""
        return (*self.stride, *self.pad, *self.dil, *self.R)

    def flops(self) -> float:
        """Multiply-adds times two of the forward pass (each backward pass has as many)."""
        return 2.0 * self.B * self.K * self.pixels * self.Cg * self.taps


@dataclass(frozen=True)
class Problem:
    """A validated call: `geo`, the dtype and runtime, and the tensors as 5-D views
    (x/dy/y as [B, C, D, H, W], weights as [K, C/groups, KD, KH, KW]); absent ones None."""

    geo: Geometry
    dtype: object
    runtime: object
    x: Tensor | None = None
    w: Tensor | None = None
    dy: Tensor | None = None
    bias: Tensor | None = None


def spatial_tuple(check: Checks, name: str, value, rank: int, low: int) -> tuple:
    """An int broadcast to `rank` axes, or a tuple/list of `rank` ints, each >= low."""
    if isinstance(value, (tuple, list)):
        if len(value) != rank:
            check.fail(f"{name} must have {rank} entries (one per spatial axis of a {rank}-D convolution), "
                       f"got {len(value)}: {tuple(value)!r}")
        items = tuple(value)
    else:
        items = (value,) * rank
    what = {0: ">= 0", 1: ">= 1"}[low]
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int):
            check.fail(f"{name} must be an int or a tuple of {rank} ints, got {value!r}")
        if v < low:
            check.fail(f"{name} must be {what} on every axis, got {value!r}")
    return items


def lift(t: tuple, rank: int, fill: int) -> tuple:
    """A rank-long tuple padded in front to 3 axes with `fill`."""
    return (fill,) * (3 - rank) + tuple(t)


def output_size(check: Checks, S: tuple, R: tuple, stride, pad, dil, rank: int) -> tuple:
    """O = (S + 2 pad - dil (R - 1) - 1) // stride + 1 per axis; each must be >= 1."""
    O = tuple((s + 2 * p - d * (r - 1) - 1) // st + 1 for s, r, st, p, d in zip(S, R, stride, pad, dil))
    if min(O) < 1:
        check.fail(f"the output would have spatial size {list(O[3 - rank:])} (below 1): input spatial size "
                   f"{list(S[3 - rank:])}, kernel {list(R[3 - rank:])}, padding {list(pad[3 - rank:])}, "
                   f"dilation {list(dil[3 - rank:])}, stride {list(stride[3 - rank:])}")
    return O


def check_options(check: Checks, options, rank: int) -> tuple:
    """(stride, pad, dil, groups), validated and lifted to three axes."""
    check.instance("options", options, ConvOptions)
    stride = spatial_tuple(check, "options.stride", options.stride, rank, 1)
    pad = spatial_tuple(check, "options.padding", options.padding, rank, 0)
    dil = spatial_tuple(check, "options.dilation", options.dilation, rank, 1)
    groups = check.integer("options.groups", options.groups, low=1)
    return lift(stride, rank, 1), lift(pad, rank, 0), lift(dil, rank, 1), groups


def check_shape_tuple(check: Checks, name: str, shape, rank: int | None = None) -> tuple:
    """A tuple/list of non-negative ints of length 3-5 (or exactly `rank`)."""
    if not isinstance(shape, (tuple, list)) or any(isinstance(s, bool) or not isinstance(s, int) for s in shape):
        check.fail(f"{name} must be a tuple of ints, got {shape!r}")
    if rank is not None and len(shape) != rank:
        check.fail(f"{name} must have {rank} entries (rank of the other arguments), got {len(shape)}: {tuple(shape)}")
    if not 3 <= len(shape) <= 5:
        check.fail(f"{name} must have 3 to 5 entries ([B, C, *spatial] with 1-3 spatial axes), got {len(shape)}")
    if min(shape) < 0:
        check.fail(f"{name} must not have negative sizes, got {tuple(shape)}")
    return tuple(shape)


def check_channels(check: Checks, C: int, K: int, Cg_w: int, groups: int, wname: str) -> None:
    """Cin % groups, Cout % groups and the weight's per-group input channels."""
    if C < 1:
        check.fail(f"the input must have at least one channel, got Cin = {C}")
    if C % groups:
        check.fail(f"input channels Cin = {C} must be divisible by options.groups = {groups}")
    if K % groups:
        check.fail(f"output channels Cout = {K} ({wname}'s first axis) must be divisible by options.groups = {groups}")
    if Cg_w != C // groups:
        check.fail(f"{wname} must have Cin/groups = {C // groups} input channels per group "
                   f"(Cin = {C}, groups = {groups}), got {Cg_w}")


def as_5d(t: Tensor, rank: int, channels_last: bool) -> Tensor:
    """A view of t as [B, C, D, H, W] (a weight as [K, C/g, KD, KH, KW]) with unit leading
    spatial axes for 1-D and 2-D, for either layout; no copy."""
    shape, strides = list(t.shape), list(t.strides)
    if channels_last:
        order = [0, t.ndim - 1, *range(1, t.ndim - 1)]
        shape, strides = [shape[a] for a in order], [strides[a] for a in order]
    extra = 3 - rank
    shape = shape[:2] + [1] * extra + shape[2:]
    strides = strides[:2] + [0] * extra + strides[2:]
    return Tensor(t.runtime, t.buffer, shape, t.dtype, strides, t.offset)


def user_shape(shape5: tuple, rank: int, channels_last: bool) -> tuple:
    """The caller-facing shape of a [B, C, D, H, W] result of rank `rank`."""
    s = (shape5[0], shape5[1], *shape5[2 + 3 - rank:])
    return (s[0], *s[2:], s[1]) if channels_last else s


def validate_forward(fn: str, input, weight, bias, options, channels_last: bool) -> Problem:  # noqa: A002
    check = CHECKS.at(fn)
    x = check.tensor("input", input, dtypes=FLOAT_DTYPES)
    if not 3 <= x.ndim <= 5:
        check.fail(f"input must have rank 3, 4 or 5 ([B, {'*S, Cin' if channels_last else 'Cin, *S'}] with "
                   f"1-3 spatial axes), got rank {x.ndim} (shape {list(x.shape)})")
    rank = x.ndim - 2
    check.same_runtime({"input": input, "weight": weight, "bias": bias})
    w = check.tensor("weight", weight, rank=x.ndim, dtypes=FLOAT_DTYPES)
    check.same_dtype("weight", w, "input", x)
    stride, pad, dil, groups = check_options(check, options, rank)
    x5, w5 = as_5d(x, rank, channels_last), as_5d(w, rank, channels_last)
    B, C, S = x5.shape[0], x5.shape[1], x5.shape[2:]
    K, R = w5.shape[0], w5.shape[2:]
    check_channels(check, C, K, w5.shape[1], groups, "weight")
    if min(R) < 1:
        check.fail(f"weight must have kernel sizes >= 1, got shape {list(w.shape)}")
    if bias is not None:
        check.tensor("bias", bias, rank=1, dtypes=FLOAT_DTYPES, shape=(K,), what="[Cout]")
        check.same_dtype("bias", bias, "input", x)
    O = output_size(check, S, R, stride, pad, dil, rank)
    geo = Geometry(rank, B, C, K, groups, tuple(S), tuple(R), O, stride, pad, dil)
    return Problem(geo, x.dtype, x.runtime, x=x5, w=w5, bias=bias)


def validate_data_backward(out_grad, weight, in_shape, options) -> Problem:
    check = CHECKS.at("conv_data_backward")
    dy = check.tensor("out_grad", out_grad, dtypes=FLOAT_DTYPES)
    if not 3 <= dy.ndim <= 5:
        check.fail(f"out_grad must have rank 3, 4 or 5 ([B, Cout, *O]), got rank {dy.ndim} (shape {list(dy.shape)})")
    rank = dy.ndim - 2
    check.same_runtime({"out_grad": out_grad, "weight": weight})
    w = check.tensor("weight", weight, rank=dy.ndim, dtypes=FLOAT_DTYPES)
    check.same_dtype("weight", w, "out_grad", dy)
    in_shape = check_shape_tuple(check, "in_shape", in_shape, dy.ndim)
    stride, pad, dil, groups = check_options(check, options, rank)
    dy5, w5 = as_5d(dy, rank, False), as_5d(w, rank, False)
    B, C, S = in_shape[0], in_shape[1], lift(in_shape[2:], rank, 1)
    K, R = w5.shape[0], w5.shape[2:]
    check_channels(check, C, K, w5.shape[1], groups, "weight")
    if min(R) < 1:
        check.fail(f"weight must have kernel sizes >= 1, got shape {list(w.shape)}")
    O = output_size(check, S, R, stride, pad, dil, rank)
    want = (B, K, *O[3 - rank:])
    check.shape("out_grad", dy, want, "the forward output for in_shape, weight and options")
    geo = Geometry(rank, B, C, K, groups, tuple(S), tuple(R), O, stride, pad, dil)
    return Problem(geo, dy.dtype, dy.runtime, w=w5, dy=dy5)


def validate_weight_backward(input, out_grad, weight_shape, options) -> Problem:  # noqa: A002
    check = CHECKS.at("conv_weight_backward")
    x = check.tensor("input", input, dtypes=FLOAT_DTYPES)
    if not 3 <= x.ndim <= 5:
        check.fail(f"input must have rank 3, 4 or 5 ([B, Cin, *S]), got rank {x.ndim} (shape {list(x.shape)})")
    rank = x.ndim - 2
    check.same_runtime({"input": input, "out_grad": out_grad})
    dy = check.tensor("out_grad", out_grad, rank=x.ndim, dtypes=FLOAT_DTYPES)
    check.same_dtype("out_grad", dy, "input", x)
    weight_shape = check_shape_tuple(check, "weight_shape", weight_shape, x.ndim)
    stride, pad, dil, groups = check_options(check, options, rank)
    x5, dy5 = as_5d(x, rank, False), as_5d(dy, rank, False)
    B, C, S = x5.shape[0], x5.shape[1], x5.shape[2:]
    K, R = weight_shape[0], lift(weight_shape[2:], rank, 1)
    check_channels(check, C, K, weight_shape[1], groups, "weight_shape")
    if min(R) < 1:
        check.fail(f"weight_shape must have kernel sizes >= 1, got {tuple(weight_shape)}")
    O = output_size(check, S, R, stride, pad, dil, rank)
    check.shape("out_grad", dy, (B, K, *O[3 - rank:]), "the forward output for input, weight_shape and options")
    geo = Geometry(rank, B, C, K, groups, tuple(S), tuple(R), O, stride, pad, dil)
    return Problem(geo, x.dtype, x.runtime, x=x5, dy=dy5)


def check_strategy(strategy) -> ConvStrategy:
    return CHECKS.instance("strategy", strategy, ConvStrategy, "ConvStrategy (Direct, ImplicitGemm or Autotune)")


__all__ = ["ConvSetupError", "Geometry", "Problem", "validate_forward", "validate_data_backward",
           "validate_weight_backward", "check_strategy", "as_5d", "user_shape", "CHECKS"]
