"""The arithmetic of the IR in numpy, where Python's own differs from the compiled runtimes':
C's truncating integer division, casts, bit casts, and math functions as kerneldsl/ir.py
defines them. Works on numpy scalars and on numpy arrays (vectors) alike."""
from __future__ import annotations

import math
import sys

import numpy as np

from kerneldsl.builtins.arrival import WORDS as ARRIVAL_WORDS
from kerneldsl.errors import DivergenceError


def _line() -> int:
    return sys._getframe(2).f_lineno


def idiv(a, b):
    """Integer a / b truncated toward zero (C)."""
    if np.any(b == 0):
        raise ZeroDivisionError(f"integer division by zero (line {_line()})")
    r = np.fmod(a, b)
    return (a - r) // b


def irem(a, b):
    """Integer a % b with the sign of a (C)."""
    if np.any(b == 0):
        raise ZeroDivisionError(f"integer remainder by zero (line {_line()})")
    return np.fmod(a, b)


def cast(a, t):
    """Numeric conversion (float -> int truncates; to bool is x != 0)."""
    if isinstance(a, np.ndarray):
        return a.astype(t)
    return np.asarray(a).astype(t)[()]


def bitcast(a, t):
    """The bits of `a` read as type `t` (same size)."""
    if isinstance(a, np.ndarray):
        return a.view(t)
    return np.asarray(a).view(t)[()]


def _typed(x, like):
    return cast(x, like.dtype.type)


def math_rsqrt(x):
    return _typed(1.0 / np.sqrt(x.astype(np.float64)), x)


def math_sigmoid(x):
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


def math_erf(x):
    if isinstance(x, np.ndarray):
        return np.array([math.erf(float(v)) for v in x], x.dtype)
    return x.dtype.type(math.erf(float(x)))


def math_round(x):
    """Half away from zero, exactly (x - trunc(x) is exact in binary floating point)."""
    t = np.trunc(x)
    d = x - t
    return np.where(np.abs(d) >= 0.5, t + np.sign(x), t).astype(x.dtype)[()]


def math_fma(a, b, c):
    """a * b + c, in f64 for f32 operands (the product is exact there)."""
    if a.dtype == np.float32:
        return _typed(a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64), a)
    return a * b + c


def math_min(a, b):
    return np.minimum(a, b)  # (NaN in, NaN out, as kd.min on every runtime)


def math_max(a, b):
    return np.maximum(a, b)


class KernelHelpers:
    """`_kd` in generated code: the numerics above, and what needs the kernel (fragments, print)."""

    idiv = staticmethod(idiv)
    irem = staticmethod(irem)
    cast = staticmethod(cast)
    bitcast = staticmethod(bitcast)
    math_rsqrt = staticmethod(math_rsqrt)
    math_sigmoid = staticmethod(math_sigmoid)
    math_erf = staticmethod(math_erf)
    math_round = staticmethod(math_round)
    math_fma = staticmethod(math_fma)
    math_min = staticmethod(math_min)
    math_max = staticmethod(math_max)

    def __init__(self, kir):
        self.frags = kir.frags
        self.plane_dim = kir.plane_dim

    @staticmethod
    def print(fmt: str, args: tuple):
        """kd.print: printf's %g and %d, one line, flushed (as the compiled runtimes print)."""
        print(fmt % tuple(float(a) if isinstance(a, np.floating) else int(a) for a in args), flush=True)

    @staticmethod
    def phase_check(bars, index, parity, where: str):
        """An emulated kd.barrier_wait inside a kd.role: roles run in program order here, so
        the phase must have completed already (else the kernel relies on roles running at
        once, which only hardware barriers give)."""
        completed = int(bars.data[int(index) * ARRIVAL_WORDS + 1])
        if (completed & 1) == int(parity):
            raise DivergenceError(
                f"kd.barrier_wait at {where} inside a kd.role waits on barrier {int(index)} for its phase of parity "
                f"{int(parity)}, which has not completed when the roles run one after another in program order "
                f"(as they do wherever arrival barriers are emulated): arrive at or copy into that phase in an "
                f"earlier role or before the role")

    def frag_convert(self, frags: dict, dst: str, src: str, lane):
        """This lane's share of acc fragment `src` rounded to the dtype of a fragment `dst`."""
        t = self.frags[dst].dtype.np
        n = self.frags[dst].rows * self.frags[dst].cols
        idx = np.arange(int(lane), n, self.plane_dim)
        frags[dst][idx] = frags[src][idx].astype(t).astype(np.float32)
