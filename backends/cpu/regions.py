"""Work-item loops for the CPU: cut a kernel into barrier-free regions.

The body becomes a *schedule*: uniform control flow at the top ("split level")
and `Region`s, each run as one loop over the cube's units that LLVM can
vectorise. Split points (barriers, plane ops, fragment ops) sit between
regions. Uniform `for` and `while` loops are also lifted to the split level (loop
interchange: legal because units are unordered between barriers), which puts
the unit loop innermost and makes strided-by-unit accesses contiguous vectors
(and a uniform search, like a grouped GEMM's expert lookup, runs once a cube).

Each variable gets a storage class:
- `scalar`: one slot. Used for loop counters of split-level loops, for uniform
  variables that every region defines before reading, and for variables local
  to one region (defined first, read later, in the same unit iteration);
- `unit`: an array with one element per unit, for everything that lives across
  regions or across iterations of a split-level loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kerneldsl import ir


@dataclass
class Region:
    stmts: list
    index: int


@dataclass
class SplitOp:
    stmt: ir.Stmt


@dataclass
class SIf:
    cond: ir.Expr
    then: list
    orelse: list


@dataclass
class SFor:
    loop: ir.For
    body: list


@dataclass
class SWhile:
    cond: ir.Expr
    body: list


@dataclass
class SRole:
    """A kd.role at the split level: its regions and split points cover units lo .. hi - 1."""
    lo: int
    hi: int
    body: list


@dataclass
class SJump:
    kind: str  # 'break' | 'continue' | 'return'


@dataclass
class Schedule:
    items: list
    regions: list = field(default_factory=list)
    storage: dict = field(default_factory=dict)  # var -> 'scalar' | 'unit'


def _has_jump(stmts) -> bool:
    return ir.contains(stmts, (ir.Break, ir.Continue, ir.Return))


class Scheduler:
    def __init__(self, k: ir.KernelIR, uniformity):
        self.k = k
        self.u = uniformity
        self.regions: list = []

    # ------------------------------------------------------------------ shape
    def hoistable(self, s: ir.For) -> bool:
        if not all(self.u.expr(e) for e in (s.start, s.stop, s.step)):
            return False
        if _has_jump(s.body):
            return False
        return not any(s.var in ir.stmt_defs(x) for x in ir.walk_stmts(s.body))

    def split_level(self, s) -> bool:
        if isinstance(s, ir.SPLIT_STMTS + (ir.Role,)):
            return True
        if isinstance(s, ir.If):
            # (a uniform early return, `if done: return`, ends the cube at the split level
            # instead of masking every unit through the rest of the kernel)
            return self.u.expr(s.cond) and any(self.split_level(x) or isinstance(x, ir.Return)
                                               for x in s.then + s.orelse)
        if isinstance(s, ir.For):
            if self.hoistable(s):
                return True
            return (all(self.u.expr(e) for e in (s.start, s.stop, s.step))
                    and any(self.split_level(x) for x in s.body))
        if isinstance(s, ir.While):
            # a uniform while loop is lifted like a hoistable for loop (every unit runs the
            # same iterations); one that may jump out stays in its region
            return self.u.expr(s.cond) and (not _has_jump(s.body) or any(self.split_level(x) for x in s.body))
        return False

    def schedule(self, stmts) -> list:
        items, pending = [], []

        def flush():
            if pending:
                r = Region(list(pending), len(self.regions))
                self.regions.append(r)
                items.append(r)
                pending.clear()

        for s in stmts:
            if isinstance(s, (ir.Break, ir.Continue, ir.Return)):
                # at split level every statement is reached uniformly
                flush()
                items.append(SJump({ir.Break: "break", ir.Continue: "continue", ir.Return: "return"}[type(s)]))
                continue
            if not self.split_level(s):
                pending.append(s)
                continue
            flush()
            if isinstance(s, ir.SPLIT_STMTS):
                if not isinstance(s, ir.Barrier):
                    items.append(SplitOp(s))
            elif isinstance(s, ir.Role):
                items.append(SRole(s.first_unit, s.first_unit + s.units, self.schedule(s.body)))
            elif isinstance(s, ir.If):
                items.append(SIf(s.cond, self.schedule(s.then), self.schedule(s.orelse)))
            elif isinstance(s, ir.For):
                items.append(SFor(s, self.schedule(s.body)))
            elif isinstance(s, ir.While):
                items.append(SWhile(s.cond, self.schedule(s.body)))
        flush()
        return items


# ---------------------------------------------------------------------- storage
class RegionFacts:
    """One pass over a region: which variables it defines, and which are *cleanly*
    defined — first touched, in program order, by a top-level assignment (or a loop
    header) that does not read them, so no value flows in from an earlier region or
    an earlier iteration of an enclosing loop."""

    def __init__(self, stmts):
        self.defs: set = set()
        self.clean: set = set()
        touched: set = set()
        for s in stmts:
            direct = set()
            for e in ir.stmt_exprs(s):
                direct |= ir.vars_read(e)
            nested = set()
            for blk in ir.child_blocks(s):
                for x in ir.walk_stmts(blk):
                    nested |= ir.stmt_defs(x)
                    for e in ir.stmt_exprs(x):
                        nested |= ir.vars_read(e)
            defs = ir.stmt_defs(s)
            for blk in ir.child_blocks(s):
                for x in ir.walk_stmts(blk):
                    defs = defs | ir.stmt_defs(x)
            self.defs |= defs
            if isinstance(s, ir.Assign) and s.name not in touched and s.name not in direct:
                self.clean.add(s.name)
            if isinstance(s, ir.For) and s.var not in touched and s.var not in direct:
                self.clean.add(s.var)  # the loop writes its counter before anything reads it
            touched |= direct | nested | defs


def assign_storage(sched: Schedule, k: ir.KernelIR, uniformity) -> dict:
    """Decide `scalar` or `unit` storage for every variable (see module doc)."""
    refs: dict = {}  # var -> set of region indices (-1: split level)
    forced_unit: set = set()
    split_scalars: set = set()

    def note(name, where):
        refs.setdefault(name, set()).add(where)

    def visit(items):
        for it in items:
            if isinstance(it, Region):
                for s in ir.walk_stmts(it.stmts):
                    for e in ir.stmt_exprs(s):
                        for v in ir.vars_read(e):
                            note(v, it.index)
                    for v in ir.stmt_defs(s):
                        note(v, it.index)
            elif isinstance(it, SplitOp):
                s = it.stmt
                for e in ir.stmt_exprs(s):
                    for v in ir.vars_read(e):
                        note(v, -1)
                        forced_unit.add(v)
                if isinstance(s, ir.PlaneOp):
                    note(s.dst, -1)
                    forced_unit.add(s.dst)
            elif isinstance(it, SIf):
                for v in ir.vars_read(it.cond):
                    note(v, -1)
                visit(it.then)
                visit(it.orelse)
            elif isinstance(it, SFor):
                for e in (it.loop.start, it.loop.stop, it.loop.step):
                    for v in ir.vars_read(e):
                        note(v, -1)
                split_scalars.add(it.loop.var)
                visit(it.body)
            elif isinstance(it, SWhile):
                for v in ir.vars_read(it.cond):
                    note(v, -1)
                visit(it.body)
            elif isinstance(it, SRole):
                visit(it.body)

    visit(sched.items)
    facts = {r.index: RegionFacts(r.stmts) for r in sched.regions}
    storage = {}
    for name in k.var_types:
        where = refs.get(name, set())
        if name in split_scalars:
            storage[name] = "scalar"
            continue
        if name in forced_unit or not where:
            storage[name] = "unit" if where else "scalar"
            continue
        region_ids = [w for w in where if w >= 0]
        clean = all(name in facts[w].clean for w in region_ids if name in facts[w].defs)
        defined_everywhere = all(name in facts[w].defs for w in region_ids)
        if name in uniformity.uniform and clean:
            storage[name] = "scalar"
        elif len(where) == 1 and region_ids and clean and defined_everywhere:
            storage[name] = "scalar"
        else:
            storage[name] = "unit"
    return storage


def build_schedule(k: ir.KernelIR, uniformity) -> Schedule:
    sch = Scheduler(k, uniformity)
    items = sch.schedule(k.body)
    sched = Schedule(items, sch.regions)
    sched.storage = assign_storage(sched, k, uniformity)
    return sched


# ---------------------------------------------------------------------- rematerialisation
_PURE = (ir.Const, ir.Var, ir.BinOp, ir.UnOp, ir.Cmp, ir.Select, ir.Cast, ir.Position, ir.TensorDim, ir.Math)


def _substitute(e: ir.Expr, env: dict) -> ir.Expr:
    """A copy of `e` with variables in `env` replaced by their defining expressions."""
    if isinstance(e, ir.Var) and e.name in env:
        return env[e.name]
    import copy
    out = copy.copy(e)
    for attr in ("a", "b", "cond", "offset"):
        v = getattr(out, attr, None)
        if isinstance(v, ir.Expr):
            setattr(out, attr, _substitute(v, env))
    if isinstance(out, ir.Math):
        out.args = [_substitute(a, env) for a in out.args]
    if isinstance(out, ir.VecMake):
        out.elems = [_substitute(a, env) for a in out.elems]
    return out


def rematerialize(k: ir.KernelIR) -> dict:
    """Variables defined once, at the kernel's top level, from positions, parameters and
    constants only (`t = kd.unit_pos_x()`, `i = cube * BLOCK + t`): every read is
    replaced by the defining expression, so it is never stored per unit and stays
    affine in the unit index (contiguous vector accesses instead of gathers).
    Rewrites k.body in place; returns the substituted variables."""
    counts: dict = {}
    for s in ir.walk_stmts(k.body):
        for v in ir.stmt_defs(s):
            counts[v] = counts.get(v, 0) + 1
    params = {p.name for p in k.params if isinstance(p, ir.ScalarParam)}
    env: dict = {}
    for s in k.body:
        if (isinstance(s, ir.Assign) and counts.get(s.name) == 1
                and all(isinstance(n, _PURE) for n in ir.walk_expr(s.value))
                and all(n.name in env or n.name in params for n in ir.walk_expr(s.value) if isinstance(n, ir.Var))):
            env[s.name] = _substitute(s.value, env)
    if not env:
        return env

    def rewrite(stmts):
        out = []
        for s in stmts:
            if isinstance(s, ir.Assign) and s.name in env:
                continue
            for attr in ("value", "offset", "cond", "start", "stop", "step", "arg", "compare", "stride"):
                v = getattr(s, attr, None)
                if isinstance(v, ir.Expr):
                    setattr(s, attr, _substitute(v, env))
            if isinstance(s, ir.Print):
                s.parts = [_substitute(p, env) if isinstance(p, ir.Expr) else p for p in s.parts]
            if isinstance(s, ir.GroupMma):
                for t in (s.a_tile, s.b_tile):
                    if t is not None:
                        t.offset = _substitute(t.offset, env)
            if isinstance(s, ir.If):
                s.then = rewrite(s.then)
                s.orelse = rewrite(s.orelse)
            elif isinstance(s, (ir.For, ir.While, ir.Role)):
                s.body = rewrite(s.body)
            out.append(s)
        return out

    k.body = rewrite(k.body)
    return env
