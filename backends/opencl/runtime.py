"""The `opencl` runtime: one device through pyopencl, in-order queues as streams, pooled cl.Buffers.

Devices are numbered across every platform, GPUs first, then accelerators, then CPUs
(PoCL), so `kd.runtime("opencl")` is the GPU where there is one; `opencl:N` picks the
N-th. Launches are queued on the current stream (an in-order command queue on the runtime's
context; `rt.stream()` makes more, events are markers); `.numpy()` waits for the streams that
used the tensor, `synchronize()` for every stream. Blocks of the caching allocator's
segments are sub-buffers.
"""
from __future__ import annotations

import os
import threading
import time
import warnings

import numpy as np

from kerneldsl import ir
from kerneldsl.errors import LaunchError
from kerneldsl.pipeline import Rendering, launch_args_from_json, launch_args_to_json, scalar_value_packer
from kerneldsl.runtime import Runtime, RuntimeUnavailable, host_array
from kerneldsl.streams import Event, Stream

from . import compiler, platforms, renderer
from .capabilities import EMULATED_PLANE_DIM, capabilities, device_label, sized_subgroups

def devices() -> tuple:
    """(platform, device) pairs of the OpenCL devices that build and run a test kernel,
    GPUs first (platforms.probe); `opencl:N` is the N-th."""
    return platforms.working()


_PROBE = """
{primitives}
__kernel __attribute__((reqd_work_group_size(48, 1, 1))) {attribute} void kd_probe(__global uint* out) {{
    int u = (int)get_local_id(0);
    int lane = u % 32;
    int nlanes = u < 32 ? 32 : 16;
    uint mask = nlanes >= 32 ? 0xffffffffu : ((1u << nlanes) - 1u);
    out[u] = kd_shfl32((uint)(u * 3), lane ^ 1, mask);
    out[48 + u] = kd_ballot32(lane == 5 || lane == 15 || lane == 31, mask);
}}
"""


def probe_native_planes(ctx, queue, device):
    """('ptx' | 'khr', 32) when the device's warp / sub-group instructions work with planes of
    32 consecutive units (checked by running a shuffle and a ballot), else (None, 32)."""
    import pyopencl as cl
    from .capabilities import extensions, sized_subgroups, subgroups_wanted
    exts = extensions(device)
    candidates = []
    if os.environ.get("KERNELDSL_OPENCL_SUBGROUPS", "1") in ("0", "false", "no"):
        return None, EMULATED_PLANE_DIM
    if "NVIDIA" in device.platform.name.upper():
        candidates.append("ptx")
    if subgroups_wanted(device) and all(e in exts for e in renderer.KHR_EXTENSIONS[1:]):
        candidates.append("khr")
    for kind in candidates:
        try:
            opts = compiler.build_options(device, native=kind)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                attribute = renderer.INTEL_SUBGROUP_32 if kind == "khr" and sized_subgroups(device) else ""
                source = _PROBE.format(primitives=renderer.NATIVE_PRIMITIVES[kind], attribute=attribute)
                prg = cl.Program(ctx, source).build(
                    options=opts, cache_dir=False)
            out = np.zeros(96, np.uint32)
            buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=out)
            k = cl.Kernel(prg, "kd_probe")
            k.set_args(buf)
            cl.enqueue_nd_range_kernel(queue, k, (48,), (48,))
            cl.enqueue_copy(queue, out, buf, is_blocking=True)
        except Exception:  # noqa: BLE001  (the instructions are not there: emulate)
            continue
        u = np.arange(48)
        lane = u % 32
        want_shfl = np.where(lane ^ 1 < np.where(u < 32, 32, 16), (u ^ 1) * 3, out[:48])
        want_ballot = np.where(u < 32, (1 << 5) | (1 << 15) | (1 << 31), (1 << 5) | (1 << 15))
        if np.array_equal(out[:48], want_shfl) and np.array_equal(out[48:], want_ballot):
            return kind, 32
    return None, EMULATED_PLANE_DIM


def describe_devices() -> str:
    return "; ".join(f"{i}: {device_label(p, d)}" for i, (p, d) in enumerate(devices())) or "none"


def _why_none() -> str:
    """Each device tried and why it failed, for the error that no device works."""
    tried = platforms.failures()
    if not tried:
        return "the OpenCL loader lists no platform (install a driver, or the opencl extra: intel-opencl-rt)"
    return "; ".join(f"{v.label}: {v.reason}" for v in tried)


class OpenCLBinary:
    """A built kernel, its argument list and the launch lock (cl.Kernel arguments are state)."""

    def __init__(self, info, meta: dict, kernel):
        self.info = info
        self.args = launch_args_from_json(meta["args"], info.params)
        self.native = meta["native"]  # the plane primitives it was rendered with, or None
        self.kernel = kernel
        self.lock = threading.Lock()
        # per argument: (kind, parameter index, axis, scalar packer); what the kernel was last given
        self.plan = tuple((a.kind, -1 if a.param is None else a.param.index, a.axis,
                           scalar_value_packer(a.param.dtype) if a.kind == "scalar" else None) for a in self.args)
        self.last_key = None


class OpenCLEvent(Event):
    """A marker enqueued on a stream's queue."""

    __slots__ = ()

    def synchronize(self):
        self.stream.runtime._wait(self.handle, stream=self.stream)

    def query(self) -> bool:
        self.stream.queue.flush()  # a marker only completes once the queue is submitted
        status = self.handle.command_execution_status
        if status < 0:
            raise LaunchError(f"a command on {self.stream.runtime.capabilities.device_name} failed with status {status}")
        return status == self.stream.runtime._cl.command_execution_status.COMPLETE


class OpenCLStream(Stream):
    """An in-order command queue on the runtime's context. `launched` counts kernels enqueued
    and `settled` those known to have finished (waits poll interruptibly while they differ)."""

    def __init__(self, runtime, queue, external: bool = False, default: bool = False):
        super().__init__(runtime, queue, external=external, default=default)
        self.queue = queue
        self.launched = 0
        self.settled = 0

    def synchronize(self):
        self.runtime._wait(self.runtime._cl.enqueue_marker(self.queue), stream=self)

    def record_event(self) -> OpenCLEvent:
        return OpenCLEvent(self, self.runtime._cl.enqueue_marker(self.queue))

    def wait_event(self, event):
        self._check_event(event)
        if event.stream is not self:
            self.runtime._cl.enqueue_barrier(self.queue, wait_for=[event.handle])


class OpenCLRuntime(Runtime):
    kind = "opencl"

    def __init__(self, index: int = 0, native_planes: bool = True):
        """`native_planes=False` runs plane operations through local memory even where the
        device has sub-group instructions (the path devices without them take; tests use it)."""
        import pyopencl as cl
        devs = devices()
        if not 0 <= index < len(devs):
            raise ValueError(f"opencl:{index} asks for OpenCL device {index}, but this machine has {len(devs)} "
                             f"({describe_devices()})")
        self.index = index
        self.platform, self.device = devs[index]
        self.ctx = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.ctx, self.device)
        if native_planes:
            self.native, plane_dim = probe_native_planes(self.ctx, self.queue, self.device)
        else:
            self.native, plane_dim = None, EMULATED_PLANE_DIM
        self.forced_local = not native_planes
        caps = capabilities(self.platform, self.device, native_planes=self.native is not None, plane_dim=plane_dim)
        self._cl = cl
        super().__init__("opencl" if index == 0 else f"opencl:{index}", caps)
        self._pending_host: list = []  # host arrays of copies an interrupted wait left queued

    @property
    def device_key(self):
        return f"opencl:{self.index}" + ("-local" if self.forced_local else "")

    def __repr__(self):
        extra = ", native_planes=False" if self.forced_local else ""
        return f"kd.runtime({self.name!r}{extra})  # {self.capabilities.device_name}"

    # -------------------------------------------------------------- memory
    # the driver's words for "no memory for that": Runtime.allocate retries once, then raises
    # kd.OutOfMemoryError
    _ALLOCATION_FAILURES = {-4: "MEM_OBJECT_ALLOCATION_FAILURE", -5: "OUT_OF_RESOURCES", -6: "OUT_OF_HOST_MEMORY",
                            -61: "INVALID_BUFFER_SIZE"}

    def _raw_alloc(self, nbytes):
        limit = int(self.device.max_mem_alloc_size)
        if nbytes > limit:
            raise MemoryError(f"{self.capabilities.device_name} allocates at most {limit} bytes per buffer "
                              f"(CL_DEVICE_MAX_MEM_ALLOC_SIZE)")
        try:
            return self._cl.Buffer(self.ctx, self._cl.mem_flags.READ_WRITE, nbytes)
        except self._cl.Error as e:
            code = getattr(e, "code", None)
            if code in self._ALLOCATION_FAILURES:
                raise MemoryError(f"clCreateBuffer: {self._ALLOCATION_FAILURES[code]}") from None
            raise

    def _raw_free(self, raw):
        raw.release()

    def _raw_view(self, raw, offset, nbytes):
        """A block of a segment: the segment itself, or a sub-buffer (offsets are multiples of
        the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN, which `_allocator_options` asks for)."""
        if offset == 0 and nbytes == raw.size:
            return raw
        return raw.get_sub_region(offset, nbytes)

    def _allocator_options(self) -> dict:
        return {"granule": max(512, int(self.device.mem_base_addr_align) // 8),
                "max_segment": int(self.device.max_mem_alloc_size)}

    # -------------------------------------------------------------- streams
    def _make_default_stream(self):
        return OpenCLStream(self, self.queue, default=True)

    def _new_stream(self):
        return OpenCLStream(self, self._cl.CommandQueue(self.ctx, self.device))

    def _stream_key(self, handle):
        return handle.int_ptr  # two pyopencl objects of one queue share it

    def _wrap_stream(self, handle):
        cl = self._cl
        if not isinstance(handle, cl.CommandQueue):
            raise TypeError(f"external_stream on {self.name} takes a pyopencl.CommandQueue, got {type(handle).__name__}")
        if handle.context != self.ctx or handle.device != self.device:
            raise ValueError(f"external_stream: the queue is on {handle.device.name!r} in another context; {self.name} "
                             f"can only use queues on its own context (rt.ctx) and device ({self.device.name!r})")
        if handle.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE:
            raise ValueError("external_stream: the queue executes out of order; a stream must be an in-order queue")
        return OpenCLStream(self, handle, external=True)

    def _upload(self, buffer, byte_offset, host):
        stream = self.current_stream()
        buffer.record_stream(stream)
        host = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        self._wait(self._cl.enqueue_copy(stream.queue, buffer.raw, host, dst_offset=byte_offset, is_blocking=False),
                   host, stream)

    def _download(self, buffer, byte_offset, nbytes):
        stream = self.current_stream()
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            self._wait(self._cl.enqueue_copy(stream.queue, out, buffer.raw, src_offset=byte_offset,
                                             is_blocking=False), out, stream)
        return out

    def to_numpy_all(self, tensors) -> list:
        """Every copy queued on the current stream, then one wait for the last (the queue is
        in order)."""
        tensors = list(tensors)
        if len(tensors) < 2:
            return super().to_numpy_all(tensors)
        self._before_host_reads(tensors)
        stream = self.current_stream()
        outs, last = [], None
        for t in tensors:
            out = np.empty(t.extent() * t.dtype.itemsize if t.size else 0, np.uint8)
            if out.nbytes:
                last = self._cl.enqueue_copy(stream.queue, out, t.buffer.raw, src_offset=t.offset * t.dtype.itemsize,
                                             is_blocking=False)
            outs.append(out)
        if last is not None:
            self._wait(last, outs, stream)
        return [host_array(t, out) if t.size else np.empty(t.shape, t.dtype.np) for t, out in zip(tensors, outs)]

    def _fill_zero(self, t):
        n = t.size * t.dtype.itemsize
        if n:
            stream = self.current_stream()
            t.buffer.record_stream(stream)
            self._cl.enqueue_fill_buffer(stream.queue, t.buffer.raw, np.uint8(0), t.offset * t.dtype.itemsize, n)

    def _wait(self, event, host=None, stream=None):
        """Wait for `event` of `stream` (default: the current stream). While kernels may be
        ahead of it in the queue, the main thread polls in short sleeps, so Ctrl-C raises
        KeyboardInterrupt even while a stuck kernel holds the queue (the queued work carries
        on; `host`, memory a pending copy uses, is kept alive for it). Other waits block, as
        they are short or cannot see signals."""
        stream = stream or self.current_stream()
        launched = stream.launched  # kernels enqueued so far; the queue runs in order
        if launched == stream.settled or threading.current_thread() is not threading.main_thread():
            event.wait()  # no kernel in the queue ahead of it (copies always finish), or not main
            stream.settled = max(stream.settled, launched)
            return
        stream.queue.flush()
        complete = self._cl.command_execution_status.COMPLETE
        polls = 0
        try:
            while True:
                status = event.command_execution_status
                if status == complete:
                    stream.settled = max(stream.settled, launched)
                    return
                if status < 0:
                    raise LaunchError(f"a command on {self.capabilities.device_name} failed with status {status}")
                polls += 1  # yield at first (most waits are short), then sleep 50 us doubling to 5 ms
                time.sleep(0.0 if polls < 32 else min(50e-6 * 2 ** min(polls - 32, 7), 5e-3))
        except KeyboardInterrupt:
            if host is not None:
                self._pending_host.append((event, host))
            raise

    # -------------------------------------------------------------- kernels
    def renderer(self, kir):
        """The renderer for this device: sub-group plane operations where the probe passed."""
        if self.native is not None and ir.contains(kir.body, ir.PlaneOp):
            r = renderer.NativePlaneRenderer(kir, self.capabilities)
            r.primitives = self.native
            if sized_subgroups(self.device):
                r.subgroup_attribute = renderer.INTEL_SUBGROUP_32
            return r
        return renderer.OpenCLRenderer(kir, self.capabilities)

    def _subgroups_fit(self, kernel, info) -> bool:
        """The driver may pick another sub-group size per kernel: native plane ops need 32.
        Planes are 32 consecutive units in linear order, but drivers may form sub-groups
        along the first axis only (Intel's CPU runtime does): a cube whose first axis is not
        a multiple of 32 and that has more than one row has its plane operations emulated."""
        x, y, z = info.cube_dim
        if x % 32 and y * z > 1:
            return False
        try:
            size = kernel.get_sub_group_info(self.device, self._cl.kernel_sub_group_info.MAX_SUB_GROUP_SIZE_FOR_NDRANGE,
                                             tuple(info.cube_dim))
        except Exception:  # noqa: BLE001
            return False
        return size == 32

    source_ext = "cl"

    def toolchain(self) -> str:
        return (f"{self.platform.name}|{self.platform.version}|{self.device.driver_version}|"
                f"pyopencl-{self._cl.VERSION_TEXT}|planes={self.native}")

    def renderings(self, kir, uniformity):
        r = self.renderer(kir)
        yield self._rendering(r)
        if r.native_planes and r.primitives == "khr":  # tried when the sub-groups do not fit (`accepts`)
            yield self._rendering(renderer.OpenCLRenderer(kir, self.capabilities))

    def _rendering(self, r) -> Rendering:
        rendered = r.render()
        r.check_shared(self.capabilities.max_shared_bytes, self.capabilities.device_name)
        meta = {"symbol": rendered.name, "args": launch_args_to_json(rendered.args),
                "native": self.native if r.native_planes else None, "source": rendered.source}
        return Rendering(rendered.source, meta, rendered)

    def _options(self, meta, info) -> list:
        return compiler.build_options(self.device, meta["native"], info.cube_units)

    def compile_rendering(self, rendering, info) -> bytes:
        rendered, options = rendering.rendered, self._options(rendering.meta, info)
        rendering.compiled = compiler.build(self.ctx, self.device, rendering.source, options, info.name,
                                            rendered.locs, info.loc, rendered.loc_of_source_line)
        return compiler.binary_of(rendering.compiled) if compiler.stores_binaries(self.platform) else b""

    def wrap_binary(self, info, entry, rendering=None) -> OpenCLBinary:
        """The kernel of a built program: the one just built, else from the entry's binary,
        else (no binary stored, or a stale one) built from the entry's source."""
        meta = entry.meta
        program = rendering.compiled if rendering is not None else None
        if program is None and entry.image:
            try:
                program = compiler.from_binary(self.ctx, self.device, entry.image, self._options(meta, info))
            except Exception:  # noqa: BLE001  (a stale or foreign binary: rebuild from source)
                program = None
        if program is None:
            program = compiler.build(self.ctx, self.device, meta["source"], self._options(meta, info), info.name)
        kernel = self._cl.Kernel(program, meta["symbol"])
        binary = OpenCLBinary(info, meta, kernel)
        # what the driver reports it can run; some report less than they launch, so the
        # launch itself decides, and a refusal names this number
        binary.reported_units = kernel.get_work_group_info(self._cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                                           self.device)
        return binary

    def accepts(self, binary: OpenCLBinary) -> bool:
        return binary.native != "khr" or self._subgroups_fit(binary.kernel, binary.info)

    def launch(self, binary: OpenCLBinary, grid, block, args):
        kir = binary.info
        stream = self._stream_local.current  # current_stream(), inlined
        if stream is None:
            stream = self._default_stream
        values, key = [], []  # key: what identifies each value (a buffer by its cl_mem handle)
        errbuf = None
        for kind, index, axis, packer in binary.plan:
            if kind == "errbuf":
                errbuf = self.zeros(4, "i64")
                values.append(errbuf.buffer.raw)
                key.append(errbuf.buffer.raw.int_ptr)
                continue
            t = args[index]
            if kind == "data":
                buf = t.buffer
                if buf.stream is not stream:
                    buf.record_stream(stream)  # the allocator and downloads wait for this stream
                raw = buf.raw
                values.append(raw)
                key.append(raw.int_ptr)
                continue
            if kind == "offset":
                v = np.int64(t.offset)
            elif kind == "extent":
                v = np.int64(t.extent())
            elif kind == "shape":
                v = np.int64(t.shape[axis])
            elif kind == "stride":
                v = np.int64(t.strides[axis])
            else:
                v = packer(t)
            values.append(v)
            key.append(v)
        gsize = tuple(g * b for g, b in zip(grid, block))
        with binary.lock:
            if key != binary.last_key:  # OpenCL kernel arguments persist: set them when they change
                binary.last_key = None
                binary.kernel.set_args(*values)
                binary.last_key = key
            try:
                self._cl.enqueue_nd_range_kernel(stream.queue, binary.kernel, gsize, tuple(block))
                stream.launched += 1
            except self._cl.Error as e:
                units = block[0] * block[1] * block[2]
                why = (f"; the driver reports at most {binary.reported_units} units per cube for this kernel "
                       f"(registers or local memory limit it)" if units > binary.reported_units else "")
                raise LaunchError(f"{kir.name}: launching {grid} cubes of {tuple(block)} units on "
                                  f"{self.capabilities.device_name} failed: {e}{why}") from None
        if errbuf is not None:
            rec = errbuf.numpy()
            if rec[0]:
                self._raise_bounds(kir, args, rec)

def available() -> bool:
    try:
        return len(devices()) > 0
    except Exception:  # noqa: BLE001  (no ICD loader, no platform: not available)
        return False


def report() -> list:
    """One RuntimeStatus per OpenCL device the loader lists, working or not, with the reason."""
    from kerneldsl.runtime import RuntimeStatus
    try:
        verdicts = platforms.probe()
    except ImportError as e:
        return [RuntimeStatus("opencl", False, "-", f"needs pyopencl (pip install 'rudnn[opencl]'): {e}")]
    out, n = [], 0
    for v in verdicts:
        if v.works:
            out.append(RuntimeStatus("opencl" if n == 0 else f"opencl:{n}", True, v.label, ""))
            n += 1
        else:
            out.append(RuntimeStatus("opencl", False, v.label, v.reason))
    return out or [RuntimeStatus("opencl", False, "-", _why_none())]


def create(index: int = 0, native_planes: bool = True, **options) -> OpenCLRuntime:
    if options:
        raise ValueError(f"the opencl runtime takes one option, native_planes, got {sorted(options)}")
    if not isinstance(native_planes, bool):
        raise TypeError(f"native_planes must be True or False, got {native_planes!r}")
    try:
        import pyopencl  # noqa: F401
    except ImportError as e:
        raise RuntimeUnavailable(f"the opencl runtime needs pyopencl (pip install 'rudnn[opencl]'): {e}") from None
    if not available():
        raise RuntimeUnavailable(f"the opencl runtime found no working OpenCL device: {_why_none()}")
    return OpenCLRuntime(index, native_planes=native_planes)
