"""Statements and structured control flow of the C-like renderer: assignments, stores, if /
for / while, jumps, barriers, kd.print and bounds-checked stores (mixed into CLikeRenderer)."""
from __future__ import annotations

from kerneldsl import ir
from kerneldsl.dtypes import VecType, i64

from .. import dispatch
from .text import parens


class Statements:
    """Handlers of statement nodes (see STATEMENT_HANDLERS in base.py) and the block walker."""

    def block(self, stmts):
        for s in stmts:
            self._memo = {}
            self.line(s.loc)
            self.stmt(s)

    def nested(self, stmts):
        self.depth += 1
        self.block(stmts)
        self.depth -= 1

    def s_assign(self, s):
        t = s.value.dtype
        if isinstance(t, VecType):
            lanes = self.lanes(s.value)
            tmps = [self.temp(self.type_names[t.elem]) for _ in lanes]
            for n, x in zip(tmps, lanes):
                self.emit(f"{n} = {x};")
            for i, n in enumerate(tmps):
                self.emit(f"{self.var(s.name)}_{i} = {n};")
            return
        self.emit(f"{self.var(s.name)} = {self.x(s.value)};")

    def s_store(self, s):
        p = self.tensors[s.tensor]
        off = self.x(s.offset)
        t = s.value.dtype
        ptr = f"({self.tensor(s.tensor)} + {off})" if isinstance(t, VecType) else None
        if isinstance(t, VecType):
            lanes = [self.to_mem(x, t.elem) for x in self.lanes(s.value)]
            stmt = self.vec_store(t.elem, ptr, lanes)
        else:
            stmt = f"{self.tensor(s.tensor)}[{off}] = {self.to_mem(self.x(s.value), p.dtype)};"
        self.guarded_stmt(stmt, s.checked, off, t.lanes if isinstance(t, VecType) else 1,
                          f"{self.tensor(s.tensor)}_n", self.param_index(s.tensor), s.loc)

    def s_shared_store(self, s):
        d = self.k.shared[s.array]
        off = self.x(s.offset)
        stmt = f"{self.shared(s.array)}[{off}] = {self.to_mem(self.x(s.value), d.dtype)};"
        self.guarded_stmt(stmt, s.checked, off, 1, self.literal(d.size, i64), -1, s.loc)

    def s_if(self, s):
        if (self.flat_barriers or self._role_guard is not None) and self.holds_barrier(s):
            self._flat([s], None)
            return
        self.emit(f"if {parens(self.x(s.cond))} {{")
        self.nested(s.then)
        if s.orelse:
            self.emit("} else {")
            self.nested(s.orelse)
        self.emit("}")

    def _loop_body(self, s):
        """A loop's body; with flat_barriers, one holding a barrier ends at a barrier."""
        self.depth += 1
        mark = len(self.lines)
        if (self.flat_barriers or self._role_guard is not None) and self.holds_barrier(s):
            self._flat(s.body, None)
            last = self.lines[-1].strip() if len(self.lines) > mark else ""
            if last not in (self.barrier_stmt.strip(), self.local_barrier_stmt.strip()):
                self.emit(self.local_barrier_stmt)
        else:
            self.block(s.body)
        self.depth -= 1

    def _once(self, e) -> str:
        """An expression evaluated once before a loop (a temp unless it cannot change)."""
        text = self.x(e)
        if all(isinstance(n, (ir.Const, ir.TensorDim, ir.Position)) or
               (isinstance(n, ir.Var) and n.name in self.scalars and n.name not in self.k.var_types) or
               not isinstance(n, (ir.Var, ir.Load, ir.SharedLoad)) for n in ir.walk_expr(e)):
            return text
        n = self.temp(self.type_names[e.dtype])
        self.emit(f"{n} = {text};")
        return n

    def s_for(self, s):
        v = self.var(s.var)
        start = self.x(s.start)
        stop = self._once(s.stop)
        step = self._once(s.step)
        if isinstance(s.step, ir.Const):
            cond = f"{v} < {stop}" if s.step.value > 0 else f"{v} > {stop}"
        else:
            cond = f"({step} > 0 ? {v} < {stop} : {v} > {stop})"
        self.emit(f"for ({v} = {start}; {cond}; {v} += {step}) {{")
        self._loop_body(s)
        self.emit("}")

    def s_while(self, s):
        mark = len(self.lines)
        cond = self.x(s.cond)
        hoisted = self.lines[mark:]
        if not hoisted:
            self.emit(f"while {parens(cond)} {{")
        else:  # the condition loads vectors: evaluate them on every iteration
            del self.lines[mark:]
            self.emit("for (;;) {")
            self.lines += ["    " + h for h in hoisted]
            self.emit(f"    if (!({cond})) break;")
        self._loop_body(s)
        self.emit("}")

    def s_break(self, s):
        self.emit("break;")

    def s_continue(self, s):
        self.emit("continue;")

    def s_return(self, s):
        self.emit("return;")

    def s_barrier(self, s):
        self.emit(self.barrier_stmt)


    def s_print(self, s):
        fmt, args = dispatch.printf_format(s.parts, lambda e: self.print_arg(e.dtype, self.x(e)))
        self.emit(self.printf(fmt + "\n", args))

    # ------------------------------------------------------------------ bounds checks
    def param_index(self, name: str) -> int:
        return [p.name for p in self.k.params].index(name)

    def _check(self, off: str, lanes: int, limit: str, index: int, loc) -> str:
        self.need("kd_check")
        line = loc.line if loc is not None else 0
        i = self.literal
        return f"kd_check(kd_err, {off}, {i(lanes, i64)}, {limit}, {i(index, i64)}, {i(line, i64)})"

    def guarded_stmt(self, stmt, checked, off, lanes, limit, index, loc):
        if checked:
            self.emit(f"if {parens(self._check(off, lanes, limit, index, loc))} {stmt}")
        else:
            self.emit(stmt)

