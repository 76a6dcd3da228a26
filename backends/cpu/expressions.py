"""Expressions on the CPU: constants, variables, positions, arithmetic, comparisons,
short-circuit logic, casts (bf16 by integer ops) and math (mixed into CpuRenderer)."""
from __future__ import annotations

from llvmlite import ir as L

from kerneldsl import ir
from kerneldsl.dtypes import bf16, boolean, f16, f32, f64, i64

from .llvm_types import F32, I1, I16, I32, constant, reg_type


class Expressions:
    """Handlers of expression nodes (EXPRESSION_HANDLERS in renderer.py)."""

    def e_const(self, e):
        return constant(e.dtype, e.value)

    def e_var(self, e):
        return self.read_var(e.name)

    def e_tensor_dim(self, e):
        p, base, extent, shape, strides = self.tensors[e.tensor]
        v = (shape if e.attr == "shape" else strides)[e.axis]
        return self.b.trunc(v, I32)

    def e_position(self, e):
        b = self.b
        if e.kind == "cube_pos":
            return self.cube_pos[e.axis]
        if e.kind == "cube_count":
            return b.trunc(self.grid[e.axis], I32)
        u = b.trunc(self.unit_index(), I32)
        dx, dy, _ = self.k.cube_dim
        if e.kind == "unit_flat":
            return u
        if e.kind == "plane_pos":
            return b.udiv(u, L.Constant(I32, self.P))
        if e.kind == "lane_pos":
            return b.urem(u, L.Constant(I32, self.P))
        if e.axis == 0:
            return b.urem(u, L.Constant(I32, dx))
        if e.axis == 1:
            return b.urem(b.udiv(u, L.Constant(I32, dx)), L.Constant(I32, dy))
        return b.udiv(u, L.Constant(I32, dx * dy))

    def e_vec_make(self, e):
        return [self.expr(x) for x in e.elems]

    def e_vec_extract(self, e):
        return self.expr(e.a)[e.lane]

    def e_binop(self, e):
        a, c = self.expr(e.a), self.expr(e.b)
        return self.binop(e.op, a, c, e.dtype)

    def binop(self, op, a, c, t):
        b = self.b
        if t.is_float:
            return {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv, "%": b.frem}[op](a, c)
        if t.is_bool:
            return {"&": b.and_, "|": b.or_, "^": b.xor}[op](a, c)
        signed = t.is_signed
        if signed and op in "+-*":
            # signed overflow is undefined in the DSL, as in C/CUDA: `nsw` keeps
            # sext(i + u) affine, so unit-strided accesses vectorise without gathers
            fn = {"+": b.add, "-": b.sub, "*": b.mul}[op]
            return fn(a, c, flags=["nsw"])
        table = {"+": b.add, "-": b.sub, "*": b.mul, "&": b.and_, "|": b.or_, "^": b.xor, "<<": b.shl,
                 "/": b.sdiv if signed else b.udiv, "%": b.srem if signed else b.urem,
                 ">>": b.ashr if signed else b.lshr}
        return table[op](a, c)

    def e_unop(self, e):
        a = self.expr(e.a)
        b = self.b
        if e.op == "not":
            return b.xor(a, L.Constant(I1, 1))
        if e.op == "invert":
            return b.xor(a, L.Constant(a.type, -1))
        if e.dtype.is_float:
            return b.fneg(a)
        return b.sub(L.Constant(a.type, 0), a)

    def e_cmp(self, e):
        a, c = self.expr(e.a), self.expr(e.b)
        t = e.a.dtype
        b = self.b
        if t.is_float:
            if e.op == "!=":
                return b.fcmp_unordered("!=", a, c)
            return b.fcmp_ordered(e.op, a, c)
        if t.is_signed:
            return b.icmp_signed(e.op, a, c)
        return b.icmp_unsigned(e.op, a, c)

    def e_logic(self, e):
        b = self.b
        a = self.expr(e.a)
        if not any(isinstance(n, (ir.Load, ir.SharedLoad)) for n in ir.walk_expr(e.b)):
            c = self.expr(e.b)
            return b.and_(a, c) if e.op == "and" else b.or_(a, c)
        start = b.block
        rhs, join = self.new_block("sc.rhs"), self.new_block("sc.end")
        if e.op == "and":
            b.cbranch(a, rhs, join)
        else:
            b.cbranch(a, join, rhs)
        b.position_at_end(rhs)
        c = self.expr(e.b)
        rhs_end = b.block
        b.branch(join)
        b.position_at_end(join)
        ph = b.phi(I1)
        ph.add_incoming(L.Constant(I1, 0 if e.op == "and" else 1), start)
        ph.add_incoming(c, rhs_end)
        return ph

    def e_select(self, e):
        return self.b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))

    def e_bitcast(self, e):
        v = self.expr(e.a)
        return self.b.bitcast(v, reg_type(e.dtype))

    def e_cast(self, e):
        if isinstance(e.a, ir.TensorDim) and e.dtype is i64:
            p, base, extent, shape, strides = self.tensors[e.a.tensor]
            return (shape if e.a.attr == "shape" else strides)[e.a.axis]
        return self.cast(self.expr(e.a), e.a.dtype, e.dtype)

    def cast(self, v, src, dst):
        b = self.b
        if src == dst:
            return v
        if src is bf16:
            v = b.bitcast(b.shl(b.zext(v, I32), L.Constant(I32, 16)), F32)
            return self.cast(v, f32, dst)
        if dst is bf16:
            x = self.cast(v, src, f32)
            bits = b.bitcast(x, I32)
            lsb = b.and_(b.lshr(bits, L.Constant(I32, 16)), L.Constant(I32, 1))
            rounded = b.add(bits, b.add(lsb, L.Constant(I32, 0x7FFF)))
            nan = b.or_(b.lshr(bits, L.Constant(I32, 16)), L.Constant(I32, 0x40))
            out = b.select(self.math.isnan(b, x), nan, b.lshr(rounded, L.Constant(I32, 16)))
            return b.trunc(out, I16)
        if dst is boolean:
            if src.is_float:
                return b.fcmp_unordered("!=", v, L.Constant(v.type, 0.0))
            return b.icmp_unsigned("!=", v, L.Constant(v.type, 0))
        dty = reg_type(dst)
        if src.is_float and dst.is_float:
            if (src is f16 and dst is f64) or (src is f64 and dst is f16):
                # through f32: LLVM lowers direct half<->double to compiler-rt calls the JIT lacks
                return self.cast(self.cast(v, src, f32), f32, dst)
            return b.fpext(v, dty) if dst.bits > src.bits else b.fptrunc(v, dty)
        if src.is_float:
            return b.fptosi(v, dty) if dst.is_signed else b.fptoui(v, dty)
        if dst.is_float:
            if src.is_bool or not src.is_signed:
                return b.uitofp(v, dty)
            return b.sitofp(v, dty)
        sw, dw = v.type.width, dty.width
        if dw > sw:
            return b.sext(v, dty) if src.is_signed else b.zext(v, dty)
        if dw < sw:
            return b.trunc(v, dty)
        return v

    def e_math(self, e):
        b = self.b
        m = self.math
        args = [self.expr(a) for a in e.args]
        fn = e.fn
        t = e.args[0].dtype
        if fn in ("isnan", "isinf"):
            return getattr(m, fn)(b, args[0])
        if fn in ("min", "max"):
            return m.minmax(b, fn, args[0], args[1], signed=t.is_signed)
        if fn == "abs":
            if t.is_float:
                return m.fabs(b, args[0])
            if not t.is_signed:
                return args[0]
            neg = b.sub(L.Constant(args[0].type, 0), args[0])
            return b.select(b.icmp_signed("<", args[0], L.Constant(args[0].type, 0)), neg, args[0])
        return getattr(m, fn)(b, *args)
