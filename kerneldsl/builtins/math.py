"""Math builtins (exp, log, sqrt, pow, min, max, fma, isnan, ...). On compile-time
arguments they fold to Python numbers; on vectors they apply lane by lane; integer
arguments of float functions are computed in f32."""
from __future__ import annotations

import builtins as py
import math as pymath

from .. import ir
from ..dtypes import VecType, boolean, f32, f64, i32
from ..frontend_values import is_ct
from ..types import arith_type, coerce, extract, is_weak, promote
from .registry import builtin, declare

# compile-time values of the one-argument float functions
_FOLD = {
    "exp": pymath.exp, "log": pymath.log, "sqrt": pymath.sqrt, "floor": pymath.floor, "ceil": pymath.ceil,
    "sin": pymath.sin, "cos": pymath.cos, "tanh": pymath.tanh, "exp2": lambda v: 2.0 ** v,
    "exp2_fast": lambda v: 2.0 ** v, "log2": pymath.log2, "erf": pymath.erf, "log1p": pymath.log1p,
    "rsqrt": lambda v: 1 / pymath.sqrt(v), "sigmoid": lambda v: 1 / (1 + pymath.exp(-v)),
    "round": lambda v: float(pymath.floor(py.abs(v) + 0.5)) * (1 if v >= 0 else -1),
}


def math1(fe, fn, x, node):
    """fn(x) for a one-argument float function."""
    if is_ct(x) and fn in _FOLD:
        return _FOLD[fn](x)
    e = fe.to_expr(x, node)
    if isinstance(e.dtype, VecType):
        elems = [math1(fe, fn, extract(e, i), node) for i in range(e.dtype.lanes)]
        return ir.VecMake(VecType(elems[0].dtype, e.dtype.lanes), elems=elems, loc=fe.loc(node))
    t = arith_type(e.dtype)
    if not t.is_float:
        t = f32
    return ir.Math(t, fn=fn, args=[coerce(e, t)], loc=fe.loc(node))


def math2(fe, fn, a, b, node):
    """fn(a, b) for min, max and pow, in the operands' promoted type."""
    if is_ct(a) and is_ct(b):
        return py.min(a, b) if fn == "min" else py.max(a, b) if fn == "max" else a ** b
    ea, eb = fe.to_expr(a, node), fe.to_expr(b, node)
    if isinstance(ea.dtype, VecType) or isinstance(eb.dtype, VecType):
        vt = ea.dtype if isinstance(ea.dtype, VecType) else eb.dtype
        elems = [math2(fe, fn, extract(ea, i) if isinstance(ea.dtype, VecType) else ea,
                       extract(eb, i) if isinstance(eb.dtype, VecType) else eb, node) for i in range(vt.lanes)]
        return ir.VecMake(VecType(elems[0].dtype, vt.lanes), elems=elems, loc=fe.loc(node))
    t = promote(ea.dtype, is_weak(ea), eb.dtype, is_weak(eb))
    if fn == "pow" and not t.is_float:
        t = f32
    return ir.Math(t, fn=fn, args=[coerce(ea, t), coerce(eb, t)], loc=fe.loc(node))


def _unary(fn):
    def handler(fe, node, x):
        return math1(fe, fn, x, node)
    return handler


exp = declare("exp", _unary("exp"), "`e**x`")
exp2 = declare("exp2", _unary("exp2"), "`2**x`")
exp2_fast = declare("exp2_fast", _unary("exp2_fast"), "`2**x`, one instruction where the device has one; "
                                                       "below `2**-126` may be 0")
log = declare("log", _unary("log"), "natural log")
log2 = declare("log2", _unary("log2"), "log base 2")
log1p = declare("log1p", _unary("log1p"), "log(1 + x), accurate near 0")
sqrt = declare("sqrt", _unary("sqrt"), "square root")
rsqrt = declare("rsqrt", _unary("rsqrt"), "1 / sqrt(x)")
tanh = declare("tanh", _unary("tanh"), "hyperbolic tangent")
sigmoid = declare("sigmoid", _unary("sigmoid"), "1 / (1 + exp(-x))")
erf = declare("erf", _unary("erf"), "error function")
sin = declare("sin", _unary("sin"), "sine")
cos = declare("cos", _unary("cos"), "cosine")
floor = declare("floor", _unary("floor"), "round down")
ceil = declare("ceil", _unary("ceil"), "round up")
round = declare("round", _unary("round"), "round half away from zero")  # noqa: A001


@builtin("`x**y`")
def pow(fe, node, x, y):  # noqa: A001
    return math2(fe, "pow", x, y, node)


@builtin("minimum (NaN if either is NaN for floats)")
def min(fe, node, a, b):  # noqa: A001
    return math2(fe, "min", a, b, node)


@builtin("maximum (NaN if either is NaN for floats)")
def max(fe, node, a, b):  # noqa: A001
    return math2(fe, "max", a, b, node)


@builtin("min(max(x, lo), hi)")
def clamp(fe, node, x, lo, hi):
    return math2(fe, "min", math2(fe, "max", x, lo, node), hi, node)


@builtin("absolute value")
def abs(fe, node, x):  # noqa: A001
    """A vector lane by lane; integers stay integers."""
    if is_ct(x):
        return x if x >= 0 else -x
    e = fe.to_expr(x, node)
    if isinstance(e.dtype, VecType):
        return ir.VecMake(e.dtype, elems=[fe.call_builtin(abs, node, extract(e, i)) for i in range(e.dtype.lanes)])
    t = arith_type(e.dtype)
    if t.is_bool:
        t = i32
    return ir.Math(t, fn="abs", args=[coerce(e, t)], loc=fe.loc(node))


@builtin("a*b + c, one rounding")
def fma(fe, node, a, b, c):
    es = [fe.to_expr(v, node) for v in (a, b, c)]
    t = f32
    if any((not is_weak(e)) and arith_type(e.dtype) is f64 for e in es):
        t = f64
    return ir.Math(t, fn="fma", args=[coerce(e, t) for e in es], loc=fe.loc(node))


def _classify(fn):
    def handler(fe, node, x):
        if is_ct(x):
            return pymath.isnan(x) if fn == "isnan" else pymath.isinf(x)
        e = fe.to_expr(x, node)
        if not e.dtype.is_float:
            return False
        t = arith_type(e.dtype)
        return ir.Math(boolean, fn=fn, args=[coerce(e, t)], loc=fe.loc(node))
    return handler


isnan = declare("isnan", _classify("isnan"), "x is NaN")
isinf = declare("isinf", _classify("isinf"), "x is +-inf")
