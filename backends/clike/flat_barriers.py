"""Barriers kept out of `if`s (the `flat_barriers` hook, for PoCL), and kd.role bodies whose
units are guarded around unconditional barriers; mixed into CLikeRenderer."""
from __future__ import annotations

from kerneldsl import ir
from kerneldsl.dtypes import boolean

from .text import parens


class FlatBarriers:
    """Rendering of uniform `if`s and loops that hold barriers with every barrier unconditional."""

    # ------------------------------------------------------------------ barriers without ifs
    # PoCL (3.0, CPU devices) runs a work-group as loops over its work-items between barriers,
    # and mishandled barriers inside an `if`: values set before the `if` or before its first
    # barrier were wrong after its barriers (another work-group's in a few percent of launches,
    # or every launch when the other branch did work), and a kernel whose barrier-free branch
    # returned early wrote out of bounds (heap corruption). With flat_barriers no barrier is
    # emitted inside an `if`: a uniform `if` holding barriers saves its condition and runs as
    # guarded pieces between unconditional barriers (`if (c) {..} barrier; if (c) {..}`), a
    # loop in it runs zero times when the guard is off, and a loop body holding a barrier ends
    # at one. The checker guarantees the condition is uniform, so every unit reaching the
    # `if` reaches each barrier: only the guarded work differs from the nested form.
    def holds_barrier(self, s) -> bool:
        """Whether statement `s` (nested blocks included) renders to code with a barrier."""
        for t in ir.walk_stmts([s]):
            if isinstance(t, (ir.Barrier, ir.FragFill, ir.FragLoad, ir.FragStore, ir.FragMma, ir.GroupMma)):
                return True
            if isinstance(t, ir.PlaneOp) and t.op != "elect" and self.plane_ops_barrier():
                return True
        return False

    def plane_ops_barrier(self) -> bool:
        """Whether plane operations render with barriers (the shared-memory emulation does)."""
        return not self.native_planes

    # ------------------------------------------------------------------ roles
    # A role's body runs on its groups' units only. Natively (Capabilities.bulk_copy: hardware
    # arrival barriers, the only hand-over a role has) that is an `if`, after the role's
    # register budget (`role_entry`). Where plane and fragment operations are emulated with
    # cube barriers, every unit must still reach those barriers: the body is rendered flat,
    # its work guarded by the role (`_role_guard`) and the uniform conditions around it, the
    # barriers unconditional. The checker keeps every barrier-holding statement of a role
    # under cube-uniform control, so all units agree on each loop's trip count.
    _role_guard = None

    def s_role(self, s):
        if not s.guarded:  # a per-role copy of the code (backends/cuda/role_copies.py)
            for line in self.role_entry(s):
                self.emit(line)
            self.block(s.body)
            return
        guard = self.temp(self.type_names[boolean])
        self.emit(f"{guard} = {self.role_guard(s)};")
        if self.caps.bulk_copy or not any(self.holds_barrier(x) for x in s.body):
            self.emit(f"if ({guard}) {{")
            self.depth += 1
            for line in self.role_entry(s):
                self.emit(line)
            self.block(s.body)
            self.depth -= 1
            self.emit("}")
            return
        self._role_guard = guard
        try:
            self._flat(s.body, None)
        finally:
            self._role_guard = None

    def role_guard(self, s) -> str:
        """C condition: this unit belongs to role `s`."""
        return f"{s.first_unit} <= kd_unit && kd_unit < {s.first_unit + s.units}"

    def role_entry(self, s) -> list:
        """Lines a role's units run first (CUDA: its register budget); none by default."""
        return []

    def _piece_guard(self, guard):
        """The guard of a run of work: `guard` (uniform conditions, or None) and, inside a
        role, the role's units."""
        if self._role_guard is None or guard is None:
            return guard if self._role_guard is None else self._role_guard
        both = self.temp(self.type_names[boolean])
        self.emit(f"{both} = {guard} && {self._role_guard};")
        return both

    def _flat(self, stmts, guard):
        """Statements under `guard` (a C bool temp, or None for none) with every barrier outside
        any `if`: runs of barrier-free statements go in `if (guard)`, barrier-holding ones are
        taken apart."""
        run = []

        def flush():
            if not run:
                return
            g = self._piece_guard(guard)
            if g is None:
                self.block(run)
            else:
                self.emit(f"if ({g}) {{")
                self.nested(run)
                self.emit("}")
            run.clear()

        for s in stmts:
            if not self.holds_barrier(s):
                run.append(s)
                continue
            flush()
            self._memo = {}
            self.line(s.loc)
            if isinstance(s, ir.If):
                c = self._guarded_cond(s.cond, guard)
                self._flat(s.then, c)
                if s.orelse:
                    e = self.temp(self.type_names[boolean])
                    self.emit(f"{e} = {guard} && !{c};" if guard is not None else f"{e} = !{c};")
                    self._flat(s.orelse, e)
            elif isinstance(s, (ir.For, ir.While)):
                self._guarded_loop(s, guard)
            elif guard is None and self._role_guard is None:
                self.stmt(s)
            else:
                self._guarded_lines(s, self._piece_guard(guard))
        flush()

    def _guarded_cond(self, cond, guard) -> str:
        """A bool temp: guard && cond, with cond (and any loads it hoists) evaluated only
        where the guard (a C bool, or None) holds."""
        c = self.temp(self.type_names[boolean])
        if guard is None:
            self.emit(f"{c} = {self.x(cond)};")
            return c
        self.emit(f"{c} = false;")
        self.emit(f"if ({guard}) {{")
        self.depth += 1
        self.emit(f"{c} = {self.x(cond)};")
        self.depth -= 1
        self.emit("}")
        return c

    def _guarded_lines(self, s, guard: str):
        """A barrier-holding plane or fragment operation under a guard: its barrier lines run
        unconditionally, the code between them only where the guard holds."""
        mark, depth = len(self.lines), self.depth
        self.depth = 0
        self.stmt(s)
        self.depth = depth
        lines = self.lines[mark:]
        del self.lines[mark:]
        fences = (self.barrier_stmt.strip(), self.local_barrier_stmt.strip())
        piece = []

        def out():
            if piece:
                self.emit(f"if ({guard}) {{")
                self.lines += ["    " * (depth + 1) + ln for ln in piece]
                self.emit("}")
                piece.clear()

        for ln in lines:
            if ln.strip() in fences:
                out()
                self.emit(ln.strip())
            else:
                piece.append(ln)
        out()

    def _guarded_loop(self, s, guard):
        """A barrier-holding loop under a guard: it runs zero times where the guard is off
        (its bounds are evaluated only where it holds)."""
        if guard is None:
            self.stmt(s)
            return
        if isinstance(s, ir.For):
            v = self.var(s.var)
            t = self.type_names[s.start.dtype]
            stop, step = self.temp(t), self.temp(t)
            self.emit(f"if ({guard}) {{")
            self.depth += 1
            self.emit(f"{v} = {self.x(s.start)};")
            self.emit(f"{stop} = {self.x(s.stop)};")
            self.emit(f"{step} = {self.x(s.step)};")
            self.depth -= 1
            self.emit("}")
            if isinstance(s.step, ir.Const):
                cond = f"{v} < {stop}" if s.step.value > 0 else f"{v} > {stop}"
            else:
                cond = f"({step} > 0 ? {v} < {stop} : {v} > {stop})"
            self.emit(f"for (; {guard} && {parens(cond)}; {v} += {step}) {{")
        else:
            self.emit("for (;;) {")
            self.depth += 1
            self.emit(f"if (!{guard}) break;")
            cond = self.x(s.cond)
            self.emit(f"if (!({cond})) break;")
            self.depth -= 1
        self._loop_body(s)
        self.emit("}")

