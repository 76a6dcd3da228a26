"""Memory on the CPU: bounds-checked access, bool storage, tensor and shared loads and stores
(scalar and wide), and the bases of fragment memory operands (mixed into CpuRenderer)."""
from __future__ import annotations

from llvmlite import ir as L

from kerneldsl.dtypes import VecType, boolean

from . import streaming
from .llvm_types import I8, I32, I64, mem_type


class Memory:
    """Loads, stores and bounds checks."""

    def _tensor_index(self, name):
        return [p.name for p in self.k.params].index(name)

    def guarded(self, off, limit, lanes, do, checked, index, loc, value_type=None, result=None):
        """Run do(off) — when `checked`, only if 0 <= off and off + lanes <= limit, else
        record the failure in the error buffer (and yield zero for loads)."""
        if not checked:
            do(off)
            return
        b = self.b
        last = b.add(off, L.Constant(I64, lanes - 1))
        ok = b.and_(b.icmp_signed(">=", off, L.Constant(I64, 0)), b.icmp_signed("<", last, limit))
        good, bad, join = self.new_block("chk.ok"), self.new_block("chk.bad"), self.new_block("chk.end")
        b.cbranch(ok, good, bad)
        b.position_at_end(bad)
        line = loc.line if loc is not None else 0
        for slot, v in enumerate((L.Constant(I64, 1), L.Constant(I64, index), off, L.Constant(I64, line))):
            b.store(v, b.gep(self.errbuf, [L.Constant(I64, slot)]))
        b.branch(join)
        b.position_at_end(good)
        do(off)
        good_end = b.block
        b.branch(join)
        b.position_at_end(join)
        if result is not None and "v" in result:
            v = result["v"]
            if isinstance(v, list):
                phis = []
                for x in v:
                    ph = b.phi(x.type)
                    ph.add_incoming(x, good_end)
                    ph.add_incoming(L.Constant(x.type, None), bad)
                    phis.append(ph)
                result["v"] = phis
            else:
                ph = b.phi(v.type)
                ph.add_incoming(v, good_end)
                ph.add_incoming(L.Constant(v.type, None), bad)
                result["v"] = ph

    def to_mem(self, v, t):
        return self.b.zext(v, I8) if t is boolean else v

    def from_mem(self, v, t):
        return self.b.icmp_unsigned("!=", v, L.Constant(I8, 0)) if t is boolean else v

    def store_tensor(self, name, offset, value_expr, checked, loc):
        p, base, extent, _, _ = self.tensors[name]
        off = self.expr(offset)
        v = self.expr(value_expr)
        t = value_expr.dtype
        b = self.b

        def do(o):
            ptr = b.gep(base, [o])
            if isinstance(t, VecType):
                vt = L.VectorType(mem_type(t.elem), t.lanes)
                vec = L.Constant(vt, L.Undefined)
                for i, x in enumerate(v):
                    vec = b.insert_element(vec, self.to_mem(x, t.elem), L.Constant(I32, i))
                st = b.store(vec, b.bitcast(ptr, vt.as_pointer()), align=t.elem.itemsize)
            else:
                st = b.store(self.to_mem(v, t), ptr)
            if self.k.streaming_stores:  # the stores streaming.py may make non-temporal
                st.set_metadata("tbaa", self.tensor_store_tag())
        self.guarded(off, extent, t.lanes if isinstance(t, VecType) else 1, do, checked,
                     self._tensor_index(name), loc)

    def tensor_store_tag(self):
        """The TBAA tag of every tensor store of a kd.streaming_stores() kernel, the one mark
        that survives vectorisation (streaming.TENSOR_TYPE; one type for all, so no two
        accesses become "no alias" by it: untagged ones alias everything)."""
        tag = getattr(self, "_tensor_store_tag", None)
        if tag is None:
            m = self.module
            root = m.add_metadata([L.MetaDataString(m, "kd.tbaa")])
            kind = m.add_metadata([L.MetaDataString(m, streaming.TENSOR_TYPE), root, L.Constant(I64, 0)])
            tag = self._tensor_store_tag = m.add_metadata([kind, kind, L.Constant(I64, 0)])
        return tag

    def e_load(self, e):
        p, base, extent, _, _ = self.tensors[e.tensor]
        off = self.expr(e.offset)
        t = e.dtype
        b = self.b
        result = {}

        def do(o):
            ptr = b.gep(base, [o])
            if isinstance(t, VecType):
                vt = L.VectorType(mem_type(t.elem), t.lanes)
                vec = b.load(b.bitcast(ptr, vt.as_pointer()), align=t.elem.itemsize)
                result["v"] = [self.from_mem(b.extract_element(vec, L.Constant(I32, i)), t.elem)
                               for i in range(t.lanes)]
            else:
                result["v"] = self.from_mem(b.load(ptr), t)
        self.guarded(off, extent, t.lanes if isinstance(t, VecType) else 1, do, e.checked,
                     self._tensor_index(e.tensor), e.loc, result=result)
        return result["v"]

    def e_shared_load(self, e):
        d, arr = self.shared[e.array]
        off = self.expr(e.offset)
        result = {}

        def do(o):
            result["v"] = self.from_mem(self.b.load(self.b.gep(arr, [L.Constant(I64, 0), o])), d.dtype)
        self.guarded(off, L.Constant(I64, d.size), 1, do, e.checked, -1, e.loc, result=result)
        return result["v"]

    def _mem_base(self, space, name):
        if space == "global":
            p, base, extent, _, _ = self.tensors[name]
            return base, p.dtype
        d, arr = self.shared[name]
        return self.b.gep(arr, [L.Constant(I64, 0), L.Constant(I64, 0)]), d.dtype

    def _mem_limit(self, space, name):
        """(elements reachable, parameter index or -1 for shared) for a bounds check."""
        if space == "global":
            return self.tensors[name][2], self._tensor_index(name)
        return L.Constant(I64, self.shared[name][0].size), -1
