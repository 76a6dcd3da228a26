"""Memory of the C-like renderer: tensor and shared loads (scalar and wide), bool storage,
and atomics on global and shared memory (mixed into CLikeRenderer)."""
from __future__ import annotations

from kerneldsl.dtypes import boolean, i64


class Memory:
    """Loads, wide vector loads and atomics."""

    def to_mem(self, x: str, t) -> str:
        return f"(({self.mem_type_names[t]})({x}))" if t is boolean else x

    def from_mem(self, x: str, t) -> str:
        return f"({x} != 0)" if t is boolean else x

    def e_load(self, e):
        p = self.tensors[e.tensor]
        off = self.x(e.offset)
        v = self.from_mem(f"{self.tensor(e.tensor)}[{off}]", p.dtype)
        if e.checked:
            chk = self._check(off, 1, f"{self.tensor(e.tensor)}_n", self.param_index(e.tensor), e.loc)
            return f"({chk} ? {v} : {self.zero(p.dtype)})"
        return v

    def e_shared_load(self, e):
        d = self.k.shared[e.array]
        off = self.x(e.offset)
        v = self.from_mem(f"{self.shared(e.array)}[{off}]", d.dtype)
        if e.checked:
            chk = self._check(off, 1, self.literal(d.size, i64), -1, e.loc)
            return f"({chk} ? {v} : {self.zero(d.dtype)})"
        return v

    def vector_load(self, e) -> list:
        """A wide load: hoisted into a vector temp before the statement, or lane by lane
        where the statement may not evaluate it (right side of and/or, select arms)."""
        t = e.dtype
        elem = t.elem
        off = self.x(e.offset)
        base = self.tensor(e.tensor)
        if self._no_hoist:
            out = []
            for i in range(t.lanes):
                v = self.from_mem(f"{base}[{off} + {i}]", elem)
                if e.checked:
                    chk = self._check(off, t.lanes, f"{base}_n", self.param_index(e.tensor), e.loc)
                    v = f"({chk} ? {v} : {self.zero(elem)})"
                out.append(v)
            return out
        key = id(e)
        if key not in self._memo:
            vt = self.vec_type(self.mem_type_names[elem], t.lanes)
            tmp = self.temp(vt)
            load = self.vec_load(elem, f"({base} + {off})", t.lanes)
            if e.checked:
                chk = self._check(off, t.lanes, f"{base}_n", self.param_index(e.tensor), e.loc)
                self.emit(f"if ({chk}) {tmp} = {load}; else {tmp} = ({vt})(0);")
            else:
                self.emit(f"{tmp} = {load};")
            self._memo[key] = [self.from_mem(self.vec_lane(tmp, i), elem) for i in range(t.lanes)]
        return self._memo[key]


    def s_atomic(self, s):
        t = s.dtype
        if s.space == "global":
            base, limit, index = self.tensor(s.target), f"{self.tensor(s.target)}_n", self.param_index(s.target)
            space = "global"
        else:
            d = self.k.shared[s.target]
            base, limit, index, space = self.shared(s.target), self.literal(d.size, i64), -1, "shared"
        off = self.x(s.offset)
        value = self.x(s.value)
        compare = self.x(s.compare) if s.compare is not None else None
        call = self.atomic(s.op, space, f"({base} + {off})", value, compare, t)
        if s.checked:
            call = f"({self._check(off, 1, limit, index, s.loc)} ? {call} : {self.zero(t)})"
        self.emit(f"{self.var(s.dst)} = {call};" if s.dst else f"(void){call};")

