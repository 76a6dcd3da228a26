"""rudnn.torch's resampling ops: interpolate (SPEC §8) and grid_sample (SPEC §9), each with
autograd through its backward kernel (input gradient; grid_sample also the grid's).

Enums become strings: mode "Nearest" | "NearestExact" | "Linear" | "Bicubic" | "Lanczos3"
for interpolate; mode "Bilinear" | "Nearest" | "Bicubic" and padding_mode "Zeros" |
"Border" | "Reflection" for grid_sample (the families' member names)."""
from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor

import rudnn.grid_sample as G
import rudnn.interpolation as I

from .bridge import enum_member, session, spatial_tuple, to_kd, to_torch


def _interp_options(mode: str, align_corners: bool) -> I.InterpolateOptions:
    return I.InterpolateOptions(enum_member(I.InterpolateMode, mode, "mode"), align_corners)


def _grid_options(mode: str, padding_mode: str, align_corners: bool) -> G.GridSampleOptions:
    return G.GridSampleOptions(enum_member(G.GridSampleMode, mode, "mode"),
                               enum_member(G.GridSamplePaddingMode, padding_mode, "padding_mode"), align_corners)


# ---------------------------------------------------------------------------- ops
@torch.library.custom_op("rudnn::interpolate", mutates_args=())
def interpolate_op(input: Tensor, output_size: list[int], mode: str, align_corners: bool) -> Tensor:  # noqa: A002
    """input [N, C, *S] (1-3 spatial axes) resampled to [N, C, *output_size]."""
    with session(input) as rt:
        return to_torch(I.interpolate(to_kd(rt, input), tuple(output_size), _interp_options(mode, align_corners)))


@torch.library.custom_op("rudnn::interpolate_backward", mutates_args=())
def interpolate_backward_op(input: Tensor, out_grad: Tensor, output_size: list[int], mode: str,  # noqa: A002
                            align_corners: bool) -> Tensor:
    """The input gradient of interpolate: the exact adjoint of the forward map."""
    with session(input) as rt:
        return to_torch(I.interpolate_backward(to_kd(rt, input), to_kd(rt, out_grad), tuple(output_size),
                                               _interp_options(mode, align_corners)))


@torch.library.custom_op("rudnn::grid_sample", mutates_args=())
def grid_sample_op(input: Tensor, grid: Tensor, mode: str, padding_mode: str,  # noqa: A002
                   align_corners: bool) -> Tensor:
    """input [N, C, *S] sampled at grid [N, *So, dims] -> [N, C, *So]."""
    with session(input) as rt:
        return to_torch(G.grid_sample(to_kd(rt, input), to_kd(rt, grid), _grid_options(mode, padding_mode,
                                                                                         align_corners)))


@torch.library.custom_op("rudnn::grid_sample_backward", mutates_args=())
def grid_sample_backward_op(input: Tensor, grid: Tensor, out_grad: Tensor, mode: str, padding_mode: str,  # noqa: A002
                            align_corners: bool) -> tuple[Tensor, Tensor]:
    """(grad_input, grad_grid), both in the input's dtype; deterministic."""
    with session(input) as rt:
        out = G.grid_sample_backward(to_kd(rt, input), to_kd(rt, grid), to_kd(rt, out_grad),
                                     _grid_options(mode, padding_mode, align_corners))
        return tuple(to_torch(x) for x in out)


interpolate_op.register_fake(lambda input, size, mode, ac: input.new_empty((*input.shape[:2], *size)))
interpolate_backward_op.register_fake(lambda input, out_grad, size, mode, ac: torch.empty_like(input))
grid_sample_op.register_fake(lambda input, grid, mode, pm, ac: input.new_empty((*input.shape[:2], *grid.shape[1:-1])))
grid_sample_backward_op.register_fake(lambda input, grid, out_grad, mode, pm, ac: (
    torch.empty_like(input), grid.new_empty(grid.shape, dtype=input.dtype)))


# ---------------------------------------------------------------------------- autograd
def _save_interp(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.args = inputs[1:]


def _interp_grad(ctx, grad):
    (input,) = ctx.saved_tensors  # noqa: A001
    return interpolate_backward_op(input, grad.contiguous(), *ctx.args), None, None, None


def _save_grid(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.args = inputs[2:]


def _grid_grad(ctx, grad):
    input, grid = ctx.saved_tensors  # noqa: A001
    dx, dgrid = grid_sample_backward_op(input, grid, grad.contiguous(), *ctx.args)
    return dx, dgrid.to(grid.dtype), None, None, None


interpolate_op.register_autograd(_interp_grad, setup_context=_save_interp)
grid_sample_op.register_autograd(_grid_grad, setup_context=_save_grid)


# ---------------------------------------------------------------------------- user-facing functions
def interpolate(input: Tensor, output_size: Union[int, Sequence[int]], mode: str = "Nearest",  # noqa: A002
                align_corners: bool = False) -> Tensor:
    """rudnn.interpolation.interpolate on torch tensors; differentiable in input."""
    return interpolate_op(input, spatial_tuple(output_size, input.ndim - 2, "output_size"), mode, align_corners)


def interpolate_backward(input: Tensor, out_grad: Tensor, output_size: Union[int, Sequence[int]],  # noqa: A002
                         mode: str = "Nearest", align_corners: bool = False) -> Tensor:
    """The input gradient of interpolate given its output gradient."""
    size = spatial_tuple(output_size, input.ndim - 2, "output_size")
    return interpolate_backward_op(input, out_grad, size, mode, align_corners)


def grid_sample(input: Tensor, grid: Tensor, mode: str = "Bilinear", padding_mode: str = "Zeros",  # noqa: A002
                align_corners: bool = False) -> Tensor:
    """rudnn.grid_sample.grid_sample on torch tensors; differentiable in input and grid."""
    return grid_sample_op(input, grid, mode, padding_mode, align_corners)


def grid_sample_backward(input: Tensor, grid: Tensor, out_grad: Tensor, mode: str = "Bilinear",  # noqa: A002
                         padding_mode: str = "Zeros", align_corners: bool = False) -> tuple:
    """(grad_input, grad_grid) of grid_sample."""
    return grid_sample_backward_op(input, grid, out_grad, mode, padding_mode, align_corners)


__all__ = ["interpolate", "interpolate_backward", "grid_sample", "grid_sample_backward"]
