"""Exports keep their memory: a DLPack capsule, `host_view` or `np.asarray(t, copy=False)`
holds the tensor's buffer out of the memory pool until the consumer lets go, even after the
tensor and the runtime object are gone; imports of read-only memory stay read-only."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kerneldsl as kd

from kerneldsl.backends.cpu.runtime import CpuRuntime


def _churn(rt, n=8, shape=(2, 8)):
    """Allocate and fill tensors of the exported size, as the next operator calls would:
    a buffer back in the pool would be handed out here and overwritten."""
    keep = [rt.tensor(np.full(shape, 7.0 + i, np.float32)) for i in range(n)]
    del keep
    gc.collect()
    return [rt.tensor(np.full(shape, -1.0, np.float32)) for _ in range(n)]


def _torch():
    return pytest.importorskip("torch", reason="PyTorch (the oracle extra) is not installed")


EXPORTS = {
    "np.from_dlpack": np.from_dlpack,
    "torch.from_dlpack": lambda t: _torch().from_dlpack(t).numpy(),
    "host_view": lambda t: t.runtime.host_view(t),
    "asarray(copy=False)": lambda t: np.asarray(t, copy=False),
    "asarray": np.asarray,
}


@pytest.mark.parametrize("how", list(EXPORTS))
def test_export_outlives_its_tensor(runtime, how):
    if runtime.kind == "cuda" and how == "torch.from_dlpack":  # zero-copy into a CUDA torch tensor
        torch = _torch()
        want = np.arange(16, dtype=np.float32).reshape(2, 8) / 8
        y = torch.from_dlpack(runtime.tensor(want))
        gc.collect()
        churn = _churn(runtime)
        assert y.is_cuda and np.array_equal(y.cpu().numpy(), want)
        assert all((c.numpy() == -1).all() for c in churn)
        return
    if runtime.kind != "cpu" and how != "asarray":
        if how == "host_view":
            pytest.skip("host_view exists on the cpu runtime only (its memory is host memory)")
        # device memory: no zero-copy host export; np.asarray(t) copies
        with pytest.raises((BufferError, ValueError, RuntimeError)):
            EXPORTS[how](runtime.tensor(np.ones(4, np.float32)))
        return
    want = np.arange(16, dtype=np.float32).reshape(2, 8) / 8
    y = EXPORTS[how](runtime.tensor(want))  # the tensor is a temporary: only the export holds it
    gc.collect()
    churn = _churn(runtime)
    np.testing.assert_array_equal(np.asarray(y), want)
    assert all((c.numpy() == -1).all() for c in churn)


def test_export_of_an_operator_result_survives_the_next_call():
    """The report of issue 14: a softmax output exported to torch was overwritten by the
    next layer_norm, whose output took its pooled memory."""
    torch = _torch()
    from rudnn import normalization as N
    rt = kd.runtime("cpu")
    x = rt.tensor(np.ones((2, 8), np.float32))
    g = rt.tensor(np.ones(8, np.float32))
    y = torch.from_dlpack(N.softmax_last_axis(x))
    z = np.from_dlpack(N.softmax_last_axis(x))
    N.layer_norm(rt.tensor(np.random.default_rng(0).random((2, 8), np.float32)), g)
    np.testing.assert_array_equal(y.numpy(), np.full((2, 8), 0.125, np.float32))
    np.testing.assert_array_equal(z, np.full((2, 8), 0.125, np.float32))


def test_buffer_returns_to_the_pool_once_the_consumer_lets_go():
    rt = CpuRuntime()  # a private runtime: its pool sees no other test's tensors
    t = rt.tensor(np.ones(64, np.float32))
    raw = t.buffer.raw
    v = np.from_dlpack(t)
    del t
    gc.collect()
    assert rt.empty(64).buffer.raw is not raw  # still exported: not in the pool
    del v
    gc.collect()
    assert rt.empty(64).buffer.raw is raw  # released with the last export


def test_export_outlives_the_runtime_object():
    torch = _torch()
    rt = CpuRuntime()  # not in the registry: dropping it drops the last reference
    t = rt.tensor(np.arange(5, dtype=np.float32))
    views = [np.from_dlpack(t), torch.from_dlpack(t), rt.host_view(t[1:])]
    del t, rt
    gc.collect()
    _churn(kd.runtime("cpu"), shape=(5,))
    np.testing.assert_array_equal(views[0], np.arange(5))
    np.testing.assert_array_equal(views[1].numpy(), np.arange(5))
    np.testing.assert_array_equal(views[2], np.arange(1, 5))


def test_views_and_offsets_export_the_right_elements():
    rt = kd.runtime("cpu")
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = rt.tensor(a)[1:, ::2]
    np.testing.assert_array_equal(np.from_dlpack(t), a[1:, ::2])
    np.testing.assert_array_equal(rt.host_view(t), a[1:, ::2])


@kd.kernel
def _fill(out: kd.Tensor[kd.f32], value: kd.f32):
    i = kd.unit_pos_x()
    if i < out.shape[0]:
        out[i] = value


@kd.kernel
def _sum_into(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    if kd.unit_pos_x() == 0:
        s = kd.f32(0)
        for i in range(x.shape[0]):
            s += x[i]
        out[0] = s


def test_read_only_imports_are_refused_as_kernel_outputs():
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    t = kd.from_dlpack(a)
    assert t.readonly and t[1:].readonly
    with pytest.raises(ValueError, match="argument out is read-only"):
        _fill[1, 32](t, 1.0)
    np.testing.assert_array_equal(a, np.arange(4))
    out = kd.runtime("cpu").zeros(1)
    _sum_into[1, 32](t, out)  # reading it is fine
    assert out.numpy()[0] == 6
    view = np.from_dlpack(t)  # and its exports stay read-only
    assert not view.flags.writeable
    assert not t.runtime.host_view(t).flags.writeable


def test_read_only_import_is_refused_on_every_launch():
    a = np.zeros(4, np.float32)
    w = kd.from_dlpack(a)
    for _ in range(3):
        _fill[1, 32](w, 2.0)  # writable: fine, and the compiled kernel is cached after the first
    a.flags.writeable = False
    ro = kd.from_dlpack(a)
    for _ in range(3):
        with pytest.raises(ValueError, match="read-only"):
            _fill[1, 32](ro, 3.0)
    np.testing.assert_array_equal(a, 2.0)


def test_read_only_torch_import_via_numpy():
    torch = _torch()
    x = torch.arange(4, dtype=torch.float32)
    t = kd.from_dlpack(x)
    assert not t.readonly  # torch memory is writable
    _fill[1, 32](t, 5.0)
    assert x.tolist() == [5.0] * 4


def test_operator_does_not_write_a_read_only_input():
    from rudnn import normalization as N
    a = np.random.default_rng(1).random((3, 8), np.float32)
    a.flags.writeable = False
    g = np.ones(8, np.float32)
    g.flags.writeable = False
    out = N.layer_norm(kd.from_dlpack(a), kd.from_dlpack(g))
    assert not out.readonly
    mean, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), (a - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
