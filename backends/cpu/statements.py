"""Statements inside a region's unit loop on the CPU: assignments, stores, if / for / while,
jumps out of the unit loop, atomics and kd.print (mixed into CpuRenderer)."""
from __future__ import annotations

from llvmlite import ir as L

from kerneldsl.dtypes import f32, i64, u32, boolean

from .. import dispatch
from .llvm_types import F64, I1, I8, I8P, I32, I64, reg_type


class Statements:
    """Handlers of the statements a region holds (STATEMENT_HANDLERS in renderer.py)."""

    def block(self, stmts):
        for s in stmts:
            if self.b.block.is_terminated:
                self.dead_block()
            self.stmt(s)

    def s_assign(self, s):
        self.write_var(s.name, self.expr(s.value))

    def s_store(self, s):
        self.store_tensor(s.tensor, s.offset, s.value, s.checked, s.loc)

    def s_shared_store(self, s):
        d, arr = self.shared[s.array]
        off = self.expr(s.offset)
        val = self.to_mem(self.expr(s.value), d.dtype)

        def do(o):
            self.b.store(val, self.b.gep(arr, [L.Constant(I64, 0), o]))
        self.guarded(off, L.Constant(I64, d.size), 1, do, s.checked, -1, s.loc)

    def s_if(self, s):
        b = self.b
        c = self.expr(s.cond)
        then, other, join = self.new_block("if.then"), self.new_block("if.else"), self.new_block("if.end")
        b.cbranch(c, then, other)
        b.position_at_end(then)
        self.block(s.then)
        if not b.block.is_terminated:
            b.branch(join)
        b.position_at_end(other)
        self.block(s.orelse)
        if not b.block.is_terminated:
            b.branch(join)
        b.position_at_end(join)

    def s_for(self, s):
        self.for_loop(s, lambda: self.block(s.body), self.region_loops)

    def s_while(self, s):
        self.while_loop(s.cond, lambda: self.block(s.body), self.region_loops)

    def _escape(self, kind):
        self.b.store(L.Constant(I1, 1), self.flags[kind])
        self.b.branch(self.unit_latch)

    def s_break(self, s):
        if self.region_loops:
            self.b.branch(self.region_loops[-1].exit)
        else:
            self._escape("break")

    def s_continue(self, s):
        if self.region_loops:
            self.b.branch(self.region_loops[-1].latch)
        else:
            self._escape("continue")

    def s_return(self, s):
        self._escape("return")

    def s_atomic(self, s):
        b = self.b
        if s.space == "global":
            p, base, extent, _, _ = self.tensors[s.target]
            limit = extent
        else:
            d, arr = self.shared[s.target]
            base = b.gep(arr, [L.Constant(I64, 0), L.Constant(I64, 0)])
            limit = L.Constant(I64, d.size)
        off = self.expr(s.offset)
        val = self.expr(s.value)
        t = s.dtype
        result = {}

        def do(o):
            ptr = b.gep(base, [o])
            if s.space != "global":
                result["v"] = self._cube_private_rmw(ptr, s, val, t)
                return
            if s.op == "cas":
                cmp = self.expr(s.compare)
                pair = b.cmpxchg(ptr, cmp, val, "monotonic", "monotonic")
                result["v"] = b.extract_value(pair, 0)
                return
            if t is f32:
                op = {"add": "fadd"}[s.op]
            else:
                op = {"add": "add", "exchange": "xchg", "and": "and", "or": "or", "xor": "xor",
                      "min": "min" if t.is_signed else "umin", "max": "max" if t.is_signed else "umax"}[s.op]
            result["v"] = b.atomic_rmw(op, ptr, val, "monotonic")

        self.guarded(off, limit, 1, do, s.checked, self._tensor_index(s.target) if s.space == "global" else -1,
                     s.loc, value_type=reg_type(t), result=result)
        if s.dst:
            self.write_var(s.dst, result["v"])

    def _cube_private_rmw(self, ptr, s, val, t):
        """An atomic on shared memory, which one thread alone touches (a cube runs as one call
        on one thread): a read, the op and a write, with no locked instruction (x86 has no
        float atomic add: a compare-exchange loop each). The load and store are monotonic
        atomics only so that the loop vectoriser leaves them in lane order (plain ones would
        join the unit loop's parallel accesses, and lanes hitting one slot would lose adds).
        Returns the old value, as an atomic does."""
        b = self.b
        align = t.itemsize
        old = b.load_atomic(ptr, "monotonic", align)
        if s.op == "cas":  # (integers only: `add` is the one op on floats, caps.atomics)
            new = b.select(b.icmp_unsigned("==", old, self.expr(s.compare)), val, old)
        elif s.op == "exchange":
            new = val
        elif t.is_float:
            new = b.fadd(old, val)
        elif s.op in ("min", "max"):
            pred = ("<" if s.op == "min" else ">")
            less = b.icmp_signed(pred, val, old) if t.is_signed else b.icmp_unsigned(pred, val, old)
            new = b.select(less, val, old)
        else:
            new = {"add": b.add, "and": b.and_, "or": b.or_, "xor": b.xor}[s.op](old, val)
        b.store_atomic(new, ptr, "monotonic", align)
        return old

    def s_print(self, s):
        fmt, args = dispatch.printf_format(s.parts, self._print_arg)
        fmt += "\n"
        data = bytearray(fmt.encode()) + b"\0"
        g = L.GlobalVariable(self.module, L.ArrayType(I8, len(data)), name=f"kd.str{self._strings}")
        self._strings += 1
        g.global_constant = True
        g.linkage = "private"
        g.initializer = L.Constant(L.ArrayType(I8, len(data)), data)
        printf = self.module.globals.get("printf") or L.Function(
            self.module, L.FunctionType(I32, [I8P], var_arg=True), "printf")
        fflush = self.module.globals.get("fflush") or L.Function(self.module, L.FunctionType(I32, [I8P]), "fflush")
        self.b.call(printf, [self.b.bitcast(g, I8P)] + args)
        self.b.call(fflush, [L.Constant(I8P, None)])

    def _print_arg(self, part):
        """(printf conversion, LLVM argument) of one kd.print expression (C's vararg promotions)."""
        v = self.expr(part)
        t = part.dtype
        if t.is_float:
            return "%g", self.b.fpext(v, F64) if t is f32 else v
        if t is i64:
            return "%lld", v
        if t is u32:
            return "%u", v
        if t is boolean:
            return "%d", self.b.zext(v, I32)
        return "%d", self.b.sext(v, I32) if v.type.width < 32 else v
