"""Checks every back end runs on the IR: uniformity and the placement of split points.

A value is *uniform* when every unit of a cube computes the same one (cube
positions, parameters, tensor shapes, constants, loop counters over uniform
bounds, loads at uniform offsets, and anything computed only from those).
Barriers, plane operations and fragment operations must be reached by every
unit, so they may appear only under uniform control flow; the CPU back end's
work-item loops depend on this, and on GPUs breaking it is undefined
behaviour, so it is an error everywhere. A kd.role is placed like a split point; inside
it those rules hold for the whole cube's control flow again (every role's plane and fragment
operations sit under cube-uniform conditions), its arrival-barrier waits concern its own
units only, and the variables it sets are not uniform.
"""
from __future__ import annotations

from . import ir
from .errors import CompileError

_UNIFORM_POS = ("cube_pos", "cube_count")


class Uniformity:
    """Which variables of a kernel are uniform (a fixpoint over the body)."""

    def __init__(self, k: ir.KernelIR):
        self.k = k
        self.single_plane = k.cube_units <= k.plane_dim
        self.uniform = set(k.var_types) | {p.name for p in k.params if isinstance(p, ir.ScalarParam)}
        changed = True
        while changed:
            before = len(self.uniform)
            self._walk(k.body, True)
            changed = len(self.uniform) != before

    def expr(self, e: ir.Expr) -> bool:
        for n in ir.walk_expr(e):
            if isinstance(n, ir.Var) and n.name not in self.uniform:
                return False
            if isinstance(n, ir.Position) and n.kind not in _UNIFORM_POS:
                return False
            if isinstance(n, ir.FragGet):  # a lane's own share of a fragment
                return False
        return True

    def _kill(self, name):
        self.uniform.discard(name)

    def _walk(self, stmts, ctrl: bool):
        for s in stmts:
            if isinstance(s, ir.Assign):
                if not (ctrl and self.expr(s.value)):
                    self._kill(s.name)
            elif isinstance(s, ir.If):
                c = ctrl and self.expr(s.cond)
                self._walk(s.then, c)
                self._walk(s.orelse, c)
            elif isinstance(s, ir.For):
                c = ctrl and all(self.expr(e) for e in (s.start, s.stop, s.step)) and not self._diverging_exit(s)
                if not c:
                    self._kill(s.var)
                self._walk(s.body, c)
            elif isinstance(s, ir.While):
                c = ctrl and self.expr(s.cond) and not self._diverging_exit(s)
                self._walk(s.body, c)
            elif isinstance(s, ir.PlaneOp):
                reduces = s.op in ir.PLANE_REDUCE_OPS + ("broadcast", "ballot", "all", "any")
                if not (ctrl and self.single_plane and reduces and (s.value is None or True)):
                    self._kill(s.dst)
            elif isinstance(s, ir.Atomic) and s.dst:
                self._kill(s.dst)
            elif isinstance(s, ir.Role):
                # only the role's units set these: they differ between the cube's units
                for x in ir.walk_stmts(s.body):
                    for name in ir.stmt_defs(x):
                        self._kill(name)
                self._walk(s.body, ctrl)

    def _diverging_exit(self, loop) -> bool:
        """True when a break/continue of this loop sits under non-uniform control."""
        return any(True for _ in self.nonuniform_exits(loop.body, True))

    def nonuniform_exits(self, stmts, ctrl):
        for s in stmts:
            if isinstance(s, (ir.Break, ir.Continue)) and not ctrl:
                yield s
            elif isinstance(s, ir.If):
                c = ctrl and self.expr(s.cond)
                yield from self.nonuniform_exits(s.then, c)
                yield from self.nonuniform_exits(s.orelse, c)
            elif isinstance(s, ir.Role):
                yield from self.nonuniform_exits(s.body, False)
            # nested loops own their break/continue

    def nonuniform_returns(self, stmts, ctrl):
        for s in stmts:
            if isinstance(s, ir.Return) and not ctrl:
                yield s
            elif isinstance(s, ir.If):
                c = ctrl and self.expr(s.cond)
                yield from self.nonuniform_returns(s.then, c)
                yield from self.nonuniform_returns(s.orelse, c)
            elif isinstance(s, ir.For):
                c = ctrl and all(self.expr(e) for e in (s.start, s.stop, s.step))
                yield from self.nonuniform_returns(s.body, c)
            elif isinstance(s, ir.While):
                yield from self.nonuniform_returns(s.body, ctrl and self.expr(s.cond))
            elif isinstance(s, ir.Role):
                yield from self.nonuniform_returns(s.body, False)


def _split_name(s) -> str:
    if isinstance(s, ir.Barrier):
        return s.origin or "kd.sync_cube()"
    if isinstance(s, ir.PlaneOp):
        return f"kd.plane_{s.op}()"
    if isinstance(s, ir.BarrierWait):
        return "kd.barrier_wait()"
    return "a matrix fragment operation"


def _check_role(role: ir.Role):
    """A role's body neither leaves it (return, or break/continue of a loop around it) nor holds
    a cube barrier: only the role's units run it."""
    def walk(stmts, in_loop):
        for s in stmts:
            if isinstance(s, ir.Barrier) and s.role is None:
                raise CompileError(f"{_split_name(s)} inside a kd.role: only the role's units reach it, so it would "
                                   f"wait for the others forever; use kd.sync_role(), or arrival barriers", s.loc)
            if isinstance(s, ir.Return) or (isinstance(s, (ir.Break, ir.Continue)) and not in_loop):
                raise CompileError("return, break or continue would leave a kd.role part-way: end the role's "
                                   "work with its block instead", s.loc)
            for blk in ir.child_blocks(s):
                walk(blk, in_loop or isinstance(s, (ir.For, ir.While)))
    walk(role.body, False)


def _check_role_variables(k: ir.KernelIR):
    """A variable a role sets holds the role's value only on the role's units: reading it
    outside roles would mean different things natively and where roles are emulated."""
    inside = {}
    for s in ir.walk_stmts(k.body):
        if isinstance(s, ir.Role):
            for x in ir.walk_stmts(s.body):
                for name in ir.stmt_defs(x):
                    inside.setdefault(name, s.loc)
    if not inside:
        return

    def walk(stmts):
        for s in stmts:
            if isinstance(s, ir.Role):
                continue
            for e in ir.stmt_exprs(s):
                for name in ir.vars_read(e) & inside.keys():
                    raise CompileError(f"{name!r} is set inside the kd.role at line {inside[name].line} and read "
                                       f"outside any role: only the role's units hold that value", s.loc)
            for blk in ir.child_blocks(s):
                walk(blk)
    walk(k.body)


def check_kernel(k: ir.KernelIR) -> Uniformity:
    """Raise CompileError for split points under non-uniform control flow, and for misused roles."""
    u = Uniformity(k)
    has_split = ir.contains(k.body, ir.UNIFORM_STMTS + (ir.Role,))
    _check_role_variables(k)

    def walk(stmts, ctrl, why, in_role=False):
        for s in stmts:
            if isinstance(s, ir.Role):
                if not ctrl:
                    where = f" (the condition at line {why.line} depends on the unit)" if why is not None else ""
                    raise CompileError(f"kd.role must be reached by every unit of the cube, but it is under "
                                       f"non-uniform control flow{where}", s.loc)
                _check_role(s)
                walk(s.body, ctrl, why, True)
                continue
            if in_role and isinstance(s, ir.BarrierWait):
                continue  # a role's units wait alone
            if isinstance(s, ir.UNIFORM_STMTS) and not ctrl:
                where = f" (the condition at line {why.line} depends on the unit)" if why is not None else ""
                raise CompileError(f"{_split_name(s)} must be reached by every unit of the cube, but it is "
                                   f"under non-uniform control flow{where}", s.loc)
            if isinstance(s, ir.If):
                c = ctrl and u.expr(s.cond)
                w = why if c or not ctrl else s.loc
                walk(s.then, c, w, in_role)
                walk(s.orelse, c, w, in_role)
            elif isinstance(s, (ir.For, ir.While)):
                exprs = (s.start, s.stop, s.step) if isinstance(s, ir.For) else (s.cond,)
                c = ctrl and all(u.expr(e) for e in exprs)
                w = why if c or not ctrl else s.loc
                if c and ir.contains(s.body, ir.UNIFORM_STMTS):
                    for bad in u.nonuniform_exits(s.body, True):
                        raise CompileError("break/continue under non-uniform control flow in a loop that "
                                           "contains barriers or plane operations", bad.loc)
                walk(s.body, c, w, in_role)

    walk(k.body, True, None)
    if has_split:
        for bad in u.nonuniform_returns(k.body, True):
            raise CompileError("return under non-uniform control flow in a kernel with barriers or plane "
                               "operations: every unit must reach them; wrap the work in an if instead", bad.loc)
    return u
