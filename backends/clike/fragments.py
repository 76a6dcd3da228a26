"""Matrix fragments and group products as an exact emulation in cube-shared memory: the
C-like default where a dialect has no tensor-core instructions (mixed into CLikeRenderer)."""
from __future__ import annotations

from kerneldsl import ir, tile_layout
from kerneldsl.dtypes import f32, i64

from .text import cname


class FragmentEmulation:
    """`frag_decls` / `frag_op` / `group_mma` hook defaults and the fragment statements."""

    def s_frag_op(self, s):
        for line in self.frag_op(s):
            self.emit(line)

    def s_group_mma(self, s):
        for line in self.group_mma(s):
            self.emit(line)

    def s_group_wait(self, s):
        for line in self.group_wait(s):
            self.emit(line)

    def frag_bytes(self) -> int:
        return sum(4 * self.planes * ft.rows * ft.cols for ft in self.k.frags.values())

    def frag(self, name: str) -> str:
        return cname("f_", name)

    def frag_decls(self) -> list:
        """Fragment storage: f32 per element, one tile per plane, in cube-shared memory."""
        return [f"{self.local_decl} float {self.frag(n)}[{self.planes * ft.rows * ft.cols}];"
                for n, ft in self.k.frags.items()]

    def frag_op(self, s) -> list:
        """Exact emulation: the plane's lanes share the tile's elements; barriers before and
        after order the tile with the plane's other fragment operations."""
        body = []
        if isinstance(s, ir.FragFill):
            ft = self.k.frags[s.frag]
            body.append(f"{self._tile(s.frag)}[kd_e] = {self.x(s.value)};")
        elif isinstance(s, ir.FragLoad):
            ft = self.k.frags[s.frag]
            mem, dt = self._frag_mem(s.space, s.src)
            r, c = f"(kd_e / {ft.cols})", f"(kd_e % {ft.cols})"
            if ft.layout == "col" and ft.role != "acc":
                r, c = c, r
            off, stride = self.x(s.offset), self.x(s.stride)
            at = f"{off} + {r} * {stride} + {c}"
            v = self.cast(self.from_mem(f"{mem}[{at}]", dt), dt, f32)
            if s.checked:
                v = f"({self._frag_check(s.space, s.src, at, s.loc)} ? {v} : 0.0f)"
            body.append(f"{self._tile(s.frag)}[kd_e] = {v};")
        elif isinstance(s, ir.FragStore):
            ft = self.k.frags[s.frag]
            mem, dt = self._frag_mem(s.space, s.dst)
            r, c = f"(kd_e / {ft.cols})", f"(kd_e % {ft.cols})"
            off, stride = self.x(s.offset), self.x(s.stride)
            v = self.to_mem(self.cast(f"{self._tile(s.frag)}[kd_e]", f32, dt), dt)
            at = f"{off} + {r} * {stride} + {c}"
            guard = f"if ({self._frag_check(s.space, s.dst, at, s.loc)}) " if s.checked else ""
            body.append(f"{guard}{mem}[{at}] = {v};")
        else:
            ft = self.k.frags[s.acc]
            n, k = ft.n, ft.k
            a, b, acc = self._tile(s.a), self._tile(s.b), self._tile(s.acc)
            body += [f"int kd_i = kd_e / {n}, kd_j = kd_e % {n};",
                     f"float kd_s = {acc}[kd_e];",
                     f"for (int kd_k = 0; kd_k < {k}; ++kd_k) "
                     f"kd_s = kd_s + {a}[kd_i * {k} + kd_k] * {b}[kd_k * {n} + kd_j];",
                     f"{acc}[kd_e] = kd_s;"]
        return ([self.local_barrier_stmt, f"for (int kd_e = kd_lane; kd_e < {ft.rows * ft.cols}; kd_e += kd_nlanes) {{"]
                + ["    " + b for b in body] + ["}", self.local_barrier_stmt])

    def group_mma(self, s) -> list:
        """Exact emulation, plane by plane: each plane owns 16 rows of the group's tile (the
        g-th plane of a group rows 16g ..), its lanes share those rows' elements."""
        ft = self.k.frags[s.acc]
        n, k, rows = ft.n, s.k, ft.rows
        acc = self._tile(s.acc)
        if s.a_tile is None:
            a = f"{self._tile(s.a)}[kd_i * {k} + kd_k]"
        else:
            a = self._tile_elem(s.a_tile, f"(kd_plane % {ir.GROUP_PLANES}) * {rows} + kd_i", "kd_k")
        b = self._tile_elem(s.b_tile, "kd_k", "kd_j")
        body = [f"int kd_i = kd_e / {n}, kd_j = kd_e % {n};",
                f"float kd_s = {acc + '[kd_e]' if s.accumulate else '0.0f'};",
                f"for (int kd_k = 0; kd_k < {k}; ++kd_k) kd_s = kd_s + {a} * {b};",
                f"{acc}[kd_e] = kd_s;"]
        return ([self.local_barrier_stmt, f"for (int kd_e = kd_lane; kd_e < {rows * n}; kd_e += kd_nlanes) {{"]
                + ["    " + x for x in body] + ["}", self.local_barrier_stmt])

    def group_wait(self, s) -> list:
        return []  # the emulated product is complete when group_mma returns

    def _tile_elem(self, t: ir.SharedTile, r: str, c: str) -> str:
        """Element (r, c) of a shared tile as f32 (the layout of kd.tile_offset)."""
        sr, sc = (c, r) if t.transposed else (r, c)
        at = f"{self.x(t.offset)} + {tile_layout.c_offset(sr, sc, t.stored_rows, t.swizzle)}"
        dt = self.k.shared[t.src].dtype
        return self.cast(self.from_mem(f"{self.shared(t.src)}[{at}]", dt), dt, f32)

    def _frag_check(self, space, name, at, loc) -> str:
        """The bounds-check call for element offset `at` of a fragment's tensor/shared array."""
        if space == "global":
            return self._check(f"({at})", 1, f"{self.tensor(name)}_n", self.param_index(name), loc)
        return self._check(f"({at})", 1, self.literal(self.k.shared[name].size, i64), -1, loc)

    def _elem(self, name, i) -> str:
        """This lane's element i of an emulated fragment: tile element lane + i * PLANE_DIM."""
        return f"{self._tile(name)}[kd_lane + {i * self.k.plane_dim}]"

    def e_frag_get(self, e):
        return self._elem(e.frag, e.elem)

    def s_frag_set(self, s):
        self.emit(f"{self._elem(s.frag, s.elem)} = {self.x(s.value)};")

    def s_frag_convert(self, s):
        ft = self.k.frags[s.dst]
        dt = ft.dtype
        for i in range(ft.rows * ft.cols // self.k.plane_dim):
            v = self.cast(self.cast(self._elem(s.src, i), f32, dt), dt, f32)
            self.emit(f"{self._elem(s.dst, i)} = {v};")

    def _tile(self, name) -> str:
        ft = self.k.frags[name]
        return f"({self.frag(name)} + kd_plane * {ft.rows * ft.cols})"

    def _frag_mem(self, space, name):
        if space == "global":
            return self.tensor(name), self.tensors[name].dtype
        return self.shared(name), self.k.shared[name].dtype
