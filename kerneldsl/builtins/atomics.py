"""Atomics on a tensor or a shared array; each returns the old value. Which ops exist on
which dtypes is the device's (`caps.atomics`)."""
from __future__ import annotations

from .. import ir
from ..frontend_values import SharedRef, TensorRef
from ..types import coerce
from .registry import declare


def _atomic(op):
    def handler(fe, node, target, index, *rest):
        if op == "cas":
            if len(rest) != 2:
                raise fe.error(node, "kd.atomic_cas(target, index, compare, value)")
            compare, value = rest
        else:
            if len(rest) != 1:
                raise fe.error(node, f"kd.atomic_{op}(target, index, value)")
            compare, value = None, rest[0]
        if isinstance(target, TensorRef):
            space = "global"
        elif isinstance(target, SharedRef):
            space = "shared"
        else:
            raise fe.error(node, f"kd.atomic_{op} needs a tensor or shared array, got {fe.describe(target)}")
        dtype = target.dtype
        allowed = fe.spec.caps.atomics.get(op, ())
        if dtype not in allowed:
            raise fe.error(node, f"kd.atomic_{op} on {dtype} is unavailable on {fe.spec.caps.device_name} "
                                 f"(supported: {', '.join(d.name for d in allowed) or 'none'})")
        off = fe.offset_of(target, index, node)
        v = coerce(fe.to_expr(value, node), dtype)
        c = coerce(fe.to_expr(compare, node), dtype) if compare is not None else None
        dst = fe.fresh("at")
        fe.var_types[dst] = dtype
        fe.emit(ir.Atomic(dst=dst, op=op, space=space, target=target.name, offset=off, value=v, compare=c,
                          dtype=dtype, checked=fe.spec.bounds_check, loc=fe.loc(node)))
        return ir.Var(dtype, name=dst, loc=fe.loc(node))
    return handler


_TARGET = "target, index, value"
atomic_add = declare("atomic_add", _atomic("add"), "Adds value; returns the old value.", _TARGET)
atomic_min = declare("atomic_min", _atomic("min"), "Stores min(old, value); returns old.", _TARGET)
atomic_max = declare("atomic_max", _atomic("max"), "Stores max(old, value); returns old.", _TARGET)
atomic_exchange = declare("atomic_exchange", _atomic("exchange"), "Stores value; returns old.", _TARGET)
atomic_cas = declare("atomic_cas", _atomic("cas"), "Stores value if old == compare; returns old.",
                     "target, index, compare, value")
atomic_and = declare("atomic_and", _atomic("and"), "Bitwise and; returns old.", _TARGET)
atomic_or = declare("atomic_or", _atomic("or"), "Bitwise or; returns old.", _TARGET)
atomic_xor = declare("atomic_xor", _atomic("xor"), "Bitwise xor; returns old.", _TARGET)
