"""cuLaunchKernel called through ctypes on plain integers.

cuda-python's `driver.cuLaunchKernel` wraps its handles and result in Python objects: about
4 µs a call on the H200 machine's host, most of a small launch's host time. The driver entry
point itself takes integers (a CUfunction and a CUstream are pointers; the parameter block is
an array of addresses), so the cuda runtime calls it through ctypes when the driver module in
use is cuda-python's own. Under another driver module (the tests' fake drivers) or where
ctypes cannot open the driver library, `launcher` gives None and launches keep cuda-python's
call.
"""
from __future__ import annotations

import ctypes
import functools


@functools.lru_cache(maxsize=None)
def _entry_point():
    try:
        lib = ctypes.CDLL("libcuda.so.1")  # the library cuda-python loaded (already in the process)
        fn = lib.cuLaunchKernel
    except (OSError, AttributeError):
        return None
    u32 = ctypes.c_uint
    fn.argtypes = [ctypes.c_void_p, u32, u32, u32, u32, u32, u32, u32, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def handle(cu_object) -> int | None:
    """A cuda-python handle (CUfunction, CUstream) as the integer it wraps; None for objects
    that are not (a fake driver's)."""
    try:
        return int(cu_object)
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=None)
def launcher(driver):
    """`cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra)` on ints,
    returning the CUresult as an int, when `driver` is cuda-python's driver module; else None."""
    try:
        from cuda.bindings import driver as real
    except ImportError:
        return None
    if driver is not real:
        return None
    return _entry_point()
