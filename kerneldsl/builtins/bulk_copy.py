"""Bulk tensor copies: a whole rows x cols box of a 2-D tensor into shared memory in the
group-tile layout (`kd.tile_offset`, what kd.group_mma reads), its bytes delivered to an
arrival barrier. One unit issues it.

On devices with `caps.bulk_copy` this is the tensor memory accelerator (TMA: the runtime
builds the tensor map from the tensor and the box at launch); elsewhere the issuing unit
copies the box itself, then counts its bytes down on the emulated barrier, so a kernel gives
the same answers everywhere.
"""
from __future__ import annotations

from .. import ir
from ..dtypes import bf16, boolean, f16, i32, i64
from ..frontend_values import BarrierRef, SharedRef, TensorRef
from ..types import coerce, literal, make_const
from .arrival import _index, _need_barriers, emulated_count_down
from .group import tile_offset_expr
from .registry import builtin

MAX_BOX = 256  # rows and columns of one box (the bulk-copy engine's limit per dimension)


def _box(fe, node, rows, cols):
    rows, cols = (fe.ct(v, node, "kd.bulk_copy box") for v in (rows, cols))
    for what, v, step in (("rows", rows, 8), ("cols", cols, 16)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0 or v % step or v > MAX_BOX:
            raise fe.error(node, f"kd.bulk_copy: {what} must be a multiple of {step} in {step}..{MAX_BOX} "
                                 f"(the group-tile layout and the copy engine's box), got {v!r}")
    return rows, cols


@builtin("Copy src[row:row+rows, col:col+cols] (zeros outside src) into dst from dst_offset in the "
         "kd.tile_offset layout; its bytes arrive at barrier `index` of `bars`. One unit issues it.")
def bulk_copy(fe, node, dst, dst_offset, src, row, col, rows, cols, bars, index):
    """The barrier's phase must expect the box's bytes (rows * cols * 2, kd.barrier_expect);
    `col` must be a multiple of 8 (16 bytes; checked where it is a compile-time int, undefined
    on sm_90 otherwise), `row` and `col` may lie outside the tensor (those parts are zeros)."""
    if not isinstance(src, TensorRef) or src.ndim != 2:
        raise fe.error(node, f"kd.bulk_copy copies from a 2-D tensor, got {fe.describe(src)}"
                             + (f" with {src.ndim} dims" if isinstance(src, TensorRef) else ""))
    if src.dtype not in (f16, bf16):
        raise fe.error(node, f"kd.bulk_copy copies f16 or bf16 tiles (the group-tile layout), got {src.dtype}")
    if not src.inner_contiguous:
        raise fe.error(node, f"kd.bulk_copy reads whole rows: tensor {src.name} must have a contiguous last "
                             f"axis (stride 1)")
    if not isinstance(dst, SharedRef) or dst.dtype != src.dtype:
        raise fe.error(node, f"kd.bulk_copy copies into a shared array of {src.dtype}, got {fe.describe(dst)}")
    bars = _need_barriers(fe, node, bars, "kd.bulk_copy")
    rows, cols = _box(fe, node, rows, cols)
    size = 1
    for d in dst.shape:
        size *= d
    if isinstance(dst_offset, int) and not isinstance(dst_offset, bool):
        if dst_offset % 128 or not 0 <= dst_offset <= size - rows * cols:
            raise fe.error(node, f"kd.bulk_copy: dst_offset {dst_offset} must be a multiple of 128 elements with "
                                 f"the {rows}x{cols} box inside the {size} elements of {dst.name}")
    elif rows * cols > size:
        raise fe.error(node, f"kd.bulk_copy: the {rows}x{cols} box does not fit in the {size} elements of {dst.name}")
    step = 16 // src.dtype.itemsize
    if isinstance(col, int) and not isinstance(col, bool) and col % step:
        raise fe.error(node, f"kd.bulk_copy: the box's first column must start on a 16-byte boundary (a multiple of "
                             f"{step} elements of {src.dtype}), got col {col}")
    i = _index(fe, node, bars, index, "kd.bulk_copy")
    bars.used.add("copy")
    fe.bulk_sources.add(src.name)
    loc = fe.loc(node)
    doff = fe.temp(coerce(fe.to_expr(dst_offset, node), i32), "bd")
    r0 = fe.temp(coerce(fe.to_expr(row, node), i32), "br")
    c0 = fe.temp(coerce(fe.to_expr(col, node), i32), "bk")
    if fe.spec.caps.bulk_copy:
        fe.emit(ir.BulkCopy(dst=dst.name, dst_offset=doff, src=src.name, row=r0, col=c0, rows=rows, cols=cols,
                            barriers=bars.name, index=i, dtype=src.dtype, loc=loc))
        return
    _copy_box(fe, node, dst, doff, src, r0, c0, rows, cols)
    emulated_count_down(fe, node, bars, i, make_const(rows * cols * src.dtype.itemsize, i32, loc))


def _copy_box(fe, node, dst, doff, src, r0, c0, rows, cols):
    """The box copied element by element by the issuing unit: loads only inside the tensor."""
    loc = fe.loc(node)
    k = lambda v, t=i32: make_const(v, t, loc)  # noqa: E731
    op = lambda o, a, b, t=i32: ir.BinOp(t, op=o, a=a, b=b, loc=loc)  # noqa: E731
    r, c, v = fe.fresh("br"), fe.fresh("bc"), fe.fresh("bv")
    fe.var_types.update({r: i32, c: i32, v: src.dtype})
    rv, cv = ir.Var(i32, name=r, loc=loc), ir.Var(i32, name=c, loc=loc)
    gr, gc = op("+", r0, rv), op("+", c0, cv)

    def inside(x, axis):
        extent = ir.TensorDim(i32, tensor=src.name, attr="shape", axis=axis, loc=loc)
        return ir.Logic(boolean, op="and", a=ir.Cmp(boolean, op=">=", a=x, b=k(0), loc=loc),
                        b=ir.Cmp(boolean, op="<", a=x, b=extent, loc=loc), loc=loc)

    stride = ir.TensorDim(i32, tensor=src.name, attr="stride", axis=0, loc=loc)
    at = op("+", op("*", coerce(gr, i64), coerce(stride, i64), i64), coerce(gc, i64), i64)
    load = ir.Assign(name=v, value=ir.Load(src.dtype, tensor=src.name, offset=at, loc=loc), loc=loc)
    zero = ir.Assign(name=v, value=fe.store_value(literal(0), src.dtype, node), loc=loc)
    ok = ir.Logic(boolean, op="and", a=inside(gr, 0), b=inside(gc, 1), loc=loc)
    where = coerce(op("+", doff, tile_offset_expr(rv, cv, rows, loc)), i64)
    inner = [ir.If(cond=ok, then=[load], orelse=[zero], loc=loc),
             ir.SharedStore(array=dst.name, offset=where, value=ir.Var(src.dtype, name=v, loc=loc), loc=loc)]
    fe.emit(ir.For(var=r, start=k(0), stop=k(rows), step=k(1), loc=loc,
                   body=[ir.For(var=c, start=k(0), stop=k(cols), step=k(1), body=inner, loc=loc)]))
