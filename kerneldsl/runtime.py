"""Runtimes: where tensors live and kernels run ("cpu", "opencl[:N]", "cuda[:N]", "interpreter").

`Runtime` holds what every back end shares (tensor creation, host transfers,
the memory pool, and the kernel load pipeline: caches, render, dump, compile, wrap);
a back end's `runtime.py` subclasses it with raw allocation, copies, the pipeline's
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
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from . import cache
from .dtypes import as_dtype
from .pipeline import LaunchInfo, Rendering
from .tensor import Tensor, contiguous_strides

# every back end: runtime name -> the module with its runtime (`create`, `available`), imported lazily
BACKENDS = {
    "cpu": "kerneldsl.backends.cpu.runtime",
    "opencl": "kerneldsl.backends.opencl.runtime",
    "cuda": "kerneldsl.backends.cuda.runtime",
    "interpreter": "kerneldsl.backends.interpreter.runtime",  # Python over numpy, for debugging
}
_RUNTIMES: dict = {}
_LOCK = threading.RLock()


def _human_bytes(n: int) -> str:
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


class RuntimeUnavailable(RuntimeError):
    """The runtime asked for cannot run here (no driver, no device, missing package)."""


class MemoryPool:
    """Reuses freed device buffers by size (rounded up to 256 bytes / powers of two),
    so repeated launches do not pay for allocation."""

    def __init__(self, alloc, free):
        self._alloc = alloc
        self._free = free
        self._cache = defaultdict(list)
        self._lock = threading.Lock()
        self.cached_bytes = 0  # freed buffers kept for reuse
        self.in_use_bytes = 0  # buffers handed out and not yet returned
        self.limit = 1 << 30

    @staticmethod
    def bucket(nbytes: int) -> int:
        n = max(256, nbytes)
        if n <= 1 << 20:
            return 1 << (n - 1).bit_length()
        return (n + (1 << 20) - 1) & ~((1 << 20) - 1)

    def allocate(self, nbytes: int):
        size = self.bucket(nbytes)
        with self._lock:
            lst = self._cache.get(size)
            if lst:
                self.cached_bytes -= size
                self.in_use_bytes += size
                return lst.pop(), size
        raw = self._alloc(size)
        with self._lock:
            self.in_use_bytes += size
        return raw, size

    def release(self, raw, size: int):
        with self._lock:
            self.in_use_bytes -= size
            if self.cached_bytes + size <= self.limit:
                self._cache[size].append(raw)
                self.cached_bytes += size
                return
        self._free(raw)

    def clear(self):
        with self._lock:
            for lst in self._cache.values():
                for raw in lst:
                    self._free(raw)
            self._cache.clear()
            self.cached_bytes = 0


class Buffer:
    """A pooled device allocation; returns itself to the pool when collected.

    Anything that lets another library see the memory (a DLPack capsule, a numpy view)
    must hold a reference to this object: once it is collected the pool hands the memory
    to the next allocation. `readonly` marks imported memory its owner does not let us
    write (launches that store to it are refused)."""

    __slots__ = ("raw", "nbytes", "_pool", "owner", "readonly", "__weakref__")

    def __init__(self, raw, nbytes, pool=None, owner=None, readonly: bool = False):
        self.raw = raw
        self.nbytes = nbytes
        self._pool = pool
        self.owner = owner  # keeps imported (DLPack) memory alive
        self.readonly = readonly

    def __del__(self):
        pool = self._pool
        if pool is not None:
            try:
                pool.release(self.raw, self.nbytes)
            except Exception:  # noqa: BLE001  (interpreter shutdown)
                pass


class Runtime:
    """Base of the cpu / opencl / cuda runtimes."""

    kind = "?"

    def __init__(self, name: str, capabilities):
        self.name = name
        self.capabilities = capabilities
        self._kernels: dict = {}
        self.pool = MemoryPool(self._raw_alloc, self._raw_free)

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

    # ---------------------------------------------------------------- back-end hooks
    def _raw_alloc(self, nbytes):
        raise NotImplementedError

    def _raw_free(self, raw):
        raise NotImplementedError

    def _upload(self, buffer: Buffer, byte_offset: int, host: np.ndarray):
        raise NotImplementedError

    def _download(self, buffer: Buffer, byte_offset: int, nbytes: int) -> np.ndarray:
        raise NotImplementedError

    def synchronize(self):
        """Wait until every queued operation of this runtime has finished."""

    def launch(self, binary, grid, block, args):
        raise NotImplementedError

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
        """A pooled buffer of at least `nbytes`. A back end signals exhaustion with
        MemoryError; the pool then frees its cache and tries once more, and a second failure
        raises `OutOfMemoryError` naming the request (`shape`, `dtype` where known)."""
        nbytes = max(int(nbytes), 1)
        cached = self.pool.cached_bytes
        cause = "past what a 64-bit size holds"
        for retry in (False, True) if nbytes <= self.MAX_ALLOCATION else ():
            try:
                raw, size = self.pool.allocate(nbytes)
                return Buffer(raw, size, self.pool)
            except MemoryError as e:
                cause = str(e).strip()
                if not retry:
                    self.synchronize()  # queued work may still use cached buffers
                    self.pool.clear()
        from .errors import OutOfMemoryError
        retried = ", freed before one retry," if nbytes <= self.MAX_ALLOCATION else ""
        what = f"a tensor of shape {tuple(shape)} {as_dtype(dtype).name}" if shape is not None else "a buffer"
        raise OutOfMemoryError(
            f"the {self.name} runtime cannot allocate {nbytes} bytes ({_human_bytes(nbytes)}) for {what}: "
            f"out of memory{f' ({cause})' if cause else ''}. Its memory pool held {_human_bytes(cached)} of "
            f"cached buffers{retried} and {_human_bytes(self.pool.in_use_bytes)} in live tensors") from None

    def empty(self, shape, dtype="f32") -> Tensor:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"shape must be non-negative, got {shape}")
        dtype = as_dtype(dtype)
        n = math.prod(shape)
        return Tensor(self, self.allocate(n * dtype.itemsize, shape, dtype), shape, dtype)

    def zeros(self, shape, dtype="f32") -> Tensor:
        t = self.empty(shape, dtype)
        self._fill_zero(t)
        return t

    def _fill_zero(self, t: Tensor):
        self._upload(t.buffer, 0, np.zeros(t.size * t.dtype.itemsize, np.uint8))

    def tensor(self, array, dtype=None) -> Tensor:
        """Upload a host array (anything numpy accepts) as a new contiguous tensor."""
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
        return t

    def to_numpy(self, t: Tensor) -> np.ndarray:
        self.synchronize()
        item = t.dtype.itemsize
        if t.size == 0:
            return np.empty(t.shape, t.dtype.np)
        nbytes = t.extent() * item
        raw = self._download(t.buffer, t.offset * item, nbytes)
        view = np.lib.stride_tricks.as_strided(raw.view(t.dtype.np), t.shape, [s * item for s in t.strides])
        return np.array(view, copy=True)

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
