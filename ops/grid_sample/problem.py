"""Validation of rudnn.grid_sample calls (SPEC §0, §9), all run before any launch: each call
becomes a `SampleProblem`, or raises GridSampleError naming the function, the argument,
what it got and what is needed."""
from __future__ import annotations

import math
from dataclasses import dataclass

import kerneldsl as kd

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks
from .options import GridSampleMode, GridSampleOptions, GridSamplePaddingMode


class GridSampleError(RudnnError):
    """Bad arguments to a rudnn.grid_sample function."""


CHECKS = Checks(GridSampleError)


@dataclass(frozen=True)
class SampleProblem:
    """A validated call: input [N, C, *S] sampled at grid [N, *So, dims] (dims = 2 or 3 spatial
    axes); `out_grad` [N, C, *So] only for the backward pass."""

    input: kd.Tensor
    grid: kd.Tensor
    dims: int
    options: GridSampleOptions
    out_grad: kd.Tensor | None = None

    @property
    def runtime(self):
        return self.input.runtime

    @property
    def out_shape(self) -> tuple:
        return (*self.input.shape[:2], *self.grid.shape[1:-1])

    @property
    def locations(self) -> int:
        """Grid points per batch item."""
        return math.prod(self.grid.shape[1:-1])


def sample_problem(fn: str, input, grid, options, out_grad=None, backward=False) -> SampleProblem:  # noqa: A002
    """grid_sample (backward False) / grid_sample_backward (backward True, out_grad given)."""
    check = CHECKS.at(fn)
    check.tensor("input", input, dtypes=FLOAT_DTYPES)
    if input.ndim not in (4, 5):
        check.fail(f"input must have rank 4 ([N, C, H, W]) or 5 ([N, C, D, H, W]), "
                   f"got rank {input.ndim} (shape {list(input.shape)})")
    dims = input.ndim - 2
    if 0 in input.shape[2:]:
        check.fail(f"input's spatial axes must be > 0, got shape {list(input.shape)}")
    check.tensor("grid", grid, rank=input.ndim, dtypes=FLOAT_DTYPES)
    if grid.shape[0] != input.shape[0]:
        check.fail(f"grid must have input's batch size N = {input.shape[0]} as its first axis, "
                   f"got shape {list(grid.shape)}")
    if grid.shape[-1] != dims:
        check.fail(f"grid's last axis must be {dims} (one coordinate per spatial axis of input), "
                   f"got shape {list(grid.shape)}")
    check.same_dtype("grid", grid, "input", input)
    check.instance("options", options, GridSampleOptions)
    check.instance("options.mode", options.mode, GridSampleMode)
    check.instance("options.padding_mode", options.padding_mode, GridSamplePaddingMode)
    check.boolean("options.align_corners", options.align_corners)
    if options.mode is GridSampleMode.Bicubic and dims == 3:
        check.fail("options.mode Bicubic needs a 4-D input (2 spatial axes), got a 5-D input")
    tensors = {"input": input, "grid": grid}
    p = SampleProblem(input, grid, dims, options)
    if backward:
        check.tensor("out_grad", out_grad, dtypes=FLOAT_DTYPES, shape=p.out_shape, what="the forward output's shape")
        tensors["out_grad"] = out_grad
        p = SampleProblem(input, grid, dims, options, out_grad)
    check.same_runtime(tensors)
    return p
