"""Plane operations on the CPU: small loops over each plane's lanes between regions
(mixed into CpuRenderer)."""
from __future__ import annotations

from llvmlite import ir as L

from kerneldsl import ir

from .llvm_types import I1, I32, I64, reg_type


class Planes:
    """Per-plane iteration and the PlaneOp split point."""

    def per_plane(self, fn):
        """fn(base_unit i64 value, lanes int) for each plane; full planes in a loop, a
        partial last plane (cube size not a multiple of PLANE_DIM) after it."""
        lo, hi = self.units_lowered()  # a kd.role covers whole planes
        full, tail = divmod(hi - lo, self.P)
        if full:
            first = lo // self.P
            self.counted_loop(first + full, lambda p: fn(self.b.mul(p, L.Constant(I64, self.P)), self.P), "plane",
                              start=first)
        if tail:
            fn(L.Constant(I64, lo + full * self.P), tail)

    def at_unit(self, e, idx):
        saved = self.u
        self.u = idx
        try:
            return self.expr(e)
        finally:
            self.u = saved

    def plane_op(self, s):
        b = self.b
        t = s.dtype
        op = s.op
        dst_kind, dst_arr, _ = self.vars[s.dst]

        def dst_ptr(idx):
            return b.gep(dst_arr, [L.Constant(I64, 0), idx])

        def combine(x, y):
            if op in ("sum", "inclusive_sum", "exclusive_sum"):
                return b.fadd(x, y) if t.is_float else b.add(x, y)
            if op == "prod":
                return b.fmul(x, y) if t.is_float else b.mul(x, y)
            return self.math.minmax(b, op, x, y, signed=t.is_signed)

        def body(base, n):
            lane = lambda l: b.add(base, L.Constant(I64, l))  # noqa: E731
            if op in ir.PLANE_REDUCE_OPS:
                acc = self.at_unit(s.value, lane(0))
                for l in range(1, n):
                    acc = combine(acc, self.at_unit(s.value, lane(l)))
                for l in range(n):
                    b.store(acc, dst_ptr(lane(l)))
            elif op in ("inclusive_sum", "exclusive_sum"):
                acc = L.Constant(reg_type(t), 0.0 if t.is_float else 0)
                for l in range(n):
                    x = self.at_unit(s.value, lane(l))
                    nxt = combine(acc, x)
                    b.store(nxt if op == "inclusive_sum" else acc, dst_ptr(lane(l)))
                    acc = nxt
            elif op in ("all", "any", "ballot"):
                if op == "ballot":
                    acc = L.Constant(I32, 0)
                    for l in range(n):
                        bit = b.shl(b.zext(self.at_unit(s.value, lane(l)), I32), L.Constant(I32, l))
                        acc = b.or_(acc, bit)
                else:
                    acc = L.Constant(I1, 1 if op == "all" else 0)
                    for l in range(n):
                        x = self.at_unit(s.value, lane(l))
                        acc = b.and_(acc, x) if op == "all" else b.or_(acc, x)
                for l in range(n):
                    b.store(acc, dst_ptr(lane(l)))
            elif op == "elect":
                for l in range(n):
                    b.store(L.Constant(I1, int(l == 0)), dst_ptr(lane(l)))
            elif op == "broadcast":
                src = b.sext(self.at_unit(s.arg, lane(0)), I64)
                src = b.select(b.icmp_unsigned("<", src, L.Constant(I64, n)), src, L.Constant(I64, 0))
                v = self.at_unit(s.value, b.add(base, src))
                for l in range(n):
                    b.store(v, dst_ptr(lane(l)))
            else:  # shuffle, shuffle_xor: read all sources first, then write
                vals = []
                for l in range(n):
                    a = b.sext(self.at_unit(s.arg, lane(l)), I64)
                    if op == "shuffle":
                        src = b.urem(a, L.Constant(I64, self.P))
                    else:
                        src = b.xor(a, L.Constant(I64, l))
                    src = b.select(b.icmp_unsigned("<", src, L.Constant(I64, n)), src, L.Constant(I64, l))
                    vals.append(self.at_unit(s.value, b.add(base, src)))
                for l, v in enumerate(vals):
                    b.store(v, dst_ptr(lane(l)))

        self.per_plane(body)
