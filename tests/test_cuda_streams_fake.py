"""The cuda runtime's streams, events, copies, DLPack stream protocol, CUDA array interface and
allocator hooks against a fake driver (host memory behind device pointers, a log of driver
calls), so their Python runs on machines without a GPU; the real driver is exercised by
test_streams.py on a CUDA machine."""
from __future__ import annotations

import ctypes
import gc
import threading
import types

import numpy as np
import pytest

import kerneldsl as kd

pytest.importorskip("cuda.bindings.driver", reason="the cuda runtime's module needs cuda-bindings")
from cuda.bindings import driver as real  # noqa: E402  (enums and handle types only: no driver call)

import kerneldsl.backends.cuda.runtime as cuda_rt  # noqa: E402
from kerneldsl.backends.cuda.capabilities import for_arch  # noqa: E402
from kerneldsl.runtime import Runtime  # noqa: E402

pytestmark = pytest.mark.feature("streams")
OK = real.CUresult.CUDA_SUCCESS


class FakeDriver:
    """The driver calls the cuda runtime makes, on host memory; `calls` logs (name, args)."""

    def __init__(self, capacity: int = 1 << 40):
        self.calls: list = []
        self.memory: dict = {}  # address -> numpy array holding it
        self.capacity = capacity
        self.handles = iter(range(0x1000, 1 << 30, 0x10))
        self.pending_events: set = set()  # events cuEventQuery reports not ready
        self.destroyed_events: list = []  # events cuEventDestroy was given
        for name in ("CUresult", "CUstream", "CUstream_flags", "CUevent_flags", "CUpointer_attribute"):
            setattr(self, name, getattr(real, name))

    def _log(self, name, *args):
        self.calls.append((name, args))

    def names(self):
        return [c[0] for c in self.calls]

    def cuCtxSetCurrent(self, ctx):
        return (OK,)

    def cuStreamCreate(self, flags):
        self._log("cuStreamCreate", flags)
        return OK, real.CUstream(next(self.handles))

    def cuStreamDestroy(self, s):
        self._log("cuStreamDestroy", int(s))
        return (OK,)

    def cuStreamSynchronize(self, s):
        self._log("cuStreamSynchronize", int(s))
        return (OK,)

    def cuEventCreate(self, flags):
        self._log("cuEventCreate", flags)
        return OK, next(self.handles)

    def cuEventRecord(self, ev, s):
        self._log("cuEventRecord", ev, int(s))
        return (OK,)

    def cuEventQuery(self, ev):
        return (real.CUresult.CUDA_ERROR_NOT_READY if ev in self.pending_events else OK,)

    def cuEventSynchronize(self, ev):
        self.pending_events.discard(ev)
        return (OK,)

    def cuEventDestroy(self, ev):
        self.destroyed_events.append(ev)  # (not in `calls`: tests read the last call made)
        return (OK,)

    def cuStreamWaitEvent(self, s, ev, flags):
        self._log("cuStreamWaitEvent", int(s), ev)
        return (OK,)

    def cuMemAlloc(self, n):
        if sum(a.nbytes for a in self.memory.values()) + n > self.capacity:
            return real.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0
        a = np.zeros(n, np.uint8)
        self.memory[a.ctypes.data] = a
        self._log("cuMemAlloc", n)
        return OK, a.ctypes.data

    def cuMemFree(self, ptr):
        del self.memory[int(ptr)]
        return (OK,)

    def cuMemAllocHost(self, n):
        a = np.zeros(n, np.uint8)
        self.memory[a.ctypes.data] = a
        self._log("cuMemAllocHost", n)
        return OK, a.ctypes.data

    def cuMemFreeHost(self, ptr):
        del self.memory[int(ptr)]
        return (OK,)

    def cuMemcpyHtoDAsync(self, dst, src, n, s):
        self._log("cuMemcpyHtoDAsync", int(s))
        ctypes.memmove(dst, src, n)
        return (OK,)

    def cuMemcpyDtoHAsync(self, dst, src, n, s):
        self._log("cuMemcpyDtoHAsync", int(s))
        ctypes.memmove(dst, src, n)
        return (OK,)

    def cuMemsetD8Async(self, ptr, value, n, s):
        self._log("cuMemsetD8Async", int(s))
        ctypes.memset(ptr, value, n)
        return (OK,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, s, params, extra):
        self._log("cuLaunchKernel", int(s))
        return (OK,)

    def cuPointerGetAttribute(self, attribute, ptr):
        assert attribute == real.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        return OK, 0

    def cuGetErrorName(self, err):
        return OK, str(err).encode()

    def cuGetErrorString(self, err):
        return OK, b"fake"


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv("KERNELDSL_GUARD", raising=False)  # (guards would be read after the fake is gone)
    drv = FakeDriver()
    monkeypatch.setattr(cuda_rt, "_driver", lambda: drv)
    return drv


def make_runtime() -> "cuda_rt.CudaRuntime":
    """A CudaRuntime on the fake driver (its constructor's device queries skipped)."""
    rt = object.__new__(cuda_rt.CudaRuntime)
    rt.index, rt.context, rt._local = 0, None, threading.local()
    Runtime.__init__(rt, "cuda", for_arch("sm_90"))
    rt._errbuf = None
    rt._staging_memory, rt._staging_lock = None, threading.Lock()
    rt._native = None  # launches through the fake's cuLaunchKernel (no native launcher for a fake driver)
    rt._graph_run = None  # (and no graph launches: graphs are tested with a fake graph_run of their own)
    return rt


def test_streams_are_non_blocking_cuda_streams(fake):
    rt = make_runtime()
    s = rt.stream()
    flags = [args[0] for name, args in fake.calls if name == "cuStreamCreate"]
    assert flags == [int(real.CUstream_flags.CU_STREAM_NON_BLOCKING)] * 2  # the default stream and s
    assert isinstance(s.handle, int) and s.handle != rt.default_stream().handle
    assert rt.external_stream(s.handle) is s and rt.external_stream(0).external
    with pytest.raises(TypeError, match="CUstream as an int"):
        rt.external_stream("0x10")
    with pytest.raises(ValueError, match=">= 0"):
        rt.external_stream(-3)
    handle = s.handle
    del s
    gc.collect()
    assert ("cuStreamDestroy", (handle,)) in fake.calls


def test_streams_and_events_outliving_the_fake_driver_are_destroyed_by_it(fake, monkeypatch):
    """A stream or event is destroyed through the driver that made it: collected after this
    test's fake is uninstalled, its fake handle must not reach the real driver (on a GPU
    machine cuStreamDestroy of a fake handle crashed a later test's garbage collection)."""
    rt = make_runtime()
    s = rt.stream()
    e = s.record_event()
    handles = (s.handle, e.handle)
    monkeypatch.undo()  # the real driver (or none) is back
    del s, e
    gc.collect()
    assert ("cuStreamDestroy", (handles[0],)) in fake.calls
    assert handles[1] in fake.destroyed_events


def test_copies_go_to_the_current_stream_and_reads_wait_for_producers(fake):
    rt = make_runtime()
    s = rt.stream()
    with rt.use_stream(s):
        t = rt.tensor(np.arange(6, dtype=np.float32))
        z = rt.zeros(3)
    assert t.buffer.stream is s
    assert ("cuMemcpyHtoDAsync", (s.handle,)) in fake.calls and ("cuMemsetD8Async", (s.handle,)) in fake.calls
    fake.calls.clear()
    np.testing.assert_array_equal(t.numpy(), np.arange(6))  # on the default stream
    d = rt.default_stream().handle
    assert fake.calls == [("cuStreamSynchronize", (s.handle,)), ("cuMemAllocHost", (rt.STAGING_BYTES,)),
                          ("cuMemcpyDtoHAsync", (d,)), ("cuStreamSynchronize", (d,))]  # small: through staging
    np.testing.assert_array_equal(z.numpy(), np.zeros(3))
    fake.calls.clear()
    rt.synchronize()
    synced = {args[0] for name, args in fake.calls if name == "cuStreamSynchronize"}
    assert {s.handle, d} <= synced


def test_reading_several_tensors_waits_once(fake):
    """to_numpy_all: every copy into page-locked staging memory, then one stream wait; the
    values as to_numpy gives them (strided and empty views included); more bytes than the
    staging holds: to_numpy each."""
    rt = make_runtime()
    s = rt.stream()
    with rt.use_stream(s):
        a = rt.tensor(np.arange(12, dtype=np.int64).reshape(3, 4))
    b = rt.tensor(np.array([7, -8, 9], np.int32))
    views = [a, b, a[:, 1::2], b[:0], rt.tensor(np.array([1.5, 2.5], np.float32))]
    fake.calls.clear()
    got = rt.to_numpy_all(views)
    d = rt.default_stream().handle
    assert fake.calls[:2] == [("cuStreamSynchronize", (s.handle,)), ("cuMemAllocHost", (rt.STAGING_BYTES,))]
    assert fake.calls[2:] == [("cuMemcpyDtoHAsync", (d,))] * 4 + [("cuStreamSynchronize", (d,))]
    for g, v in zip(got, views):
        want = v.numpy()
        assert g.dtype == want.dtype and g.shape == want.shape
        np.testing.assert_array_equal(g, want)
    big = rt.zeros(rt.STAGING_BYTES // 4, "f32")
    fake.calls.clear()
    got = rt.to_numpy_all([b, big])
    assert [n for n in fake.names() if n == "cuStreamSynchronize"] == ["cuStreamSynchronize"] * 2
    np.testing.assert_array_equal(got[0], [7, -8, 9])
    assert got[1].shape == (rt.STAGING_BYTES // 4,) and not got[1].any()


def test_events(fake):
    rt = make_runtime()
    s, other = rt.stream(), rt.stream()
    e = s.record_event()
    assert ("cuEventCreate", (int(real.CUevent_flags.CU_EVENT_DISABLE_TIMING),)) in fake.calls
    fake.pending_events.add(e.handle)
    assert not e.query()
    e.synchronize()
    assert e.query()
    other.wait_event(e)
    assert fake.calls[-1] == ("cuStreamWaitEvent", (other.handle, e.handle))
    timing = rt.record_event()
    assert ("cuEventCreate", (int(real.CUevent_flags.CU_EVENT_DEFAULT),)) in fake.calls
    assert timing.stream is rt.default_stream()


def test_dlpack_import_on_the_legacy_default_stream_names_it_1(fake):
    """Importing under torch's default stream (handle 0, what rudnn.torch wraps) passes stream=1
    to the producer: 0 is not allowed on CUDA (torch raises "unsupported stream on CUDA: 0")."""
    rt = make_runtime()
    seen = []

    class Producer:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None, max_version=None):
            seen.append(stream)
            raise BufferError("stop here")

    for handle, number in ((0, 1), (0x4242, 0x4242)):
        with rt.use_stream(rt.external_stream(handle)), pytest.raises(BufferError, match="stop here"):
            rt.from_dlpack(Producer())
        assert seen[-1] == number


def test_dlpack_export_makes_the_consumer_stream_wait(fake):
    rt = make_runtime()
    s = rt.stream()
    with rt.use_stream(s):
        t = rt.tensor(np.ones(4, np.float32))
    t.record_stream(rt.stream())
    fake.calls.clear()
    t.__dlpack__(stream=0x7777)
    waits = [args for name, args in fake.calls if name == "cuStreamWaitEvent"]
    records = [args[1] for name, args in fake.calls if name == "cuEventRecord"]
    assert len(waits) == 2 and all(w[0] == 0x7777 for w in waits)  # one per stream that used t
    assert s.handle in records
    fake.calls.clear()
    t.__dlpack__()  # None: the legacy default stream waits
    assert [args[0] for name, args in fake.calls if name == "cuStreamWaitEvent"] == [1, 1]
    fake.calls.clear()
    t.__dlpack__(stream=-1)
    assert "cuStreamWaitEvent" not in fake.names()
    with pytest.raises(BufferError, match="0 is ambiguous"):
        t.__dlpack__(stream=0)


def test_cuda_array_interface_round_trip(fake):
    rt = make_runtime()
    s = rt.stream()
    with rt.use_stream(s):
        t = rt.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    cai = t.T.__cuda_array_interface__
    assert cai["stream"] == s.handle and cai["strides"] == (4, 16) and cai["version"] == 3
    assert cai["data"] == (t.buffer.raw, False) and cai["typestr"] == "<f4"

    class Foreign:
        __cuda_array_interface__ = dict(cai, stream=0x5555)
    fake.calls.clear()
    back = kd.from_cuda_array_interface(Foreign(), runtime=rt)
    assert back.buffer.raw == t.buffer.raw and back.buffer.stream is rt.default_stream()
    assert ("cuEventRecord" in fake.names() and
            ("cuStreamWaitEvent", (rt.default_stream().handle, fake.calls[-1][1][1])) == fake.calls[-1])
    np.testing.assert_array_equal(back.numpy(), np.arange(12).reshape(3, 4).T)


def test_memory_used_on_another_stream_waits_for_its_event(fake):
    rt = make_runtime()
    s = rt.stream()
    t = rt.empty((16, 1 << 20), "u8")  # 16 MiB: a segment of its own
    raw = t.buffer.raw
    t.record_stream(s)
    created = len(fake.calls)
    del t
    gc.collect()
    recorded = [args for name, args in fake.calls[created:] if name == "cuEventRecord"]
    assert [r[1] for r in recorded] == [s.handle]
    fake.pending_events.add(recorded[0][0])
    assert rt.empty((16, 1 << 20), "u8").buffer.raw != raw  # s may still use it
    fake.pending_events.clear()
    assert rt.empty((16, 1 << 20), "u8").buffer.raw == raw
    a, b = rt.pool.allocate(4096, s), rt.pool.allocate(4096, s)
    assert rt.pool.view(b) - rt.pool.view(a) == 4096 == b.offset - a.offset  # pointers into one segment


def test_out_of_memory_after_the_retry(fake):
    rt = make_runtime()
    fake.capacity = 40 << 20
    keep = rt.empty(24 << 20, "u8")
    rt.empty(12 << 20, "u8")  # freed at once: cached
    with pytest.raises(kd.OutOfMemoryError, match=r"cannot allocate 20971520 bytes .* held 12\.0 MiB of cached "
                                                  r"buffers, freed before one retry, and 24\.0 MiB in live tensors "
                                                  r"\(36\.0 MiB reserved"):
        rt.empty(20 << 20, "u8")
    st = rt.memory_stats()
    assert st["num_alloc_retries"] == 1 and st["num_ooms"] == 1 and keep.nbytes == 24 << 20
    assert st["reserved_bytes.all.current"] == 24 << 20  # the cached segment went back before the retry


def test_launches_go_to_the_current_stream_and_record_it_on_their_memory(fake):
    rt = make_runtime()
    x = rt.zeros(8)
    param = types.SimpleNamespace(name="x")
    kir = types.SimpleNamespace(name="k", params=[param], bounds_check=False)
    binary = types.SimpleNamespace(info=kir, args=[types.SimpleNamespace(kind="data", param=param)],
                                   plan=(("data", 0, None, None),),  # (kind, parameter index, axis, packer)
                                   lock=threading.Lock(), slots=np.zeros(1, np.uint64), function=None,
                                   dynamic_shared=0, params_ptr=0)
    rt.launch(binary, (1, 1, 1), (32, 1, 1), [x])
    assert fake.calls[-1] == ("cuLaunchKernel", (rt.default_stream().handle,)) and x.buffer.used_streams is None
    s = rt.stream()
    with rt.use_stream(s):
        rt.launch(binary, (1, 1, 1), (32, 1, 1), [x])
    assert fake.calls[-1] == ("cuLaunchKernel", (s.handle,))
    assert binary.slots[0] == x.buffer.raw and x.buffer.streams() == [rt.default_stream(), s]


def test_joined_replay_launches_go_through_the_native_launcher(fake):
    """With a native launcher (here on a stand-in cuLaunchKernel) a replayed call's consecutive
    launches are joined into one native call that passes the current stream and each launch's
    data addresses, launches in order."""
    from kerneldsl.backends.cuda import launcher
    from test_cuda_launcher import FakeLaunch
    stand_in = FakeLaunch()
    rt = make_runtime()
    rt._native = launcher.NativeLauncher(stand_in.address)
    x, y = rt.zeros(8), rt.zeros(8)
    param = types.SimpleNamespace(name="x", index=0)
    kir = types.SimpleNamespace(name="k", params=[param], bounds_check=False)
    binary = types.SimpleNamespace(info=kir, args=[types.SimpleNamespace(kind="data", param=param)],
                                   plan=(("data", 0, None, None),), function=0x77, dynamic_shared=0)
    first, second = (rt.prepare_launch(binary, (n, 1, 1), (64, 1, 1), [x]) for n in (1, 2))
    joined = rt.join_launches([first, second])
    s = rt.stream()
    with rt.use_stream(s):
        joined.run([(y.buffer, 4), (x.buffer, 8)])
    assert stand_in.calls == [(0x77, (1, 1, 1), (64, 1, 1), 0, s.handle, y.buffer.raw + 4, None),
                              (0x77, (2, 1, 1), (64, 1, 1), 0, s.handle, x.buffer.raw + 8, None)]
    assert y.buffer.streams() == [rt.default_stream(), s]
    rt._native = None  # no native launcher: launches stay one by one
    assert rt.join_launches([first, second]) is None


def test_generated_slot_filling_matches_the_plan_loop(fake):
    """backends/cuda/slots.py: a binary's slots filled by its generated function hold what the
    plan loop writes (data addresses, extents, shapes, strides, scalar bits), and the launch's
    stream is recorded on its memory the same way."""
    from kerneldsl.backends.cuda import slots as slot_code
    from kerneldsl.pipeline import scalar_packer
    rt = make_runtime()
    x = rt.zeros((6, 8))[1:, ::2]  # an offset and a stride
    y = rt.zeros(5, "f16")
    px, py, pn = (types.SimpleNamespace(name=n, index=i) for i, n in enumerate("xyn"))
    kir = types.SimpleNamespace(name="k", params=[px, py, pn], bounds_check=False)
    pack = scalar_packer(kd.f32)
    plan = (("data", 0, None, None), ("extent", 0, None, None), ("shape", 0, 0, None), ("shape", 0, 1, None),
            ("stride", 0, 0, None), ("stride", 0, 1, None), ("data", 1, None, None), ("extent", 1, None, None),
            ("shape", 1, 0, None), ("stride", 1, 0, None), ("scalar", 2, None, pack))
    slots = []
    for fill in (None, slot_code.fill_function(plan)):
        binary = types.SimpleNamespace(info=kir, args=[None] * len(plan), plan=plan, lock=threading.Lock(),
                                       slots=np.zeros(len(plan), np.uint64), function=None, dynamic_shared=0,
                                       params_ptr=0, fill=fill, packers=slot_code.packers_of(plan))
        s = rt.stream()
        with rt.use_stream(s):
            rt.launch(binary, (1, 1, 1), (32, 1, 1), (x, y, 2.5))
        assert fake.calls[-1] == ("cuLaunchKernel", (s.handle,))
        assert s in x.buffer.streams() and s in y.buffer.streams()
        slots.append(binary.slots.tolist())
    assert slot_code.fill_function(plan) is not None and slots[0] == slots[1]
    want = [x.buffer.raw + x.offset * 4, x.extent(), 5, 4, 8, 2, y.buffer.raw, 5, 5, 1, pack(2.5)]
    assert slots[1] == want
    assert slot_code.fill_function(plan + (("errbuf", -1, None, None),)) is None


def test_a_binarys_generated_launch_matches_rt_launch(fake, monkeypatch):
    """`rt.launcher(binary, block)` (slots.launch_maker's code, which launch plans call) fills the
    slots as `rt.launch` does, integer scalars as two's-complement bits, launches on the
    current stream with the cube shape it was made for, and raises LaunchError naming the
    kernel when the driver fails."""
    from kerneldsl.backends.cuda import slots as slot_code
    from kerneldsl.pipeline import scalar_packer
    rt = make_runtime()
    x = rt.zeros((6, 8))[1:, ::2]
    px, pn, pm = (types.SimpleNamespace(name=n, index=i) for i, n in enumerate("xnm"))
    kir = types.SimpleNamespace(name="k", params=[px, pn, pm], bounds_check=False)
    plan = (("data", 0, None, None), ("extent", 0, None, None), ("shape", 0, 1, None), ("stride", 0, 0, None),
            ("scalar", 1, None, scalar_packer(kd.i32)), ("scalar", 2, None, scalar_packer(kd.f32)))
    binaries = [types.SimpleNamespace(info=kir, args=[None] * len(plan), plan=plan, lock=threading.Lock(),
                                      slots=np.zeros(len(plan), np.uint64), function=7, dynamic_shared=0,
                                      params_ptr=0, fill=fill, packers=slot_code.packers_of(plan))
                for fill in (None, slot_code.fill_function(plan))]   # rt.launch's plan loop; the generated code
    shapes = []

    def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        shapes.append((function, gx, gy, gz, bx, by, bz))
        fake._log("cuLaunchKernel", int(stream))
        return (OK,)
    monkeypatch.setattr(fake, "cuLaunchKernel", launch)
    s = rt.stream()
    with rt.use_stream(s):
        rt.launch(binaries[0], (3, 2, 1), (32, 1, 1), (x, -3, 2.5))
        rt.launcher(binaries[1], (32, 1, 1))((3, 2, 1), (x, -3, 2.5))
    assert fake.calls[-1] == ("cuLaunchKernel", (s.handle,)) and shapes == [(7, 3, 2, 1, 32, 1, 1)] * 2
    assert binaries[0].slots.tolist() == binaries[1].slots.tolist()
    assert binaries[1].slots.tolist() == [x.buffer.raw + x.offset * 4, x.extent(), 4, 8, 2**32 - 3,
                                          int(np.float32(2.5).view(np.uint32))]
    monkeypatch.setattr(fake, "cuLaunchKernel", lambda *a: (real.CUresult.CUDA_ERROR_INVALID_VALUE,))
    with pytest.raises(kd.LaunchError, match=r"launching k \(grid \(3, 2, 1\), block \(32, 1, 1\)\)"):
        rt.launcher(binaries[1], (32, 1, 1))((3, 2, 1), (x, -3, 2.5))


def test_a_binarys_launches_go_through_a_graph_from_the_second_on(fake, monkeypatch):
    """With graph launches (backends/cuda/graphs.py; `rt._graph_run` stands in for the native
    call here): the first launch is a cuLaunchKernel, the second makes the graph on its stream
    and launches it with that call's grid, as do later ones; a capturing stream (the native
    call answers GRAPH_FALLBACK), another stream, and a failed graph launch behave as said."""
    import array
    from kerneldsl.backends.cuda import launcher
    from kerneldsl.backends.cuda import slots as slot_code
    from kerneldsl.pipeline import scalar_packer
    rt = make_runtime()
    runs, answer = [], [0]

    def graph_run(graph_exec, stream, table_ptr, n):
        row = (ctypes.c_uint64 * launcher.ROW_WORDS).from_address(table_ptr)
        words = (ctypes.c_uint64 * 3).from_address(row[1])
        slots = (ctypes.c_uint64 * row[3]).from_address(row[2])
        runs.append((graph_exec, stream, n, words[1] & 0xFFFFFFFF, words[1] >> 32, words[2] & 0xFFFFFFFF,
                     list(slots)))
        return answer[0]

    made = []
    fake.CUDA_KERNEL_NODE_PARAMS = real.CUDA_KERNEL_NODE_PARAMS
    fake.cuGraphCreate = lambda flags: (OK, 0x600)
    fake.cuGraphAddKernelNode = lambda graph, deps, n, p: made.append((p.gridDimX, p.blockDimX)) or (OK, 0x700)
    fake.cuGraphInstantiate = lambda graph, flags: (OK, 0xE00)
    fake.cuGraphExecDestroy = fake.cuGraphDestroy = lambda handle: (OK,)
    rt._graph_run = graph_run
    x = rt.zeros((4, 8))
    kir = types.SimpleNamespace(name="k", params=[types.SimpleNamespace(name="x", index=0),
                                                  types.SimpleNamespace(name="n", index=1)], bounds_check=False)
    plan = (("data", 0, None, None), ("scalar", 1, None, scalar_packer(kd.i32)))
    slots = array.array("Q", bytes(16))
    binary = types.SimpleNamespace(info=kir, args=[None, None], plan=plan, lock=threading.Lock(), slots=slots,
                                   function=real.CUfunction(7), dynamic_shared=0, params_ptr=0,
                                   fill=slot_code.fill_function(plan), packers=slot_code.packers_of(plan))
    launch = rt.launcher(binary, (32, 1, 1))
    s, other = rt.stream(), rt.stream()
    address = x.buffer.raw + x.offset * 4
    with rt.use_stream(s):
        launch((3, 1, 1), (x, 5))
        assert fake.names()[-1] == "cuLaunchKernel" and runs == [] and made == []
        launch((4, 2, 1), (x, 6))
        launch((5, 1, 1), (x, -1))
    assert made == [(4, 32)]  # made at the second launch, with its grid
    assert runs == [(0xE00, s.handle, 1, 4, 2, 1, [address, 6]), (0xE00, s.handle, 1, 5, 1, 1, [address, 2**32 - 1])]
    assert fake.names().count("cuLaunchKernel") == 1
    answer[0] = launcher.GRAPH_FALLBACK  # the stream is being captured: launched one by one
    with rt.use_stream(s):
        launch((2, 1, 1), (x, 7))
    with rt.use_stream(other):  # another stream: one by one, with no graph call at all
        launch((2, 1, 1), (x, 8))
    assert fake.names().count("cuLaunchKernel") == 3 and len(runs) == 3
    assert fake.calls[-1] == ("cuLaunchKernel", (other.handle,))
    answer[0] = (2 << 32) | int(real.CUresult.CUDA_ERROR_INVALID_VALUE)  # step 1 of a 1-node graph: its launch
    with rt.use_stream(s), pytest.raises(kd.LaunchError, match=r"launching k \(grid \(2, 1, 1\).*the graph launch"):
        launch((2, 1, 1), (x, 9))


def test_a_failed_graph_names_the_node_or_every_kernel(fake):
    """A failed node update names that node's kernel; a failed launch of the whole graph names
    every kernel in it (CudaLaunchSequence's graph)."""
    launches = [("first", (4, 1, 1), (32, 1, 1)), ("second", (2, 2, 1), (64, 1, 1))]
    bad = int(real.CUresult.CUDA_ERROR_INVALID_VALUE)
    with pytest.raises(kd.LaunchError, match=r"launching second \(grid \(2, 2, 1\), block \(64, 1, 1\)\): "
                                             r"setting node 1's parameters") as node:
        cuda_rt._graph_failed((2 << 32) | bad, launches)
    assert "first" not in str(node.value)
    with pytest.raises(kd.LaunchError, match=r"launching first \(grid \(4, 1, 1\), block \(32, 1, 1\)\); "
                                             r"second \(grid \(2, 2, 1\), block \(64, 1, 1\)\): the graph launch"):
        cuda_rt._graph_failed((3 << 32) | bad, launches)
