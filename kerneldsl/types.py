"""Typing rules of the DSL: literal weakness, promotion, and casts of constants.

Python literals are *weak*: `x + 1` keeps x's type, `i * 0.5` with an integer i
gives f32. f16/bf16 are storage types: arithmetic promotes them to f32.
"""
from __future__ import annotations

import numpy as np

from . import ir
from .dtypes import DType, VecType, f16, bf16, f32, f64, i32, u32, i64, u8, boolean


def arith_type(t: DType) -> DType:
    """The type arithmetic on `t` runs in."""
    if t in (f16, bf16):
        return f32
    if t in (u8, boolean):
        return i32
    return t


def promote(ta: DType, weak_a: bool, tb: DType, weak_b: bool) -> DType:
    """Result type of a binary arithmetic operation on scalars."""
    if weak_a and not weak_b:
        if ta.is_float and not tb.is_float:
            return f32
        return arith_type(tb)
    if weak_b and not weak_a:
        if tb.is_float and not ta.is_float:
            return f32
        return arith_type(ta)
    if ta.is_float or tb.is_float:
        if f64 in (ta, tb):
            return f64
        return f32
    a, b = arith_type(ta), arith_type(tb)
    if i64 in (a, b):
        return i64
    if u32 in (a, b):
        return u32
    return i32


def const_value(value, dtype: DType):
    """Python value converted the way a cast to `dtype` would."""
    if dtype.is_bool:
        return bool(value)
    if dtype.is_float:
        v = float(value)
        if dtype is f32:
            return float(np.float32(v))
        if dtype is f16:
            return float(np.float16(v))
        if dtype is bf16:
            return float(np.asarray(v, dtype=np.float32).astype(bf16.np).astype(np.float32))
        return v
    v = int(value)
    bits = dtype.bits
    v &= (1 << bits) - 1
    if dtype.is_signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def make_const(value, dtype, loc=None, weak=False) -> ir.Const:
    c = ir.Const(dtype, value=const_value(value, dtype), loc=loc)
    c.weak = weak
    return c


def literal(value, loc=None) -> ir.Const:
    """A weak constant for a Python literal."""
    if isinstance(value, (bool, np.bool_)):
        return make_const(bool(value), boolean, loc)
    if isinstance(value, (int, np.integer)):
        value = int(value)
        dt = i32 if -(2**31) <= value < 2**31 else i64
        return make_const(value, dt, loc, weak=True)
    if isinstance(value, (float, np.floating)):
        return make_const(float(value), f32, loc, weak=True)
    raise TypeError(f"cannot use {value!r} as a kernel value")


def is_weak(e) -> bool:
    return getattr(e, "weak", False)


def coerce(e: ir.Expr, t) -> ir.Expr:
    """`e` converted to type `t` (no-op when equal)."""
    if e.dtype == t:
        return e
    if isinstance(t, VecType):
        if isinstance(e.dtype, VecType):
            return ir.VecMake(t, elems=[coerce(extract(e, i), t.elem) for i in range(t.lanes)], loc=e.loc)
        s = coerce(e, t.elem)
        return ir.VecMake(t, elems=[s] * t.lanes, loc=e.loc)
    if isinstance(e, ir.Const):
        return make_const(e.value, t, e.loc)
    return ir.Cast(t, a=e, loc=e.loc)


def extract(e: ir.Expr, lane: int) -> ir.Expr:
    """Lane `lane` of a vector expression, folding through VecMake."""
    if isinstance(e, ir.VecMake):
        return e.elems[lane]
    return ir.VecExtract(e.dtype.elem, a=e, lane=lane, loc=e.loc)
