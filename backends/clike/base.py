"""The shared C-like renderer: kerneldsl IR -> C source text for OpenCL C and CUDA C++.

One base class lowers every statement and expression of the IR to C text; a
dialect (backends/opencl/renderer.py, backends/cuda/renderer.py) subclasses it
and overrides small hooks: class attributes for spellings, short methods for
the few constructs whose shape differs. The kernel skeleton is a Jinja
template (`SKELETON` in kernel_frame.py); a dialect may extend it through `template_dirs`
and `template_name` (`{% extends "clike/kernel.j2" %}`, blocks `prelude`,
`signature`, `prologue`).

Value representation (what the hooks receive and return):
- scalars are C expressions of the register type `type_names[dtype]`; f16 and
  bf16 live in registers as their storage type (16 bits: `unsigned short` in
  OpenCL, or `__half`/`__nv_bfloat16` where a dialect prefers) and are only
  loaded, stored and converted, never computed on;
- bool is `bool` in registers and one byte (`mem_type_names[boolean]`) in memory;
- short vectors are lane lists: a VecType expression renders to one C
  expression per lane, vector variables are one C variable per lane; only
  wide loads and stores touch a dialect vector type (`vec_load`/`vec_store`);
- tensors arrive as the kernel arguments `kernel_args()` lists (data pointer,
  element offset where `pass_tensor_offset`, extent, shape and strides as i64);
  scalar parameters as `arg_type_names[dtype]`, copied into locals.

Hooks (class attributes):
  dialect             name used in messages ("opencl", "cuda")
  kernel_prefix       text before the kernel name ('__kernel void', 'extern "C" __global__ void')
  helper_prefix       prefix of generated helper functions ('static inline', '__device__ __forceinline__')
  global_ptr          qualifier in pointers to tensor memory ('__global' / '')
  local_ptr           qualifier in pointers to cube-shared memory ('__local' / '')
  local_decl          prefix of a cube-shared array declaration ('__local' / '__shared__')
  volatile_atomics    tensors used by atomics are declared volatile (no stale cached reads)
  pass_tensor_offset  True: tensors are (buffer, element offset) pairs (OpenCL cl_mem); False: pointers
  type_names          register type per DType
  mem_type_names      element type in memory per DType
  arg_type_names      kernel-argument type of scalar parameters per DType
  i64_suffix          suffix of 64-bit integer literals ('L' in OpenCL C, 'LL' in CUDA)
  barrier_stmt        kd.sync_cube() ('barrier(...)', '__syncthreads();')
  local_barrier_stmt  barrier that orders only cube-shared memory (plane / fragment emulation)
  line_directives     emit `#line N "file.py"` before each statement (errors point at Python lines)
  native_planes       plane operations are hardware warp / sub-group instructions (no shared scratch)
  plane_fence         statement after each native plane operation that orders the plane's
                      memory accesses around it (the DSL's rule; '__syncwarp(kd_mask);')
  flat_barriers       no barrier inside an `if`: a uniform `if` holding barriers is flattened (its
                      condition saved, its code guarded between unconditional barriers; PoCL)
Hooks (methods; see each docstring):
  template_context()                        extra names for the dialect's template
  kernel_args() / arg_decl(arg) / tensor_ptr_type(param)   the kernel's parameter list
  prologue()                                declarations at the kernel's top (positions, shared, locals)
  kernel_attributes()                       e.g. reqd_work_group_size / __launch_bounds__
  position(kind, axis)                      raw cube id, cube count, unit id per axis
  float_literal(v, dt) / half_literal(bits, dt) / int_literal(v, dt)
  half_to_float(x, dt) / float_to_half(x, dt)   f16 / bf16 conversions from/to f32
  bitcast(x, src, dst)                      reinterpret bits (same size)
  math_call(fn, args, dt)                   exp, log, ..., min/max (NaN-propagating), abs
  atomic(op, space, ptr, value, compare, dt)  expression returning the old value
  atomic_cas_i32(ptr, cmp, val)             used by the bounds-check helper
  print_arg(dt, x) / printf(fmt, args)      kd.print
  vec_type(elem, lanes) / vec_lane(x, i) / vec_load(elem, ptr, lanes) / vec_store(elem, ptr, lanes)
  plane_op(stmt)                            lines for a PlaneOp (default: through cube-shared memory)
  frag_decls() / frag_op(stmt)              matrix fragments (default: exact emulation in shared memory)
  helper_code(name)                         source of a named helper a hook asked for via need()
  plane_setup()                             prologue lines defining kd_plane, kd_lane, kd_nlanes
  holds_barrier(s) / plane_ops_barrier()    whether a statement / a plane operation renders with a barrier
Handlers (STATEMENT_HANDLERS, EXPRESSION_HANDLERS, VECTOR_HANDLERS below): one entry per IR
node class naming the method that lowers it; a dialect overrides the method (OpenCL's
s_store for vstore_half, CUDA's s_async_copy for cp.async) and the table finds it.
tests/test_renderers.py fails when an IR node has no entry.
The lowering lives in one mixin per concern, beside this module: statements.py (control
flow, stores, kd.print), flat_barriers.py (barriers out of ifs), expressions.py (arithmetic,
casts, math, vector lanes), memory.py (loads, atomics), planes.py and fragments.py (the
shared-memory emulations), kernel_frame.py (skeleton, arguments, prologue), text.py (names,
lines, literals).
Helpers for dialects: x(e) / lanes(e) render expressions, emit(line), need(helper), temp(ctype),
literal(v, dt), cast(x, src, dst), qualified(*words), parens(text); Rendered.loc_of_source_line
maps a line of the generated source back to the Python statement (compilers that ignore #line).
"""
from __future__ import annotations

import re

import jinja2

from kerneldsl import ir
from kerneldsl.dtypes import bf16, boolean, f16, f32, f64, i32, i64, u8, u32

from .. import dispatch
from .expressions import Expressions
from .flat_barriers import FlatBarriers
from .fragments import FragmentEmulation
from .kernel_frame import SKELETON, KernelFrame, Rendered
from .memory import Memory
from .planes import PlaneEmulation
from .statements import Statements
from .text import TextHelpers, _cstring, cname

# IR node class -> the method that lowers it (a dialect overrides the method, not the entry):
# the statements and expressions every renderer shares (backends/dispatch.py), plus barriers,
# plane and fragment operations, which C lowers in place
STATEMENT_HANDLERS = {
    **dispatch.STATEMENTS,
    ir.Barrier: "s_barrier",
    ir.PlaneOp: "s_plane_op",
    ir.FragFill: "s_frag_op",
    ir.FragLoad: "s_frag_op",
    ir.FragStore: "s_frag_op",
    ir.FragMma: "s_frag_op",
    ir.GroupMma: "s_group_mma",
    ir.GroupWait: "s_group_wait",
}
EXPRESSION_HANDLERS = dispatch.EXPRESSIONS
# expressions of a VecType: one C expression per lane
VECTOR_HANDLERS = {
    ir.Var: "v_var",
    ir.VecMake: "v_vec_make",
    ir.Load: "vector_load",
    ir.BinOp: "v_binop",
    ir.UnOp: "v_unop",
    ir.Cmp: "v_cmp",
    ir.Select: "v_select",
    ir.Cast: "v_cast",
    ir.Math: "v_math",
}


class CLikeRenderer(KernelFrame, TextHelpers, Statements, FlatBarriers, Expressions, Memory, PlaneEmulation,
                    FragmentEmulation, dispatch.SharedHandlers):
    """IR -> C text. Construct with (kernel IR, capabilities), call `render()`."""

    dialect = "c"
    kernel_prefix = "void"
    helper_prefix = "static inline"
    global_ptr = ""
    local_ptr = ""
    local_decl = ""
    volatile_atomics = True
    pass_tensor_offset = False
    type_names = {f32: "float", f64: "double", i32: "int", u32: "unsigned int", i64: "long long",
                  u8: "unsigned char", boolean: "bool", f16: "unsigned short", bf16: "unsigned short"}
    mem_type_names = {**type_names, boolean: "unsigned char"}
    arg_type_names = {**mem_type_names}
    i64_suffix = "LL"
    barrier_stmt = ""
    local_barrier_stmt = ""
    line_directives = True
    native_planes = False  # plane operations as hardware warp / sub-group instructions (no shared scratch)
    plane_fence = ""  # the shared-memory emulation orders accesses through its barriers already
    flat_barriers = False  # see s_if / _flat
    template_dirs: tuple = ()
    template_name = "clike/kernel.j2"
    STATEMENT_HANDLERS = STATEMENT_HANDLERS
    EXPRESSION_HANDLERS = EXPRESSION_HANDLERS
    VECTOR_HANDLERS = VECTOR_HANDLERS

    def __init__(self, k: ir.KernelIR, caps):
        self.k = k
        self.caps = caps
        self.U = k.cube_units
        self.P = k.plane_dim
        self.planes = -(-self.U // self.P)
        self.lines: list = []
        self.depth = 1
        self.temps: dict = {}  # C name -> C type, declared at the top
        self._ntemp = 0
        self._helpers: dict = {}  # name -> code, in first-use order
        self._no_hoist = 0
        self._memo: dict = {}
        self.locs: dict = {}
        self.tensors = {p.name: p for p in k.tensor_params()}
        self.scalars = {p.name: p for p in k.params if isinstance(p, ir.ScalarParam)}
        self.written = self._written_tensors()
        self.atomic_targets = {s.target for s in ir.walk_stmts(k.body) if isinstance(s, ir.Atomic)
                               and s.space == "global"}
        self.uses_planes = ir.contains(k.body, ir.PlaneOp)
        self._stmt_handlers = dispatch.bind(self, self.STATEMENT_HANDLERS)
        self._expr_handlers = dispatch.bind(self, self.EXPRESSION_HANDLERS)
        self._vector_handlers = dispatch.bind(self, self.VECTOR_HANDLERS)

    # ================================================================== entry
    def render(self) -> Rendered:
        self.block(self.k.body)
        args = self.kernel_args()
        ctx = dict(
            name=self.symbol(), kernel_prefix=self.kernel_prefix, attributes=self.kernel_attributes(),
            params=[self.arg_decl(a) for a in args], prologue=self.prologue(), body=self.lines,
            helpers=list(self._helpers.values()), renderer=self, k=self.k,
        )
        ctx.update(self.template_context())
        source = self.environment().get_template(self.template_name).render(**ctx)
        return Rendered(self.symbol(), source, args, self.shared_bytes(), self.locs)

    @classmethod
    def environment(cls) -> jinja2.Environment:
        env = getattr(cls, "_env", None)
        if env is None or env[0] is not cls:
            loaders = [jinja2.DictLoader({"clike/kernel.j2": SKELETON})]
            loaders += [jinja2.FileSystemLoader(d) for d in cls.template_dirs]
            e = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), trim_blocks=True, lstrip_blocks=True,
                                   keep_trailing_newline=True, autoescape=False, undefined=jinja2.StrictUndefined)
            cls._env = env = (cls, e)
        return env[1]

    def template_context(self) -> dict:
        """Extra names for a dialect's template (pragmas, includes, ...)."""
        return {}

    def symbol(self) -> str:
        return cname("kd_", self.k.name)

    # ================================================================== dispatch
    def stmt(self, s):
        """Emit the lines of one statement (through STATEMENT_HANDLERS)."""
        dispatch.lower(self._stmt_handlers, s, self.dialect)

    def x(self, e) -> str:
        """C text of a scalar expression (through EXPRESSION_HANDLERS)."""
        return dispatch.lower(self._expr_handlers, e, self.dialect)

    def lanes(self, e) -> list:
        """C text of each lane of a vector expression (through VECTOR_HANDLERS)."""
        handler = self._vector_handlers.get(type(e))
        if handler is None:
            raise NotImplementedError(f"{self.dialect}: vector {type(e).__name__}")
        return handler(e)


    # ================================================================== dialect hooks (defaults)
    def kernel_attributes(self) -> str:
        return ""

    def position(self, kind: str, axis: int) -> str:
        raise NotImplementedError(f"{self.dialect}: position({kind!r}, {axis})")

    def half_to_float(self, x: str, t) -> str:
        return f"{self.need('kd_bf2f' if t is bf16 else 'kd_h2f')}({x})"

    def float_to_half(self, x: str, t) -> str:
        return f"{self.need('kd_f2bf' if t is bf16 else 'kd_f2h')}({x})"

    def bitcast(self, x: str, src, dst) -> str:
        raise NotImplementedError(f"{self.dialect}: bitcast")

    def math_call(self, fn: str, args: list, t) -> str:
        """C for Math(fn, args) with operand type t (f32/f64, or an integer for abs/min/max)."""
        if fn in ("min", "max"):
            return f"{self.need(f'kd_{fn}_{t.name}')}({args[0]}, {args[1]})"
        if fn == "abs":
            if t.is_float:
                return f"fabs({args[0]})"
            if not t.is_signed:
                return args[0]
            return f"{self.need(f'kd_abs_{t.name}')}({args[0]})"
        if fn == "sigmoid":
            return f"{self.need(f'kd_sigmoid_{t.name}')}({args[0]})"
        if fn == "%":
            fn = "fmod"
        if fn in ("isnan", "isinf"):
            return f"({fn}({args[0]}) != 0)"
        return f"{fn}({', '.join(args)})"

    def atomic(self, op: str, space: str, ptr: str, value: str, compare, t) -> str:
        raise NotImplementedError(f"{self.dialect}: atomics")

    def atomic_cas_i32(self, ptr: str, cmp: str, val: str) -> str:
        raise NotImplementedError(f"{self.dialect}: atomic_cas_i32")

    def print_arg(self, t, x: str):
        """(printf conversion, argument) for a value of type t."""
        if t.is_float:
            return "%g", x
        if t is i64:
            return "%lld", x
        if t is u32:
            return "%u", x
        return "%d", f"(int)({x})"

    def printf(self, fmt: str, args: list) -> str:
        return f"printf({', '.join([_cstring(fmt)] + args)});"

    def vec_type(self, elem_ctype: str, lanes: int) -> str:
        return f"{elem_ctype}{lanes}"

    def vec_lane(self, x: str, i: int) -> str:
        return f"{x}.s{i:x}"

    def vec_load(self, elem, ptr: str, lanes: int) -> str:
        """An expression of vec_type(mem type, lanes) loading `lanes` elements at `ptr`."""
        raise NotImplementedError(f"{self.dialect}: vec_load")

    def vec_store(self, elem, ptr: str, lanes: list) -> str:
        """A statement storing the lane expressions (memory type) at `ptr`."""
        raise NotImplementedError(f"{self.dialect}: vec_store")

    def helper_code(self, name: str) -> str:
        """Source of the generic helpers; dialects add theirs and fall back to this."""
        hp = self.helper_prefix
        m = re.fullmatch(r"kd_(min|max|abs|sigmoid)_(\w+)", name)
        if m:
            kind, tn = m.groups()
            t = {d.name: d for d in (f32, f64, i32, u32, i64)}[tn]
            T = self.type_names[t]
            if kind == "sigmoid":
                one = self.literal(1.0, t)
                return f"{hp} {T} {name}({T} x) {{ return {one} / ({one} + exp(-x)); }}"
            if kind == "abs":
                return f"{hp} {T} {name}({T} x) {{ return x < 0 ? -x : x; }}"
            cmp = "<" if kind == "min" else ">"
            if t.is_float:  # NaN if either operand is NaN (C fmin/fmax would drop it)
                return (f"{hp} {T} {name}({T} a, {T} b) {{ return isnan(b) ? b : isnan(a) ? a : "
                        f"(a {cmp} b ? a : b); }}")
            return f"{hp} {T} {name}({T} a, {T} b) {{ return a {cmp} b ? a : b; }}"
        if name == "kd_bf2f":
            return f"{hp} float kd_bf2f({self.type_names[bf16]} b) {{ return {self.bitcast('((unsigned int)b << 16)', u32, f32)}; }}"
        if name == "kd_f2bf":
            u = self.bitcast("f", f32, u32)
            return (f"{hp} {self.type_names[bf16]} kd_f2bf(float f) {{\n"
                    f"    unsigned int u = {u};\n"
                    f"    if (isnan(f)) return ({self.type_names[bf16]})((u >> 16) | 0x40u);\n"
                    f"    return ({self.type_names[bf16]})((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n}}")
        if name == "kd_check":
            i64t = self.type_names[i64]
            cas = self.atomic_cas_i32(f"({self.qualified(self.global_ptr, 'volatile int')}*)err", "0", "1")
            return (f"{hp} bool kd_check({self.qualified(self.global_ptr, i64t)}* err, {i64t} off, {i64t} lanes, {i64t} limit, "
                    f"{i64t} index, {i64t} line) {{\n"
                    f"    if (off >= 0 && off + lanes <= limit) return true;\n"
                    f"    if ({cas} == 0) {{ err[1] = index; err[2] = off; err[3] = line; }}\n"
                    f"    return false;\n}}")
        raise KeyError(f"{self.dialect} renderer has no helper {name!r}")


__all__ = ["CLikeRenderer", "STATEMENT_HANDLERS", "EXPRESSION_HANDLERS", "VECTOR_HANDLERS"]
