"""Tensors and runtimes: creation, dtypes (bf16 included), views, contiguous copies,
pooled memory, DLPack both ways, default runtime."""
import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("tensors"), pytest.mark.interpreter]


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "f64", "i32", "u32", "i64", "u8", "bool"])
def test_roundtrip_every_dtype(runtime, rng, dt):
    if not runtime.capabilities.supports_dtype(dt):
        pytest.skip(f"{runtime.name} has no {dt}")
    d = kd.as_dtype(dt)
    a = (rng.standard_normal((3, 5)) * 10).astype(d.np)
    t = runtime.tensor(a)
    assert t.shape == (3, 5) and t.dtype is d and t.runtime is runtime and t.strides == (5, 1)
    assert t.is_contiguous()
    np.testing.assert_array_equal(t.numpy(), a)
    assert kd.tensor(a, runtime=runtime).dtype is d
    z = runtime.zeros((2, 3), dt)
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3), d.np))
    e = runtime.empty(7, d)
    assert e.shape == (7,) and e.dtype is d


def test_views_share_memory_and_copy_correctly(runtime, rng):
    a = rng.standard_normal((4, 6, 5)).astype(np.float32)
    t = runtime.tensor(a)
    np.testing.assert_array_equal(t.reshape(24, 5).numpy(), a.reshape(24, 5))
    np.testing.assert_array_equal(t.reshape(-1).numpy(), a.reshape(-1))
    p = t.permute(2, 0, 1)
    assert not p.is_contiguous() and p.shape == (5, 4, 6)
    np.testing.assert_array_equal(p.numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.transpose(0, 2).numpy(), a.transpose(2, 1, 0))
    s = t[1:, ::2, 3]
    np.testing.assert_array_equal(s.numpy(), a[1:, ::2, 3])
    np.testing.assert_array_equal(t[-1].numpy(), a[-1])
    np.testing.assert_array_equal(t[..., 1].numpy(), a[..., 1])
    c = p.contiguous()
    assert c.is_contiguous() and c.buffer is not t.buffer
    np.testing.assert_array_equal(c.numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(s.contiguous().numpy(), a[1:, ::2, 3])
    with pytest.raises(ValueError, match="contiguous"):
        p.reshape(-1)
    with pytest.raises(ValueError, match="elements"):
        t.reshape(7, 7)
    with pytest.raises(ValueError, match="positive step"):
        t[::-1]
    with pytest.raises(IndexError):
        t[4]


def test_one_slice_views_match_numpy(runtime, rng):
    """`t[a:b]` (a direct path in Tensor.__getitem__) gives numpy's view for in-range,
    negative, clipped and empty bounds, on 1-D tensors and on the first axis of others,
    also of a view that does not start its buffer, with the same layout as `t[(a:b,)]`."""
    a = rng.standard_normal((10, 6)).astype(np.float32)
    t = runtime.tensor(a)
    for base, host in ((t, a), (t[2:], a[2:]), (t.reshape(-1), a.reshape(-1)), (t[:, 1], a[:, 1])):
        for k in (slice(3, 9), slice(None), slice(-3, None), slice(8, 2), slice(None, 100), slice(-100, 2),
                  slice(5, 5), slice(1, -1)):
            v, general = base[k], base[(k,)]
            assert (v.shape, v.strides, v.offset) == (general.shape, general.strides, general.offset), k
            np.testing.assert_array_equal(v.numpy(), host[k])


@pytest.mark.parametrize("read", ["to_numpy_all", "host_values"])
def test_reading_several_tensors_at_once_matches_each_read(runtime, rng, read):
    """rt.to_numpy_all and rt.host_values: what .numpy() gives each tensor (dtypes, shapes,
    strided, offset and empty views, two views of one buffer), including tensors written on
    another stream."""
    import ml_dtypes
    a = rng.standard_normal((4, 6)).astype(np.float32)
    t = runtime.tensor(a)
    s = runtime.stream()
    with runtime.use_stream(s):
        u = runtime.tensor(np.arange(5, dtype=np.int64))
    views = [t, t[1:3, ::2], u, u[2:], u[:0], runtime.tensor(np.array([1.5, -2.0], ml_dtypes.bfloat16)),
             runtime.tensor(np.array(7, np.int32))]
    got = getattr(runtime, read)(views)
    assert len(got) == len(views)
    for g, v in zip(got, views):
        want = v.numpy()
        assert g.dtype == want.dtype and g.shape == want.shape
        np.testing.assert_array_equal(g, want)
    np.testing.assert_array_equal(got[1], a[1:3, ::2])
    assert getattr(runtime, read)([]) == []


@kd.kernel
def _add_hundred(x: kd.Tensor[kd.i32, 1], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        x[i] = x[i] + 100


def test_host_values_on_the_cpu_are_views_and_copies_elsewhere(runtime):
    """rt.host_values saves its copies only where a tensor's memory is host memory (the cpu
    runtime and the interpreter): there each array shows the tensor's memory, so a later
    launch's writes show through; every other runtime gives copies, as to_numpy_all does."""
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = runtime.tensor(a)
    got = runtime.host_values([t, t[1:], t.T])
    _add_hundred[1, 64](t.reshape(12), 12)
    want = a + 100 if runtime.kind in ("cpu", "interpreter") else a
    np.testing.assert_array_equal(t.numpy(), a + 100)
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[1], want[1:])
    np.testing.assert_array_equal(got[2], want.T)


def test_bf16_host_arrays_use_ml_dtypes(runtime):
    import ml_dtypes
    a = np.array([1.0, -2.5, 3.140625], dtype=ml_dtypes.bfloat16)
    t = runtime.tensor(a)
    assert t.dtype is kd.bf16 and t.numpy().dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(t.numpy(), a)


def test_memory_is_pooled(runtime):
    runtime.empty_cache()  # start from an empty cache
    t = runtime.empty(1000, "f32")
    raw = t.buffer.raw
    del t
    import gc
    gc.collect()
    u = runtime.empty(1000, "f32")
    assert u.buffer.raw is raw  # the freed buffer came back from the pool


def test_zero_size_and_scalars(runtime):
    t = runtime.tensor(np.zeros((0, 3), np.float32))
    assert t.shape == (0, 3) and t.numpy().shape == (0, 3)
    s = runtime.tensor(np.float32(2.5))
    assert s.shape == () and s.numpy() == 2.5


def test_uploads_of_every_host_layout_match_numpy(runtime, rng):
    """runtime.tensor on a plain C-ordered array (its direct path) and on everything else:
    Fortran order, a strided slice, a 0-d array, Python lists (floats to
    F32, ints to I32), an explicit dtype; the values and dtypes numpy gives."""
    a = rng.standard_normal((3, 4))
    cases = [(a, a, "f64"), (a.astype(np.float32), a.astype(np.float32), "f32"),
             (np.asfortranarray(a.astype(np.float32)), a.astype(np.float32), "f32"),
             (a.astype(np.float32)[:, ::2], a.astype(np.float32)[:, ::2], "f32"),
             (np.array(7, np.int32), np.array(7, np.int32), "i32"),
             ([1.5, 2.5], np.array([1.5, 2.5], np.float32), "f32"), ([[1, 2]], np.array([[1, 2]], np.int32), "i32"),
             (np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(6).reshape(2, 3), "i64"),
             (np.array([True, False]), np.array([True, False]), "bool")]
    for host, want, dt in cases:
        if not runtime.capabilities.supports_dtype(dt):
            continue
        t = runtime.tensor(host)
        assert t.dtype is kd.as_dtype(dt) and t.shape == np.shape(want) and t.is_contiguous(), (host, dt)
        np.testing.assert_array_equal(t.numpy(), want)
    t = runtime.tensor(a, dtype="f32")
    assert t.dtype is kd.f32
    np.testing.assert_array_equal(t.numpy(), a.astype(np.float32))


def test_default_runtime(monkeypatch):
    assert kd.runtime().name == "cpu"
    monkeypatch.setenv("KERNELDSL_RUNTIME", "cpu")
    assert kd.runtime() is kd.runtime("cpu")
    assert "cpu" in kd.available_runtimes()
    with pytest.raises(ValueError, match="unknown runtime"):
        kd.runtime("tpu")
    with pytest.raises(ValueError, match="plane_dim"):
        kd.runtime("cpu", plane_dim=3)


def test_dlpack_export_and_import_numpy():
    rt = kd.runtime("cpu")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = rt.tensor(a)
    v = np.from_dlpack(t)          # zero-copy view of the tensor
    np.testing.assert_array_equal(v, a)
    w = kd.from_dlpack(a)          # zero-copy import
    a[0, 0] = 42
    assert w.numpy()[0, 0] == 42
    s = kd.from_dlpack(a[:, 1::2])  # strided import keeps strides
    np.testing.assert_array_equal(s.numpy(), a[:, 1::2])


def test_dlpack_with_torch():
    torch = pytest.importorskip("torch", reason="PyTorch (the oracle extra) is not installed")
    rt = kd.runtime("cpu")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = kd.from_dlpack(x)
    x[1, 2] = -1
    assert t.numpy()[1, 2] == -1        # shares memory
    back = torch.from_dlpack(rt.tensor(np.ones((2, 2), np.float32)))
    assert back.sum().item() == 4
    xb = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    tb = kd.from_dlpack(xb)
    assert tb.dtype is kd.bf16
    np.testing.assert_array_equal(tb.numpy().astype(np.float32), [1.5, -2.0])


@kd.kernel
def double_it(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    i = kd.unit_pos_x()
    out[i] = x[i] * 2.0


def test_kernel_on_strided_view(runtime, rng):
    a = rng.standard_normal(20).astype(np.float32)
    t = runtime.tensor(a)
    out = runtime.zeros(10, "f32")
    double_it[1, 10](t[::2], out)             # a rank-1 view with stride 2
    np.testing.assert_array_equal(out.numpy(), a[::2] * 2)
