"""What every back end's load pipeline shares: the launch facts stored with a binary, the
rendered-source record the hooks pass along, and scalar-argument packing.

`Runtime.load` (kerneldsl/runtime.py) runs render -> dump -> compile -> cache -> wrap
for every back end; a back end supplies only the hooks (`renderings`, `compile_rendering`,
`wrap_binary`). A binary loaded from the disk cache is wrapped from a `LaunchInfo` and the
back end's JSON metadata alone, so a warm process never builds IR.
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from . import ir, loop_bounds
from .dtypes import as_dtype, bf16, boolean, f16, f32, f64
from .errors import SourceLoc


@dataclass(frozen=True)
class LaunchInfo:
    """What a launch needs to know of a compiled kernel, without its IR: name, runtime
    parameters (in launch order), cube shape, bounds-check flag and Python location."""
    name: str
    params: tuple  # ir.TensorParam | ir.ScalarParam
    cube_dim: tuple
    bounds_check: bool = False
    loc: SourceLoc | None = None
    written: tuple = ()  # indices of the tensor parameters the kernel writes (read-only checks)
    bulk_sources: tuple = ()  # indices of the tensor parameters kd.bulk_copy reads (layout checks)
    argument_bound: bool = False  # its work is fixed by the launch's argument words (loop_bounds.py)

    @property
    def cube_units(self) -> int:
        x, y, z = self.cube_dim
        return x * y * z

    @classmethod
    def of(cls, kir: ir.KernelIR) -> "LaunchInfo":
        """The launch facts of a specialised kernel."""
        names = ir.written_tensors(kir.body)
        written = tuple(p.index for p in kir.params if isinstance(p, ir.TensorParam) and p.name in names)
        bulk = tuple(p.index for p in kir.params if isinstance(p, ir.TensorParam) and p.name in kir.bulk_sources)
        return cls(kir.name, tuple(kir.params), tuple(kir.cube_dim), bool(kir.bounds_check), kir.loc, written, bulk,
                   loop_bounds.argument_bound(kir))

    def to_json(self) -> dict:
        params = [[p.name, "tensor", p.dtype.name, p.ndim] if isinstance(p, ir.TensorParam)
                  else [p.name, "scalar", p.dtype.name, 0] for p in self.params]
        loc = None if self.loc is None else [self.loc.filename, self.loc.line, self.loc.col]
        return {"name": self.name, "params": params, "cube_dim": list(self.cube_dim),
                "bounds_check": self.bounds_check, "loc": loc, "written": list(self.written),
                "bulk_sources": list(self.bulk_sources), "argument_bound": self.argument_bound}

    @classmethod
    def from_json(cls, d: dict) -> "LaunchInfo":
        params = tuple(ir.TensorParam(name, as_dtype(dt), ndim, i) if kind == "tensor"
                       else ir.ScalarParam(name, as_dtype(dt), i)
                       for i, (name, kind, dt, ndim) in enumerate(d["params"]))
        loc = None if d["loc"] is None else SourceLoc(*d["loc"])
        return cls(d["name"], params, tuple(d["cube_dim"]), bool(d["bounds_check"]), loc, tuple(d["written"]),
                   tuple(d.get("bulk_sources", ())), bool(d.get("argument_bound", False)))


class LaunchArg(NamedTuple):
    """One argument of a generated C-like kernel, in launch order (as the renderer made
    it): kind 'data' | 'offset' | 'extent' | 'shape' | 'stride' | 'scalar' | 'errbuf',
    the kernel parameter it comes from (None for 'errbuf') and the axis of shape/stride."""
    kind: str
    param: object
    axis: int


def launch_args_to_json(args) -> list:
    """[kind, parameter index or -1, axis] per argument of a rendered C-like kernel."""
    return [[a.kind, -1 if a.param is None else a.param.index, a.axis] for a in args]


def launch_args_from_json(data, params) -> list:
    """The `LaunchArg`s stored by `launch_args_to_json`, bound to `params`."""
    return [LaunchArg(kind, None if idx < 0 else params[idx], axis) for kind, idx, axis in data]


@dataclass
class Rendering:
    """A generated source on its way to the compiler: the text, the launch facts to store
    with the binary (JSON-able; a compile hook may add to them), the renderer's own result
    for the compile hook (e.g. to map compiler messages back to Python lines), and what
    the compile hook made besides the image for `wrap_binary` to reuse (e.g. a built program)."""
    source: str
    meta: dict = field(default_factory=dict)
    rendered: object = None
    compiled: object = None


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOAT_STORAGE = {f32: np.float32, f64: np.float64, f16: np.float16}


def scalar_bits(dtype, value) -> int:
    """The bit pattern of a scalar argument as a non-negative int of the dtype's width
    (what a kernel reads from the low bytes of its argument slot)."""
    if dtype is boolean:
        return int(bool(value))
    if dtype is bf16:
        return int(np.array(value, np.float32).astype(bf16.np).view(np.uint16))
    storage = _FLOAT_STORAGE.get(dtype)
    if storage is not None:
        return int(np.array(value, storage).view(_UNSIGNED[dtype.itemsize]))
    return int(value) & ((1 << (8 * dtype.itemsize)) - 1)


_STRUCT_FORMATS = {f32: ("<f", "<I"), f64: ("<d", "<Q"), f16: ("<e", "<H")}
_EXACT_INT = 1 << 53  # ints a double holds exactly (so packing them as Python floats rounds once, as numpy does)


def scalar_packer(dtype):
    """A function `value -> scalar_bits(dtype, value)` for one dtype, made once per kernel
    parameter: plain Python floats and ints go through `struct` (a tenth of numpy's cost);
    anything else, NaN and values out of range take `scalar_bits` itself."""
    formats = _STRUCT_FORMATS.get(dtype)
    if formats is not None:
        pack, unpack = struct.Struct(formats[0]).pack, struct.Struct(formats[1]).unpack

        def float_bits(value):
            kind = type(value)
            if (kind is float and value == value) or (kind is int and -_EXACT_INT <= value <= _EXACT_INT):
                try:
                    return unpack(pack(value))[0]
                except (OverflowError, struct.error):  # past the range of the dtype: numpy gives inf
                    pass
            return scalar_bits(dtype, value)
        return float_bits
    if dtype is boolean or dtype is bf16:
        return functools.partial(scalar_bits, dtype)
    mask = (1 << (8 * dtype.itemsize)) - 1

    def int_bits(value):
        return int(value) & mask
    int_bits.mask = mask  # (generated launch code inlines the masking: backends/cuda/slots.py)
    return int_bits


def scalar_value(dtype, value):
    """A numpy scalar with the bytes of a scalar argument (for APIs that take typed values)."""
    return _UNSIGNED[dtype.itemsize](scalar_bits(dtype, value))


def scalar_value_packer(dtype):
    """A function `value -> scalar_value(dtype, value)` for one dtype (see `scalar_packer`)."""
    bits, unsigned = scalar_packer(dtype), _UNSIGNED[dtype.itemsize]
    return lambda value: unsigned(bits(value))


__all__ = ["LaunchInfo", "LaunchArg", "Rendering", "launch_args_to_json", "launch_args_from_json",
           "scalar_bits", "scalar_packer", "scalar_value",
           "scalar_value_packer"]
