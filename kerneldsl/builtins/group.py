"""The group matrix primitive: 64-row tiles shared by a group of GROUP_PLANES consecutive
planes (a warpgroup on CUDA).

kd.group_mma reads its B operand (and A, unless A is a group a fragment) from shared
memory in a layout of kd.tile_offset (wgmma's 32- or 128-byte swizzle): wgmma on sm_90,
mma.sync plane by plane on other CUDA devices, an exact emulation elsewhere.
"""
from __future__ import annotations

from .. import ir, tile_layout
from ..dtypes import as_dtype, bf16, f16, f32, i32
from ..frontend_values import FragRef, SharedRef, TileRef, is_ct
from ..types import coerce, make_const
from .fragments import need_frag
from .positions import units_per_cube
from .registry import builtin

GROUP_M = 64


def _group_shape(fe, node, what, m, n, step):
    m, n = (fe.ct(v, node, f"{what} shape") for v in (m, n))
    if m != GROUP_M:
        raise fe.error(node, f"{what}: group fragments have {GROUP_M} rows, got {m!r}")
    if not isinstance(n, int) or n <= 0 or n % step or n > 256:
        raise fe.error(node, f"{what}: the second size must be a multiple of {step} in {step}..256, got {n!r}")
    P = fe.spec.plane_dim
    units = units_per_cube(fe)
    if units % (ir.GROUP_PLANES * P):
        raise fe.error(node, f"{what}: group fragments need whole groups of {ir.GROUP_PLANES} planes "
                             f"({ir.GROUP_PLANES * P} units), got {units} units per cube")
    return m, n


@builtin("A 64×n f32 accumulator shared by a group of 4 planes (plane g: rows 16g..16g+15).")
def group_fragment_acc(fe, node, m, n):
    """n a multiple of 8, at most 256."""
    m, n = _group_shape(fe, node, "kd.group_fragment_acc", m, n, 8)
    name = fe.fresh("gf")
    ft = ir.FragType("acc", f32, m, n, 16, "row", "group")
    fe.frags[name] = ft
    return FragRef(name, ft)


@builtin("A 64×k f16/bf16 A operand in the group's registers.")
def group_fragment_a(fe, node, dtype, m, k):
    """k a multiple of 16."""
    dtype = as_dtype(fe.ct(dtype, node, "fragment dtype"))
    caps = fe.spec.caps
    if dtype not in caps.mma_dtypes:
        raise fe.error(node, f"matrix fragments of {dtype} are unavailable on {caps.device_name} "
                             f"(supported: {', '.join(d.name for d in caps.mma_dtypes)})")
    m, k = _group_shape(fe, node, "kd.group_fragment_a", m, k, 16)
    name = fe.fresh("gf")
    ft = ir.FragType("a", dtype, m, 16, k, "row", "group")
    fe.frags[name] = ft
    return FragRef(name, ft)


@builtin("A group_mma operand in shared memory (tile_offset layout).")
def shared_tile(fe, node, smem, offset, rows, cols, transposed=False, swizzle=tile_layout.DEFAULT_SWIZZLE):
    """A rows x cols operand of kd.group_mma in `smem` from element `offset`, stored in the
    layout of kd.tile_offset(..., swizzle) as a rows x cols matrix, or as its transpose
    (`transposed=True`); the stored matrix has a multiple of 8 rows and whole bands of
    columns (16 with the 32-byte swizzle, 64 with the 128-byte one); `offset` is a multiple
    of 8 bands' rows (128 or 512 elements)."""
    if not isinstance(smem, SharedRef) or smem.dtype not in (f16, bf16):
        raise fe.error(node, f"kd.shared_tile needs an f16 or bf16 shared array, got {fe.describe(smem)}")
    rows, cols = (fe.ct(v, node, "kd.shared_tile shape") for v in (rows, cols))
    transposed = bool(fe.ct(transposed, node, "kd.shared_tile transposed"))
    swizzle = layout_swizzle(fe, node, swizzle, "kd.shared_tile")
    for what, v in (("rows", rows), ("cols", cols)):
        if not isinstance(v, int) or v <= 0 or v % 8:
            raise fe.error(node, f"kd.shared_tile: {what} must be a positive multiple of 8, got {v!r}")
    stored_cols = rows if transposed else cols
    band = tile_layout.band_width(swizzle)
    if stored_cols % band:
        what = "rows of a transposed" if transposed else "cols of a"
        raise fe.error(node, f"kd.shared_tile: the {what} tile are its stored columns and must be a multiple "
                             f"of {band} (whole bands of the {swizzle}-byte swizzle), got {stored_cols}")
    size = 1
    for d in smem.shape:
        size *= d
    if rows * cols > size:
        raise fe.error(node, f"kd.shared_tile: a {rows} x {cols} tile needs {rows * cols} elements; shared array "
                             f"{smem.name} has {size}")
    align = tile_layout.alignment(swizzle)
    if is_ct(offset) and isinstance(offset, int) and (offset % align or offset < 0 or offset + rows * cols > size):
        raise fe.error(node, f"kd.shared_tile: offset {offset} must be a multiple of {align} with the tile inside "
                             f"{smem.name} ({size} elements)")
    off = fe.temp(coerce(fe.to_expr(offset, node), i32), "to")
    return TileRef(ir.SharedTile(smem.name, off, rows, cols, transposed, swizzle), smem.dtype)


def layout_swizzle(fe, node, swizzle, name: str) -> int:
    """The compile-time swizzle span (bytes) of a group-tile layout argument."""
    swizzle = fe.ct(swizzle, node, f"{name} swizzle")
    try:
        return tile_layout.check(swizzle, f"{name}: swizzle")
    except ValueError as e:
        raise fe.error(node, str(e)) from None


@builtin("Element offset of (row, col) in the core-matrix layout of a matrix of `rows` rows.")
def tile_offset(fe, node, row, col, rows, swizzle=tile_layout.DEFAULT_SWIZZLE):
    """Element offset of (row, col) in a matrix of `rows` rows (compile-time, a multiple of 8)
    stored in the group primitive's layout (kerneldsl/tile_layout.py): columns in bands of
    swizzle / 2 elements (16 for the default 32-byte swizzle, 64 for 128), band after band;
    in a band, row after row, the 16-byte chunks of a row permuted by an xor with its row
    (wgmma's swizzle: conflict-free reads, and each band row's bytes in one piece, as a copy
    from a row-major tensor brings them)."""
    rows = fe.ct(rows, node, "kd.tile_offset rows")
    if not isinstance(rows, int) or rows <= 0 or rows % 8:
        raise fe.error(node, f"kd.tile_offset: rows must be a positive multiple of 8, got {rows!r}")
    swizzle = layout_swizzle(fe, node, swizzle, "kd.tile_offset")
    return tile_offset_expr(coerce(fe.to_expr(row, node), i32), coerce(fe.to_expr(col, node), i32), rows,
                            fe.loc(node), swizzle)


def tile_offset_expr(r: ir.Expr, c: ir.Expr, rows: int, loc, swizzle: int = tile_layout.DEFAULT_SWIZZLE) -> ir.Expr:
    """kd.tile_offset(r, c, rows, swizzle) as an i32 expression (r and c i32, non-negative)."""
    k = lambda v: make_const(v, i32, loc)  # noqa: E731
    op = lambda o, a, b: ir.BinOp(i32, op=o, a=a, b=b, loc=loc)  # noqa: E731
    w, n = tile_layout.band_width(swizzle), tile_layout.chunks(swizzle)
    band = op("*", op("/", c, k(w)), k(rows * w))
    chunk = op("^", op("/", op("%", c, k(w)), k(8)), op("%", op("/", r, k(tile_layout.rows_per_flip(swizzle))), k(n)))
    inner = op("+", op("*", chunk, k(8)), op("%", c, k(8)))
    return op("+", band, op("+", op("*", r, k(w)), inner))


@builtin("acc += a · b over the group (= a · b if not accumulate; async: read acc after group_wait).")
def group_mma(fe, node, acc, a, b, accumulate=True):
    """acc 64 x n (group acc fragment), a 64 x k (group a fragment or shared tile), b k x n
    (shared tile). Asynchronous: read acc after kd.group_wait."""
    accumulate = fe.ct(accumulate, node, "kd.group_mma accumulate")
    if not isinstance(accumulate, bool):
        raise fe.error(node, f"kd.group_mma: accumulate must be a compile-time bool, got {accumulate!r}")
    acc = need_frag(fe, node, acc, ("acc",), "kd.group_mma (first argument)", ("group",))
    if not isinstance(b, TileRef):
        raise fe.error(node, f"kd.group_mma: b must be a kd.shared_tile, got {fe.describe(b)}")
    if isinstance(a, TileRef):
        a_name, a_tile, a_rows, k, a_dt = "", a.tile, a.tile.rows, a.tile.cols, a.dtype
    else:
        f = need_frag(fe, node, a, ("a",), "kd.group_mma (second argument)", ("group",))
        a_name, a_tile, a_rows, k, a_dt = f.name, None, f.ftype.m, f.ftype.k, f.ftype.dtype
    if a_dt != b.dtype:
        raise fe.error(node, f"kd.group_mma: a is {a_dt} but b is {b.dtype}")
    n = acc.ftype.n
    if a_rows != GROUP_M or k % 16 or (b.tile.rows, b.tile.cols) != (k, n):
        raise fe.error(node, f"kd.group_mma: shapes do not chain: acc 64 x {n}, a {a_rows} x {k}, "
                             f"b {b.tile.rows} x {b.tile.cols} (need a 64 x k with k a multiple of 16, b k x {n})")
    fe.emit(ir.GroupMma(acc=acc.name, a=a_name, a_tile=a_tile, b_tile=b.tile, k=k, accumulate=accumulate,
                        loc=fe.loc(node)))


@builtin("Wait until at most `pending` of this group's group_mma are unfinished.")
def group_wait(fe, node, pending=0):
    pending = fe.ct(pending, node, "kd.group_wait pending")
    if not isinstance(pending, int) or not 0 <= pending <= 7:
        raise fe.error(node, f"kd.group_wait: pending must be a compile-time int in 0..7, got {pending!r}")
    fe.emit(ir.GroupWait(pending=pending, loc=fe.loc(node)))
