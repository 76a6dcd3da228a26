"""Validation of rudnn.pooling calls (SPEC §0, §7), all run before any launch: each call
becomes a `PoolProblem` (the input seen as [planes, D, H, W] with its 1- or 2-D spatial
axes padded to three by leading axes of 1, and one `Axis` of window geometry per spatial
axis), or raises PoolingError naming the function, the argument, what it got and what
is needed. Output sizes follow torch.nn.functional, the ceil-mode rule included."""
from __future__ import annotations

import math
from dataclasses import dataclass

import kerneldsl as kd

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks


class PoolingError(RudnnError):
    """Bad arguments to a rudnn.pooling function."""


CHECKS = Checks(PoolingError)
I64 = (kd.i64,)


@dataclass(frozen=True)
class Axis:
    """One spatial axis: input size, output size, and the window (kernel, stride, padding,
    dilation). Adaptive pooling uses only the sizes; the padding axes of a 1-/2-D call
    are Axis(1, 1)."""

    size: int
    out: int
    kernel: int = 1
    stride: int = 1
    padding: int = 0
    dilation: int = 1


@dataclass(frozen=True)
class PoolProblem:
    """A validated pooling call: the input, its leading (batch, channel) shape, the three
    spatial axes (depth, height, width; padded at the front) and the averaging rules."""

    input: kd.Tensor
    lead: tuple
    axes: tuple
    dims: int
    adaptive: bool
    count_include_pad: bool = True
    divisor: int = 0   # divisor_override, 0 when None

    @property
    def runtime(self):
        return self.input.runtime

    @property
    def planes(self) -> int:
        return math.prod(self.lead)

    @property
    def out_shape(self) -> tuple:
        return self.lead + tuple(a.out for a in self.axes[3 - self.dims:])

    @property
    def in_spatial(self) -> int:
        return math.prod(a.size for a in self.axes)

    @property
    def out_spatial(self) -> int:
        return math.prod(a.out for a in self.axes)

    @property
    def wide(self) -> bool:
        """Whether adaptive bin arithmetic (position × size) needs 64 bits."""
        return self.adaptive and any(a.size * a.out >= 2**31 for a in self.axes)

    @property
    def is_global_average(self) -> bool:
        """Adaptive average pooling to one element a plane: a row reduction."""
        return self.adaptive and self.out_spatial == 1


def _tuple(check: Checks, name: str, value, dims: int, low: int) -> tuple:
    """An int or a sequence of `dims` ints, each >= low, as a tuple of `dims` ints."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,) * dims
    if len(items) != dims:
        check.fail(f"{name} must be an int or {dims} ints, got {value!r}")
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int):
            check.fail(f"{name} must be an int or {dims} ints, got {value!r}")
        if v < low:
            need = "positive" if low == 1 else f">= {low}"
            check.fail(f"{name} must be {need}, got {value!r}")
    return items


def _input(check: Checks, input, dims: int) -> kd.Tensor:  # noqa: A002
    """[N, C, *S] or [C, *S] of a float dtype, with every spatial axis > 0."""
    check.tensor("input", input, dtypes=FLOAT_DTYPES)
    if input.ndim not in (dims + 1, dims + 2):
        check.fail(f"input must have rank {dims + 1} ([C, *S]) or {dims + 2} ([N, C, *S]), "
                   f"got rank {input.ndim} (shape {list(input.shape)})")
    if any(s == 0 for s in input.shape[-dims:]):
        check.fail(f"input needs non-zero spatial sizes, got shape {list(input.shape)}")
    return input


def output_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """torch's pooling output size: with ceil_mode, a last window must start inside the
    input or the left padding."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _padded(axes: list) -> tuple:
    return tuple([Axis(1, 1)] * (3 - len(axes)) + axes)


def window_problem(fn: str, dims: int, input, kernel_size, stride, padding, dilation, ceil_mode,  # noqa: A002
                   count_include_pad=True, divisor_override=None) -> PoolProblem:
    """max_pool / avg_pool (dilation 1 for avg) forward and backward."""
    check = CHECKS.at(fn)
    x = _input(check, input, dims)
    k = _tuple(check, "kernel_size", kernel_size, dims, 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else \
        _tuple(check, "stride", stride, dims, 1)
    p = _tuple(check, "padding", padding, dims, 0)
    d = _tuple(check, "dilation", dilation, dims, 1)
    ceil = check.boolean("ceil_mode", ceil_mode)
    include = check.boolean("count_include_pad", count_include_pad)
    divisor = 0
    if divisor_override is not None:
        divisor = check.integer("divisor_override", divisor_override)
        if divisor == 0:
            check.fail("divisor_override must be non-zero, got 0")
    for i in range(dims):
        if p[i] > k[i] // 2:
            check.fail(f"padding must be at most half of kernel_size, got padding={padding!r} "
                       f"and kernel_size={kernel_size!r}")
    sizes = x.shape[-dims:]
    axes = []
    for i in range(dims):
        out = output_size(sizes[i], k[i], s[i], p[i], d[i], ceil)
        if out < 1:
            check.fail(f"the output would be empty: input spatial size {list(sizes)} is too small for "
                       f"kernel_size={kernel_size!r}, stride={stride!r}, padding={padding!r}, dilation={dilation!r} "
                       f"(output size {out} on axis {i})")
        axes.append(Axis(sizes[i], out, k[i], s[i], p[i], d[i]))
    return PoolProblem(x, tuple(x.shape[:-dims]), _padded(axes), dims, False, include, divisor)


def adaptive_problem(fn: str, dims: int, input, output_size) -> PoolProblem:  # noqa: A002
    """adaptive_avg_pool / adaptive_max_pool forward and backward; None in output_size keeps
    that axis's input size."""
    check = CHECKS.at(fn)
    x = _input(check, input, dims)
    sizes = x.shape[-dims:]
    items = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * dims
    if len(items) != dims:
        check.fail(f"output_size must be an int or {dims} ints (or None), got {output_size!r}")
    outs = []
    for i, v in enumerate(items):
        if v is None:
            outs.append(sizes[i])
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            check.fail(f"output_size must be positive ints (or None), got {output_size!r}")
        outs.append(v)
    axes = [Axis(sizes[i], outs[i]) for i in range(dims)]
    return PoolProblem(x, tuple(x.shape[:-dims]), _padded(axes), dims, True)


def check_grad(fn: str, problem: PoolProblem, grad, indices=None) -> None:
    """grad (and indices, for max pooling) of the forward output's shape, on the input's runtime."""
    check = CHECKS.at(fn)
    shape = problem.out_shape
    check.tensor("grad", grad, dtypes=FLOAT_DTYPES, shape=shape, what="the forward output's shape")
    check.same_dtype("grad", grad, "input", problem.input)
    if indices is not None or fn.startswith(("max", "adaptive_max")):
        check.tensor("indices", indices, dtypes=I64, shape=shape, what="the forward output's shape")
    check.same_runtime({"input": problem.input, "grad": grad, "indices": indices})
