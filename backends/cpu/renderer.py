"""IR -> LLVM IR text for the CPU, built with llvmlite's IR builder.

A cube runs as one call on one thread. The kernel body is the schedule of
`regions.py`: uniform control flow and split points at the top, each region a
loop over the cube's units (`u`) that the loop vectoriser can widen. Values
that cross regions live in per-unit arrays, plane operations and fragment
operations are small loops over lanes between regions. f16 is LLVM `half`
(F16C converts it); bf16 is kept as its 16 bits and converted with integer ops.

Every IR node is lowered through one of three tables below (STATEMENT_HANDLERS inside a
region's unit loop, SPLIT_HANDLERS between regions, EXPRESSION_HANDLERS), each naming a
method of the mixin that holds that concern: schedule.py (split-level control flow and
regions), statements.py, expressions.py, memory.py, planes.py, fragments.py;
llvm_types.py maps DTypes to LLVM types. tests/test_renderers.py fails when an IR node
has no entry.
"""
from __future__ import annotations

from llvmlite import ir as L

from kerneldsl import ir
from kerneldsl.dtypes import VecType, boolean, f16, f32, f64

from .. import dispatch
from . import abi
from .expressions import Expressions
from .fragments import Fragments
from .llvm_types import F16, F32, F64, I16, I32, I64, I8P, VOID, mem_type, reg_type
from .mathlib import MathEmitter
from .memory import Memory
from .planes import Planes
from .regions import build_schedule, rematerialize
from .schedule import Schedule
from .statements import Statements

# statements inside a region (one unit at a time, in the unit loop): those every renderer shares
STATEMENT_HANDLERS = dispatch.STATEMENTS
# split points (ir.SPLIT_STMTS): between regions, for every plane of the cube
SPLIT_HANDLERS = {
    ir.Barrier: "split_barrier",
    ir.PlaneOp: "plane_op",
    ir.FragFill: "split_frag_fill",
    ir.FragLoad: "split_frag_load",
    ir.FragStore: "split_frag_store",
    ir.FragMma: "split_frag_mma",
    ir.GroupMma: "split_group_mma",
    ir.GroupWait: "split_group_wait",
}
EXPRESSION_HANDLERS = dispatch.EXPRESSIONS


class CpuRenderer(Schedule, Statements, Expressions, Memory, Planes, Fragments, dispatch.SharedHandlers):
    """IR -> LLVM IR text: construct with (kernel IR, uniformity facts, capabilities), call
    `render()`."""

    dialect = "cpu"
    STATEMENT_HANDLERS = STATEMENT_HANDLERS
    SPLIT_HANDLERS = SPLIT_HANDLERS
    EXPRESSION_HANDLERS = EXPRESSION_HANDLERS

    def __init__(self, k: ir.KernelIR, uniformity, caps):
        self.k = k
        self.caps = caps
        rematerialize(k)
        self.sched = build_schedule(k, uniformity)
        self.U = k.cube_units
        self.P = k.plane_dim
        self._stmt_handlers = dispatch.bind(self, self.STATEMENT_HANDLERS)
        self._split_handlers = dispatch.bind(self, self.SPLIT_HANDLERS)
        self._expr_handlers = dispatch.bind(self, self.EXPRESSION_HANDLERS)

    # ================================================================ dispatch
    def stmt(self, s):
        """Lower one statement of a region (through STATEMENT_HANDLERS)."""
        dispatch.lower(self._stmt_handlers, s, self.dialect)

    def split(self, s):
        """Lower one split point between regions (through SPLIT_HANDLERS)."""
        dispatch.lower(self._split_handlers, s, self.dialect)

    def expr(self, e):
        """The LLVM value of an expression (a list of lane values for a vector; EXPRESSION_HANDLERS)."""
        return dispatch.lower(self._expr_handlers, e, self.dialect)

    def split_barrier(self, s):
        """Nothing: regions end at a barrier, and the next starts after every unit reached it."""

    def s_role(self, s):
        raise AssertionError("a kd.role is lowered at the split level (regions.SRole), never inside a region")

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
