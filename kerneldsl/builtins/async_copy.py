"""Asynchronous copies from a tensor to shared memory: cp.async on CUDA devices that have
it (`caps.async_copy`), the plain copy they mean elsewhere (so commit and wait vanish)."""
from __future__ import annotations

from .. import ir
from ..dtypes import VecType, boolean, i64
from ..frontend_values import SharedRef, TensorRef
from ..types import coerce, literal, make_const
from .registry import builtin


@builtin("Start copying `lanes` elements (4, 8 or 16 bytes, both ends aligned to it) from tensor `src` "
         "to shared array `dst`, or zeros where `pred` is false; ready after kd.async_wait.")
def async_copy(fe, node, dst, dst_offset, src, src_offset, lanes, pred=True):
    """Native (ir.AsyncCopy) where the device has hardware async copies; elsewhere the
    plain copy it means: load the elements (when pred holds) and store them, or zeros."""
    lanes = fe.ct(lanes, node, "kd.async_copy lanes")
    if not isinstance(dst, SharedRef):
        raise fe.error(node, f"kd.async_copy copies into a shared array, got {fe.describe(dst)} as dst")
    if not isinstance(src, TensorRef):
        raise fe.error(node, f"kd.async_copy copies from a tensor, got {fe.describe(src)} as src")
    if src.dtype != dst.dtype:
        raise fe.error(node, f"kd.async_copy: src is {src.dtype} but dst is {dst.dtype}")
    if lanes not in (1, 2, 4, 8) or lanes * src.dtype.itemsize not in (4, 8, 16):
        raise fe.error(node, f"kd.async_copy moves 4, 8 or 16 bytes: {lanes} lanes of {src.dtype} is "
                             f"{lanes * src.dtype.itemsize}")
    loc = fe.loc(node)
    doff = fe.temp(coerce(fe.to_expr(dst_offset, node), i64), "ad")
    soff = fe.temp(coerce(fe.to_expr(src_offset, node), i64), "as")
    cond = None if pred is True else fe.temp(coerce(fe.to_expr(pred, node), boolean), "ap")
    if fe.spec.caps.async_copy:
        fe.emit(ir.AsyncCopy(dst=dst.name, dst_offset=doff, src=src.name, src_offset=soff, lanes=lanes,
                             pred=cond, dtype=src.dtype, checked=fe.spec.bounds_check, loc=loc))
        return
    checked = fe.spec.bounds_check
    vt = src.dtype if lanes == 1 else VecType(src.dtype, lanes)
    val = ir.Load(vt, tensor=src.name, offset=soff, checked=checked, loc=loc)

    def stores(lane_value):
        return [ir.SharedStore(array=dst.name, offset=doff if i == 0 else ir.BinOp(i64, op="+", a=doff,
                                                                                    b=make_const(i, i64, loc), loc=loc),
                               value=lane_value(i), checked=checked, loc=loc) for i in range(lanes)]

    name = fe.fresh("av")
    fe.var_types[name] = vt
    v = ir.Var(vt, name=name, loc=loc)
    copy = [ir.Assign(name=name, value=val, loc=loc)]
    copy += stores(lambda i: v if lanes == 1 else ir.VecExtract(src.dtype, a=v, lane=i, loc=loc))
    if cond is None:
        for st in copy:
            fe.emit(st)
        return
    zero = stores(lambda i: fe.store_value(literal(0), src.dtype, node))
    fe.emit(ir.If(cond=cond, then=copy, orelse=zero, loc=loc))


@builtin("Close the group of this unit's async copies issued since the last commit.")
def async_commit(fe, node):
    if fe.spec.caps.async_copy:
        fe.emit(ir.AsyncCommit(loc=fe.loc(node)))


@builtin("Wait until at most `pending` (compile-time) committed copy groups are unfinished.")
def async_wait(fe, node, pending=0):
    pending = fe.ct(pending, node, "kd.async_wait pending groups")
    if not isinstance(pending, int) or not 0 <= pending <= 7:
        raise fe.error(node, f"kd.async_wait: pending must be a compile-time int in 0..7, got {pending!r}")
    if fe.spec.caps.async_copy:
        fe.emit(ir.AsyncWait(pending=pending, loc=fe.loc(node)))
