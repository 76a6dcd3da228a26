"""Cube-wide reductions written in the DSL itself (`@kd.func`), for kernels to call like
builtins: `total = kd.cube_sum(x)`. Each combines a plane reduction with one shared array of
a value per plane and one barrier, so it must be reached by every unit of the cube."""
from __future__ import annotations

from . import lang as kd
from .dtypes import f32
from .frontend import func


@func
def cube_sum(x):
    """Sum of the f32 value x over every unit of the cube, given to every unit."""
    s = kd.plane_sum(f32(x))
    part = kd.shared(f32, kd.plane_count())
    if kd.plane_elect():
        part[kd.plane_pos()] = s
    kd.sync_cube()
    total = f32(0)
    for j in kd.unroll(kd.plane_count()):
        total += part[j]
    return total


@func
def cube_max(x):
    """Maximum of the f32 value x over every unit of the cube (NaN if any is NaN), given to
    every unit."""
    m = kd.plane_max(f32(x))
    part = kd.shared(f32, kd.plane_count())
    if kd.plane_elect():
        part[kd.plane_pos()] = m
    kd.sync_cube()
    best = part[0]
    for j in kd.unroll(1, kd.plane_count()):
        best = kd.max(best, part[j])
    return best


__all__ = ["cube_sum", "cube_max"]
