"""One-lane masked stores made scalar stores, before x86 code generation: a guard against a
miscompile of the LLVM that llvmlite ships (22.1 when this was written).

The loop vectoriser stores a unit loop's last partial vector with `llvm.masked.store` and,
where the trip count is a compile-time constant, a constant mask. When that mask has one
lane set and the stored vector was narrowed (bf16 or u8 from 32-bit lanes, i32 from i64),
the x86 back end emits a store of the unnarrowed lane: `vmovd` writes 4 bytes for one
2-byte bf16, so the element after the kernel's last one is overwritten. A loop `for i0 in
range(0, IS, BX): if i0 + u < IS: out[i0 + u] = ...` over a bf16 tensor with IS a constant
of 9, 17, 25, ... wrote out[IS]. An extract and a scalar store, written here in the IR,
store exactly the one element."""
from __future__ import annotations

import itertools
import re

from . import ir_text

_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat": 2, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "ptr": 8}
_MASKED_STORE = re.compile(
    r"^(\s*)(?:tail |notail |musttail )?call void @llvm\.masked\.store\.[\w.]+\("
    r"<(\d+) x ([\w]+)> (.+?), ptr align (\d+) ([^,]+?), <(\d+) x i1> <([^<>]*)>\)(.*)$", re.M)


def rewrite(text: str) -> str | None:
    """The module's text with each masked store of one constant lane as a scalar store of that
    lane, or None where it has none."""
    names = itertools.count()
    changed = False

    def scalar_store(m) -> str:
        nonlocal changed
        indent, lanes, elem, value, align, ptr, mask_lanes, mask, rest = m.groups()
        bits = [b.strip() for b in mask.split(",")]
        if mask_lanes != lanes or len(bits) != int(lanes) or bits.count("i1 true") != 1 or \
                any(b not in ("i1 true", "i1 false") for b in bits):
            return m.group(0)
        lane = bits.index("i1 true")
        n = next(names)
        size = _BYTES.get(elem, 1)
        at = min(int(align), size) if lane else int(align)
        changed = True
        return (f"{indent}%kd.lane{n} = extractelement <{lanes} x {elem}> {value}, i64 {lane}\n"
                f"{indent}%kd.at{n} = getelementptr {elem}, ptr {ptr}, i64 {lane}\n"
                f"{indent}store {elem} %kd.lane{n}, ptr %kd.at{n}, align {at}{rest}")

    out = _MASKED_STORE.sub(scalar_store, text)
    return out if changed else None


def one_lane_stores_fixed(mod):
    """`mod` (optimised) with its one-lane masked stores scalar (module docstring): a new
    module, or `mod` itself where it has none or the target is not x86-64."""
    out = ir_text.reparsed(mod, rewrite)
    return mod if out is None else out
