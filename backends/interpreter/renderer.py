"""IR -> Python source: one generator function (named as the kernel) that runs one unit of a cube.

Every generated line remembers the user's source line of the IR node it came from
(`Rendering.lines`); compiler.py gives the compiled code those line numbers and the user's file
name, so tracebacks and pdb show the kernel's own lines. Variables keep the kernel's names.
Values are numpy scalars of the IR's dtypes (vectors: numpy arrays), so integer arithmetic
wraps and f32 rounds as on the compiled runtimes. Split points (barriers, plane and fragment
operations) `yield` a request to the cube's scheduler (scheduler.py), which answers when every
unit of the cube (or plane) has arrived.
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

import numpy as np

from kerneldsl import ir
from kerneldsl.dtypes import VecType

from .. import dispatch

_SPLIT = {
    ir.Barrier: "s_barrier",
    ir.PlaneOp: "s_plane_op",
    ir.FragFill: "s_frag_op",
    ir.FragLoad: "s_frag_op",
    ir.FragStore: "s_frag_op",
    ir.FragMma: "s_frag_op",
    ir.GroupMma: "s_frag_op",
    ir.GroupWait: "s_group_wait",
}
UNIT_ARGS = ("_kd", "_kd_cube", "_kd_grid", "_kd_unit", "_kd_flat", "_kd_plane", "_kd_lane", "_kd_frags")
_MATH = {"exp": "np.exp", "exp2": "np.exp2", "exp2_fast": "np.exp2", "log": "np.log", "log2": "np.log2",
         "log1p": "np.log1p", "sqrt": "np.sqrt", "tanh": "np.tanh", "sin": "np.sin", "cos": "np.cos",
         "pow": "np.power", "abs": "np.abs", "floor": "np.floor", "ceil": "np.ceil", "isnan": "np.isnan",
         "isinf": "np.isinf"}
_BINOPS = {"+": "+", "-": "-", "*": "*", "&": "&", "|": "|", "^": "^", "<<": "<<", ">>": ">>"}


@dataclass
class Rendering:
    """The generated Python: its text, the user's line of each text line, the split statements
    in the order their requests number them, and the module's constants."""
    source: str
    lines: list
    splits: list = field(default_factory=list)
    consts: dict = field(default_factory=dict)


def py_name(name: str) -> str:
    """A Python identifier for an IR name (the kernel's own where it already is one)."""
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit() or keyword.iskeyword(out):
        out = "v_" + out
    return out


class InterpreterRenderer(dispatch.SharedHandlers):
    """Lowers a KernelIR to the text of a generator function named as the kernel, run once per unit."""

    dialect = "interpreter"

    def __init__(self, kir: ir.KernelIR):
        self.k = kir
        self.lines: list = []
        self.line_of: list = []
        self.depth = 1
        self.cur_line = kir.loc.line if kir.loc is not None else 1
        self.splits: list = []
        self.consts: dict = {}  # module-level name -> value
        self._loops = 0
        self.names = self._name_table()
        self.stmt_handlers = dispatch.bind(self, {**dispatch.STATEMENTS, **_SPLIT})
        self.expr_handlers = dispatch.bind(self, dispatch.EXPRESSIONS)

    STATEMENT_HANDLERS = {**dispatch.STATEMENTS, **_SPLIT}  # (tests/test_renderers.py reads the tables)
    EXPRESSION_HANDLERS = dispatch.EXPRESSIONS

    def _name_table(self) -> dict:
        """IR name -> Python name: parameters, locals, shared arrays (by their kernel name where free)."""
        taken = set(UNIT_ARGS) | {"np", "range", "int"}
        out = {}

        def claim(irname, wanted):
            n = py_name(wanted)
            while n in taken or n.startswith("_kd"):
                n = n + "_"
            taken.add(n)
            out[irname] = n
        for p in self.k.params:
            claim(p.name, p.name)
        for v in self.k.var_types:
            claim(v, v)
        for s, decl in self.k.shared.items():
            claim(s, decl.label if decl.label and decl.label not in self.k.var_types else s)
        return out

    # ------------------------------------------------------------------ output
    def emit(self, text: str):
        self.lines.append("    " * self.depth + text)
        self.line_of.append(self.cur_line)

    def block(self, stmts):
        self.depth += 1
        n = len(self.lines)
        for s in stmts:
            self.stmt(s)
        if len(self.lines) == n:
            self.emit("pass")
        self.depth -= 1

    def stmt(self, s):
        saved = self.cur_line
        if s.loc is not None:
            self.cur_line = s.loc.line
        dispatch.lower(self.stmt_handlers, s, self.dialect)
        self.cur_line = saved

    def x(self, e) -> str:
        return dispatch.lower(self.expr_handlers, e, self.dialect)

    def const(self, value, name: str | None = None) -> str:
        """A module-level constant holding `value` (one per name; numbered when unnamed)."""
        name = name or f"_kd_c{len(self.consts)}"
        if name not in self.consts:
            self.consts[name] = value
        return name

    def dtype(self, t) -> str:
        """The numpy type of an IR type (of its lanes for a vector), as a module constant."""
        t = t.elem if isinstance(t, VecType) else t
        return self.const(t.np.type, f"_kd_{t.name}")

    def render(self) -> Rendering:
        k = self.k
        params = [self.names[p.name] for p in k.params] + [self.names[s] for s in k.shared]
        header = f"def {py_name(k.name)}({', '.join(UNIT_ARGS + tuple(params))}):  # one unit of a cube"
        for s in k.body:
            self.stmt(s)
        self.emit("return")
        self.emit("yield  # (a generator even without split points)")
        src = [header] + self.lines
        lines = [self.line_of[0] if self.line_of else self.cur_line] + self.line_of
        return Rendering("\n".join(src) + "\n", lines, self.splits, self.consts)

    # ------------------------------------------------------------------ statements
    def s_assign(self, s):
        self.emit(f"{self.names[s.name]} = {self.x(s.value)}")

    def _write(self, name: str, s):
        """A (vector) store of `s.value` at `s.offset` into the tensor or shared array `name`."""
        method = "store_vec" if isinstance(s.value.dtype, VecType) else "store"
        self.emit(f"{self.names[name]}.{method}({self.x(s.offset)}, {self.x(s.value)})")

    def s_store(self, s):
        self._write(s.tensor, s)

    def s_shared_store(self, s):
        self._write(s.array, s)

    def s_if(self, s):
        self.emit(f"if {self.x(s.cond)}:")
        self.block(s.then)
        if s.orelse:
            self.emit("else:")
            self.block(s.orelse)

    def s_for(self, s):
        """A counted loop with the compiled back ends' semantics: bounds evaluated once, and
        after a loop that ran to its end (no break) the variable holds the first value that
        failed the test, or the start if the loop never ran (C's `for`; Python's would keep
        the last value)."""
        n = self._loops
        self._loops += 1
        i, lo, step = f"_kd_it{n}", f"_kd_lo{n}", f"_kd_step{n}"
        var, cast = self.names[s.var], self.dtype(self.k.var_types.get(s.var, s.start.dtype))
        self.emit(f"{lo}, {step} = int({self.x(s.start)}), int({self.x(s.step)})")
        self.emit(f"{i} = None")
        self.emit(f"for {i} in range({lo}, int({self.x(s.stop)}), {step}):")
        self.depth += 1
        self.emit(f"{var} = {cast}({i})")
        self.depth -= 1
        self.block(s.body)
        self.emit("else:")
        self.depth += 1
        self.emit(f"{var} = {cast}({lo} if {i} is None else {i} + {step})")
        self.depth -= 1

    def s_while(self, s):
        self.emit(f"while {self.x(s.cond)}:")
        self.block(s.body)

    def s_role(self, s):
        """kd.role: the body on the role's units; the front end's cube barrier after it orders
        the roles (program order, as on every runtime without hardware arrival barriers)."""
        self.emit(f"if {s.first_unit} <= _kd_flat < {s.first_unit + s.units}:")
        self.block(s.body)

    def s_phase_check(self, s):
        where = f"line {s.loc.line}" if s.loc is not None else "?"
        self.emit(f"_kd.phase_check({self.names[s.array]}, {self.x(s.index)}, {self.x(s.parity)}, {where!r})")

    def s_break(self, s):
        self.emit("break")

    def s_continue(self, s):
        self.emit("continue")

    def s_return(self, s):
        self.emit("return")

    def s_breakpoint(self, s):
        self.emit("breakpoint()")

    def s_atomic(self, s):
        target = self.names[s.target]
        cmp = f", {self.x(s.compare)}" if s.compare is not None else ""
        call = f"{target}.atomic({s.op!r}, {self.x(s.offset)}, {self.x(s.value)}{cmp})"
        self.emit(f"{self.names[s.dst]} = {call}" if s.dst else call)

    def s_print(self, s):
        fmt, args = dispatch.printf_format(s.parts, lambda e: ("%g" if e.dtype.is_float else "%d", self.x(e)))
        self.emit(f"_kd.print({fmt!r}, ({''.join(a + ', ' for a in args)}))")

    def s_frag_set(self, s):
        self.emit(f"_kd_frags[{s.frag!r}][_kd_lane + {s.elem * self.k.plane_dim}] = {self.x(s.value)}")

    def s_frag_convert(self, s):
        self.emit(f"_kd.frag_convert(_kd_frags, {s.dst!r}, {s.src!r}, _kd_lane)")

    # split points: a request (kind, split number, operands...) to the scheduler
    def _split(self, s) -> int:
        self.splits.append(s)
        return len(self.splits) - 1

    def s_barrier(self, s):
        self.emit(f"yield ('barrier', {self._split(s)})")

    def s_plane_op(self, s):
        value = self.x(s.value) if s.value is not None else "None"
        arg = self.x(s.arg) if s.arg is not None else "None"
        self.emit(f"{self.names[s.dst]} = yield ('plane', {self._split(s)}, {value}, {arg})")

    def s_frag_op(self, s):
        if isinstance(s, ir.GroupMma):
            ops = [self.x(t.offset) if t is not None else "None" for t in (s.a_tile, s.b_tile)]
        else:
            ops = [self.x(e) for e in ir.stmt_exprs(s)]
        self.emit(f"yield ('frag', {self._split(s)}{''.join(', ' + o for o in ops)})")

    def s_group_wait(self, s):
        self.emit("pass  # kd.group_wait: the emulated product was complete when kd.group_mma returned")

    # ------------------------------------------------------------------ expressions
    def e_const(self, e):
        t = e.dtype.elem if isinstance(e.dtype, VecType) else e.dtype
        return self.const(np.array(e.value, t.np)[()])

    def e_var(self, e):
        return self.names[e.name]

    def e_binop(self, e):
        a, b, op = self.x(e.a), self.x(e.b), e.op
        t = e.dtype.elem if isinstance(e.dtype, VecType) else e.dtype
        if op in _BINOPS:
            return f"({a} {_BINOPS[op]} {b})"
        if op == "/":
            return f"({a} / {b})" if t.is_float else f"_kd.idiv({a}, {b})"
        if op == "%":
            return f"_kd.irem({a}, {b})" if not t.is_float else f"np.fmod({a}, {b})"
        if op in ("min", "max"):
            return f"np.{'minimum' if op == 'min' else 'maximum'}({a}, {b})"  # (NaN in, NaN out)
        if op == "pow":
            return f"np.power({a}, {b})"
        raise NotImplementedError(f"interpreter: binary operator {op}")

    def e_unop(self, e):
        a = self.x(e.a)
        if e.op == "neg":
            return f"(-{a})"
        if e.op == "not":
            return f"np.logical_not({a})"
        return f"(~{a})"

    def e_cmp(self, e):
        return f"({self.x(e.a)} {e.op} {self.x(e.b)})"

    def e_logic(self, e):
        if isinstance(e.dtype, VecType):
            return f"np.logical_{e.op}({self.x(e.a)}, {self.x(e.b)})"
        return f"np.bool_({self.x(e.a)} {e.op} {self.x(e.b)})"

    def e_select(self, e):
        if isinstance(e.cond.dtype, VecType):
            return f"np.where({self.x(e.cond)}, {self.x(e.a)}, {self.x(e.b)}).astype({self.dtype(e.dtype)})"
        return f"({self.x(e.a)} if {self.x(e.cond)} else {self.x(e.b)})"

    def e_cast(self, e):
        return f"_kd.cast({self.x(e.a)}, {self.dtype(e.dtype)})"

    def e_bitcast(self, e):
        return f"_kd.bitcast({self.x(e.a)}, {self.dtype(e.dtype)})"

    def e_math(self, e):
        args = ", ".join(self.x(a) for a in e.args)
        if e.fn in _MATH:
            return f"{_MATH[e.fn]}({args})"
        return f"_kd.math_{e.fn}({args})"

    def _read(self, name: str, e) -> str:
        """A (vector) load of `e.offset` from the tensor or shared array `name`."""
        if isinstance(e.dtype, VecType):
            return f"{self.names[name]}.load_vec({self.x(e.offset)}, {e.dtype.lanes})"
        return f"{self.names[name]}.load({self.x(e.offset)})"

    def e_load(self, e):
        return self._read(e.tensor, e)

    def e_shared_load(self, e):
        return self._read(e.array, e)

    def e_tensor_dim(self, e):
        return f"{self.names[e.tensor]}.{'dims' if e.attr == 'shape' else 'steps'}[{e.axis}]"

    def e_position(self, e):
        if e.kind in ("unit_flat", "plane_pos", "lane_pos"):
            return {"unit_flat": "_kd_flat", "plane_pos": "_kd_plane", "lane_pos": "_kd_lane"}[e.kind]
        table = {"cube_pos": "_kd_cube", "cube_count": "_kd_grid", "unit_pos": "_kd_unit"}[e.kind]
        return f"{table}[{e.axis}]"

    def e_vec_make(self, e):
        return f"np.array([{', '.join(self.x(a) for a in e.elems)}], {self.dtype(e.dtype)})"

    def e_vec_extract(self, e):
        return f"{self.x(e.a)}[{e.lane}]"

    def e_frag_get(self, e):
        return f"_kd_frags[{e.frag!r}][_kd_lane + {e.elem * self.k.plane_dim}]"


def render(kir: ir.KernelIR) -> Rendering:
    """The Python source of `kir`'s unit generator, with its line map."""
    return InterpreterRenderer(kir).render()
