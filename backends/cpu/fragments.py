"""Matrix fragments and group products on the CPU: per-plane f32 tiles in the kernel's frame,
an exact emulation run between regions (mixed into CpuRenderer)."""
from __future__ import annotations

from llvmlite import ir as L

from kerneldsl import ir, tile_layout
from kerneldsl.dtypes import f32

from .llvm_types import F32, I64


class Fragments:
    """Fragment split points, FragGet / FragSet / FragConvert and the shared-tile layout."""

    def frag_ptr(self, name, base_unit, elem):
        ft, arr = self.frag_mem[name]
        plane = self.b.udiv(base_unit, L.Constant(I64, self.P))
        idx = self.b.add(self.b.mul(plane, L.Constant(I64, ft.rows * ft.cols)), elem)
        return self.b.gep(arr, [L.Constant(I64, 0), idx])

    def frag_elem_ptr(self, name, elem):
        """This unit's element `elem` of a fragment: tile element lane + elem * PLANE_DIM."""
        ft, arr = self.frag_mem[name]
        b = self.b
        u = self.unit_index()
        P = L.Constant(I64, self.P)
        idx = b.add(b.mul(b.udiv(u, P), L.Constant(I64, ft.rows * ft.cols)),
                    b.add(b.urem(u, P), L.Constant(I64, elem * self.P)))
        return b.gep(arr, [L.Constant(I64, 0), idx])

    def e_frag_get(self, e):
        return self.b.load(self.frag_elem_ptr(e.frag, e.elem))

    def s_frag_set(self, s):
        self.b.store(self.expr(s.value), self.frag_elem_ptr(s.frag, s.elem))

    def s_frag_convert(self, s):
        ft = self.k.frags[s.dst]
        dt = ft.dtype
        for i in range(ft.rows * ft.cols // self.P):
            v = self.b.load(self.frag_elem_ptr(s.src, i))
            self.b.store(self.cast(self.cast(v, f32, dt), dt, f32), self.frag_elem_ptr(s.dst, i))

    def frag_fill(self, s, base):
        v = self.cast(self.at_unit(s.value, base), f32, f32)
        ft, _ = self.frag_mem[s.frag]
        self.counted_loop(ft.rows * ft.cols, lambda e: self.b.store(v, self.frag_ptr(s.frag, base, e)), "ffill")

    def frag_load(self, s, base_unit):
        b = self.b
        ft, _ = self.frag_mem[s.frag]
        off = self.at_unit(s.offset, base_unit)
        stride = self.at_unit(s.stride, base_unit)
        mem, dt = self._mem_base(s.space, s.src)
        limit, index = self._mem_limit(s.space, s.src)
        cols = L.Constant(I64, ft.cols)

        def body(e):
            r, c = b.udiv(e, cols), b.urem(e, cols)
            if ft.layout == "row" or ft.role == "acc":
                o = b.add(off, b.add(b.mul(r, stride), c))
            else:
                o = b.add(off, b.add(b.mul(c, stride), r))
            result = {}

            def do(at):
                result["v"] = self.cast(self.from_mem(b.load(b.gep(mem, [at])), dt), dt, f32)
            self.guarded(o, limit, 1, do, s.checked, index, s.loc, result=result)
            b.store(result["v"], self.frag_ptr(s.frag, base_unit, e))
        self.counted_loop(ft.rows * ft.cols, body, "fload")

    def frag_store(self, s, base_unit):
        b = self.b
        ft, _ = self.frag_mem[s.frag]
        off = self.at_unit(s.offset, base_unit)
        stride = self.at_unit(s.stride, base_unit)
        mem, dt = self._mem_base(s.space, s.dst)
        limit, index = self._mem_limit(s.space, s.dst)
        cols = L.Constant(I64, ft.cols)

        def body(e):
            r, c = b.udiv(e, cols), b.urem(e, cols)
            o = b.add(off, b.add(b.mul(r, stride), c))
            v = self.cast(b.load(self.frag_ptr(s.frag, base_unit, e)), f32, dt)
            self.guarded(o, limit, 1, lambda at: b.store(v, b.gep(mem, [at])), s.checked, index, s.loc)
        self.counted_loop(ft.rows * ft.cols, body, "fstore")

    def frag_mma(self, s, base_unit):
        b = self.b
        ft = self.frag_mem[s.acc][0]
        m, n, k = ft.m, ft.n, ft.k

        def row(i):
            def col(j):
                cidx = b.add(b.mul(i, L.Constant(I64, n)), j)
                cptr = self.frag_ptr(s.acc, base_unit, cidx)
                acc = b.load(cptr)
                for kk in range(k):
                    a = b.load(self.frag_ptr(s.a, base_unit, b.add(b.mul(i, L.Constant(I64, k)), L.Constant(I64, kk))))
                    bb = b.load(self.frag_ptr(s.b, base_unit, b.add(L.Constant(I64, kk * n), j)))
                    acc = b.fadd(acc, b.fmul(a, bb))
                b.store(acc, cptr)
            self.counted_loop(n, col, "mma.j")
        self.counted_loop(m, row, "mma.i")

    def tile_load(self, t: ir.SharedTile, off, r, c):
        """Element (r, c) (i64 values) of a shared tile, as f32, in kd.tile_offset's layout of
        the matrix as stored (t's transpose when t.transposed)."""
        b = self.b
        sr, sc = (c, r) if t.transposed else (r, c)
        k = lambda v: L.Constant(I64, v)  # noqa: E731
        w, n = tile_layout.band_width(t.swizzle), tile_layout.chunks(t.swizzle)
        band = b.mul(b.udiv(sc, k(w)), k(t.stored_rows * w))
        chunk = b.xor(b.udiv(b.urem(sc, k(w)), k(8)), b.urem(b.udiv(sr, k(tile_layout.rows_per_flip(t.swizzle))), k(n)))
        inner = b.add(b.mul(chunk, k(8)), b.urem(sc, k(8)))
        at = b.add(off, b.add(band, b.add(b.mul(sr, k(w)), inner)))
        mem, dt = self._mem_base("shared", t.src)
        return self.cast(self.from_mem(b.load(b.gep(mem, [at])), dt), dt, f32)

    def group_mma(self, s: ir.GroupMma, base_unit):
        """One plane's 16 rows of a group product: acc[i, j] += sum_k A[16 g + i, k] B[k, j]."""
        b = self.b
        ft = self.frag_mem[s.acc][0]
        n, k = ft.n, s.k
        g = b.urem(b.udiv(base_unit, L.Constant(I64, self.P)), L.Constant(I64, ir.GROUP_PLANES))
        row0 = b.mul(g, L.Constant(I64, ft.rows))
        a_off = b.sext(self.at_unit(s.a_tile.offset, base_unit), I64) if s.a_tile else None
        b_off = b.sext(self.at_unit(s.b_tile.offset, base_unit), I64)

        def row(i):
            def col(j):
                cptr = self.frag_ptr(s.acc, base_unit, b.add(b.mul(i, L.Constant(I64, n)), j))
                if not s.accumulate:
                    b.store(L.Constant(F32, 0.0), cptr)

                def step(kk):
                    if s.a_tile is None:
                        x = b.load(self.frag_ptr(s.a, base_unit, b.add(b.mul(i, L.Constant(I64, k)), kk)))
                    else:
                        x = self.tile_load(s.a_tile, a_off, b.add(row0, i), kk)
                    y = self.tile_load(s.b_tile, b_off, kk, j)
                    b.store(b.fadd(b.load(cptr), b.fmul(x, y)), cptr)
                self.counted_loop(k, step, "gmma.k")
            self.counted_loop(n, col, "gmma.j")
        self.counted_loop(ft.rows, row, "gmma.i")

    # -------------------------------------------------------------- split points (SPLIT_HANDLERS)
    def split_frag_fill(self, s):
        self.per_plane(lambda base, n: self.frag_fill(s, base))

    def split_frag_load(self, s):
        self.per_plane(lambda base, n: self.frag_load(s, base))

    def split_frag_store(self, s):
        self.per_plane(lambda base, n: self.frag_store(s, base))

    def split_frag_mma(self, s):
        self.per_plane(lambda base, n: self.frag_mma(s, base))

    def split_group_mma(self, s):
        self.per_plane(lambda base, n: self.group_mma(s, base))

    def split_group_wait(self, s):
        """Nothing: group_mma completes at once here; the split point is all a wait needs."""
