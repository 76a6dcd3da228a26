"""IR -> LLVM IR text for the CPU, built with llvmlite's IR builder.

A cube runs as one call on one thread. The kernel body is the schedule of
`regions.py`: uniform control flow and split points at the top, each region a
loop over the cube's units (`u`) that the loop vectoriser can widen. Values
that cross regions live in per-unit arrays, plane operations and fragment
operations are small loops over lanes between regions. f16 is LLVM `half`
(F16C converts it); bf16 is kept as its 16 bits and converted with integer ops.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir as L

from kerneldsl import ir
from kerneldsl.dtypes import VecType, bf16, boolean, f16, f32, f64, i32, i64, u8, u32

from . import abi
from .mathlib import MathEmitter
from .regions import Region, SFor, SIf, SJump, SplitOp, SWhile, build_schedule, rematerialize

I1, I8, I16, I32, I64 = L.IntType(1), L.IntType(8), L.IntType(16), L.IntType(32), L.IntType(64)
F16, F32, F64 = L.HalfType(), L.FloatType(), L.DoubleType()
VOID = L.VoidType()
I8P = I8.as_pointer()

_REG = {f32: F32, f64: F64, f16: F16, bf16: I16, i32: I32, u32: I32, i64: I64, u8: I8, boolean: I1}


def reg_type(t):
    """LLVM type of a value in registers (bool: i1)."""
    if isinstance(t, VecType):
        return L.ArrayType(_REG[t.elem], t.lanes)
    return _REG[t]


def mem_type(t):
    """LLVM type of an element in memory (bool: one byte)."""
    if isinstance(t, VecType):
        return L.ArrayType(mem_type(t.elem), t.lanes)
    return I8 if t is boolean else _REG[t]


def _const(t, value):
    if t is bf16:
        bits = int(np.asarray(value, np.float32).astype(bf16.np).view(np.uint16))
        return L.Constant(I16, bits)
    if t is boolean:
        return L.Constant(I1, int(bool(value)))
    return L.Constant(_REG[t], value)


class _DistinctMD(L.values.MDValue):
    """A `distinct` metadata node: loop IDs and access groups must never be merged."""

    def descr(self, buf):
        buf += ("distinct ",)
        super().descr(buf)

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


class _Loop:
    def __init__(self, latch, exit_):
        self.latch = latch
        self.exit = exit_


class CpuRenderer:
    def __init__(self, k: ir.KernelIR, uniformity, caps):
        self.k = k
        self.caps = caps
        rematerialize(k)
        self.sched = build_schedule(k, uniformity)
        self.U = k.cube_units
        self.P = k.plane_dim

    # ================================================================ setup
    def render(self) -> str:
        k = self.k
        self.module = L.Module(name=k.name)
        self.math = MathEmitter(self.module)
        fnty = L.FunctionType(VOID, [I8P, I64, I64])
        self.fn = L.Function(self.module, fnty, name=abi.ENTRY)
        self.fn.args[0].add_attribute("noalias")
        entry = self.fn.append_basic_block("entry")  # allocas only, then a branch to start
        start = self.fn.append_basic_block("start")
        self.b = L.IRBuilder(start)
        self.alloca_builder = L.IRBuilder(entry)
        self._strings = 0
        self.u = None
        self.region_loops = []
        self.split_loops = []
        self.flags = {}
        self._load_header()
        self._allocate()
        self._cube_loop()
        self.alloca_builder.branch(start)
        self.frame_bytes = sum(_type_bytes(i.allocated_type) for i in entry.instructions
                               if isinstance(i, L.AllocaInstr))
        return str(self.module)

    def _slot(self, index, ty=I64):
        p = self.b.gep(self.fn.args[0], [L.Constant(I64, 8 * index)])
        p = self.b.bitcast(p, ty.as_pointer())
        return self.b.load(p, align=8)

    def _load_header(self):
        self.grid = [self._slot(i) for i in range(3)]
        self.errbuf = self.b.inttoptr(self._slot(3), I64.as_pointer())
        slots = abi.param_slots(self.k.params)
        self.tensors = {}
        self.params = {}
        for p in self.k.params:
            s = slots[p.name]
            if isinstance(p, ir.TensorParam):
                base = self.b.inttoptr(self._slot(s), mem_type(p.dtype).as_pointer(), name=p.name)
                extent = self._slot(s + 1)
                shape = [self._slot(s + 2 + a) for a in range(p.ndim)]
                strides = [self._slot(s + 2 + p.ndim + a) for a in range(p.ndim)]
                self.tensors[p.name] = (p, base, extent, shape, strides)
            else:
                raw = self._slot(s)
                t = p.dtype
                if t in (f32,):
                    v = self.b.bitcast(self.b.trunc(raw, I32), F32)
                elif t is f64:
                    v = self.b.bitcast(raw, F64)
                elif t is f16:
                    v = self.b.bitcast(self.b.trunc(raw, I16), F16)
                elif t is boolean:
                    v = self.b.icmp_unsigned("!=", raw, L.Constant(I64, 0))
                else:
                    v = self.b.trunc(raw, reg_type(t)) if reg_type(t) != I64 else raw
                self.params[p.name] = v

    def alloca(self, ty, name=""):
        """An entry-block alloca (so mem2reg can promote it), wherever codegen is."""
        return self.alloca_builder.alloca(ty, name=name)

    def _allocate(self):
        ab = self
        self.vars = {}
        for name, t in self.k.var_types.items():
            kind = self.sched.storage.get(name, "scalar")
            ty = reg_type(t)
            if kind == "unit":
                self.vars[name] = ("unit", ab.alloca(L.ArrayType(ty, self.U), name), t)
            else:
                self.vars[name] = ("scalar", ab.alloca(ty, name), t)
        self.shared = {}
        for name, d in self.k.shared.items():
            arr = ab.alloca(L.ArrayType(mem_type(d.dtype), d.size), name)
            arr.align = 64
            self.shared[name] = (d, arr)
        self.frag_mem = {}
        planes = -(-self.U // self.P)
        for name, ft in self.k.frags.items():
            arr = ab.alloca(L.ArrayType(F32, planes * ft.rows * ft.cols), name)
            arr.align = 64
            self.frag_mem[name] = (ft, arr)

    def _cube_loop(self):
        b = self.b
        begin, end = self.fn.args[1], self.fn.args[2]
        pre = b.block
        cond = self.fn.append_basic_block("cube.cond")
        body = self.fn.append_basic_block("cube.body")
        self.cube_exit = self.fn.append_basic_block("cube.next")
        done = self.fn.append_basic_block("done")
        b.branch(cond)
        b.position_at_end(cond)
        c = b.phi(I64, name="cube")
        c.add_incoming(begin, pre)
        # the launch's cancel flag (Ctrl-C), read before every cube: a cancelled launch stops
        # at the next cube boundary
        flag = b.gep(self.errbuf, [L.Constant(I64, abi.CANCEL_SLOT)])
        running = b.icmp_signed("==", b.load_atomic(flag, "monotonic", 8), L.Constant(I64, 0))
        b.cbranch(b.and_(b.icmp_signed("<", c, end), running), body, done)
        b.position_at_end(body)
        gx, gy = self.grid[0], self.grid[1]
        x = b.srem(c, gx)
        rest = b.sdiv(c, gx)
        y = b.srem(rest, gy)
        z = b.sdiv(rest, gy)
        self.cube_pos = [b.trunc(v, I32) for v in (x, y, z)]
        self.lower_items(self.sched.items)
        if not b.block.is_terminated:
            b.branch(self.cube_exit)
        b.position_at_end(self.cube_exit)
        nxt = b.add(c, L.Constant(I64, 1))
        c.add_incoming(nxt, self.cube_exit)
        b.branch(cond)
        b.position_at_end(done)
        b.ret_void()

    # ================================================================ helpers
    def new_block(self, name):
        return self.fn.append_basic_block(name)

    def dead_block(self):
        self.b.position_at_end(self.new_block("dead"))

    def counted_loop(self, n, body_fn, name="l", start=0):
        """for i in range(start, n) (i64 constants or values) -> body_fn(i)."""
        b = self.b
        n = n if isinstance(n, L.Value) else L.Constant(I64, n)
        pre = b.block
        cond, body, done = self.new_block(name + ".cond"), self.new_block(name + ".body"), self.new_block(name + ".end")
        b.branch(cond)
        b.position_at_end(cond)
        i = b.phi(I64, name=name)
        i.add_incoming(L.Constant(I64, start), pre)
        b.cbranch(b.icmp_signed("<", i, n), body, done)
        b.position_at_end(body)
        body_fn(i)
        i.add_incoming(b.add(i, L.Constant(I64, 1)), b.block)
        b.branch(cond)
        b.position_at_end(done)

    def unit_index(self):
        return self.u if self.u is not None else L.Constant(I64, 0)

    def var_ptr(self, name):
        kind, ptr, t = self.vars[name]
        if kind == "unit":
            return self.b.gep(ptr, [L.Constant(I64, 0), self.unit_index()])
        return ptr

    def read_var(self, name):
        if name in self.params:
            return self.params[name]
        kind, ptr, t = self.vars[name]
        v = self.b.load(self.var_ptr(name))
        if isinstance(t, VecType):
            return [self.b.extract_value(v, i) for i in range(t.lanes)]
        return v

    def write_var(self, name, value):
        kind, ptr, t = self.vars[name]
        if isinstance(t, VecType):
            agg = L.Constant(reg_type(t), L.Undefined)
            for i, x in enumerate(value):
                agg = self.b.insert_value(agg, x, i)
            value = agg
        self.b.store(value, self.var_ptr(name))

    # ================================================================ schedule
    def lower_items(self, items):
        for it in items:
            if self.b.block.is_terminated:
                self.dead_block()
            if isinstance(it, Region):
                self.lower_region(it)
            elif isinstance(it, SplitOp):
                self.lower_split(it.stmt)
            elif isinstance(it, SIf):
                self.split_if(it)
            elif isinstance(it, SFor):
                self.split_for(it)
            elif isinstance(it, SWhile):
                self.split_while(it)
            elif isinstance(it, SJump):
                if it.kind == "return":
                    self.b.branch(self.cube_exit)
                elif it.kind == "break":
                    self.b.branch(self.split_loops[-1].exit)
                else:
                    self.b.branch(self.split_loops[-1].latch)

    def split_if(self, it: SIf):
        b = self.b
        cond = self.expr(it.cond)
        then, other, join = self.new_block("sif.then"), self.new_block("sif.else"), self.new_block("sif.end")
        b.cbranch(cond, then, other)
        b.position_at_end(then)
        self.lower_items(it.then)
        if not b.block.is_terminated:
            b.branch(join)
        b.position_at_end(other)
        self.lower_items(it.orelse)
        if not b.block.is_terminated:
            b.branch(join)
        b.position_at_end(join)

    def split_for(self, it: SFor):
        self.for_loop(it.loop, lambda: self.lower_items(it.body), self.split_loops)

    def split_while(self, it: SWhile):
        self.while_loop(it.cond, lambda: self.lower_items(it.body), self.split_loops)

    def for_loop(self, s: ir.For, body_fn, stack):
        b = self.b
        start, stop, step = self.expr(s.start), self.expr(s.stop), self.expr(s.step)
        signed = s.start.dtype.is_signed
        self.write_var(s.var, start)
        cond, body, latch, done = (self.new_block(n) for n in ("for.cond", "for.body", "for.latch", "for.end"))
        b.branch(cond)
        b.position_at_end(cond)
        i = self.read_var(s.var)
        lt = b.icmp_signed("<", i, stop) if signed else b.icmp_unsigned("<", i, stop)
        if isinstance(s.step, ir.Const):
            c = lt if s.step.value > 0 else b.icmp_signed(">", i, stop)
        else:
            gt = b.icmp_signed(">", i, stop)
            pos = b.icmp_signed(">", step, L.Constant(step.type, 0))
            c = b.select(pos, lt, gt)
        b.cbranch(c, body, done)
        b.position_at_end(body)
        stack.append(_Loop(latch, done))
        body_fn()
        stack.pop()
        if not b.block.is_terminated:
            b.branch(latch)
        b.position_at_end(latch)
        self.write_var(s.var, b.add(self.read_var(s.var), step))
        b.branch(cond)
        b.position_at_end(done)

    def while_loop(self, cond_expr, body_fn, stack):
        b = self.b
        cond, body, done = self.new_block("while.cond"), self.new_block("while.body"), self.new_block("while.end")
        b.branch(cond)
        b.position_at_end(cond)
        b.cbranch(self.expr(cond_expr), body, done)
        b.position_at_end(body)
        stack.append(_Loop(cond, done))
        body_fn()
        stack.pop()
        if not b.block.is_terminated:
            b.branch(cond)
        b.position_at_end(done)

    # ================================================================ regions
    def lower_region(self, r: Region):
        b = self.b
        used = self._escapes(r.stmts)
        flags = {}
        for kind in used:
            f = self.alloca(I1, name=f"esc.{kind}")
            b.store(L.Constant(I1, 0), f)
            flags[kind] = f
        saved_flags, saved_loops = self.flags, self.region_loops
        self.flags, self.region_loops = flags, []
        pre = b.block
        cond, body, latch, done = (self.new_block(n) for n in ("unit.cond", "unit.body", "unit.latch", "unit.end"))
        b.branch(cond)
        b.position_at_end(cond)
        u = b.phi(I64, name="u")
        u.add_incoming(L.Constant(I64, 0), pre)
        b.cbranch(b.icmp_signed("<", u, L.Constant(I64, self.U)), body, done)
        b.position_at_end(body)
        self.u = u
        self.unit_latch = latch
        first_new = len(self.fn.blocks)
        self.block(r.stmts)
        region_blocks = [body] + self.fn.blocks[first_new:]
        if not b.block.is_terminated:
            b.branch(latch)
        b.position_at_end(latch)
        u.add_incoming(b.add(u, L.Constant(I64, 1), flags=["nuw", "nsw"]), latch)
        self._mark_parallel(region_blocks, b.branch(cond))
        b.position_at_end(done)
        self.u = None
        self.flags, self.region_loops = saved_flags, saved_loops
        for kind, f in flags.items():
            target = {"return": lambda: self.cube_exit, "break": lambda: self.split_loops[-1].exit,
                      "continue": lambda: self.split_loops[-1].latch}[kind]()
            go, stay = self.new_block(f"esc.{kind}"), self.new_block("esc.no")
            b.cbranch(b.load(f), go, stay)
            b.position_at_end(go)
            b.branch(target)
            b.position_at_end(stay)

    def _mark_parallel(self, blocks, latch_branch):
        """Units of a region are independent (unsynchronised cross-unit accesses are races in
        the DSL, as on GPUs), so the unit loop is tagged `llvm.loop.parallel_accesses`: the
        vectoriser then needs no run-time alias checks, which large unrolled bodies exceed.
        Only element accesses (GEPs into tensors, shared and per-unit arrays) join the group;
        scalar slots keep their ordinary dependences."""
        group = _DistinctMD(self.module, [], name=str(len(self.module.metadata)))
        for blk in blocks:
            for ins in blk.instructions:
                if isinstance(ins, L.LoadInstr):
                    ptr = ins.operands[0]
                elif isinstance(ins, L.StoreInstr):
                    ptr = ins.operands[1]
                else:
                    continue
                if isinstance(ptr, L.CastInstr) and ptr.opname == "bitcast":
                    ptr = ptr.operands[0]
                if isinstance(ptr, L.GEPInstr):
                    ins.set_metadata("llvm.access.group", group)
        par = self.module.add_metadata([L.MetaDataString(self.module, "llvm.loop.parallel_accesses"), group])
        loop_id = _DistinctMD(self.module, [], name=str(len(self.module.metadata)))
        loop_id.operands = (loop_id, par)
        latch_branch.set_metadata("llvm.loop", loop_id)

    @staticmethod
    def _escapes(stmts) -> set:
        """Which jumps leave this region (break/continue of a split-level loop, return)."""
        out = set()

        def walk(ss, depth):
            for s in ss:
                if isinstance(s, ir.Return):
                    out.add("return")
                elif isinstance(s, ir.Break) and depth == 0:
                    out.add("break")
                elif isinstance(s, ir.Continue) and depth == 0:
                    out.add("continue")
                elif isinstance(s, ir.If):
                    walk(s.then, depth)
                    walk(s.orelse, depth)
                elif isinstance(s, (ir.For, ir.While)):
                    walk(s.body, depth + 1)

        walk(stmts, 0)
        return out

    def block(self, stmts):
        for s in stmts:
            if self.b.block.is_terminated:
                self.dead_block()
            getattr(self, "s_" + type(s).__name__)(s)

    def s_Assign(self, s):
        self.write_var(s.name, self.expr(s.value))

    def s_Store(self, s):
        self.store_tensor(s.tensor, s.offset, s.value, s.checked, s.loc)

    def s_SharedStore(self, s):
        d, arr = self.shared[s.array]
        off = self.expr(s.offset)
        val = self.to_mem(self.expr(s.value), d.dtype)

        def do(o):
            self.b.store(val, self.b.gep(arr, [L.Constant(I64, 0), o]))
        self.guarded(off, L.Constant(I64, d.size), 1, do, s.checked, -1, s.loc)

    def s_If(self, s):
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

    def s_For(self, s):
        self.for_loop(s, lambda: self.block(s.body), self.region_loops)

    def s_While(self, s):
        self.while_loop(s.cond, lambda: self.block(s.body), self.region_loops)

    def _escape(self, kind):
        self.b.store(L.Constant(I1, 1), self.flags[kind])
        self.b.branch(self.unit_latch)

    def s_Break(self, s):
        if self.region_loops:
            self.b.branch(self.region_loops[-1].exit)
        else:
            self._escape("break")

    def s_Continue(self, s):
        if self.region_loops:
            self.b.branch(self.region_loops[-1].latch)
        else:
            self._escape("continue")

    def s_Return(self, s):
        self._escape("return")

    def s_Atomic(self, s):
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

    def s_Print(self, s):
        fmt, args = "", []
        for part in s.parts:
            if isinstance(part, str):
                fmt += part.replace("%", "%%")
                continue
            v = self.expr(part)
            t = part.dtype
            if t.is_float:
                fmt += "%g"
                args.append(self.b.fpext(v, F64) if t is f32 else v)
            elif t is i64:
                fmt += "%lld"
                args.append(v)
            elif t is u32:
                fmt += "%u"
                args.append(v)
            elif t is boolean:
                fmt += "%d"
                args.append(self.b.zext(v, I32))
            else:
                fmt += "%d"
                args.append(self.b.sext(v, I32) if v.type.width < 32 else v)
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

    # ================================================================ memory
    def _tensor_index(self, name):
        return [p.name for p in self.k.params].index(name)

    def guarded(self, off, limit, lanes, do, checked, index, loc, value_type=None, result=None):
        """Run do(off) — when `checked`, only if 0 <= off and off + lanes <= limit, else
        record the failure in the error buffer (and yield zero for loads)."""
        if not checked:
            do(off)
            return
        b = self.b
        last = b.add(off, L.Constant(I64, lanes - 1))
        ok = b.and_(b.icmp_signed(">=", off, L.Constant(I64, 0)), b.icmp_signed("<", last, limit))
        good, bad, join = self.new_block("chk.ok"), self.new_block("chk.bad"), self.new_block("chk.end")
        b.cbranch(ok, good, bad)
        b.position_at_end(bad)
        line = loc.line if loc is not None else 0
        for slot, v in enumerate((L.Constant(I64, 1), L.Constant(I64, index), off, L.Constant(I64, line))):
            b.store(v, b.gep(self.errbuf, [L.Constant(I64, slot)]))
        b.branch(join)
        b.position_at_end(good)
        do(off)
        good_end = b.block
        b.branch(join)
        b.position_at_end(join)
        if result is not None and "v" in result:
            v = result["v"]
            if isinstance(v, list):
                phis = []
                for x in v:
                    ph = b.phi(x.type)
                    ph.add_incoming(x, good_end)
                    ph.add_incoming(L.Constant(x.type, None), bad)
                    phis.append(ph)
                result["v"] = phis
            else:
                ph = b.phi(v.type)
                ph.add_incoming(v, good_end)
                ph.add_incoming(L.Constant(v.type, None), bad)
                result["v"] = ph

    def to_mem(self, v, t):
        return self.b.zext(v, I8) if t is boolean else v

    def from_mem(self, v, t):
        return self.b.icmp_unsigned("!=", v, L.Constant(I8, 0)) if t is boolean else v

    def store_tensor(self, name, offset, value_expr, checked, loc):
        p, base, extent, _, _ = self.tensors[name]
        off = self.expr(offset)
        v = self.expr(value_expr)
        t = value_expr.dtype
        b = self.b

        def do(o):
            ptr = b.gep(base, [o])
            if isinstance(t, VecType):
                vt = L.VectorType(mem_type(t.elem), t.lanes)
                vec = L.Constant(vt, L.Undefined)
                for i, x in enumerate(v):
                    vec = b.insert_element(vec, self.to_mem(x, t.elem), L.Constant(I32, i))
                b.store(vec, b.bitcast(ptr, vt.as_pointer()), align=t.elem.itemsize)
            else:
                b.store(self.to_mem(v, t), ptr)
        self.guarded(off, extent, t.lanes if isinstance(t, VecType) else 1, do, checked,
                     self._tensor_index(name), loc)

    def e_Load(self, e):
        p, base, extent, _, _ = self.tensors[e.tensor]
        off = self.expr(e.offset)
        t = e.dtype
        b = self.b
        result = {}

        def do(o):
            ptr = b.gep(base, [o])
            if isinstance(t, VecType):
                vt = L.VectorType(mem_type(t.elem), t.lanes)
                vec = b.load(b.bitcast(ptr, vt.as_pointer()), align=t.elem.itemsize)
                result["v"] = [self.from_mem(b.extract_element(vec, L.Constant(I32, i)), t.elem)
                               for i in range(t.lanes)]
            else:
                result["v"] = self.from_mem(b.load(ptr), t)
        self.guarded(off, extent, t.lanes if isinstance(t, VecType) else 1, do, e.checked,
                     self._tensor_index(e.tensor), e.loc, result=result)
        return result["v"]

    def e_SharedLoad(self, e):
        d, arr = self.shared[e.array]
        off = self.expr(e.offset)
        result = {}

        def do(o):
            result["v"] = self.from_mem(self.b.load(self.b.gep(arr, [L.Constant(I64, 0), o])), d.dtype)
        self.guarded(off, L.Constant(I64, d.size), 1, do, e.checked, -1, e.loc, result=result)
        return result["v"]

    # ================================================================ expressions
    def expr(self, e):
        return getattr(self, "e_" + type(e).__name__)(e)

    def e_Const(self, e):
        return _const(e.dtype, e.value)

    def e_Var(self, e):
        return self.read_var(e.name)

    def e_TensorDim(self, e):
        p, base, extent, shape, strides = self.tensors[e.tensor]
        v = (shape if e.attr == "shape" else strides)[e.axis]
        return self.b.trunc(v, I32)

    def e_Position(self, e):
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

    def e_VecMake(self, e):
        return [self.expr(x) for x in e.elems]

    def e_VecExtract(self, e):
        return self.expr(e.a)[e.lane]

    def e_BinOp(self, e):
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

    def e_UnOp(self, e):
        a = self.expr(e.a)
        b = self.b
        if e.op == "not":
            return b.xor(a, L.Constant(I1, 1))
        if e.op == "invert":
            return b.xor(a, L.Constant(a.type, -1))
        if e.dtype.is_float:
            return b.fneg(a)
        return b.sub(L.Constant(a.type, 0), a)

    def e_Cmp(self, e):
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

    def e_Logic(self, e):
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

    def e_Select(self, e):
        return self.b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))

    def e_Bitcast(self, e):
        v = self.expr(e.a)
        return self.b.bitcast(v, reg_type(e.dtype))

    def e_Cast(self, e):
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

    def e_Math(self, e):
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

    # ================================================================ split points
    def lower_split(self, s):
        if isinstance(s, ir.PlaneOp):
            self.plane_op(s)
        elif isinstance(s, ir.FragFill):
            self.per_plane(lambda base, n: self.frag_fill(s, base))
        elif isinstance(s, ir.FragLoad):
            self.per_plane(lambda base, n: self.frag_load(s, base))
        elif isinstance(s, ir.FragStore):
            self.per_plane(lambda base, n: self.frag_store(s, base))
        elif isinstance(s, ir.FragMma):
            self.per_plane(lambda base, n: self.frag_mma(s, base))
        elif isinstance(s, ir.GroupMma):
            self.per_plane(lambda base, n: self.group_mma(s, base))
        # ir.GroupWait: group_mma completes at once here; the split point is all it needs

    def per_plane(self, fn):
        """fn(base_unit i64 value, lanes int) for each plane; full planes in a loop, a
        partial last plane (cube size not a multiple of PLANE_DIM) after it."""
        full, tail = divmod(self.U, self.P)
        if full:
            self.counted_loop(full, lambda p: fn(self.b.mul(p, L.Constant(I64, self.P)), self.P), "plane")
        if tail:
            fn(L.Constant(I64, full * self.P), tail)

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

    # -------------------------------------------------------------- fragments
    def frag_ptr(self, name, base_unit, elem):
        ft, arr = self.frag_mem[name]
        plane = self.b.udiv(base_unit, L.Constant(I64, self.P))
        idx = self.b.add(self.b.mul(plane, L.Constant(I64, ft.rows * ft.cols)), elem)
        return self.b.gep(arr, [L.Constant(I64, 0), idx])

    def frag_elem_ptr(self, name, elem):
        """This unit's element `elem` of a fragment: tile element lane + elem * PLANE_DIM."""
        ft, arr = self.frag_mem[name]
        b = self.b
        u = self.unit_index()
        P = L.Constant(I64, self.P)
        idx = b.add(b.mul(b.udiv(u, P), L.Constant(I64, ft.rows * ft.cols)),
                    b.add(b.urem(u, P), L.Constant(I64, elem * self.P)))
        return b.gep(arr, [L.Constant(I64, 0), idx])

    def e_FragGet(self, e):
        return self.b.load(self.frag_elem_ptr(e.frag, e.elem))

    def s_FragSet(self, s):
        self.b.store(self.expr(s.value), self.frag_elem_ptr(s.frag, s.elem))

    def s_FragConvert(self, s):
        ft = self.k.frags[s.dst]
        dt = ft.dtype
        for i in range(ft.rows * ft.cols // self.P):
            v = self.b.load(self.frag_elem_ptr(s.src, i))
            self.b.store(self.cast(self.cast(v, f32, dt), dt, f32), self.frag_elem_ptr(s.dst, i))

    def frag_fill(self, s, base):
        v = self.cast(self.at_unit(s.value, base), f32, f32)
        ft, _ = self.frag_mem[s.frag]
        self.counted_loop(ft.rows * ft.cols, lambda e: self.b.store(v, self.frag_ptr(s.frag, base, e)), "ffill")

    def _mem_base(self, space, name):
        if space == "global":
            p, base, extent, _, _ = self.tensors[name]
            return base, p.dtype
        d, arr = self.shared[name]
        return self.b.gep(arr, [L.Constant(I64, 0), L.Constant(I64, 0)]), d.dtype

    def _mem_limit(self, space, name):
        """(elements reachable, parameter index or -1 for shared) for a bounds check."""
        if space == "global":
            return self.tensors[name][2], self._tensor_index(name)
        return L.Constant(I64, self.shared[name][0].size), -1

    def frag_load(self, s, base_unit):
        b = self.b
        ft, _ = self.frag_mem[s.frag]
        off = self.at_unit(s.offset, base_unit)
        stride = self.at_unit(s.stride, base_unit)
        mem, dt = self._mem_base(s.space, s.src)
        limit, index = self._mem_limit(s.space, s.src)
        cols = L.Constant(I64, ft.cols)

        def body(e):
            r, c = b.udiv(e, cols), b.urem(e, cols)
            if ft.layout == "row" or ft.role == "acc":
                o = b.add(off, b.add(b.mul(r, stride), c))
            else:
                o = b.add(off, b.add(b.mul(c, stride), r))
            result = {}

            def do(at):
                result["v"] = self.cast(self.from_mem(b.load(b.gep(mem, [at])), dt), dt, f32)
            self.guarded(o, limit, 1, do, s.checked, index, s.loc, result=result)
            b.store(result["v"], self.frag_ptr(s.frag, base_unit, e))
        self.counted_loop(ft.rows * ft.cols, body, "fload")

    def frag_store(self, s, base_unit):
        b = self.b
        ft, _ = self.frag_mem[s.frag]
        off = self.at_unit(s.offset, base_unit)
        stride = self.at_unit(s.stride, base_unit)
        mem, dt = self._mem_base(s.space, s.dst)
        limit, index = self._mem_limit(s.space, s.dst)
        cols = L.Constant(I64, ft.cols)

        def body(e):
            r, c = b.udiv(e, cols), b.urem(e, cols)
            o = b.add(off, b.add(b.mul(r, stride), c))
            v = self.cast(b.load(self.frag_ptr(s.frag, base_unit, e)), f32, dt)
            self.guarded(o, limit, 1, lambda at: b.store(v, b.gep(mem, [at])), s.checked, index, s.loc)
        self.counted_loop(ft.rows * ft.cols, body, "fstore")

    def frag_mma(self, s, base_unit):
        b = self.b
        ft = self.frag_mem[s.acc][0]
        m, n, k = ft.m, ft.n, ft.k

        def row(i):
            def col(j):
                cidx = b.add(b.mul(i, L.Constant(I64, n)), j)
                cptr = self.frag_ptr(s.acc, base_unit, cidx)
                acc = b.load(cptr)
                for kk in range(k):
                    a = b.load(self.frag_ptr(s.a, base_unit, b.add(b.mul(i, L.Constant(I64, k)), L.Constant(I64, kk))))
                    bb = b.load(self.frag_ptr(s.b, base_unit, b.add(L.Constant(I64, kk * n), j)))
                    acc = b.fadd(acc, b.fmul(a, bb))
                b.store(acc, cptr)
            self.counted_loop(n, col, "mma.j")
        self.counted_loop(m, row, "mma.i")

    def tile_load(self, t: ir.SharedTile, off, r, c):
        """Element (r, c) (i64 values) of a shared tile, as f32, in kd.tile_offset's layout of
        the matrix as stored (t's transpose when t.transposed)."""
        b = self.b
        sr, sc = (c, r) if t.transposed else (r, c)
        k = lambda v: L.Constant(I64, v)  # noqa: E731
        band = b.mul(b.udiv(sc, k(16)), k(t.stored_rows * 16))
        half = b.xor(b.and_(b.udiv(sc, k(8)), k(1)), b.and_(b.udiv(sr, k(4)), k(1)))
        inner = b.add(b.mul(half, k(8)), b.urem(sc, k(8)))
        at = b.add(off, b.add(band, b.add(b.mul(sr, k(16)), inner)))
        mem, dt = self._mem_base("shared", t.src)
        return self.cast(self.from_mem(b.load(b.gep(mem, [at])), dt), dt, f32)

    def group_mma(self, s: ir.GroupMma, base_unit):
        """One plane's 16 rows of a group product: acc[i, j] += sum_k A[16 g + i, k] B[k, j]."""
        b = self.b
        ft = self.frag_mem[s.acc][0]
        n, k = ft.n, s.k
        g = b.urem(b.udiv(base_unit, L.Constant(I64, self.P)), L.Constant(I64, ir.GROUP_PLANES))
        row0 = b.mul(g, L.Constant(I64, ft.rows))
        a_off = b.sext(self.at_unit(s.a_tile.offset, base_unit), I64) if s.a_tile else None
        b_off = b.sext(self.at_unit(s.b_tile.offset, base_unit), I64)

        def row(i):
            def col(j):
                cptr = self.frag_ptr(s.acc, base_unit, b.add(b.mul(i, L.Constant(I64, n)), j))
                if not s.accumulate:
                    b.store(L.Constant(F32, 0.0), cptr)

                def step(kk):
                    if s.a_tile is None:
                        x = b.load(self.frag_ptr(s.a, base_unit, b.add(b.mul(i, L.Constant(I64, k)), kk)))
                    else:
                        x = self.tile_load(s.a_tile, a_off, b.add(row0, i), kk)
                    y = self.tile_load(s.b_tile, b_off, kk, j)
                    b.store(b.fadd(b.load(cptr), b.fmul(x, y)), cptr)
                self.counted_loop(k, step, "gmma.k")
            self.counted_loop(n, col, "gmma.j")
        self.counted_loop(ft.rows, row, "gmma.i")


def _type_bytes(ty) -> int:
    """Bytes an alloca of LLVM type `ty` takes (arrays, vectors, scalars; padding ignored)."""
    if isinstance(ty, (L.ArrayType, L.VectorType)):
        n = ty.count
        return n * _type_bytes(ty.element)
    if isinstance(ty, L.IntType):
        return max(1, ty.width // 8)
    return {"half": 2, "float": 4, "double": 8}.get(str(ty), 8)


def render(k: ir.KernelIR, uniformity, caps) -> str:
    return CpuRenderer(k, uniformity, caps).render()


def render_with_frame(k: ir.KernelIR, uniformity, caps) -> tuple:
    """(LLVM IR, bytes of the kernel's stack frame: shared arrays, emulated fragments and
    per-unit variables all live there, once per thread running cubes)."""
    r = CpuRenderer(k, uniformity, caps)
    source = r.render()
    return source, r.frame_bytes
