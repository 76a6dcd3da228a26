"""Streams and events on every runtime: ordering through events, use_stream nesting and
thread-locality, host reads that wait for the producing stream, memory held back for other
streams, external streams, the DLPack stream protocol and the CUDA array interface."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import interop


@kd.kernel
def add_repeatedly(x: kd.Tensor, n: kd.i32, reps: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        for _ in range(reps):
            x[i] = x[i] + 1.0


@kd.kernel
def copy_plus(x: kd.Tensor, y: kd.Tensor, n: kd.i32, c: kd.f32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        y[i] = x[i] + c


N, REPS = 1 << 14, 200


def _grid(n):
    return (n + 127) // 128, 128


def _other_runtime(runtime):
    plain = kd.runtime("cpu")
    return plain if runtime is not plain else kd.runtime("cpu", plane_dim=8)


# ---------------------------------------------------------------- the current stream
def test_default_and_current_stream(runtime):
    d = runtime.default_stream()
    assert isinstance(d, kd.Stream) and d.runtime is runtime and d.default
    assert runtime.current_stream() is d
    s = runtime.stream()
    assert s is not d and s.runtime is runtime and not s.default and s.handle is not None
    t = runtime.empty(8)
    assert t.buffer.stream is d


def test_use_stream_nests_and_restores(runtime):
    a, b = runtime.stream(), runtime.stream()
    with runtime.use_stream(a) as entered:
        assert entered is a and runtime.current_stream() is a
        assert runtime.empty(4).buffer.stream is a  # allocations belong to the current stream
        with runtime.use_stream(b):
            assert runtime.current_stream() is b
        assert runtime.current_stream() is a
        with pytest.raises(KeyError):
            with runtime.use_stream(b):
                raise KeyError("leaves the block")
        assert runtime.current_stream() is a
    assert runtime.current_stream() is runtime.default_stream()


def test_use_stream_is_thread_local(runtime):
    s = runtime.stream()
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other_thread():
        inside.wait()
        seen["other"] = runtime.current_stream()
        with runtime.use_stream(runtime.stream()):
            seen["own"] = runtime.current_stream()
        done.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with runtime.use_stream(s):
        inside.set()
        done.wait(30)
        assert runtime.current_stream() is s
    thread.join()
    assert seen["other"] is runtime.default_stream() and seen["own"] not in (s, runtime.default_stream())


def test_stream_of_another_runtime_is_refused(runtime):
    other = _other_runtime(runtime)
    s = other.stream()
    with pytest.raises(ValueError) as info:
        with runtime.use_stream(s):
            pass
    assert repr(runtime).split("  #")[0] in str(info.value) and repr(other).split("  #")[0] in str(info.value)
    with pytest.raises(ValueError, match="events of its own runtime"):
        runtime.stream().wait_event(s.record_event())
    with pytest.raises(TypeError, match="kd.Stream"):
        with runtime.use_stream("stream 1"):
            pass
    with pytest.raises(TypeError, match="kd.Event"):
        runtime.stream().wait_event(None)


# ---------------------------------------------------------------- ordering
def test_an_event_orders_work_of_another_stream(runtime, rng):
    data = rng.integers(0, 100, N).astype(np.float32)
    x = runtime.tensor(data)
    producer, consumer = runtime.stream(), runtime.stream()
    producer.wait_stream(runtime.default_stream())  # the upload ran on the default stream
    with runtime.use_stream(producer):
        for _ in range(3):
            add_repeatedly[_grid(N)](x, N, REPS)
    done = producer.record_event()
    consumer.wait_event(done)
    with runtime.use_stream(consumer):
        y = runtime.empty(N)
        copy_plus[_grid(N)](x, y, N, 0.5)
        got = y.numpy()
    np.testing.assert_array_equal(got, data + 3 * REPS + 0.5)
    done.synchronize()
    assert done.query() and done.runtime is runtime


def test_operators_run_on_the_current_stream(runtime, rng):
    from rudnn import normalization as N_
    x = rng.standard_normal((8, 64)).astype(np.float32)
    g = rng.standard_normal(64).astype(np.float32)
    s = runtime.stream()
    xt, gt = runtime.tensor(x), runtime.tensor(g)
    s.wait_stream(runtime.default_stream())
    with runtime.use_stream(s):
        y = N_.layer_norm(xt, gt)
    assert y.buffer.stream is s
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4)  # read on the default stream


def test_host_reads_wait_for_the_producing_stream(runtime, rng):
    data = rng.integers(0, 100, N).astype(np.float32)
    s = runtime.stream()
    with runtime.use_stream(s):
        x = runtime.tensor(data)
        add_repeatedly[_grid(N)](x, N, REPS)
    np.testing.assert_array_equal(x.numpy(), data + REPS)  # on the default stream, no explicit wait


def test_synchronize_waits_for_every_stream(runtime, rng):
    data = rng.integers(0, 100, N).astype(np.float32)
    streams = [runtime.stream() for _ in range(3)]
    tensors = []
    for s in streams:
        with runtime.use_stream(s):
            t = runtime.tensor(data)
            add_repeatedly[_grid(N)](t, N, REPS)
            tensors.append(t)
    runtime.synchronize()
    assert all(s.query() for s in streams)
    for s, t in zip(streams, tensors):
        with runtime.use_stream(s):
            np.testing.assert_array_equal(t.numpy(), data + REPS)


def test_stream_synchronize_and_query(runtime):
    s = runtime.stream()
    with runtime.use_stream(s):
        x = runtime.zeros(N)
        add_repeatedly[_grid(N)](x, N, REPS)
    e = s.record_event()
    s.synchronize()
    assert s.query() and e.query()
    e.synchronize()


# ---------------------------------------------------------------- memory across streams
def test_launches_record_the_streams_that_use_memory(runtime):
    x = runtime.zeros(N)
    s = runtime.stream()
    s.wait_stream(runtime.default_stream())
    with runtime.use_stream(s):
        add_repeatedly[_grid(N)](x, N, 1)
    if runtime.kind == "cpu":  # launches finish before they return: nothing to wait for later
        assert x.buffer.streams() == [runtime.default_stream()]
    else:
        assert x.buffer.streams() == [runtime.default_stream(), s]
    other = runtime.stream()
    x.record_stream(other)
    assert other in x.buffer.streams()
    with pytest.raises(ValueError, match="record_stream"):
        x.record_stream(_other_runtime(runtime).stream())


BIG = (N, 256)  # 16 MiB: a segment of exactly its size, the best fit for the next request of that size


def test_memory_freed_after_use_on_another_stream_is_reused_once_that_stream_is_done(runtime):
    runtime.empty_cache()
    x = runtime.zeros(BIG)
    raw = x.buffer.raw
    s = runtime.stream()
    s.wait_stream(runtime.default_stream())
    x.record_stream(s)
    # a cpu worker thread keeps its last launch's arguments alive until its next launch, so on
    # the cpu the work on s uses another tensor (cpu launches record no streams anyway)
    target = runtime.zeros(N) if runtime.kind == "cpu" else x
    with runtime.use_stream(s):
        add_repeatedly[_grid(N)](target, N, REPS)
    del x, target
    gc.collect()
    s.synchronize()
    y = runtime.empty(BIG)
    assert y.buffer.raw is raw


def test_memory_still_used_by_a_blocked_stream_is_not_reused(runtime, monkeypatch):
    if runtime.kind != "opencl":
        pytest.skip("holding a stream back needs an OpenCL user event; cpu streams never hold work back")
    monkeypatch.delenv("KERNELDSL_GUARD", raising=False)  # (the pool's own hold-back is what is tested)
    import pyopencl as cl
    from kerneldsl.backends.opencl.runtime import OpenCLEvent
    runtime.empty_cache()  # (before the gate closes: it waits for every stream)
    gate = cl.UserEvent(runtime.ctx)
    s = runtime.stream()
    s.wait_event(OpenCLEvent(runtime.default_stream(), gate))  # s runs nothing until the gate opens
    x = runtime.zeros(BIG)
    raw = x.buffer.raw
    with runtime.use_stream(s):
        add_repeatedly[_grid(N)](x, N, REPS)
    del x
    gc.collect()
    held = runtime.empty(BIG)  # same size, same (default) stream: must not get the block s still uses
    assert held.buffer.raw is not raw
    assert runtime.memory_stats()["active_bytes.all.current"] > runtime.memory_stats()["allocated_bytes.all.current"]
    gate.set_status(cl.command_execution_status.COMPLETE)
    s.synchronize()
    assert runtime.empty(BIG).buffer.raw is raw


# ---------------------------------------------------------------- external streams
def test_external_streams(runtime, rng):
    if runtime.kind == "cpu":
        with pytest.raises(ValueError, match="no external streams"):
            runtime.external_stream(0)
        return
    if runtime.kind == "opencl":
        import pyopencl as cl
        queue = cl.CommandQueue(runtime.ctx, runtime.device)
        s = runtime.external_stream(queue)
        assert s.handle is queue and runtime.external_stream(queue) is s  # one Stream per queue
        assert runtime.external_stream(runtime.queue) is runtime.default_stream()
        with pytest.raises(TypeError, match="CommandQueue"):
            runtime.external_stream(5)
        foreign_context = cl.Context([runtime.device])
        foreign = cl.CommandQueue(foreign_context, runtime.device)
        with pytest.raises(ValueError, match="own context"):
            runtime.external_stream(foreign)
    else:
        own = runtime.stream()
        assert runtime.external_stream(own.handle) is own  # one Stream object per CUstream
        s = runtime.external_stream(2)  # the per-thread default stream
        assert s.handle == 2 and s.external and runtime.external_stream(2) is s
        with pytest.raises(TypeError, match="CUstream"):
            runtime.external_stream("0x1")
    data = rng.standard_normal(N).astype(np.float32)
    x = runtime.tensor(data)
    s.wait_stream(runtime.default_stream())
    with runtime.use_stream(s):
        y = runtime.empty(N)
        copy_plus[_grid(N)](x, y, N, 1.0)
    np.testing.assert_array_equal(y.numpy(), data + 1)


# ---------------------------------------------------------------- DLPack stream protocol
def test_dlpack_stream_argument(runtime, rng):
    data = rng.integers(0, 100, N).astype(np.float32)
    if runtime.kind == "opencl":
        with pytest.raises(BufferError, match="not available"):
            runtime.tensor(data).__dlpack__()
        return
    x = runtime.tensor(data)
    add_repeatedly[_grid(N)](x, N, REPS)
    if runtime.kind == "cpu":
        for stream in (3, 1):
            with pytest.raises(BufferError, match="CPU has no streams"):
                x.__dlpack__(stream=stream)
        np.testing.assert_array_equal(np.from_dlpack(x), data + REPS)
        x.__dlpack__(stream=-1)
        return
    for bad in (0, -2, "1"):
        with pytest.raises(BufferError, match="0 is ambiguous"):
            x.__dlpack__(stream=bad)
    consumer = runtime.stream()  # a consumer names its stream; the export makes it wait for x's work
    x.__dlpack__(stream=consumer.handle)
    with runtime.use_stream(consumer):
        y = runtime.empty(N)
        copy_plus[_grid(N)](x, y, N, 0.0)
        np.testing.assert_array_equal(y.numpy(), data + REPS)
    x.__dlpack__(stream=-1)
    x.__dlpack__(stream=None)


def test_dlpack_torch_consumer_on_cpu():
    torch = pytest.importorskip("torch", reason="torch is the DLPack consumer of this test")
    rt = kd.runtime("cpu")
    s = rt.stream()
    with rt.use_stream(s):
        x = rt.tensor(np.arange(6, dtype=np.float32))
        add_repeatedly[_grid(6)](x, 6, 3)
    np.testing.assert_array_equal(torch.from_dlpack(x).numpy(), np.arange(6) + 3)


# ---------------------------------------------------------------- CUDA array interface
def test_cuda_array_interface_only_on_cuda(runtime, rng):
    t = runtime.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    if runtime.kind != "cuda":
        assert not hasattr(t, "__cuda_array_interface__")
        with pytest.raises(BufferError, match="cannot view CUDA device memory"):
            runtime.from_cuda_array_interface(_Interface({"shape": (1,), "typestr": "<f4", "data": (0, False),
                                                          "version": 3}))
        return
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (4, 6) and cai["typestr"] == "<f4" and cai["strides"] is None
    assert cai["data"] == (t.buffer.raw, False) and cai["stream"] == runtime.default_stream().handle
    view = t.T.__cuda_array_interface__
    assert view["strides"] == (4, 24) and view["shape"] == (6, 4)
    back = kd.from_cuda_array_interface(_Interface(view))
    np.testing.assert_array_equal(back.numpy(), t.numpy().T)
    assert back.buffer.raw == t.buffer.raw
    b16 = runtime.tensor(np.ones(3, np.float32), dtype="bf16")
    assert b16.__cuda_array_interface__["typestr"] == "<V2"
    assert kd.from_cuda_array_interface(b16).dtype is kd.bf16


class _Interface:
    """Anything with a CUDA array interface (what numba and CuPy arrays look like to us)."""

    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


def test_interface_dict_of_a_view():
    t = kd.runtime("cpu").tensor(np.zeros((3, 5), np.float32))
    cai = interop.cuda_array_interface(t.T, 4096, 7)
    assert cai == {"shape": (5, 3), "typestr": "<f4", "data": (4096, False), "strides": (4, 20), "version": 3,
                   "stream": 7}
    assert interop.cuda_array_interface(t, 4096, 0)["stream"] == 1  # 0 is not allowed: the legacy stream
    b = kd.runtime("cpu").tensor(np.zeros(2, np.float32), dtype="bf16")
    assert interop.cuda_array_interface(b, 64, None)["typestr"] == "<V2"  # torch's and ml_dtypes' spelling


@pytest.mark.parametrize("typestr, dtype", [("<f4", kd.f32), ("<f2", kd.f16), ("<V2", kd.bf16), ("<i8", kd.i64),
                                            ("|u1", kd.u8), ("|b1", kd.bool), ("<u4", kd.u32), ("=f8", kd.f64)])
def test_reading_an_interface(typestr, dtype):
    d = interop.read_cuda_array_interface(_Interface({"shape": (2, 3), "typestr": typestr, "data": (1024, True),
                                                      "version": 3, "strides": None, "stream": 2}))
    assert (d.data, d.shape, d.strides, d.dtype, d.readonly, d.stream) == (1024, (2, 3), (3, 1), dtype, True, 2)
    assert d.extent_bytes == 6 * dtype.itemsize
    strided = interop.read_cuda_array_interface(_Interface({"shape": (2, 3), "typestr": typestr, "version": 2,
                                                            "data": (1024, False), "stream": 5,
                                                            "strides": (dtype.itemsize, 2 * dtype.itemsize)}))
    assert strided.strides == (1, 2) and strided.stream is None  # version 2 has no stream


@pytest.mark.parametrize("cai, error, needle", [
    ({"shape": (2,), "typestr": "<c8", "data": (0, False), "version": 3}, TypeError, "no kd dtype"),
    ({"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3, "mask": object()}, ValueError, "mask"),
    ({"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3, "strides": (6,)}, ValueError, "multiples"),
    ({"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3, "strides": (-4,)}, ValueError, "multiples"),
    ({"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3, "stream": 0}, ValueError, "stream"),
    ({"shape": (2,), "typestr": "<f4", "version": 3}, ValueError, "lacks data"),
    ("not a dict", TypeError, "must be a dict"),
])
def test_reading_a_bad_interface_names_the_problem(cai, error, needle):
    with pytest.raises(error, match=needle):
        interop.read_cuda_array_interface(_Interface(cai))


def test_from_dlpack_takes_interface_only_objects_through_it():
    obj = _Interface({"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3})
    with pytest.raises(BufferError, match="cpu runtime cannot view CUDA device memory"):
        kd.from_dlpack(obj, runtime="cpu")
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        interop.read_cuda_array_interface(object())


def test_streams_doc_runs(tmp_path):
    """The Python blocks of docs/streams-and-memory.md run as written."""
    import re
    import runpy
    from pathlib import Path
    doc = Path(__file__).resolve().parent.parent / "docs" / "streams-and-memory.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    assert blocks
    for i, block in enumerate(blocks):
        script = tmp_path / f"block{i}.py"
        script.write_text(block)
        runpy.run_path(str(script))
