"""Launch shapes of the pooling kernels, from the problem and the device's capabilities:
one unit per element (forward: outputs, backward: inputs) in cubes of ELEMENT_UNITS, the
grid wrapping from x into y; the global-average reduction's cube size and vector width."""
from __future__ import annotations

GRID_X = 65535         # cubes along x before the grid wraps into y (the portable limit)
ELEMENT_UNITS = 256    # units per cube of the element kernels
MAX_ROW_UNITS = 256    # units per plane of the global-average reduction


def element_grid(total: int, units: int = ELEMENT_UNITS) -> tuple:
    """(gx, gy) covering `total` elements with cubes of `units`."""
    cubes = max(1, -(-total // units))
    gy = -(-cubes // GRID_X)
    return (-(-cubes // gy), gy)


def vector_lanes(itemsize: int, *counts: int) -> int:
    """The widest chunk (<= 16 bytes, a power of two) that divides every count, so every
    vector access is aligned."""
    lanes = max(1, 16 // itemsize)
    while lanes > 1 and any(c % lanes for c in counts):
        lanes //= 2
    return lanes


def row_units(caps, size: int, lanes: int) -> int:
    """Units a cube gives one plane of the global average: enough for one chunk each
    (a power of two, at least a plane, at most MAX_ROW_UNITS or the device's cube limit)."""
    want = 1 << max(0, -(-size // lanes) - 1).bit_length()
    return max(caps.plane_dim, min(want, MAX_ROW_UNITS, caps.max_cube_units))
