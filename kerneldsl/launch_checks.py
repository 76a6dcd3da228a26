"""Checks every launch passes before a back end sees it, the same on the first launch and the
hundredth: the grid and cube shape are ints within the device's limits (`Capabilities.max_grid`,
`max_grid_cubes`, `max_cube_dims`, `max_cube_units`), and no tensor the kernel stores to is
read-only memory. `Kernel.launch` calls `launch_shape` before it looks up a binary and
`check_writable` once it has one; a repeated launch (launch_plan.py) checks its grid alone
(`grid_shape`), with the same errors, and `check_writable`.
"""
from __future__ import annotations

import functools
import math

import numpy as np


_SHAPE_CACHE: dict = {}  # grid/block as given (exact ints only) -> (x, y, z)
_GRID_CACHE: dict = {}  # runtime -> {grid as given (exact ints only) that passed its limits -> (x, y, z)}
_AXES = "xyz"


@functools.lru_cache(maxsize=None)
def int_range(dtype) -> tuple:
    """(min, max) of an integer DType."""
    info = np.iinfo(dtype.np)
    return int(info.min), int(info.max)


def exact_ints(v) -> bool:
    """Whether `v` is an int or a tuple of ints, by exact type: the only spellings memoised
    (2.0 == 2 and hash alike, so a float must never find an int's entry)."""
    if type(v) is int:
        return True
    if type(v) is not tuple:
        return False
    for x in v:
        if type(x) is not int:
            return False
    return True


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def dims(v, what: str) -> tuple:
    """(x, y, z) of a grid or block given as an int or a tuple/list of 1-3 ints (not floats,
    not bools); missing axes are 1."""
    memo = exact_ints(v)
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


def _parsed(kernel_name: str, v, what: str) -> tuple:
    """`dims` with errors that name the kernel."""
    try:
        return dims(v, what)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{kernel_name}[grid, block]: {e}") from None


def launch_shape(kernel_name: str, grid, block, runtime) -> tuple:
    """The (grid, block) of a launch as (x, y, z) triples, refused with the limit named where
    the runtime's device cannot run it (cube ids past `max_grid` would wrap around)."""
    grid = _parsed(kernel_name, grid, "grid")
    block = _parsed(kernel_name, block, "block")
    caps = runtime.capabilities
    units = block[0] * block[1] * block[2]
    if units < 1 or units > caps.max_cube_units:
        raise ValueError(f"{kernel_name}: block {block} has {units} units; {runtime.name} allows 1 to "
                         f"{caps.max_cube_units} per cube")
    for axis in range(3):
        if block[axis] > caps.max_cube_dims[axis]:
            raise ValueError(f"{kernel_name}: block {block} has {block[axis]} units along {_AXES[axis]}; "
                             f"{runtime.name} allows at most {caps.max_cube_dims[axis]}")
        _check_grid_axis(kernel_name, grid, axis, runtime)
    _check_grid_cubes(kernel_name, grid, runtime)
    return grid, block


def grid_shape(kernel_name: str, grid, runtime) -> tuple:
    """The grid of a launch whose cube shape already passed `launch_shape`, checked as
    `launch_shape` checks it (the same errors); the grids that pass are remembered per runtime."""
    memo = _GRID_CACHE.get(runtime)
    if memo is not None and exact_ints(grid):
        hit = memo.get(grid)
        if hit is not None:
            return hit
    out = _parsed(kernel_name, grid, "grid")
    for axis in range(3):
        _check_grid_axis(kernel_name, out, axis, runtime)
    _check_grid_cubes(kernel_name, out, runtime)
    if exact_ints(grid):
        memo = _GRID_CACHE.setdefault(runtime, {})
        if len(memo) < 4096:
            memo[grid] = out
    return out


def _check_grid_axis(kernel_name: str, grid: tuple, axis: int, runtime) -> None:
    limit = runtime.capabilities.max_grid[axis]
    if grid[axis] > limit:
        raise ValueError(f"{kernel_name}: grid {grid} has {grid[axis]} cubes along {_AXES[axis]}; "
                         f"{runtime.name} allows at most {limit} (larger cube ids do not fit its "
                         f"position registers)")


def _check_grid_cubes(kernel_name: str, grid: tuple, runtime) -> None:
    cubes = math.prod(grid)
    limit = runtime.capabilities.max_grid_cubes
    if cubes > limit:
        raise ValueError(f"{kernel_name}: grid {grid} has {cubes} cubes; {runtime.name} allows at most "
                         f"{limit} in one launch")


def check_writable(info, args) -> None:
    """Refuse a launch that would store to a read-only tensor (imported from a read-only numpy
    array, say), naming the parameter. `info` is the binary's LaunchInfo (pipeline.py)."""
    for i in info.written:
        if args[i].buffer.readonly:
            name = info.params[i].name
            raise ValueError(f"{info.name}: argument {name} is read-only memory (imported from a read-only "
                             f"array) and the kernel writes to it; pass a writable copy (.clone())")


def check_bulk_sources(info, args) -> None:
    """Refuse a launch whose kd.bulk_copy sources the copy engine could not read (on every
    runtime, so that a kernel that runs on one runs on all). `info` is the binary's LaunchInfo."""
    for i in info.bulk_sources:
        check_bulk_source(args[i], info.name, info.params[i].name)


def check_bulk_source(t, kernel: str, param: str) -> None:
    """A kd.bulk_copy source: 2-D, rows of contiguous elements each starting on a 16-byte
    boundary, fewer than 2^32 elements along an axis (the copy engine's rules)."""
    from .errors import LaunchError
    itemsize = t.dtype.itemsize
    if t.ndim != 2 or (t.shape[1] > 1 and t.strides[1] != 1):
        raise LaunchError(f"{kernel}: kd.bulk_copy reads tensor {param} as rows of contiguous elements, but its "
                          f"shape is {t.shape} with strides {t.strides}")
    if t.shape[0] > 1 and (t.strides[0] * itemsize) % 16:
        raise LaunchError(f"{kernel}: kd.bulk_copy needs the rows of tensor {param} a multiple of 16 bytes apart, but "
                          f"its row stride is {t.strides[0]} elements ({t.strides[0] * itemsize} bytes)")
    raw = t.buffer.raw
    addr = raw if isinstance(raw, int) else getattr(getattr(raw, "ctypes", None), "data", 0)
    if (addr + t.offset * itemsize) % 16:
        raise LaunchError(f"{kernel}: kd.bulk_copy needs tensor {param} to start on a 16-byte boundary (its first "
                          f"element is {t.offset} elements into memory at an address that is not)")
    if max(t.shape) >= 1 << 32:
        raise LaunchError(f"{kernel}: kd.bulk_copy reads fewer than 2^32 elements along an axis; tensor {param} has "
                          f"shape {t.shape}")
