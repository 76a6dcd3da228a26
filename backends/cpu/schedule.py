"""The split level of a CPU kernel: uniform control flow around regions, and each region as
one loop over the cube's units marked parallel for the vectoriser (mixed into CpuRenderer)."""
from __future__ import annotations

from llvmlite import ir as L

from kerneldsl import ir

from .llvm_types import I1, I64
from .regions import Region, SFor, SIf, SJump, SplitOp, SRole, SWhile


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



class Schedule:
    """Lowering of the schedule `regions.build_schedule` makes: split-level if / for / while,
    jumps, split points (through SPLIT_HANDLERS) and regions (through STATEMENT_HANDLERS)."""

    def lower_items(self, items):
        for it in items:
            if self.b.block.is_terminated:
                self.dead_block()
            if isinstance(it, Region):
                self.lower_region(it)
            elif isinstance(it, SplitOp):
                self.split(it.stmt)
            elif isinstance(it, SIf):
                self.split_if(it)
            elif isinstance(it, SFor):
                self.split_for(it)
            elif isinstance(it, SWhile):
                self.split_while(it)
            elif isinstance(it, SRole):
                self.split_role(it)
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

    # the units the regions and split points being lowered cover: the cube, or a role's
    unit_range = None

    def units_lowered(self) -> tuple:
        """(first unit, end) of the regions and split points being lowered."""
        return self.unit_range or (0, self.U)

    def split_role(self, it: SRole):
        """A kd.role: its regions loop over, and its plane and fragment operations cover, the
        role's units only (roles then run in program order, as the front end's barrier says)."""
        saved, self.unit_range = self.unit_range, (it.lo, it.hi)
        try:
            self.lower_items(it.body)
        finally:
            self.unit_range = saved

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
        lo, hi = self.units_lowered()
        u = b.phi(I64, name="u")
        u.add_incoming(L.Constant(I64, lo), pre)
        b.cbranch(b.icmp_signed("<", u, L.Constant(I64, hi)), body, done)
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
