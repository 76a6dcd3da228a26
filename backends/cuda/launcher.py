"""Native kernel launches: a few lines of JIT'd code that call the driver's `cuLaunchKernel`
for launch descriptors packed once, so that several launches cost one call from Python, and
that launch a CUDA graph of kernel nodes (graphs.py) with its nodes' parameters refreshed.

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

`graph_run(exec, stream, table, n)` (present where the driver gives the graph entry points)
launches an instantiated graph of n kernel nodes. It returns GRAPH_FALLBACK at once, having
done nothing, when the stream is being captured (a graph launch would end the capture: the
caller launches the kernels one by one instead, which the capture records). Otherwise, for
each node k, the table's row k holds ROW_WORDS words: the node's handle, the address of its
CUDA_KERNEL_NODE_PARAMS, of its parameter slots, their count, and of its shadow (the grid
words and slot values the node last got, count + 2 words); where the grid or a slot differs
from the shadow, the shadow takes the new values and the node its parameters (about 0.5 µs
a node on the H200 hosts, skipped for a node whose arguments did not move). Then it
launches the graph on the stream. A failure returns the failing step's index (n for the
graph launch) and CUresult as `launch_all` does; a node whose update failed gets it again.
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
  %code = call i64 @failure(i64 %i, i32 %r)
  ret i64 %code
done:
  ret i64 0
}}

define internal i64 @failure(i64 %index, i32 %r) alwaysinline {{
  %at = add i64 %index, 1
  %hi = shl i64 %at, 32
  %lo = zext i32 %r to i64
  %code = or i64 %hi, %lo
  ret i64 %code
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

_GRAPH_IR = """
define i64 @kd_cuda_graph_run(i64 %exec, i64 %stream, i64* %table, i64 %n) {{
entry:
  %capturing = inttoptr i64 {capturing} to i32 (i8*, i32*)*
  %set = inttoptr i64 {set_params} to i32 (i8*, i8*, i8*)*
  %launch = inttoptr i64 {graph_launch} to i32 (i8*, i8*)*
  %e = inttoptr i64 %exec to i8*
  %s = inttoptr i64 %stream to i8*
  %status = alloca i32
  store i32 0, i32* %status
  %rc = call i32 %capturing(i8* %s, i32* %status)
  %st = load i32, i32* %status
  %bad = or i32 %rc, %st
  %idle = icmp eq i32 %bad, 0
  br i1 %idle, label %loop, label %fallback
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %run
body:
  %row = mul i64 %i, {row_words}
  %nodew = call i64 @word(i64* %table, i64 %row, i64 0)
  %structw = call i64 @word(i64* %table, i64 %row, i64 1)
  %slotsw = call i64 @word(i64* %table, i64 %row, i64 2)
  %count = call i64 @word(i64* %table, i64 %row, i64 3)
  %shadoww = call i64 @word(i64* %table, i64 %row, i64 4)
  %struct = inttoptr i64 %structw to i64*
  %slots = inttoptr i64 %slotsw to i64*
  %shadow = inttoptr i64 %shadoww to i64*
  %total = add i64 %count, 2
  br label %cmp
cmp:
  %j = phi i64 [0, %body], [%j1, %cmpbody]
  %changed = phi i1 [false, %body], [%changed1, %cmpbody]
  %inner = icmp ult i64 %j, %total
  br i1 %inner, label %cmpbody, label %cmpdone
cmpbody:
  %isgrid = icmp ult i64 %j, 2
  %gj = add i64 %j, 1
  %gp = getelementptr i64, i64* %struct, i64 %gj
  %sj = sub i64 %j, 2
  %sp = getelementptr i64, i64* %slots, i64 %sj
  %vp = select i1 %isgrid, i64* %gp, i64* %sp
  %v = load i64, i64* %vp, align 8
  %hp = getelementptr i64, i64* %shadow, i64 %j
  %h = load i64, i64* %hp, align 8
  %diff = icmp ne i64 %v, %h
  store i64 %v, i64* %hp, align 8
  %changed1 = or i1 %changed, %diff
  %j1 = add i64 %j, 1
  br label %cmp
cmpdone:
  br i1 %changed, label %doset, label %next
doset:
  %node = inttoptr i64 %nodew to i8*
  %params = inttoptr i64 %structw to i8*
  %r = call i32 %set(i8* %e, i8* %node, i8* %params)
  %ok = icmp eq i32 %r, 0
  br i1 %ok, label %next, label %fail
next:
  %i1 = add i64 %i, 1
  br label %loop
fail:
  store i64 -1, i64* %shadow, align 8
  %code = call i64 @failure(i64 %i, i32 %r)
  ret i64 %code
run:
  %lr = call i32 %launch(i8* %e, i8* %s)
  %lok = icmp eq i32 %lr, 0
  br i1 %lok, label %done, label %lfail
lfail:
  %lcode = call i64 @failure(i64 %n, i32 %lr)
  ret i64 %lcode
fallback:
  ret i64 {fallback}
done:
  ret i64 0
}}

"""

NODE_BYTES = 72  # sizeof(CUDA_KERNEL_NODE_PARAMS) (the v2 form: func, grid, block, shared, params, extra, kern, ctx)
ROW_WORDS = 5  # graph_run's table: per node, its handle, parameters, slots, slot count and shadow (docstring)
GRAPH_FALLBACK = (1 << 63) - 1  # graph_run: the stream is being captured, nothing was done
_GRAPH_ENTRIES = ("cuStreamIsCapturing", "cuGraphExecKernelNodeSetParams", "cuGraphLaunch")

_LAUNCH_ALL = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64)
_GRAPH_RUN = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64)


def descriptor(function: int, grid, block, shared: int, params_ptr: int) -> array.array:
    """One launch's descriptor words (module docstring)."""
    return array.array("Q", [function, *grid, *block, shared, params_ptr])


def failure(code: int) -> tuple:
    """(index of the launch that failed, its CUresult value) from a nonzero `launch_all` result."""
    return (code >> 32) - 1, code & 0xFFFFFFFF


class NativeLauncher:
    """The JIT'd `launch_all` and, where the driver gives its entry points, `graph_run` (None
    otherwise); one engine per process, kept alive with it."""

    def __init__(self, entry: int, graph_entries: "tuple | None" = None):
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        source = _IR.format(entry=entry, words=DESCRIPTOR_WORDS, FUNCTION=FUNCTION, GX=GRID, GY=GRID + 1,
                            GZ=GRID + 2, BX=BLOCK, BY=BLOCK + 1, BZ=BLOCK + 2, SHARED=SHARED, PARAMS=PARAMS)
        if graph_entries:
            capturing, set_params, graph_launch = graph_entries
            source += _GRAPH_IR.format(capturing=capturing, set_params=set_params, graph_launch=graph_launch,
                                       row_words=ROW_WORDS, fallback=GRAPH_FALLBACK)
        module = llvm.parse_assembly(source)
        module.verify()
        machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
        self.engine = llvm.create_mcjit_compiler(module, machine)
        self.engine.finalize_object()
        self.launch_all = _LAUNCH_ALL(self.engine.get_function_address("kd_cuda_launch_all"))
        self.graph_run = _GRAPH_RUN(self.engine.get_function_address("kd_cuda_graph_run")) if graph_entries else None


def _entry_point(driver, name: str = "cuLaunchKernel") -> int:
    """The address of a driver entry point, the version cuda-python resolves for this driver
    (0 if not found). Only cuLaunchKernel, whose form never changed, falls back to libcuda's
    own symbol; the others (e.g. the _v2 node parameters) come from cuGetProcAddress alone."""
    try:
        version = driver.cuDriverGetVersion()[1]
        err, address, _ = driver.cuGetProcAddress(name.encode(), version,
                                                  driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT)
        if err == driver.CUresult.CUDA_SUCCESS and address:
            return int(address)
    except Exception:  # noqa: BLE001  (an older binding's signature: ask the library itself)
        pass
    if name != "cuLaunchKernel":
        return 0
    try:
        return ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value or 0
    except (OSError, AttributeError):
        return 0


@functools.lru_cache(maxsize=None)
def _for(driver) -> "NativeLauncher | None":
    entry = _entry_point(driver)
    if not entry:
        return None
    graph_entries = tuple(_entry_point(driver, name) for name in _GRAPH_ENTRIES)
    try:
        return NativeLauncher(entry, graph_entries if all(graph_entries) else None)
    except Exception:  # noqa: BLE001  (no JIT for this host: cuda-python launches instead)
        return None


def get(driver) -> "NativeLauncher | None":
    """The native launcher for the real driver module, or None (module docstring); never for
    another object standing in for the driver (a test's fake one)."""
    if getattr(driver, "__name__", "") != "cuda.bindings.driver":
        return None
    return _for(driver)
