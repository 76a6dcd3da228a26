"""Scalar and short-vector types of the DSL and of tensors.

One `DType` object per type (`kd.f32`, `kd.bf16`, ...). f16 and bf16 are storage
types: arithmetic on them is carried out in f32 (see `arith_type`). Host bf16
arrays use `ml_dtypes.bfloat16`, the well-kept numpy extension type for it, imported
the first time `kd.bf16.np` is read (importing it costs more than the rest of kerneldsl).
"""
from __future__ import annotations

import importlib
import sys

import numpy as np

__all__ = [
    "DType", "VecType", "f32", "f16", "bf16", "f64", "i32", "u32", "i64", "u8", "boolean",
    "as_dtype", "ALL_DTYPES", "FLOAT_DTYPES", "vec",
]


class DType:
    """A scalar type: name, size in bytes, kind ('f' float, 'i' signed, 'u' unsigned, 'b' bool),
    and `np`, its numpy dtype. `np_dtype` may be a "module:attribute" string naming a numpy
    type from an optional module: it is imported when `np` is first read."""

    __slots__ = ("name", "itemsize", "kind", "np", "_np_source")

    def __init__(self, name: str, itemsize: int, kind: str, np_dtype):
        self.name = name
        self.itemsize = itemsize
        self.kind = kind
        if isinstance(np_dtype, str) and ":" in np_dtype:
            self._np_source = np_dtype  # `np` stays unset until __getattr__ loads it
        else:
            self.np = np.dtype(np_dtype)

    def __getattr__(self, attr):
        # only reached for an unset slot: `np` of a dtype whose numpy type is deferred
        if attr != "np" or not hasattr(self, "_np_source"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
        module, _, name = self._np_source.partition(":")
        self.np = np.dtype(getattr(importlib.import_module(module), name))
        return self.np

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_signed(self) -> bool:
        return self.kind == "i"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def lanes(self) -> int:
        return 1

    @property
    def elem(self) -> "DType":
        return self

    def __repr__(self) -> str:
        return f"kd.{self.name}"

    __str__ = lambda self: self.name  # noqa: E731

    def __reduce__(self):
        return (as_dtype, (self.name,))

    def __call__(self, value):
        """Outside kernels, `kd.f32(1.5)` makes a numpy scalar; inside, it is a cast."""
        return self.np.type(value)


class VecType:
    """A short vector of 2, 4 or 8 lanes of one scalar type."""

    __slots__ = ("elem", "lanes")

    def __init__(self, elem: DType, lanes: int):
        if lanes not in (2, 4, 8):
            raise ValueError(f"vector lanes must be 2, 4 or 8, got {lanes}")
        self.elem = elem
        self.lanes = lanes

    name = property(lambda self: f"{self.elem.name}x{self.lanes}")
    kind = property(lambda self: self.elem.kind)
    is_float = property(lambda self: self.elem.is_float)
    is_int = property(lambda self: self.elem.is_int)
    is_bool = property(lambda self: self.elem.is_bool)
    is_signed = property(lambda self: self.elem.is_signed)
    itemsize = property(lambda self: self.elem.itemsize * self.lanes)

    def __eq__(self, other):
        return isinstance(other, VecType) and other.elem is self.elem and other.lanes == self.lanes

    def __hash__(self):
        return hash((self.elem.name, self.lanes))

    def __repr__(self):
        return f"kd.vec(kd.{self.elem.name}, {self.lanes})"

    __str__ = lambda self: self.name  # noqa: E731


def vec(elem, lanes: int) -> VecType:
    return VecType(as_dtype(elem), lanes)


f32 = DType("f32", 4, "f", np.float32)
f16 = DType("f16", 2, "f", np.float16)
bf16 = DType("bf16", 2, "f", "ml_dtypes:bfloat16")
f64 = DType("f64", 8, "f", np.float64)
i32 = DType("i32", 4, "i", np.int32)
u32 = DType("u32", 4, "u", np.uint32)
i64 = DType("i64", 8, "i", np.int64)
u8 = DType("u8", 1, "u", np.uint8)
boolean = DType("bool", 1, "b", np.bool_)

ALL_DTYPES = (f32, f16, bf16, f64, i32, u32, i64, u8, boolean)
FLOAT_DTYPES = (f32, f16, bf16, f64)

_BY_NAME = {d.name: d for d in ALL_DTYPES}
_ALIASES = {
    "float32": f32, "float": f32, "float16": f16, "half": f16, "bfloat16": bf16,
    "float64": f64, "double": f64, "int32": i32, "uint32": u32, "int64": i64,
    "uint8": u8, "bool_": boolean, "b1": boolean,
}
_BY_NP = {d.np: d for d in ALL_DTYPES if not hasattr(d, "_np_source")}
_DEFERRED_NP = tuple(d for d in ALL_DTYPES if hasattr(d, "_np_source"))


def by_numpy_dtype(npd) -> DType | None:
    """The DType of numpy dtype `npd`, or None for one we do not have."""
    d = _BY_NP.get(npd)
    if d is None:
        # a deferred type can only be in hand when its module has been imported
        for deferred in _DEFERRED_NP:
            if deferred._np_source.partition(":")[0] in sys.modules and npd == deferred.np:
                return deferred
    return d


def as_dtype(x) -> DType:
    """Accept a DType, a name ('f32', 'float32', 'bf16', ...) or a numpy dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        d = _BY_NAME.get(x) or _ALIASES.get(x)
        if d is not None:
            return d
    if x is bool:
        return boolean
    try:
        npd = np.dtype(x)
    except TypeError:
        npd = None
    d = by_numpy_dtype(npd) if npd is not None else None
    if d is not None:
        return d
    # torch dtypes and other objects with a recognisable name
    name = str(x).rsplit(".", 1)[-1]
    d = _BY_NAME.get(name) or _ALIASES.get(name)
    if d is not None:
        return d
    raise TypeError(f"unsupported dtype {x!r}; expected one of {', '.join(_BY_NAME)}")
