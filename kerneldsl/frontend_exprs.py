"""Python expressions in a kernel -> IR expressions (the expression half of the front end).

`ExpressionLowering` is a part of `frontend.Frontend`, kept in its own module: names,
attributes, subscripts, operators with C-like promotion of weak literals, comparisons,
conditional expressions, and calls (builtins through their registry, `@kd.func` device
functions inlined, compile-time Python calls folded). Values known at compile time stay
Python values and fold; the rest become typed IR.
"""
from __future__ import annotations

import ast
import builtins
import difflib
import operator
import types

from . import ir, lang
from .builtins import registry
from .builtins.math import math2
from .dtypes import DType, VecType, boolean, f32, f64, i32, i64
from .frontend_source import DeviceFunction, assigned_names, multi_assigned_names, parse_source
from .frontend_values import BranchTuple, SharedRef, ShapeRef, TensorRef, VarRef, describe, is_array_ref, is_ct
from .types import arith_type, coerce, extract, is_weak, make_const, promote

PY_BINOPS = {
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

_PURE_NODES = (ir.Const, ir.Var, ir.BinOp, ir.UnOp, ir.Cmp, ir.Select, ir.Cast, ir.Position, ir.TensorDim,
               ir.VecMake, ir.VecExtract)


_COLLECTIVES = (ir.Barrier, ir.PlaneOp, ir.FragDecl, ir.FragFill, ir.FragLoad, ir.FragStore, ir.FragMma,
                ir.FragSet, ir.FragConvert, ir.GroupMma, ir.GroupWait, ir.AsyncCopy, ir.AsyncCommit, ir.AsyncWait,
                ir.BarrierInit, ir.BarrierArrive, ir.BarrierWait, ir.BulkCopy)


def _unsafe(*values) -> bool:
    """Whether evaluating any of `values` where it is not asked for may fault: a memory
    read, or an integer division or remainder by a run-time value."""
    for v in values:
        if not isinstance(v, ir.Expr):
            continue
        for n in ir.walk_expr(v):
            if isinstance(n, (ir.Load, ir.SharedLoad)):
                return True
            if (isinstance(n, ir.BinOp) and n.op in ("/", "%") and not n.dtype.is_float
                    and not isinstance(n.b, ir.Const)):
                return True
    return False


def _pure(e) -> bool:
    """No memory reads: cheap to re-evaluate where it is used."""
    return all(isinstance(n, _PURE_NODES) for n in ir.walk_expr(e))


class ExpressionLowering:
    """Expression methods of `Frontend` (which provides loc, error, emit, temp, to_expr, ...)."""

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
            raise self.error(node, self.missing_attribute(base, attr)) from None
        if isinstance(v, lang._PlaneDim):
            return self.spec.plane_dim
        return v

    @staticmethod
    def missing_attribute(base, attr: str) -> str:
        """The message for `base.attr` that does not exist, with near names of kerneldsl's."""
        if not isinstance(base, types.ModuleType):
            return f"{describe(base)} has no attribute {attr!r}"
        if base.__name__ != "kerneldsl":
            return f"module {base.__name__} has no attribute {attr!r}"
        near = difflib.get_close_matches(attr, [n for n in dir(base) if not n.startswith("_")], n=3)
        hint = f"; did you mean {', '.join('kd.' + n for n in near)}?" if near else ""
        return (f"kd.{attr} does not exist in kerneldsl{hint} (the builtins usable in kernels are listed in "
                f"docs/dsl.md)")

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
        raise self.error(node, f"cannot index {self.describe(base)}")

    def expr_BinOp(self, node):
        op = PY_BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, "unsupported operator")
        return self.binop(op, self.expr(node.left), self.expr(node.right), node)

    def binop(self, op, a, b, node):
        for v in (a, b):
            if is_array_ref(v):
                example = f" (e.g. {v.name}[i])" if hasattr(v, "name") else ""
                raise self.error(node, f"{self.describe(v)} is a whole array, not a value: index it{example} "
                                       f"to use its elements in `{op}`")
        if is_ct(a) and is_ct(b):
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
            if is_ct(b) and b == 2:
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
        if is_ct(v):
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
        """`a and b` / `a or b` short-circuit as in Python: where the right side reads memory,
        divides integers or has effects (an inlined @kd.func that loads or stores, say), it is
        evaluated under an `if` on the left side's value; otherwise (plain arithmetic, which
        cannot fault) both are combined in one expression. A right side holding a collective (every unit must reach it), or one
        inside a `while` condition (`eager_selects`), is evaluated eagerly as before."""
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.expr(node.values[0])
        for vnode in node.values[1:]:
            if is_ct(result):
                if (op == "and" and not result) or (op == "or" and result):
                    return result
                result = self.expr(vnode)
                continue
            rhs, stmts = self.branch_value(vnode)
            if not is_ct(rhs) and not self.eager_selects and not ir.contains(stmts, _COLLECTIVES) and (
                    _unsafe(rhs) or not all(isinstance(st, ir.Assign) and not _unsafe(st.value) for st in stmts)):
                result = self.short_circuit(op, result, rhs, stmts, node, vnode)
                continue
            for s in stmts:  # eager: the right side's statements run whatever the left side says
                self.emit(s)
            if is_ct(rhs):
                if (op == "and" and rhs) or (op == "or" and not rhs):
                    continue
                result = make_const(op == "or", boolean)
                continue
            result = ir.Logic(boolean, op=op, a=self.cond_expr(result, node), b=self.cond_expr(rhs, vnode),
                              loc=self.loc(node))
        return result

    def short_circuit(self, op, left, right, stmts, node, vnode) -> ir.Var:
        """A bool variable set to `left`, then, only where `left` does not decide the answer,
        to `right` after the statements its evaluation emitted."""
        name, loc = self.fresh("cond"), self.loc(node)
        self.var_types[name] = boolean
        self.emit(ir.Assign(name=name, value=self.cond_expr(left, node), loc=loc))
        decided = ir.Var(boolean, name=name, loc=loc)
        body = stmts + [ir.Assign(name=name, value=self.cond_expr(right, vnode), loc=loc)]
        guard = decided if op == "and" else ir.UnOp(boolean, op="not", a=decided, loc=loc)
        self.emit(ir.If(cond=guard, then=body, orelse=[], loc=loc))
        return ir.Var(boolean, name=name, loc=loc)

    def expr_Compare(self, node):
        left = self.expr(node.left)
        result = None
        for opnode, rnode in zip(node.ops, node.comparators):
            op = _PY_CMPS.get(type(opnode))
            right = self.expr(rnode)
            if op is None:
                if isinstance(opnode, (ast.Is, ast.IsNot)) and is_ct(left) and is_ct(right):
                    c = (left is right) if isinstance(opnode, ast.Is) else (left is not right)
                else:
                    raise self.error(node, "unsupported comparison")
            elif is_ct(left) and is_ct(right):
                c = _PY_CMP_FOLD[op](left, right)
            else:
                c = self.compare(op, left, right, node)
            result = c if result is None else self.expr_and(result, c, node)
            left = right
        return result

    def expr_and(self, a, b, node):
        if is_ct(a):
            return b if a else a
        if is_ct(b):
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
        """`a if c else b`: only the branch taken is evaluated when a branch reads memory,
        divides integers or emits statements (lowered to a variable set in an `if`);
        otherwise a select of both values, as cheap. Exceptions, evaluated eagerly as a
        select: a branch with a collective (plane operation, barrier, fragment or group
        operation), since every unit must reach it together; and a conditional inside a
        `while` condition or on the right of `and`/`or`, where statements emitted before
        the expression would run once or unguarded (`eager_selects`)."""
        c = self.expr(node.test)
        if is_ct(c):
            return self.expr(node.body if c else node.orelse)
        (a, then), (b, orelse) = self.branch_value(node.body), self.branch_value(node.orelse)
        if (self.eager_selects or ir.contains(then + orelse, _COLLECTIVES)
                or not (then or orelse or _unsafe(a, b))):
            for s in then + orelse:  # eager, as both branches ran before in order
                self.emit(s)
            return self.select(c, a, b, node)
        cond = self.cond_expr(c, node)
        ea, eb = self.to_expr(a, node.body), self.to_expr(b, node.orelse)
        t = self.select_type(ea, eb)
        name, loc = self.fresh("sel"), self.loc(node)
        self.var_types[name] = t
        then.append(ir.Assign(name=name, value=coerce(ea, t), loc=loc))
        orelse.append(ir.Assign(name=name, value=coerce(eb, t), loc=loc))
        self.emit(ir.If(cond=cond, then=then, orelse=orelse, loc=loc))
        return ir.Var(t, name=name, loc=loc)

    def branch_value(self, node) -> tuple:
        """(value, statements its evaluation emitted) of one branch of a conditional."""
        self.blocks.append([])
        try:
            value = self.expr(node)
        finally:
            stmts = self.blocks.pop()
        return value, stmts

    @staticmethod
    def select_type(ea, eb):
        """The type of `a if c else b` (bool, a vector type, or the promoted scalar type)."""
        if ea.dtype.is_bool and eb.dtype.is_bool:
            return boolean
        if isinstance(ea.dtype, VecType) or isinstance(eb.dtype, VecType):
            return ea.dtype if isinstance(ea.dtype, VecType) else eb.dtype
        if ea.dtype == eb.dtype:
            return ea.dtype
        return promote(ea.dtype, is_weak(ea), eb.dtype, is_weak(eb))

    def select(self, c, a, b, node):
        cond = self.cond_expr(c, node)
        ea, eb = self.to_expr(a, node), self.to_expr(b, node)
        t = self.select_type(ea, eb)
        if isinstance(t, VecType):
            elems = [self.select(cond, extract(coerce(ea, t), i), extract(coerce(eb, t), i), node) for i in range(t.lanes)]
            return ir.VecMake(t, elems=elems, loc=self.loc(node))
        return ir.Select(t, cond=cond, a=coerce(ea, t), b=coerce(eb, t), loc=self.loc(node))

    # ------------------------------------------------------------------ calls
    def lower_builtin(self, record: registry.Builtin, node, args, kwargs):
        """A kernel's call of a builtin: its handler's value, or an error naming the builtin
        when the arguments do not fit the handler."""
        try:
            return record.handler(self, node, *args, **kwargs)
        except TypeError:
            why = registry.wrong_arguments(record, args, kwargs)
            if why is None:
                raise
            raise self.error(node, f"kd.{record.name}: wrong arguments ({why})") from None

    def call_builtin(self, stub, node, *args, **kwargs):
        """kd.<name>(*args) lowered on behalf of the front end or another builtin."""
        return registry.lookup(stub).handler(self, node, *args, **kwargs)

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
        record = registry.lookup(fn)
        if record is not None:
            return self.lower_builtin(record, node, args, kwargs)
        if isinstance(fn, (DType, VecType)):
            if len(args) != 1:
                raise self.error(node, f"{fn}(x) takes one argument")
            return self.call_builtin(lang.cast, node, args[0], fn)
        if isinstance(fn, DeviceFunction):
            return self.inline(fn, args, kwargs, node)
        if fn is range:
            raise self.error(node, "range() is only allowed as a for-loop iterator")
        if fn is builtins.breakpoint:
            if args or kwargs:
                raise self.error(node, "breakpoint() in a kernel takes no arguments")
            if getattr(self.spec.caps, "interpreted", False):  # pdb stops here on the interpreter;
                self.emit(ir.Breakpoint(loc=self.loc(node)))  # compiled back ends ignore it
            return None
        py = {builtins.min: "min", builtins.max: "max", builtins.abs: "abs", builtins.len: "len",
              builtins.float: "float", builtins.int: "int", builtins.bool: "bool", builtins.print: "print"}
        if fn in py:
            kind = py[fn]
            if all(is_ct(a) for a in args) and kind != "print" and not any(isinstance(a, TensorRef) for a in args):
                return fn(*args)
            if kind in ("min", "max"):
                return self.minmax(kind, args, node)
            if kind == "abs":
                return self.call_builtin(lang.abs, node, *args)
            if kind == "len":
                return self.expr_Subscript_shape0(args[0], node)
            if kind == "print":
                return self.call_builtin(lang.print, node, *args)
            return self.call_builtin(lang.cast, node, args[0], {"float": f32, "int": i32, "bool": boolean}[kind])
        if callable(fn) and all(is_ct(a) for a in args) and all(is_ct(v) for v in kwargs.values()):
            try:
                return fn(*args, **kwargs)  # compile-time helper (math.sqrt, a Python function, ...)
            except Exception as e:  # noqa: BLE001
                raise self.error(node, f"compile-time call failed: {e}") from None
        raise self.error(node, f"cannot call {self.describe(fn)} with run-time values inside a kernel "
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
            acc = math2(self, kind, acc, a, node)
        return acc

