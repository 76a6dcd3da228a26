"""Conversions, selection and compile-time helpers: cast, bitcast, select, unroll,
static_assert. `kd.f32(x)`, `float(x)`, `int(x)` and `bool(x)` in a kernel are casts too."""
from __future__ import annotations

from .. import ir
from ..dtypes import DType, VecType, as_dtype
from ..frontend_values import is_ct
from ..types import coerce, extract, is_weak, make_const
from .registry import builtin


@builtin("Convert to dtype.")
def cast(fe, node, value, dtype):
    """A vector converts lane by lane; a conversion to bool compares with 0."""
    dtype = fe.ct(dtype, node, "cast dtype")
    if not isinstance(dtype, (DType, VecType)):
        dtype = as_dtype(dtype)
    if is_ct(value) and isinstance(dtype, DType):
        return make_const(value, dtype, fe.loc(node))
    e = fe.to_expr(value, node)
    if isinstance(dtype, DType) and isinstance(e.dtype, VecType):
        dtype = VecType(dtype, e.dtype.lanes)
    if e.dtype == dtype:
        return e if not is_weak(e) else coerce(make_const(e.value, dtype), dtype)
    if isinstance(dtype, VecType):
        if not isinstance(e.dtype, VecType):
            return coerce(e, dtype)
        return ir.VecMake(dtype, elems=[fe.call_builtin(cast, node, extract(e, i), dtype.elem) for i in range(dtype.lanes)],
                          loc=fe.loc(node))
    if dtype.is_bool:
        return fe.cond_expr(e, node)
    return ir.Cast(dtype, a=e, loc=fe.loc(node))


@builtin("Reinterpret bits as dtype (same size).")
def bitcast(fe, node, value, dtype):
    dtype = as_dtype(fe.ct(dtype, node, "bitcast dtype"))
    e = fe.to_expr(value, node)
    if is_weak(e):
        e = coerce(e, e.dtype)
    if isinstance(e.dtype, VecType) or e.dtype.itemsize != dtype.itemsize or dtype.is_bool or e.dtype.is_bool:
        raise fe.error(node, f"kd.bitcast needs types of one size, got {e.dtype} -> {dtype}")
    return ir.Bitcast(dtype, a=e, loc=fe.loc(node))


@builtin("cond ? a : b, both evaluated.")
def select(fe, node, cond, a, b):
    if is_ct(cond):
        return a if cond else b
    return fe.select(cond, a, b, node)


@builtin("Like range() with compile-time bounds; the loop is unrolled.")
def unroll(fe, node, *args):
    raise fe.error(node, "kd.unroll(...) can only be used as a for-loop iterator")


@builtin("Compile-time assertion.")
def static_assert(fe, node, cond, message="static assertion failed"):
    if not is_ct(cond):
        raise fe.error(node, "kd.static_assert needs a compile-time condition")
    if not cond:
        raise fe.error(node, str(message))
