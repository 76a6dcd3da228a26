"""Native kernel launches: a few lines of JIT'd code that call the driver's `cuLaunchKernel`
for launch descriptors packed once, so that several launches cost one call from Python.

A replayed operator call (kerneldsl/replay.py) issues its consecutive launches together
(`CudaRuntime.join_launches`). Each launch is a *descriptor* of DESCRIPTOR_WORDS unsigned
64-bit words (the function handle, grid, cube shape, dynamic shared bytes and the address of
the parameter-address array cuLaunchKernel reads); `launch_all(descriptors, n, stream)`
launches n consecutive descriptors in order on one stream and stops at the first failure.
On an H200 host one launch through it costs about what cuda-python's call does (3.9 against
4.2 µs: the ctypes call costs what cuda-python's conversions do), so lone launches stay on
cuda-python; a joined call saves that cost for every launch after the first. The function
is compiled once per process with llvmlite (the cpu back end's JIT, a core dependency) and
calls the entry point cuda-python uses; where either cannot be had (no llvmlite target, a
driver that does not give the entry point, a test's fake driver), `get` returns None and
launches go one by one.
"""
from __future__ import annotations

import array
import ctypes
import functools

FUNCTION, GRID, BLOCK, SHARED, PARAMS = 0, 1, 4, 7, 8  # word offsets in a descriptor
DESCRIPTOR_WORDS = 9

_IR = """
define i64 @kd_cuda_launch_all(i64* %desc, i64 %n, i64 %stream) {{
entry:
  %launch = inttoptr i64 {entry} to i32 (i8*, i32, i32, i32, i32, i32, i32, i32, i8*, i8**, i8**)*
  %s = inttoptr i64 %stream to i8*
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %base = mul i64 %i, {words}
  %fw = call i64 @word(i64* %desc, i64 %base, i64 {FUNCTION})
  %f = inttoptr i64 %fw to i8*
  %gx = call i32 @word32(i64* %desc, i64 %base, i64 {GX})
  %gy = call i32 @word32(i64* %desc, i64 %base, i64 {GY})
  %gz = call i32 @word32(i64* %desc, i64 %base, i64 {GZ})
  %bx = call i32 @word32(i64* %desc, i64 %base, i64 {BX})
  %by = call i32 @word32(i64* %desc, i64 %base, i64 {BY})
  %bz = call i32 @word32(i64* %desc, i64 %base, i64 {BZ})
  %sh = call i32 @word32(i64* %desc, i64 %base, i64 {SHARED})
  %pw = call i64 @word(i64* %desc, i64 %base, i64 {PARAMS})
  %p = inttoptr i64 %pw to i8**
  %r = call i32 %launch(i8* %f, i32 %gx, i32 %gy, i32 %gz, i32 %bx, i32 %by, i32 %bz, i32 %sh, i8* %s, i8** %p, i8** null)
  %ok = icmp eq i32 %r, 0
  br i1 %ok, label %next, label %fail
next:
  %i1 = add i64 %i, 1
  br label %loop
fail:
  %at = add i64 %i, 1
  %hi = shl i64 %at, 32
  %lo = zext i32 %r to i64
  %code = or i64 %hi, %lo
  ret i64 %code
done:
  ret i64 0
}}

define internal i64 @word(i64* %desc, i64 %base, i64 %k) alwaysinline {{
  %at = add i64 %base, %k
  %p = getelementptr i64, i64* %desc, i64 %at
  %v = load i64, i64* %p, align 8
  ret i64 %v
}}

define internal i32 @word32(i64* %desc, i64 %base, i64 %k) alwaysinline {{
  %v = call i64 @word(i64* %desc, i64 %base, i64 %k)
  %t = trunc i64 %v to i32
  ret i32 %t
}}
"""

_LAUNCH_ALL = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64)


def descriptor(function: int, grid, block, shared: int, params_ptr: int) -> array.array:
    """One launch's descriptor words (module docstring)."""
    return array.array("Q", [function, *grid, *block, shared, params_ptr])


def failure(code: int) -> tuple:
    """(index of the launch that failed, its CUresult value) from a nonzero `launch_all` result."""
    return (code >> 32) - 1, code & 0xFFFFFFFF


class NativeLauncher:
    """The JIT'd `launch_all` (one engine per process, kept alive with it)."""

    def __init__(self, entry: int):
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        source = _IR.format(entry=entry, words=DESCRIPTOR_WORDS, FUNCTION=FUNCTION, GX=GRID, GY=GRID + 1,
                            GZ=GRID + 2, BX=BLOCK, BY=BLOCK + 1, BZ=BLOCK + 2, SHARED=SHARED, PARAMS=PARAMS)
        module = llvm.parse_assembly(source)
        module.verify()
        machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
        self.engine = llvm.create_mcjit_compiler(module, machine)
        self.engine.finalize_object()
        self.launch_all = _LAUNCH_ALL(self.engine.get_function_address("kd_cuda_launch_all"))


def _entry_point(driver) -> int:
    """The address of the driver's cuLaunchKernel, as cuda-python resolves it (0 if not found)."""
    try:
        version = driver.cuDriverGetVersion()[1]
        err, address, _ = driver.cuGetProcAddress(b"cuLaunchKernel", version,
                                                  driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT)
        if err == driver.CUresult.CUDA_SUCCESS and address:
            return int(address)
    except Exception:  # noqa: BLE001  (an older binding's signature: ask the library itself)
        pass
    try:
        return ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value or 0
    except (OSError, AttributeError):
        return 0


@functools.lru_cache(maxsize=None)
def _for(driver) -> "NativeLauncher | None":
    entry = _entry_point(driver)
    if not entry:
        return None
    try:
        return NativeLauncher(entry)
    except Exception:  # noqa: BLE001  (no JIT for this host: cuda-python launches instead)
        return None


def get(driver) -> "NativeLauncher | None":
    """The native launcher for the real driver module, or None (module docstring); never for
    another object standing in for the driver (a test's fake one)."""
    if getattr(driver, "__name__", "") != "cuda.bindings.driver":
        return None
    return _for(driver)
