"""OpenCL runtime specifics: device selection, capability-driven errors, the native plane-op
algorithms (through a local-memory stand-in for warp instructions), printf on PoCL."""
import dataclasses
import re

import numpy as np
import pytest

import kerneldsl as kd
from reference import planes as ref

opencl_runtime = pytest.importorskip("kerneldsl.backends.opencl.runtime",
                                     reason="pyopencl is not installed (the test extra installs it)")
pytestmark = [pytest.mark.feature("opencl backend"),
              pytest.mark.skipif(not opencl_runtime.available(), reason="no OpenCL device on this machine "
                                 "(pip install 'rudnn[opencl]' gives a CPU one)")]


@pytest.fixture
def rt():
    return kd.runtime("opencl")


def test_listed_and_selected_by_index(rt):
    assert "opencl" in kd.available_runtimes()
    assert kd.runtime("opencl:0") is rt
    assert rt.capabilities.backend == "opencl" and rt.capabilities.device_name in repr(rt)
    n = len(opencl_runtime.devices())
    with pytest.raises(ValueError, match=rf"opencl:{n + 3} asks for OpenCL device {n + 3}, but this machine has {n}"):
        kd.runtime(f"opencl:{n + 3}")
    with pytest.raises(TypeError, match="native_planes must be True or False, got 'no'"):
        kd.runtime("opencl", native_planes="no")
    with pytest.raises(ValueError, match="takes one option, native_planes"):
        kd.runtime("opencl", plane_dim=8)


def test_capabilities_come_from_the_device(rt):
    dev = rt.device
    caps = rt.capabilities
    assert caps.max_cube_units == dev.max_work_group_size
    assert caps.max_shared_bytes == dev.local_mem_size
    assert (kd.f64 in caps.dtypes) == ("cl_khr_fp64" in dev.extensions or bool(dev.double_fp_config))
    assert caps.plane_dim == 32 and kd.f32 in caps.atomics["add"]


@kd.kernel
def f64_copy(x: kd.Tensor, out: kd.Tensor):
    i = kd.unit_pos_x()
    out[i] = x[i]


def test_missing_dtype_is_a_clear_error(rt):
    """A device without cl_khr_fp64 (simulated: the record is what every check reads)."""
    no_f64 = dataclasses.replace(rt.capabilities, dtypes=tuple(d for d in rt.capabilities.dtypes if d is not kd.f64))
    fake = opencl_runtime.OpenCLRuntime.__new__(opencl_runtime.OpenCLRuntime)
    fake.__dict__.update(rt.__dict__)
    fake.capabilities = no_f64
    x = rt.zeros(4, "f64")
    with pytest.raises(TypeError, match=r"argument x is f64, which opencl does not support"):
        f64_copy.launch(1, 4, x, x, runtime=fake)


@kd.kernel
def huge_shared_with_planes(out: kd.Tensor[kd.f32], N: kd.Const[int]):
    buf = kd.shared(kd.f32, N)
    t = kd.unit_pos_x()
    buf[t] = 1.0
    kd.sync_cube()
    out[t] = kd.plane_sum(buf[t])


def test_shared_memory_for_emulated_planes_is_checked():
    rt = kd.runtime("opencl", native_planes=False)  # the local-memory path, on any device
    assert not rt.capabilities.native_plane_ops
    limit = rt.capabilities.max_shared_bytes
    out = rt.zeros(64, "f32")
    # the user's array fits, the plane operation's scratch (8 bytes per unit) does not
    with pytest.raises(kd.UnsupportedFeatureError, match=r"plane operations emulated in shared memory.*"
                                                          + re.escape(rt.capabilities.device_name.split(" (")[0])):
        huge_shared_with_planes[1, 64](out, limit // 4 - 16)
    with pytest.raises(kd.CompileError, match="exceeds the device's"):
        huge_shared_with_planes[1, 64](out, limit // 4 + 1)


@kd.kernel
def plane_mix(x: kd.Tensor[kd.f32], xi: kd.Tensor[kd.i64], k: kd.Tensor[kd.i32], out: kd.Tensor[kd.f32, 2],
              outi: kd.Tensor[kd.i64, 2], bits: kd.Tensor[kd.u32]):
    t = kd.unit_pos()
    v = x[t]
    out[t, 0] = kd.plane_sum(v)
    out[t, 1] = kd.plane_exclusive_sum(v)
    out[t, 2] = kd.plane_shuffle(v, k[t])
    out[t, 3] = kd.plane_broadcast(v, 2)
    out[t, 4] = 1.0 if kd.plane_all(v > -7.0) else 0.0
    outi[t, 0] = kd.plane_min(xi[t])
    outi[t, 1] = kd.plane_shuffle_xor(xi[t], 3)
    bits[t] = kd.plane_ballot(v > 0.0)


def test_native_plane_algorithms_through_a_stand_in(rng):
    """The sub-group renderer (tree reductions, shuffle-up scans, ballots, a partial plane)
    run on PoCL with its two warp primitives emulated in local memory."""
    rt = opencl_runtime.OpenCLRuntime(0)
    rt.native = "local"
    P, units = rt.plane_dim, 45
    x = rng.integers(-8, 8, units).astype(np.float32)
    xi = rng.integers(-(2 ** 40), 2 ** 40, units).astype(np.int64)
    k = rng.integers(-3, 2 * P, units).astype(np.int32)
    out = rt.zeros((units, 5), "f32")
    outi = rt.zeros((units, 2), "i64")
    bits = rt.zeros(units, "u32")
    plane_mix[1, units](rt.tensor(x), rt.tensor(xi), rt.tensor(k), out, outi, bits)
    got, goti = out.numpy(), outi.numpy()
    np.testing.assert_array_equal(got[:, 0], ref.plane_reduce(x, P, np.sum))
    np.testing.assert_array_equal(got[:, 1], ref.plane_scan(x, P, False))
    np.testing.assert_array_equal(got[:, 2], ref.plane_shuffle(x, k, P))
    np.testing.assert_array_equal(got[:, 3], ref.plane_reduce(x, P, lambda a: a[2]))
    np.testing.assert_array_equal(got[:, 4], ref.plane_reduce(x > -7, P, np.all).astype(np.float32))
    np.testing.assert_array_equal(goti[:, 0], ref.plane_reduce(xi, P, np.min))
    np.testing.assert_array_equal(goti[:, 1], ref.plane_shuffle_xor(xi, 3, P))
    np.testing.assert_array_equal(bits.numpy(), ref.plane_ballot(x > 0, P))


@kd.kernel
def says_hello(x: kd.Tensor[kd.f32], n: kd.i64):
    i = kd.unit_pos_x()
    kd.print("unit {} of {} sees {} (100%)", i, n, x[i])


def test_kernel_print_reaches_stdout(rt, capfd):
    import pyopencl as cl
    if "CPU" not in cl.device_type.to_string(rt.device.type):
        pytest.skip("printf output is captured on CPU devices (PoCL, Intel); GPU drivers buffer it until "
                    "synchronisation")
    says_hello[1, 2](rt.tensor(np.array([1.5, -2.0], np.float32)), 2 ** 33)
    rt.synchronize()
    out = capfd.readouterr().out
    assert "unit 0 of 8589934592 sees 1.5 (100%)" in out and "unit 1 of 8589934592 sees -2 (100%)" in out


@kd.kernel
def f16_roundtrip(h: kd.Tensor[kd.f16], f: kd.Tensor[kd.f32], wide: kd.Tensor[kd.f32], back: kd.Tensor[kd.f16],
                  n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        v = h[i]                       # f16 in a register: the bit-arithmetic conversions
        f[i] = kd.f32(v)
        w = kd.cast(wide[i], kd.f16)
        back[i] = w


def test_f16_conversions_in_registers_are_exact(rt):
    """Every f16 bit pattern to f32, and f32 values around every f16 rounding boundary
    (ties, subnormals, overflow, NaN, -0) back to f16, against numpy."""
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h = bits.view(np.float16)
    with np.errstate(all="ignore"):
        edges = h.astype(np.float32)
        nxt = np.nextafter(edges, np.float32(np.inf))
        mids = ((edges.astype(np.float64) + np.roll(edges, -1).astype(np.float64)) / 2).astype(np.float32)
    wide = np.concatenate([edges, nxt, mids, np.float32([65504, 65519.99, 65520, 1e-8, -3e-8, 6e-8, 1e38, -0.0])])
    n = len(wide)
    hh = np.resize(h, n)
    f, back = rt.zeros(n, "f32"), rt.zeros(n, "f16")
    f16_roundtrip[(n + 255) // 256, 256](rt.tensor(hh), f, rt.tensor(wide), back, n)
    with np.errstate(all="ignore"):
        want_f = hh.astype(np.float32)
        want_back = wide.astype(np.float16)
    got_f = f.numpy()
    np.testing.assert_array_equal(np.isnan(got_f), np.isnan(want_f))
    ok = ~np.isnan(want_f)
    np.testing.assert_array_equal(got_f[ok].view(np.uint32), want_f[ok].view(np.uint32))
    got_b = back.numpy()
    np.testing.assert_array_equal(np.isnan(got_b), np.isnan(want_back))
    ok = ~np.isnan(want_back)
    np.testing.assert_array_equal(got_b[ok].view(np.uint16), want_back[ok].view(np.uint16))


@kd.kernel
def f16_staging(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], rounds: kd.i32, B: kd.Const[int]):
    t = kd.unit_pos_x()
    sh = kd.shared(kd.f16, B)
    reg = kd.shared(kd.f16, B)
    acc = kd.f32(0)
    for r in range(rounds):
        sh[t] = x[r * B + t] * 2.0                 # f32 -> f16 into shared memory, in a loop with barriers
        h = kd.cast(x[r * B + t] * 3.0, kd.f16)    # the same through an f16 register
        reg[t] = h
        kd.sync_cube()
        acc += kd.f32(sh[(t + 1) % B]) + kd.f32(reg[(t + 2) % B])
        kd.sync_cube()
    out[t] = acc


def test_f16_staging_through_shared_memory_in_a_loop(rt, rng):
    """The pattern PoCL once miscompiled (f16 conversions through a private temporary)."""
    B, R = 64, 5
    x = rng.integers(-50, 50, R * B).astype(np.float32)
    out = rt.zeros(B, "f32")
    f16_staging[1, B](rt.tensor(x), out, R, B)
    a = (x.reshape(R, B) * 2).astype(np.float16).astype(np.float32)
    b = (x.reshape(R, B) * 3).astype(np.float16).astype(np.float32)
    ref = (np.roll(a, -1, axis=1) + np.roll(b, -2, axis=1)).sum(0)
    np.testing.assert_array_equal(out.numpy(), ref)
