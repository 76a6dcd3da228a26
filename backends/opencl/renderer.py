"""IR -> OpenCL C (1.2), as a dialect of the shared C-like renderer (backends/clike.py).

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

    def template_context(self) -> dict:
        return {"fp64": self.caps.supports_dtype(f64), "extensions": self.extensions()}

    def extensions(self) -> list:
        return []

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
        return super().math_call(fn, args, t)

    # ------------------------------------------------------------------ atomics
    def atomic(self, op: str, space: str, ptr: str, value: str, compare, t) -> str:
        q = "__global" if space == "global" else "__local"
        if t is f32:  # add only (capabilities): compare-exchange on the bits
            return f"{self.need('kd_atomic_add_f32_' + space)}(({q} volatile float*){ptr}, {value})"
        ct = self.type_names[t]
        p = f"({q} volatile {ct}*){ptr}"
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
        if name == "kd_h2f":
            return f"{hp} float kd_h2f(ushort b) {{ return vload_half(0, (const __private half*)&b); }}"
        if name == "kd_f2h":
            return (f"{hp} ushort kd_f2h(float f) {{ ushort b; vstore_half_rte(f, 0, (__private half*)&b); "
                    f"return b; }}")
        if name.startswith("kd_atomic_add_f32_"):
            q = "__global" if name.endswith("global") else "__local"
            return (f"{hp} float {name}({q} volatile float* p, float v) {{\n"
                    f"    {q} volatile uint* q = ({q} volatile uint*)p;\n"
                    f"    uint old = *q, seen;\n"
                    f"    do {{ seen = old; old = atomic_cmpxchg(q, seen, as_uint(as_float(seen) + v)); }}"
                    f" while (old != seen);\n"
                    f"    return as_float(old);\n}}")
        return super().helper_code(name)


def render(k: ir.KernelIR, caps, renderer=OpenCLRenderer):
    """Render one kernel; returns a clike.Rendered (symbol, source, argument list)."""
    return renderer(k, caps).render()
