"""Argument checks shared by every rudnn family (SPEC §0), run before anything launches.

A family binds one `Checks` to its error class (and, optionally, the function being
called) and validates each argument through it; every failure raises that class with
a message naming the argument, what is needed and what was given:

    check = Checks(MoeError)
    x = check.tensor("input", input, rank=2, dtypes=FLOAT_DTYPES)
    check.same_runtime({"input": input, "bias": bias})        # None entries are skipped
    k = check.integer("options.top_k", options.top_k, low=1, high=experts, high_is="the number of experts")
    # -> MoeError("options.top_k must be between 1 and the number of experts (8), got 9")

Checks that only one family needs stay in its problem.py, raising its error the same way.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import kerneldsl as kd
import numpy as np

FLOAT_DTYPES = (kd.f32, kd.f16, kd.bf16)


def dtype_names(dtypes) -> str:
    """'F32, F16 or BF16' for (f32, f16, bf16)."""
    names = [d.name.upper() for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def describe(value) -> str:
    """What a caller passed, for a message: a tensor's dtype and shape, a plain value's repr,
    or else the value's type."""
    if isinstance(value, kd.Tensor):
        return f"a {value.dtype.name.upper()} tensor of shape {list(value.shape)}"
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return repr(value)
    return f"a {type(value).__name__}"


@dataclass(frozen=True)
class Checks:
    """The shared checks, raising `error` (a family's `rudnn.RudnnError` subclass); `where`
    (a function name, say) prefixes every message when given."""

    error: type
    where: str = ""

    def at(self, where: str) -> "Checks":
        """The same checks with messages prefixed by `where: ` (e.g. the public function's name)."""
        key = (self.error, where)
        checks = _AT.get(key)
        if checks is None:
            checks = _AT[key] = Checks(self.error, where)
        return checks

    def fail(self, message: str):
        """Raise the family error with `message` (prefixed by `where`)."""
        raise self.error(f"{self.where}: {message}" if self.where else message)

    # ------------------------------------------------------------------ tensors
    def tensor(self, name: str, value, *, rank: int | None = None, dtypes=None, shape: tuple | None = None,
               what: str = "", runtime=None, runtime_of: str = "the other tensors") -> kd.Tensor:
        """A kerneldsl tensor, of rank `rank`, one of `dtypes`, of exactly `shape` (`what` says
        where that shape comes from) and on `runtime` (that of `runtime_of`), each if given."""
        if not isinstance(value, kd.Tensor):
            need = f"an {dtype_names(dtypes)} tensor" if dtypes and len(dtypes) == 1 else "a kerneldsl tensor"
            self.fail(f"{name} must be {need}{self._shape_note(shape, what)}, got {describe(value)}")
        if rank is not None:
            self.rank(name, value, rank)
        if dtypes is not None:
            self.dtype(name, value, dtypes)
        if shape is not None:
            self.shape(name, value, shape, what)
        if runtime is not None:
            self.on_runtime(name, value, runtime, runtime_of)
        return value

    def rank(self, name: str, t: kd.Tensor, rank: int) -> None:
        if t.ndim != rank:
            self.fail(f"{name} must have rank {rank}, got rank {t.ndim} (shape {list(t.shape)})")

    def dtype(self, name: str, t: kd.Tensor, dtypes, expected: str = "") -> None:
        """`t.dtype` one of `dtypes`; `expected` replaces their names in the message."""
        if t.dtype not in dtypes:
            self.fail(f"{name} must be {expected or dtype_names(dtypes)}, got {t.dtype.name.upper()}")

    def shape(self, name: str, t: kd.Tensor, shape: tuple, what: str = "") -> None:
        if t.shape != shape and tuple(t.shape) != tuple(shape):
            self.fail(f"{name} must have shape {list(shape)}{self._note(what)}, got {list(t.shape)}")

    def same_dtype(self, name: str, t: kd.Tensor, ref_name: str, ref: kd.Tensor) -> None:
        if t.dtype is not ref.dtype:
            self.fail(f"{name} must have the dtype of {ref_name} ({ref.dtype.name.upper()}), "
                      f"got {t.dtype.name.upper()}")

    def on_runtime(self, name: str, t: kd.Tensor, runtime, runtime_of: str) -> None:
        """`t` on `runtime` (the runtime of `runtime_of`); the message names both runtimes."""
        if t.runtime is not runtime and t.runtime.device_key != runtime.device_key:
            self.fail(f"{name} is on runtime {t.runtime.name!r} but {runtime_of} is on {runtime.name!r}: "
                      f"all tensors of one call must share a runtime")

    def same_runtime(self, named: dict) -> None:
        """Every tensor of `named` on the runtime of the first one. Values that are not tensors
        (None for an optional argument, or a wrong type) are skipped: the argument's own check,
        whether it comes before or after this one, names them with the family's error."""
        items = [(n, t) for n, t in named.items() if isinstance(t, kd.Tensor)]
        if not items:
            return
        first_name, first = items[0]
        for n, t in items[1:]:
            self.on_runtime(n, t, first.runtime, first_name)

    # ------------------------------------------------------------------ scalars and options
    def integer(self, name: str, value, *, low: int | None = None, high: int | None = None,
                high_is: str = "") -> int:
        """A Python int (not a bool) in [low, high] (either bound optional); `high_is` names
        where `high` comes from in the message."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{name} must be an int, got {value!r}")
        too_low = low is not None and value < low
        too_high = high is not None and value > high
        if too_low or too_high:
            top = f"{high_is} ({high})" if high_is else f"{high}"
            need = (f"between {low} and {top}" if low is not None and high is not None
                    else f">= {low}" if low is not None else f"<= {top}")
            self.fail(f"{name} must be {need}, got {value}")
        return value

    def number(self, name: str, value, *, positive: bool = False) -> float:
        """A finite real number (not a bool; numpy scalars and objects with __float__ accepted),
        > 0 if `positive`; returned as a float."""
        if type(value) is not float and (isinstance(value, (bool, str)) or not (isinstance(value, numbers.Real)
                                                                                or hasattr(value, "__float__"))):
            self.fail(f"{name} must be a number, got {value!r}")
        f = float(value)
        if not math.isfinite(f) or (positive and f <= 0):
            self.fail(f"{name} must be {'a finite number > 0' if positive else 'a finite number'}, got {value!r}")
        return f

    def boolean(self, name: str, value) -> bool:
        """A bool (numpy's bool_ accepted), returned as a Python bool."""
        if not isinstance(value, (bool, np.bool_)):
            self.fail(f"{name} must be a bool, got {value!r}")
        return bool(value)

    def instance(self, name: str, value, cls, expected: str = ""):
        """An instance of `cls` (a class or a tuple of them); `expected` describes it in the message."""
        if not isinstance(value, cls):
            need = expected or (cls.__name__ if isinstance(cls, type) else " or ".join(c.__name__ for c in cls))
            self.fail(f"{name} must be {_article(need)}, got {describe(value)}")
        return value

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _note(what: str) -> str:
        return f" ({what})" if what else ""

    def _shape_note(self, shape, what: str) -> str:
        return f" of shape {list(shape)}{self._note(what)}" if shape is not None else ""


_AT: dict = {}  # (error, where) -> Checks: `Checks.at` is called on every operator call


def _article(noun: str) -> str:
    return noun if noun.split()[0] in ("a", "an", "one") else f"an {noun}" if noun[0] in "AEIOU" else f"a {noun}"


def aligned(t: kd.Tensor, elements: int) -> bool:
    """Whether t's first element sits on a multiple of `elements` elements (what a vector load
    of that width needs). Memory whose address is not known here (an OpenCL buffer) counts
    by its offset alone: such allocations start on 128-byte boundaries or better."""
    raw = t.buffer.raw
    addr = raw if isinstance(raw, int) else getattr(getattr(raw, "ctypes", None), "data", None)
    start = t.offset * t.dtype.itemsize
    width = elements * t.dtype.itemsize
    return start % width == 0 and (addr is None or (addr + start) % width == 0)
