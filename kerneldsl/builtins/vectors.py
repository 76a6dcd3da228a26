"""Short vectors (2, 4 or 8 lanes): wide loads and stores, building and reducing them."""
from __future__ import annotations

from .. import ir
from ..dtypes import VecType, i64
from ..frontend_values import TensorRef
from ..types import coerce, extract, is_weak, promote
from .math import math2
from .registry import builtin, declare


@builtin("Load `lanes` (2/4/8) consecutive elements as one vector.")
def load_vec(fe, node, tensor, offset, lanes):
    lanes = fe.ct(lanes, node, "vector lanes")
    if not isinstance(tensor, TensorRef):
        raise fe.error(node, "kd.load_vec needs a tensor")
    if lanes not in (2, 4, 8):
        raise fe.error(node, f"vector lanes must be 2, 4 or 8, got {lanes}")
    off = coerce(fe.to_expr(offset, node), i64)
    return ir.Load(VecType(tensor.dtype, lanes), tensor=tensor.name, offset=off,
                   checked=fe.spec.bounds_check, loc=fe.loc(node))


@builtin("Store a vector to consecutive elements.")
def store_vec(fe, node, tensor, offset, value):
    if not isinstance(tensor, TensorRef):
        raise fe.error(node, "kd.store_vec needs a tensor")
    v = fe.to_expr(value, node)
    if not isinstance(v.dtype, VecType):
        raise fe.error(node, "kd.store_vec needs a vector value")
    v = coerce(v, VecType(tensor.dtype, v.dtype.lanes))
    off = coerce(fe.to_expr(offset, node), i64)
    fe.emit(ir.Store(tensor=tensor.name, offset=off, value=v, checked=fe.spec.bounds_check, loc=fe.loc(node)))


@builtin("A vector with every lane equal to value.")
def splat(fe, node, value, lanes):
    lanes = fe.ct(lanes, node, "vector lanes")
    e = fe.to_expr(value, node)
    if is_weak(e):
        e = coerce(e, e.dtype)
    return ir.VecMake(VecType(e.dtype, lanes), elems=[e] * lanes, loc=fe.loc(node))


@builtin("A vector from 2, 4 or 8 scalars.")
def make_vec(fe, node, *values):
    es = [fe.to_expr(v, node) for v in values]
    if len(es) not in (2, 4, 8):
        raise fe.error(node, "kd.make_vec takes 2, 4 or 8 values")
    t = es[0].dtype
    for e in es[1:]:
        t = promote(t, False, e.dtype, is_weak(e)) if t != e.dtype else t
    return ir.VecMake(VecType(t, len(es)), elems=[coerce(e, t) for e in es], loc=fe.loc(node))


def _vec_reduce(kind):
    def handler(fe, node, v):
        e = fe.to_expr(v, node)
        if not isinstance(e.dtype, VecType):
            raise fe.error(node, f"kd.vec_{kind} needs a vector")
        acc = extract(e, 0)
        for i in range(1, e.dtype.lanes):
            acc = fe.binop("+", acc, extract(e, i), node) if kind == "sum" else math2(fe, kind, acc, extract(e, i), node)
        return acc
    return handler


vec_sum = declare("vec_sum", _vec_reduce("sum"), "Sum of a vector's lanes.")
vec_max = declare("vec_max", _vec_reduce("max"), "Max of a vector's lanes.")
vec_min = declare("vec_min", _vec_reduce("min"), "Min of a vector's lanes.")
