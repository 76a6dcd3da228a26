"""Cube shapes of the gated delta kernels, from the problem sizes and the runtime's
capabilities only (no back end named)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

ROWS_PER_UNIT = 16   # state rows a unit of the recurrent kernel holds in registers (at most)
TILE_COLUMNS = 32    # value columns per cube (a plane's width of coalesced state accesses)
PLANE_COLUMNS = 8    # value columns a plane of the planes kernel owns (32 bytes of each F32 state row)
PLANE_STATE_FLOATS = 64  # state values a lane of the planes kernel may hold in registers (at most)
CUBE_PLANES = 4      # planes of a planes-kernel cube (adjacent column groups of one (b, h))
SWEEP_UNITS = 256    # units of a chunk-sweep cube
PREPARE_UNITS = 128  # units of a chunk-prepare cube


@dataclass(frozen=True)
class Tiling:
    """A cube of (bv, rows) units over bv value columns: the recurrent kernel's `rows` groups
    of state rows (r rows per unit), or the chunk sweep's row groups (r unused)."""

    bv: int
    rows: int
    r: int = 1

    def grid(self, V: int, heads: int) -> int:
        """One-dimensional: the tiles of one (b, h) adjacent."""
        return -(-V // self.bv) * heads

    @property
    def block(self) -> tuple:
        return (self.bv, self.rows)


def _columns(V: int) -> int:
    """The tile width: TILE_COLUMNS, or the power of two covering a narrower V."""
    bv = 1
    while bv < min(V, TILE_COLUMNS):
        bv *= 2
    return bv


def recurrent_tiling(caps, K: int, V: int) -> Tiling:
    """Enough row groups that each unit holds at most ROWS_PER_UNIT state rows."""
    bv = _columns(V)
    ks = -(-K // ROWS_PER_UNIT)
    while bv * ks > caps.max_cube_units and bv > 1:
        bv //= 2
    return Tiling(bv, ks, -(-K // ks))


@dataclass(frozen=True)
class PlaneTiling:
    """The planes kernel (recurrent_planes.py): cubes of `planes` planes, each over
    width·vectors value columns read `width` columns (one access) at a time."""

    planes: int
    width: int
    vectors: int

    @property
    def columns(self) -> int:
        return self.planes * self.width * self.vectors

    def grid(self, V: int, heads: int) -> int:
        """One-dimensional: the tiles of one (b, h) adjacent."""
        return -(-V // self.columns) * heads


def prefer_planes(caps) -> bool:
    """The recurrence runs with K rows across a plane's lanes (recurrent_planes.py) where plane
    sums are hardware instructions and units are threads; on SIMD-lane units (each plane sum
    a pass over the cube) and emulated planes the row-group kernel (recurrent.py) stays."""
    return caps.native_plane_ops and not caps.units_are_simd_lanes


def plane_tiling(caps, K: int, V: int, aligned: Callable[[int], bool]) -> PlaneTiling | None:
    """Column groups of PLANE_COLUMNS (fewer for a narrow V, or for a tall K so a lane holds at
    most PLANE_STATE_FLOATS state values), read in vectors as wide as the device prefers that
    divide V and that `aligned(width)` allows for every tensor read or written in columns; None
    where even one column a lane is too many rows."""
    rows = -(-K // caps.plane_dim)
    cols = _columns(min(V, PLANE_COLUMNS))
    while cols > 1 and rows * cols > PLANE_STATE_FLOATS:
        cols //= 2
    if rows * cols > PLANE_STATE_FLOATS:
        return None
    width = min(cols, max(1, caps.vector_bytes // 4))
    while width > 1 and (V % width or not aligned(width)):
        width //= 2
    planes = max(1, min(CUBE_PLANES, caps.max_cube_units // caps.plane_dim, -(-V // cols)))
    return PlaneTiling(planes, width, cols // width)


def sweep_shared_bytes(K: int, C: int, bv: int) -> int:
    """Shared memory of a sweep cube: the K×bv state slice, the C×bv deltas, C decays."""
    return 4 * (K * bv + C * bv + C)


def sweep_tiling(caps, K: int, V: int, C: int) -> Tiling | None:
    """The widest tile whose state slice fits shared memory; None if not even one column does."""
    bv = _columns(V)
    while bv > 1 and sweep_shared_bytes(K, C, bv) > caps.max_shared_bytes:
        bv //= 2
    if sweep_shared_bytes(K, C, bv) > caps.max_shared_bytes:
        return None
    units = min(SWEEP_UNITS, caps.max_cube_units)
    return Tiling(bv, max(1, units // bv))


def prepare_units(caps) -> int:
    return min(PREPARE_UNITS, caps.max_cube_units)


def matrix_sweep(caps, dtype, K: int, V: int, C: int) -> bool:
    """Whether the chunked rule runs on the matrix primitive (chunk_prepare_mma.py and
    chunk_sweep_mma.py): hardware fragments for the inputs' dtype, K and C in whole 32-row
    tile pairs (so 4 planes share the tiles evenly), V in whole 32-column tiles, and both
    kernels' shared arrays within the device's shared memory."""
    from .chunk_sweep_mma import COLUMNS
    prepare_bytes = 4 * (2 * C + 2 * C * C) + 2 * 2 * C * C
    return ("mma" in caps.matrix_kinds and dtype in caps.mma_dtypes and K % 32 == 0 and C % 32 == 0
            and V % min(COLUMNS) == 0 and max(prepare_bytes, 2 * (K + C) * min(COLUMNS)) <= caps.max_shared_bytes)


def matrix_columns(caps, heads: int, K: int, V: int, C: int) -> int:
    """Value columns per sweep cube: 64, unless that leaves fewer than two cubes per compute
    unit (the sweep is sequential over chunks, so cubes are its only parallelism) or V or
    shared memory does not allow it; then 32."""
    wide = (V % 64 == 0 and 2 * (K + C) * 64 <= caps.max_shared_bytes
            and heads * (V // 64) >= 2 * caps.compute_units)
    return 64 if wide else 32
