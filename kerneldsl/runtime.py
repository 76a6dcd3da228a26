"""Runtimes: where tensors live and kernels run ("cpu", "opencl[:N]", "cuda[:N]", "interpreter").

`Runtime` holds what every back end shares (tensor creation, host transfers, streams
and the current stream of each thread (streams.py), the caching allocator (allocator.py),
and the kernel load pipeline: caches, render, dump, compile, wrap); a back end's
`runtime.py` subclasses it with raw allocation, copies, its streams, the pipeline's
hooks and launch. Back ends are named in one table (`BACKENDS`) and imported only
when a runtime of theirs is asked for, so importing kerneldsl never touches a GPU
driver or a compiler.
"""
from __future__ import annotations

import importlib
import math
import os
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from . import cache, guard, replay
from .dtypes import DType, as_dtype, by_numpy_dtype
from .errors import OutOfMemoryError
from .allocator import AllocationFailed, CachingAllocator, human_bytes
from .pipeline import LaunchInfo, Rendering
from .prepared import PreparedLaunch
from .streams import HostStream, Stream
from .tensor import Tensor, contiguous_strides, packed_strides

# every back end: runtime name -> the module with its runtime (`create`, `available`), imported lazily
BACKENDS = {
    "cpu": "kerneldsl.backends.cpu.runtime",
    "opencl": "kerneldsl.backends.opencl.runtime",
    "cuda": "kerneldsl.backends.cuda.runtime",
    "interpreter": "kerneldsl.backends.interpreter.runtime",  # Python over numpy, for debugging
}
_RUNTIMES: dict = {}
_LOCK = threading.RLock()


class RuntimeUnavailable(RuntimeError):
    """The runtime asked for cannot run here (no driver, no device, missing package)."""


class _StreamState(threading.local):
    """Per thread: `current`, its stream inside `Runtime.use_stream` (None outside: the default
    stream; a class default, since a missing thread-local attribute costs a raised exception)."""

    current = None


class Buffer:
    """Memory a tensor views: a block of the runtime's caching allocator (returned to it when
    this is collected) or imported memory (`owner` keeps it alive).

    Anything that lets another library see the memory (a DLPack capsule, a numpy view)
    must hold a reference to this object: once it is collected the pool hands the memory
    to the next allocation. `readonly` marks imported memory its owner does not let us
    write (launches that store to it are refused). `stream` is the stream the memory was
    allocated (or imported) on; `used_streams` the other streams that queued work on it
    (recorded by launches and copies, like PyTorch's `record_stream`): the allocator does not
    reuse the block before their work is done, and downloads wait for them."""

    __slots__ = ("raw", "nbytes", "_pool", "owner", "readonly", "block", "stream", "used_streams", "address",
                 "guard", "__weakref__")

    def __init__(self, raw, nbytes, pool=None, owner=None, readonly: bool = False, block=None, stream=None):
        self.raw = raw
        self.nbytes = nbytes
        self._pool = pool
        self.owner = owner  # keeps imported (DLPack) memory alive
        self.readonly = readonly
        self.block = block  # the allocator's block (None: imported memory)
        self.stream = stream
        self.used_streams = None  # set of other streams, made on first use
        self.address = None  # where a runtime keeps the data address of `raw` it looked up (cpu launches)
        self.guard = None  # (runtime, guarded bytes, request) under $KERNELDSL_GUARD (guard.py)

    def record_stream(self, stream) -> None:
        """Note that work on `stream` uses this memory (a no-op for its own stream)."""
        if stream is self.stream:
            return
        used = self.used_streams
        if used is None:
            self.used_streams = {stream}
        else:
            used.add(stream)

    def streams(self) -> list:
        """Every stream that may have queued work on this memory, its own first."""
        out = [self.stream] if self.stream is not None else []
        if self.used_streams:
            out += [s for s in self.used_streams if s is not self.stream]
        return out

    def __del__(self):
        pool = self._pool
        if pool is not None:
            try:
                if self.guard is not None:
                    guard.defer(self)  # (its block is freed once its guard bytes are read)
                    return
                pool.free(self.block, self.used_streams)
            except Exception:  # noqa: BLE001  (interpreter shutdown: module globals such as guard's may be gone)
                pass


class Runtime:
    """Base of the cpu / opencl / cuda runtimes."""

    kind = "?"

    def __init__(self, name: str, capabilities):
        self.name = name
        self.capabilities = capabilities
        self._kernels: dict = {}
        self._init_streams()
        self.pool = CachingAllocator(self._raw_alloc, self._raw_free, self._raw_view, synchronize=self.synchronize,
                                     **self._allocator_options())

    # ---------------------------------------------------------------- identity
    @property
    def device_key(self):
        """Runtimes with equal keys share memory (tensors may be mixed between them)."""
        return self.name

    @property
    def plane_dim(self) -> int:
        return self.capabilities.plane_dim

    def __repr__(self):
        return f"kd.runtime({self.name!r})"

    # ---------------------------------------------------------------- streams
    def _init_streams(self):
        self._stream_local = _StreamState()  # .current: this thread's stream inside use_stream
        self._streams = weakref.WeakSet()  # every stream of this runtime (rt.synchronize waits for each)
        self._by_handle = weakref.WeakValueDictionary()  # stream key -> the one Stream object of that stream
        self._default_stream = self._make_default_stream()
        self._register(self._default_stream)

    def _register(self, s: Stream) -> Stream:
        self._streams.add(s)
        self._by_handle[self._stream_key(s.handle)] = s
        return s

    def _stream_key(self, handle):
        """Hook: a hashable key naming the stream `handle` (equal for two wrappers of one stream)."""
        return handle

    def _make_default_stream(self) -> Stream:
        """Hook: the stream work goes to outside any `use_stream` (default: a HostStream)."""
        return HostStream(self, default=True)

    def _new_stream(self) -> Stream:
        """Hook: a new stream (default: a HostStream, for runtimes whose launches are synchronous)."""
        return HostStream(self)

    def _wrap_stream(self, handle) -> Stream:
        """Hook: a Stream wrapping another library's stream `handle`."""
        raise ValueError(f"the {self.name} runtime runs work on the calling thread and has no external streams to "
                         f"wrap (got {handle!r}); use rt.stream()")

    def stream(self) -> Stream:
        """A new stream of this runtime (a CUDA stream, an OpenCL in-order queue; on cpu an
        ordered queue executed on the calling thread)."""
        return self._register(self._new_stream())

    def external_stream(self, handle) -> Stream:
        """Wrap another library's stream: on CUDA a CUstream as an int (e.g.
        `torch.cuda.current_stream().cuda_stream`), on OpenCL a pyopencl CommandQueue on this
        runtime's context and device. The library keeps owning it. Wrapping the same stream
        again (or one of this runtime's own) gives the same Stream object, so the allocator's
        per-stream free lists see one stream."""
        wrapped = self._wrap_stream(handle)  # (validates the handle)
        existing = self._by_handle.get(self._stream_key(wrapped.handle))
        return existing if existing is not None else self._register(wrapped)

    def default_stream(self) -> Stream:
        """The stream work goes to outside any `use_stream`."""
        return self._default_stream

    def current_stream(self) -> Stream:
        """The stream this thread's launches, copies and allocations go to now."""
        stream = self._stream_local.current
        return self._default_stream if stream is None else stream

    @contextmanager
    def use_stream(self, stream: Stream):
        """`with rt.use_stream(s):` runs this thread's kernel launches, copies and rudnn
        operators on this runtime on `s`; nests, and restores the previous stream on exit."""
        if not isinstance(stream, Stream):
            raise TypeError(f"use_stream takes a kd.Stream (rt.stream(), rt.external_stream(...)), got "
                            f"{type(stream).__name__}")
        if stream.runtime is not self:
            raise ValueError(f"use_stream: {stream!r} belongs to {stream.runtime!r}, not to {self!r}; use "
                             f"{stream.runtime!r}.use_stream(...) or a stream of {self!r}")
        rec = replay.active()
        if rec is not None:  # the call being recorded orders work across streams: a replay would not
            rec.refuse("a stream switch")
        local = self._stream_local
        previous = local.current
        local.current = stream
        try:
            yield stream
        finally:
            local.current = previous

    def synchronize(self):
        """Wait until the work queued on every stream of this runtime has finished."""
        for s in list(self._streams):
            s.synchronize()

    def wait_for_buffer(self, buffer: Buffer):
        """Before a host read of `buffer` on the current stream: wait for every other stream
        that queued work on it (the stream it was allocated on and those launches used it
        on); work on the current stream is ordered before the read anyway."""
        current = self.current_stream()
        for s in buffer.streams():
            if s is not current:
                s.synchronize()

    # ---------------------------------------------------------------- back-end hooks
    def _raw_alloc(self, nbytes):
        raise NotImplementedError

    def _raw_free(self, raw):
        raise NotImplementedError

    def _raw_view(self, raw, offset: int, nbytes: int):
        """Hook: what kernels and copies are given for `nbytes` bytes at `offset` of a segment
        `raw` from `_raw_alloc` (default: a slice, as of a numpy byte array)."""
        return raw[offset:offset + nbytes]

    def _allocator_options(self) -> dict:
        """Hook: keyword arguments of this runtime's CachingAllocator (granule, max_segment,
        max_idle_bytes)."""
        return {}

    def _upload(self, buffer: Buffer, byte_offset: int, host: np.ndarray):
        raise NotImplementedError

    def _download(self, buffer: Buffer, byte_offset: int, nbytes: int) -> np.ndarray:
        raise NotImplementedError

    def launch(self, binary, grid, block, args):
        raise NotImplementedError

    def launcher(self, binary, block: tuple):
        """Hook: `launch(grid, args)`, this runtime's `launch` of `binary` with the checked cube
        shape `block`, for a launch plan to call on every launch of its signature. The default
        binds `launch`; a back end may return code made for the binary (fewer steps a call)."""
        launch = self.launch
        return lambda grid, args: launch(binary, grid, block, args)

    def prepare_launch(self, binary, grid: tuple, block: tuple, args) -> PreparedLaunch:
        """`launch(binary, grid, block, args)` made repeatable on tensors of the same layouts in
        other memory (prepared.py); `grid` and `block` are checked three-axis tuples."""
        return PreparedLaunch(self, binary, grid, block, args)

    def join_launches(self, launches: list) -> "PreparedLaunch | None":
        """Hook: one prepared launch that runs `launches` (this runtime's, in order) with their
        refs concatenated, where issuing them together costs less than one by one; None (the
        default) where it does not."""
        return None

    # ---------------------------------------------------------------- kernel load pipeline
    source_ext = "txt"  # file extension of generated sources under $KERNELDSL_DUMP

    def toolchain(self) -> str:
        """Hook: versions and settings of the compiler and driver that change binaries
        (beyond what `capabilities` already names)."""
        return ""

    def cache_identity(self) -> str:
        """Everything of this runtime that changes a compiled kernel: back end, device
        capabilities (arch, plane size, limits) and toolchain. Part of every cache key."""
        return f"{self.kind}|{self.capabilities!r}|{self.toolchain()}"

    def renderings(self, kernel_ir, uniformity) -> Iterator[Rendering]:
        """Hook: the generated source of a specialised kernel, as one `Rendering`, or several
        to try in order (the first whose wrapped binary `accepts` is kept)."""
        raise NotImplementedError(f"the {self.name} runtime does not render kernels")

    def compile_rendering(self, rendering: Rendering, info: LaunchInfo) -> bytes:
        """Hook: compile a rendering into the image stored in the cache."""
        raise NotImplementedError

    def wrap_binary(self, info: LaunchInfo, entry: cache.Entry, rendering: Rendering | None = None):
        """Hook: a launchable binary from a cache entry (image + the rendering's metadata);
        `rendering` is given when the entry was just built from it."""
        raise NotImplementedError

    def accepts(self, binary) -> bool:
        """Hook: whether a freshly built binary can be kept (else the next rendering is tried)."""
        return True

    def render(self, kernel_ir, uniformity) -> str:
        """The generated source of a specialised kernel (for reading and tests)."""
        return next(iter(self.renderings(kernel_ir, uniformity))).source

    def load(self, key: str | None, specialize: Callable[[], tuple], name: str = "?"):
        """A launchable binary for the specialised kernel `name` whose cache key is `key`
        (None: not cacheable): from memory, else from the disk cache, else built by
        `specialize()` -> (IR, uniformity facts) -> render -> dump -> compile -> store.
        A disk hit runs no front end and no renderer. Each outcome is logged (logger
        "kerneldsl.cache": hits and misses at DEBUG; "kerneldsl.compile": builds at INFO)."""
        binary = self._kernels.get(key) if key is not None else None
        if binary is not None:
            cache.log().debug("memory hit: kernel %s on %s", name, self.name)
            return binary
        start = time.perf_counter()
        entry = cache.load(key)
        if entry is not None:
            try:
                binary = self.wrap_binary(LaunchInfo.from_json(entry.meta["launch"]), entry)
                cache.log().debug("disk hit: kernel %s on %s, loaded in %.1f ms", name, self.name,
                                  (time.perf_counter() - start) * 1e3)
            except Exception as e:  # noqa: BLE001  (a stale or foreign binary: rebuild it)
                cache.log().warning(
                    "kerneldsl: cached kernel %s does not load on %s (%s); rebuilding it", key, self.name, e)
                cache.discard(key)
        if binary is None:
            cache.log().debug("miss: kernel %s on %s (%s)", name, self.name,
                              "not cacheable" if key is None else "disk cache off" if not cache.enabled()
                              else "not on disk")
            ir_and_facts = specialize()
            front = time.perf_counter()
            binary, entry = self._build(*ir_and_facts)
            done = time.perf_counter()
            cache.store(key, entry)
            _compile_log().info("compiled kernel %s on %s in %.0f ms (front end %.0f ms, render and compile "
                                "%.0f ms)", name, self.name, (done - start) * 1e3, (front - start) * 1e3,
                                (done - front) * 1e3)
        if key is not None:
            self._kernels[key] = binary
        return binary

    def _build(self, kernel_ir, uniformity) -> tuple:
        """(binary, cache entry) for a specialised kernel: render, dump, compile, wrap."""
        info = LaunchInfo.of(kernel_ir)
        for rendering in self.renderings(kernel_ir, uniformity):
            cache.count("rendered")
            cache.dump(info.name, rendering.source, self.source_ext)
            image = self.compile_rendering(rendering, info)
            cache.count("compiled")
            entry = cache.Entry({"launch": info.to_json(), **rendering.meta}, image)
            binary = self.wrap_binary(info, entry, rendering)
            if self.accepts(binary):
                break
        return binary, entry

    @staticmethod
    def _raise_bounds(kir, args, record):
        """Raise the OutOfBoundsError a bounds-checked launch recorded: `record` holds
        (flag, parameter index or -1 for shared memory, element offset, source line)."""
        from .errors import OutOfBoundsError, decode_axis_offset
        idx, off, line = int(record[1]), int(record[2]), int(record[3])
        where = f" at {kir.loc.filename}:{line}" if kir.loc is not None else ""
        axis_index = decode_axis_offset(off)
        if idx >= 0 and axis_index is not None:
            p, (axis, index) = kir.params[idx], axis_index
            shape = args[idx].shape
            raise OutOfBoundsError(f"{kir.name}: index {index} is out of bounds for axis {axis} of tensor "
                                   f"'{p.name}', whose extent is {shape[axis]} (shape {shape}){where}")
        if idx >= 0:
            p = kir.params[idx]
            raise OutOfBoundsError(f"{kir.name}: index {off} is out of bounds for tensor '{p.name}' "
                                   f"(shape {args[idx].shape}, {args[idx].extent()} elements reachable){where}")
        raise OutOfBoundsError(f"{kir.name}: index {off} is out of bounds for a shared array{where}")

    # ---------------------------------------------------------------- tensors
    MAX_ALLOCATION = (1 << 63) - 1  # byte counts past an i64 fit no device

    def allocate(self, nbytes: int, shape=None, dtype=None) -> Buffer:
        """A pooled buffer of at least `nbytes` for work on the current stream. A back end
        signals exhaustion with MemoryError; the pool then waits for every stream, frees its
        cache and tries once more, and a second failure raises `OutOfMemoryError` naming the
        request (`shape`, `dtype` where known) and what the pool held."""
        nbytes = max(int(nbytes), 1)
        stream = self._stream_local.current  # current_stream(), inlined
        if stream is None:
            stream = self._default_stream
        if nbytes > self.MAX_ALLOCATION:
            raise OutOfMemoryError(
                f"the {self.name} runtime cannot allocate {nbytes} bytes ({human_bytes(nbytes)}) for "
                f"{_request(shape, dtype)}: out of memory (past what a 64-bit size holds). Its memory pool held "
                f"{human_bytes(self.pool.idle_bytes())} of cached buffers and {human_bytes(self.pool.allocated_bytes)} "
                f"in live tensors")
        extra = guard.GUARD_BYTES if guard.enabled() else 0
        if guard.waiting:  # freed buffers whose guard bytes are still to be read
            guard.settle()
        try:
            block = self.pool.allocate(nbytes + extra, stream)
        except AllocationFailed as e:
            e.nbytes = nbytes  # (what was asked, not the guard bytes with it)
            raise OutOfMemoryError(e.describe(self.name, _request(shape, dtype))) from None
        made = block.view  # (offset, size, view) of the block's last range: pool.view(block), inlined
        view = made[2] if made is not None and made[0] == block.offset and made[1] == block.size else \
            self.pool.view(block)
        buffer = Buffer(view, block.size, self.pool, None, False, block, stream)
        if extra:
            guard.arm(self, buffer, nbytes, _request(shape, dtype))
        rec = replay._local.__dict__.get("recorder")  # replay.active(), inlined (every tensor comes here)
        if rec is not None:
            rec.allocated(self, buffer, nbytes)
        return buffer

    def memory_stats(self) -> dict:
        """The caching allocator's statistics, named as PyTorch's `torch.cuda.memory_stats()`
        ("allocated_bytes.all.current", "reserved_bytes.all.peak", "num_alloc_retries",
        "num_ooms", ...; docs/streams-and-memory.md lists them)."""
        if guard.waiting:
            guard.settle()
        return self.pool.memory_stats()

    def reset_peak_memory_stats(self) -> None:
        """Start every `.peak` statistic again from its current value."""
        self.pool.reset_peak_stats()

    def empty_cache(self) -> int:
        """Wait for every stream, then return the allocator's wholly free segments to the
        driver (live tensors keep theirs); the number of bytes released. Buffers that
        replayed calls keep for reuse are given back first (kerneldsl/replay.py)."""
        replay.release_spares(self)
        if guard.waiting:
            guard.settle()
        self.synchronize()
        return self.pool.empty_cache()

    def empty(self, shape, dtype="f32") -> Tensor:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        plain = True  # a tuple of non-negative Python ints: the tensor is made without conversions
        for s in shape:
            if type(s) is not int:
                plain = False
            if s < 0:
                raise ValueError(f"shape must be non-negative, got {shape}")
        dtype = dtype if type(dtype) is DType else as_dtype(dtype)
        buffer = self.allocate(math.prod(shape) * dtype.itemsize, shape, dtype)
        if plain:
            return Tensor._of(self, buffer, shape, dtype, packed_strides(shape), 0)
        return Tensor(self, buffer, shape, dtype)

    def zeros(self, shape, dtype="f32") -> Tensor:
        t = self.empty(shape, dtype)
        self._fill_zero(t)
        rec = replay.active()
        if rec is not None:
            rec.zero_filled(t)
        return t

    def _fill_zero(self, t: Tensor):
        """Zero a contiguous tensor's elements (which need not start its buffer: a replayed
        call's tensors lie inside one fused allocation)."""
        self._upload(t.buffer, t.offset * t.dtype.itemsize, np.zeros(t.size * t.dtype.itemsize, np.uint8))

    def tensor(self, array, dtype=None) -> Tensor:
        """Upload a host array (anything numpy accepts) as a new contiguous tensor."""
        rec = replay.active()
        if rec is None and dtype is None and type(array) is np.ndarray and array.flags.c_contiguous:
            dt = by_numpy_dtype(array.dtype)   # a plain C-ordered array: no conversions
            if dt is not None:
                t = self.empty(array.shape, dt)
                if array.size:
                    self._upload(t.buffer, 0, array.reshape(-1).view(np.uint8))
                return t
        replayed = False  # an upload the record can redo with the next call's array
        if rec is not None:  # the call being recorded passes host values to the device
            replayed = dtype is None and type(array) is np.ndarray and rec.is_argument(array)
            if not replayed:
                rec.refuse("host upload")
        if isinstance(array, Tensor):
            array = array.numpy()
        a = np.asarray(array)
        if dtype is not None:
            a = a.astype(as_dtype(dtype).np)
        elif a.dtype == np.float64 and not isinstance(array, np.ndarray):
            a = a.astype(np.float32)  # Python floats -> f32, as in the DSL
        elif a.dtype == np.int64 and not isinstance(array, np.ndarray):
            a = a.astype(np.int32)
        dt = as_dtype(a.dtype)
        a = np.asarray(a, order="C")  # (ascontiguousarray would turn a 0-d array into 1-d)
        t = self.empty(a.shape, dt)
        if a.size:
            self._upload(t.buffer, 0, a.reshape(-1).view(np.uint8))
        if replayed:
            rec.uploaded(array, t)
        return t

    def to_numpy(self, t: Tensor) -> np.ndarray:
        """A host copy: waits for every stream that queued work on the tensor's memory, then
        copies on the current stream (see `wait_for_buffer`)."""
        rec = replay.active()
        if rec is not None:  # the call being recorded reads device values on the host
            rec.refuse("host download")
        self.wait_for_buffer(t.buffer)
        if t.size == 0:
            return np.empty(t.shape, t.dtype.np)
        item = t.dtype.itemsize
        return host_array(t, self._download(t.buffer, t.offset * item, t.extent() * item))

    def to_numpy_all(self, tensors) -> list:
        """Host copies of several tensors of this runtime, as `to_numpy` makes each, for a
        caller that needs them together (a validation reading lengths and labels): a back end
        may queue every copy and wait once (cuda and opencl do)."""
        return [self.to_numpy(t) for t in tensors]

    def host_values(self, tensors) -> list:
        """Host arrays of several tensors' values now, for a caller that reads them at once,
        never writes them and keeps nothing (a validation of lengths and labels):
        `to_numpy_all`'s copies, except on a runtime whose memory is host memory (the cpu),
        which gives views of it and saves a copy each."""
        return self.to_numpy_all(tensors)

    def _before_host_reads(self, tensors) -> None:
        """What `to_numpy` does before its copy, for several tensors: a replay recording is
        refused, and every stream that queued work on their memory is waited for (each
        buffer once)."""
        rec = replay.active()
        if rec is not None:  # the call being recorded reads device values on the host
            rec.refuse("host download")
        for buffer in {id(t.buffer): t.buffer for t in tensors}.values():
            self.wait_for_buffer(buffer)

    def copy(self, t: Tensor) -> Tensor:
        """A packed copy of any view, made by a DSL kernel on this runtime."""
        from ._copy import strided_copy
        out = self.empty(t.shape, t.dtype)
        if t.size:
            strided_copy(t, out)
        return out

    # ---------------------------------------------------------------- dlpack
    def dlpack_device(self, t):
        raise BufferError(f"DLPack export is not available on the {self.name} runtime")

    def dlpack_export(self, t, *args, **kwargs):
        raise BufferError(f"DLPack export is not available on the {self.name} runtime")

    # ---------------------------------------------------------------- CUDA array interface
    def cuda_array_interface(self, t) -> dict:
        """`t.__cuda_array_interface__`: only CUDA tensors have one (AttributeError here, so
        `hasattr` tells consumers to look for another protocol)."""
        raise AttributeError(f"__cuda_array_interface__: a tensor of the {self.name} runtime is not in CUDA memory")

    def from_cuda_array_interface(self, obj) -> Tensor:
        raise BufferError(f"from_cuda_array_interface: the {self.name} runtime cannot view CUDA device memory; "
                          f"use runtime='cuda'")


def _request(shape, dtype) -> str:
    """What an allocation was for, in an OutOfMemoryError."""
    return f"a tensor of shape {tuple(shape)} {as_dtype(dtype).name}" if shape is not None else "a buffer"


def _compile_log():
    """The logger of compile events ("kerneldsl.compile", a child of "kerneldsl")."""
    import logging
    return logging.getLogger("kerneldsl.compile")


# -------------------------------------------------------------------- registry
def _backend_module(kind: str):
    return importlib.import_module(BACKENDS[kind])


def _parse(name: str):
    kind, _, idx = name.partition(":")
    kind = kind.strip().lower()
    if kind not in BACKENDS:
        raise ValueError(f"unknown runtime {name!r}; expected one of {', '.join(BACKENDS)} (optionally ':N')")
    if idx and not idx.isdigit():
        raise ValueError(f"bad device index in runtime name {name!r}")
    return kind, int(idx) if idx else 0


def get_runtime(name: str | None = None, **options) -> Runtime:
    """The runtime called `name` ("cpu", "opencl:1", "cuda"); default `$KERNELDSL_RUNTIME`
    or "cpu". Options (e.g. `plane_dim=8` on the CPU) give a separate runtime object."""
    if isinstance(name, Runtime):
        return name
    if name is None:
        name = os.environ.get("KERNELDSL_RUNTIME", "cpu")
    kind, index = _parse(name)
    key = (kind, index, tuple(sorted(options.items())))
    with _LOCK:
        rt = _RUNTIMES.get(key)
        if rt is None:
            try:
                mod = _backend_module(kind)
            except ImportError as e:
                raise RuntimeUnavailable(f"the {kind} runtime needs a package that is not installed: {e}") from None
            rt = mod.create(index, **options)
            _RUNTIMES[key] = rt
        return rt


def loaded_runtimes() -> list:
    """Every runtime object this process has created."""
    with _LOCK:
        return list(_RUNTIMES.values())


@dataclass(frozen=True)
class RuntimeStatus:
    """One runtime (or device) this machine might offer: whether it works, and why not."""

    name: str  # what kd.runtime() takes: "cpu", "opencl:1", "cuda"
    available: bool
    device: str  # what it runs on, as far as known
    reason: str = ""  # why it is not available ("" when it is)


class RuntimeReport(list):
    """`kd.runtime_report()`: a list of RuntimeStatus that prints as a table."""

    def __str__(self):
        rows = [(s.name, "yes" if s.available else "no", s.device, s.reason) for s in self]
        w0 = max([len("runtime")] + [len(r[0]) for r in rows])
        w2 = max([len("device")] + [len(r[2]) for r in rows])
        lines = [f"{'runtime':<{w0}}  ok   {'device':<{w2}}  why not"]
        lines += [f"{a:<{w0}}  {b:<3}  {c:<{w2}}  {d}".rstrip() for a, b, c, d in rows]
        return "\n".join(lines)


def runtime_report() -> RuntimeReport:
    """Every runtime and device kerneldsl tried on this machine, usable or not, with the reason
    for each that is not (a missing package, no driver, a driver that cannot build kernels)."""
    out = RuntimeReport()
    for kind in BACKENDS:
        try:
            mod = _backend_module(kind)
        except ImportError as e:
            out.append(RuntimeStatus(kind, False, "-", f"a package is not installed: {e}"))
            continue
        try:
            out.extend(mod.report())
        except Exception as e:  # noqa: BLE001  (a broken driver is a reason, not a crash)
            out.append(RuntimeStatus(kind, False, "-", f"{type(e).__name__}: {e}"))
    return out


def available_runtimes() -> list:
    """Names of the runtimes that work on this machine, "cpu" first: each one built and ran a
    test kernel (OpenCL: one name per working device, "opencl", "opencl:1", ...).
    `runtime_report()` says why any other is missing."""
    return [s.name for s in runtime_report() if s.available]


runtime = get_runtime


def tensor(array, runtime=None, dtype=None) -> Tensor:  # noqa: F811  (keyword named like the function)
    """`kd.tensor(array, runtime="cpu")`: upload a host array."""
    return get_runtime(runtime).tensor(array, dtype=dtype)


def empty(shape, dtype="f32", runtime=None) -> Tensor:  # noqa: F811
    return get_runtime(runtime).empty(shape, dtype)


def zeros(shape, dtype="f32", runtime=None) -> Tensor:  # noqa: F811
    return get_runtime(runtime).zeros(shape, dtype)


__all__ = ["Runtime", "RuntimeUnavailable", "RuntimeStatus", "runtime", "get_runtime", "available_runtimes",
           "runtime_report", "tensor", "empty", "zeros",
           "contiguous_strides"]


def host_array(t: Tensor, raw: np.ndarray) -> np.ndarray:
    """A packed host copy of tensor `t` from `raw`, the bytes of its extent (from its offset on)."""
    if t.is_contiguous():  # (as_strided costs several µs a call: every small download came here)
        return raw.view(t.dtype.np).reshape(t.shape).copy()
    item = t.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(raw.view(t.dtype.np), t.shape, [s * item for s in t.strides])
    return np.array(view, copy=True)
