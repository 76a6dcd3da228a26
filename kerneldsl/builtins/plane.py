"""Plane operations: reductions, scans, broadcasts, shuffles and votes across the lanes of
a plane. Each becomes one ir.PlaneOp statement (a split point on the CPU), available
where the device's capabilities list it (`caps.plane_ops`)."""
from __future__ import annotations

from .. import ir
from ..dtypes import DType, VecType, boolean, i32, u32
from ..types import arith_type, coerce, is_weak
from .registry import declare


def _plane_value(fe, node, x, what):
    e = fe.to_expr(x, node)
    if isinstance(e.dtype, VecType):
        raise fe.error(node, f"{what} works on scalars, not vectors")
    if is_weak(e):
        e = coerce(e, e.dtype)
    t = arith_type(e.dtype) if not e.dtype.is_bool else boolean
    return coerce(e, t)


def _plane_op(op):
    def handler(fe, node, *args):
        caps = fe.spec.caps
        if op not in caps.plane_ops:
            raise fe.error(node, f"plane operation {op} is unavailable on {caps.device_name}")
        value = arg = None
        if op == "elect":
            if args:
                raise fe.error(node, "kd.plane_elect() takes no arguments")
            dtype = boolean
        elif op in ("ballot", "all", "any"):
            if len(args) != 1:
                raise fe.error(node, f"kd.plane_{op}(pred) takes one argument")
            value = fe.cond_expr(fe.to_expr(args[0], node), node)
            dtype = u32 if op == "ballot" else boolean
            if op == "ballot" and fe.spec.plane_dim > 32:
                raise fe.error(node, f"kd.plane_ballot needs PLANE_DIM <= 32, the runtime has {fe.spec.plane_dim}")
        else:
            want = 2 if op in ("broadcast", "shuffle", "shuffle_xor") else 1
            if len(args) != want:
                raise fe.error(node, f"kd.plane_{op} takes {want} argument(s)")
            value = _plane_value(fe, node, args[0], f"kd.plane_{op}")
            if value.dtype.is_bool and op not in ("broadcast", "shuffle", "shuffle_xor"):
                raise fe.error(node, f"kd.plane_{op} needs a number, got bool")
            dtype = value.dtype
            if want == 2:
                a = fe.to_expr(args[1], node)
                if not (isinstance(a.dtype, DType) and a.dtype.is_int):
                    raise fe.error(node, f"kd.plane_{op}: lane argument must be an integer")
                arg = fe.temp(coerce(a, i32), "pa")
        if value is not None:
            value = fe.temp(value, "pv")
        dst = fe.fresh("pr")
        fe.var_types[dst] = dtype
        fe.emit(ir.PlaneOp(dst=dst, op=op, value=value, arg=arg, dtype=dtype, loc=fe.loc(node)))
        return ir.Var(dtype, name=dst, loc=fe.loc(node))
    return handler


plane_sum = declare("plane_sum", _plane_op("sum"), "Sum over the plane's lanes, given to every lane.", "x")
plane_prod = declare("plane_prod", _plane_op("prod"), "Product over the plane.", "x")
plane_min = declare("plane_min", _plane_op("min"), "Minimum over the plane.", "x")
plane_max = declare("plane_max", _plane_op("max"), "Maximum over the plane.", "x")
plane_inclusive_sum = declare("plane_inclusive_sum", _plane_op("inclusive_sum"),
                              "Prefix sum including this lane.", "x")
plane_exclusive_sum = declare("plane_exclusive_sum", _plane_op("exclusive_sum"),
                              "Prefix sum of the lanes before this one.", "x")
plane_broadcast = declare("plane_broadcast", _plane_op("broadcast"),
                          "x of lane `lane` (plane-uniform) to every lane.", "x, lane")
plane_shuffle = declare("plane_shuffle", _plane_op("shuffle"),
                        "x of lane src_lane (per lane; taken modulo PLANE_DIM).", "x, src_lane")
plane_shuffle_xor = declare("plane_shuffle_xor", _plane_op("shuffle_xor"), "x of lane (lane_pos() ^ mask).",
                            "x, mask")
plane_ballot = declare("plane_ballot", _plane_op("ballot"), "u32 with bit i set when lane i's pred is true.",
                       "pred")
plane_all = declare("plane_all", _plane_op("all"), "True when pred holds on every lane.", "pred")
plane_any = declare("plane_any", _plane_op("any"), "True when pred holds on some lane.", "pred")
plane_elect = declare("plane_elect", _plane_op("elect"), "True on exactly one lane of the plane (the lowest).", "")
