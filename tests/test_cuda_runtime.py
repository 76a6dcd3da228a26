"""The cuda runtime on a real device: its capability record, DLPack both ways with PyTorch
(no copies, stream-ordered), kd.print through printf, events, launch limits, errors."""
import ctypes
import ctypes.util

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = pytest.mark.feature("cuda runtime")

if "cuda" not in kd.available_runtimes():
    pytest.skip("no CUDA driver and device on this machine (tests/test_cuda_codegen.py covers NVRTC alone)",
                allow_module_level=True)


@pytest.fixture
def rt():
    return kd.runtime("cuda")


@pytest.fixture
def torch():
    t = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not t.cuda.is_available():
        pytest.skip("this PyTorch build has no CUDA")
    return t


@kd.kernel
def scale_add(x: kd.Tensor, out: kd.Tensor, a: kd.f32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < x.shape[0]:
        out[i] = x[i] * a + out[i]


def test_capabilities_come_from_the_device(rt):
    caps = rt.capabilities
    major, minor = rt.attributes["major"], rt.attributes["minor"]
    assert caps.arch == f"sm_{major}{minor}" and caps.backend == "cuda"
    assert caps.plane_dim == 32 and caps.native_plane_ops and caps.mma_native
    assert caps.max_shared_bytes == rt.attributes["max_shared_optin"] >= 48 * 1024
    assert caps.max_cube_units == 1024
    assert kd.runtime("cuda:0") is rt and rt.device_key == "cuda:0"


def test_bad_device_index_is_clear():
    with pytest.raises(kd.RuntimeUnavailable, match=r"cuda:99 does not exist"):
        kd.runtime("cuda:99")


def test_launch_limits_are_checked(rt):
    x = rt.zeros(4, "f32")
    with pytest.raises(ValueError, match="65535"):
        scale_add[(1, 70000), 4](x, x, 1.0)
    with pytest.raises(ValueError, match="along z"):
        scale_add[1, (1, 1, 128)](x, x, 1.0)


def test_torch_tensor_imported_without_copy(rt, torch):
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    t = kd.from_dlpack(x)
    assert t.runtime is rt and t.shape == (3, 4) and t.strides == (4, 1) and t.dtype is kd.f32
    assert t.buffer.raw == x.data_ptr()  # the same device memory
    x[1, 2] = -1.0
    torch.cuda.synchronize()
    assert t.numpy()[1, 2] == -1.0
    view = kd.from_dlpack(x[:, 1::2])     # strided views keep their strides
    assert view.strides == (4, 2)
    np.testing.assert_array_equal(view.numpy(), x[:, 1::2].cpu().numpy())
    out = torch.zeros(12, device="cuda")
    scale_add[1, 32](kd.from_dlpack(x.reshape(-1)), kd.from_dlpack(out), 2.0)  # a kd kernel writes torch memory
    rt.synchronize()
    assert torch.equal(out, x.reshape(-1) * 2)


def test_kd_tensor_exported_to_torch(rt, torch, rng):
    a = rng.standard_normal(1 << 20).astype(np.float32)
    x = rt.tensor(a)
    y = rt.zeros(1 << 20, "f32")
    scale_add[(1 << 20) // 256, 256](x, y, 3.0)
    ty = torch.from_dlpack(y)             # no synchronize: the export orders torch's stream after ours
    assert ty.device.type == "cuda" and ty.data_ptr() == y.buffer.raw
    np.testing.assert_allclose(ty.cpu().numpy(), a * 3.0, rtol=1e-6)
    ty.mul_(2.0)                          # torch writes, kd reads the same memory
    torch.cuda.synchronize()
    np.testing.assert_allclose(y.numpy(), a * 6.0, rtol=1e-6)
    view = torch.from_dlpack(x[8:])       # a view with an offset
    assert view.shape == (len(a) - 8,) and view[0].item() == a[8]


def test_bf16_both_ways(rt, torch):
    xb = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16, device="cuda")
    t = kd.from_dlpack(xb)
    assert t.dtype is kd.bf16
    np.testing.assert_array_equal(t.numpy().astype(np.float32), [1.5, -2.0, 3.25])
    back = torch.from_dlpack(rt.tensor(np.array([0.5, 4.0], dtype=kd.bf16.np)))
    assert back.dtype == torch.bfloat16 and back.tolist() == [0.5, 4.0]


def test_kernel_print_goes_through_printf(rt, capfd):
    @kd.kernel
    def hello(x: kd.Tensor[kd.f32]):
        i = kd.unit_pos_x()
        kd.print("unit {} sees {} (100%)", i, x[i])

    hello[1, 2](rt.tensor(np.array([1.5, -2.0], np.float32)))
    rt.synchronize()  # device printf is flushed to stdout at synchronisation
    ctypes.CDLL(ctypes.util.find_library("c")).fflush(None)
    out = capfd.readouterr().out
    assert "unit 0 sees 1.5 (100%)" in out and "unit 1 sees -2 (100%)" in out


def test_events_time_work(rt):
    x = rt.zeros(1 << 22, "f32")
    start = rt.record_event()
    scale_add[(1 << 22) // 256, 256](x, x, 1.0)
    end = rt.record_event()
    assert rt.elapsed_ms(start, end) > 0


def test_uploads_downloads_and_fill_are_stream_ordered(rt, rng):
    a = rng.standard_normal(3000).astype(np.float32)
    x = rt.tensor(a)
    out = rt.zeros(3000, "f32")
    for _ in range(5):                    # queued launches and copies, one stream, no waits between
        scale_add[12, 256](x, out, 1.0)
    np.testing.assert_allclose(out.numpy(), a * 5, rtol=1e-6)


def _graph_builds(monkeypatch) -> list:
    """Every KernelGraph made from now on (backends/cuda/graphs.py), with its failure if any."""
    from kerneldsl.backends.cuda import graphs
    made, build = [], graphs.KernelGraph._build

    def counted(self, stream_handle):
        build(self, stream_handle)
        made.append(self)

    monkeypatch.setattr(graphs.KernelGraph, "_build", counted)
    return made


def test_launches_again_as_graphs_follow_new_arguments_and_grids(rt, rng, monkeypatch):
    """From a binary's second launch on, launches are graph launches whose node parameters are
    set each time: new tensors, scalars and grids must all reach the kernel."""
    if rt._graph_run is None:
        pytest.skip("this driver or $KERNELDSL_CUDA_GRAPHS gives no graph launches")
    made = _graph_builds(monkeypatch)

    @kd.kernel
    def axpy(x: kd.Tensor, out: kd.Tensor, a: kd.f32):
        i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
        if i < x.shape[0]:
            out[i] = x[i] * a + out[i]

    xs = [rng.standard_normal(n).astype(np.float32) for n in (300, 1000)]
    X = [rt.tensor(a) for a in xs]
    outs = [rt.zeros(a.size, "f32") for a in xs]
    want = [np.zeros(a.size, np.float32) for a in xs]
    for k, a in enumerate([1.0, 2.0, -0.5, 3.0, 0.25, 4.0]):
        j = k % 2
        axpy[-(-xs[j].size // 128), 128](X[j], outs[j], a)
        want[j] = xs[j] * np.float32(a) + want[j]
    other = rt.stream()  # a graph is launched only on the stream it was made on: here, one by one
    other.wait_stream(rt.default_stream())
    with rt.use_stream(other):
        axpy[3, 128](X[0], outs[0], 2.0)
    other.synchronize()
    want[0] = xs[0] * np.float32(2.0) + want[0]
    for out, w in zip(outs, want):
        np.testing.assert_allclose(out.numpy(), w, rtol=1e-6)
    assert made and all(g.failure is None for g in made)


def test_launches_on_a_capturing_stream_are_captured_one_by_one(rt, rng, monkeypatch):
    """A graph launch would end a capture (torch.cuda.graph, cuStreamBeginCapture): on a
    capturing stream a launch goes through cuLaunchKernel, which the capture records."""
    if rt._graph_run is None:
        pytest.skip("this driver or $KERNELDSL_CUDA_GRAPHS gives no graph launches")
    from kerneldsl.backends.cuda import runtime as cuda_rt
    driver = cuda_rt._driver()
    made = _graph_builds(monkeypatch)

    @kd.kernel
    def bump(out: kd.Tensor, a: kd.f32):
        i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
        if i < out.shape[0]:
            out[i] = out[i] + a

    s = rt.stream()
    out = rt.zeros(256, "f32")
    with rt.use_stream(s):
        for _ in range(3):  # the second and third launches are graph launches
            bump[2, 128](out, 1.0)
        assert made
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        assert int(driver.cuStreamBeginCapture(s.cu, mode)[0]) == 0
        bump[2, 128](out, 10.0)
        bump[2, 128](out, 100.0)
        err, captured = driver.cuStreamEndCapture(s.cu)
    assert int(err) == 0, err  # the capture was not invalidated
    assert np.all(out.numpy() == 3.0)  # captured work did not run
    err, graph_exec = driver.cuGraphInstantiate(captured, 0)
    assert int(err) == 0
    for _ in range(2):
        assert int(driver.cuGraphLaunch(graph_exec, s.cu)[0]) == 0
    s.synchronize()
    np.testing.assert_array_equal(out.numpy(), np.full(256, 3.0 + 2 * 110.0, np.float32))
    driver.cuGraphExecDestroy(graph_exec)
    driver.cuGraphDestroy(captured)
