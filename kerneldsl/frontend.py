"""Python AST -> kerneldsl IR, for one specialisation of a kernel.

Compile-time values (Const parameters, dtypes, `kd.PLANE_DIM`, cube dims, Python
numbers and anything computed only from them) are folded while parsing, so
`if` on them picks a branch and `kd.unroll` repeats its body. Everything else
becomes typed IR. Device functions marked `@kd.func` are inlined at each call.
Errors carry the user's file and line (see `errors.CompileError`).
"""
from __future__ import annotations

import ast
import builtins
import inspect
import itertools
import operator
import textwrap
from dataclasses import dataclass

from . import ir, lang
from .dtypes import DType, VecType, f32, f64, i32, i64, boolean
from .errors import CompileError, SourceLoc
from .types import arith_type, coerce, extract, is_weak, literal, make_const, promote


# ----------------------------------------------------------------------------- bindings
@dataclass
class TensorRef:
    name: str
    dtype: DType
    ndim: int
    inner_contiguous: bool


@dataclass
class ShapeRef:
    tensor: TensorRef


@dataclass
class SharedRef:
    name: str
    dtype: DType
    shape: tuple


@dataclass
class FragRef:
    name: str
    ftype: ir.FragType


@dataclass
class TileRef:
    """kd.shared_tile(...): a group_mma operand in a shared array (compile-time handle)."""
    tile: ir.SharedTile
    dtype: DType


@dataclass
class VarRef:
    name: str  # IR name
    dtype: object


class VarTuple(tuple):
    """A tuple of run-time values bound to a name assigned more than once: its elements
    live in variables (ir.Var), so a later assignment of a tuple of the same length
    updates them in place. This is what carries a tuple through a run-time loop or out of
    a run-time branch (`m = (...)` before a loop, `m = m2` inside it)."""


@dataclass
class BranchTuple:
    """A name whose tuple got new variables inside a branch of a run-time `if` (a tuple
    whose length changed there): after the `if` its variables hold values only when that
    branch ran, so reading it is an error that says how to carry the tuple out."""
    name: str
    line: int


class DeviceFunction:
    """A function marked `@kd.func`: inlined into the kernels that call it."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a @kd.func: call it from a kernel")


def func(fn):
    """Mark a Python function as a device function callable from kernels (inlined)."""
    return DeviceFunction(fn)


@dataclass
class ParsedSource:
    tree: ast.FunctionDef
    filename: str
    line_offset: int
    col_offset: int
    globals: dict
    closure: dict


def parse_source(fn) -> ParsedSource:
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise CompileError(f"cannot read the source of {fn.__name__}: {e}") from None
    src = "".join(lines)
    dedented = textwrap.dedent(src)
    indent = len(lines[0]) - len(lines[0].lstrip())
    module = ast.parse(dedented)
    fdef = next(n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    closure = {}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:
                pass
    return ParsedSource(fdef, inspect.getsourcefile(fn) or fn.__code__.co_filename, start - 1, indent,
                        fn.__globals__, closure)


_PY_BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
}
_PY_FOLD = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "**": operator.pow, "&": operator.and_, "|": operator.or_, "^": operator.xor,
    "<<": operator.lshift, ">>": operator.rshift,
}
_PY_CMPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_PY_CMP_FOLD = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
                "==": operator.eq, "!=": operator.ne}
_FLOAT_MATH = ("exp", "exp2", "exp2_fast", "log", "log2", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid",
               "erf", "sin", "cos", "floor", "ceil", "round")


def multi_assigned_names(fdef) -> set:
    """Names assigned more than once (or augmented, or annotated): run-time variables."""
    counts: dict = {}

    def count(target, n=1):
        if isinstance(target, ast.Name):
            counts[target.id] = counts.get(target.id, 0) + n
        elif isinstance(target, ast.Tuple):
            for t in target.elts:
                count(t, n)

    for node in ast.walk(fdef):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                count(t)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            count(node.target, 2)
        elif isinstance(node, ast.For):
            count(node.target, 2)
    return {k for k, v in counts.items() if v > 1}


def assigned_names(fdef) -> set:
    """Every name a function body assigns (so a parameter of that name needs its own copy)."""
    out = set()
    for node in ast.walk(fdef):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out.add(n.id)
    return out


_PURE_NODES = (ir.Const, ir.Var, ir.BinOp, ir.UnOp, ir.Cmp, ir.Select, ir.Cast, ir.Position, ir.TensorDim,
               ir.VecMake, ir.VecExtract)


def _pure(e) -> bool:
    """No memory reads: cheap to re-evaluate where it is used."""
    return all(isinstance(n, _PURE_NODES) for n in ir.walk_expr(e))


def _is_ct(v) -> bool:
    return not isinstance(v, ir.Expr)


class _Spec:
    """What a specialisation fixes: parameter kinds, cube dims, plane size, flags."""

    def __init__(self, args, cube_dim, plane_dim, bounds_check, caps):
        self.args = args  # list of (name, kind, payload): ('tensor', (dtype, ndim, inner_contig)) | ('scalar', dtype) | ('const', value)
        self.cube_dim = cube_dim
        self.plane_dim = plane_dim
        self.bounds_check = bounds_check
        self.caps = caps


class Frontend:
    def __init__(self, src: ParsedSource, spec: _Spec):
        self.src = src
        self.spec = spec
        self.var_types: dict = {}
        self.shared: dict = {}
        self.frags: dict = {}
        self.blocks: list = [[]]
        self.loops: list = []  # stack of 'runtime' / 'unrolled'
        self._names = itertools.count()
        self.scope: dict = {}
        self.prefix = ""
        self.func_stack: list = []

    # ------------------------------------------------------------------ helpers
    def loc(self, node) -> SourceLoc:
        line = getattr(node, "lineno", 1) + self.src.line_offset
        col = getattr(node, "col_offset", 0) + self.src.col_offset
        return SourceLoc(self.src.filename, line, col)

    def error(self, node, msg):
        return CompileError(msg, self.loc(node) if node is not None else None)

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
        raise self.error(node, f"expected a kernel value, got {self._describe(v)}")

    @staticmethod
    def _describe(v):
        if isinstance(v, TensorRef):
            return f"tensor {v.name}"
        if isinstance(v, SharedRef):
            return f"shared array {v.name}"
        if isinstance(v, FragRef):
            return f"fragment {v.name}"
        if isinstance(v, TileRef):
            return f"shared tile of {v.tile.src}"
        return repr(v)

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
        return ir.KernelIR(
            name=fdef.name, params=params, body=self.blocks[0], cube_dim=self.spec.cube_dim,
            plane_dim=self.spec.plane_dim, loc=self.loc(fdef), bounds_check=self.spec.bounds_check,
            var_types=self.var_types, shared=self.shared, frags=self.frags,
        )

    # ------------------------------------------------------------------ statements
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
            self.assign_var(cur.name, cur.dtype, self.to_expr(value, node), node)
            return
        if (isinstance(value, tuple) and value and name in self.multi_assigned
                and all(isinstance(v, ir.Expr) or (isinstance(v, (bool, int, float))
                                                   and not isinstance(v, lang._PlaneDim)) for v in value)):
            self.assign_tuple(name, tuple(self.to_expr(v, node) for v in value), node)
            return
        numeric = isinstance(value, (bool, int, float)) and not isinstance(value, lang._PlaneDim)
        if _is_ct(value) and (not numeric or name not in self.multi_assigned):
            # compile-time binding: shared arrays, fragments, dtypes, tuples, and
            # numbers assigned once (so `HALF = BLOCK // 2` stays a constant)
            self.scope[name] = value
            return
        e = self.to_expr(value, node)
        irname = self.local_name(name)
        self.declare(irname, e.dtype, node)
        self.scope[name] = VarRef(irname, e.dtype)
        self.emit(ir.Assign(name=irname, value=e, loc=self.loc(node)))

    def assign_tuple(self, name, value, node):
        """Bind `name` to a VarTuple: into its existing variables when the length matches
        (values read first, so `m = (m[1], m[0])` swaps), else into fresh ones."""
        cur = self.scope.get(name)
        if isinstance(cur, VarTuple) and len(cur) == len(value):
            mine = {v.name for v in cur}
            if any(ir.vars_read(v) & mine for v in value):
                value = tuple(self.copy_to_temp(v) for v in value)
            for var, v in zip(cur, value):
                self.assign_var(var.name, var.dtype, v, node)
            return
        out = []
        for v in value:
            if is_weak(v):
                v = coerce(v, v.dtype)
            irname = self.fresh(name)
            self.declare(irname, v.dtype, node)
            self.emit(ir.Assign(name=irname, value=v, loc=self.loc(node)))
            out.append(ir.Var(v.dtype, name=irname, loc=self.loc(node)))
        self.scope[name] = VarTuple(out)

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
        op = _PY_BINOPS.get(type(node.op))
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
        rhs = self.expr(node.value)
        result = self.binop(op, cur, rhs, node)
        if isinstance(cur, VarRef) or isinstance(self.scope.get(node.target.id), VarRef):
            ref = self.scope[node.target.id]
            self.assign_var(ref.name, ref.dtype, self.to_expr(result, node), node)
        else:
            self.assign_target(node.target, result, node)

    def stmt_If(self, node):
        c = self.expr(node.test)
        if _is_ct(c):
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
        c = self.expr(node.test)
        if _is_ct(c) and not c:
            return
        cond = self.cond_expr(c, node.test) if not _is_ct(c) else make_const(True, boolean)
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
        if _is_ct(step) and step == 0:
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
        self.loops.append("runtime")
        body = self.sub_block(node.body)
        self.loops.pop()
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
        return off

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
            raise self.error(target, f"cannot store into {self._describe(ref)}")

    def store_value(self, v, dtype, node):
        if isinstance(v.dtype, VecType):
            raise self.error(node, "store a vector with kd.store_vec")
        if v.dtype.is_bool != dtype.is_bool and not (dtype.is_bool or v.dtype.is_bool):
            pass
        return coerce(v, dtype)

    # ------------------------------------------------------------------ expressions
    def expr(self, node):
        meth = getattr(self, "expr_" + type(node).__name__, None)
        if meth is None:
            raise self.error(node, f"unsupported expression in a kernel: {type(node).__name__}")
        return meth(node)

    def expr_Constant(self, node):
        return node.value

    def lookup(self, name, node):
        if name in self.scope:
            v = self.scope[name]
        elif name in self.src.closure:
            v = self.src.closure[name]
        elif name in self.src.globals:
            v = self.src.globals[name]
        elif hasattr(builtins, name):
            v = getattr(builtins, name)
        else:
            raise self.error(node, f"name {name!r} is not defined")
        if isinstance(v, VarRef):
            return ir.Var(v.dtype, name=v.name, loc=self.loc(node))
        if isinstance(v, lang._PlaneDim):
            return self.spec.plane_dim
        if isinstance(v, BranchTuple):
            raise self.error(node, f"tuple {name!r} got new variables inside the run-time `if` at line {v.line} "
                                   f"(its length changed there), so after the `if` it holds values only when that "
                                   f"branch ran: give it its final length before the `if` (e.g. "
                                   f"`{name} = (x0, x1)`) and assign a tuple of that length in the branches")
        return v

    def expr_Name(self, node):
        return self.lookup(node.id, node)

    def expr_Tuple(self, node):
        return tuple(self.expr(e) for e in node.elts)

    expr_List = expr_Tuple

    def expr_Attribute(self, node):
        base = self.expr(node.value)
        attr = node.attr
        if isinstance(base, TensorRef):
            if attr == "shape":
                return ShapeRef(base)
            if attr == "dtype":
                return base.dtype
            if attr == "ndim":
                return base.ndim
            if attr == "stride":
                return ("stride", base)
            raise self.error(node, f"tensors have no attribute {attr!r} in kernels")
        if isinstance(base, SharedRef):
            if attr == "dtype":
                return base.dtype
            if attr == "shape":
                return base.shape
            raise self.error(node, f"shared arrays have no attribute {attr!r}")
        if isinstance(base, ir.Expr):
            if attr == "dtype":
                return base.dtype
            raise self.error(node, f"values have no attribute {attr!r}")
        try:
            v = getattr(base, attr)
        except AttributeError:
            raise self.error(node, f"{self._describe(base)} has no attribute {attr!r}") from None
        if isinstance(v, lang._PlaneDim):
            return self.spec.plane_dim
        return v

    def expr_Subscript(self, node):
        base = self.expr(node.value)
        if isinstance(base, ShapeRef):
            axis = self.ct(self.expr(node.slice), node, "shape index")
            t = base.tensor
            if not -t.ndim <= axis < t.ndim:
                raise self.error(node, f"tensor {t.name} has {t.ndim} dims, no axis {axis}")
            return ir.TensorDim(i32, tensor=t.name, attr="shape", axis=axis % t.ndim, loc=self.loc(node))
        if isinstance(base, TensorRef):
            off = self.index_offset(base, node.slice, node)
            return ir.Load(base.dtype, tensor=base.name, offset=off, checked=self.spec.bounds_check, loc=self.loc(node))
        if isinstance(base, SharedRef):
            off = self.index_offset(base, node.slice, node)
            return ir.SharedLoad(base.dtype, array=base.name, offset=off, checked=self.spec.bounds_check,
                                 loc=self.loc(node))
        if isinstance(base, ir.Expr) and isinstance(base.dtype, VecType):
            lane = self.ct(self.expr(node.slice), node, "vector lane")
            if not 0 <= lane < base.dtype.lanes:
                raise self.error(node, f"lane {lane} out of range for {base.dtype}")
            return extract(base, lane)
        if isinstance(base, tuple):
            return base[self.ct(self.expr(node.slice), node, "tuple index")]
        raise self.error(node, f"cannot index {self._describe(base)}")

    def expr_BinOp(self, node):
        op = _PY_BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, "unsupported operator")
        return self.binop(op, self.expr(node.left), self.expr(node.right), node)

    def binop(self, op, a, b, node):
        if _is_ct(a) and _is_ct(b):
            if isinstance(a, lang._PlaneDim):
                a = self.spec.plane_dim
            if isinstance(b, lang._PlaneDim):
                b = self.spec.plane_dim
            try:
                return _PY_FOLD[op](a, b)
            except Exception as e:  # noqa: BLE001
                raise self.error(node, f"compile-time {op} failed: {e}") from None
        ea, eb = self.to_expr(a, node), self.to_expr(b, node)
        loc = self.loc(node)
        if isinstance(ea.dtype, VecType) or isinstance(eb.dtype, VecType):
            vt = ea.dtype if isinstance(ea.dtype, VecType) else eb.dtype
            if isinstance(ea.dtype, VecType) and isinstance(eb.dtype, VecType) and ea.dtype.lanes != eb.dtype.lanes:
                raise self.error(node, f"vector lane counts differ: {ea.dtype} and {eb.dtype}")
            lanes = []
            for i in range(vt.lanes):
                xa = extract(ea, i) if isinstance(ea.dtype, VecType) else ea
                xb = extract(eb, i) if isinstance(eb.dtype, VecType) else eb
                lanes.append(self.binop(op, xa, xb, node))
            return ir.VecMake(VecType(lanes[0].dtype, vt.lanes), elems=lanes, loc=loc)
        ta, tb = ea.dtype, eb.dtype
        if op in ("&", "|", "^") and ta.is_bool and tb.is_bool:
            return ir.BinOp(boolean, op=op, a=ea, b=eb, loc=loc)
        if op in ("<<", ">>"):
            if not (ta.is_int and tb.is_int) and not (is_weak(ea) and ta.is_int):
                raise self.error(node, f"shift needs integers, got {ta} and {tb}")
            t = arith_type(ta) if not is_weak(ea) else arith_type(tb) if tb.is_int else i32
            return ir.BinOp(t, op=op, a=coerce(ea, t), b=coerce(eb, t), loc=loc)
        t = promote(ta, is_weak(ea), tb, is_weak(eb))
        if op in ("&", "|", "^") and t.is_float:
            raise self.error(node, f"bitwise {op} needs integers, got {ta} and {tb}")
        if op == "/" and not t.is_float:
            t = f32 if i64 not in (ta, tb) else f64
        if op == "**":
            if _is_ct(b) and b == 2:
                x = coerce(ea, t if t.is_float else t)
                return ir.BinOp(t, op="*", a=x, b=x, loc=loc)
            if not t.is_float:
                t = f32
            return ir.Math(t, fn="pow", args=[coerce(ea, t), coerce(eb, t)], loc=loc)
        ca, cb = coerce(ea, t), coerce(eb, t)
        if op == "//":
            if t.is_float:
                return ir.Math(t, fn="floor", args=[ir.BinOp(t, op="/", a=ca, b=cb, loc=loc)], loc=loc)
            return ir.BinOp(t, op="/", a=ca, b=cb, loc=loc)
        res = ir.BinOp(t, op=op, a=ca, b=cb, loc=loc)
        if is_weak(ea) and is_weak(eb):
            res.weak = True
        return res

    def expr_UnaryOp(self, node):
        v = self.expr(node.operand)
        if _is_ct(v):
            if isinstance(node.op, ast.Not):
                return not v
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return +v
            if isinstance(node.op, ast.Invert):
                return ~v
        e = self.to_expr(v, node)
        loc = self.loc(node)
        if isinstance(node.op, ast.Not):
            return ir.UnOp(boolean, op="not", a=self.cond_expr(e, node), loc=loc)
        if isinstance(e.dtype, VecType):
            return self.binop("*", e, -1, node) if isinstance(node.op, ast.USub) else e
        if isinstance(node.op, ast.USub):
            t = arith_type(e.dtype)
            return ir.UnOp(t, op="neg", a=coerce(e, t), loc=loc)
        if isinstance(node.op, ast.UAdd):
            return e
        if isinstance(node.op, ast.Invert):
            if not e.dtype.is_int:
                raise self.error(node, f"~ needs an integer, got {e.dtype}")
            t = arith_type(e.dtype)
            return ir.UnOp(t, op="invert", a=coerce(e, t), loc=loc)
        raise self.error(node, "unsupported unary operator")

    def expr_BoolOp(self, node):
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.expr(node.values[0])
        for vnode in node.values[1:]:
            if _is_ct(result):
                if (op == "and" and not result) or (op == "or" and result):
                    return result
                result = self.expr(vnode)
                continue
            rhs = self.expr(vnode)
            if _is_ct(rhs):
                if (op == "and" and rhs) or (op == "or" and not rhs):
                    continue
                result = make_const(op == "or", boolean)
                continue
            result = ir.Logic(boolean, op=op, a=self.cond_expr(result, node), b=self.cond_expr(rhs, vnode),
                              loc=self.loc(node))
        return result

    def expr_Compare(self, node):
        left = self.expr(node.left)
        result = None
        for opnode, rnode in zip(node.ops, node.comparators):
            op = _PY_CMPS.get(type(opnode))
            right = self.expr(rnode)
            if op is None:
                if isinstance(opnode, (ast.Is, ast.IsNot)) and _is_ct(left) and _is_ct(right):
                    c = (left is right) if isinstance(opnode, ast.Is) else (left is not right)
                else:
                    raise self.error(node, "unsupported comparison")
            elif _is_ct(left) and _is_ct(right):
                c = _PY_CMP_FOLD[op](left, right)
            else:
                c = self.compare(op, left, right, node)
            result = c if result is None else self.expr_and(result, c, node)
            left = right
        return result

    def expr_and(self, a, b, node):
        if _is_ct(a):
            return b if a else a
        if _is_ct(b):
            return a if b else b
        return ir.Logic(boolean, op="and", a=a, b=b, loc=self.loc(node))

    def compare(self, op, a, b, node):
        ea, eb = self.to_expr(a, node), self.to_expr(b, node)
        if isinstance(ea.dtype, VecType) or isinstance(eb.dtype, VecType):
            raise self.error(node, "compare vectors lane by lane")
        if ea.dtype.is_bool and eb.dtype.is_bool:
            t = boolean
        else:
            t = promote(ea.dtype, is_weak(ea), eb.dtype, is_weak(eb))
        return ir.Cmp(boolean, op=op, a=coerce(ea, t), b=coerce(eb, t), loc=self.loc(node))

    def expr_IfExp(self, node):
        c = self.expr(node.test)
        if _is_ct(c):
            return self.expr(node.body if c else node.orelse)
        a, b = self.expr(node.body), self.expr(node.orelse)
        return self.select(c, a, b, node)

    def select(self, c, a, b, node):
        cond = self.cond_expr(c, node)
        ea, eb = self.to_expr(a, node), self.to_expr(b, node)
        if ea.dtype.is_bool and eb.dtype.is_bool:
            t = boolean
        elif isinstance(ea.dtype, VecType) or isinstance(eb.dtype, VecType):
            vt = ea.dtype if isinstance(ea.dtype, VecType) else eb.dtype
            elems = [self.select(cond, extract(coerce(ea, vt), i), extract(coerce(eb, vt), i), node) for i in range(vt.lanes)]
            return ir.VecMake(vt, elems=elems, loc=self.loc(node))
        elif ea.dtype == eb.dtype:
            t = ea.dtype
        else:
            t = promote(ea.dtype, is_weak(ea), eb.dtype, is_weak(eb))
        return ir.Select(t, cond=cond, a=coerce(ea, t), b=coerce(eb, t), loc=self.loc(node))

    # ------------------------------------------------------------------ calls
    def expr_Call(self, node):
        fn = self.expr(node.func)
        if isinstance(fn, tuple) and len(fn) == 2 and fn[0] == "stride":
            axis = self.ct(self.expr(node.args[0]), node, "stride axis")
            t = fn[1]
            if not -t.ndim <= axis < t.ndim:
                raise self.error(node, f"tensor {t.name} has {t.ndim} dims, no axis {axis}")
            axis %= t.ndim
            if axis == t.ndim - 1 and t.inner_contiguous:
                return make_const(1, i32, self.loc(node))
            return ir.TensorDim(i32, tensor=t.name, attr="stride", axis=axis, loc=self.loc(node))
        args = [self.expr(a) for a in node.args]
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
        if fn in lang.BUILTINS:
            name = lang.BUILTINS[fn]
            handler = getattr(self, "bi_" + name)
            try:
                return handler(node, *args, **kwargs)
            except TypeError as e:
                if "bi_" in str(e):
                    raise self.error(node, f"kd.{name}: wrong arguments ({str(e).split(') ', 1)[-1]})") from None
                raise
        if isinstance(fn, (DType, VecType)):
            if len(args) != 1:
                raise self.error(node, f"{fn}(x) takes one argument")
            return self.bi_cast(node, args[0], fn)
        if isinstance(fn, DeviceFunction):
            return self.inline(fn, args, kwargs, node)
        if fn is range:
            raise self.error(node, "range() is only allowed as a for-loop iterator")
        py = {builtins.min: "min", builtins.max: "max", builtins.abs: "abs", builtins.len: "len",
              builtins.float: "float", builtins.int: "int", builtins.bool: "bool", builtins.print: "print"}
        if fn in py:
            kind = py[fn]
            if all(_is_ct(a) for a in args) and kind != "print" and not any(isinstance(a, TensorRef) for a in args):
                return fn(*args)
            if kind in ("min", "max"):
                return self.minmax(kind, args, node)
            if kind == "abs":
                return self.bi_abs(node, *args)
            if kind == "len":
                return self.expr_Subscript_shape0(args[0], node)
            if kind == "print":
                return self.bi_print(node, *args)
            return self.bi_cast(node, args[0], {"float": f32, "int": i32, "bool": boolean}[kind])
        if callable(fn) and all(_is_ct(a) for a in args) and all(_is_ct(v) for v in kwargs.values()):
            try:
                return fn(*args, **kwargs)  # compile-time helper (math.sqrt, a Python function, ...)
            except Exception as e:  # noqa: BLE001
                raise self.error(node, f"compile-time call failed: {e}") from None
        raise self.error(node, f"cannot call {self._describe(fn)} with run-time values inside a kernel "
                               f"(mark device functions with @kd.func)")

    def expr_Subscript_shape0(self, t, node):
        if not isinstance(t, TensorRef):
            raise self.error(node, "len() needs a tensor")
        return ir.TensorDim(i32, tensor=t.name, attr="shape", axis=0, loc=self.loc(node))

    def inline(self, df: DeviceFunction, args, kwargs, node):
        src = parse_source(df.fn)
        fdef = src.tree
        names = [a.arg for a in fdef.args.args]
        defaults = fdef.args.defaults
        bound = dict(zip(names, args))
        bound.update(kwargs)
        for name, dnode in zip(names[len(names) - len(defaults):], defaults):
            if name not in bound:
                bound[name] = ast.literal_eval(dnode)
        if set(bound) != set(names):
            raise self.error(node, f"{df.__name__}() got arguments {sorted(bound)}, needs {names}")
        if len(self.func_stack) > 32:
            raise self.error(node, f"{df.__name__}: recursion is not supported")
        saved = (self.src, self.scope, self.prefix, self.multi_assigned)
        self.src = src
        self.multi_assigned = multi_assigned_names(fdef)
        self.prefix = f"{df.__name__}{next(self._names)}_"
        self.scope = {}
        rebound = assigned_names(fdef)
        for name, v in bound.items():
            if isinstance(v, ir.Expr) and (name in rebound or not _pure(v)):
                # a parameter the body rebinds, or an argument with loads: evaluate once
                irname = self.prefix + name
                self.var_types[irname] = v.dtype
                self.emit(ir.Assign(name=irname, value=v, loc=v.loc))
                v = VarRef(irname, v.dtype)
            # otherwise the argument expression itself stands for the parameter (the caller's
            # variables cannot change during the call), so positions stay visible as such
            self.scope[name] = v
        self.func_stack.append(df)
        result = None
        try:
            body = fdef.body
            for i, s in enumerate(body):
                if isinstance(s, ast.Return):
                    if i != len(body) - 1:
                        raise self.error(s, "return in a @kd.func must be its last statement")
                    result = self.expr(s.value) if s.value is not None else None
                    if isinstance(result, ir.Expr):
                        result = self.temp(result, "r")
                else:
                    self.stmt(s)
        finally:
            self.func_stack.pop()
            self.src, self.scope, self.prefix, self.multi_assigned = saved
        return result

    def minmax(self, kind, args, node):
        if len(args) == 1 and isinstance(args[0], tuple):
            args = list(args[0])
        if len(args) < 2:
            raise self.error(node, f"{kind}() needs at least two values in a kernel")
        acc = args[0]
        for a in args[1:]:
            acc = self.math2(kind, acc, a, node)
        return acc

    def math2(self, fn, a, b, node):
        if _is_ct(a) and _is_ct(b):
            return builtins.min(a, b) if fn == "min" else builtins.max(a, b) if fn == "max" else a ** b
        ea, eb = self.to_expr(a, node), self.to_expr(b, node)
        if isinstance(ea.dtype, VecType) or isinstance(eb.dtype, VecType):
            vt = ea.dtype if isinstance(ea.dtype, VecType) else eb.dtype
            elems = [self.math2(fn, extract(ea, i) if isinstance(ea.dtype, VecType) else ea,
                                extract(eb, i) if isinstance(eb.dtype, VecType) else eb, node) for i in range(vt.lanes)]
            return ir.VecMake(VecType(elems[0].dtype, vt.lanes), elems=elems, loc=self.loc(node))
        t = promote(ea.dtype, is_weak(ea), eb.dtype, is_weak(eb))
        if fn == "pow" and not t.is_float:
            t = f32
        return ir.Math(t, fn=fn, args=[coerce(ea, t), coerce(eb, t)], loc=self.loc(node))

    def math1(self, fn, x, node):
        if _is_ct(x):
            import math as pymath
            table = {"exp": pymath.exp, "log": pymath.log, "sqrt": pymath.sqrt, "floor": pymath.floor,
                     "ceil": pymath.ceil, "sin": pymath.sin, "cos": pymath.cos, "tanh": pymath.tanh,
                     "exp2": lambda v: 2.0 ** v, "exp2_fast": lambda v: 2.0 ** v, "log2": pymath.log2,
                     "erf": pymath.erf, "log1p": pymath.log1p,
                     "rsqrt": lambda v: 1 / pymath.sqrt(v), "sigmoid": lambda v: 1 / (1 + pymath.exp(-v)),
                     "round": lambda v: float(pymath.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)}
            if fn in table:
                return table[fn](x)
        e = self.to_expr(x, node)
        if isinstance(e.dtype, VecType):
            elems = [self.math1(fn, extract(e, i), node) for i in range(e.dtype.lanes)]
            return ir.VecMake(VecType(elems[0].dtype, e.dtype.lanes), elems=elems, loc=self.loc(node))
        t = arith_type(e.dtype)
        if not t.is_float:
            t = f32
        return ir.Math(t, fn=fn, args=[coerce(e, t)], loc=self.loc(node))


def _make_math1(fn):
    def handler(self, node, x):
        return self.math1(fn, x, node)
    return handler


for _fn in _FLOAT_MATH:
    setattr(Frontend, "bi_" + _fn, _make_math1(_fn))

# the rest of the builtins live in frontend_builtins to keep this module readable
from . import frontend_builtins  # noqa: E402,F401  (registers bi_* methods)
