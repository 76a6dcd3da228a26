"""Checks every launch passes before a back end sees it, the same on the first launch and the
hundredth: the grid and cube shape are ints within the device's limits (`Capabilities.max_grid`,
`max_grid_cubes`, `max_cube_dims`, `max_cube_units`), and no tensor the kernel stores to is
read-only memory. `Kernel.launch` calls `launch_shape` before it looks up a binary and
`check_writable` once it has one; both are cheap enough for every launch.
"""
from __future__ import annotations

import math

import numpy as np


_SHAPE_CACHE: dict = {}  # grid/block as given (exact ints only) -> (x, y, z)
_AXES = "xyz"


def _exact_ints(v) -> bool:
    """Whether `v` is an int or a tuple of ints, by exact type: the only spellings memoised
    (2.0 == 2 and hash alike, so a float must never find an int's entry)."""
    if type(v) is int:
        return True
    return type(v) is tuple and all(type(x) is int for x in v)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def dims(v, what: str) -> tuple:
    """(x, y, z) of a grid or block given as an int or a tuple/list of 1-3 ints (not floats,
    not bools); missing axes are 1."""
    memo = _exact_ints(v)
    if memo:
        hit = _SHAPE_CACHE.get(v)
        if hit is not None:
            return hit
    items = (v,) if _is_int(v) else v
    if not isinstance(items, (tuple, list)) or not all(_is_int(x) for x in items):
        raise TypeError(f"{what} must be an int or a tuple of 1-3 ints, got {v!r}")
    if not 1 <= len(items) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {tuple(items)}")
    out = tuple(int(x) for x in items) + (1,) * (3 - len(items))
    if any(x < 0 for x in out):
        raise ValueError(f"{what} must not be negative, got {tuple(items)}")
    if memo and len(_SHAPE_CACHE) < 4096:
        _SHAPE_CACHE[v] = out
    return out


def launch_shape(kernel_name: str, grid, block, runtime) -> tuple:
    """The (grid, block) of a launch as (x, y, z) triples, refused with the limit named where
    the runtime's device cannot run it (cube ids past `max_grid` would wrap around)."""
    try:
        grid, block = dims(grid, "grid"), dims(block, "block")
    except (TypeError, ValueError) as e:
        raise type(e)(f"{kernel_name}[grid, block]: {e}") from None
    caps = runtime.capabilities
    units = block[0] * block[1] * block[2]
    if units < 1 or units > caps.max_cube_units:
        raise ValueError(f"{kernel_name}: block {block} has {units} units; {runtime.name} allows 1 to "
                         f"{caps.max_cube_units} per cube")
    for axis in range(3):
        if block[axis] > caps.max_cube_dims[axis]:
            raise ValueError(f"{kernel_name}: block {block} has {block[axis]} units along {_AXES[axis]}; "
                             f"{runtime.name} allows at most {caps.max_cube_dims[axis]}")
        if grid[axis] > caps.max_grid[axis]:
            raise ValueError(f"{kernel_name}: grid {grid} has {grid[axis]} cubes along {_AXES[axis]}; "
                             f"{runtime.name} allows at most {caps.max_grid[axis]} (larger cube ids do not fit its "
                             f"position registers)")
    cubes = math.prod(grid)
    if cubes > caps.max_grid_cubes:
        raise ValueError(f"{kernel_name}: grid {grid} has {cubes} cubes; {runtime.name} allows at most "
                         f"{caps.max_grid_cubes} in one launch")
    return grid, block


def check_writable(info, args) -> None:
    """Refuse a launch that would store to a read-only tensor (imported from a read-only numpy
    array, say), naming the parameter. `info` is the binary's LaunchInfo (pipeline.py)."""
    for i in info.written:
        if args[i].buffer.readonly:
            name = info.params[i].name
            raise ValueError(f"{info.name}: argument {name} is read-only memory (imported from a read-only "
                             f"array) and the kernel writes to it; pass a writable copy (.clone())")
