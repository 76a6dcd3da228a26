"""The `cpu` runtime: host memory, a JIT per kernel, cubes spread over a thread pool.

Memory is 64-byte aligned numpy byte arrays, split into blocks by the caching allocator.
Launches run synchronously (the queue is drained before `launch` returns), so a stream
(`rt.stream()`) is an ordered queue executed on the calling thread; each worker calling
the compiled `kd_main` for a range of cube ids through ctypes, which releases
the GIL for the duration of the call; the main thread waits interruptibly, so
Ctrl-C stops a launch at its next cube boundary (launcher.py). A small launch that cannot
turn long — an argument-bound kernel (kerneldsl/loop_bounds.py) whose argument words an
earlier launch ended quickly with (`CpuBinary.quick`) — runs on the calling thread instead,
with no handoff (`CpuRuntime.launch`); replayed ones through an InlineBlock (inline_block.py).
Argument words are packed by code generated per parameter layout (packing.py).
"""
from __future__ import annotations

import array
import ctypes
import ctypes.util
import functools
import math
import os
import operator
import threading
import time
import weakref

import llvmlite.binding as llvm
import numpy as np

from kerneldsl import ir, replay
from kerneldsl.dlpack import export_host_array
from kerneldsl.dtypes import as_dtype
from kerneldsl.errors import LaunchError
from kerneldsl.pipeline import Rendering, scalar_packer
from kerneldsl.prepared import PreparedLaunch, refs_from
from kerneldsl.runtime import Buffer, Runtime
from kerneldsl.tensor import Tensor, packed_strides

from . import abi, compiler, packing
from .abi import CANCEL_SLOT, CONTROL_SLOTS
from .handoff import FastWorker
from .handoff import native as native_helpers
from .inline_block import InlineBlock
from .launcher import GRACE_S, CubeLaunch, CubeWorkers, run_on_threads
from .capabilities import DEFAULT_PLANE_DIM, capabilities
from .packing import buffer_address

_KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_NO_CONTROL = array.array("q", [0] * CONTROL_SLOTS)
_MAIN_THREAD = threading.main_thread().ident


def _keep_forever(launch) -> None:
    """Keep what an abandoned launch (launcher.py: Ctrl-C, a cube that never ends) uses alive
    until the process ends, interpreter shutdown included: its cubes still run and read that
    memory. A list on the runtime is freed while Python shuts down, with the thread still
    running (a test's child process crashed at exit once nothing else held the memory)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(launch))


@functools.lru_cache(maxsize=None)
def _load_libs():
    # printf/fflush and libm (f64 math) must resolve inside JIT'd code; the usual sonames
    # first (find_library runs ldconfig in a subprocess: slow for a warm start)
    for name, soname in (("c", "libc.so.6"), ("m", "libm.so.6")):
        try:
            llvm.load_library_permanently(soname)
            continue
        except RuntimeError:
            pass
        path = ctypes.util.find_library(name)
        if path:
            llvm.load_library_permanently(path)


class CpuBinary:
    """A loaded kernel: the JIT engine (kept alive), its entry point and launch facts.

    `quick` holds the argument words (packing.py) of launches that ended within
    `CpuRuntime.LONG_LAUNCH_S`, for a kernel whose work they fix (`LaunchInfo.argument_bound`)
    and whose frame fits the calling thread's stack; None for any other kernel. A small
    launch whose words are there runs on the calling thread (`CpuRuntime.launch`)."""

    QUICK_KEYS = 256  # argument words remembered per kernel (all forgotten when full)
    forgotten = 0  # argument words forgotten so far, by every binary (a joined sequence's check is kept until then)

    def __init__(self, info, obj: bytes, frame_bytes: int = 0):
        _load_libs()
        self.frame_bytes = frame_bytes
        tm = compiler.new_target_machine()
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()
        self.address = self.engine.get_function_address(abi.ENTRY)
        self.fn = _KERNEL_FN(self.address)
        self.info = info
        self.cube_units = info.cube_units
        self.nslots = abi.total_slots(info.params)
        self.slow_launches = 0  # its one-worker launches that took over LONG_LAUNCH_S (_run_cubes)
        # per runtime parameter: its item size for a tensor, else its scalar's bit packer
        self._layout = tuple((p.dtype.itemsize, None) if isinstance(p, ir.TensorParam)
                             else (0, scalar_packer(p.dtype)) for p in info.params)
        self.words = packing.words_function(info.params)
        self.key_of = operator.itemgetter(*packing.key_indices(info.params))  # words -> argument words
        inline = info.argument_bound and frame_bytes <= CpuRuntime.CALLER_FRAME_LIMIT
        self.quick: set | None = set() if inline else None

    def pack(self, grid, control_address: int, args) -> array.array:
        """The argument slots of a launch (abi.py) as unsigned 64-bit words."""
        return array.array("Q", self.words(grid[0], grid[1], grid[2], control_address, args))

    def remember_quick(self, key) -> None:
        """Note that a launch with argument words `key` ended quickly."""
        quick = self.quick
        if len(quick) >= self.QUICK_KEYS:
            quick.clear()
            CpuBinary.forgotten += 1
        quick.add(key)

    def forget_quick(self, key) -> None:
        """Note that a launch with argument words `key` took long: it no longer runs inline."""
        self.quick.discard(key)
        CpuBinary.forgotten += 1


class CpuPreparedLaunch(PreparedLaunch):
    """A cpu launch packed once (kerneldsl/prepared.py): `run` copies the argument words and
    patches the control record's and each tensor's data address. Its argument words are
    fixed, so once a run of it ended quickly the next ones run on the calling thread
    (`CpuRuntime.launch`'s rule)."""

    __slots__ = ("words", "addresses", "ncubes", "key", "inline", "block")

    def __init__(self, runtime, binary: CpuBinary, grid, block, args):
        super().__init__(runtime, binary, grid, block, args)
        self.words = binary.words(grid[0], grid[1], grid[2], 0, args)
        self.ncubes = grid[0] * grid[1] * grid[2]
        self.key = binary.key_of(self.words)
        self.inline = binary.quick is not None and self.ncubes * binary.cube_units < runtime.INLINE_UNITS
        self.addresses = []  # the word of each tensor argument's data address (abi.py's layout)
        word = 4
        for (item, packer), a in zip(binary._layout, args):
            if packer is not None:
                word += 1
            else:
                self.addresses.append(word)
                word += 2 + 2 * len(a.shape)
        self.block = None  # its InlineBlock, made at its first run on the calling thread

    def packed(self, control, refs) -> array.array:
        """This launch's slots for tensors at `refs` ((Buffer, byte offset) each) and `control`."""
        words = self.words.copy()
        words[3] = control.buffer_info()[0]
        for word, (buffer, byte) in zip(self.addresses, refs):
            words[word] = buffer_address(buffer) + byte
        return array.array("Q", words)

    def run(self, refs) -> None:
        binary = self.binary
        rt = self.runtime
        if self.inline and self.key in binary.quick:
            if not binary.info.bounds_check:  # (a bounds-checked launch reports through its own control record)
                if self.block is None:
                    self.block = InlineBlock([self])
                start = time.perf_counter()
                if self.block.run(_run_sequence(), refs):
                    if time.perf_counter() - start > rt.LONG_LAUNCH_S:
                        binary.forget_quick(self.key)
                    return
            control = array.array("q", _NO_CONTROL)
            rt._run_inline(binary, self.ncubes, self.packed(control, refs), control, lambda: self.arguments(refs),
                           self.key)
            return
        control = array.array("q", _NO_CONTROL)
        slots = self.packed(control, refs)
        start = time.perf_counter()
        rt._execute(binary, self.ncubes, slots, control, lambda: self.arguments(refs))
        if self.inline and time.perf_counter() - start < rt.LONG_LAUNCH_S:
            binary.remember_quick(self.key)

    def run_sources(self, sources, at, deltas) -> None:
        """`run` (kerneldsl/prepared.py): on the calling thread through the InlineBlock, which
        rewrites the slots of moved sources only, where `run` would take that path."""
        binary = self.binary
        if self.block is not None and self.key in binary.quick and not binary.info.bounds_check:
            start = time.perf_counter()
            if self.block.run_sources(_run_sequence(), sources, at, deltas):
                if time.perf_counter() - start > self.runtime.LONG_LAUNCH_S:
                    binary.forget_quick(self.key)
                return
        self.run(refs_from(sources, at, deltas))


class CpuLaunchSequence:
    """Consecutive prepared launches (`Runtime.join_launches`) handed to the fast worker as one
    when each is a one-worker launch: handoff.py's `kd_run_sequence` runs their kernels in
    order, one handoff for all. Otherwise (another thread, a launch for several workers, no
    fast worker yet) the launches run one by one; so they do while the sequence is *long*:
    once SLOW_LAUNCHES joined runs in a row took over LONG_LAUNCH_S (one of its kernels may
    want every worker, `CpuRuntime._run_cubes`), until a run one by one is short again.
    Where every launch may run on the calling thread (`CpuPreparedLaunch`) and a run of the
    sequence ended quickly, the next runs call `kd_run_sequence` on the calling thread."""

    __slots__ = ("runtime", "launches", "counts", "small", "slow", "inline", "quick", "block", "checked")

    def __init__(self, runtime, launches: list):
        self.runtime = runtime
        self.launches = launches
        self.counts = tuple(len(p.addresses) for p in launches)  # refs per launch
        self.small = all(p.ncubes * p.binary.info.cube_units < runtime.SMALL_LAUNCH_UNITS
                         and p.binary.frame_bytes <= runtime.CALLER_FRAME_LIMIT for p in launches)
        self.slow = 0  # joined runs in a row that took long
        self.inline = all(p.inline for p in launches)
        self.quick = False  # whether its last run ended within LONG_LAUNCH_S (and may run inline)
        self.block = None  # its InlineBlock, made at its first run on the calling thread
        self.checked = -1  # CpuBinary.forgotten when every launch's words were last found quick

    @property
    def joined(self) -> bool:
        """Whether the next run (from the main thread, with a fast worker) is handed over as one."""
        return self.small and self.slow < self.runtime.SLOW_LAUNCHES

    def run(self, refs) -> None:
        rt = self.runtime
        if self.quick and self.inline and self._all_quick():
            self._run_inline(refs)
            return
        start = time.perf_counter()
        if (self.joined and rt._fast is not None and threading.get_ident() == _MAIN_THREAD
                and all(p.binary.slow_launches < rt.SLOW_LAUNCHES for p in self.launches)):
            self._hand_over(refs)
            took = time.perf_counter() - start
            self.slow = self.slow + 1 if took > rt.LONG_LAUNCH_S else 0
            self._note(took)
            return
        k = 0
        for p, n in zip(self.launches, self.counts):
            p.run(refs[k:k + n])
            k += n
        took = time.perf_counter() - start
        if self.slow and took < rt.LONG_LAUNCH_S / 4:
            self.slow = 0  # short again: join from the next run
        self._note(took)

    def run_sources(self, sources, at, deltas) -> None:
        """`run` (kerneldsl/prepared.py): on the calling thread through the InlineBlock, which
        rewrites the slots of moved sources only, where `run` would take that path."""
        if self.quick and self.block is not None and self._all_quick():
            start = time.perf_counter()
            if self.block.run_sources(_run_sequence(), sources, at, deltas):
                if time.perf_counter() - start > self.runtime.LONG_LAUNCH_S:
                    self.quick = False
                return
        self.run(refs_from(sources, at, deltas))

    def _all_quick(self) -> bool:
        """Whether every launch's argument words count as quick; looked up again only once
        some binary forgot words since the last time all were found."""
        forgotten = CpuBinary.forgotten
        if self.checked == forgotten:
            return True
        for p in self.launches:
            if p.key not in p.binary.quick:
                return False
        self.checked = forgotten
        return True

    def _note(self, took: float) -> None:
        """After a run that took `took` s: whether the next may run inline (each launch took
        less than the whole, so each one's argument words count as quick)."""
        self.quick = self.inline and took < self.runtime.LONG_LAUNCH_S
        if self.quick:
            for p in self.launches:
                p.binary.remember_quick(p.key)

    def _table(self, refs, control):
        """The (fn, argp, ncubes) table of kd_run_sequence and the packed slots it points to."""
        table, packs, k = array.array("Q"), [], 0
        for p, n in zip(self.launches, self.counts):
            packed = p.packed(control, refs[k:k + n])
            k += n
            packs.append(packed)
            table.extend((p.binary.address, packed.buffer_info()[0], p.ncubes))
        return table, packs

    def _hand_over(self, refs) -> None:
        control = array.array("q", _NO_CONTROL)
        table, packs = self._table(refs, control)
        self.runtime._run_handed_over(native_helpers().run_sequence, table.buffer_info()[0], len(self.launches),
                                      control, (table, packs, control))

    def _run_inline(self, refs) -> None:
        """Every launch on the calling thread, in one native call (`kd_run_sequence`), through
        the sequence's InlineBlock (or slots of its own where another thread uses that)."""
        if self.block is None:
            self.block = InlineBlock(self.launches)
        start = time.perf_counter()
        if not self.block.run(_run_sequence(), refs):
            control = array.array("q", _NO_CONTROL)
            table, packs = self._table(refs, control)
            _run_sequence()(table.buffer_info()[0], 0, len(self.launches))
        if time.perf_counter() - start > self.runtime.LONG_LAUNCH_S:
            self.quick = False  # (and each launch's own words stay quick: the whole took long)


@functools.lru_cache(maxsize=None)
def _run_sequence():
    """handoff.py's `kd_run_sequence(table, first, end)` callable from Python."""
    return _KERNEL_FN(native_helpers().run_sequence)


def idle_cap(physical: int) -> int:
    """Bytes of wholly free segments the cpu pool keeps cached, for a process that may use
    `physical` bytes (`_memory_limit`): host memory is shared with everything else on the
    machine, so an eighth of it, but at least 1 GiB. A segment freed past the cap goes back
    to the OS, and the next tensor of its size is fresh memory that faults in page by page:
    on a 2-core Emerald Rapids box (24 GiB) a ×2 nearest interpolation writing 2 GiB took
    212 ms a call with a 1 GiB cap against 145 ms with the segment kept.
    Where the memory size is unknown (`_physical_memory`'s stand-in), 1 GiB."""
    return max(1 << 30, physical // 8) if physical < _UNKNOWN_MEMORY else 1 << 30


@functools.lru_cache(maxsize=None)
def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: let numpy decide
        return _UNKNOWN_MEMORY


_UNKNOWN_MEMORY = 1 << 62
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")  # v2, v1


@functools.lru_cache(maxsize=None)
def _memory_limit(limits: tuple = CGROUP_LIMITS) -> int:
    """The memory this process may use: the machine's, or its control group's limit where
    that is lower (a container's; "max", or no such file: no limit)."""
    limit = _physical_memory()
    for path in limits:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limit = min(limit, int(text))
    return limit


class _PinnedBytes:
    """The bytes of a Buffer as numpy sees them (`__array_interface__`), holding the Buffer:
    the base object of every array exported from a cpu tensor."""

    def __init__(self, buffer: Buffer):
        self.buffer = buffer
        raw = buffer.raw
        self.__array_interface__ = {"shape": (raw.nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (raw.ctypes.data, bool(buffer.readonly))}


class CpuRuntime(Runtime):
    kind = "cpu"

    def __init__(self, plane_dim: int = DEFAULT_PLANE_DIM, threads: int | None = None):
        super().__init__("cpu", capabilities(plane_dim))
        self.threads = threads or os.cpu_count() or 1
        self._pool = None
        self._pool_lock = threading.Lock()
        self._fast: FastWorker | None = None  # the main thread's one-worker launches (handoff.py)
        self._small_launches = 0
        forget = weakref.WeakMethod(self._forget_threads)
        os.register_at_fork(after_in_child=lambda: forget() and forget()())

    def _forget_threads(self):
        """In a forked child: the parent's worker threads do not exist here; start new ones."""
        self._pool = None
        self._fast = None

    @property
    def device_key(self):
        return "cpu"

    def __repr__(self):
        extra = "" if self.plane_dim == DEFAULT_PLANE_DIM else f", plane_dim={self.plane_dim}"
        return f"kd.runtime('cpu'{extra})"

    # -------------------------------------------------------------- memory
    def _raw_alloc(self, nbytes):
        if nbytes > _physical_memory():  # Linux would promise it and the OOM killer collect later
            raise MemoryError(f"more than this machine's {_physical_memory()} bytes of memory")
        arr = np.empty(nbytes + 64, np.uint8)  # numpy's MemoryError when the OS refuses
        start = (-arr.ctypes.data) % 64
        return arr[start:start + nbytes]

    def _raw_free(self, raw):
        pass

    def _allocator_options(self) -> dict:
        return {"max_idle_bytes": idle_cap(_memory_limit())}

    def _upload(self, buffer, byte_offset, host):
        buffer.raw[byte_offset:byte_offset + host.nbytes] = host.reshape(-1).view(np.uint8)

    def _download(self, buffer, byte_offset, nbytes):
        return buffer.raw[byte_offset:byte_offset + nbytes]

    def _fill_zero(self, t):
        start = t.offset * t.dtype.itemsize  # (a replay's tensors lie inside one fused buffer)
        t.buffer.raw[start:start + t.size * t.dtype.itemsize] = 0

    def wrap(self, array: np.ndarray):
        """A tensor sharing `array`'s memory (no copy); used by DLPack import. A read-only
        array gives a read-only tensor: launches that would store to it are refused."""
        readonly = not array.flags.writeable
        item = array.itemsize
        if array.size == 0 or any(st < 0 or st % item for st in array.strides):
            array = np.ascontiguousarray(array)
        if array.size == 0:
            t = self.empty(array.shape, as_dtype(array.dtype))
            t.buffer.readonly = readonly
            return t
        if array.flags.c_contiguous:  # the common case: a byte view of the same memory, made by numpy
            raw = array.reshape(-1).view(np.uint8)
            nbytes = raw.nbytes
        else:
            nbytes = item + sum((n - 1) * st for n, st in zip(array.shape, array.strides))
            raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(array.ctypes.data))
        buf = Buffer(raw, nbytes, None, owner=array, readonly=readonly)
        return Tensor._of(self, buf, array.shape, as_dtype(array.dtype), tuple(st // item for st in array.strides), 0)

    @staticmethod
    def _view(t, base) -> np.ndarray:
        item = t.dtype.itemsize
        if t.is_contiguous():  # (numpy's own strides: a third of the cost of passing them)
            shape = t.shape
            if len(shape) == 1:
                return np.frombuffer(base, t.dtype.np, shape[0], t.offset * item)
            return np.ndarray(shape, t.dtype.np, base, t.offset * item)
        return np.ndarray(t.shape, dtype=t.dtype.np, buffer=base, offset=t.offset * item,
                          strides=[st * item for st in t.strides])

    def host_view(self, t) -> np.ndarray:
        """A numpy array aliasing the tensor's memory. It keeps the tensor's buffer out of
        the memory pool for as long as it (or anything made from it) lives; read-only for
        a read-only tensor. Like a download, it refuses a replay recording (the host sees values)."""
        rec = replay.active()
        if rec is not None:
            rec.refuse("host view")
        return self._view(t, np.asarray(_PinnedBytes(t.buffer)))

    def to_numpy(self, t):
        """A host copy. Launches on the cpu have finished when they return, so nothing is
        waited for; a recording is refused as on every runtime (its work may follow values)."""
        return self.to_numpy_all((t,))[0]

    def to_numpy_all(self, tensors) -> list:
        return self._host_arrays(tensors, copy=True)

    def host_values(self, tensors) -> list:
        """Views of the tensors' memory (Runtime.host_values: the caller only reads them):
        launches on the cpu have finished when they return, so the values are there to
        read. Not marked read-only: setting the flag costs a third of a µs an array, about
        what the copy saved."""
        return self._host_arrays(tensors, copy=False)

    def _host_arrays(self, tensors, copy: bool) -> list:
        """The tensors' values as host arrays: copies, or views of their memory; as every
        host read, it refuses a replay recording."""
        rec = replay.active()
        if rec is not None:
            rec.refuse("host download")
        out = []
        for t in tensors:
            shape = t.shape
            if t.strides == packed_strides(shape):  # (the common case, a third cheaper than _view)
                dt = t.dtype
                n = math.prod(shape)
                if not n:
                    out.append(np.empty(shape, dt.np))
                    continue
                view = np.ndarray(shape, dt.np, t.buffer.raw, t.offset * dt.itemsize)
                out.append(view.copy() if copy else view)
            elif not t.size:
                out.append(np.empty(shape, t.dtype.np))
            else:
                view = self._view(t, t.buffer.raw)
                out.append(view.copy() if copy else view)
        return out

    # -------------------------------------------------------------- dlpack
    def dlpack_device(self, t):
        return (1, 0)  # kDLCPU

    def dlpack_export(self, t, *args, stream=None, **kwargs):
        """The DLPack capsule of `host_view(t)` (numpy's, or ours for bf16): the capsule holds
        that array, which holds the buffer, until the consumer's tensor is gone. Work on the
        cpu is finished when it returns, so the only streams a consumer may name are None
        and -1."""
        if stream is not None and stream != -1:
            raise BufferError(f"__dlpack__(stream={stream!r}) on a cpu tensor: the CPU has no streams, pass None")
        return export_host_array(self.host_view(t), t.dtype, *args, **kwargs)

    # -------------------------------------------------------------- kernels
    source_ext = "ll"

    def renderings(self, kir, uniformity):
        from . import renderer  # only when something is compiled: a warm process never renders
        source, frame = renderer.render_with_frame(kir, uniformity, self.capabilities)
        yield Rendering(source, {"frame_bytes": frame},
                        rendered={"slp": not kir.scalar_statements, "stream": kir.streaming_stores,
                                  "gathers": not kir.avoid_gathers})

    def compile_rendering(self, rendering, info) -> bytes:
        return compiler.compile_source(rendering.source, **(rendering.rendered or {}))

    def wrap_binary(self, info, entry, rendering=None) -> CpuBinary:
        return CpuBinary(info, entry.image, entry.meta["frame_bytes"])

    def _workers(self) -> CubeWorkers:
        with self._pool_lock:
            if self._pool is None:
                self._pool = CubeWorkers(self.threads)
            return self._pool

    def launch(self, binary: CpuBinary, grid, block, args):
        """Run a launch to its end: on the calling thread where `binary.quick` holds its
        argument words and it is small (below INLINE_UNITS units), else on the workers
        (`_execute`), remembering its words as quick if it ended within LONG_LAUNCH_S."""
        control = array.array("q", _NO_CONTROL)  # bounds-error record and cancel flag
        g0, g1, g2 = grid
        words = binary.words(g0, g1, g2, control.buffer_info()[0], args)
        ncubes = g0 * g1 * g2
        quick = binary.quick
        if quick is not None and ncubes * binary.cube_units < self.INLINE_UNITS:
            key = binary.key_of(words)
            if key in quick:  # _run_inline, inlined (the path of most small launches)
                slots = array.array("Q", words)
                start = time.perf_counter()
                binary.fn(slots.buffer_info()[0], 0, ncubes)
                if time.perf_counter() - start > self.LONG_LAUNCH_S:
                    binary.forget_quick(key)
                if control[0]:
                    self._raise_bounds(binary.info, args, control)
                if self._fast is None and threading.get_ident() == _MAIN_THREAD:
                    self._wants_fast_worker()  # (counted as before: ready for the launches that are not inline)
                return
            start = time.perf_counter()
            self._execute(binary, ncubes, array.array("Q", words), control, args)
            if time.perf_counter() - start < self.LONG_LAUNCH_S:
                binary.remember_quick(key)
            return
        self._execute(binary, ncubes, array.array("Q", words), control, args)

    def _run_inline(self, binary: CpuBinary, ncubes: int, slots, control, args, key) -> None:
        """A launch on the calling thread (no handoff, no wait). Only for launches whose argument
        words an earlier launch of the kernel ended quickly with: the kernel's work follows from
        those words alone (loop_bounds.py), so this one is as short; one that took long anyway
        (a busy machine) forgets its words, and the next launch with them goes to the workers."""
        start = time.perf_counter()
        binary.fn(slots.buffer_info()[0], 0, ncubes)
        if time.perf_counter() - start > self.LONG_LAUNCH_S:
            binary.forget_quick(key)
        if control[0]:
            self._raise_bounds(binary.info, args() if callable(args) else args, control)

    def prepare_launch(self, binary: CpuBinary, grid, block, args):
        return CpuPreparedLaunch(self, binary, grid, block, args)

    def join_launches(self, launches: list):
        if len(launches) < 2 or not all(type(p) is CpuPreparedLaunch and not p.binary.info.bounds_check
                                        for p in launches):
            return None
        return CpuLaunchSequence(self, launches)

    def _execute(self, binary: CpuBinary, ncubes: int, slots, control, args):
        """Run the cubes of a packed launch, then raise the bounds error it recorded, if any
        (`args`: the launch's arguments, or a callable that makes them, for the message)."""
        keep = (slots, control, args)  # what the kernel touches, held while it may still run
        if binary.frame_bytes > self.CALLER_FRAME_LIMIT:
            self._run_cubes_big_stack(binary.fn, ncubes, binary.frame_bytes, control, keep)
        else:
            self._run_cubes(binary, ncubes, control, keep)
        if control[0]:
            self._raise_bounds(binary.info, args() if callable(args) else args, control)

    INLINE_UNITS = 1 << 15  # launches of fewer units whose argument words ended quickly run on the caller
    SMALL_LAUNCH_UNITS = 1 << 15  # below this, waking a second worker costs more than it saves...
    LONG_LAUNCH_S = 1e-4  # ...unless SLOW_LAUNCHES launches of the kernel on one worker took longer
    SLOW_LAUNCHES = 2     # than this each (two: one launch can be slow for reasons of its own)
    # (0.1 ms: a second worker costs a few µs to wake, and saves half of a launch this long with
    # cubes to share; at 2 ms, grid_sample's channels-last forward, 256 cubes of 16 units taking
    # 1.4 ms, ran on one of two cores: 1.40 -> 0.90 ms spread. The same bound keeps launches
    # longer than this off the calling thread.)
    # A kernel's shared arrays, emulated fragments and per-unit variables live in its stack
    # frame. The pool's threads run frames up to this size; larger ones run on threads
    # started with a stack to fit.
    CALLER_FRAME_LIMIT = 1 << 20
    MAX_FRAME = 1 << 30

    def _run_cubes(self, binary: CpuBinary, ncubes, control, keep):
        """Spread cube ids over `threads` worker threads; chunks are taken from a shared
        counter so uneven cubes balance out. The main thread only waits (so Ctrl-C stops the
        launch: launcher.py), handing a one-worker launch to its `FastWorker` (handoff.py);
        another calling thread works on the launch as well."""
        workers = min(self.threads, ncubes)
        small = ncubes * binary.info.cube_units < self.SMALL_LAUNCH_UNITS
        if small and binary.slow_launches < self.SLOW_LAUNCHES:
            workers = 1
        argp = keep[0].buffer_info()[0]
        main = threading.get_ident() == _MAIN_THREAD  # (threading.current_thread() costs more)
        timed = small and ncubes > 1 and self.threads > 1
        start = time.perf_counter() if timed else 0.0
        if main and workers == 1 and (self._fast is not None or self._wants_fast_worker()):
            self._run_handed_over(binary.address, argp, ncubes, control, keep)
        else:
            self._run_on_pool(binary, ncubes, workers, main, argp, control, keep)
        if timed:  # few units but long cubes: spread the kernel's launches (and back, if they were not)
            took = time.perf_counter() - start
            if workers == 1 and took > self.LONG_LAUNCH_S:
                binary.slow_launches += 1
            elif workers > 1 and took < self.LONG_LAUNCH_S / 4:
                binary.slow_launches = 0

    def _run_on_pool(self, binary: CpuBinary, ncubes: int, workers: int, main: bool, argp: int, control, keep):
        """A launch on `workers` threads of the pool (and this one, unless it is the main thread)."""
        parts = min(ncubes, workers * 8 if ncubes >= 64 * workers else workers)
        job = CubeLaunch(binary.fn, argp, ncubes, parts, control, keep)
        pool = self._workers()
        if main:
            pool.submit(job, workers)
        else:
            pool.submit(job, workers - 1)
            job.run()
        try:
            job.wait(interruptible=main)
        finally:
            if job.abandoned:
                self._abandon(job, pool)

    def _abandon(self, job: CubeLaunch, pool):
        """A cancelled launch whose cubes did not stop: keep it (and the memory it uses) for
        good, and give later launches fresh threads."""
        _keep_forever(job)
        with self._pool_lock:
            if self._pool is pool:
                self._pool = None
        if pool is not None:
            pool.retire()

    FAST_WORKER_AFTER = 16  # one-worker launches of the main thread before the fast worker starts

    def _wants_fast_worker(self) -> bool:
        """Whether the main thread has made enough one-worker launches to start the fast worker
        (its native handoff takes some ms to compile: a short script never pays for it)."""
        self._small_launches += 1
        if self._small_launches <= self.FAST_WORKER_AFTER:
            return False
        self._fast = FastWorker()
        return True

    def _run_handed_over(self, fn_address: int, argp: int, ncubes: int, control, keep):
        """Run a one-worker launch on the fast worker and wait for it as `CubeLaunch.wait`
        does: Ctrl-C sets the cancel flag, waits up to GRACE_S for the cubes to stop, else
        abandons the launch (and the worker, which a fresh one replaces) and propagates."""
        worker = self._fast
        seq = worker.start(fn_address, argp, ncubes)
        try:
            if not worker.run(seq):
                worker.sleep_until_done(seq)
        except BaseException:
            control[CANCEL_SLOT] = 1
            try:
                stopped = worker.sleep_until_done(seq, GRACE_S)
            except BaseException:  # a second Ctrl-C: stop waiting
                stopped = False
            if not stopped:
                _keep_forever(keep)
                self._fast = None
            raise

    def _run_cubes_big_stack(self, fn, ncubes, frame, control, keep):
        """Cubes of a kernel whose frame could overflow an ordinary thread's stack: on
        threads made for this launch with room for the frame (and the JIT code's own calls)."""
        if frame > self.MAX_FRAME:
            raise LaunchError(f"a cube of this kernel needs {frame >> 20} MiB of thread stack (shared arrays, "
                              f"fragments and per-unit variables); the cpu runtime allows {self.MAX_FRAME >> 20} MiB: "
                              f"use fewer units per cube, smaller shared arrays or fewer fragments")
        workers = max(1, min(self.threads, ncubes))
        job = CubeLaunch(fn, keep[0].buffer_info()[0], ncubes, workers, control, keep)
        size = -(-(frame + (8 << 20)) // (1 << 20)) << 20
        try:
            run_on_threads(job, workers, size)
        finally:
            if job.abandoned:
                self._abandon(job, None)


def available() -> bool:
    return True


def report() -> list:
    """The cpu runtime's RuntimeStatus: it needs only llvmlite, which importing this module proved."""
    from kerneldsl.runtime import RuntimeStatus
    from .capabilities import capabilities
    return [RuntimeStatus("cpu", True, capabilities().device_name, "")]


def create(index: int = 0, **options) -> CpuRuntime:
    if index != 0:
        raise ValueError(f"the cpu runtime has one device, got index {index}")
    return CpuRuntime(**options)
