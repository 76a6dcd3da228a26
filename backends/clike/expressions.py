"""Expressions of the C-like renderer: scalars, arithmetic, comparisons, casts and math,
and vectors as lists of lanes (mixed into CLikeRenderer)."""
from __future__ import annotations

from kerneldsl import ir
from kerneldsl.dtypes import VecType, boolean, f32, i64, u8

from .text import HALVES


class Expressions:
    """Handlers of expression nodes (see EXPRESSION_HANDLERS and VECTOR_HANDLERS in base.py)."""

    # ------------------------------------------------------------------ vectors, lane by lane
    def v_var(self, e) -> list:
        return [f"{self.var(e.name)}_{i}" for i in range(e.dtype.lanes)]

    def v_vec_make(self, e) -> list:
        return [self.x(a) for a in e.elems]

    def v_binop(self, e) -> list:
        a, b = self._lanes_of(e.a, e.dtype.lanes), self._lanes_of(e.b, e.dtype.lanes)
        return [self.binop(e.op, x, y, e.dtype.elem) for x, y in zip(a, b)]

    def v_unop(self, e) -> list:
        return [self.unop(e.op, x, e.dtype.elem) for x in self.lanes(e.a)]

    def v_cmp(self, e) -> list:
        a, b = self.lanes(e.a), self.lanes(e.b)
        return [self.compare(e.op, x, y, e.a.dtype.elem) for x, y in zip(a, b)]

    def v_select(self, e) -> list:
        n = e.dtype.lanes
        c, a, b = self._lanes_of(e.cond, n), self._lanes_of(e.a, n), self._lanes_of(e.b, n)
        return [f"({ci} ? {ai} : {bi})" for ci, ai, bi in zip(c, a, b)]

    def v_cast(self, e) -> list:
        src = e.a.dtype.elem if isinstance(e.a.dtype, VecType) else e.a.dtype
        return [self.cast(x, src, e.dtype.elem) for x in self._lanes_of(e.a, e.dtype.lanes)]

    def v_math(self, e) -> list:
        n = e.dtype.lanes
        args = [self._lanes_of(a, n) for a in e.args]
        t = e.args[0].dtype.elem if isinstance(e.args[0].dtype, VecType) else e.args[0].dtype
        return [self.math_call(e.fn, [a[i] for a in args], t) for i in range(n)]

    def _lanes_of(self, e, n) -> list:
        """Lanes of `e`, or the scalar `e` repeated n times."""
        return self.lanes(e) if isinstance(e.dtype, VecType) else [self.x(e)] * n

    # ------------------------------------------------------------------ scalars
    def e_const(self, e):
        return self.literal(e.value, e.dtype)

    def e_var(self, e):
        return self.var(e.name)

    def e_tensor_dim(self, e):
        return f"(int){self.tensor(e.tensor)}_{'s' if e.attr == 'shape' else 'st'}{e.axis}"

    def e_position(self, e):
        if e.kind == "cube_pos":
            return f"kd_cube_{'xyz'[e.axis]}"
        if e.kind == "cube_count":
            return f"kd_count_{'xyz'[e.axis]}"
        if e.kind == "unit_flat":
            return "kd_unit"
        if e.kind == "plane_pos":
            return "kd_plane"
        if e.kind == "lane_pos":
            return "kd_lane"
        return f"kd_unit_{'xyz'[e.axis]}"

    def e_vec_extract(self, e):
        return self.lanes(e.a)[e.lane]

    def e_binop(self, e):
        return self.binop(e.op, self.x(e.a), self.x(e.b), e.dtype)

    def binop(self, op, a, b, t) -> str:
        if op in ("min", "max", "pow") or (op == "%" and t.is_float):
            return self.math_call(op, [a, b], t)
        text = f"({a} {op} {b})"
        if t is u8 or t is boolean:  # C promotes narrow operands to int
            return self.cast_to(t, text)
        return text

    def e_unop(self, e):
        return self.unop(e.op, self.x(e.a), e.dtype)

    def unop(self, op, a, t) -> str:
        if op == "not":
            return f"(!{a})"
        text = f"(~{a})" if op == "invert" else f"(-{a})"
        return self.cast_to(t, text) if t is u8 else text

    def e_cmp(self, e):
        return self.compare(e.op, self.x(e.a), self.x(e.b), e.a.dtype)

    def compare(self, op, a, b, t) -> str:
        return f"({a} {op} {b})"

    def e_logic(self, e):
        a = self.x(e.a)
        self._no_hoist += 1  # the right side may not run: nothing of it moves before the statement
        try:
            b = self.x(e.b)
        finally:
            self._no_hoist -= 1
        return f"({a} {'&&' if e.op == 'and' else '||'} {b})"

    def e_select(self, e):
        c = self.x(e.cond)
        self._no_hoist += 1
        try:
            a, b = self.x(e.a), self.x(e.b)
        finally:
            self._no_hoist -= 1
        return f"({c} ? {a} : {b})"

    def e_cast(self, e):
        if isinstance(e.a, ir.TensorDim) and e.dtype is i64:
            return f"{self.tensor(e.a.tensor)}_{'s' if e.a.attr == 'shape' else 'st'}{e.a.axis}"
        return self.cast(self.x(e.a), e.a.dtype, e.dtype)

    def cast(self, x: str, src, dst) -> str:
        if src == dst:
            return x
        if src in HALVES:
            return self.cast(self.half_to_float(x, src), f32, dst)
        if dst in HALVES:
            return self.float_to_half(self.cast(x, src, f32), dst)
        if dst is boolean:
            return f"({x} != {self.zero(src)})"
        return self.cast_to(dst, x)

    def e_bitcast(self, e):
        return self.bitcast(self.x(e.a), e.a.dtype, e.dtype)

    def e_math(self, e):
        t = e.args[0].dtype
        return self.math_call(e.fn, [self.x(a) for a in e.args], t)

    def e_vec_make(self, e):
        raise NotImplementedError("a vector in a scalar context")

