"""Text-level helpers of the C-like renderer: C names, emitted lines, temporaries and literals."""
from __future__ import annotations

import math
import re

import numpy as np

from kerneldsl.dtypes import bf16, boolean, f16, f32, i32, i64, u32

HALVES = (f16, bf16)


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




class TextHelpers:
    """Lines, temporaries, helper requests, C names and literals (mixed into CLikeRenderer)."""

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

