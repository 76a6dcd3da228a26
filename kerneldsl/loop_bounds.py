"""Whether a kernel's amount of work is fixed by its launch arguments alone.

A launch's *argument words* are what it passes besides memory addresses: the grid, the
scalar arguments, each tensor's shape and strides (and the kernel's `kd.Const` values and
cube shape, fixed by its specialisation). A kernel is *argument-bound* when every loop in it
runs a number of times that follows from those words alone — no trip count, loop
condition or early exit depends on a value read from memory (a tensor, shared memory, a
fragment, an atomic's result, a value exchanged between units of a plane), directly or
through a variable. Two launches of such a kernel with the same argument words then do the
same work, whatever the memory holds; a loop-free kernel does work bounded by its code size
per unit.

The cpu runtime uses this to run a small launch on the calling thread (no handoff to a
worker) only where an earlier launch with the same words ended quickly: such a launch
cannot turn long because of what memory holds (backends/cpu/runtime.py). The analysis is
conservative: a value is *data* when it may depend on memory, and a loop with a data bound
or a data-dependent `break`/`continue`/`return` makes the kernel not argument-bound.
"""
from __future__ import annotations

from . import ir

_DATA_EXPRS = (ir.Load, ir.SharedLoad, ir.FragGet)  # values read from memory


def _is_data(e: ir.Expr, data_vars: set) -> bool:
    """Whether expression `e` may depend on memory contents."""
    for node in ir.walk_expr(e):
        if isinstance(node, _DATA_EXPRS):
            return True
        if isinstance(node, ir.Var) and node.name in data_vars:
            return True
        if not isinstance(node, (ir.Const, ir.Var, ir.BinOp, ir.UnOp, ir.Cmp, ir.Logic, ir.Select, ir.Cast,
                                 ir.Bitcast, ir.Math, ir.TensorDim, ir.Position, ir.VecMake, ir.VecExtract)):
            return True  # an expression this analysis does not know: assume the worst
    return False


def _exits(stmts) -> bool:
    """Whether a block may leave a loop or the kernel early (break, continue, return)."""
    return ir.contains(stmts, (ir.Break, ir.Continue, ir.Return))


class _Scan:
    """One pass over a kernel body: the variables found to hold data, and whether some loop
    has a data-dependent trip count."""

    def __init__(self, data_vars: set):
        self.data_vars = data_vars
        self.loops_on_data = False

    def block(self, stmts, data_ctx: bool, in_loop: bool) -> None:
        for s in stmts:
            self.stmt(s, data_ctx, in_loop)

    def _define(self, names, is_data: bool) -> None:
        if is_data:
            self.data_vars.update(names)

    def stmt(self, s, data_ctx: bool, in_loop: bool) -> None:
        dv = self.data_vars
        if isinstance(s, ir.Assign):
            self._define((s.name,), data_ctx or _is_data(s.value, dv))
        elif isinstance(s, (ir.PlaneOp, ir.Atomic)):
            self._define(ir.stmt_defs(s), True)  # exchanged between units / read from memory
        elif isinstance(s, ir.If):
            cond_data = data_ctx or _is_data(s.cond, dv)
            if cond_data and in_loop and (_exits(s.then) or _exits(s.orelse)):
                self.loops_on_data = True  # a loop left early on data
            self.block(s.then, cond_data, in_loop)
            self.block(s.orelse, cond_data, in_loop)
        elif isinstance(s, ir.For):
            if any(_is_data(e, dv) for e in (s.start, s.stop, s.step)):
                self.loops_on_data = True
            self._define((s.var,), data_ctx)
            self.block(s.body, data_ctx, True)
        elif isinstance(s, ir.While):
            if _is_data(s.cond, dv):
                self.loops_on_data = True
            self.block(s.body, data_ctx, True)
        elif isinstance(s, ir.Role):
            self.block(s.body, data_ctx, in_loop)
        else:
            self._define(ir.stmt_defs(s), True)  # (no other statement defines a variable today)
            if ir.child_blocks(s):
                self.loops_on_data = True  # a block statement this analysis does not know


def argument_bound(kir: ir.KernelIR) -> bool:
    """Whether the kernel's work is fixed by its argument words (module docstring)."""
    data_vars: set = set()
    while True:  # until no more variables turn out to hold data (each pass may add some)
        before = len(data_vars)
        scan = _Scan(data_vars)
        scan.block(kir.body, False, False)
        if scan.loops_on_data:
            return False
        if len(data_vars) == before:
            return True

