"""The CUDA array interface (version 3), both ways, independent of the driver.

`cuda_array_interface(t, data, stream)` is the dict a CUDA tensor exports as
`__cuda_array_interface__`; `read_cuda_array_interface(obj)` checks and decodes another
library's. The interface spells dtypes as numpy type strings, and numpy has no bf16:
bf16 is "<V2", as PyTorch (since 2.6) and ml_dtypes spell it (`np.dtype(ml_dtypes.bfloat16).str`);
numba and CuPy have no bf16 to compare with, and JAX refuses to export bf16 this way. A
"<V2" array is read back as bf16. Strides are in bytes, None when the tensor is contiguous.
`kd.from_cuda_array_interface(obj)` is the importer (`kd.from_dlpack` calls it for an object
that has the interface but no `__dlpack__`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .dtypes import DType, bf16, boolean, f16, f32, f64, i32, i64, u8, u32

TYPESTRS = {f32: "<f4", f16: "<f2", bf16: "<V2", f64: "<f8", i32: "<i4", u32: "<u4", i64: "<i8", u8: "|u1",
            boolean: "|b1"}
_BY_TYPESTR = {v: k for k, v in TYPESTRS.items()}
_BY_TYPESTR.update({"<u1": u8, "<b1": boolean})


def cuda_array_interface(t, data: int, stream: int | None) -> dict:
    """The version-3 interface of tensor `t` whose first element is at device address `data`,
    to be read after the work queued on CUDA stream `stream` (None: nothing to wait for)."""
    item = t.dtype.itemsize
    strides = None if t.is_contiguous() else tuple(st * item for st in t.strides)
    if stream == 0:
        stream = 1  # 0 is not allowed in the interface; the legacy default stream is 1
    return {"shape": tuple(t.shape), "typestr": TYPESTRS[t.dtype], "data": (int(data), bool(t.readonly)),
            "strides": strides, "version": 3, "stream": stream}


@dataclass(frozen=True)
class ArrayDescription:
    """An imported array: device address, shape, element strides, dtype, and the stream to
    wait for before reading it."""

    data: int
    shape: tuple
    strides: tuple
    dtype: DType
    readonly: bool
    stream: int | None

    @property
    def extent_bytes(self) -> int:
        if not self.shape or math.prod(self.shape) == 0:
            return self.dtype.itemsize if not self.shape else 0
        return self.dtype.itemsize * (1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides)))


def read_cuda_array_interface(obj) -> ArrayDescription:
    """Decode `obj.__cuda_array_interface__` (versions 0-3), failing loudly on what a kd tensor
    cannot view: an unknown typestr, a mask, negative or unaligned strides."""
    from .tensor import contiguous_strides
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        raise TypeError(f"from_cuda_array_interface: a {type(obj).__name__} has no __cuda_array_interface__") from None
    if not isinstance(cai, dict):
        raise TypeError(f"__cuda_array_interface__ must be a dict, got {type(cai).__name__}")
    missing = [k for k in ("shape", "typestr", "data", "version") if k not in cai]
    if missing:
        raise ValueError(f"__cuda_array_interface__ lacks {', '.join(missing)}")
    typestr = cai["typestr"]
    dtype = _BY_TYPESTR.get(typestr.replace("=", "<") if isinstance(typestr, str) else typestr)
    if dtype is None:
        raise TypeError(f"__cuda_array_interface__ typestr {typestr!r} has no kd dtype; kd reads "
                        f"{', '.join(sorted(TYPESTRS.values()))} (\"<V2\" is bf16)")
    if cai.get("mask") is not None:
        raise ValueError("__cuda_array_interface__ with a mask cannot be viewed by a kd tensor")
    shape = tuple(int(n) for n in cai["shape"])
    data, readonly = cai["data"]
    item = dtype.itemsize
    if cai.get("strides") is None:
        strides = contiguous_strides(shape)
    else:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if len(byte_strides) != len(shape) or any(s < 0 or s % item for s in byte_strides):
            raise ValueError(f"__cuda_array_interface__ strides {byte_strides} (bytes) must be {len(shape)} "
                             f"non-negative multiples of the item size {item}")
        strides = tuple(s // item for s in byte_strides)
    stream = cai.get("stream") if int(cai["version"]) >= 3 else None
    if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int) or stream <= 0):
        raise ValueError(f"__cuda_array_interface__ stream must be None or a positive int (1: legacy default "
                         f"stream, 2: per-thread default stream), got {stream!r}")
    return ArrayDescription(int(data or 0), shape, strides, dtype, bool(readonly), stream)


def from_cuda_array_interface(obj, runtime=None):
    """A kd tensor sharing device memory with `obj` (anything with `__cuda_array_interface__`:
    a numba device array, a CuPy array, a torch CUDA tensor), no copy. `runtime` defaults to
    "cuda" (then the device the pointer is on); the current stream waits for the stream the
    interface names."""
    from .runtime import get_runtime
    return get_runtime(runtime or "cuda").from_cuda_array_interface(obj)
