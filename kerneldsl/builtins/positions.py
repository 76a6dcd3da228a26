"""Positions: where a unit is in its plane, cube and grid, and the sizes of each.

Cube dimensions are compile-time (the launch's block is part of the specialisation), so
`cube_dim_*`, `cube_units` and `plane_count` fold to numbers; `unit_pos_y/z` fold to 0 on
a cube that is flat in that axis, and `unit_pos_x` of a 1-D cube is the flat index.
"""
from __future__ import annotations

from .. import ir
from ..dtypes import i32
from .registry import builtin, declare


def _grid(kind, axis):
    def handler(fe, node):
        return ir.Position(i32, kind=kind, axis=axis, loc=fe.loc(node))
    return handler


def _cube_dim(axis):
    def handler(fe, node):
        return fe.spec.cube_dim[axis]
    return handler


def _unit_pos(axis):
    def handler(fe, node):
        dx, dy, dz = fe.spec.cube_dim
        if (axis == 1 and dy == 1) or (axis == 2 and dz == 1):
            return 0
        if axis == 0 and dy == 1 and dz == 1:
            return ir.Position(i32, kind="unit_flat", axis=0, loc=fe.loc(node))
        return ir.Position(i32, kind="unit_pos", axis=axis, loc=fe.loc(node))
    return handler


cube_pos_x = declare("cube_pos_x", _grid("cube_pos", 0), "Index of this cube in the grid, x.", "")
cube_pos_y = declare("cube_pos_y", _grid("cube_pos", 1), "Index of this cube in the grid, y.", "")
cube_pos_z = declare("cube_pos_z", _grid("cube_pos", 2), "Index of this cube in the grid, z.", "")
cube_count_x = declare("cube_count_x", _grid("cube_count", 0), "Number of cubes in the grid, x.", "")
cube_count_y = declare("cube_count_y", _grid("cube_count", 1), "Number of cubes in the grid, y.", "")
cube_count_z = declare("cube_count_z", _grid("cube_count", 2), "Number of cubes in the grid, z.", "")
cube_dim_x = declare("cube_dim_x", _cube_dim(0), "Units per cube, x (compile-time).", "")
cube_dim_y = declare("cube_dim_y", _cube_dim(1), "Units per cube, y (compile-time).", "")
cube_dim_z = declare("cube_dim_z", _cube_dim(2), "Units per cube, z (compile-time).", "")
unit_pos_x = declare("unit_pos_x", _unit_pos(0), "Index of this unit in its cube, x.", "")
unit_pos_y = declare("unit_pos_y", _unit_pos(1), "Index of this unit in its cube, y.", "")
unit_pos_z = declare("unit_pos_z", _unit_pos(2), "Index of this unit in its cube, z.", "")


def units_per_cube(fe) -> int:
    """The cube's size in units (compile-time)."""
    x, y, z = fe.spec.cube_dim
    return x * y * z


@builtin("Units per cube in all (compile-time).")
def cube_units(fe, node):
    return units_per_cube(fe)


@builtin("Flat index of this unit in its cube: x + y*dim_x + z*dim_x*dim_y.")
def unit_pos(fe, node):
    return ir.Position(i32, kind="unit_flat", axis=0, loc=fe.loc(node))


@builtin("Index of this unit's plane in the cube: unit_pos() // PLANE_DIM.")
def plane_pos(fe, node):
    return ir.Position(i32, kind="plane_pos", axis=0, loc=fe.loc(node))


@builtin("Index of this unit in its plane: unit_pos() % PLANE_DIM.")
def lane_pos(fe, node):
    return ir.Position(i32, kind="lane_pos", axis=0, loc=fe.loc(node))


@builtin("Planes per cube (compile-time): ceil(cube_units() / PLANE_DIM).")
def plane_count(fe, node):
    return -(-units_per_cube(fe) // fe.spec.plane_dim)
