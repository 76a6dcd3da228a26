"""Validation of rudnn.interpolation calls (SPEC §0, §8), all run before any launch: each
call becomes a `ResampleProblem`, or raises InterpolationError naming the function, the
argument, what it got and what is needed."""
from __future__ import annotations

from dataclasses import dataclass

import kerneldsl as kd

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks
from .options import InterpolateMode, InterpolateOptions


class InterpolationError(RudnnError):
    """Bad arguments to a rudnn.interpolation function."""


CHECKS = Checks(InterpolationError)


@dataclass(frozen=True)
class ResampleProblem:
    """A validated call: input [N, C, *in_size] resampled to [N, C, *out_size] (1-3 spatial
    axes) with `mode` and `align_corners`; `out_grad` only for the backward pass."""

    input: kd.Tensor
    in_size: tuple
    out_size: tuple
    mode: InterpolateMode
    align_corners: bool
    out_grad: kd.Tensor | None = None

    @property
    def runtime(self):
        return self.input.runtime

    @property
    def planes(self) -> int:
        """N·C: the number of independent spatial planes."""
        return self.input.shape[0] * self.input.shape[1]

    @property
    def out_shape(self) -> tuple:
        return (*self.input.shape[:2], *self.out_size)


def _output_size(check: Checks, output_size, dims: int) -> tuple:
    """An int (every axis) or a sequence of `dims` ints, each > 0."""
    if isinstance(output_size, (list, tuple)):
        if len(output_size) != dims:
            check.fail(f"output_size must have {dims} entries (one per spatial axis of input), "
                       f"got {len(output_size)}: {list(output_size)}")
        sizes = tuple(output_size)
    else:
        sizes = (output_size,) * dims
    for k, s in enumerate(sizes):
        check.integer(f"output_size[{k}]", s, low=1)
    return sizes


def resample_problem(fn: str, input, output_size, options, out_grad=None, backward=False) -> ResampleProblem:  # noqa: A002
    """interpolate (backward False) / interpolate_backward (backward True, out_grad given)."""
    check = CHECKS.at(fn)
    check.tensor("input", input, dtypes=FLOAT_DTYPES)
    if input.ndim not in (3, 4, 5):
        check.fail(f"input must have rank 3, 4 or 5 ([N, C, *S] with 1-3 spatial axes), "
                   f"got rank {input.ndim} (shape {list(input.shape)})")
    in_size = tuple(input.shape[2:])
    if 0 in in_size:
        check.fail(f"input's spatial axes must be > 0, got shape {list(input.shape)}")
    out_size = _output_size(check, output_size, len(in_size))
    check.instance("options", options, InterpolateOptions)
    check.instance("options.mode", options.mode, InterpolateMode)
    align = check.boolean("options.align_corners", options.align_corners)
    if backward:
        want = (*input.shape[:2], *out_size)
        check.tensor("out_grad", out_grad, dtypes=FLOAT_DTYPES, shape=want, what="the forward output's shape")
        check.same_runtime({"input": input, "out_grad": out_grad})
    return ResampleProblem(input, in_size, out_size, options.mode, align, out_grad)

