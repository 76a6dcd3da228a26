"""Launch plans of rudnn.grid_sample: the cube size, the 5-D views every kernel works on,
and the fixed-point headroom of the input-gradient scatter."""
from __future__ import annotations

import math

import kerneldsl as kd

from .options import GridSampleMode

UNITS = 256  # units per cube: one grid point (or one element) per unit
MAX_CUBES = 1024  # cubes of the abs-max pass (each strides over the tensor, then one atomic)
TAP_WEIGHT_BOUND = {GridSampleMode.Bilinear: 1.0, GridSampleMode.Nearest: 1.0, GridSampleMode.Bicubic: 2.0}


def cubes(total: int) -> int:
    return -(-total // UNITS)


def as_5d(t: kd.Tensor, dims: int, axis: int) -> kd.Tensor:
    """A 2-D call's tensor with a depth axis of 1 inserted at `axis` (3-D calls unchanged)."""
    if dims == 3:
        return t
    return t.reshape(*t.shape[:axis], 1, *t.shape[axis:])


def headroom(locations: int, mode: GridSampleMode) -> int:
    """log2 of a bound on the summed |weight| one pixel can receive from one plane's grid
    points (each point's taps weigh at most TAP_WEIGHT_BOUND together), plus one bit."""
    return max(1, math.ceil(math.log2(max(1.0, locations * TAP_WEIGHT_BOUND[mode])))) + 1
