"""DLPack import: `kd.from_dlpack(obj)` wraps another library's CPU tensor without a copy."""
from __future__ import annotations

import numpy as np


def from_dlpack(obj, runtime=None):
    """A kd tensor sharing memory with `obj` (a numpy array, a torch CPU tensor, or anything
    with `__dlpack__`). bf16 torch tensors are read through an int16 view, which DLPack's
    numpy importer accepts, and reinterpreted as ml_dtypes.bfloat16."""
    from .runtime import get_runtime
    if not hasattr(obj, "__dlpack__") and hasattr(obj, "__cuda_array_interface__"):
        from .interop import from_cuda_array_interface  # e.g. a numba device array
        return from_cuda_array_interface(obj, runtime)
    device = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else 1
    if device != 1:
        rt = get_runtime(runtime or "cuda")
        return rt.from_dlpack(obj)
    rt = get_runtime(runtime or "cpu")
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            arr = np.from_dlpack(obj)
        except (BufferError, TypeError, RuntimeError):
            if "bfloat16" not in str(getattr(obj, "dtype", "")):
                raise
            import ml_dtypes
            import torch
            arr = np.from_dlpack(obj.view(torch.int16)).view(ml_dtypes.bfloat16)
    if not hasattr(rt, "wrap"):
        return rt.tensor(arr)
    return rt.wrap(arr)
