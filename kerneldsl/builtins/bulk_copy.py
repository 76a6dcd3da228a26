"""Bulk tensor copies: a whole rows x cols box of a 2-D tensor into shared memory in the
group-tile layout (`kd.tile_offset`, what kd.group_mma reads), its bytes delivered to an
arrival barrier, and back (`kd.bulk_store`, a box of shared memory into a tensor). One unit
issues each.

On devices with `caps.bulk_copy` this is the tensor memory accelerator (TMA: the runtime
builds the tensor map from the tensor and the box at launch); elsewhere the issuing unit
copies the box itself, then counts its bytes down on the emulated barrier, so a kernel gives
the same answers everywhere.
"""
from __future__ import annotations

from .. import ir, tile_layout
from ..dtypes import bf16, boolean, f16, i32, i64
from ..frontend_values import BarrierRef, SharedRef, TensorRef
from ..types import coerce, literal, make_const
from .arrival import _index, _need_barriers, emulated_count_down
from .group import layout_swizzle, tile_offset_expr
from .registry import builtin

MAX_BOX = 256  # rows and columns of one box (the bulk-copy engine's limit per dimension)


def _box(fe, node, rows, cols, swizzle, name="kd.bulk_copy"):
    """(rows, cols, swizzle) of a box: whole bands of the layout's columns, 8-row multiples."""
    rows, cols = (fe.ct(v, node, f"{name} box") for v in (rows, cols))
    swizzle = layout_swizzle(fe, node, swizzle, name)
    band = tile_layout.band_width(swizzle)
    for what, v, step in (("rows", rows, 8), ("cols", cols, band)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0 or v % step or v > MAX_BOX:
            raise fe.error(node, f"{name}: {what} must be a multiple of {step} in {step}..{MAX_BOX} "
                                 f"(the {swizzle}-byte group-tile layout and the copy engine's box), got {v!r}")
    return rows, cols, swizzle


def _tensor(fe, node, t, name, verb):
    """The 2-D f16/bf16 tensor with contiguous rows a bulk copy reads or writes."""
    if not isinstance(t, TensorRef) or t.ndim != 2:
        raise fe.error(node, f"{name} {verb} a 2-D tensor, got {fe.describe(t)}"
                             + (f" with {t.ndim} dims" if isinstance(t, TensorRef) else ""))
    if t.dtype not in (f16, bf16):
        raise fe.error(node, f"{name} copies f16 or bf16 tiles (the group-tile layout), got {t.dtype}")
    if not t.inner_contiguous:
        raise fe.error(node, f"{name} moves whole rows: tensor {t.name} must have a contiguous last axis (stride 1)")
    fe.bulk_sources.add(t.name)


def _shared_box(fe, node, sh, offset, rows, cols, dtype, name, what, swizzle):
    """Check the shared side of a box: `sh` holds `dtype`, the box fits from `offset` (a
    multiple of the layout's alignment, 128 or 512 elements, where compile-time)."""
    if not isinstance(sh, SharedRef) or sh.dtype != dtype:
        raise fe.error(node, f"{name} copies {'into' if what == 'dst' else 'from'} a shared array of {dtype}, "
                             f"got {fe.describe(sh)}")
    size = 1
    for d in sh.shape:
        size *= d
    if isinstance(offset, int) and not isinstance(offset, bool):
        align = tile_layout.alignment(swizzle)
        if offset % align or not 0 <= offset <= size - rows * cols:
            raise fe.error(node, f"{name}: {what}_offset {offset} must be a multiple of {align} elements with "
                                 f"the {rows}x{cols} box inside the {size} elements of {sh.name}")
    elif rows * cols > size:
        raise fe.error(node, f"{name}: the {rows}x{cols} box does not fit in the {size} elements of {sh.name}")


def _first_column(fe, node, col, dtype, name):
    step = 16 // dtype.itemsize
    if isinstance(col, int) and not isinstance(col, bool) and col % step:
        raise fe.error(node, f"{name}: the box's first column must start on a 16-byte boundary (a multiple of "
                             f"{step} elements of {dtype}), got col {col}")


@builtin("Copy src[row:row+rows, col:col+cols] (zeros outside src) into dst from dst_offset in the "
         "kd.tile_offset layout; its bytes arrive at barrier `index` of `bars`. One unit issues it.")
def bulk_copy(fe, node, dst, dst_offset, src, row, col, rows, cols, bars, index, swizzle=tile_layout.DEFAULT_SWIZZLE):
    """The barrier's phase must expect the box's bytes (rows * cols * 2, kd.barrier_expect);
    `col` must be a multiple of 8 (16 bytes; checked where it is a compile-time int, undefined
    on sm_90 otherwise), `row` and `col` may lie outside the tensor (those parts are zeros).
    `swizzle`: the layout (kd.tile_offset's swizzle, 32 or 128 bytes); cols is whole bands."""
    _tensor(fe, node, src, "kd.bulk_copy", "copies from")
    bars = _need_barriers(fe, node, bars, "kd.bulk_copy")
    rows, cols, swizzle = _box(fe, node, rows, cols, swizzle)
    _shared_box(fe, node, dst, dst_offset, rows, cols, src.dtype, "kd.bulk_copy", "dst", swizzle)
    _first_column(fe, node, col, src.dtype, "kd.bulk_copy")
    i = _index(fe, node, bars, index, "kd.bulk_copy")
    bars.used.add("copy")
    loc = fe.loc(node)
    doff = fe.temp(coerce(fe.to_expr(dst_offset, node), i32), "bd")
    r0 = fe.temp(coerce(fe.to_expr(row, node), i32), "br")
    c0 = fe.temp(coerce(fe.to_expr(col, node), i32), "bk")
    if fe.spec.caps.bulk_copy:
        fe.emit(ir.BulkCopy(dst=dst.name, dst_offset=doff, src=src.name, row=r0, col=c0, rows=rows, cols=cols,
                            barriers=bars.name, index=i, dtype=src.dtype, swizzle=swizzle, loc=loc))
        return
    _copy_box(fe, node, dst, doff, src, r0, c0, rows, cols, swizzle)
    emulated_count_down(fe, node, bars, i, make_const(rows * cols * src.dtype.itemsize, i32, loc))


def _copy_box(fe, node, dst, doff, src, r0, c0, rows, cols, swizzle):
    """The box copied element by element by the issuing unit: loads only inside the tensor."""
    loc = fe.loc(node)
    v = fe.fresh("bv")
    fe.var_types[v] = src.dtype

    def body(rv, cv, ok, at):
        load = ir.Assign(name=v, value=ir.Load(src.dtype, tensor=src.name, offset=at, loc=loc), loc=loc)
        zero = ir.Assign(name=v, value=fe.store_value(literal(0), src.dtype, node), loc=loc)
        where = coerce(ir.BinOp(i32, op="+", a=doff, b=tile_offset_expr(rv, cv, rows, loc, swizzle), loc=loc), i64)
        return [ir.If(cond=ok, then=[load], orelse=[zero], loc=loc),
                ir.SharedStore(array=dst.name, offset=where, value=ir.Var(src.dtype, name=v, loc=loc), loc=loc)]
    _box_loops(fe, src, r0, c0, rows, cols, loc, body)


@builtin("Write the rows x cols box of shared src (kd.tile_offset layout, from src_offset) into dst at "
         "(row, col), leaving out what falls outside dst. One unit issues it.")
def bulk_store(fe, node, dst, row, col, src, src_offset, rows, cols, swizzle=tile_layout.DEFAULT_SWIZZLE):
    """Every unit's writes of the box must be ordered before it (kd.sync_cube or kd.sync_role);
    the issuing unit calls kd.bulk_store_wait() before the source is written again and before
    the kernel ends. `col` must be a multiple of 8 (16 bytes). `swizzle`: the layout of src."""
    _tensor(fe, node, dst, "kd.bulk_store", "writes")
    rows, cols, swizzle = _box(fe, node, rows, cols, swizzle, "kd.bulk_store")
    _shared_box(fe, node, src, src_offset, rows, cols, dst.dtype, "kd.bulk_store", "src", swizzle)
    _first_column(fe, node, col, dst.dtype, "kd.bulk_store")
    fe.bulk_stores.append(fe.loc(node))
    loc = fe.loc(node)
    soff = fe.temp(coerce(fe.to_expr(src_offset, node), i32), "bd")
    r0 = fe.temp(coerce(fe.to_expr(row, node), i32), "br")
    c0 = fe.temp(coerce(fe.to_expr(col, node), i32), "bk")
    if fe.spec.caps.bulk_copy:
        fe.emit(ir.BulkStore(dst=dst.name, row=r0, col=c0, src=src.name, src_offset=soff, rows=rows, cols=cols,
                             dtype=dst.dtype, swizzle=swizzle, loc=loc))
        return
    _store_box(fe, node, dst, r0, c0, src, soff, rows, cols, swizzle)


@builtin("Wait until this unit's kd.bulk_store writes are done (their source may then be written again).")
def bulk_store_wait(fe, node):
    fe.bulk_store_waits += 1
    if fe.spec.caps.bulk_copy:
        fe.emit(ir.BulkStoreWait(loc=fe.loc(node)))


def _inside(src, x, axis, loc):
    """x lies within axis `axis` of tensor `src`."""
    extent = ir.TensorDim(i32, tensor=src.name, attr="shape", axis=axis, loc=loc)
    return ir.Logic(boolean, op="and", a=ir.Cmp(boolean, op=">=", a=x, b=make_const(0, i32, loc), loc=loc),
                    b=ir.Cmp(boolean, op="<", a=x, b=extent, loc=loc), loc=loc)


def _box_loops(fe, t, r0, c0, rows, cols, loc, body_of):
    """for r < rows: for c < cols: body_of(r, c, inside t, element offset in t) -- the
    issuing unit's element loop over a box at (r0, c0) of tensor t."""
    k = lambda v, ty=i32: make_const(v, ty, loc)  # noqa: E731
    op = lambda o, a, b, ty=i32: ir.BinOp(ty, op=o, a=a, b=b, loc=loc)  # noqa: E731
    r, c = fe.fresh("br"), fe.fresh("bc")
    fe.var_types.update({r: i32, c: i32})
    rv, cv = ir.Var(i32, name=r, loc=loc), ir.Var(i32, name=c, loc=loc)
    gr, gc = op("+", r0, rv), op("+", c0, cv)
    stride = ir.TensorDim(i32, tensor=t.name, attr="stride", axis=0, loc=loc)
    at = op("+", op("*", coerce(gr, i64), coerce(stride, i64), i64), coerce(gc, i64), i64)
    ok = ir.Logic(boolean, op="and", a=_inside(t, gr, 0, loc), b=_inside(t, gc, 1, loc), loc=loc)
    fe.emit(ir.For(var=r, start=k(0), stop=k(rows), step=k(1), loc=loc,
                   body=[ir.For(var=c, start=k(0), stop=k(cols), step=k(1), body=body_of(rv, cv, ok, at), loc=loc)]))


def _store_box(fe, node, dst, r0, c0, src, soff, rows, cols, swizzle):
    """The box written element by element by the issuing unit: stores only inside the tensor."""
    loc = fe.loc(node)

    def body(rv, cv, ok, at):
        where = coerce(ir.BinOp(i32, op="+", a=soff, b=tile_offset_expr(rv, cv, rows, loc, swizzle), loc=loc), i64)
        value = ir.SharedLoad(dst.dtype, array=src.name, offset=where, loc=loc)
        return [ir.If(cond=ok, then=[ir.Store(tensor=dst.name, offset=at, value=value, loc=loc)], loc=loc)]
    _box_loops(fe, dst, r0, c0, rows, cols, loc, body)
