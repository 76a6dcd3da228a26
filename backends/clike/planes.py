"""Plane operations through cube-shared memory: the C-like default where a dialect has no
native warp / sub-group instructions (mixed into CLikeRenderer)."""
from __future__ import annotations

from kerneldsl import ir
from kerneldsl.dtypes import boolean, i32, i64


class PlaneEmulation:
    """`plane_op` hook default and the PlaneOp statement."""

    def s_plane_op(self, s):
        for line in self.plane_op(s):
            self.emit(line)
        if self.plane_fence and s.op != "elect":
            self.emit(self.plane_fence)

    def plane_op(self, s: ir.PlaneOp) -> list:
        """A plane operation through cube-shared memory: every unit writes its value, a
        barrier, each unit combines its plane's lanes in lane order (the CPU's order, so
        results match bit for bit), a barrier. Semantics: tests/reference/planes.py."""
        dst = self.var(s.dst)
        op = s.op
        if op == "elect":
            return [f"{dst} = (kd_lane == 0);"]
        t = s.dtype  # of the result; the value's type differs for ballot (bool -> u32)
        vt = s.value.dtype
        st = self.type_names[i32] if vt is boolean else self.type_names[vt]
        buf = f"(({self.qualified(self.local_ptr, st)}*)kd_plane_buf)"
        val = self.x(s.value)
        lines = [f"{buf}[kd_unit] = {val};", self.local_barrier_stmt]
        at = f"{buf}[kd_plane * {self.P} + kd_l]"
        if vt is boolean:
            at = f"({at} != 0)"
        T = self.type_names[t]
        if op in ir.PLANE_REDUCE_OPS:
            lines.append(f"{{ {T} kd_acc = {buf}[kd_plane * {self.P}];")
            lines.append(f"  for (int kd_l = 1; kd_l < kd_nlanes; ++kd_l) kd_acc = {self._combine(op, 'kd_acc', at, t)};")
            lines.append(f"  {dst} = kd_acc; }}")
        elif op in ("inclusive_sum", "exclusive_sum"):
            end = "kd_lane" if op == "exclusive_sum" else "kd_lane + 1"
            lines.append(f"{{ {T} kd_acc = {self.zero(t)};")
            lines.append(f"  for (int kd_l = 0; kd_l < {end}; ++kd_l) kd_acc = {self._combine('sum', 'kd_acc', at, t)};")
            lines.append(f"  {dst} = kd_acc; }}")
        elif op in ("all", "any", "ballot"):
            if op == "ballot":
                init, comb = "0u", f"kd_acc | ({at} ? (1u << kd_l) : 0u)"
            else:
                init = "true" if op == "all" else "false"
                comb = f"kd_acc {'&&' if op == 'all' else '||'} {at}"
            lines.append(f"{{ {T} kd_acc = {init};")
            lines.append(f"  for (int kd_l = 0; kd_l < kd_nlanes; ++kd_l) kd_acc = {comb};")
            lines.append(f"  {dst} = kd_acc; }}")
        else:
            i64t = self.type_names[i64]
            a = self.x(s.arg)
            if op == "broadcast":
                src = f"(({i64t})({a}) >= 0 && ({i64t})({a}) < kd_nlanes) ? ({i64t})({a}) : 0"
            elif op == "shuffle":
                src = f"(int)((unsigned {i64t})({i64t})({a}) % {self.P}u)"
                src = f"({src} < kd_nlanes) ? {src} : kd_lane"
            else:  # shuffle_xor
                x = f"(({i64t})({a}) ^ ({i64t})kd_lane)"
                src = f"({x} >= 0 && {x} < kd_nlanes) ? {x} : kd_lane"
            lines.append(f"{{ {i64t} kd_l = {src};")
            lines.append(f"  {dst} = {at}; }}")
        lines.append(self.local_barrier_stmt)
        return lines

    def _combine(self, op, a, b, t) -> str:
        if op in ("sum", "inclusive_sum", "exclusive_sum"):
            return self.binop("+", a, b, t)
        if op == "prod":
            return self.binop("*", a, b, t)
        return self.math_call(op, [a, b], t)

