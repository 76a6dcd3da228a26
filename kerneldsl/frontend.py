"""Python AST -> kerneldsl IR, for one specialisation of a kernel.

Compile-time values (Const parameters, dtypes, `kd.PLANE_DIM`, cube dims, Python
numbers and anything computed only from them) are folded while parsing, so
`if` on them picks a branch and `kd.unroll` repeats its body. Everything else
becomes typed IR. Device functions marked `@kd.func` are inlined at each call.
Errors carry the user's file and line (see `errors.CompileError`).
"""
from __future__ import annotations

import ast
import itertools

from . import ir, lang
from .builtins import roles
from .dtypes import DType, VecType, boolean, i32, i64
from .errors import CompileError, SourceLoc, axis_offset_parts
from .frontend_exprs import PY_BINOPS, ExpressionLowering
from .frontend_source import ParsedSource, multi_assigned_names
from .frontend_source import DeviceFunction, func, parse_source  # noqa: F401  (re-exported: kernel.py, kd.func)
from .frontend_values import BranchTuple, SharedRef, TensorRef, VarRef, VarTuple, describe, is_ct
from .types import arith_type, coerce, is_weak, literal, make_const, promote


def _runtime_tree(v) -> bool:
    """A non-empty tuple whose leaves, through nested tuples, are run-time values or plain
    numbers: what a name assigned more than once keeps in variables (VarTuple)."""
    if isinstance(v, tuple):
        return len(v) > 0 and all(_runtime_tree(x) for x in v)
    return isinstance(v, ir.Expr) or (isinstance(v, (bool, int, float)) and not isinstance(v, lang._PlaneDim))


def _map_leaves(v, fn, kind=tuple):
    """`v` with fn applied to every leaf, nested tuples rebuilt as `kind`."""
    return kind(_map_leaves(x, fn, kind) for x in v) if isinstance(v, tuple) else fn(v)


def _leaves(v) -> list:
    return [y for x in v for y in _leaves(x)] if isinstance(v, tuple) else [v]


def _same_shape(a, b) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(_same_shape(x, y) for x, y in zip(a, b)))
    return True


class _Spec:
    """What a specialisation fixes: parameter kinds, cube dims, plane size, flags."""

    def __init__(self, args, cube_dim, plane_dim, bounds_check, caps):
        self.args = args  # list of (name, kind, payload): ('tensor', (dtype, ndim, inner_contig)) | ('scalar', dtype) | ('const', value)
        self.cube_dim = cube_dim
        self.plane_dim = plane_dim
        # an interpreted runtime checks every access (per axis), always
        self.bounds_check = bounds_check or getattr(caps, "interpreted", False)
        self.caps = caps


class Frontend(ExpressionLowering):
    """Builds the IR of one kernel specialisation from its parsed source (statements here,
    expressions in `ExpressionLowering`)."""

    def __init__(self, src: ParsedSource, spec: _Spec):
        self.src = src
        self.kernel_name = src.tree.name
        self.spec = spec
        self.var_types: dict = {}
        self.shared: dict = {}
        self.frags: dict = {}
        self.bulk_sources: set = set()  # tensor parameters kd.bulk_copy reads or kd.bulk_store writes
        self.min_cubes = 1  # kd.cubes_per_compute_unit
        self.scalar_statements = False  # kd.scalar_statements
        self.streaming_stores = False  # kd.streaming_stores
        self.avoid_gathers = False  # kd.avoid_gathers
        self.bulk_stores: list = []  # SourceLoc of each kd.bulk_store (a kernel with one must wait for them)
        self.bulk_store_waits = 0
        self.barrier_arrays: list = []  # every kd.arrival_barriers array (BarrierRef), for the checker
        self.role = None  # the ir.Role being lowered (kd.role), or None
        self.register_roles: list = []  # (first unit, units, registers, loc) of each role with a budget
        self.blocks: list = [[]]
        self.loops: list = []  # stack of 'runtime' / 'unrolled'
        self.loop_counters: dict = {}  # IR name of each enclosing run-time loop's variable -> its line
        self._names = itertools.count()
        self.scope: dict = {}
        self.prefix = ""
        self.func_stack: list = []
        # > 0 while lowering an expression whose emitted statements would run at the wrong
        # time (a while condition, the right side of and/or): `a if c else b` stays a select
        self.eager_selects = 0

    # ------------------------------------------------------------------ helpers
    def loc(self, node) -> SourceLoc:
        line = getattr(node, "lineno", 1) + self.src.line_offset
        col = getattr(node, "col_offset", 0) + self.src.col_offset
        return SourceLoc(self.src.filename, line, col)

    def error(self, node, msg):
        """A CompileError at `node`'s line that names the kernel being compiled."""
        return CompileError(f"kernel {self.kernel_name}: {msg}", self.loc(node) if node is not None else None)

    def emit(self, stmt):
        self.blocks[-1].append(stmt)

    def fresh(self, base="t") -> str:
        return f"_{base}{next(self._names)}"

    def declare(self, name, dtype, node):
        old = self.var_types.get(name)
        if old is not None and old != dtype:
            raise self.error(node, f"variable type conflict for {name}: {old} vs {dtype}")
        self.var_types[name] = dtype

    def copy_to_temp(self, value: ir.Expr) -> ir.Expr:
        """`value` in a fresh variable (even when it is one already): a snapshot."""
        if isinstance(value, ir.Const):
            return value
        name = self.fresh("tv")
        self.var_types[name] = value.dtype
        self.emit(ir.Assign(name=name, value=value, loc=value.loc))
        return ir.Var(value.dtype, name=name, loc=value.loc)

    def temp(self, value: ir.Expr, base="t") -> ir.Var:
        """Materialise an expression into a fresh variable (operands of split ops)."""
        if isinstance(value, (ir.Var, ir.Const)):
            return value
        name = self.fresh(base)
        self.var_types[name] = value.dtype
        self.emit(ir.Assign(name=name, value=value, loc=value.loc))
        return ir.Var(value.dtype, name=name, loc=value.loc)

    def to_expr(self, v, node) -> ir.Expr:
        if isinstance(v, ir.Expr):
            return v
        if isinstance(v, lang._PlaneDim):
            v = self.spec.plane_dim
        if isinstance(v, (bool, int, float)) or hasattr(v, "dtype") and not isinstance(v, (TensorRef, SharedRef)):
            try:
                return literal(v, self.loc(node))
            except TypeError:
                pass
        raise self.error(node, f"expected a kernel value, got {self.describe(v)}")

    describe = staticmethod(describe)

    def ct(self, v, node, what="value"):
        if isinstance(v, ir.Expr):
            raise self.error(node, f"{what} must be a compile-time constant (a kd.Const parameter or literal)")
        if isinstance(v, lang._PlaneDim):
            return self.spec.plane_dim
        return v

    def cond_expr(self, v, node) -> ir.Expr:
        e = self.to_expr(v, node)
        if isinstance(e.dtype, VecType):
            raise self.error(node, "a vector cannot be used as a condition")
        if e.dtype is boolean:
            return e
        e = coerce(e, arith_type(e.dtype))
        zero = make_const(0, e.dtype, e.loc)
        return ir.Cmp(boolean, op="!=", a=e, b=zero, loc=e.loc)

    # ------------------------------------------------------------------ entry
    def build(self) -> ir.KernelIR:
        fdef = self.src.tree
        params = []
        argnames = [a.arg for a in fdef.args.args]
        if len(argnames) != len(self.spec.args):
            raise self.error(fdef, "internal: argument count mismatch")
        for i, (pname, (kind, payload)) in enumerate(zip(argnames, self.spec.args)):
            if kind == "tensor":
                dtype, ndim, inner = payload
                self.scope[pname] = TensorRef(pname, dtype, ndim, inner)
                params.append(ir.TensorParam(pname, dtype, ndim, len(params)))
            elif kind == "scalar":
                self.scope[pname] = VarRef(pname, payload)
                params.append(ir.ScalarParam(pname, payload, len(params)))
            else:
                self.scope[pname] = payload
        self.param_names = {p.name for p in params}
        self.multi_assigned = multi_assigned_names(fdef)
        self.block(fdef.body)
        self.check_barrier_waits()
        roles.check_register_budgets(self)
        if self.bulk_stores and not self.bulk_store_waits:
            raise CompileError(f"kernel {self.kernel_name}: kd.bulk_store without kd.bulk_store_wait(): the issuing "
                               f"unit must wait for its stores before the kernel ends (their source is shared "
                               f"memory)", self.bulk_stores[0])
        return ir.KernelIR(
            name=fdef.name, params=params, body=self.blocks[0], cube_dim=self.spec.cube_dim,
            plane_dim=self.spec.plane_dim, loc=self.loc(fdef), bounds_check=self.spec.bounds_check,
            var_types=self.var_types, shared=self.shared, frags=self.frags,
            bulk_sources=tuple(sorted(self.bulk_sources)), min_cubes=self.min_cubes,
            scalar_statements=self.scalar_statements, streaming_stores=self.streaming_stores,
            avoid_gathers=self.avoid_gathers,
        )

    def check_barrier_waits(self):
        """A wait on arrival barriers that no unit arrives at and no copy completes would never
        return on hardware barriers: refuse it at the first such wait."""
        for bars in self.barrier_arrays:
            if bars.waits and not bars.used:
                raise CompileError(f"kernel {self.kernel_name}: kd.barrier_wait on arrival barriers that nothing "
                                   f"arrives at (no kd.barrier_arrive, kd.barrier_expect or kd.bulk_copy names "
                                   f"them): the wait would never return", bars.waits[0])

    def cube_units(self) -> int:
        x, y, z = self.spec.cube_dim
        return x * y * z

    # ------------------------------------------------------------------ statements
    def stmt_With(self, node):
        """`with kd.role(...):` is the one `with` a kernel knows (builtins/roles.py)."""
        spec = self.expr(node.items[0].context_expr) if len(node.items) == 1 else None
        if not isinstance(spec, roles.RoleSpec) or node.items[0].optional_vars is not None:
            raise self.error(node, "a kernel's `with` statement takes one kd.role(first, groups, registers=...) "
                                   "and no `as`")
        roles.lower_role(self, node, spec)

    def block(self, stmts):
        for s in stmts:
            self.stmt(s)

    def sub_block(self, stmts) -> list:
        self.blocks.append([])
        try:
            self.block(stmts)
        finally:
            out = self.blocks.pop()
        return out

    def stmt(self, node):
        meth = getattr(self, "stmt_" + type(node).__name__, None)
        if meth is None:
            raise self.error(node, f"unsupported statement in a kernel: {type(node).__name__}")
        meth(node)

    def stmt_Pass(self, node):
        pass

    def stmt_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.expr(node.value)

    def stmt_Assert(self, node):
        v = self.expr(node.test)
        if isinstance(v, ir.Expr):
            raise self.error(node, "assert in a kernel needs a compile-time condition")
        if not v:
            msg = self.expr(node.msg) if node.msg is not None else "static assertion failed"
            raise self.error(node, str(msg))

    def stmt_AnnAssign(self, node):
        ann = self.expr(node.annotation)
        if not isinstance(ann, (DType, VecType)):
            raise self.error(node.annotation, "annotation of a local must be a kd dtype")
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "annotated assignment needs a plain name")
        value = self.to_expr(self.expr(node.value), node.value) if node.value is not None else None
        name = self.local_name(node.target.id)
        self.declare(name, ann, node)
        self.scope[node.target.id] = VarRef(name, ann)
        if value is not None:
            self.assign_var(name, ann, value, node)

    def refuse_loop_counter(self, ref, name, node):
        """An assignment to the variable of an enclosing run-time loop is an error: the loop
        counts with it, so the next iteration would start from the new value (Python's would not)."""
        if isinstance(ref, VarRef) and ref.name in self.loop_counters:
            raise self.error(node, f"{name} is the variable of the loop at line {self.loop_counters[ref.name]}: "
                                   f"assigning to it inside the loop would change which iteration comes next "
                                   f"(in Python it would not); use another name")

    def local_name(self, pyname):
        return self.prefix + pyname

    def stmt_Assign(self, node):
        value = self.expr(node.value)
        for target in node.targets:
            self.assign_target(target, value, node)

    def assign_target(self, target, value, node):
        if isinstance(target, ast.Tuple):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.error(node, "tuple assignment needs a tuple of the same length")
            for t, v in zip(target.elts, value):
                self.assign_target(t, v, node)
            return
        if isinstance(target, ast.Subscript):
            self.store_subscript(target, value, node)
            return
        if not isinstance(target, ast.Name):
            raise self.error(target, "can only assign to names and tensor elements")
        name = target.id
        cur = self.scope.get(name)
        if isinstance(cur, VarRef):
            if cur.name in self.param_names:
                raise self.error(target, f"cannot assign to kernel parameter {name}")
            self.refuse_loop_counter(cur, name, target)
            self.assign_var(cur.name, cur.dtype, self.to_expr(value, node), node)
            return
        if isinstance(value, tuple) and name in self.multi_assigned and _runtime_tree(value):
            self.assign_tuple(name, _map_leaves(value, lambda v: self.to_expr(v, node)), node)
            return
        numeric = isinstance(value, (bool, int, float)) and not isinstance(value, lang._PlaneDim)
        if is_ct(value) and (not numeric or name not in self.multi_assigned):
            # compile-time binding: shared arrays, fragments, dtypes, tuples, and
            # numbers assigned once (so `HALF = BLOCK // 2` stays a constant)
            self.scope[name] = value
            if isinstance(value, SharedRef) and not self.shared[value.name].label:
                self.shared[value.name].label = name  # messages name the array as the kernel does
            return
        e = self.to_expr(value, node)
        irname = self.local_name(name)
        self.declare(irname, e.dtype, node)
        self.scope[name] = VarRef(irname, e.dtype)
        self.emit(ir.Assign(name=irname, value=e, loc=self.loc(node)))

    def assign_tuple(self, name, value, node):
        """Bind `name` to a VarTuple (nested tuples too): into its existing variables when the
        shape matches (values read first, so `m = (m[1], m[0])` swaps), else into fresh ones."""
        cur = self.scope.get(name)
        if isinstance(cur, VarTuple) and _same_shape(cur, value):
            targets, values = _leaves(cur), _leaves(value)
            mine = {v.name for v in targets}
            if any(ir.vars_read(v) & mine for v in values):
                values = [self.copy_to_temp(v) for v in values]
            for var, v in zip(targets, values):
                self.assign_var(var.name, var.dtype, v, node)
            return

        def fresh(v):
            if is_weak(v):
                v = coerce(v, v.dtype)
            irname = self.fresh(name)
            self.declare(irname, v.dtype, node)
            self.emit(ir.Assign(name=irname, value=v, loc=self.loc(node)))
            return ir.Var(v.dtype, name=irname, loc=self.loc(node))
        self.scope[name] = _map_leaves(value, fresh, VarTuple)

    def assign_var(self, irname, dtype, e, node):
        if e.dtype != dtype:
            if is_weak(e) or (isinstance(e, ir.Const)):
                e = coerce(e, dtype)
            elif isinstance(dtype, DType) and isinstance(e.dtype, DType) and arith_type(dtype) == e.dtype and dtype.is_float:
                e = coerce(e, dtype)  # f32 result stored into an f16/bf16 variable
            else:
                raise self.error(node, f"cannot assign a {e.dtype} value to {irname.removeprefix(self.prefix)}, "
                                       f"a {dtype} variable (use kd.cast or {dtype}(...))")
        self.emit(ir.Assign(name=irname, value=e, loc=self.loc(node)))

    def stmt_AugAssign(self, node):
        op = PY_BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, "unsupported augmented assignment")
        if isinstance(node.target, ast.Subscript):
            cur = self.expr(node.target)
            rhs = self.expr(node.value)
            self.store_subscript(node.target, self.binop(op, cur, rhs, node), node)
            return
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "unsupported augmented assignment target")
        cur = self.lookup(node.target.id, node.target)
        self.refuse_loop_counter(self.scope.get(node.target.id), node.target.id, node.target)
        rhs = self.expr(node.value)
        result = self.binop(op, cur, rhs, node)
        if isinstance(cur, VarRef) or isinstance(self.scope.get(node.target.id), VarRef):
            ref = self.scope[node.target.id]
            self.assign_var(ref.name, ref.dtype, self.to_expr(result, node), node)
        else:
            self.assign_target(node.target, result, node)

    def stmt_If(self, node):
        c = self.expr(node.test)
        if is_ct(c):
            self.block(node.body if c else node.orelse)
            return
        cond = self.cond_expr(c, node.test)
        before = dict(self.scope)
        then = self.sub_block(node.body)
        orelse = self.sub_block(node.orelse)
        self.emit(ir.If(cond=cond, then=then, orelse=orelse, loc=self.loc(node)))
        for name, v in list(self.scope.items()):
            if isinstance(v, VarTuple) and before.get(name) is not v:
                self.scope[name] = BranchTuple(name, self.loc(node).line)

    def stmt_While(self, node):
        if node.orelse:
            raise self.error(node, "while/else is not supported")
        self.eager_selects += 1  # (statements before the loop would not run again per iteration)
        try:
            c = self.expr(node.test)
        finally:
            self.eager_selects -= 1
        if is_ct(c) and not c:
            return
        cond = self.cond_expr(c, node.test) if not is_ct(c) else make_const(True, boolean)
        self.loops.append("runtime")
        body = self.sub_block(node.body)
        self.loops.pop()
        # the condition may read variables assigned in the body: re-evaluated each iteration
        self.emit(ir.While(cond=cond, body=body, loc=self.loc(node)))

    def stmt_For(self, node):
        if node.orelse:
            raise self.error(node, "for/else is not supported")
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "for loop target must be a name")
        it = node.iter
        if not (isinstance(it, ast.Call)):
            raise self.error(it, "for loops iterate over range(...) or kd.unroll(...)")
        fn = self.expr(it.func)
        args = [self.expr(a) for a in it.args]
        if fn is lang.unroll:
            try:
                rng = range(*[int(self.ct(a, it, "kd.unroll bound")) for a in args])
            except TypeError as e:
                raise self.error(it, f"bad kd.unroll arguments: {e}") from None
            self.loops.append("unrolled")
            for v in rng:
                self.scope[node.target.id] = v
                self.block(node.body)
            self.loops.pop()
            return
        if fn is not range:
            raise self.error(it, "for loops iterate over range(...) or kd.unroll(...)")
        if not 1 <= len(args) <= 3:
            raise self.error(it, "range takes 1 to 3 arguments")
        if len(args) == 1:
            start, stop, step = 0, args[0], 1
        elif len(args) == 2:
            start, stop, step = args[0], args[1], 1
        else:
            start, stop, step = args
        if is_ct(step) and step == 0:
            raise self.error(it, "range step must not be zero")
        es, ee, ep = (self.to_expr(v, it) for v in (start, stop, step))
        for e in (es, ee, ep):
            if not (isinstance(e.dtype, DType) and e.dtype.is_int):
                raise self.error(it, f"range bounds must be integers, got {e.dtype}")
        t = promote(es.dtype, is_weak(es), ee.dtype, is_weak(ee))
        if is_weak(es) and is_weak(ee):
            t = i32 if es.dtype is i32 and ee.dtype is i32 else i64
        pyname = node.target.id
        cur = self.scope.get(pyname)
        if isinstance(cur, VarRef):
            irname, t = cur.name, cur.dtype
        else:
            irname = self.local_name(pyname)
            self.declare(irname, t, node)
            self.scope[pyname] = VarRef(irname, t)
        if irname in self.loop_counters:
            raise self.error(node.target, f"for {pyname} in range(...) reuses the variable of the enclosing loop "
                                          f"at line {self.loop_counters[irname]}: kerneldsl loops count with their "
                                          f"variable, so the outer loop would go on from where this one stops "
                                          f"(Python would not); give this loop another name")
        self.loop_counters[irname] = self.loc(node).line
        self.loops.append("runtime")
        try:
            body = self.sub_block(node.body)
        finally:
            self.loops.pop()
            del self.loop_counters[irname]
        self.emit(ir.For(var=irname, start=coerce(es, t), stop=coerce(ee, t), step=coerce(ep, t), body=body,
                         loc=self.loc(node)))

    def stmt_Break(self, node):
        if not self.loops:
            raise self.error(node, "break outside a loop")
        if self.loops[-1] == "unrolled":
            raise self.error(node, "break is not supported inside kd.unroll loops")
        self.emit(ir.Break(loc=self.loc(node)))

    def stmt_Continue(self, node):
        if not self.loops:
            raise self.error(node, "continue outside a loop")
        if self.loops[-1] == "unrolled":
            raise self.error(node, "continue is not supported inside kd.unroll loops")
        self.emit(ir.Continue(loc=self.loc(node)))

    def stmt_Return(self, node):
        if self.func_stack:
            raise self.error(node, "return in a @kd.func must be its last statement")
        if node.value is not None:
            raise self.error(node, "kernels cannot return a value; write results to a tensor")
        self.emit(ir.Return(loc=self.loc(node)))

    # ------------------------------------------------------------------ tensor access
    def index_offset(self, ref, index_node, node):
        """The i64 element offset of ref[index]."""
        return self.offset_of(ref, self.expr(index_node), node)

    def offset_of(self, ref, idx, node):
        index_node = node
        items = list(idx) if isinstance(idx, tuple) else [idx]
        items = [self.to_expr(i, index_node) for i in items]
        for it in items:
            if not (isinstance(it.dtype, DType) and (it.dtype.is_int or it.dtype.is_bool)):
                raise self.error(index_node, f"index must be an integer, got {it.dtype}")
        items = [coerce(i, i64) for i in items]
        if isinstance(ref, SharedRef):
            shape = ref.shape
            if len(items) == 1:
                return items[0]
            if len(items) != len(shape):
                raise self.error(index_node, f"shared array {ref.name} has {len(shape)} dims, got {len(items)} indices")
            off = None
            stride = 1
            for it, dim in reversed(list(zip(items, shape))):
                term = it if stride == 1 else self.binop("*", it, make_const(stride, i64), node)
                off = term if off is None else self.binop("+", term, off, node)
                stride *= dim
            if self.spec.bounds_check and getattr(self.spec.caps, "interpreted", False):
                loc = self.loc(node)
                off = self.axis_checked(items, [make_const(d, i64, loc) for d in shape], off, node)
            return off
        if len(items) == 1 and ref.ndim != 1:
            return items[0]  # flat offset from the base (memory order)
        if len(items) != ref.ndim:
            raise self.error(index_node, f"tensor {ref.name} has {ref.ndim} dims, got {len(items)} indices")
        off = None
        for axis, it in enumerate(items):
            if axis == ref.ndim - 1 and ref.inner_contiguous:
                term = it
            else:
                st = ir.Cast(i64, a=ir.TensorDim(i32, tensor=ref.name, attr="stride", axis=axis))
                term = self.binop("*", it, st, node)
            off = term if off is None else self.binop("+", off, term, node)
        if self.spec.bounds_check and ref.ndim > 1:
            loc = self.loc(node)
            extents = [ir.Cast(i64, a=ir.TensorDim(i32, tensor=ref.name, attr="shape", axis=axis, loc=loc), loc=loc)
                       for axis in range(ref.ndim)]
            off = self.axis_checked(items, extents, off, node)
        return off

    def axis_checked(self, items, extents, off, node) -> ir.Expr:
        """`off` when every index is within its axis' extent (bounds-checked launches), else an
        offset the flat bounds check rejects that spells the failing axis and index (see
        `errors.decode_axis_offset`): a[0, 5] of a (4, 3) tensor fails, not reads a[1, 2]."""
        loc = self.loc(node)
        result = off
        for axis in reversed(range(len(items))):
            extent = extents[axis]
            it = items[axis]
            ok = ir.Logic(boolean, op="and", a=ir.Cmp(boolean, op=">=", a=it, b=make_const(0, i64, loc), loc=loc),
                          b=ir.Cmp(boolean, op="<", a=it, b=extent, loc=loc), loc=loc)
            c, m = axis_offset_parts(axis)
            bad = ir.BinOp(i64, op="-", a=make_const(c, i64, loc),
                           b=ir.BinOp(i64, op="*", a=it, b=make_const(m, i64, loc), loc=loc), loc=loc)
            result = ir.Select(i64, cond=ok, a=result, b=bad, loc=loc)
        return result

    def store_subscript(self, target, value, node):
        ref = self.expr(target.value)
        off = self.index_offset(ref, target.slice, node) if isinstance(ref, (TensorRef, SharedRef)) else None
        if isinstance(ref, TensorRef):
            v = self.to_expr(value, node)
            v = self.store_value(v, ref.dtype, node)
            self.emit(ir.Store(tensor=ref.name, offset=off, value=v, checked=self.spec.bounds_check, loc=self.loc(node)))
        elif isinstance(ref, SharedRef):
            v = self.store_value(self.to_expr(value, node), ref.dtype, node)
            self.emit(ir.SharedStore(array=ref.name, offset=off, value=v, checked=self.spec.bounds_check,
                                     loc=self.loc(node)))
        else:
            raise self.error(target, f"cannot store into {self.describe(ref)}")

    def store_value(self, v, dtype, node):
        if isinstance(v.dtype, VecType):
            raise self.error(node, "store a vector with kd.store_vec")
        if v.dtype.is_bool != dtype.is_bool and not (dtype.is_bool or v.dtype.is_bool):
            pass
        return coerce(v, dtype)

