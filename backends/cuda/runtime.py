"""The `cuda` runtime: the driver API through `cuda.bindings.driver`.

One runtime per device: the device's primary context (the one PyTorch and CuPy
use, so pointers are shared), non-blocking streams (a default one, `rt.stream()`,
and wrapped foreign ones) on which copies and launches are queued in order on the
thread's current stream, device memory from `cuMemAlloc` split into blocks by the
caching allocator, modules loaded from NVRTC cubins. `.numpy()` waits for the
streams that used the tensor, `synchronize()` for every stream. Nothing here runs at `import kerneldsl`; a machine without a driver
or device gets `RuntimeUnavailable` when the runtime is asked for.
"""
from __future__ import annotations

import array
import ctypes
import functools
import threading
import weakref

import numpy as np

from kerneldsl.errors import LaunchError
from kerneldsl.pipeline import launch_args_from_json, scalar_packer
from kerneldsl.prepared import PreparedLaunch, group_by_source
from kerneldsl import envflags, interop
from kerneldsl.runtime import Buffer, Runtime, RuntimeUnavailable, host_array
from kerneldsl.streams import Event, Stream
from kerneldsl.tensor import Tensor

from . import compiler, dlpack, graphs, launcher
from . import slots as slot_code
from .capabilities import from_device, sm_of
from .launcher import GRAPH_FALLBACK
from .compile_only import CudaPipeline
from .tensor_maps import TensorMaps

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


@functools.lru_cache(maxsize=None)
def _success():
    """CUDA_SUCCESS as cuda-python's enum (made once: the attribute builds a member each time)."""
    return _driver().CUresult.CUDA_SUCCESS


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
        self.slots, self.params, self.params_ptr = parameter_block(len(self.args))  # refilled under the lock
        # the plan as straight-line code (None: the loop in launch, which also reads a bounds-check record)
        self.fill = None if info.bounds_check else slot_code.fill_function(self.plan)
        self.packers = slot_code.packers_of(self.plan)
        self.tensor_maps = meta.get("tensor_maps") or []  # [parameter index, box rows, swizzle] per 'tmap' argument
        self.lock = threading.Lock()


def parameter_block(n: int) -> tuple:
    """(slots, params, params_ptr) for `n` kernel parameters: one 8-byte slot each, and the array
    of their addresses that cuLaunchKernel reads (0 for no parameters). array.array, not numpy:
    storing an int into it costs a third as much."""
    slots = array.array("Q", bytes(8 * max(n, 1)))
    base = slots.buffer_info()[0]
    params = array.array("Q", [base + 8 * i for i in range(max(n, 1))])
    return slots, params, (params.buffer_info()[0] if n else 0)


class CudaEvent(Event):
    """A CUDA event recorded on a stream; the driver's event is destroyed when this is collected,
    through the driver module that created it (`_destroy`: a test's fake driver stays in
    charge of its fake handles after it is uninstalled; the real driver would crash on them)."""

    __slots__ = ("_destroy",)

    def __init__(self, stream, handle, destroy):
        super().__init__(stream, handle)
        self._destroy = destroy

    def synchronize(self):
        self.stream.runtime._enter()
        _check(_driver().cuEventSynchronize(self.handle), "cuEventSynchronize", LaunchError)

    def query(self) -> bool:
        self.stream.runtime._enter()
        driver = _driver()
        (err,) = driver.cuEventQuery(self.handle)
        if err == driver.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _check((err,), "cuEventQuery", LaunchError)
        return True

    def __del__(self):
        try:
            self._destroy(self.handle)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


class CudaStream(Stream):
    """A CUDA stream: `cu` the driver's CUstream, `handle` its address as an int (what torch's
    `cuda_stream` and the DLPack protocol use). Streams made here are non-blocking (they do
    not synchronize with the legacy default stream) and destroyed when collected."""

    def __init__(self, runtime, cu, owned: bool, default: bool = False):
        super().__init__(runtime, int(cu), external=not owned, default=default)
        self.cu = cu
        self._owned = owned
        # destroyed through the driver module that made it (see CudaEvent)
        self._destroy = _driver().cuStreamDestroy if owned else None

    def synchronize(self):
        self.runtime._enter()
        _check(_driver().cuStreamSynchronize(self.cu), f"synchronizing {self.runtime.name}", LaunchError)

    def record_event(self, timing: bool = False) -> CudaEvent:
        """An event at the end of the work queued so far (`timing=True`: usable by elapsed_ms)."""
        self.runtime._enter()
        driver = _driver()
        flags = driver.CUevent_flags.CU_EVENT_DEFAULT if timing else driver.CUevent_flags.CU_EVENT_DISABLE_TIMING
        ev = CudaEvent(self, _check(driver.cuEventCreate(int(flags)), "cuEventCreate"), driver.cuEventDestroy)
        _check(driver.cuEventRecord(ev.handle, self.cu), "cuEventRecord")
        return ev

    def wait_event(self, event):
        self._check_event(event)
        self.runtime._enter()
        _check(_driver().cuStreamWaitEvent(self.cu, event.handle, 0), "cuStreamWaitEvent")

    def __del__(self):
        if getattr(self, "_destroy", None) is not None:
            try:
                self._destroy(self.cu)  # queued work still completes
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
        super().__init__("cuda" if index == 0 else f"cuda:{index}", caps)
        self._errbuf = None
        self._staging_memory = None  # page-locked host memory for to_numpy_all (_staging)
        self._staging_lock = threading.Lock()
        self._tensor_maps = TensorMaps(driver)  # kd.bulk_copy sources' maps, encoded at first use
        # the JIT'd native launcher (launcher.py) that issues a replay's joined launches in one
        # call; None (each launch through cuda-python) where there is none or
        # $KERNELDSL_CUDA_NATIVE_LAUNCH is off
        self._native = launcher.get(driver) if envflags.switch("KERNELDSL_CUDA_NATIVE_LAUNCH", True)() else None
        # launches of a binary again as CUDA graph launches (graphs.py): the native graph_run, or
        # None (cuLaunchKernel each time) without it or where $KERNELDSL_CUDA_GRAPHS is off
        self._graph_run = (self._native.graph_run if self._native is not None
                           and envflags.switch("KERNELDSL_CUDA_GRAPHS", True)() else None)

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

    # -------------------------------------------------------------- streams
    def _create_cu_stream(self):
        driver = _driver()
        self._enter()
        return _check(driver.cuStreamCreate(int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")

    def _make_default_stream(self):
        return CudaStream(self, self._create_cu_stream(), owned=True, default=True)

    def _new_stream(self):
        return CudaStream(self, self._create_cu_stream(), owned=True)

    def _wrap_stream(self, handle):
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise TypeError(f"external_stream on {self.name} takes a CUstream as an int (e.g. "
                            f"torch.cuda.current_stream().cuda_stream), got {type(handle).__name__}")
        if handle < 0:
            raise ValueError(f"external_stream: a CUstream handle is >= 0 (0 and 1: the legacy default stream, 2: "
                             f"the per-thread default stream), got {handle}")
        return CudaStream(self, _driver().CUstream(handle), owned=False)

    def _stream_of_consumer(self, handle: int):
        """The stream a consumer names in the DLPack / CUDA array interface protocols."""
        return self.external_stream(handle)

    # -------------------------------------------------------------- memory
    def _raw_view(self, raw, offset, nbytes):
        return raw + offset  # a device pointer

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
        stream = self.current_stream()
        buffer.record_stream(stream)
        host = np.ascontiguousarray(host)
        _check(_driver().cuMemcpyHtoDAsync(buffer.raw + byte_offset, host.ctypes.data, host.nbytes, stream.cu),
               "cuMemcpyHtoDAsync")

    def _download(self, buffer, byte_offset, nbytes):
        if nbytes <= self.STAGING_BYTES:
            return self._staged_copies([(buffer.raw + byte_offset, nbytes)])[0]
        self._enter()
        stream = self.current_stream()
        out = np.empty(nbytes, np.uint8)
        _check(_driver().cuMemcpyDtoHAsync(out.ctypes.data, buffer.raw + byte_offset, nbytes, stream.cu),
               "cuMemcpyDtoHAsync")
        stream.synchronize()
        return out

    # Small downloads go through page-locked staging memory: a copy into it is queued (3 µs on
    # an H200 host) where one into pageable memory waits for itself (12 µs), so several copies
    # cost one wait. Larger ones go straight to their numpy array.
    STAGING_BYTES = 1 << 16

    def _staged_copies(self, pieces) -> list:
        """Host copies (uint8 arrays) of device byte ranges (address, nbytes) that fit the
        staging memory together, each 16-byte aligned in it: every copy queued on the current
        stream, then one wait."""
        self._enter()
        stream = self.current_stream()
        driver = _driver()
        with self._staging_lock:
            address, host = self._staging()
            at, spans = 0, []
            for src, n in pieces:
                if n:
                    _check(driver.cuMemcpyDtoHAsync(address + at, src, n, stream.cu), "cuMemcpyDtoHAsync")
                spans.append(at)
                at += -(-n // 16) * 16
            stream.synchronize()
            return [host[a:a + n].copy() for a, (_, n) in zip(spans, pieces)]

    def to_numpy_all(self, tensors) -> list:
        """Several small tensors' host copies with one wait (`_staged_copies`); tensors larger
        than the staging memory together take `to_numpy` each."""
        tensors = list(tensors)
        pieces = [(t.buffer.raw + t.offset * t.dtype.itemsize, t.extent() * t.dtype.itemsize if t.size else 0)
                  for t in tensors]
        if len(tensors) < 2 or sum(-(-n // 16) * 16 for _, n in pieces) > self.STAGING_BYTES:
            return super().to_numpy_all(tensors)
        self._before_host_reads(tensors)
        raws = self._staged_copies(pieces)
        return [host_array(t, raw) if t.size else np.empty(t.shape, t.dtype.np) for t, raw in zip(tensors, raws)]

    def _staging(self) -> tuple:
        """(address, uint8 numpy view) of this runtime's page-locked staging memory, allocated
        at first use and kept for the runtime's life (call under `_staging_lock`)."""
        if self._staging_memory is None:
            ptr = int(_check(_driver().cuMemAllocHost(self.STAGING_BYTES), "cuMemAllocHost", MemoryError))
            view = np.ctypeslib.as_array((ctypes.c_uint8 * self.STAGING_BYTES).from_address(ptr))
            self._staging_memory = (ptr, view)
            weakref.finalize(self, _driver().cuMemFreeHost, ptr).atexit = False  # (at exit the driver frees it)
        return self._staging_memory

    def _fill_zero(self, t):
        self._enter()
        n = t.size * t.dtype.itemsize
        if n:
            stream = self.current_stream()
            t.buffer.record_stream(stream)
            _check(_driver().cuMemsetD8Async(t.buffer.raw + t.offset * t.dtype.itemsize, 0, n, stream.cu),
                   "cuMemsetD8Async")

    # -------------------------------------------------------------- events (timing)
    def record_event(self) -> "CudaEvent":
        """A timing CUDA event recorded on the current stream now (see elapsed_ms)."""
        return self.current_stream().record_event(timing=True)

    def elapsed_ms(self, start: "CudaEvent", end: "CudaEvent") -> float:
        """Milliseconds between two recorded events (waits for `end`)."""
        driver = _driver()
        _check(driver.cuEventSynchronize(end.handle), "cuEventSynchronize", LaunchError)
        return float(_check(driver.cuEventElapsedTime(start.handle, end.handle), "cuEventElapsedTime"))

    # -------------------------------------------------------------- dlpack
    def dlpack_device(self, t):
        return (dlpack.KDL_CUDA, self.index)

    def dlpack_export(self, t, stream=None, max_version=None, dl_device=None, copy=None):
        """The DLPack stream protocol: the consumer names its stream (None: the legacy default
        stream, 1 legacy, 2 per-thread default, > 2 a CUstream, -1 no synchronization) and
        that stream is made to wait, through events, for the work queued on the tensor."""
        if dl_device is not None and tuple(dl_device) != self.dlpack_device(t):
            raise BufferError(f"DLPack export of a {self.name} tensor to device {tuple(dl_device)} needs a copy; "
                              f"use .numpy() or kd.runtime(...).tensor(...)")
        if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int) or stream < -1
                                   or stream == 0):
            raise BufferError(f"__dlpack__(stream={stream!r}): a CUDA consumer passes None, -1 (no synchronization), "
                              f"1 (legacy default stream), 2 (per-thread default stream) or a CUstream as an int; "
                              f"0 is ambiguous and not allowed")
        if copy:
            t = t.clone()
        self._enter()
        if stream != -1:
            consumer = self._stream_of_consumer(1 if stream is None else stream)
            for producer in t.buffer.streams() or [self.current_stream()]:
                consumer.wait_event(producer.record_event())
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return dlpack.export_capsule(t, self.index, versioned)

    def from_dlpack(self, obj) -> Tensor:
        """A tensor sharing memory with a CUDA array of another library (torch, cupy, ...); the
        producer makes the current stream wait for its work (DLPack stream protocol)."""
        dev_type, dev_id = (int(v) for v in obj.__dlpack_device__())
        if dev_type != dlpack.KDL_CUDA:
            raise BufferError(f"from_dlpack: the {self.name} runtime takes CUDA device memory (DLPack device "
                              f"type {dlpack.KDL_CUDA}), got device type {dev_type}")
        if dev_id != self.index:
            from kerneldsl.runtime import get_runtime
            return get_runtime(f"cuda:{dev_id}").from_dlpack(obj)
        self._enter()
        stream = self.current_stream()
        # the protocol's number for our stream: the legacy default stream (handle 0, e.g. torch's
        # default stream wrapped by rudnn.torch) is 1, since 0 is not allowed on CUDA
        number = stream.handle if stream.handle != 0 else 1
        try:
            capsule = obj.__dlpack__(stream=number, max_version=(1, 0))
        except TypeError:  # a producer from before DLPack 1.0
            capsule = obj.__dlpack__(stream=number)
        owner, data, _, dtype, shape, strides = dlpack.read_capsule(capsule, obj)
        size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if size else 0
        buf = Buffer(data, extent * dtype.itemsize, None, owner=owner, readonly=owner.readonly, stream=stream)
        return Tensor(self, buf, shape, dtype, strides, 0)

    # -------------------------------------------------------------- CUDA array interface
    def cuda_array_interface(self, t) -> dict:
        """`__cuda_array_interface__` (v3) of a tensor on this runtime; `stream` is the stream
        its work was queued on (other streams that used it are made to wait first)."""
        self._enter()
        streams = t.buffer.streams() or [self.current_stream()]
        for other in streams[1:]:
            streams[0].wait_event(other.record_event())
        data = t.buffer.raw + t.offset * t.dtype.itemsize if t.size else 0
        return interop.cuda_array_interface(t, data, streams[0].handle)

    def from_cuda_array_interface(self, obj) -> Tensor:
        """A tensor sharing memory with `obj`'s `__cuda_array_interface__` (on this runtime's
        device, or the device the pointer belongs to); the current stream waits for the
        producer's stream when the interface names one."""
        desc = interop.read_cuda_array_interface(obj)
        self._enter()
        if desc.data:
            driver = _driver()
            ordinal = _check(driver.cuPointerGetAttribute(
                driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, desc.data), "cuPointerGetAttribute")
            if int(ordinal) != self.index:
                from kerneldsl.runtime import get_runtime
                return get_runtime(f"cuda:{int(ordinal)}").from_cuda_array_interface(obj)
        stream = self.current_stream()
        if desc.stream is not None:
            stream.wait_event(self._stream_of_consumer(desc.stream).record_event())
        buf = Buffer(desc.data, desc.extent_bytes, None, owner=obj, readonly=desc.readonly, stream=stream)
        return Tensor(self, buf, desc.shape, desc.dtype, desc.strides, 0)

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
        kir = binary.info  # (grid and block were checked against capabilities: kerneldsl/launch_checks.py)
        if not self._local.__dict__.get("entered"):  # (_enter and current_stream, inlined: every launch)
            self._enter()
        stream = self._stream_local.__dict__.get("current")
        if stream is None:
            stream = self._default_stream
        driver = _driver()
        fill = getattr(binary, "fill", None)
        with binary.lock:
            slots = binary.slots
            if fill is not None:  # the loop below, as generated code (slots.py)
                fill(slots, args, stream, binary.packers)
                result = driver.cuLaunchKernel(binary.function, grid[0], grid[1], grid[2], block[0], block[1],
                                               block[2], binary.dynamic_shared, stream.cu, binary.params_ptr, 0)
        if fill is not None:
            if result[0] != _success():
                _check(result, f"launching {kir.name} (grid {tuple(grid)}, block {tuple(block)})", LaunchError)
            return  # (no bounds-checked binary has a fill function: its error buffer is a slot of its own)
        with binary.lock:
            slots = binary.slots
            for i, (kind, index, axis, packer) in enumerate(binary.plan):
                if kind == "data":
                    v = args[index]
                    buf = v.buffer
                    if buf.stream is not stream:
                        buf.record_stream(stream)  # the allocator and downloads wait for this stream
                    slots[i] = buf.raw + v.offset * v.dtype.itemsize
                elif kind == "scalar":
                    slots[i] = packer(args[index])
                elif kind == "extent":  # (_slot_value's cases, inlined on the launch path)
                    slots[i] = args[index].extent()
                elif kind == "shape":
                    slots[i] = args[index].shape[axis]
                elif kind == "stride":
                    slots[i] = args[index].strides[axis]
                elif kind == "errbuf":
                    err = self._error_buffer()
                    slots[i] = err.raw
                    err.record_stream(stream)
                    _check(driver.cuMemsetD8Async(err.raw, 0, 32, stream.cu), "cuMemsetD8Async")
                elif kind == "tmap":  # passed by value: the parameter's address is the map's own
                    v = args[index]
                    box = binary.tensor_maps[axis]  # [parameter index, rows, swizzle]
                    binary.params[i] = self._tensor_maps.address(v, box[1], box[2], kir.name, kir.params[index].name)
                else:
                    slots[i] = _slot_value(kir, kind, args[index], axis, packer)
            # cuLaunchKernel reads parameter i from the address in params[i] (little-endian:
            # the low bytes of a slot hold a 4-, 2- or 1-byte value) and copies it at launch
            result = driver.cuLaunchKernel(binary.function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                           binary.dynamic_shared, stream.cu, binary.params_ptr, 0)
        if result[0] != _success():  # (the message is formatted only on failure)
            _check(result, f"launching {kir.name} (grid {tuple(grid)}, block {tuple(block)})", LaunchError)
        if kir.bounds_check:
            rec = self._download(self._errbuf, 0, 32).view(np.int64)
            if rec[0]:
                self._raise_bounds(kir, args, rec)

    def launcher(self, binary: CudaBinary, block: tuple):
        """`launch` of a binary whose slots all have generated code (slots.py), made once per
        binary and cube shape: no step of it looks anything up that the binary fixes."""
        make = None if getattr(binary, "fill", None) is None else slot_code.launch_maker(binary.plan)
        if make is None:
            return super().launcher(binary, block)
        kir = binary.info
        driver = _driver()

        def failed(result, grid):
            _check(result, f"launching {kir.name} (grid {tuple(grid)}, block {tuple(block)})", LaunchError)

        def graph_failed(code, grid):
            _graph_failed(code, [(kir.name, grid, block)])

        graph = None
        if self._graph_run is not None:
            graph = graphs.KernelGraph(driver, self._graph_run,
                                       [(binary.function, (1, 1, 1), block, binary.dynamic_shared, binary.params_ptr,
                                         binary.slots)])
        return make(self._local, self._enter, self._stream_local, self._default_stream, binary.lock, binary.slots,
                    binary.packers, driver.cuLaunchKernel, binary.function, block[0], block[1], block[2],
                    binary.dynamic_shared, binary.params_ptr, _success(), failed,
                    None if graph is None else graph.launch_grid, GRAPH_FALLBACK, graph_failed)

    def prepare_launch(self, binary: CudaBinary, grid, block, args):
        # bounds-checked, or with tensor maps (encoded per tensor address): the general path
        if any(kind in ("errbuf", "tmap") for kind, _, _, _ in binary.plan):
            return PreparedLaunch(self, binary, grid, block, args)
        return CudaPreparedLaunch(self, binary, grid, block, args)

    def join_launches(self, launches: list):
        if self._native is None or len(launches) < 2 or not all(type(p) is CudaPreparedLaunch for p in launches):
            return None
        return CudaLaunchSequence(self, launches)


def _graph_failed(code: int, launches: list) -> None:
    """Raise LaunchError for a failed graph launch (graphs.KernelGraph.launch's code) of
    `launches` ((kernel name, grid, block) per node), naming the node whose update failed, or
    every kernel where the graph launch itself did."""
    step, result = graphs.failed_step(code, len(launches))
    index = min((code >> 32) - 1, len(launches))
    what = "; ".join(f"{name} (grid {tuple(grid)}, block {tuple(block)})"
                     for name, grid, block in (launches[index:index + 1] or launches))
    _check((_driver().CUresult(result),), f"launching {what}: {step}", LaunchError)


def _slot_value(kir, kind: str, v, axis: int, packer) -> int:
    """The parameter slot of a launch argument other than a tensor's data address."""
    if kind == "extent":
        return v.extent()
    if kind == "shape":
        return v.shape[axis]
    if kind == "stride":
        return v.strides[axis]
    if kind == "scalar":
        return packer(v)
    raise LaunchError(f"{kir.name}: the cuda runtime cannot pass a kernel argument of kind {kind!r}")


class CudaPreparedLaunch(PreparedLaunch):
    """A cuda launch with its own parameter block, filled once (kerneldsl/prepared.py): `run`
    writes each tensor's data address and launches on the current stream."""

    __slots__ = ("slots", "params", "params_ptr", "data", "lock", "driver", "dims", "success", "descriptor", "graph")

    def __init__(self, runtime, binary: CudaBinary, grid, block, args):
        super().__init__(runtime, binary, grid, block, args)
        self.slots, self.params, self.params_ptr = parameter_block(len(binary.args))
        slot_of = {}  # launch argument index -> its data slot
        for i, (kind, index, axis, packer) in enumerate(binary.plan):
            if kind == "data":
                slot_of[index] = i
            else:
                self.slots[i] = _slot_value(binary.info, kind, args[index], axis, packer)
        self.data = tuple(slot_of[pos] for pos in self.tensors)  # run's refs[k] goes to slot data[k]
        self.lock = threading.Lock()
        self.driver = _driver()
        self.dims = (binary.function, *grid, *block, binary.dynamic_shared)
        self.success = self.driver.CUresult.CUDA_SUCCESS
        # its words in a joined sequence's native call (CudaLaunchSequence; a lone launch goes
        # through cuda-python: the H200 host measured both at 5.3 µs a prepared launch)
        self.descriptor = launcher.descriptor(int(binary.function), grid, block, binary.dynamic_shared, self.params_ptr)
        self.graph = (None if runtime._graph_run is None else graphs.KernelGraph(
            self.driver, runtime._graph_run, [(binary.function, grid, block, binary.dynamic_shared, self.params_ptr,
                                                  self.slots)]))

    def run(self, refs) -> None:
        rt = self.runtime
        if not rt._local.__dict__.get("entered"):
            rt._enter()
        stream = rt._stream_local.__dict__.get("current")  # rt.current_stream(), inlined
        if stream is None:
            stream = rt._default_stream
        slots = self.slots
        with self.lock:
            for i, (buffer, byte) in zip(self.data, refs):
                if buffer.stream is not stream:
                    buffer.record_stream(stream)
                slots[i] = buffer.raw + byte
            code = GRAPH_FALLBACK if self.graph is None else self.graph.launch(stream.handle)
            if code == GRAPH_FALLBACK:
                result = self.driver.cuLaunchKernel(*self.dims, stream.cu, self.params_ptr, 0)
        if code != GRAPH_FALLBACK:
            if code:
                _graph_failed(code, [(self.binary.info.name, self.grid, self.block)])
        elif result[0] != self.success:
            _check(result, f"launching {self.binary.info.name} (grid {self.grid}, block {self.block})", LaunchError)


class CudaLaunchSequence:
    """Consecutive prepared launches issued by one native call (launcher.py): `run(refs)` takes
    the launches' refs one after the other, writes every data address, then launches them all
    in order on the current stream. `run_sources` (kerneldsl/prepared.py) writes only the
    addresses of sources that moved since its last run: the launches' parameter slots are
    written by their sequence alone (a joined launch is never run by itself)."""

    __slots__ = ("runtime", "launches", "patches", "descriptors", "descriptors_ptr", "lock", "graph", "groups", "at",
                 "last")

    def __init__(self, runtime, launches: list):
        self.runtime = runtime
        self.launches = launches
        self.patches = tuple((p.slots, i) for p in launches for i in p.data)  # per ref: its slot
        self.descriptors = array.array("Q")
        for p in launches:
            self.descriptors.extend(p.descriptor)
        self.descriptors_ptr = self.descriptors.buffer_info()[0]
        self.lock = threading.Lock()
        self.graph = (None if runtime._graph_run is None else graphs.KernelGraph(
            _driver(), runtime._graph_run,
            [(p.binary.function, p.grid, p.block, p.binary.dynamic_shared, p.params_ptr, p.slots) for p in launches]))
        self.groups = ()  # run_sources' patches per source (kerneldsl/prepared.py group_by_source)
        self.at = None  # the `at` those groups were made for
        self.last = []  # each group's address at the last run_sources (None: not written by it)

    def _stream(self):
        rt = self.runtime
        if not rt._local.__dict__.get("entered"):
            rt._enter()
        stream = rt._stream_local.__dict__.get("current")
        return rt._default_stream if stream is None else stream

    def run(self, refs) -> None:
        stream = self._stream()
        with self.lock:
            for (slots, i), (buffer, byte) in zip(self.patches, refs):
                if buffer.stream is not stream:
                    buffer.record_stream(stream)
                slots[i] = buffer.raw + byte
            self.last = [None] * len(self.groups)
            self._launch(stream)

    def run_sources(self, sources, at, deltas) -> None:
        stream = self._stream()
        with self.lock:
            if at is not self.at:
                self.groups = group_by_source(self.patches, at, deltas)
                self.at = at
                self.last = [None] * len(self.groups)
            last = self.last
            for j, (source, patches) in enumerate(self.groups):
                buffer, byte = sources[source]
                if buffer.stream is not stream:
                    buffer.record_stream(stream)
                address = buffer.raw + byte
                if last[j] != address:
                    last[j] = address
                    for (slots, i), delta in patches:
                        slots[i] = address + delta
            self._launch(stream)

    def _launch(self, stream) -> None:
        """Launch every kernel on `stream` (the lock held, the slots written)."""
        code = GRAPH_FALLBACK if self.graph is None else self.graph.launch(stream.handle)
        native = code == GRAPH_FALLBACK
        if native:
            code = self.runtime._native.launch_all(self.descriptors_ptr, len(self.launches), stream.handle)
        if code and not native:
            _graph_failed(code, [(p.binary.info.name, p.grid, p.block) for p in self.launches])
        if code:
            index, result = launcher.failure(code)
            p = self.launches[index]
            _check((p.driver.CUresult(result),), f"launching {p.binary.info.name} (grid {p.grid}, block {p.block})",
                   LaunchError)


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
