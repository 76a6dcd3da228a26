"""The kernel around the body: the Jinja skeleton, the argument list, the prologue's
declarations and the static shared-memory budget (mixed into CLikeRenderer)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kerneldsl import ir
from kerneldsl.dtypes import VecType, boolean, i64
from kerneldsl.errors import UnsupportedFeatureError

from .text import cname

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



class KernelFrame:
    """Arguments, prologue and shared-memory size of a C-like kernel."""

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

