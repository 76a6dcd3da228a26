"""IR -> OpenCL C (1.2), as a dialect of the shared C-like renderer (backends/clike/).

OpenCL C 1.2 is the common ground of PoCL and the GPU drivers: f16 and bf16 are
16-bit storage converted with `vload_half`/`vstore_half` and bit operations (no
`cl_khr_fp16` needed), float atomic add is a compare-exchange loop, plane
operations run through local memory unless the device offers sub-groups
(`cl_khr_subgroups`, see `SubgroupRenderer`), and the matrix primitive is the
base's exact emulation.
"""
from __future__ import annotations

from pathlib import Path

from kerneldsl import ir
from kerneldsl.dtypes import bf16, boolean, f16, f32, f64, i32, i64, u8, u32

from ..clike import CLikeRenderer
from .capabilities import INT64_ATOMICS

_OCL_TYPES = {f32: "float", f64: "double", i32: "int", u32: "uint", i64: "long", u8: "uchar", boolean: "bool",
              f16: "ushort", bf16: "ushort"}
_ATOMIC_FN = {"add": "atomic_add", "min": "atomic_min", "max": "atomic_max", "exchange": "atomic_xchg",
              "and": "atomic_and", "or": "atomic_or", "xor": "atomic_xor"}
_AS_TYPE = {f32: "as_float", f64: "as_double", i32: "as_int", u32: "as_uint", i64: "as_long", u8: "as_uchar",
            f16: "as_ushort", bf16: "as_ushort"}


class OpenCLRenderer(CLikeRenderer):
    dialect = "opencl"
    kernel_prefix = "__kernel void"
    helper_prefix = "static inline"
    global_ptr = "__global"
    local_ptr = "__local"
    local_decl = "__local"
    pass_tensor_offset = True
    type_names = _OCL_TYPES
    mem_type_names = {**_OCL_TYPES, boolean: "uchar"}
    arg_type_names = {**_OCL_TYPES, boolean: "uchar"}
    i64_suffix = "L"
    barrier_stmt = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"
    local_barrier_stmt = "barrier(CLK_LOCAL_MEM_FENCE);"
    template_dirs = (str(Path(__file__).resolve().parent / "templates"),)
    template_name = "kernel.cl.j2"
    flat_barriers = True  # PoCL mishandled barriers inside an if (clike/flat_barriers.py)

    def template_context(self) -> dict:
        return {"fp64": self.caps.supports_dtype(f64), "extensions": self.extensions()}

    def extensions(self) -> list:
        """The OpenCL extensions the kernel enables: 64-bit atomics where it adds to an i64."""
        wide = any(isinstance(s, ir.Atomic) and s.dtype is i64 for s in ir.walk_stmts(self.k.body))
        return [INT64_ATOMICS] if wide else []

    def kernel_attributes(self) -> str:
        x, y, z = self.k.cube_dim
        return f"__attribute__((reqd_work_group_size({x}, {y}, {z})))"

    def position(self, kind: str, axis: int) -> str:
        fn = {"cube_pos": "get_group_id", "cube_count": "get_num_groups", "unit_pos": "get_local_id"}[kind]
        return f"{fn}({axis})"

    def bitcast(self, x: str, src, dst) -> str:
        if src.itemsize == 2 and dst.itemsize == 2:
            return x  # f16 <-> bf16: both are 16-bit patterns in registers
        return f"{_AS_TYPE[dst]}({x})"

    def math_call(self, fn: str, args: list, t) -> str:
        if fn == "fma" and t.is_float:
            return f"fma({', '.join(args)})"
        if fn == "exp2_fast":  # native_exp2 has no accuracy promise: keep exp2
            return f"exp2({args[0]})"
        return super().math_call(fn, args, t)

    # ------------------------------------------------------------------ f16 in memory
    def _half_mem(self, e):
        """(pointer, address space) of an unchecked f16 tensor or shared load, else None."""
        if isinstance(e, ir.Load) and e.dtype is f16 and not e.checked:
            return self.tensor(e.tensor), "__global"
        if isinstance(e, ir.SharedLoad) and e.dtype is f16 and not e.checked:
            return self.shared(e.array), "__local"
        return None

    def e_cast(self, e):
        mem = self._half_mem(e.a)
        if mem is not None and e.dtype.is_float:  # f16 load -> float: vload_half converts from memory
            ptr, space = mem
            v = f"vload_half({self.x(e.a.offset)}, (const {space} half*){ptr})"
            return self.cast(v, f32, e.dtype)
        return super().e_cast(e)

    def _half_store(self, ptr, space, offset, value) -> bool:
        """f32 -> f16 stores through vstore_half_rte (one rounding, straight into memory)."""
        if not (isinstance(value, ir.Cast) and value.dtype is f16 and value.a.dtype in (f32, f64)):
            return False
        v = self.cast(self.x(value.a), value.a.dtype, f32)
        self.emit(f"vstore_half_rte({v}, {self.x(offset)}, ({space} half*){ptr});")
        return True

    def s_store(self, s):
        p = self.tensors[s.tensor]
        if p.dtype is f16 and not s.checked and self._half_store(self.tensor(s.tensor), "__global", s.offset, s.value):
            return
        super().s_store(s)

    def s_shared_store(self, s):
        d = self.k.shared[s.array]
        if d.dtype is f16 and not s.checked and self._half_store(self.shared(s.array), "__local", s.offset, s.value):
            return
        super().s_shared_store(s)

    # ------------------------------------------------------------------ atomics
    def atomic(self, op: str, space: str, ptr: str, value: str, compare, t) -> str:
        q = "__global" if space == "global" else "__local"
        if t is f32:  # add only (capabilities): compare-exchange on the bits
            return f"{self.need('kd_atomic_add_f32_' + space)}(({q} volatile float*){ptr}, {value})"
        ct = self.type_names[t]
        p = f"({q} volatile {ct}*){ptr}"
        if t is i64:  # add only (capabilities): cl_khr_int64_base_atomics
            return f"atom_add({p}, {value})"
        if op == "cas":
            return f"atomic_cmpxchg({p}, {compare}, {value})"
        return f"{_ATOMIC_FN[op]}({p}, {value})"

    def atomic_cas_i32(self, ptr: str, cmp: str, val: str) -> str:
        return f"atomic_cmpxchg({ptr}, {cmp}, {val})"

    # ------------------------------------------------------------------ printing
    def print_arg(self, t, x: str):
        if t is i64:
            return "%ld", x  # 64-bit in OpenCL C's printf
        if t is f32:
            return "%g", x
        return super().print_arg(t, x)

    # ------------------------------------------------------------------ vectors
    def vec_type(self, elem_ctype: str, lanes: int) -> str:
        return f"{elem_ctype}{lanes}"

    def vec_load(self, elem, ptr: str, lanes: int) -> str:
        mt = self.mem_type_names[elem]
        return f"vload{lanes}(0, (const __global {mt}*){ptr})"

    def vec_store(self, elem, ptr: str, lanes: list) -> str:
        mt = self.mem_type_names[elem]
        return f"vstore{len(lanes)}(({mt}{len(lanes)})({', '.join(lanes)}), 0, (__global {mt}*){ptr});"

    # ------------------------------------------------------------------ helpers
    def helper_code(self, name: str) -> str:
        hp = self.helper_prefix
        # f16 bits <-> f32 in registers by integer arithmetic (round to nearest even): the
        # vload_half/vstore_half-through-a-private-temporary form was miscompiled by PoCL in
        # loops with barriers; tensor and shared loads and stores use vload_half/vstore_half
        # directly (see e_cast, s_store, s_shared_store)
        if name == "kd_h2f":
            return (f"{hp} float kd_h2f(ushort h) {{\n"
                    f"    uint s = (uint)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
                    f"    if (e == 0x1fu) return as_float(s | 0x7f800000u | (m << 13));\n"
                    f"    if (e != 0u) return as_float(s | ((e + 112u) << 23) | (m << 13));\n"
                    f"    return as_float(s | as_uint((float)m * 5.9604644775390625e-8f));\n}}")
        if name == "kd_f2h":
            return (f"{hp} ushort kd_f2h(float f) {{\n"
                    f"    uint x = as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;\n"
                    f"    if (ax > 0x7f800000u) return (ushort)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));\n"
                    f"    if (ax >= 0x477ff000u) return (ushort)(sign | 0x7c00u);\n"
                    f"    if (ax >= 0x38800000u) {{\n"
                    f"        uint r = ax - 0x38000000u;\n"
                    f"        return (ushort)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));\n"
                    f"    }}\n"
                    f"    return (ushort)(sign | (uint)rint(as_float(ax) * 16777216.0f));\n}}")
        if name.startswith("kd_atomic_add_f32_"):
            q = "__global" if name.endswith("global") else "__local"
            return (f"{hp} float {name}({q} volatile float* p, float v) {{\n"
                    f"    {q} volatile uint* q = ({q} volatile uint*)p;\n"
                    f"    uint old = *q, seen;\n"
                    f"    do {{ seen = old; old = atomic_cmpxchg(q, seen, as_uint(as_float(seen) + v)); }}"
                    f" while (old != seen);\n"
                    f"    return as_float(old);\n}}")
        return super().helper_code(name)


# Sub-group primitives a native plane-op renderer builds every plane operation from: a 32-bit
# shuffle from any lane (`kd_shfl32(v, src, mask)`) and a ballot (`kd_ballot32(p, mask)`).
NATIVE_PRIMITIVES = {
    # NVIDIA's OpenCL compiler takes inline PTX: the warp's shfl.sync and vote.sync instructions
    "ptx": (
        "static inline uint kd_shfl32(uint v, int src, uint mask) {\n"
        "    uint r;\n"
        '    asm volatile("shfl.sync.idx.b32 %0, %1, %2, 31, %3;" : "=r"(r) : "r"(v), "r"(src), "r"(mask));\n'
        "    return r;\n}\n"
        "static inline uint kd_ballot32(int p, uint mask) {\n"
        "    uint r;\n"
        '    asm volatile("{ .reg .pred q; setp.ne.s32 q, %1, 0; vote.sync.ballot.b32 %0, q, %2; }"'
        ' : "=r"(r) : "r"(p), "r"(mask));\n'
        "    return r;\n}"),
    # cl_khr_subgroup_shuffle and cl_khr_subgroup_ballot
    "khr": (
        "static inline uint kd_shfl32(uint v, int src, uint mask) { return sub_group_shuffle(v, (uint)src); }\n"
        "static inline uint kd_ballot32(int p, uint mask) { return sub_group_ballot(p).x; }"),
    # a stand-in through local memory (kd_sg_buf, one slot per lane of every plane), so the
    # algorithms above the primitives are tested on devices without warp instructions (PoCL)
    "local": (
        "static inline uint kd_shfl32_local(__local uint* buf, int slots, int* phase, int unit, uint v, int src) {\n"
        "    __local uint* b = buf + *phase * slots;\n"
        "    *phase ^= 1;\n"
        "    b[unit] = v;\n"
        "    barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    return b[(unit / 32) * 32 + (src & 31)];\n}\n"
        "static inline uint kd_ballot32_local(__local uint* buf, int slots, int* phase, int unit, int p, uint mask) {\n"
        "    __local uint* b = buf + *phase * slots;\n"
        "    *phase ^= 1;\n"
        "    b[unit] = p != 0;\n"
        "    barrier(CLK_LOCAL_MEM_FENCE);\n"
        "    uint r = 0u;\n"
        "    for (int l = 0; l < 32; ++l) if ((mask >> l) & 1u) r |= b[(unit / 32) * 32 + l] << l;\n"
        "    return r;\n}\n"
        "#define kd_shfl32(v, src, mask) kd_shfl32_local(kd_sg_buf, kd_sg_slots, &kd_sg_phase, kd_unit, v, src)\n"
        "#define kd_ballot32(p, mask) kd_ballot32_local(kd_sg_buf, kd_sg_slots, &kd_sg_phase, kd_unit, p, mask)"),
}
# the statement after each native plane operation (the local stand-in's barriers order already)
PLANE_FENCES = {
    "ptx": 'asm volatile("bar.warp.sync %0;" :: "r"(kd_mask) : "memory");',
    "khr": "sub_group_barrier(CLK_LOCAL_MEM_FENCE);",
    "local": "",
}
KHR_EXTENSIONS = ("cl_khr_subgroups", "cl_khr_subgroup_shuffle", "cl_khr_subgroup_ballot")
# asks Intel's compilers for sub-groups of 32 (cl_intel_required_subgroup_size): planes are 32 units
INTEL_SUBGROUP_32 = "__attribute__((intel_reqd_sub_group_size(32)))"


class NativePlaneRenderer(OpenCLRenderer):
    """Plane operations on the device's sub-group (warp) instructions instead of local memory.

    Built from two primitives (NATIVE_PRIMITIVES): reductions are a shuffle-down tree to lane
    0 then a broadcast, scans a shuffle-up (Hillis-Steele) ladder, votes a ballot; lanes
    past the end of a partial plane are left out through the mask and the lane checks, so
    the semantics are those of tests/reference/planes.py."""

    native_planes = True
    primitives = "ptx"
    subgroup_attribute = ""  # INTEL_SUBGROUP_32 where the device sizes sub-groups on request

    def extensions(self) -> list:
        planes = list(KHR_EXTENSIONS) if self.primitives == "khr" and self.uses_planes else []
        return super().extensions() + planes

    @property
    def plane_fence(self) -> str:
        """Orders the plane's memory accesses around a plane operation, as the DSL promises
        (sub-group shuffles exchange values but order no memory)."""
        return PLANE_FENCES[self.primitives]

    def kernel_attributes(self) -> str:
        extra = f" {self.subgroup_attribute}" if self.primitives == "khr" and self.subgroup_attribute else ""
        return super().kernel_attributes() + extra

    def plane_setup(self) -> list:
        out = [f"const uint kd_mask = kd_nlanes >= 32 ? 0xffffffffu : ((1u << kd_nlanes) - 1u);"]
        if self.primitives == "local" and self.uses_planes:
            # two buffers used in turn: one barrier per primitive (the next one's barrier
            # orders this one's reads before the buffer is written again)
            out += [f"const int kd_sg_slots = {self.planes * 32};", f"__local uint kd_sg_buf[{2 * self.planes * 32}];",
                    "int kd_sg_phase = 0;"]
        return super().plane_setup() + out

    def shared_bytes(self) -> int:
        extra = 8 * self.planes * 32 if self.primitives == "local" and self.uses_planes else 0
        return super().shared_bytes() + extra

    def helper_code(self, name: str) -> str:
        hp = self.helper_prefix
        if name == "kd_native":
            return NATIVE_PRIMITIVES[self.primitives]
        if name.startswith("kd_shfl_"):
            self.need("kd_native")
            t = {d.name: d for d in (f32, f64, i32, u32, i64, boolean)}[name[len("kd_shfl_"):]]
            T = self.type_names[t]
            if t is boolean:
                body = "(kd_shfl32((uint)(v), s, m) != 0u)"
            elif t.itemsize == 8:
                body = f"as_{T}((uint2)(kd_shfl32(as_uint2(v).x, s, m), kd_shfl32(as_uint2(v).y, s, m)))"
            elif t is u32:
                body = "kd_shfl32(v, s, m)"
            else:
                body = f"as_{T}(kd_shfl32(as_uint(v), s, m))"
            if self.primitives == "local":  # the stand-in reads kernel-scope names: a macro
                return f"#define {name}(v, s, m) {body}"
            return f"{hp} {T} {name}({T} v, int s, uint m) {{ return {body}; }}"
        return super().helper_code(name)

    def plane_op(self, s: ir.PlaneOp) -> list:
        dst, op, t, P = self.var(s.dst), s.op, s.dtype, self.P
        if op == "elect":
            return [f"{dst} = (kd_lane == 0);"]
        v = self.x(s.value)
        if op in ("ballot", "all", "any"):
            self.need("kd_native")
            b = f"kd_ballot32((int)({v}), kd_mask)"
            return [{"ballot": f"{dst} = {b};", "all": f"{dst} = ({b} == kd_mask);",
                     "any": f"{dst} = ({b} != 0u);"}[op]]
        vt = s.value.dtype
        shfl = self.need(f"kd_shfl_{vt.name}")
        T = self.type_names[vt]
        if op in ir.PLANE_REDUCE_OPS:
            comb = self._combine(op, "kd_a", "kd_b", t)
            return [f"{{ {T} kd_a = {v};",
                    f"  for (int kd_o = {P // 2}; kd_o > 0; kd_o >>= 1) {{",
                    f"    {T} kd_b = {shfl}(kd_a, kd_lane + kd_o, kd_mask);",
                    f"    if (kd_lane + kd_o < kd_nlanes) kd_a = {comb};",
                    "  }",
                    f"  {dst} = {shfl}(kd_a, 0, kd_mask); }}"]
        if op in ("inclusive_sum", "exclusive_sum"):
            lines = [f"{{ {T} kd_a = {v};",
                     f"  for (int kd_o = 1; kd_o < {P}; kd_o <<= 1) {{",
                     f"    {T} kd_b = {shfl}(kd_a, kd_lane - kd_o, kd_mask);",
                     f"    if (kd_lane >= kd_o) kd_a = {self._combine('sum', 'kd_a', 'kd_b', t)};",
                     "  }"]
            if op == "inclusive_sum":
                return lines + [f"  {dst} = kd_a; }}"]
            return lines + [f"  {T} kd_b = {shfl}(kd_a, kd_lane - 1, kd_mask);",
                            f"  {dst} = kd_lane == 0 ? {self.zero(t)} : kd_b; }}"]
        i64t = self.type_names[i64]
        a = self.x(s.arg)
        if op == "broadcast":
            src = f"((long)({a}) >= 0 && (long)({a}) < kd_nlanes) ? (int)({a}) : 0"
        elif op == "shuffle":
            m = f"(int)((ulong)(long)({a}) % {P}u)"
            src = f"({m} < kd_nlanes) ? {m} : kd_lane"
        else:
            x = f"(({i64t})({a}) ^ ({i64t})kd_lane)"
            src = f"({x} >= 0 && {x} < kd_nlanes) ? (int){x} : kd_lane"
        return [f"{dst} = {shfl}({v}, {src}, kd_mask);"]


def render(k: ir.KernelIR, caps, renderer=OpenCLRenderer):
    """Render one kernel; returns a clike.Rendered (symbol, source, argument list)."""
    return renderer(k, caps).render()
