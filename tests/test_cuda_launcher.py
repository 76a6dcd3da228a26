"""The cuda runtime's native launcher (backends/cuda/launcher.py) against a stand-in for the
driver's cuLaunchKernel (a ctypes callback with its C signature), so the JIT'd launch loop is
checked on machines without a GPU: every descriptor word reaches the call, launches go in
order on the given stream, and the first failure stops the sequence and is reported with its
index."""
from __future__ import annotations

import ctypes

import pytest

from kerneldsl.backends.cuda import launcher

pytestmark = pytest.mark.feature("streams")

_CU_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p)


class FakeLaunch:
    """A cuLaunchKernel stand-in logging its arguments; `fail` maps a function handle to the
    CUresult it returns."""

    def __init__(self, fail=None):
        self.calls: list = []
        self.fail = fail or {}
        self.callback = _CU_LAUNCH(self._call)
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def _call(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        first = None  # the value of the first kernel parameter (params[0] points at it)
        if params:
            first = ctypes.cast(ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))[0], ctypes.POINTER(ctypes.c_uint64))[0]
        self.calls.append((f, (gx, gy, gz), (bx, by, bz), shared, stream, first, extra))
        return self.fail.get(f, 0)


def test_every_descriptor_word_reaches_the_driver_in_order():
    fake = FakeLaunch()
    native = launcher.NativeLauncher(fake.address)
    slot = (ctypes.c_uint64 * 1)(0xABCDEF)
    params = (ctypes.c_uint64 * 1)(ctypes.addressof(slot))
    descriptors = (launcher.descriptor(0x1000, (7, 2, 3), (128, 2, 1), 49152, ctypes.addressof(params))
                   + launcher.descriptor(0x2000, (1, 1, 1), (32, 1, 1), 0, 0))
    assert native.launch_all(descriptors.buffer_info()[0], 2, 0x5151) == 0
    assert fake.calls == [(0x1000, (7, 2, 3), (128, 2, 1), 49152, 0x5151, 0xABCDEF, None),
                          (0x2000, (1, 1, 1), (32, 1, 1), 0, 0x5151, None, None)]
    fake.calls.clear()
    assert native.launch_all(descriptors.buffer_info()[0], 0, 0x5151) == 0 and fake.calls == []


def test_the_first_failure_stops_the_sequence_and_names_its_launch():
    fake = FakeLaunch(fail={0x2000: 701})
    native = launcher.NativeLauncher(fake.address)
    descriptors = sum((launcher.descriptor(f, (1, 1, 1), (1, 1, 1), 0, 0) for f in (0x1000, 0x1001, 0x2000, 0x1002)),
                      launcher.descriptor(0x0FFF, (1, 1, 1), (1, 1, 1), 0, 0))
    code = native.launch_all(descriptors.buffer_info()[0], 5, 0)
    assert launcher.failure(code) == (3, 701)
    assert [c[0] for c in fake.calls] == [0x0FFF, 0x1000, 0x1001, 0x2000]  # nothing after the failure


def test_no_native_launcher_for_a_stand_in_driver():
    """Only the cuda-python driver module gets one (a test's fake driver launches through its own
    cuLaunchKernel)."""
    assert launcher.get(object()) is None
