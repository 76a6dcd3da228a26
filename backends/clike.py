"""The shared C-like renderer: kerneldsl IR -> C source text for OpenCL C and CUDA C++.

(One module on purpose, though long: it is the whole lowering both dialects share, and a
dialect author reads it top to bottom next to their own 100-line subclass.)

One base class lowers every statement and expression of the IR to C text; a
dialect (backends/opencl/renderer.py, backends/cuda/renderer.py) subclasses it
and overrides small hooks: class attributes for spellings, short methods for
the few constructs whose shape differs. The kernel skeleton is a Jinja
template (`SKELETON` below); a dialect may extend it through `template_dirs`
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
Helpers for dialects: x(e) / lanes(e) render expressions, emit(line), need(helper), temp(ctype),
literal(v, dt), cast(x, src, dst), qualified(*words), parens(text); Rendered.loc_of_source_line
maps a line of the generated source back to the Python statement (compilers that ignore #line).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import jinja2
import numpy as np

from kerneldsl import ir
from kerneldsl.dtypes import VecType, bf16, boolean, f16, f32, f64, i32, i64, u8, u32
from kerneldsl.errors import UnsupportedFeatureError

HALVES = (f16, bf16)

SKELETON = """\
{% block prelude %}{% endblock %}
{% for h in helpers %}
{{ h }}
{% endfor %}
{% block signature %}
{{ kernel_prefix }} {% if attributes %}{{ attributes }} {% endif %}{{ name }}(
    {{ params | join(",\\n    ") }})
{% endblock %}
{
{% block prologue %}
{% for line in prologue %}
    {{ line }}
{% endfor %}
{% endblock %}
{% for line in body %}
{{ line }}
{% endfor %}
}
"""


@dataclass(frozen=True)
class KernelArg:
    """One argument of a generated kernel, in launch order.

    kind: 'data' (tensor memory), 'offset' (element offset of a view, i64), 'extent',
    'shape', 'stride' (i64), 'scalar' (a scalar parameter), 'errbuf' (bounds-check record).
    """
    kind: str
    cname: str
    param: object = None
    axis: int = 0


@dataclass
class Rendered:
    """A rendered kernel: C symbol, source text, arguments, static shared bytes, and the
    Python locations of the lines `#line` points at (to map compiler messages back)."""
    name: str
    source: str
    args: list
    shared_bytes: int
    locs: dict = field(default_factory=dict)  # (filename, line) -> SourceLoc

    def loc_of_source_line(self, line: int):
        """The Python location of line `line` (1-based) of the generated source: that of the
        nearest `#line` directive above it (for compilers whose messages ignore `#line`)."""
        found = None
        for i, text in enumerate(self.source.splitlines()[:max(line, 0)], 1):
            m = _LINE_RE.match(text)
            if m:
                found = self.locs.get((m.group(2).replace('\\"', '"').replace("\\\\", "\\"), int(m.group(1))))
        return found


_LINE_RE = re.compile(r'\s*#line (\d+) "(.*)"$')


def cname(prefix: str, name: str) -> str:
    """A C identifier for an IR name (prefixed, so no user name meets a C keyword)."""
    return prefix + re.sub(r"[^A-Za-z0-9_]", lambda m: f"_{ord(m.group()):x}_", name)


def parens(text: str) -> str:
    """`text` in one pair of parentheses (not two: clang warns about `if ((a == b))`)."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                if i == len(text) - 1:
                    return text
                break
    return f"({text})"


def _cstring(text: str) -> str:
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return '"' + out + '"'


class CLikeRenderer:
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
    flat_barriers = False  # see s_If / _flat
    template_dirs: tuple = ()
    template_name = "clike/kernel.j2"

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

    # ================================================================== arguments
    def _written_tensors(self) -> set:
        return ir.written_tensors(self.k.body)

    def kernel_args(self) -> list:
        """The kernel's arguments in launch order (runtimes marshal by `kind`)."""
        out = []
        for p in self.k.params:
            if isinstance(p, ir.TensorParam):
                t = cname("t_", p.name)
                out.append(KernelArg("data", cname("a_", p.name) if self.pass_tensor_offset else t, p))
                if self.pass_tensor_offset:
                    out.append(KernelArg("offset", t + "_off", p))
                out.append(KernelArg("extent", t + "_n", p))
                out += [KernelArg("shape", f"{t}_s{a}", p, a) for a in range(p.ndim)]
                out += [KernelArg("stride", f"{t}_st{a}", p, a) for a in range(p.ndim)]
            else:
                out.append(KernelArg("scalar", cname("a_", p.name), p))
        if self.k.bounds_check:
            out.append(KernelArg("errbuf", "kd_err"))
        return out

    def tensor_ptr_type(self, p) -> str:
        """Pointer type of a tensor's memory inside the kernel."""
        quals = []
        if p.name not in self.written:
            quals.append("const")
        if self.volatile_atomics and p.name in self.atomic_targets:
            quals.append("volatile")
        q = " ".join(filter(None, [self.global_ptr] + quals))
        return f"{q} {self.mem_type_names[p.dtype]}*".strip()

    def arg_decl(self, a: KernelArg) -> str:
        i64t = self.type_names[i64]
        if a.kind == "data":
            return f"{self.tensor_ptr_type(a.param)} {a.cname}"
        if a.kind == "scalar":
            return f"{self.arg_type_names[a.param.dtype]} {a.cname}"
        if a.kind == "errbuf":
            return f"{self.qualified(self.global_ptr, i64t)}* kd_err"
        return f"{i64t} {a.cname}"

    # ================================================================== prologue
    def prologue(self) -> list:
        """Declarations at the kernel's top: tensors, positions, shared memory, locals."""
        out = []
        for p in self.k.tensor_params():
            if self.pass_tensor_offset:
                t = cname("t_", p.name)
                out.append(f"{self.tensor_ptr_type(p)} {t} = {cname('a_', p.name)} + {t}_off;")
        dx, dy, _ = self.k.cube_dim
        for axis, c in enumerate("xyz"):
            out.append(f"const int kd_cube_{c} = (int){self.position('cube_pos', axis)};")
            out.append(f"const int kd_count_{c} = (int){self.position('cube_count', axis)};")
            out.append(f"const int kd_unit_{c} = (int){self.position('unit_pos', axis)};")
        out.append(f"const int kd_unit = kd_unit_x + {dx} * (kd_unit_y + {dy} * kd_unit_z);")
        out += self.plane_setup()
        for name, d in self.k.shared.items():
            out.append(f"{self.local_decl} {self.mem_type_names[d.dtype]} {cname('s_', name)}[{d.size}];")
        if self.uses_planes and not self.native_planes:
            out.append(f"{self.local_decl} {self.type_names[i64]} kd_plane_buf[{self.U}];")
        out += self.frag_decls()
        for p in self.scalars.values():
            v = cname("a_", p.name)
            if p.dtype is boolean:
                v = f"({v} != 0)"
            out.append(f"{self.type_names[p.dtype]} {cname('v_', p.name)} = {v};")
        for name, t in self.k.var_types.items():
            if name in self.scalars:
                continue
            if isinstance(t, VecType):
                for i in range(t.lanes):
                    out.append(f"{self.type_names[t.elem]} {cname('v_', name)}_{i} = {self.zero(t.elem)};")
            else:
                out.append(f"{self.type_names[t]} {cname('v_', name)} = {self.zero(t)};")
        for n, ty in self.temps.items():
            out.append(f"{ty} {n};")
        return out

    def plane_setup(self) -> list:
        """kd_plane (plane index), kd_lane (lane index), kd_nlanes (lanes in this plane)."""
        P, U = self.P, self.U
        return [f"const int kd_plane = kd_unit / {P};", f"const int kd_lane = kd_unit % {P};",
                f"const int kd_nlanes = min({P}, {U} - kd_plane * {P});"]

    def shared_bytes(self) -> int:
        """Static cube-shared memory of the kernel, emulation scratch included."""
        n = sum(d.dtype.itemsize * d.size for d in self.k.shared.values())
        if self.uses_planes and not self.native_planes:
            n += 8 * self.U
        n += self.frag_bytes()
        return n

    def check_shared(self, limit: int, device: str):
        """Raise UnsupportedFeatureError when the kernel needs more shared memory than `limit`."""
        need = self.shared_bytes()
        if need > limit:
            what = []
            if self.uses_planes:
                what.append("plane operations emulated in shared memory")
            if self.k.frags:
                what.append("matrix fragments emulated in shared memory")
            extra = f" (including {' and '.join(what)})" if what else ""
            raise UnsupportedFeatureError(
                f"{self.k.name} needs {need} bytes of shared memory per cube{extra}, but {device} has {limit}; "
                f"use fewer units per cube or smaller shared arrays", self.k.loc)

    # ================================================================== small helpers
    def emit(self, line: str):
        self.lines.append("    " * self.depth + line)

    def need(self, name: str) -> str:
        """Ask for helper `name` (its code from helper_code) to be emitted before the kernel."""
        if name not in self._helpers:
            self._helpers[name] = self.helper_code(name)
        return name

    def temp(self, ctype: str) -> str:
        self._ntemp += 1
        n = f"kd_tmp{self._ntemp}"
        self.temps[n] = ctype
        return n

    def zero(self, t) -> str:
        return self.literal(0, t)

    def var(self, name: str) -> str:
        return cname("v_", name)

    def tensor(self, name: str) -> str:
        return cname("t_", name)

    def shared(self, name: str) -> str:
        return cname("s_", name)

    @staticmethod
    def qualified(*words) -> str:
        """Words joined by spaces, empty qualifiers dropped ('__local', 'float' -> '__local float')."""
        return " ".join(w for w in words if w)

    def cast_to(self, t, x: str) -> str:
        return f"(({self.type_names[t]})({x}))"

    def line(self, loc):
        if loc is not None and self.line_directives:
            fn = loc.filename.replace("\\", "\\\\").replace('"', '\\"')
            self.lines.append(f'#line {loc.line} "{fn}"')
            self.locs.setdefault((loc.filename, loc.line), loc)

    # ================================================================== literals
    def literal(self, value, t) -> str:
        if t is boolean:
            return "true" if value else "false"
        if t in HALVES:
            a = np.asarray(value, np.float32).astype(t.np)
            return self.half_literal(int(a.view(np.uint16)), t)
        if t.is_float:
            return self.float_literal(float(value), t)
        return self.int_literal(int(value), t)

    def float_literal(self, v: float, t) -> str:
        suffix = "f" if t is f32 else ""
        if math.isnan(v):
            return "NAN" if t is f32 else "((double)NAN)"
        if math.isinf(v):
            s = "INFINITY" if t is f32 else "((double)INFINITY)"
            return s if v > 0 else f"(-{s})"
        if t is f32:
            v = float(np.float32(v))
        text = repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        return f"({text}{suffix})" if math.copysign(1.0, v) < 0 else text + suffix

    def half_literal(self, bits: int, t) -> str:
        return f"(({self.type_names[t]})0x{bits:04x})"

    def int_literal(self, v: int, t) -> str:
        if t is i32:
            return "(-2147483647 - 1)" if v == -2 ** 31 else (f"({v})" if v < 0 else str(v))
        if t is u32:
            return f"{v}u"
        if t is i64:
            s = self.i64_suffix
            return f"(-9223372036854775807{s} - 1{s})" if v == -2 ** 63 else (f"({v}{s})" if v < 0 else f"{v}{s}")
        return f"(({self.type_names[t]}){v})"

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

    # ================================================================== statements
    def block(self, stmts):
        for s in stmts:
            self._memo = {}
            self.line(s.loc)
            getattr(self, "s_" + type(s).__name__)(s)

    def nested(self, stmts):
        self.depth += 1
        self.block(stmts)
        self.depth -= 1

    def s_Assign(self, s):
        t = s.value.dtype
        if isinstance(t, VecType):
            lanes = self.lanes(s.value)
            tmps = [self.temp(self.type_names[t.elem]) for _ in lanes]
            for n, x in zip(tmps, lanes):
                self.emit(f"{n} = {x};")
            for i, n in enumerate(tmps):
                self.emit(f"{self.var(s.name)}_{i} = {n};")
            return
        self.emit(f"{self.var(s.name)} = {self.x(s.value)};")

    def s_Store(self, s):
        p = self.tensors[s.tensor]
        off = self.x(s.offset)
        t = s.value.dtype
        ptr = f"({self.tensor(s.tensor)} + {off})" if isinstance(t, VecType) else None
        if isinstance(t, VecType):
            lanes = [self.to_mem(x, t.elem) for x in self.lanes(s.value)]
            stmt = self.vec_store(t.elem, ptr, lanes)
        else:
            stmt = f"{self.tensor(s.tensor)}[{off}] = {self.to_mem(self.x(s.value), p.dtype)};"
        self.guarded_stmt(stmt, s.checked, off, t.lanes if isinstance(t, VecType) else 1,
                          f"{self.tensor(s.tensor)}_n", self.param_index(s.tensor), s.loc)

    def s_SharedStore(self, s):
        d = self.k.shared[s.array]
        off = self.x(s.offset)
        stmt = f"{self.shared(s.array)}[{off}] = {self.to_mem(self.x(s.value), d.dtype)};"
        self.guarded_stmt(stmt, s.checked, off, 1, self.literal(d.size, i64), -1, s.loc)

    def s_If(self, s):
        if self.flat_barriers and self.holds_barrier(s):
            self._flat([s], None)
            return
        self.emit(f"if {parens(self.x(s.cond))} {{")
        self.nested(s.then)
        if s.orelse:
            self.emit("} else {")
            self.nested(s.orelse)
        self.emit("}")

    # ------------------------------------------------------------------ barriers without ifs
    # PoCL (3.0, CPU devices) runs a work-group as loops over its work-items between barriers,
    # and mishandled barriers inside an `if`: values set before the `if` or before its first
    # barrier were wrong after its barriers (another work-group's in a few percent of launches,
    # or every launch when the other branch did work), and a kernel whose barrier-free branch
    # returned early wrote out of bounds (heap corruption). With flat_barriers no barrier is
    # emitted inside an `if`: a uniform `if` holding barriers saves its condition and runs as
    # guarded pieces between unconditional barriers (`if (c) {..} barrier; if (c) {..}`), a
    # loop in it runs zero times when the guard is off, and a loop body holding a barrier ends
    # at one. The checker guarantees the condition is uniform, so every unit reaching the
    # `if` reaches each barrier: only the guarded work differs from the nested form.
    def holds_barrier(self, s) -> bool:
        """Whether statement `s` (nested blocks included) renders to code with a barrier."""
        for t in ir.walk_stmts([s]):
            if isinstance(t, (ir.Barrier, ir.FragFill, ir.FragLoad, ir.FragStore, ir.FragMma, ir.GroupMma)):
                return True
            if isinstance(t, ir.PlaneOp) and t.op != "elect" and self.plane_ops_barrier():
                return True
        return False

    def plane_ops_barrier(self) -> bool:
        """Whether plane operations render with barriers (the shared-memory emulation does)."""
        return not self.native_planes

    def _flat(self, stmts, guard):
        """Statements under `guard` (a C bool temp, or None for none) with every barrier outside
        any `if`: runs of barrier-free statements go in `if (guard)`, barrier-holding ones are
        taken apart."""
        run = []

        def flush():
            if not run:
                return
            if guard is None:
                self.block(run)
            else:
                self.emit(f"if ({guard}) {{")
                self.nested(run)
                self.emit("}")
            run.clear()

        for s in stmts:
            if not self.holds_barrier(s):
                run.append(s)
                continue
            flush()
            self._memo = {}
            self.line(s.loc)
            if isinstance(s, ir.If):
                c = self._guarded_cond(s.cond, guard)
                self._flat(s.then, c)
                if s.orelse:
                    e = self.temp(self.type_names[boolean])
                    self.emit(f"{e} = {guard} && !{c};" if guard is not None else f"{e} = !{c};")
                    self._flat(s.orelse, e)
            elif isinstance(s, (ir.For, ir.While)):
                self._guarded_loop(s, guard)
            elif guard is None:
                getattr(self, "s_" + type(s).__name__)(s)
            else:
                self._guarded_lines(s, guard)
        flush()

    def _guarded_cond(self, cond, guard) -> str:
        """A bool temp: guard && cond, with cond (and any loads it hoists) evaluated only
        where the guard (a C bool, or None) holds."""
        c = self.temp(self.type_names[boolean])
        if guard is None:
            self.emit(f"{c} = {self.x(cond)};")
            return c
        self.emit(f"{c} = false;")
        self.emit(f"if ({guard}) {{")
        self.depth += 1
        self.emit(f"{c} = {self.x(cond)};")
        self.depth -= 1
        self.emit("}")
        return c

    def _guarded_lines(self, s, guard: str):
        """A barrier-holding plane or fragment operation under a guard: its barrier lines run
        unconditionally, the code between them only where the guard holds."""
        mark, depth = len(self.lines), self.depth
        self.depth = 0
        getattr(self, "s_" + type(s).__name__)(s)
        self.depth = depth
        lines = self.lines[mark:]
        del self.lines[mark:]
        fences = (self.barrier_stmt.strip(), self.local_barrier_stmt.strip())
        piece = []

        def out():
            if piece:
                self.emit(f"if ({guard}) {{")
                self.lines += ["    " * (depth + 1) + ln for ln in piece]
                self.emit("}")
                piece.clear()

        for ln in lines:
            if ln.strip() in fences:
                out()
                self.emit(ln.strip())
            else:
                piece.append(ln)
        out()

    def _guarded_loop(self, s, guard):
        """A barrier-holding loop under a guard: it runs zero times where the guard is off
        (its bounds are evaluated only where it holds)."""
        if guard is None:
            getattr(self, "s_" + type(s).__name__)(s)
            return
        if isinstance(s, ir.For):
            v = self.var(s.var)
            t = self.type_names[s.start.dtype]
            stop, step = self.temp(t), self.temp(t)
            self.emit(f"if ({guard}) {{")
            self.depth += 1
            self.emit(f"{v} = {self.x(s.start)};")
            self.emit(f"{stop} = {self.x(s.stop)};")
            self.emit(f"{step} = {self.x(s.step)};")
            self.depth -= 1
            self.emit("}")
            if isinstance(s.step, ir.Const):
                cond = f"{v} < {stop}" if s.step.value > 0 else f"{v} > {stop}"
            else:
                cond = f"({step} > 0 ? {v} < {stop} : {v} > {stop})"
            self.emit(f"for (; {guard} && {parens(cond)}; {v} += {step}) {{")
        else:
            self.emit("for (;;) {")
            self.depth += 1
            self.emit(f"if (!{guard}) break;")
            cond = self.x(s.cond)
            self.emit(f"if (!({cond})) break;")
            self.depth -= 1
        self._loop_body(s)
        self.emit("}")

    def _loop_body(self, s):
        """A loop's body; with flat_barriers, one holding a barrier ends at a barrier."""
        self.depth += 1
        mark = len(self.lines)
        if self.flat_barriers and self.holds_barrier(s):
            self._flat(s.body, None)
            last = self.lines[-1].strip() if len(self.lines) > mark else ""
            if last not in (self.barrier_stmt.strip(), self.local_barrier_stmt.strip()):
                self.emit(self.local_barrier_stmt)
        else:
            self.block(s.body)
        self.depth -= 1

    def _once(self, e) -> str:
        """An expression evaluated once before a loop (a temp unless it cannot change)."""
        text = self.x(e)
        if all(isinstance(n, (ir.Const, ir.TensorDim, ir.Position)) or
               (isinstance(n, ir.Var) and n.name in self.scalars and n.name not in self.k.var_types) or
               not isinstance(n, (ir.Var, ir.Load, ir.SharedLoad)) for n in ir.walk_expr(e)):
            return text
        n = self.temp(self.type_names[e.dtype])
        self.emit(f"{n} = {text};")
        return n

    def s_For(self, s):
        v = self.var(s.var)
        start = self.x(s.start)
        stop = self._once(s.stop)
        step = self._once(s.step)
        if isinstance(s.step, ir.Const):
            cond = f"{v} < {stop}" if s.step.value > 0 else f"{v} > {stop}"
        else:
            cond = f"({step} > 0 ? {v} < {stop} : {v} > {stop})"
        self.emit(f"for ({v} = {start}; {cond}; {v} += {step}) {{")
        self._loop_body(s)
        self.emit("}")

    def s_While(self, s):
        mark = len(self.lines)
        cond = self.x(s.cond)
        hoisted = self.lines[mark:]
        if not hoisted:
            self.emit(f"while {parens(cond)} {{")
        else:  # the condition loads vectors: evaluate them on every iteration
            del self.lines[mark:]
            self.emit("for (;;) {")
            self.lines += ["    " + h for h in hoisted]
            self.emit(f"    if (!({cond})) break;")
        self._loop_body(s)
        self.emit("}")

    def s_Break(self, s):
        self.emit("break;")

    def s_Continue(self, s):
        self.emit("continue;")

    def s_Return(self, s):
        self.emit("return;")

    def s_Barrier(self, s):
        self.emit(self.barrier_stmt)

    def s_SharedDecl(self, s):
        pass  # declared in the prologue from KernelIR.shared

    def s_FragDecl(self, s):
        pass

    def s_PlaneOp(self, s):
        for line in self.plane_op(s):
            self.emit(line)

    def s_FragFill(self, s):
        for line in self.frag_op(s):
            self.emit(line)

    s_FragLoad = s_FragStore = s_FragMma = s_FragFill

    def s_GroupMma(self, s):
        for line in self.group_mma(s):
            self.emit(line)

    def s_GroupWait(self, s):
        for line in self.group_wait(s):
            self.emit(line)

    def s_Atomic(self, s):
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

    def s_Print(self, s):
        fmt, args = "", []
        for part in s.parts:
            if isinstance(part, str):
                fmt += part.replace("%", "%%")
                continue
            spec, arg = self.print_arg(part.dtype, self.x(part))
            fmt += spec
            args.append(arg)
        self.emit(self.printf(fmt + "\n", args))

    # ------------------------------------------------------------------ bounds checks
    def param_index(self, name: str) -> int:
        return [p.name for p in self.k.params].index(name)

    def _check(self, off: str, lanes: int, limit: str, index: int, loc) -> str:
        self.need("kd_check")
        line = loc.line if loc is not None else 0
        i = self.literal
        return f"kd_check(kd_err, {off}, {i(lanes, i64)}, {limit}, {i(index, i64)}, {i(line, i64)})"

    def guarded_stmt(self, stmt, checked, off, lanes, limit, index, loc):
        if checked:
            self.emit(f"if {parens(self._check(off, lanes, limit, index, loc))} {stmt}")
        else:
            self.emit(stmt)

    # ================================================================== expressions
    def x(self, e) -> str:
        """C text of a scalar expression."""
        return getattr(self, "e_" + type(e).__name__)(e)

    def lanes(self, e) -> list:
        """C text of each lane of a vector expression."""
        if isinstance(e, ir.Var):
            return [f"{self.var(e.name)}_{i}" for i in range(e.dtype.lanes)]
        if isinstance(e, ir.VecMake):
            return [self.x(a) for a in e.elems]
        if isinstance(e, ir.Load):
            return self.vector_load(e)
        if isinstance(e, ir.BinOp):
            a, b = self._lanes_of(e.a, e.dtype.lanes), self._lanes_of(e.b, e.dtype.lanes)
            return [self.binop(e.op, x, y, e.dtype.elem) for x, y in zip(a, b)]
        if isinstance(e, ir.UnOp):
            return [self.unop(e.op, x, e.dtype.elem) for x in self.lanes(e.a)]
        if isinstance(e, ir.Cmp):
            a, b = self.lanes(e.a), self.lanes(e.b)
            return [self.compare(e.op, x, y, e.a.dtype.elem) for x, y in zip(a, b)]
        if isinstance(e, ir.Select):
            n = e.dtype.lanes
            c, a, b = self._lanes_of(e.cond, n), self._lanes_of(e.a, n), self._lanes_of(e.b, n)
            return [f"({ci} ? {ai} : {bi})" for ci, ai, bi in zip(c, a, b)]
        if isinstance(e, ir.Cast):
            src = e.a.dtype.elem if isinstance(e.a.dtype, VecType) else e.a.dtype
            return [self.cast(x, src, e.dtype.elem) for x in self._lanes_of(e.a, e.dtype.lanes)]
        if isinstance(e, ir.Math):
            n = e.dtype.lanes
            args = [self._lanes_of(a, n) for a in e.args]
            t = e.args[0].dtype.elem if isinstance(e.args[0].dtype, VecType) else e.args[0].dtype
            return [self.math_call(e.fn, [a[i] for a in args], t) for i in range(n)]
        raise NotImplementedError(f"{self.dialect}: vector {type(e).__name__}")

    def _lanes_of(self, e, n) -> list:
        return self.lanes(e) if isinstance(e.dtype, VecType) else [self.x(e)] * n

    def e_Const(self, e):
        return self.literal(e.value, e.dtype)

    def e_Var(self, e):
        return self.var(e.name)

    def e_TensorDim(self, e):
        return f"(int){self.tensor(e.tensor)}_{'s' if e.attr == 'shape' else 'st'}{e.axis}"

    def e_Position(self, e):
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

    def e_VecExtract(self, e):
        return self.lanes(e.a)[e.lane]

    def e_BinOp(self, e):
        return self.binop(e.op, self.x(e.a), self.x(e.b), e.dtype)

    def binop(self, op, a, b, t) -> str:
        if op in ("min", "max", "pow") or (op == "%" and t.is_float):
            return self.math_call(op, [a, b], t)
        text = f"({a} {op} {b})"
        if t is u8 or t is boolean:  # C promotes narrow operands to int
            return self.cast_to(t, text)
        return text

    def e_UnOp(self, e):
        return self.unop(e.op, self.x(e.a), e.dtype)

    def unop(self, op, a, t) -> str:
        if op == "not":
            return f"(!{a})"
        text = f"(~{a})" if op == "invert" else f"(-{a})"
        return self.cast_to(t, text) if t is u8 else text

    def e_Cmp(self, e):
        return self.compare(e.op, self.x(e.a), self.x(e.b), e.a.dtype)

    def compare(self, op, a, b, t) -> str:
        return f"({a} {op} {b})"

    def e_Logic(self, e):
        a = self.x(e.a)
        self._no_hoist += 1  # the right side may not run: nothing of it moves before the statement
        try:
            b = self.x(e.b)
        finally:
            self._no_hoist -= 1
        return f"({a} {'&&' if e.op == 'and' else '||'} {b})"

    def e_Select(self, e):
        c = self.x(e.cond)
        self._no_hoist += 1
        try:
            a, b = self.x(e.a), self.x(e.b)
        finally:
            self._no_hoist -= 1
        return f"({c} ? {a} : {b})"

    def e_Cast(self, e):
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

    def e_Bitcast(self, e):
        return self.bitcast(self.x(e.a), e.a.dtype, e.dtype)

    def e_Math(self, e):
        t = e.args[0].dtype
        return self.math_call(e.fn, [self.x(a) for a in e.args], t)

    def e_VecMake(self, e):
        raise NotImplementedError("a vector in a scalar context")

    # ------------------------------------------------------------------ memory
    def to_mem(self, x: str, t) -> str:
        return f"(({self.mem_type_names[t]})({x}))" if t is boolean else x

    def from_mem(self, x: str, t) -> str:
        return f"({x} != 0)" if t is boolean else x

    def e_Load(self, e):
        p = self.tensors[e.tensor]
        off = self.x(e.offset)
        v = self.from_mem(f"{self.tensor(e.tensor)}[{off}]", p.dtype)
        if e.checked:
            chk = self._check(off, 1, f"{self.tensor(e.tensor)}_n", self.param_index(e.tensor), e.loc)
            return f"({chk} ? {v} : {self.zero(p.dtype)})"
        return v

    def e_SharedLoad(self, e):
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

    # ================================================================== plane operations
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

    # ================================================================== matrix fragments
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
            m, n, k = ft.m, ft.n, ft.k
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
        at = (f"{self.x(t.offset)} + (({sc}) / 16) * {t.stored_rows * 16} + ({sr}) * 16 "
              f"+ (((({sc}) / 8) & 1) ^ ((({sr}) / 4) & 1)) * 8 + ({sc}) % 8")
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

    def e_FragGet(self, e):
        return self._elem(e.frag, e.elem)

    def s_FragSet(self, s):
        self.emit(f"{self._elem(s.frag, s.elem)} = {self.x(s.value)};")

    def s_FragConvert(self, s):
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


__all__ = ["CLikeRenderer", "KernelArg", "Rendered", "SKELETON", "cname", "parens", "HALVES"]
