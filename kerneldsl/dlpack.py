"""DLPack on the host: `kd.from_dlpack(obj)` wraps another library's tensor without a copy,
and `export_host_array` exports a host array of any kd dtype (bf16 too) as a capsule.

numpy's DLPack support covers the standard dtypes only; for the rest (bf16, an
ml_dtypes extension dtype on the host) both directions use the ctypes capsules of
dlpack_capsule.py, which read and write DLPack's bfloat16 code (4, 16 bits)."""
from __future__ import annotations

import ctypes

import numpy as np

from . import dlpack_capsule
from .dtypes import as_dtype, bf16


def from_dlpack(obj, runtime=None):
    """A kd tensor sharing memory with `obj` (a numpy array, a torch tensor, or anything with
    `__dlpack__`), on `runtime` (default: cpu for host memory, cuda for CUDA memory)."""
    from .runtime import get_runtime
    if not hasattr(obj, "__dlpack__") and hasattr(obj, "__cuda_array_interface__"):
        from .interop import from_cuda_array_interface  # e.g. a numba device array
        return from_cuda_array_interface(obj, runtime)
    device = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else dlpack_capsule.KDL_CPU
    if device != dlpack_capsule.KDL_CPU:
        rt = get_runtime(runtime or "cuda")
        return rt.from_dlpack(obj)
    rt = get_runtime(runtime or "cpu")
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            arr = np.from_dlpack(obj)
        except (BufferError, TypeError, RuntimeError):  # a dtype numpy's importer refuses (bf16)
            arr = _host_array(obj)
    if not hasattr(rt, "wrap"):
        return rt.tensor(arr)
    return rt.wrap(arr)


def _host_array(obj) -> np.ndarray:
    """A numpy array (of the kd dtype's host type) over the memory of `obj`'s DLPack capsule;
    it holds the consumed capsule, whose deleter runs once the array and its views are gone."""
    try:
        capsule = obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer from before DLPack 1.0
        capsule = obj.__dlpack__()
    owner, data, device, dtype, shape, strides = dlpack_capsule.read_capsule(capsule, obj)
    if device[0] != dlpack_capsule.KDL_CPU:
        raise BufferError(f"from_dlpack: expected host memory (DLPack device type {dlpack_capsule.KDL_CPU}), "
                          f"got device type {device[0]}")
    item = dtype.itemsize
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if size == 0:
        return np.empty(shape, dtype.np)
    nbytes = item * (1 + sum((n - 1) * s for n, s in zip(shape, strides)))
    raw = (ctypes.c_uint8 * nbytes).from_address(data)
    raw.owner = owner  # the ctypes array keeps the capsule's producer alive for numpy's views
    arr = np.ndarray(shape, dtype=dtype.np, buffer=raw, strides=[s * item for s in strides])
    if owner.readonly:
        arr.flags.writeable = False
    return arr


def export_host_array(view: np.ndarray, dtype, stream=None, max_version=None, dl_device=None, copy=None):
    """The DLPack capsule of host array `view` holding kd `dtype` (the `__dlpack__` protocol's
    keywords): numpy's own for the dtypes it knows, ours for bf16; the capsule holds `view`."""
    dtype = as_dtype(dtype)
    if dtype is not bf16:
        kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version), ("dl_device", dl_device),
                                    ("copy", copy)) if v is not None}
        return view.__dlpack__(**kwargs)
    if stream is not None:
        raise BufferError(f"DLPack export of host memory takes stream=None, got stream={stream!r}")
    if dl_device is not None and tuple(dl_device) != (dlpack_capsule.KDL_CPU, 0):
        raise BufferError(f"DLPack export of a cpu tensor to device {tuple(dl_device)} needs a copy; "
                          f"use .numpy() or kd.runtime(...).tensor(...)")
    if copy:
        view = view.copy()
    item = view.itemsize
    data = view.ctypes.data if view.size else 0
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    return dlpack_capsule.export_view(data, (dlpack_capsule.KDL_CPU, 0), dtype, view.shape,
                                      [s // item for s in view.strides], view, not view.flags.writeable, versioned)
