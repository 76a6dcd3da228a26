"""Cube shapes of the gated delta kernels, from the problem sizes and the runtime's
capabilities only (no back end named)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

ROWS_PER_UNIT = 16   # state rows a unit of the recurrent kernel holds in registers (at most)
TILE_COLUMNS = 32    # value columns per cube (a plane's width of coalesced state accesses)
PLANE_STATE_FLOATS = 64  # state values a lane of the planes kernel may hold in registers (at most)
VECTOR_LANES = 8     # the widest kd vector
LINE_BYTES = 128     # bytes of one state row the lanes of a row read in one access (at most: a cache line)
CUBE_PLANES = 2      # planes of a planes-kernel cube (adjacent column groups of one (b, h))
RESIDENT_PLANES = 16  # planes of the planes kernel a compute unit runs at once (about 128 registers a lane)
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


def recurrent_units(K: int) -> int:
    """The fewest units of a recurrent cube that hold K state rows (ROWS_PER_UNIT each): a
    runtime whose cubes have fewer cannot run the recurrence (problem.validate says so)."""
    return -(-K // ROWS_PER_UNIT)


def recurrent_tiling(caps, K: int, V: int) -> Tiling:
    """Enough row groups that each unit holds at most ROWS_PER_UNIT state rows."""
    bv = _columns(V)
    ks = recurrent_units(K)
    while bv * ks > caps.max_cube_units and bv > 1:
        bv //= 2
    return Tiling(bv, ks, -(-K // ks))


@dataclass(frozen=True)
class PlaneTiling:
    """The planes kernel (recurrent_planes.py): cubes of `planes` planes; in a plane, `lanes`
    adjacent lanes share a row, each over `width` value columns (one access a row);
    `prefetch`: the next token's inputs are read a step early."""

    planes: int
    width: int
    lanes: int
    prefetch: bool

    @property
    def columns(self) -> int:
        """Value columns of one cube."""
        return self.planes * self.lanes * self.width

    def grid(self, V: int, heads: int) -> int:
        """One-dimensional: the tiles of one (b, h) adjacent."""
        return -(-V // self.columns) * heads


def prefer_planes(caps) -> bool:
    """The recurrence runs with K rows across a plane's lanes (recurrent_planes.py) on GPUs:
    plane shuffles are hardware instructions, units are threads and shared memory is on chip.
    Elsewhere the row-group kernel (recurrent.py) stays: on SIMD-lane units each shuffle is a
    pass over the cube, and where shared memory is ordinary cached memory (a CPU's OpenCL) its
    shared-memory sums cost little: there it ran 1.3-4.4x faster than the planes kernel
    (Intel's CPU OpenCL, benchmarks/RESULTS.md)."""
    return caps.native_plane_ops and not caps.units_are_simd_lanes and not caps.shared_memory_emulated


def plane_tiling(caps, K: int, V: int, T: int, heads: int, aligned: Callable[[int], bool]) -> PlaneTiling | None:
    """The planes kernel's shape for `heads` (b, h) pairs of T tokens: accesses as wide as the
    device prefers that divide V and that `aligned(width)` allows for every tensor read or
    written in columns; as many lanes a row as keep a lane's state within PLANE_STATE_FLOATS,
    up to a whole LINE_BYTES line of the row an access (the fewer lines an access, the fewer
    cache passes: with 16 bytes a lane and a row the H200 decode ran at 1.4 TB/s, with 64 at
    3.8). The next token is read a step early where the grid's planes all run at once (then
    each step's latency is the time, not the state traffic) and for one token (its inputs
    then load beside the state); None where even one column a lane is too many rows."""
    pd = caps.plane_dim
    cover = _columns(V)
    width = max(1, min(caps.vector_bytes // 4, cover, VECTOR_LANES))
    while width > 1 and (V % width or not aligned(width)):
        width //= 2
    lanes = max(1, min(pd, LINE_BYTES // 4 // width, cover // width))

    def floats(lanes, width):
        return -(-K // (pd // lanes)) * width

    while floats(lanes, width) > PLANE_STATE_FLOATS and lanes * width > 1:
        if lanes > 1:
            lanes //= 2
        else:
            width //= 2
    if floats(lanes, width) > PLANE_STATE_FLOATS:
        return None
    planes = max(1, min(CUBE_PLANES, caps.max_cube_units // pd, -(-V // (lanes * width))))
    grid_planes = -(-V // (lanes * width)) * heads
    prefetch = T == 1 or grid_planes <= caps.compute_units * RESIDENT_PLANES
    return PlaneTiling(planes, width, lanes, prefetch)


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
    if caps.units_are_simd_lanes:
        return Tiling(bv, 1)  # one row of columns: every loop over rows is uniform, a vector a step
    units = min(SWEEP_UNITS, caps.max_cube_units)
    return Tiling(bv, max(1, units // bv))


def prepare_units(caps, K: int, V: int, C: int) -> int:
    """Units of a chunk_prepare cube: PREPARE_UNITS, or where units are SIMD lanes (each loop
    over the units runs them all) the whole planes that cover its widest loop (C² entries of
    A, K + V columns of w and u), up to that."""
    units = min(PREPARE_UNITS, caps.max_cube_units)
    if caps.units_are_simd_lanes:
        pd = caps.plane_dim
        units = min(units, max(pd, -(-max(C * C, K + V) // pd) * pd))
    return units


def prepare_shared_bytes(C: int) -> int:
    """Shared memory of chunk_prepare_mma.py: 5 F32 decay vectors, A and (I + A)⁻¹ (F32 C×C),
    a block row of sums (F32 16×C) and the two 16-bit C×C products' left operands."""
    return 4 * (5 * C + 2 * C * C + 16 * C) + 2 * 2 * C * C


def matrix_sweep(caps, dtype, K: int, V: int, C: int) -> bool:
    """Whether the chunked rule runs on the matrix primitive (chunk_prepare_mma.py and
    chunk_sweep_mma.py): hardware fragments for the inputs' dtype, K and C in whole 32-row
    tile pairs (so 4 planes share the tiles evenly), V in whole 32-column tiles, and both
    kernels' shared arrays within the device's shared memory."""
    from .chunk_sweep_mma import COLUMNS
    prepare_bytes = prepare_shared_bytes(C)
    return ("mma" in caps.matrix_kinds and dtype in caps.mma_dtypes and K % 32 == 0 and C % 32 == 0
            and V % min(COLUMNS) == 0 and max(prepare_bytes, 2 * (K + C) * min(COLUMNS)) <= caps.max_shared_bytes)


def matrix_columns(caps, heads: int, K: int, V: int, C: int) -> int:
    """Value columns per sweep cube: 64, unless that leaves fewer than two cubes per compute
    unit (the sweep is sequential over chunks, so cubes are its only parallelism) or V or
    shared memory does not allow it; then 32."""
    wide = (V % 64 == 0 and 2 * (K + C) * 64 <= caps.max_shared_bytes
            and heads * (V // 64) >= 2 * caps.compute_units)
    return 64 if wide else 32


GROUP_CHUNK = 64   # the chunk of the group-product kernels: one 64-row group accumulator
GROUP_MAX_K = 256  # the widest group accumulator (the transposed state is BV × K)


def group_swizzle(K: int, C: int) -> int:
    """The shared layout of the group kernels: 128-byte rows where K and C are whole bands of
    64 (one bulk-copy box a tile), else the 32-byte layout."""
    return 128 if K % 64 == 0 and C % 64 == 0 else 32


def group_shared_bytes(K: int, V: int, C: int) -> int:
    """The largest of the group kernels' shared arrays: the prepare's k, v, a C×C 16-bit
    operand and its F32 decays, A and (I + A)⁻¹; the sweep's two stages of
    wn, kd (C×K), u (C×64), Sᵀ and Δᵀ; the output's q, k, hᵀ and Δᵀ tiles (all V columns)."""
    from .chunk_state_group import BV, STAGES
    prepare = 2 * (C * K + C * V + C * C) + 4 * (5 * C + 2 * C * C)
    sweep = 2 * STAGES * (2 * C * K + C * BV + BV * K + BV * C)
    output = 2 * (2 * C * K + V * K + V * C) + 4 * C
    return max(prepare, sweep, output)


def group_sweep(caps, dtype, K: int, V: int, C: int) -> bool:
    """Whether the chunked rule runs on group products (chunk_prepare_group.py,
    chunk_state_group.py, chunk_output_group.py): where they are on hardware (wgmma:
    `group_mma_native`, the H200), for F16/BF16 inputs, chunks of GROUP_CHUNK, K in whole
    16-column bands and V in whole 64-column tiles, both up to GROUP_MAX_K (one accumulator,
    one bulk-copy box), and the kernels' shared arrays within the device's."""
    from .chunk_state_group import BV
    return (caps.group_mma_native and "mma" in caps.matrix_kinds and dtype in caps.mma_dtypes
            and C == GROUP_CHUNK and K % 16 == 0 and K <= GROUP_MAX_K and V % BV == 0 and V <= GROUP_MAX_K
            and group_shared_bytes(K, V, C) <= caps.max_shared_bytes)
