"""How a [rows, width] problem maps onto cubes (the family's tuning): the 2-D row view of
an input, the vector width its alignment allows, and the cube shape and long-row plan
chosen from the width and the device's capabilities."""
from __future__ import annotations

import math
from dataclasses import dataclass

import kerneldsl as kd

GRID_X = 65535        # cubes along x before the grid wraps into y (the portable limit)
MAX_CACHED_CHUNKS = 8  # chunks a unit may hold in registers before the looped kernels take over
# devices whose units are SIMD lanes (the cpu runtime): one plane of 32 units per row, 2 chunks a
# step (rows of <= 8 elements: 8 units, 4 rows a cube). Per-row costs there grow with the units
# of a row (every split point is a loop over them), and a 64-element step keeps the SIMD loops
# long enough; measured in RESULTS.md.
CPU_ROW_UNITS, CPU_STEP_CHUNKS = 32, 2
CPU_SMALL_WIDTH = 8
# LayerNorm rows held as packed bf16 pairs (packed.py): 8 chunks a unit. Packed words take
# half the registers of f32 values, so a unit can hold twice the bytes; on the H200 this
# beat 4 chunks at every W measured (RESULTS.md, session 9: +2-28%).
PACKED_LN_CHUNKS = 8
# Long register-cached LayerNorm/RMSNorm rows on GPUs with hardware async copies (measured on
# the H200, RESULTS.md session 10). Such a row (>= LONG_ROW_BYTES) fills a core's registers
# (one cube a core), and every row's output also reads all of gamma (and beta), W f32 each.
# The plan depends on the core's L1 + shared memory (~256 KiB on Hopper) against what a row
# streams through it, `row + params` bytes:
#  - up to FITS_L1_BYTES: the plain cached kernels (gamma and beta stay in L1);
#  - 16-bit rows beyond: up to 3 rows a cube in shared memory (paired.py), gamma and beta
#    read once for all of them, and for LayerNorm a 4th row held in registers (as packed
#    pairs for bf16: 16 registers at 1024 units); bf16 at W = 32768, session 11: RMSNorm
#    4043 GB/s (persistent 3769), LayerNorm 3834 (3 rows 3756, the packed kernel 3144);
#  - up to PERSIST_MAX_BYTES: persistent cubes prefetching the next row into shared memory
#    (persistent.py; the async copies bypass L1, which then keeps gamma and beta);
#  - beyond, for f32 rows: NR rows a cube (paired.py), one in registers and as many more in
#    shared memory as PAIRED_SHARED_BYTES holds, gamma and beta read once for NR rows.
LONG_ROW_BYTES = 64 * 1024
FITS_L1_BYTES = 160 * 1024
PERSIST_MAX_BYTES = 192 * 1024
PAIRED_SHARED_BYTES = 192 * 1024
SHARED_SLACK = 1024  # shared bytes the reductions' partials need beside the rows
# bf16 LayerNorm rows shorter than LONG_ROW_BYTES with a cube of their own (the cached
# shape's RY == 1): several rows a cube (paired.py), one held in registers as packed pairs,
# the others copied into shared memory, gamma and beta read once for all, instead of the
# packed kernel (H200, RESULTS.md session 11): rows up to PAIRED_TWO_BYTES 2 rows a cube
# (W = 4096 3713 -> 4084, W = 8192 3730 -> 4094 GB/s), longer ones up to SHORT_PAIRED_BYTES
# 3 (W = 16384 3513 -> 4038; 2 rows 3925). Longer rows were not measured: the rule stops.
PAIRED_TWO_BYTES = 16 * 1024
SHORT_PAIRED_BYTES = 32 * 1024


@dataclass(frozen=True)
class RowShape:
    """BX units per row, RY rows per cube, L elements per chunk; `chunks` is CH (chunks
    a unit holds) for the cached kernels and U (chunks per loop step) for the looped ones."""
    bx: int
    ry: int
    chunks: int
    lanes: int
    cached: bool

    @property
    def block(self) -> tuple:
        return (self.bx, self.ry)

    def ragged(self, width: int) -> bool:
        """Whether a cached row's chunks overhang `width` (their accesses then need a test)."""
        return self.bx * self.chunks * self.lanes != width

    def grid(self, rows: int) -> tuple:
        cubes = max(1, -(-rows // self.ry))
        gy = -(-cubes // GRID_X)
        return (-(-cubes // gy), gy)  # at most gy - 1 cubes past the last row


def rows_view(t: kd.Tensor) -> tuple:
    """(view, row_stride): `t` as a [rows, W] tensor with unit stride along W, without a
    copy when its leading axes collapse into one strided axis, else a packed copy."""
    width = t.shape[-1]
    rows = math.prod(t.shape[:-1])
    if t.is_contiguous():
        return t.reshape(rows, width), width
    lead_shape, lead_strides = t.shape[:-1], t.strides[:-1]
    inner_ok = width == 1 or t.strides[-1] == 1
    dims = [(n, s) for n, s in zip(lead_shape, lead_strides) if n != 1]
    collapses = all(dims[k][1] == dims[k + 1][1] * dims[k + 1][0] for k in range(len(dims) - 1))
    if inner_ok and collapses and rows > 0:
        stride = dims[-1][1] if dims else width
        view = kd.Tensor(t.runtime, t.buffer, (rows, width), t.dtype, (stride, 1), t.offset)
        return view, stride
    packed = t.contiguous()
    return packed.reshape(rows, width), width


def words_view(view: kd.Tensor, row_stride: int) -> tuple:
    """(words, row_stride in words): a [rows, W] bf16 view (W, row_stride and offset even)
    as a [rows, W/2] u32 view of the same memory, two elements a word."""
    rows, width = view.shape
    words = kd.Tensor(view.runtime, view.buffer, (rows, width // 2), kd.u32, (row_stride // 2, 1), view.offset // 2)
    return words, row_stride // 2


def vector_lanes(itemsize: int, *counts: int) -> int:
    """The widest chunk (<= 16 bytes, a power of two) that divides every count: the
    width, row strides and tensor offsets, so every vector access is aligned."""
    lanes = max(1, 16 // itemsize)
    while lanes > 1 and any(c % lanes for c in counts):
        lanes //= 2
    return lanes


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def choose_shape(caps, width: int, lanes: int, per_unit: int = 4, cube_units: int = 128) -> RowShape:
    """The cube shape for rows of `width` elements.

    Units that are SIMD lanes (the cpu runtime): the looped kernels with scalar chunks (the
    unit loop is the vector loop, so unit-strided scalars become contiguous SIMD loads;
    re-reading rows from the caches beats holding them in per-unit arrays), 32 units per
    row, one row per cube (a row index that varies inside a cube turns contiguous loads
    into gathers). Other devices: L-lane chunks (128-bit accesses), about `per_unit` chunks per unit
    held in registers, one plane or a few per row, rows sharing a cube up to about
    `cube_units` units; rows longer than the registers hold use the looped kernels
    with `per_unit` chunks in flight per unit. (benchmarks/normalization.py --sweep
    times other values of the two knobs.)"""
    plane = caps.plane_dim
    max_units = min(caps.max_cube_units, 1024)
    if caps.units_are_simd_lanes:
        if width <= CPU_SMALL_WIDTH:
            return RowShape(8, _rows_per_cube(8, plane, max_units, 32), 1, 1, False)
        return RowShape(CPU_ROW_UNITS, 1, CPU_STEP_CHUNKS, 1, False)
    chunks = -(-width // lanes)
    if chunks <= max_units * MAX_CACHED_CHUNKS:
        bx = min(_pow2_at_least(-(-chunks // per_unit)), max_units)
        if plane & (plane - 1) and bx < plane:
            bx = min(plane, max_units)  # sub-plane rows need power-of-two planes
        return RowShape(bx, _rows_per_cube(bx, plane, max_units, cube_units), -(-chunks // bx), lanes, True)
    return RowShape(max_units, 1, per_unit, lanes, False)


@dataclass(frozen=True)
class LongRowPlan:
    """How a long row runs: kernel 'persistent' or 'paired' (NR rows a cube, REG of them,
    0 or 1, held in registers)."""
    kernel: str
    nr: int = 1
    reg: int = 0


def long_row_plan(caps, shape: RowShape, width: int, itemsize: int, rms: bool):
    """The LongRowPlan for LayerNorm/RMSNorm rows of `width` elements of `itemsize` bytes given
    the cached `shape` (see LONG_ROW_BYTES above), or None for the plain kernels: needs
    hardware async copies and one row a cube whose 16-byte chunks tile it exactly."""
    row = width * itemsize
    if not (caps.async_copy and shape.cached and shape.ry == 1 and not shape.ragged(width)
            and shape.lanes * itemsize == 16 and row >= LONG_ROW_BYTES):
        return None
    streamed = row + width * 4 * (1 if rms else 2)
    shared = caps.max_shared_bytes - SHARED_SLACK
    if streamed <= FITS_L1_BYTES:
        return None
    if itemsize != 4 and min(3, shared // row) >= 2:
        in_shared = min(3, shared // row)
        if not rms and in_shared == 3:
            return LongRowPlan("paired", 4, 1)  # LayerNorm: gamma and beta read once for 4 rows
        return LongRowPlan("paired", in_shared, 0)
    if streamed <= PERSIST_MAX_BYTES and row <= shared:
        return LongRowPlan("persistent")
    if itemsize != 4:
        return None
    in_shared = min(PAIRED_SHARED_BYTES, shared) // row
    return LongRowPlan("paired", in_shared + 1, 1) if in_shared >= 1 else None


def short_row_plan(caps, shape: RowShape, width: int, dtype, rms: bool):
    """The LongRowPlan for bf16 LayerNorm rows of SHORT_PAIRED_BYTES or less that the cached
    `shape` gives a cube of their own: 2 rows a cube (3 past PAIRED_TWO_BYTES), one held in
    registers as packed pairs, the others copied into shared memory, gamma and beta read
    once for all; else None. Needs hardware async copies and 16-byte chunks that tile the
    row exactly."""
    row = width * dtype.itemsize
    if not (caps.async_copy and dtype is kd.bf16 and not rms and shape.cached and shape.ry == 1
            and not shape.ragged(width) and shape.lanes * dtype.itemsize == 16 and row <= SHORT_PAIRED_BYTES):
        return None
    return LongRowPlan("paired", 2 if row <= PAIRED_TWO_BYTES else 3, 1)


def persistent_grid(rt, rows: int) -> int:
    """Cubes for persistent.norm_persistent: one per core (its row and 1024 units fill one),
    never more than the rows; a device that does not report its cores gets a cube a row."""
    cores = rt.capabilities.compute_units
    return max(1, min(rows, cores or GRID_X))


def deepen(caps, shape: RowShape, width: int, chunks: int) -> RowShape:
    """`shape` with `chunks` chunks a unit (and proportionally fewer units a row) when it is
    register-cached, tiles the row exactly and still does with a power-of-two unit count;
    else `shape` itself. Rows share cubes as choose_shape would arrange them."""
    total = shape.bx * shape.chunks
    if not shape.cached or shape.ragged(width) or shape.chunks >= chunks or total % chunks:
        return shape
    bx, plane = total // chunks, caps.plane_dim
    if bx & (bx - 1) or (plane & (plane - 1) and bx < plane):
        return shape
    return RowShape(bx, _rows_per_cube(bx, plane, min(caps.max_cube_units, 1024), 128), chunks, shape.lanes, True)


def _rows_per_cube(bx: int, plane: int, max_units: int, target: int) -> int:
    """Rows sharing a cube so it has about `target` units; 1 where the reduction
    would not line up with planes (rows must tile planes, or planes tile rows)."""
    if bx >= target:
        return 1
    if plane & (plane - 1) or bx & (bx - 1):
        return 1
    ry = max(1, min(target, max_units) // bx)
    return max(ry, -(-plane // bx))
