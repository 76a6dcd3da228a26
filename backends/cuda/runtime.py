"""The `cuda` runtime: the driver API through `cuda.bindings.driver`.

One runtime per device: the device's primary context (the one PyTorch and CuPy
use, so pointers are shared), one non-blocking stream on which every copy and
launch is queued in order, device memory from `cuMemAlloc` through the shared
pool, modules loaded from NVRTC cubins. `.numpy()` and `synchronize()` wait for
the stream. Nothing here runs at `import kerneldsl`; a machine without a driver
or device gets `RuntimeUnavailable` when the runtime is asked for.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from kerneldsl.errors import LaunchError
from kerneldsl.pipeline import launch_args_from_json, scalar_packer
from kerneldsl.runtime import Buffer, Runtime, RuntimeUnavailable
from kerneldsl.tensor import Tensor

from . import compiler, dlpack
from .capabilities import from_device, sm_of
from .compile_only import CudaPipeline

MAX_GRID = (2 ** 31 - 1, 65535, 65535)


# ---------------------------------------------------------------------------- driver access
@functools.lru_cache(maxsize=None)
def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise RuntimeUnavailable(f"the cuda runtime needs cuda-python (pip install 'rudnn[cuda]'): {e}") from None
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # noqa: BLE001  (libcuda.so is missing: no NVIDIA driver installed)
        raise RuntimeUnavailable(f"the cuda runtime needs an NVIDIA driver, and none was found: {e}") from None
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeUnavailable(f"the NVIDIA driver did not initialise (cuInit: {_error_text(driver, err)})")
    return driver


def _error_text(driver, err) -> str:
    try:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        return f"{name.decode()}: {text.decode()}"
    except Exception:  # noqa: BLE001
        return str(err)


def _check(result, what: str, error=RuntimeError):
    """Unpack a cuda-python result tuple, raising `error` with the driver's words on failure."""
    driver = _driver()
    err, rest = result[0], result[1:]
    if err != driver.CUresult.CUDA_SUCCESS:
        text = _error_text(driver, err)
        if err in (driver.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, driver.CUresult.CUDA_ERROR_LAUNCH_FAILED,
                   driver.CUresult.CUDA_ERROR_MISALIGNED_ADDRESS):
            text += (" (a kernel accessed memory it does not own; rerun with KERNELDSL_BOUNDS_CHECK=1 to find the "
                     "tensor and index; the CUDA context is unusable until the process restarts)")
            error = LaunchError
        raise error(f"{what} failed: {text}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def device_count() -> int:
    driver = _driver()
    return _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")


# ---------------------------------------------------------------------------- loaded kernels
class CudaBinary:
    """A loaded kernel: its module (kept alive), function handle and launch facts."""

    def __init__(self, info, meta: dict, module, function):
        self.info = info
        self.args = launch_args_from_json(meta["args"], info.params)  # what each kernel parameter is
        self.module = module
        self.function = function
        self.dynamic_shared = meta["dynamic_shared"]
        self.kind = meta["image"]  # 'cubin' or 'ptx'
        self.param_index = {p.name: i for i, p in enumerate(info.params)}
        # per kernel parameter: (kind, launch argument index, axis, scalar packer), for launch
        self.plan = tuple((a.kind, -1 if a.param is None else a.param.index, a.axis,
                           scalar_packer(a.param.dtype) if a.kind == "scalar" else None) for a in self.args)
        # the parameter block, made once: one 8-byte slot per kernel parameter, and the
        # array of their addresses that cuLaunchKernel reads (refilled under the lock)
        n = len(self.args)
        self.slots = np.zeros(max(n, 1), np.uint64)
        self.params = self.slots.ctypes.data + 8 * np.arange(max(n, 1), dtype=np.uint64)
        self.params_ptr = self.params.ctypes.data if n else 0
        self.lock = threading.Lock()


class CudaEvent:
    """A recorded CUDA event; the driver's event is destroyed when this is collected."""

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        try:
            _driver().cuEventDestroy(self.handle)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


class CudaRuntime(CudaPipeline, Runtime):
    kind = "cuda"

    def __init__(self, index: int = 0):
        driver = _driver()
        count = device_count()
        if count == 0:
            raise RuntimeUnavailable("the NVIDIA driver reports no CUDA device")
        if not 0 <= index < count:
            raise RuntimeUnavailable(f"cuda:{index} does not exist: this machine has {count} CUDA device(s)")
        if not compiler.available():
            raise RuntimeUnavailable("the cuda runtime needs NVRTC (pip install nvidia-cuda-nvrtc)")
        self.index = index
        self.device = _check(driver.cuDeviceGet(index), "cuDeviceGet")
        name = _check(driver.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        name = name.split(b"\0")[0].decode()
        A = driver.CUdevice_attribute
        attr = lambda a: _check(driver.cuDeviceGetAttribute(a, self.device), "cuDeviceGetAttribute")  # noqa: E731
        self.attributes = {
            "major": attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            "minor": attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            "max_threads_per_block": attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            "max_shared_optin": attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            "warp_size": attr(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE),
            "multiprocessors": attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        }
        try:
            caps = from_device(self.attributes, name)
        except ValueError as e:
            raise RuntimeUnavailable(str(e)) from None
        self.context = _check(driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self._local = threading.local()
        self._enter()
        self.stream = _check(driver.cuStreamCreate(int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")
        self.stream_handle = int(self.stream)
        super().__init__("cuda" if index == 0 else f"cuda:{index}", caps)
        self._errbuf = None

    @property
    def device_key(self):
        return f"cuda:{self.index}"

    @property
    def sm(self) -> int:
        return sm_of(self.capabilities)

    def __repr__(self):
        return f"kd.runtime({self.name!r})  # {self.capabilities.device_name}, {self.capabilities.arch}"

    def _enter(self):
        """Make the device's primary context current on this thread (once per thread)."""
        if getattr(self._local, "entered", False):
            return
        _check(_driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self._local.entered = True

    # -------------------------------------------------------------- memory
    def _raw_alloc(self, nbytes):
        self._enter()
        driver = _driver()
        err, ptr = driver.cuMemAlloc(nbytes)  # out of memory: MemoryError, which Runtime.allocate
        _check((err,), f"cuMemAlloc of {nbytes} bytes on {self.name}", MemoryError)  # retries once
        return int(ptr)

    def _raw_free(self, raw):
        self._enter()
        _driver().cuMemFree(raw)

    def _upload(self, buffer, byte_offset, host):
        self._enter()
        host = np.ascontiguousarray(host)
        _check(_driver().cuMemcpyHtoDAsync(buffer.raw + byte_offset, host.ctypes.data, host.nbytes, self.stream),
               "cuMemcpyHtoDAsync")

    def _download(self, buffer, byte_offset, nbytes):
        self._enter()
        out = np.empty(nbytes, np.uint8)
        _check(_driver().cuMemcpyDtoHAsync(out.ctypes.data, buffer.raw + byte_offset, nbytes, self.stream),
               "cuMemcpyDtoHAsync")
        self.synchronize()
        return out

    def _fill_zero(self, t):
        self._enter()
        n = t.size * t.dtype.itemsize
        if n:
            _check(_driver().cuMemsetD8Async(t.buffer.raw + t.offset * t.dtype.itemsize, 0, n, self.stream),
                   "cuMemsetD8Async")

    def synchronize(self):
        self._enter()
        _check(_driver().cuStreamSynchronize(self.stream), f"synchronizing {self.name}", LaunchError)

    # -------------------------------------------------------------- events (timing)
    def record_event(self) -> "CudaEvent":
        """A CUDA event recorded on this runtime's stream now (for timing)."""
        self._enter()
        driver = _driver()
        ev = CudaEvent(_check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DEFAULT)), "cuEventCreate"))
        _check(driver.cuEventRecord(ev.handle, self.stream), "cuEventRecord")
        return ev

    def elapsed_ms(self, start: "CudaEvent", end: "CudaEvent") -> float:
        """Milliseconds between two recorded events (waits for `end`)."""
        driver = _driver()
        _check(driver.cuEventSynchronize(end.handle), "cuEventSynchronize", LaunchError)
        return float(_check(driver.cuEventElapsedTime(start.handle, end.handle), "cuEventElapsedTime"))

    # -------------------------------------------------------------- dlpack
    def dlpack_device(self, t):
        return (dlpack.KDL_CUDA, self.index)

    def dlpack_export(self, t, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != self.dlpack_device(t):
            raise BufferError(f"DLPack export of a {self.name} tensor to device {tuple(dl_device)} needs a copy; "
                              f"use .numpy() or kd.runtime(...).tensor(...)")
        if copy:
            t = t.clone()
        self._enter()
        if stream is None:
            self.synchronize()  # the consumer did not name a stream: make the data ready for any
        elif stream != -1:
            driver = _driver()
            ev = _check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
            _check(driver.cuEventRecord(ev, self.stream), "cuEventRecord")
            _check(driver.cuStreamWaitEvent(int(stream), ev, 0), "cuStreamWaitEvent")
            driver.cuEventDestroy(ev)  # released once the wait has been satisfied
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return dlpack.export_capsule(t, self.index, versioned)

    def from_dlpack(self, obj) -> Tensor:
        """A tensor sharing memory with a CUDA array of another library (torch, cupy, ...)."""
        dev_type, dev_id = (int(v) for v in obj.__dlpack_device__())
        if dev_type != dlpack.KDL_CUDA:
            raise BufferError(f"from_dlpack: the {self.name} runtime takes CUDA device memory (DLPack device "
                              f"type {dlpack.KDL_CUDA}), got device type {dev_type}")
        if dev_id != self.index:
            from kerneldsl.runtime import get_runtime
            return get_runtime(f"cuda:{dev_id}").from_dlpack(obj)
        self._enter()
        try:
            capsule = obj.__dlpack__(stream=self.stream_handle, max_version=(1, 0))
        except TypeError:  # a producer from before DLPack 1.0
            capsule = obj.__dlpack__(stream=self.stream_handle)
        owner, data, _, dtype, shape, strides = dlpack.read_capsule(capsule, obj)
        size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if size else 0
        buf = Buffer(data, extent * dtype.itemsize, None, owner=owner, readonly=owner.readonly)
        return Tensor(self, buf, shape, dtype, strides, 0)

    # -------------------------------------------------------------- kernels
    def wrap_binary(self, info, entry, rendering=None) -> CudaBinary:
        """Load a cubin (or PTX) into this device's context and find its kernel."""
        meta = entry.meta
        self._enter()
        driver = _driver()
        module = _check(driver.cuModuleLoadData(entry.image),
                        f"loading {info.name} ({meta['image']} for {self.capabilities.arch})", LaunchError)
        function = _check(driver.cuModuleGetFunction(module, meta["symbol"].encode()), "cuModuleGetFunction")
        shared = meta["dynamic_shared"]
        if shared > 0:
            _check(driver.cuFuncSetAttribute(
                function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                f"{info.name}: asking for {shared} bytes of shared memory")
        return CudaBinary(info, meta, module, function)

    def _error_buffer(self):
        if self._errbuf is None:
            self._errbuf = self.allocate(32)
        return self._errbuf

    def launch(self, binary: CudaBinary, grid, block, args):
        kir = binary.info
        for axis, (g, lim) in enumerate(zip(grid, MAX_GRID)):
            if g > lim:
                raise ValueError(f"{kir.name}: grid {tuple(grid)} has {g} cubes along axis {'xyz'[axis]}; CUDA "
                                 f"allows at most {lim}")
        if block[2] > 64:
            raise ValueError(f"{kir.name}: block {tuple(block)} has {block[2]} units along z; CUDA allows at most 64")
        self._enter()
        driver = _driver()
        with binary.lock:
            slots = binary.slots
            for i, (kind, index, axis, packer) in enumerate(binary.plan):
                if kind == "errbuf":
                    err = self._error_buffer()
                    slots[i] = err.raw
                    _check(driver.cuMemsetD8Async(err.raw, 0, 32, self.stream), "cuMemsetD8Async")
                    continue
                v = args[index]
                if kind == "data":
                    slots[i] = v.buffer.raw + v.offset * v.dtype.itemsize
                elif kind == "extent":
                    slots[i] = v.extent()
                elif kind == "shape":
                    slots[i] = v.shape[axis]
                elif kind == "stride":
                    slots[i] = v.strides[axis]
                elif kind == "scalar":
                    slots[i] = packer(v)
                else:
                    raise LaunchError(f"{kir.name}: the cuda runtime cannot pass a kernel argument of kind {kind!r}")
            # cuLaunchKernel reads parameter i from the address in params[i] (little-endian:
            # the low bytes of a slot hold a 4-, 2- or 1-byte value) and copies it at launch
            result = driver.cuLaunchKernel(binary.function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                           binary.dynamic_shared, self.stream, binary.params_ptr, 0)
            if result[0] != driver.CUresult.CUDA_SUCCESS:  # (the message is formatted only on failure)
                _check(result, f"launching {kir.name} (grid {tuple(grid)}, block {tuple(block)})", LaunchError)
        if kir.bounds_check:
            rec = self._download(self._errbuf, 0, 32).view(np.int64)
            if rec[0]:
                self._raise_bounds(kir, args, rec)

def available() -> bool:
    return any(status.available for status in report())


def report() -> list:
    """The cuda runtime's RuntimeStatus: usable, or why not (NVRTC, driver, device count)."""
    from kerneldsl.runtime import RuntimeStatus
    try:
        if not compiler.available():
            return [RuntimeStatus("cuda", False, "-", "NVRTC not found (pip install 'rudnn[cuda]')")]
        n = device_count()
    except Exception as e:  # noqa: BLE001  (no driver, broken install: the reason is the message)
        return [RuntimeStatus("cuda", False, "-", f"no usable CUDA driver: {str(e).splitlines()[0][:200]}")]
    if n == 0:
        return [RuntimeStatus("cuda", False, "-", "the CUDA driver lists no device")]
    return [RuntimeStatus("cuda" if i == 0 else f"cuda:{i}", True, f"CUDA device {i}", "") for i in range(n)]


def create(index: int = 0, **options) -> CudaRuntime:
    if options:
        raise ValueError(f"the cuda runtime takes no options, got {sorted(options)}")
    return CudaRuntime(index)
