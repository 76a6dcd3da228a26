"""Non-temporal stores for kernels that ask kd.streaming_stores(), on x86: a pass over the
optimised module (after LLVM's vectorisers, which refuse to vectorise a store marked
non-temporal unless its alignment is the vector's, which a unit loop's store never states).

Every vector store of 32 bytes or more to a tensor (the renderer tags a streaming kernel's
tensor stores with the TBAA type TENSOR_TYPE; kd.shared arrays and spills stay cached, as
they are read again) becomes a call of a small always-inlined helper that tests the address:
aligned to the vector's width (at most a line, MAX_ALIGN), the store is non-temporal
(`vmovntps`: no read of the line first, and no cache line kept); otherwise a plain store (an unaligned non-temporal vector
store would be split into 8-byte `movnti`s). A unit loop's stores advance by whole vectors,
so the test goes the same way every trip. Non-temporal stores are weakly ordered: every
function that made them ends with an `sfence`, so they are visible to other threads before
the launch reports its end."""
from __future__ import annotations

import re

import llvmlite.binding as llvm

from . import ir_text

_BITS = {"float": 32, "double": 64, "half": 16, "bfloat": 16, "i8": 8, "i16": 16, "i32": 32, "i64": 64}
_VECTOR_STORE = re.compile(r"^(\s*)store <(\d+) x (float|double|half|bfloat|i8|i16|i32|i64)> (.+?), "
                           r"ptr ([^\s,]+), align (\d+)(,.*)?$", re.M)
TENSOR_TYPE = "kd.tensor"  # the TBAA type of tensor stores (memory.Memory.tensor_store_tag)
MIN_BYTES = 32  # narrower stores stay as they are (a 16-byte non-temporal store fills a line in 4)
# the alignment a streamed store's address is tested for: its width, at most one 64-byte line
# (the widest register). A wider store (a ×2 interleave of 512-bit vectors is 128 bytes) is
# split into 64-byte `vmovntps`, each aligned where its first is. Testing its full width, a
# tensor 64-byte but not 128-byte aligned streamed none of its stores (nearest ×2 of
# [32, 64, 256²] f32 with 512-bit vectors, 2-core Emerald Rapids: 170 ms a call, 47 ms tested
# at 64 bytes)
MAX_ALIGN = 64
SFENCE = "call void @llvm.x86.sse.sfence()"


applies = ir_text.applies  # (x86-64: `vmovnt*` and `sfence`)


def rewrite(text: str) -> str | None:
    """The module's text with its wide vector stores streaming (module docstring), or None
    where it has none."""
    tag = _tensor_tag(text)
    if tag is None:
        return None
    helpers: dict = {}

    def helper_call(m) -> str:
        indent, lanes, elem, value, ptr, align, rest = m.groups()
        nbytes = int(lanes) * _BITS[elem] // 8
        if nbytes < MIN_BYTES or nbytes & (nbytes - 1) or not re.search(rf"!tbaa {tag}\b", rest or ""):
            return m.group(0)
        name = f'@"kd.stream.{lanes}x{elem}.{align}"'
        helpers[name] = (f"<{lanes} x {elem}>", min(nbytes, MAX_ALIGN), align)
        return f"{indent}call void {name}(ptr {ptr}, <{lanes} x {elem}> {value})"

    text = _VECTOR_STORE.sub(helper_call, text)
    if not helpers:
        return None
    parts = [_fenced(text), "declare void @llvm.x86.sse.sfence()"]
    for name, (vector, line, align) in helpers.items():
        parts.append(f"""define internal void {name}(ptr %p, {vector} %v) alwaysinline {{
entry:
  %address = ptrtoint ptr %p to i64
  %low = and i64 %address, {line - 1}
  %aligned = icmp eq i64 %low, 0
  br i1 %aligned, label %stream, label %plain
stream:
  store {vector} %v, ptr %p, align {line}, !nontemporal !{{i32 1}}
  ret void
plain:
  store {vector} %v, ptr %p, align {align}
  ret void
}}""")
    return "\n".join(parts) + "\n"


def _tensor_tag(text: str) -> str | None:
    """The metadata id ("!7") of the access tag of TENSOR_TYPE in an optimised module's text."""
    kind = re.search(rf'^(![0-9]+) = !{{!"{re.escape(TENSOR_TYPE)}", ', text, re.M)
    if kind is None:
        return None
    tag = re.search(rf"^(![0-9]+) = !{{{kind.group(1)}, {kind.group(1)}, i64 0}}$", text, re.M)
    return tag.group(1) if tag else None


def _fenced(text: str) -> str:
    """`text` with an sfence before each `ret void` of the functions that call a helper
    (a kernel entry returns after its range of cubes: one fence a range)."""
    lines = text.split("\n")
    out: list = []
    body: list = []  # the lines of the function being read
    for line in lines:
        if body or line.startswith("define "):
            body.append(line)
            if line == "}":
                streams = any('@"kd.stream.' in b for b in body)
                out.extend(f"  {SFENCE}\n{b}" if streams and b.strip() == "ret void" else b for b in body)
                body = []
            continue
        out.append(line)
    return "\n".join(out + body)


def streaming(mod, target_machine):
    """`mod` (optimised) with its wide vector stores streaming: a new module, the helpers
    inlined; `mod` itself where it has no such store or the target is not x86-64."""
    out = ir_text.reparsed(mod, rewrite)
    if out is None:
        return mod
    passes = llvm.create_new_module_pass_manager()
    passes.add_always_inliner_pass()
    passes.add_global_dead_code_eliminate_pass()
    passes.run(out, llvm.create_pass_builder(target_machine, llvm.create_pipeline_tuning_options(speed_level=1)))
    return out
