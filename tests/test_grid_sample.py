"""rudnn.grid_sample (SPEC §9) on every runtime: PyTorch CPU forward and autograd (input
and grid gradients) over every mode × padding mode × align_corners in 2-D and 3-D, odd
sizes, size-1 axes, grids reaching outside the input, F16/BF16, strided and NaN inputs,
a bitwise-deterministic input gradient, and every error rule before any launch."""
import numpy as np
import pytest

import kerneldsl as kd
from family_checks import assert_each_rejected, foreign
from reference import grid_sample as ref
from rudnn.grid_sample import (GridSampleError, GridSampleMode, GridSampleOptions, GridSamplePaddingMode,
                               grid_sample, grid_sample_backward)
from rudnn.grid_sample.fixed_point import fixed_of, fixed_scale

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the oracle extra is installed in CI
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch CPU (the oracle extra) is not installed")

pytestmark = pytest.mark.feature("grid_sample")
MODES = list(GridSampleMode)
PADS = list(GridSamplePaddingMode)
# (input spatial, grid spatial): odd sizes, size-1 axes, down- and upsampling
CASES = {2: [((5, 7), (4, 6)), ((1, 3), (3, 2)), ((6, 1), (1, 5))], 3: [((3, 4, 5), (2, 3, 4)), ((1, 2, 3), (2, 1, 3))]}


def torch_grads(x, grid, go, opts):
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tg = torch.tensor(grid, dtype=torch.float64, requires_grad=True)
    y = F.grid_sample(tx, tg, mode=opts.mode.value.lower(), padding_mode=opts.padding_mode.value.lower(),
                      align_corners=opts.align_corners)
    y.backward(torch.tensor(go, dtype=torch.float64))
    return y.detach().numpy(), tx.grad.numpy(), tg.grad.numpy()


def check_against_torch(rt, rng, dims, mode, opts, size_in, size_out, dtype=np.float32, tol=None):
    x = rng.standard_normal((2, 3, *size_in)).astype(dtype)
    grid = rng.uniform(-1.25, 1.25, (2, *size_out, dims)).astype(dtype)
    go = rng.standard_normal((2, 3, *size_out)).astype(dtype)
    y, gx, gg = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
    tol = tol or dict(rtol=1e-5, atol=1e-5)
    what = f"{opts} {size_in}->{size_out}"
    np.testing.assert_allclose(grid_sample(rt.tensor(x), rt.tensor(grid), opts).numpy().astype(np.float64), y,
                               **tol, err_msg=what)
    dx, dgrid = grid_sample_backward(rt.tensor(x), rt.tensor(grid), rt.tensor(go), opts)
    np.testing.assert_allclose(dx.numpy().astype(np.float64), gx, **tol, err_msg="input grad " + what)
    scale = max(size_in)  # the grid gradient carries the unnormalisation factor size/2
    np.testing.assert_allclose(dgrid.numpy().astype(np.float64), gg, rtol=tol["rtol"] * scale,
                               atol=tol["atol"] * scale, err_msg="grid grad " + what)


@needs_torch
@pytest.mark.parametrize("dims, mode", [(2, m) for m in MODES] + [(3, GridSampleMode.Bilinear),
                                                                 (3, GridSampleMode.Nearest)])
def test_forward_and_gradients_match_torch(runtime, rng, dims, mode):
    for pad in PADS:
        for align in (False, True):
            for size_in, size_out in CASES[dims]:
                check_against_torch(runtime, rng, dims, mode, GridSampleOptions(mode, pad, align), size_in, size_out)


@needs_torch
@pytest.mark.parametrize("dtype, tol", [("f16", dict(rtol=5e-3, atol=5e-3)), ("bf16", dict(rtol=4e-2, atol=4e-2))])
def test_half_dtypes(runtime, rng, dtype, tol):
    np_dtype = kd.as_dtype(dtype).np
    for mode in (GridSampleMode.Bilinear, GridSampleMode.Bicubic):  # Nearest only copies: F32 covers it
        check_against_torch(runtime, rng, 2, mode, GridSampleOptions(mode, GridSamplePaddingMode.Border), (6, 9),
                            (5, 4), np_dtype, tol)


@needs_torch
def test_strided_and_nan_inputs(runtime, rng):
    base = rng.standard_normal((6, 3, 2, 5)).astype(np.float32)
    base[2, 1, 0, 3] = np.nan
    x = np.ascontiguousarray(base.transpose(2, 1, 0, 3))          # [2, 3, 6, 5]
    view = runtime.tensor(base).permute(2, 1, 0, 3)
    grid = rng.uniform(-1, 1, (2, 4, 7, 2)).astype(np.float32)
    grid_view = runtime.tensor(np.ascontiguousarray(grid.transpose(0, 2, 1, 3))).permute(0, 2, 1, 3)
    go = rng.standard_normal((2, 3, 4, 7)).astype(np.float32)
    opts = GridSampleOptions()
    y, gx, gg = torch_grads(x, grid, go, opts)
    got = grid_sample(view, grid_view, opts).numpy()
    assert np.isnan(y).any()
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-5)      # NaN exactly where torch has it
    dx, dgrid = grid_sample_backward(view, grid_view, runtime.tensor(go), opts)
    np.testing.assert_allclose(dx.numpy(), gx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dgrid.numpy(), gg, rtol=1e-4, atol=1e-4)
    assert np.array_equal(view.numpy(), x, equal_nan=True)       # inputs are not modified


def test_input_gradient_is_deterministic_and_nonfinite_grads_propagate(runtime, rng):
    x = runtime.tensor(rng.standard_normal((1, 2, 4, 5)).astype(np.float32))
    # many grid points on few pixels: every pixel receives many contributions
    grid = runtime.tensor(rng.uniform(-0.6, 0.6, (1, 16, 16, 2)).astype(np.float32))
    go = rng.standard_normal((1, 2, 16, 16)).astype(np.float32) * 1e3
    opts = GridSampleOptions(GridSampleMode.Bicubic)
    first = grid_sample_backward(x, grid, runtime.tensor(go), opts)[0].numpy()
    for _ in range(2):
        assert np.array_equal(grid_sample_backward(x, grid, runtime.tensor(go), opts)[0].numpy(), first)
    go[0, 1, 3, 3] = np.inf
    go[0, 0, 5, 5] = np.nan
    dx = grid_sample_backward(x, grid, runtime.tensor(go), opts)[0].numpy()
    assert np.isnan(dx[0, 0]).any() and not np.isnan(dx[0, 1]).all()
    assert np.isinf(dx[0, 1]).any() or np.isnan(dx[0, 1]).any()
    assert np.isfinite(dx[0, 0]).any()


@pytest.mark.parametrize("dims", [2, 3])
def test_nearest_gives_zero_grid_gradient(runtime, rng, dims):
    """Zero even where a sampled pixel is NaN or inf (its value times the zero slope is NaN)."""
    spatial = (4, 5) if dims == 2 else (3, 4, 5)
    x = rng.standard_normal((1, 2, *spatial)).astype(np.float32)
    x.reshape(-1)[rng.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf] * 2
    grid = runtime.tensor(rng.uniform(-1, 1, (1, *(3,) * dims, dims)).astype(np.float32))
    go = runtime.tensor(np.ones((1, 2, *(3,) * dims), np.float32))
    for padding in GridSamplePaddingMode:
        opts = GridSampleOptions(GridSampleMode.Nearest, padding)
        grad_grid = grid_sample_backward(runtime.tensor(x), grid, go, opts)[1].numpy()
        assert grad_grid.shape == (1, *(3,) * dims, dims) and not grad_grid.any()


# ---------------------------------------------------------------------------- empty, errors
@pytest.mark.feature("grid_sample: errors")
def test_empty_grids_return_empty_or_zero_without_launching(runtime, launches):
    x = runtime.tensor(np.ones((2, 3, 4, 5), np.float32))
    grid = runtime.tensor(np.zeros((2, 0, 6, 2), np.float32))
    y = grid_sample(x, grid)
    assert y.shape == (2, 3, 0, 6)
    dx, dgrid = grid_sample_backward(x, grid, y)
    assert dx.shape == (2, 3, 4, 5) and not dx.numpy().any() and dgrid.shape == (2, 0, 6, 2)
    e = runtime.tensor(np.ones((0, 3, 4, 5), np.float16))
    assert grid_sample(e, runtime.tensor(np.ones((0, 2, 2, 2), np.float16))).shape == (0, 3, 2, 2)
    assert launches[0] == 0


def _bad_calls(rt):
    x = rt.tensor(np.ones((2, 3, 4, 5), np.float32))
    grid = rt.tensor(np.zeros((2, 6, 7, 2), np.float32))
    go = rt.tensor(np.ones((2, 3, 6, 7), np.float32))
    x5 = rt.tensor(np.ones((1, 1, 2, 2, 2), np.float32))
    g5 = rt.tensor(np.zeros((1, 2, 2, 2, 3), np.float32))
    other = foreign(grid)
    bicubic = GridSampleOptions(GridSampleMode.Bicubic)
    return [
        ("input must be", lambda: grid_sample(np.ones((2, 3, 4, 5)), grid)),
        ("input must be F32", lambda: grid_sample(rt.tensor(np.ones((2, 3, 4, 5), np.int32)), grid)),
        ("rank 4", lambda: grid_sample(rt.tensor(np.ones((2, 3, 4), np.float32)), grid)),
        ("spatial axes must be > 0", lambda: grid_sample(rt.tensor(np.ones((2, 3, 0, 5), np.float32)), grid)),
        ("grid must have rank 4", lambda: grid_sample(x, g5)),
        ("batch size N = 2", lambda: grid_sample(x, rt.tensor(np.zeros((3, 6, 7, 2), np.float32)))),
        ("grid's last axis must be 2", lambda: grid_sample(x, rt.tensor(np.zeros((2, 6, 7, 3), np.float32)))),
        ("grid's last axis must be 3", lambda: grid_sample(x5, rt.tensor(np.zeros((1, 2, 2, 2, 2), np.float32)))),
        ("grid must have the dtype of input", lambda: grid_sample(x, rt.tensor(np.zeros((2, 6, 7, 2), np.float16)))),
        ("Bicubic needs a 4-D input", lambda: grid_sample(x5, g5, bicubic)),
        ("options must be", lambda: grid_sample(x, grid, "bilinear")),
        ("options.mode", lambda: grid_sample(x, grid, GridSampleOptions("bilinear"))),
        ("options.padding_mode", lambda: grid_sample(x, grid, GridSampleOptions(padding_mode="zeros"))),
        ("options.align_corners", lambda: grid_sample(x, grid, GridSampleOptions(align_corners=0))),
        ("out_grad must have shape [2, 3, 6, 7]",
         lambda: grid_sample_backward(x, grid, rt.tensor(np.ones((2, 3, 7, 6), np.float32)))),
        ("out_grad must be", lambda: grid_sample_backward(x, grid, None)),
        ("on runtime 'other'", lambda: grid_sample(x, other)),
        ("on runtime 'other'", lambda: grid_sample_backward(x, grid, foreign(go))),
    ]


@pytest.mark.feature("grid_sample: errors")
def test_every_error_rule_before_launch(runtime, launches):
    assert_each_rejected(_bad_calls(runtime), GridSampleError)
    assert launches[0] == 0


@pytest.mark.parametrize("mode", MODES)
def test_forward_matches_numpy_reference(runtime, rng, mode):
    """The float64 model of tests/reference (no torch needed), every padding mode and alignment."""
    x = rng.standard_normal((1, 5, 5, 6)).astype(np.float32)  # 5 channels: 4 sampled at once, then 1
    grid = rng.uniform(-1.3, 1.3, (1, 4, 3, 2)).astype(np.float32)
    for pad in PADS:
        for align in (False, True):
            got = grid_sample(runtime.tensor(x), runtime.tensor(grid), GridSampleOptions(mode, pad, align)).numpy()
            want = ref.grid_sample(x, grid, mode.value, pad.value, align)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{pad} {align}")


# ---------------------------------------------------------------------------- channels-last forward
@needs_torch
@pytest.mark.parametrize("dtype, tol, vectors, transpose", [("f32", dict(rtol=1e-5, atol=1e-5), 1, 2),
                                                            ("f32", dict(rtol=1e-5, atol=1e-5), 2, 4),
                                                            ("bf16", dict(rtol=4e-2, atol=4e-2), 1, 4)])
def test_channels_last_forward_matches_torch(runtime, rng, monkeypatch, dtype, tol, vectors, transpose):
    """channels_last.py (what GPUs run for many channels), forced on this runtime with few
    channels, `vectors` vectors a unit and tap and `transpose` elements a transpose access
    (where they divide): every mode × padding mode × align_corners in 2-D and 3-D, odd and
    even sizes, points of a batch item straddling cubes, grids reaching outside, a NaN pixel;
    the same samples as the direct kernel (bit for bit in F32; within a rounding of the
    dtype otherwise, where a device may contract products differently)."""
    import dataclasses

    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    monkeypatch.setattr(tuning, "CHANNELS_LAST", True)
    monkeypatch.setattr(tuning, "CHANNELS_LAST_MIN_BYTES", 0)
    monkeypatch.setattr(tuning, "FORWARD_CHOOSE_CHANNELS", 0)   # the channels-last form alone
    monkeypatch.setattr(tuning, "CHANNELS_LAST_VECTORS", vectors)
    monkeypatch.setattr(tuning, "TRANSPOSE_LANES", transpose)
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")   # each call picks its kernel anew (no records)
    forced = (lambda caps, *a: tuning.channels_last_lanes(dataclasses.replace(caps, units_are_simd_lanes=False), *a))
    np_dtype = kd.as_dtype(dtype).np
    cases = [(2, 16, (5, 7), (9, 6)), (2, 8, (9, 4), (3, 11)), (3, 8, (3, 4, 5), (2, 3, 4))]
    for dims, c, size_in, size_out in cases:
        x = rng.standard_normal((2, c, *size_in)).astype(np_dtype)
        x[1, 2].flat[3] = np.nan
        grid = rng.uniform(-1.25, 1.25, (2, *size_out, dims)).astype(np_dtype)
        assert forced(runtime.capabilities, c, 2, x.dtype.itemsize) > 0
        for mode in MODES if dims == 2 else (GridSampleMode.Bilinear, GridSampleMode.Nearest):
            for pad in PADS:
                for align in (False, True):
                    opts = GridSampleOptions(mode, pad, align)
                    monkeypatch.setattr(gs, "channels_last_lanes", forced)
                    got = grid_sample(runtime.tensor(x), runtime.tensor(grid), opts).numpy()
                    monkeypatch.setattr(gs, "channels_last_lanes", lambda *a: 0)
                    direct = grid_sample(runtime.tensor(x), runtime.tensor(grid), opts).numpy()
                    what = f"{opts} {size_in}->{size_out}"
                    if dtype == "f32":
                        np.testing.assert_array_equal(got, direct, err_msg=what)
                    else:
                        np.testing.assert_allclose(got.astype(np.float32), direct.astype(np.float32), rtol=2**-7,
                                                   atol=2**-7, err_msg=what)
                    want = torch.nn.functional.grid_sample(
                        torch.from_numpy(x.astype(np.float64)), torch.from_numpy(grid.astype(np.float64)),
                        mode=mode.value.lower(), padding_mode=pad.value.lower(), align_corners=align).numpy()
                    np.testing.assert_allclose(got.astype(np.float64), want, **tol, err_msg=what)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_forward_chosen_on_the_device_is_the_direct_kernels(runtime, rng, monkeypatch, dtype):
    """FORWARD_CHOOSE_CHANNELS beside the channels-last forward (forced on this runtime): both
    forms launched, gated (gate.py), the device running chunks.py's on a smooth grid and the
    channels-last one on a random grid; then every grid smooth (limit 2^31 - 1) and every grid
    rough (limit 0). Each form, given its own zeroed output, writes it only where chosen; the
    samples are the direct kernel's (bit for bit in F32; within a rounding of the dtype
    otherwise, where a device may contract products differently)."""
    import dataclasses

    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    monkeypatch.setattr(tuning, "CHANNELS_LAST", True)
    monkeypatch.setattr(tuning, "CHANNELS_LAST_MIN_BYTES", 0)
    monkeypatch.setattr(tuning, "FORWARD_CHOOSE_CHANNELS", 3)   # chunks of 3, 3 and 2 channels
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")   # each call picks its kernels anew (no records)
    forced = (lambda caps, *a: tuning.channels_last_lanes(dataclasses.replace(caps, units_are_simd_lanes=False), *a))
    size_in, size_out = (20, 24), (18, 22)
    x = rng.standard_normal((2, 8, *size_in)).astype(kd.as_dtype(dtype).np)
    x[1, 2].flat[3] = np.nan
    grids = {"smooth": _affine_points(2, size_out, 2).astype(x.dtype),
             "random": rng.uniform(-1.1, 1.1, (2, *size_out, 2)).astype(x.dtype)}
    opts = GridSampleOptions(GridSampleMode.Bilinear, GridSamplePaddingMode.Border, True)
    real_chunks, real_last = gs._sample_chunks, gs._sample_channels_last
    written = {}

    def own_output(name, real):   # the form writes a zeroed output of its own
        def run(x5, g5, out, *args, **kwargs):
            written[name] = out.runtime.zeros(out.shape, out.dtype)
            real(x5, g5, written[name], *args, **kwargs)
        return run

    for limit in (None, 2 ** 31 - 1, 0):
        if limit is not None:
            monkeypatch.setattr(gs._gate, "rough_limit", lambda points, v=limit: v)
        for name, grid in grids.items():
            what = f"{name} limit {limit}"
            monkeypatch.setattr(gs, "channels_last_lanes", lambda *a: 0)
            direct = grid_sample(runtime.tensor(x), runtime.tensor(grid), opts).numpy()
            monkeypatch.setattr(gs, "channels_last_lanes", forced)
            got = grid_sample(runtime.tensor(x), runtime.tensor(grid), opts).numpy()
            if dtype == "f32":
                np.testing.assert_array_equal(got, direct, err_msg=what)
            else:
                np.testing.assert_allclose(got.astype(np.float32), direct.astype(np.float32), rtol=2**-7, atol=2**-7,
                                           err_msg=what)
            monkeypatch.setattr(gs, "_sample_chunks", own_output("chunks", real_chunks))
            monkeypatch.setattr(gs, "_sample_channels_last", own_output("last", real_last))
            grid_sample(runtime.tensor(x), runtime.tensor(grid), opts)
            monkeypatch.setattr(gs, "_sample_chunks", real_chunks)
            monkeypatch.setattr(gs, "_sample_channels_last", real_last)
            chosen = "chunks" if limit == 2 ** 31 - 1 or (limit is None and name == "smooth") else "last"
            other = "last" if chosen == "chunks" else "chunks"
            # (as F32, exact for 16-bit floats: numpy compares NaNs by position only for its own float
            # types, and on numpy 2.5 with ml_dtypes two bf16 NaNs compared unequal)
            np.testing.assert_array_equal(written[chosen].numpy().astype(np.float32), got.astype(np.float32),
                                          err_msg=what)
            assert not np.any(written[other].numpy().astype(np.float32)), what


def test_channels_last_is_chosen_from_the_channels_and_capabilities(runtime, monkeypatch):
    """tuning.channels_last_lanes: on by default, off when CHANNELS_LAST is; vectors of up to 16
    bytes whose groups divide a cube, for channels filling a memory line, never where units are
    SIMD lanes."""
    import dataclasses

    from rudnn.grid_sample import tuning
    from rudnn.grid_sample.tuning import channels_last_lanes
    gpu = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False)
    cpu = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True)
    assert channels_last_lanes(gpu, 64, 32, 2) == 8       # bf16: 8 units a point
    monkeypatch.setattr(tuning, "CHANNELS_LAST", False)
    assert channels_last_lanes(gpu, 64, 32, 2) == 0
    monkeypatch.setattr(tuning, "CHANNELS_LAST", True)
    assert channels_last_lanes(gpu, 64, 32, 4) == 4       # f32: 16 units a point
    assert channels_last_lanes(gpu, 96, 32, 4) == 0       # 24 or 48 groups do not divide 256
    assert channels_last_lanes(gpu, 32, 32, 2) == 0       # 64 bytes a point: the direct kernel
    assert channels_last_lanes(gpu, 64, 70000, 2) == 0    # more batch items than the transpose's grid
    assert channels_last_lanes(cpu, 64, 32, 2) == 0


# ---------------------------------------------------------------------------- SIMD-lane kernels
@needs_torch
@pytest.mark.interpreter
def test_lane_kernels_forced_match_torch_and_the_direct_kernel(runtime, rng, monkeypatch):
    """lanes.py (what devices whose units are SIMD lanes run), forced on this runtime with
    cubes of 4 points: rows of 6 (the last cube masked) and 8 (cubes tiling the row), an even
    channel count (planes a scatter cube) and an odd one, every padding mode × alignment in
    2-D, bicubic and 3-D, a NaN and an infinite grid coordinate, the scatter's planes in
    shared memory and (no shared memory to spare) in a scratch tensor. Against torch
    (float64) and the direct kernel: the same forward bit for bit, gradients within rounding."""
    import dataclasses

    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    monkeypatch.setattr(tuning, "LANE_UNITS", 4)
    monkeypatch.setattr(tuning, "LANE_MIN_UNITS", 4)
    B = GridSampleMode.Bilinear
    lanes = (lambda caps, *a: tuning.lane_plan(dataclasses.replace(caps, units_are_simd_lanes=True), *a))
    unshared = (lambda caps, *a: tuning.lane_plan(dataclasses.replace(caps, units_are_simd_lanes=True,
                                                                      max_shared_bytes=0), *a))
    assert lanes(runtime.capabilities, B, 2, 35, 18, 4).shared and not unshared(runtime.capabilities, B, 2, 35, 18, 4).shared
    assert tuning.lane_plan(dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False),
                            GridSampleMode.Bilinear, 2, 35, 6, 4) is None
    cases = [(2, B, 4, (5, 7), (3, 6)), (2, GridSampleMode.Bicubic, 3, (6, 5), (2, 8)),
             (2, GridSampleMode.Nearest, 4, (4, 9), (3, 6)), (3, B, 2, (3, 4, 5), (2, 3, 6))]
    for dims, mode, c, size_in, size_out in cases:
        for pad in PADS:
            for align in (False, True):
                opts = GridSampleOptions(mode, pad, align)
                monkeypatch.setattr(gs, "lane_plan", lanes)
                check_against_torch(runtime, rng, dims, mode, opts, size_in, size_out, tol=dict(rtol=1e-5, atol=1e-5))
    x = rng.standard_normal((2, 4, 5, 7)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (2, 3, 6, 2)).astype(np.float32)
    grid[0, 1, 2, 0], grid[1, 2, 5, 1], grid[1, 0, 0, 0] = np.nan, np.inf, 1e30
    go = rng.standard_normal((2, 4, 3, 6)).astype(np.float32)
    for pad in PADS:
        opts = GridSampleOptions(B, pad, False)
        got = []
        for plan in (lanes, unshared, lambda *a: None):   # lanes.py (shared, scratch), then the direct kernels
            monkeypatch.setattr(gs, "lane_plan", plan)
            args = runtime.tensor(x), runtime.tensor(grid)
            got.append((grid_sample(*args, opts).numpy(), *(t.numpy() for t in grid_sample_backward(
                *args, runtime.tensor(go), opts))))
        for lane in got[:2]:
            np.testing.assert_array_equal(lane[0], got[2][0], err_msg=str(opts))
            for a, b in zip(lane[1:], got[2][1:]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=str(opts))
        np.testing.assert_array_equal(got[0][1], got[1][1])   # the same sums, wherever the planes live


@needs_torch
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_lane_scatter_of_8_planes_adds_what_the_plane_scatter_adds(runtime, rng, monkeypatch, dtype):
    """lanes_scatter.scatter_planes (the input gradient of channels in groups of 8 where units
    are SIMD lanes: 8 planes interleaved, a tap one vector read-modify-write), forced on this
    runtime: 8 and 16 channels (one and two cubes a batch item), points and pixels in whole
    vectors and not (15 points, 35 pixels), out_grad starting 4 elements into its memory,
    bilinear, nearest and bicubic, 3-D, many points on few pixels. dx must equal the
    plane-at-a-time scatter's bit for bit (the same products summed in the same order), and
    torch's within rounding."""
    import dataclasses

    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    monkeypatch.setattr(gs, "lane_plan", lambda caps, *a: tuning.lane_plan(
        dataclasses.replace(caps, units_are_simd_lanes=True), *a))
    launched = _count_launches(monkeypatch, gs._lanes_scatter.scatter_planes)
    B = GridSampleMode.Bilinear
    cases = [(B, 8, (4, 6), (4, 4), False), (B, 16, (5, 7), (3, 5), False), (B, 8, (4, 6), (4, 4), True),
             (GridSampleMode.Nearest, 8, (3, 8), (4, 2), False), (GridSampleMode.Bicubic, 8, (4, 4), (2, 4), False),
             (B, 8, (2, 3, 4), (2, 2, 4), False), (B, 16, (2, 4), (8, 8), False)]
    np_dtype = kd.as_dtype(dtype).np
    for mode, c, size_in, size_out, shifted in cases:
        dims = len(size_in)
        x = rng.standard_normal((2, c, *size_in)).astype(np_dtype)
        grid = rng.uniform(-1.2, 1.2, (2, *size_out, dims)).astype(np_dtype)
        go = rng.standard_normal((2, c, *size_out)).astype(np_dtype)
        if shifted:   # out_grad 4 elements into its memory: whole vectors no longer aligned
            go_t = runtime.tensor(np.concatenate([np.zeros(4, np_dtype), go.reshape(-1)]))[4:].reshape(go.shape)
        else:
            go_t = runtime.tensor(go)
        opts = GridSampleOptions(mode, GridSamplePaddingMode.Border, False)
        dxs = []
        for vector in (True, False):
            monkeypatch.setattr(tuning, "VECTOR_SCATTER", vector)
            dx, _ = grid_sample_backward(runtime.tensor(x), runtime.tensor(grid), go_t, opts)
            dxs.append(np.asarray(dx.numpy(), np.float32))
        what = f"{mode} C={c} {size_in}->{size_out} shifted={shifted}"
        np.testing.assert_array_equal(dxs[0].view(np.uint32), dxs[1].view(np.uint32), err_msg=what)
        _, want, _ = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
        tol = 1e-5 if dtype == "f32" else 3e-2
        np.testing.assert_allclose(dxs[0], want, rtol=tol, atol=tol * 4, err_msg=what)
    assert launched() == len(cases)


# ---------------------------------------------------------------------------- channels-last backward
@needs_torch
@pytest.mark.interpreter
def test_channels_last_backward_forced_matches_torch_and_the_direct_kernel(runtime, rng, monkeypatch):
    """backward_last.py (GPUs with a native i64 atomic add), forced on this runtime: 4 units a
    point (channels 8: 2 each) and, for 6 channels, 2, reading out_grad through shared memory
    (the cube's rows straddling batch items); points straddling cubes; every mode,
    every padding mode (bilinear), 2-D and 3-D, align on and off; F32 and BF16; a NaN and an
    infinite out_grad.
    The input gradient is bit for bit the direct kernel's (the same fixed-point integers added
    in another order) and the same when run again; gradients within rounding of torch (float64)."""
    import dataclasses

    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    if kd.i64 not in runtime.capabilities.atomics["add"]:
        pytest.skip(f"{runtime.capabilities.device_name} has no 64-bit atomic add")
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    monkeypatch.setattr(tuning, "BACKWARD_CHANNELS_LAST", True)
    monkeypatch.setattr(tuning, "BACKWARD_GROUP", 4)
    monkeypatch.setattr(tuning, "BACKWARD_STAGED_CHANNELS", 6)   # 6 channels: out_grad through shared memory
    monkeypatch.setattr(tuning, "BACKWARD_GATHER", False)   # (the gathered input gradient otherwise)
    monkeypatch.setattr(gs, "lane_plan", lambda *a: None)   # (the cpu runtime's lanes.py otherwise)
    monkeypatch.setattr(gs, "small_backward", lambda *a: False)   # (small.py otherwise)
    gpu = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False)
    assert tuning.backward_group(gpu, 8, 2) == 4 and tuning.backward_group(gpu, 6, 2) == 2
    assert tuning.backward_staged_channels(6, 2) == 6 and tuning.backward_staged_channels(8, 4) == 0
    assert tuning.backward_group(dataclasses.replace(gpu, atomics={}), 8, 2) == 0
    assert tuning.backward_group(runtime.capabilities, 8, 2) == (0 if runtime.capabilities.units_are_simd_lanes else 4)
    forced = (lambda caps, *a: tuning.backward_group(gpu, *a))
    direct = (lambda *a: 0)
    launched = _count_launches(monkeypatch, gs._bwd_last.backward_channels_last)
    cases = [(2, GridSampleMode.Bilinear, 8, (5, 7), (9, 6), np.float32),
             (2, GridSampleMode.Bicubic, 6, (6, 5), (3, 8), np.float32),
             (2, GridSampleMode.Nearest, 8, (4, 9), (3, 6), np.float32),
             (3, GridSampleMode.Bilinear, 8, (3, 4, 5), (2, 3, 4), np.float32),
             (2, GridSampleMode.Bilinear, 6, (5, 7), (9, 6), kd.bf16.np)]
    for i, (dims, mode, c, size_in, size_out, dtype) in enumerate(cases):
        x = rng.standard_normal((2, c, *size_in)).astype(dtype)
        grid = rng.uniform(-1.2, 1.2, (2, *size_out, dims)).astype(dtype)
        go = rng.standard_normal((2, c, *size_out)).astype(dtype)
        for pad in PADS if i == 0 else PADS[i % 3:i % 3 + 1]:   # (the taps are coords.py's, tested above)
            opts = GridSampleOptions(mode, pad, pad == GridSamplePaddingMode.Border)
            args = runtime.tensor(x), runtime.tensor(grid), runtime.tensor(go)
            got = {}
            for name, pick in (("last", forced), ("direct", direct)):
                monkeypatch.setattr(gs, "backward_group", pick)
                before = launched()
                got[name] = [t.numpy().astype(np.float32) for t in grid_sample_backward(*args, opts)]
                assert launched() - before == (name == "last"), name
            what = f"{opts} {size_in}->{size_out} {np.dtype(dtype).name}"
            np.testing.assert_array_equal(got["last"][0], got["direct"][0], err_msg="input grad " + what)
            tol = 1e-5 if dtype == np.float32 else 2 ** -7
            scale = np.abs(got["direct"][1]).max() + 1
            np.testing.assert_allclose(got["last"][1], got["direct"][1], rtol=tol, atol=tol * scale, err_msg=what)
            if dtype == np.float32:
                _, gx, gg = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
                np.testing.assert_allclose(got["last"][0], gx, rtol=1e-5, atol=1e-5, err_msg=what)
                np.testing.assert_allclose(got["last"][1], gg, rtol=1e-5 * max(size_in), atol=1e-5 * max(size_in),
                                           err_msg=what)
    # many points on few pixels, twice (and the direct kernel's order of contributions above);
    # non-finite out_grad values make NaN / ±inf pixels, only in their planes
    x = rng.standard_normal((1, 8, 4, 5)).astype(np.float32)
    grid = rng.uniform(-0.6, 0.6, (1, 16, 16, 2)).astype(np.float32)
    go = rng.standard_normal((1, 8, 16, 16)).astype(np.float32) * 1e3
    monkeypatch.setattr(gs, "backward_group", forced)
    args = runtime.tensor(x), runtime.tensor(grid)
    first = grid_sample_backward(*args, runtime.tensor(go))[0].numpy()
    assert np.array_equal(grid_sample_backward(*args, runtime.tensor(go))[0].numpy(), first)
    go[0, 1, 3, 3], go[0, 0, 5, 5] = np.inf, np.nan
    dx = grid_sample_backward(*args, runtime.tensor(go))[0].numpy()
    assert np.isnan(dx[0, 0]).any() and (np.isinf(dx[0, 1]).any() or np.isnan(dx[0, 1]).any())
    assert np.isfinite(dx[0, 2:]).all()


def _count_launches(monkeypatch, kernel):
    """Counts the launches of `kernel` from here on (a callable returning the count)."""
    count = [0]
    launch = type(kernel).__getitem__

    def counted(self, grid):
        if self is kernel:
            count[0] += 1
        return launch(self, grid)
    monkeypatch.setattr(type(kernel), "__getitem__", counted)
    return lambda: count[0]


@pytest.mark.interpreter
def test_tiled_direct_forward_matches_the_flat_one(runtime, rng, monkeypatch):
    """sample.sample_forward with a cube a tile of grid points (tuning.FORWARD_TILE_W: 8 points
    wide, and 128 wide with 2 rows), forced where units are not SIMD lanes: tiles cut at the
    plane's edges, 2-D (bilinear, bicubic) and 3-D: the flat kernel's samples bit for bit."""
    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    monkeypatch.setattr(gs, "lane_plan", lambda *a: None)
    monkeypatch.setattr(tuning, "FORWARD_CHANNELS", 0)   # (chunks.py otherwise)
    assert tuning.forward_tiles((5, 7), 3) == (0, 1)
    for dims, size_in, size_out in ((2, (5, 7), (9, 13)), (3, (3, 4, 5), (2, 3, 4))):
        x = rng.standard_normal((2, 3, *size_in)).astype(np.float32)
        grid = rng.uniform(-1.2, 1.2, (2, *size_out, dims)).astype(np.float32)
        for mode in (GridSampleMode.Bilinear, GridSampleMode.Bicubic) if dims == 2 else (GridSampleMode.Bilinear,):
            opts = GridSampleOptions(mode, GridSamplePaddingMode.Reflection)
            got = []
            for tw in (0, 8, 128):
                monkeypatch.setattr(tuning, "FORWARD_TILE_W", tw)
                got.append(grid_sample(runtime.tensor(x), runtime.tensor(grid), opts).numpy())
            np.testing.assert_array_equal(got[1], got[0], err_msg=str(opts))
            np.testing.assert_array_equal(got[2], got[0], err_msg=str(opts))
    monkeypatch.setattr(tuning, "FORWARD_TILE_W", 8)
    assert tuning.forward_tiles((9, 13), 4) == (8, 4 * 1 * 2)


@pytest.mark.interpreter
def test_channel_chunk_forward_matches_the_direct_kernel(runtime, rng, monkeypatch):
    """chunks.sample_chunks, forced where units are not SIMD lanes (on GPUs it is the default
    below the channels-last form), at most 2 channels a unit of 5 (chunks of 2-2-1) with every
    plane loading its channels at once (bound 2^20 pixels a lane), one at a time (0), and as
    chunks.plane_compact decides (4 pixels a lane: every plane of the smooth grid loads them
    at once, the random grid's planes both ways), then at most 4 and 8 (chunks of 3-2 and 5)
    as plane_compact decides: 2-D (every mode, zeros and reflection padding, a NaN pixel) and
    3-D, a batch of 2 whose points do not fill the last cube: sample.sample_forward's samples
    bit for bit, and (2-D) the float64 model of tests/reference."""
    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    from rudnn.grid_sample.chunks import sample_chunks
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    monkeypatch.setattr(gs, "lane_plan", lambda *a: None)
    monkeypatch.setattr(gs, "UNITS", 16)
    monkeypatch.setattr(tuning, "UNITS", 16)
    monkeypatch.setattr(tuning, "CHANNELS_LAST", False)
    monkeypatch.setattr(tuning, "FORWARD_AT_ONCE_CHANNELS", 1)
    assert tuning.forward_area(1) == tuning.FORWARD_AREA
    monkeypatch.setattr(tuning, "FORWARD_AT_ONCE_CHANNELS", 8)
    assert tuning.forward_area(7) == 0 and tuning.forward_area(8) == tuning.FORWARD_AREA
    monkeypatch.setattr(tuning, "FORWARD_AT_ONCE_CHANNELS", 1)   # (the chunks below have 1 to 5)
    monkeypatch.setattr(tuning, "FORWARD_CHANNELS", 2)
    assert [tuning.forward_chunk(c, 100) for c in (1, 2, 5, 8)] == [1, 2, 2, 2]
    assert tuning.forward_chunk(5, 2 ** 31) == 0
    monkeypatch.setattr(tuning, "FORWARD_CHANNELS", 8)
    assert [tuning.forward_chunk(c, 100) for c in (3, 8, 9, 12, 64)] == [3, 8, 5, 6, 8]
    launches = _count_launches(monkeypatch, sample_chunks)
    ys, xs = np.meshgrid(np.linspace(-0.8, 0.8, 9), np.linspace(-0.9, 0.9, 13), indexing="ij")
    smooth = np.stack([np.cos(0.2) * xs - np.sin(0.2) * ys, np.sin(0.2) * xs + np.cos(0.2) * ys], -1)
    cases = [(2, np.broadcast_to(smooth, (2, 9, 13, 2)).astype(np.float32)),
             (2, rng.uniform(-1.2, 1.2, (2, 9, 13, 2)).astype(np.float32)),
             (3, rng.uniform(-1.2, 1.2, (2, 2, 3, 4, 3)).astype(np.float32))]
    calls = 0
    for dims, grid in cases:
        x = rng.standard_normal((2, 5, *((9, 11) if dims == 2 else (3, 4, 5)))).astype(np.float32)
        x[(1, 3) + (2,) * dims] = np.nan
        modes = tuple(GridSampleMode) if dims == 2 else (GridSampleMode.Bilinear, GridSampleMode.Nearest)
        for mode in modes:
            for padding in (GridSamplePaddingMode.Zeros, GridSamplePaddingMode.Reflection):
                opts = GridSampleOptions(mode, padding, align_corners=padding is GridSamplePaddingMode.Zeros)
                monkeypatch.setattr(tuning, "FORWARD_CHANNELS", 0)
                want = grid_sample(runtime.tensor(x), runtime.tensor(grid), opts).numpy()
                if dims == 2:   # the direct kernel itself against the float64 model (NaNs where it has them)
                    np.testing.assert_allclose(want, ref.grid_sample(x, grid, mode.value, padding.value,
                                                                     opts.align_corners), rtol=1e-5, atol=1e-5)
                for k, area in ((2, 2 ** 20), (2, 0), (2, 4), (4, 4), (8, 4)):
                    monkeypatch.setattr(tuning, "FORWARD_CHANNELS", k)
                    monkeypatch.setattr(tuning, "FORWARD_AREA", area)
                    got = grid_sample(runtime.tensor(x), runtime.tensor(grid), opts).numpy()
                    np.testing.assert_array_equal(got, want, err_msg=f"{opts} K {k} area {area}")
                    calls += 1
    assert launches() == calls == 5 * (2 * 3 * 2 + 2 * 2)


@pytest.mark.interpreter
def test_staged_forward_matches_the_direct_kernel(runtime, rng, monkeypatch):
    """staged.py forced where units are not SIMD lanes, with tiles of 4 rows of 4 points (cubes
    of 16 units) and 3 channels staged at a time (of 5: the last group partial), boxes of at
    most 60 pixels: a smooth (rotated) grid whose bilinear boxes fit (15 to 36 pixels), a
    random grid whose boxes do not (80 to 99: the cubes gather), tiles cut at the plane's
    edges, every mode, every padding mode (bilinear), a NaN pixel: the direct kernel's
    samples bit for bit, and the float64 reference's."""
    import dataclasses

    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    monkeypatch.setattr(gs, "lane_plan", lambda *a: None)
    monkeypatch.setattr(gs, "UNITS", 16)
    monkeypatch.setattr(tuning, "UNITS", 16)
    for k, v in (("STAGED_FORWARD", True), ("STAGED_TILE_W", 4), ("STAGED_CHANNELS", 3), ("STAGED_AREA", 60)):
        monkeypatch.setattr(tuning, k, v)
    gpu = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False)
    assert tuning.staged_plan(gpu, 2, (9, 11), 4) == (4, 3, 60) and tuning.staged_plan(gpu, 3, (2, 9, 11), 4) is None
    staged = (lambda caps, *a: tuning.staged_plan(gpu, *a))
    x = rng.standard_normal((2, 5, 9, 11)).astype(np.float32)
    x[1, 3, 4, 5] = np.nan
    h, w = 7, 10
    ys, xs = np.meshgrid(np.linspace(-0.8, 0.8, h), np.linspace(-0.9, 0.9, w), indexing="ij")
    a = 0.2
    smooth = np.stack([np.cos(a) * xs - np.sin(a) * ys, np.sin(a) * xs + np.cos(a) * ys], -1)
    grids = {"smooth": np.broadcast_to(smooth, (2, h, w, 2)).astype(np.float32),
             "random": rng.uniform(-1.2, 1.2, (2, h, w, 2)).astype(np.float32)}
    for name, grid in grids.items():
        for mode, pads in ((GridSampleMode.Bilinear, PADS), (GridSampleMode.Nearest, PADS[1:2]),
                           (GridSampleMode.Bicubic, PADS[2:])):
            for pad in pads:
                opts = GridSampleOptions(mode, pad, pad == GridSamplePaddingMode.Zeros)
                got = []
                for plan in (staged, lambda *a: None):
                    monkeypatch.setattr(gs, "staged_plan", plan)
                    got.append(grid_sample(runtime.tensor(x), runtime.tensor(grid), opts).numpy())
                what = f"{name} {opts}"
                np.testing.assert_array_equal(got[0], got[1], err_msg=what)
                want = ref.grid_sample(x, grid, mode.value, pad.value, opts.align_corners)
                np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5, err_msg=what)
    xb, gb = runtime.tensor(x.astype(kd.bf16.np)), runtime.tensor(grids["smooth"].astype(kd.bf16.np))
    got = []
    for plan in (staged, lambda *a: None):   # BF16: the stage in the input's dtype
        monkeypatch.setattr(gs, "staged_plan", plan)
        got.append(grid_sample(xb, gb).numpy().astype(np.float32))
    np.testing.assert_array_equal(got[0], got[1])


# ---------------------------------------------------------------------------- SIMD lanes, channels last
def _last_forced(monkeypatch, units=4, vectors=2, points=8, span=4):
    """lanes_last.py forced on this runtime (its plan as where units are SIMD lanes, any element
    size) with small vectors, cubes and copy spans; replay off (each call picks anew)."""
    import dataclasses

    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    for k, v in (("LAST_UNITS", units), ("LAST_VECTORS", vectors), ("LAST_POINTS", points), ("ROWS_SPAN", span),
                 ("LAST_ITEMSIZES", (2, 4)), ("LANE_LAST", True), ("LANE_LAST_BACKWARD", True)):
        monkeypatch.setattr(tuning, k, v)
    forced = (lambda caps, *a, **k: tuning.lane_last_plan(dataclasses.replace(caps, units_are_simd_lanes=True), *a,
                                                          **k))
    monkeypatch.setattr(gs, "lane_last_plan", forced)
    return gs, forced


def _check_last(rt, rng, opts, c, size_in, size_out, dtype=np.float32, tol=None, grid=None, go=None):
    """lanes_last.py's forward and gradients against torch (float64) on C channels."""
    dims = len(size_in)
    x = rng.standard_normal((2, c, *size_in)).astype(dtype)
    grid = rng.uniform(-1.25, 1.25, (2, *size_out, dims)).astype(dtype) if grid is None else grid.astype(dtype)
    go = rng.standard_normal((2, c, *size_out)).astype(dtype) if go is None else go.astype(dtype)
    y, gx, gg = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
    tol = tol or dict(rtol=1e-5, atol=1e-5)
    what = f"{opts} C={c} {size_in}->{size_out}"
    np.testing.assert_allclose(grid_sample(rt.tensor(x), rt.tensor(grid), opts).numpy().astype(np.float64), y,
                               **tol, err_msg=what)
    dx, dgrid = grid_sample_backward(rt.tensor(x), rt.tensor(grid), rt.tensor(go), opts)
    np.testing.assert_allclose(dx.numpy().astype(np.float64), gx, **tol, err_msg="input grad " + what)
    scale = max(size_in) * c ** 0.5   # the grid gradient: size/2 times a sum over the channels
    np.testing.assert_allclose(dgrid.numpy().astype(np.float64), gg, rtol=tol["rtol"] * scale,
                               atol=tol["atol"] * scale, err_msg="grid grad " + what)
    return dx.numpy()


@needs_torch
@pytest.mark.interpreter
def test_channels_last_lane_kernels_forced_match_torch(runtime, rng, monkeypatch):
    """lanes_last.py (the cpu runtime's forward where channels fill whole vectors), forced with
    vectors of 4 channels, up to 2 a cube, cubes of 8 points and transposes of 4 positions:
    4 channels (one vector), 8 (two), 16 and 24 (two a cube, 2 and 3 cubes along y); every
    mode × padding mode × alignment in 2-D, 3-D, points that fill their cubes and points that
    leave the last cube of each batch item masked; BF16 and F16, forward and backward (its
    switch on). Channels the vectors do not divide (6) get no plan, nor 16-bit inputs without
    LAST_ITEMSIZES, nor (by default) the backward."""
    import dataclasses

    from rudnn.grid_sample import tuning
    gs, forced = _last_forced(monkeypatch)
    launched = _count_launches(monkeypatch, gs._lanes_last.forward_last)
    caps = runtime.capabilities
    assert forced(caps, 6, 2, 35, 4) is None                      # 6 channels: lanes.py
    assert forced(caps, 16, 2, 35, 4) == tuning.LastPlan(4, 2, 2, 8, 4)
    assert forced(caps, 24, 2, 35, 4) == tuning.LastPlan(4, 2, 3, 8, 4)
    assert tuning.lane_last_plan(dataclasses.replace(caps, units_are_simd_lanes=False), 16, 2, 35, 4) is None
    monkeypatch.setattr(tuning, "LAST_ITEMSIZES", (4,))
    assert forced(caps, 16, 2, 35, 2) is None                     # 16-bit: lanes.py where LAST_ITEMSIZES says
    monkeypatch.setattr(tuning, "LAST_ITEMSIZES", (2, 4))
    monkeypatch.setattr(tuning, "LANE_LAST_BACKWARD", False)
    assert forced(caps, 16, 2, 35, 4, backward=True) is None and forced(caps, 16, 2, 35, 4) is not None
    monkeypatch.setattr(tuning, "LANE_LAST_BACKWARD", True)
    cases = [(GridSampleMode.Bilinear, 8, (5, 7), (3, 6)), (GridSampleMode.Bilinear, 16, (4, 6), (4, 4)),
             (GridSampleMode.Nearest, 8, (4, 9), (3, 5)), (GridSampleMode.Bicubic, 4, (6, 5), (2, 8))]
    for mode, c, size_in, size_out in cases:
        for pad in PADS:
            for align in (False, True):
                _check_last(runtime, rng, GridSampleOptions(mode, pad, align), c, size_in, size_out)
    for mode in (GridSampleMode.Bilinear, GridSampleMode.Nearest):   # 3-D; three channel cubes
        _check_last(runtime, rng, GridSampleOptions(mode, PADS[0], False), 24, (3, 4, 5), (2, 3, 3))
        _check_last(runtime, rng, GridSampleOptions(mode, PADS[2], True), 8, (2, 3, 5), (2, 2, 4))
    assert launched() > 0
    for dtype, tol in (("f16", dict(rtol=5e-3, atol=5e-3)), ("bf16", dict(rtol=4e-2, atol=4e-2))):
        for mode in (GridSampleMode.Bilinear, GridSampleMode.Bicubic):
            _check_last(runtime, rng, GridSampleOptions(mode, GridSamplePaddingMode.Border), 8, (6, 9), (5, 4),
                        kd.as_dtype(dtype).np, tol)


@needs_torch
@pytest.mark.parametrize("span", [8, 16])
def test_rows_copied_in_blocks_match_torch(runtime, rng, monkeypatch, span):
    """lanes_last's copy to channels-last rows (to_rows: a one-unit cube `span` positions, 8 × 8
    blocks transposed in vectors where rows and planes start at multiples of 8 elements, else
    element by element), forced with vectors of 4 channels: planes of 48 positions in whole
    blocks (8 and 16 channels: one and two blocks a step; 3-D; F16), 35 positions, 12 channels
    (4 a step) and an input starting 4 elements into its memory element by element; forward
    and gradients against torch."""
    from rudnn.grid_sample import tuning
    assert tuning.rows_copy(16, 48, 0, 8) == (8, True) and tuning.rows_copy(16, 35, 0, 8) == (8, False)
    assert tuning.rows_copy(12, 48, 0, 8) == (4, False) and tuning.rows_copy(16, 48, 4, 8) == (8, False)
    assert tuning.rows_copy(16, 48, 0, 12) == (8, False)   # cubes of 12 positions: the second starts unaligned
    gs, _ = _last_forced(monkeypatch, span=span)
    seen = []
    chosen = tuning.rows_copy
    monkeypatch.setattr(tuning, "rows_copy", lambda *a: seen.append(chosen(*a)) or seen[-1])
    copies = _count_launches(monkeypatch, gs._lanes_last.to_rows)
    opts = GridSampleOptions(GridSampleMode.Bilinear, GridSamplePaddingMode.Zeros, False)
    _check_last(runtime, rng, opts, 16, (6, 8), (3, 6))
    _check_last(runtime, rng, opts, 8, (4, 12), (5, 4))
    _check_last(runtime, rng, opts, 12, (5, 7), (3, 6))
    _check_last(runtime, rng, GridSampleOptions(GridSampleMode.Nearest, GridSamplePaddingMode.Border, True), 8,
                (2, 4, 6), (2, 2, 3))
    _check_last(runtime, rng, opts, 8, (6, 8), (5, 4), np.float16, dict(rtol=5e-3, atol=5e-3))
    x = rng.standard_normal((4 + 2 * 8 * 48,)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (2, 3, 5, 2)).astype(np.float32)
    view = runtime.tensor(x)[4:].reshape(2, 8, 6, 8)
    want, _, _ = torch_grads(x[4:].reshape(2, 8, 6, 8).astype(np.float64), grid.astype(np.float64),
                             np.zeros((2, 8, 3, 5)), opts)
    np.testing.assert_allclose(grid_sample(view, runtime.tensor(grid), opts).numpy(), want, rtol=1e-5, atol=1e-5)
    assert (8, True) in seen and (4, False) in seen and (8, False) in seen and copies() == len(seen)


@needs_torch
@pytest.mark.interpreter
def test_channels_last_lane_kernels_agree_with_lanes_and_are_deterministic(runtime, rng, monkeypatch):
    """lanes_last.py forced against lanes.py on the same calls (its forward: the same sums in
    the same order; its gradients within rounding), with NaN / ±inf / huge grid coordinates
    (outside, as the other kernels and torch's CUDA ones; torch's CPU gives NaN) in every
    padding mode; a bitwise-repeatable input gradient with many grid points on few pixels;
    non-finite out_grad values reaching only their taps' pixels."""
    import dataclasses

    from rudnn.grid_sample import tuning
    gs, forced = _last_forced(monkeypatch)
    lanes = (lambda caps, *a: tuning.lane_plan(dataclasses.replace(caps, units_are_simd_lanes=True), *a))
    x = rng.standard_normal((2, 8, 4, 5)).astype(np.float32)
    grid = rng.uniform(-0.7, 0.7, (2, 9, 7, 2)).astype(np.float32)
    go = (rng.standard_normal((2, 8, 9, 7)) * 1e3).astype(np.float32)
    args = runtime.tensor(x), runtime.tensor(grid)
    odd = grid.copy()
    odd[0, 1, 2, 0], odd[1, 2, 5, 1], odd[1, 0, 0, 0], odd[0, 0, 1, 1] = np.nan, np.inf, 1e30, -np.inf
    for g, pad in ((grid, PADS[0]), (odd, PADS[0]), (odd, PADS[1]), (odd, PADS[2])):
        opts = GridSampleOptions(GridSampleMode.Bilinear, pad, False)
        got = []
        for last, lane in ((forced, lambda *a: None), (lambda *a, **k: None, lanes)):
            monkeypatch.setattr(gs, "lane_last_plan", last)
            monkeypatch.setattr(gs, "lane_plan", lane)
            ga = runtime.tensor(x), runtime.tensor(g)
            got.append((grid_sample(*ga, opts).numpy(),
                        *(t.numpy() for t in grid_sample_backward(*ga, runtime.tensor(go), opts))))
        np.testing.assert_array_equal(got[0][0], got[1][0], err_msg=str(opts))
        for a, b in zip(got[0][1:], got[1][1:]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max(), err_msg=str(opts))
        if g is grid:
            first = got[0][1]
    monkeypatch.setattr(gs, "lane_last_plan", forced)
    for _ in range(2):
        assert np.array_equal(grid_sample_backward(*args, runtime.tensor(go))[0].numpy(), first)
    go[0, 1, 3, 3] = np.inf
    go[1, 0, 5, 5] = np.nan
    grid[0, 3, 3] = 5.0   # (all its taps outside: its inf reaches no pixel)
    dx = grid_sample_backward(runtime.tensor(x), runtime.tensor(grid), runtime.tensor(go))[0].numpy()
    assert np.isfinite(dx[0]).all()
    assert np.isnan(dx[1, 0]).any() and np.isfinite(dx[1, 0]).any() and np.isfinite(dx[1, 1:]).all()


def test_lane_forms_are_timed_once_a_key_and_the_faster_runs(runtime, rng, monkeypatch, tmp_path):
    """lane_forms.py, both SIMD-lane forwards forced on this runtime: a call of at least
    TUNE_MIN_ELEMENTS (0 here) first times both forms (a warm-up and three timed runs each),
    then runs the faster; the next call of its key runs that form alone, untimed. A smaller
    call runs lanes_last.py, untimed. Every call gives the same bits, the reference's values.
    The tuner's clock is fake, so that each form wins once."""
    import dataclasses

    from kerneldsl import autotune
    from rudnn.grid_sample import lane_forms, tuning
    gs, _ = _last_forced(monkeypatch)
    monkeypatch.setattr(gs, "lane_plan", lambda caps, *a: tuning.lane_plan(
        dataclasses.replace(caps, units_are_simd_lanes=True), *a))
    last_runs = _count_launches(monkeypatch, gs._lanes_last.forward_last)
    lane_runs = _count_launches(monkeypatch, gs._lanes.forward_lanes)
    x = rng.standard_normal((2, 8, 5, 7)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (2, 3, 6, 2)).astype(np.float32)
    args = runtime.tensor(x), runtime.tensor(grid)
    want = ref.grid_sample(x, grid, GridSampleMode.Bilinear.value, GridSamplePaddingMode.Zeros.value, False)
    results = []
    # (clock readings: three rounds of a timed run of lanes_last, then one of lanes; the winner's take 1,
    # the other's 10)
    for winner, spans in ((lane_forms.LANES, (10, 1)), (lane_forms.LAST, (1, 10))):
        readings = iter([t for _ in range(3) for span in spans for t in (0, span)])
        tuner = autotune.Tuner(lane_forms.FAMILY, quiet=True, clock=lambda: next(readings))
        monkeypatch.setattr(autotune, "tuner", lambda family: tuner)
        monkeypatch.setattr(autotune, "path", lambda family, d=tmp_path / winner: d / f"{family}.json")
        monkeypatch.setattr(lane_forms, "TUNE_MIN_ELEMENTS", 0)
        for call in range(2):
            last, lanes = last_runs(), lane_runs()
            results.append(grid_sample(*args).numpy())
            timed = 4 if call == 0 else 0   # (a warm-up and three timed runs of each form)
            assert (last_runs() - last, lane_runs() - lanes) == (
                timed + (winner == lane_forms.LAST), timed + (winner == lane_forms.LANES)), (winner, call)
            assert tuner.tuned == 1
        monkeypatch.setattr(lane_forms, "TUNE_MIN_ELEMENTS", x.size + results[-1].size + 1)
        last, lanes = last_runs(), lane_runs()
        results.append(grid_sample(*args).numpy())
        assert (last_runs() - last, lane_runs() - lanes) == (1, 0) and tuner.tuned == 1
    for got in results:
        np.testing.assert_array_equal(got, results[0])
    np.testing.assert_allclose(results[0], want, rtol=1e-5, atol=1e-5)


@needs_torch
def test_channels_last_lane_forward_is_the_default_where_units_are_simd_lanes(runtime, rng, monkeypatch):
    """With the default constants, a 16-channel F32 or BF16 forward runs lanes_last.py exactly
    where units are SIMD lanes (the cpu runtime), and matches torch; the backward keeps the
    other kernels (LANE_LAST_BACKWARD off)."""
    import rudnn.grid_sample as gs
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    forward = _count_launches(monkeypatch, gs._lanes_last.forward_last)
    backward = _count_launches(monkeypatch, gs._lanes_last.scatter_last)
    simd = runtime.capabilities.units_are_simd_lanes
    for dtype, tol in ((np.float32, dict(rtol=1e-5, atol=1e-5)), (kd.bf16.np, dict(rtol=4e-2, atol=4e-2))):
        x = rng.standard_normal((2, 16, 9, 11)).astype(dtype)
        grid = rng.uniform(-1.1, 1.1, (2, 7, 13, 2)).astype(dtype)
        before = forward()
        got = grid_sample(runtime.tensor(x), runtime.tensor(grid)).numpy().astype(np.float64)
        assert forward() - before == (1 if simd else 0)
        want = torch_grads(x.astype(np.float64), grid.astype(np.float64), np.ones((2, 16, 7, 13)), GridSampleOptions())[0]
        np.testing.assert_allclose(got, want, **tol)
        grid_sample_backward(runtime.tensor(x), runtime.tensor(grid), runtime.tensor(np.ones((2, 16, 7, 13), dtype)))
    assert backward() == 0




# ---------------------------------------------------------------------------- small backward
@needs_torch
@pytest.mark.interpreter
def test_small_backward_is_one_launch_and_matches_torch(runtime, rng, monkeypatch):
    """small.py, forced on this runtime (lanes.py off): one launch gives both gradients for every
    mode and padding mode, 2-D and 3-D, align on and off, F32 and BF16, within rounding of
    torch (float64) and of the fixed-point scatter; the same bits when run again; a NaN and an
    infinite out_grad make NaN / ±inf pixels only in their own planes."""
    import rudnn.grid_sample as gs
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    monkeypatch.setattr(gs, "lane_plan", lambda *a: None)
    monkeypatch.setattr(gs, "lane_last_plan", lambda *a, **k: None)
    monkeypatch.setattr(gs, "backward_gather_channels", lambda *a: 0)   # the reference: the fixed-point scatter
    monkeypatch.setattr(gs, "backward_group", lambda *a: 0)
    small = _count_launches(monkeypatch, gs._small.small_backward)
    cases = [(2, mode, pad, align, (5, 7), (4, 6), np.float32) for mode in MODES for pad in PADS
             for align in (False, True)]
    cases += [(3, GridSampleMode.Bilinear, pad, False, (3, 4, 5), (2, 3, 4), np.float32) for pad in PADS]
    cases += [(3, GridSampleMode.Nearest, GridSamplePaddingMode.Zeros, True, (1, 2, 3), (2, 1, 3), np.float32),
              (2, GridSampleMode.Bilinear, GridSamplePaddingMode.Border, False, (6, 1), (1, 5), kd.bf16.np)]
    if runtime.name == "interpreter":  # slow (31 s for all): one 2-D case a mode, one 3-D bilinear, the last
        # two; every case runs on cpu and opencl
        cases = cases[0:18:6] + [cases[18]] + cases[-2:]
    for dims, mode, pad, align, size_in, size_out, dtype in cases:
        x = rng.standard_normal((2, 3, *size_in)).astype(dtype)
        grid = rng.uniform(-1.2, 1.2, (2, *size_out, dims)).astype(dtype)
        go = rng.standard_normal((2, 3, *size_out)).astype(dtype)
        opts = GridSampleOptions(mode, pad, align)
        args = runtime.tensor(x), runtime.tensor(grid), runtime.tensor(go)
        what = f"{opts} {size_in}->{size_out} {np.dtype(dtype).name}"
        monkeypatch.setattr(gs, "small_backward", lambda *a: True)
        before = small()
        dx, dgrid = (t.numpy().astype(np.float32) for t in grid_sample_backward(*args, opts))
        assert small() - before == 1, what
        again = grid_sample_backward(*args, opts)[0].numpy().astype(np.float32)
        assert np.array_equal(dx, again), what
        monkeypatch.setattr(gs, "small_backward", lambda *a: False)
        sdx, sdgrid = (t.numpy().astype(np.float32) for t in grid_sample_backward(*args, opts))
        assert small() - before == 2, what   # (the two small calls above only)
        tol = 1e-5 if dtype == np.float32 else 2 ** -7
        np.testing.assert_allclose(dx, sdx, rtol=tol, atol=tol * (np.abs(sdx).max() + 1), err_msg=what)
        np.testing.assert_array_equal(dgrid, sdgrid, err_msg=what)   # (the same kernel function, no scatter)
        if dtype == np.float32:
            _, gx, gg = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
            np.testing.assert_allclose(dx, gx, rtol=1e-5, atol=1e-5, err_msg=what)
            np.testing.assert_allclose(dgrid, gg, rtol=1e-5 * max(size_in), atol=1e-5 * max(size_in), err_msg=what)
    monkeypatch.setattr(gs, "small_backward", lambda *a: True)
    x = runtime.tensor(rng.standard_normal((1, 2, 4, 5)).astype(np.float32))
    grid = runtime.tensor(rng.uniform(-0.6, 0.6, (1, 16, 16, 2)).astype(np.float32))
    go = rng.standard_normal((1, 2, 16, 16)).astype(np.float32)
    go[0, 1, 3, 3] = np.inf
    go[0, 0, 5, 5] = np.nan
    dx = grid_sample_backward(x, grid, runtime.tensor(go))[0].numpy()
    assert np.isnan(dx[0, 0]).any() and np.isfinite(dx[0, 0]).any()
    assert np.isinf(dx[0, 1]).any() and not np.isnan(dx[0, 1]).any()


def test_small_backward_takes_small_calls_only():
    from rudnn.grid_sample import tuning
    assert tuning.small_backward(1 * 4 * 8 * 8, 64)   # the host-time benchmark's call
    assert not tuning.small_backward(4 * 16 * 128 * 128, 128 * 128)   # issue 19's benchmark shape
    assert tuning.small_backward(tuning.SMALL_BACKWARD_ELEMENTS, tuning.SMALL_BACKWARD_POINTS)
    assert not tuning.small_backward(16, tuning.SMALL_BACKWARD_POINTS + 1)
    assert not tuning.small_backward(tuning.SMALL_BACKWARD_ELEMENTS + 1, 4)


# ---------------------------------------------------------------------------- gathered input gradient
def _force_gather(monkeypatch, runtime, **constants):
    """backward_gather.py forced on this runtime (its coverage as on a GPU; lanes.py off):
    returns (use_gather, use_scatter) switches and a launch counter of its gather kernel."""
    import dataclasses

    import rudnn.grid_sample as gs
    from rudnn.grid_sample import tuning
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")   # each call picks its kernels anew
    monkeypatch.setattr(gs, "lane_plan", lambda *a: None)
    monkeypatch.setattr(gs, "small_backward", lambda *a: False)
    monkeypatch.setattr(gs, "backward_group", lambda *a: 0)   # the reference: sample.py's fixed-point scatter
    for k, v in constants.items():
        monkeypatch.setattr(tuning, k, v)
    gpu = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False)
    on = (lambda caps, *a: tuning.backward_gather_channels(gpu, *a))
    launched = _count_launches(monkeypatch, gs._gather.gather_input_grad)
    return (lambda: monkeypatch.setattr(gs, "backward_gather_channels", on),
            lambda: monkeypatch.setattr(gs, "backward_gather_channels", lambda *a: 0), launched)


def _both_backwards(runtime, use_gather, use_scatter, launched, x, grid, go, opts):
    """(gathered, scattered) backward results as float32 numpy arrays; checks which ran."""
    args = runtime.tensor(x), runtime.tensor(grid), runtime.tensor(go)
    got = []
    for use, runs in ((use_gather, 1), (use_scatter, 0)):
        use()
        before = launched()
        got.append([t.numpy().astype(np.float32) for t in grid_sample_backward(*args, opts)])
        assert launched() - before == runs
    return got


def test_gather_coverage_follows_mode_capabilities_and_switch(runtime, monkeypatch):
    """tuning.backward_gather_channels: K = 8 channels in any dtype, or BACKWARD_GATHER_BYTES of
    them where set (halved until it divides them); none for bicubic, where units are SIMD lanes,
    while the switch is off, or past 32-bit cells."""
    import dataclasses

    from rudnn.grid_sample import tuning
    gpu = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False)
    lanes = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True)
    B, N, Bc = GridSampleMode.Bilinear, GridSampleMode.Nearest, GridSampleMode.Bicubic
    assert tuning.backward_gather_channels(gpu, B, 2, (1, 8, 8), 64, 2, 128, 4) == 8
    assert tuning.backward_gather_channels(gpu, N, 3, (3, 8, 8), 64, 2, 128, 2) == 8
    assert tuning.backward_gather_channels(gpu, B, 2, (1, 8, 8), 6, 2, 128, 4) == 2
    assert tuning.backward_gather_channels(gpu, B, 2, (1, 8, 8), 3, 2, 128, 4) == 1
    assert tuning.backward_gather_channels(gpu, Bc, 2, (1, 8, 8), 64, 2, 128, 4) == 0
    assert tuning.backward_gather_channels(lanes, B, 2, (1, 8, 8), 64, 2, 128, 4) == 0
    assert tuning.backward_gather_channels(gpu, B, 2, (1, 2 ** 16, 2 ** 16), 64, 1, 128, 4) == 0
    assert tuning.gather_cells(B, 2, (1, 5, 7)) == 6 * 8 and tuning.gather_cells(B, 3, (1, 5, 7)) == 2 * 6 * 8
    assert tuning.gather_cells(N, 3, (3, 5, 7)) == 3 * 5 * 7
    monkeypatch.setattr(tuning, "BACKWARD_GATHER_BYTES", 32)
    assert tuning.backward_gather_channels(gpu, N, 3, (3, 8, 8), 64, 2, 128, 2) == 16
    assert tuning.backward_gather_channels(gpu, B, 2, (1, 8, 8), 64, 2, 128, 4) == 8
    monkeypatch.setattr(tuning, "BACKWARD_GATHER", False)
    assert tuning.backward_gather_channels(gpu, B, 2, (1, 8, 8), 64, 2, 128, 4) == 0


@needs_torch
@pytest.mark.interpreter
@pytest.mark.parametrize("dims, mode", [(2, GridSampleMode.Bilinear), (2, GridSampleMode.Nearest),
                                        (3, GridSampleMode.Bilinear), (3, GridSampleMode.Nearest)])
def test_gathered_input_gradient_is_the_scatters_bit_for_bit(runtime, rng, monkeypatch, dims, mode):
    """backward_gather.py forced on this runtime, against sample.py's fixed-point scatter and
    torch (float64): every padding mode × align_corners, grids reaching past the input, more
    cells than a scan block (several blocks), several channel ranges a pixel (K = 2 of 6
    channels), lists of records (BACKWARD_GATHER_RECORDS: weights from the record, not the
    grid), bilinear cells' lists walked as one, two entries a step (BACKWARD_GATHER_FLAT; nearest:
    a loop a cell),
    in 2-D with the walk that keeps no flags (BACKWARD_GATHER_FINITE_PATH): dx bit
    for bit the scatter's (the same integers summed in another order), the
    grid gradient within rounding, both within rounding of torch."""
    use_gather, use_scatter, launched = _force_gather(monkeypatch, runtime, BACKWARD_GATHER_BYTES=8,
                                                      BACKWARD_GATHER_FINITE_PATH=dims == 2,
                                                      BACKWARD_GATHER_FLAT=2 if mode == GridSampleMode.Bilinear else 0)
    size_in, size_out = ((13, 17), (9, 11)) if dims == 2 else ((3, 7, 9), (2, 5, 6))
    for pad in PADS:
        for align in (False, True):
            opts = GridSampleOptions(mode, pad, align)
            x = rng.standard_normal((2, 6, *size_in)).astype(np.float32)
            grid = rng.uniform(-1.3, 1.3, (2, *size_out, dims)).astype(np.float32)
            go = rng.standard_normal((2, 6, *size_out)).astype(np.float32)
            gathered, scattered = _both_backwards(runtime, use_gather, use_scatter, launched, x, grid, go, opts)
            what = f"{opts} {size_in}->{size_out}"
            np.testing.assert_array_equal(gathered[0], scattered[0], err_msg="input grad " + what)
            scale = np.abs(scattered[1]).max() + 1
            np.testing.assert_allclose(gathered[1], scattered[1], rtol=1e-5, atol=1e-5 * scale, err_msg=what)
            _, gx, gg = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
            np.testing.assert_allclose(gathered[0], gx, rtol=1e-5, atol=1e-5, err_msg="input grad " + what)
            np.testing.assert_allclose(gathered[1], gg, rtol=1e-5 * max(size_in), atol=1e-5 * max(size_in),
                                       err_msg="grid grad " + what)


@needs_torch
@pytest.mark.interpreter
@pytest.mark.parametrize("dtype, tol", [("f16", 5e-3), ("bf16", 4e-2)])
@pytest.mark.parametrize("form", ["last", "nchw", "direct"])
def test_gathered_input_gradient_half_dtypes_and_out_grad_layouts(runtime, rng, monkeypatch, dtype, tol, form):
    """F16 / BF16 (K = 16 of 16 channels, then 8 of 8 through out_grad's rows in shared memory
    for the grid gradient), out_grad read from its channels-last copy (as vectors) or [N, C,
    points] itself (BACKWARD_GATHER_LAST), or the grid gradient by sample.py's kernel with no
    copies (BACKWARD_GATHER_GRID_DIRECT); "nchw" with lists of indices alone (no records, the
    walk recomputes taps): dx bit for bit the scatter's, within the dtype's rounding of torch."""
    np_dtype = kd.as_dtype(dtype).np
    use_gather, use_scatter, launched = _force_gather(monkeypatch, runtime, BACKWARD_GATHER_LAST=form == "last",
                                                      BACKWARD_GATHER_GRID_DIRECT=form == "direct",
                                                      BACKWARD_STAGED_CHANNELS=8,
                                                      BACKWARD_GATHER_RECORDS=form != "nchw")
    for c, pad in ((16, GridSamplePaddingMode.Zeros), (8, GridSamplePaddingMode.Reflection)):
        opts = GridSampleOptions(GridSampleMode.Bilinear, pad, c == 8)
        x = rng.standard_normal((2, c, 6, 9)).astype(np_dtype)
        grid = rng.uniform(-1.2, 1.2, (2, 5, 4, 2)).astype(np_dtype)
        go = rng.standard_normal((2, c, 5, 4)).astype(np_dtype)
        gathered, scattered = _both_backwards(runtime, use_gather, use_scatter, launched, x, grid, go, opts)
        np.testing.assert_array_equal(gathered[0], scattered[0], err_msg=str(opts))
        _, gx, gg = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
        np.testing.assert_allclose(gathered[0], gx, rtol=tol, atol=tol, err_msg=str(opts))
        np.testing.assert_allclose(gathered[1], gg, rtol=tol * 9, atol=tol * 9, err_msg=str(opts))


@needs_torch
@pytest.mark.interpreter
@pytest.mark.parametrize("dims, mode", [(2, GridSampleMode.Bilinear), (3, GridSampleMode.Bilinear),
                                        (2, GridSampleMode.Nearest)])
def test_grid_gradient_a_few_channels_a_step_keeps_its_bits(runtime, rng, monkeypatch, dims, mode):
    """The grid gradient of the form without copies (sample.sample_backward, which also finds
    max |out_grad|) with GRID_GRAD_CHANNELS = 1, 3 and 4 channels a step over 7 channels
    (whole steps and a remainder; one out_grad value infinite): grad_grid and dx bit for bit
    the same, and within rounding of torch where out_grad is finite."""
    from rudnn.grid_sample import tuning
    use_gather, _, launched = _force_gather(monkeypatch, runtime, BACKWARD_GATHER_GRID_DIRECT=True)
    use_gather()
    size_in, size_out = ((9, 11), (6, 7)) if dims == 2 else ((3, 5, 6), (2, 4, 5))
    opts = GridSampleOptions(mode, GridSamplePaddingMode.Border, False)
    x = rng.standard_normal((2, 7, *size_in)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (2, *size_out, dims)).astype(np.float32)
    go = rng.standard_normal((2, 7, *size_out)).astype(np.float32)
    bad = go.copy()
    bad.reshape(-1)[5] = np.inf
    for values in (go, bad):
        got = {}
        for cu in (1, 3, 4):
            monkeypatch.setattr(tuning, "GRID_GRAD_CHANNELS", cu)
            before = launched()
            got[cu] = [t.numpy() for t in grid_sample_backward(runtime.tensor(x), runtime.tensor(grid),
                                                               runtime.tensor(values), opts)]
            assert launched() - before == 1
        for cu in (3, 4):
            for one, other in zip(got[1], got[cu]):
                np.testing.assert_array_equal(other, one, err_msg=f"{cu} channels a step, {opts}")
    _, gx, gg = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
    monkeypatch.setattr(tuning, "GRID_GRAD_CHANNELS", 4)
    dx, dgrid = (t.numpy() for t in grid_sample_backward(runtime.tensor(x), runtime.tensor(grid), runtime.tensor(go),
                                                          opts))
    np.testing.assert_allclose(dx, gx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dgrid, gg, rtol=1e-4, atol=1e-4 * max(size_in))


@pytest.mark.interpreter
@pytest.mark.parametrize("flags, direct", [(1, False), (3, False), (10, False), (10, True)])
def test_gathered_input_gradient_degenerate_grids_and_nonfinite_values(runtime, rng, monkeypatch, flags, direct):
    """Every point of an item at one location (one cell's long list, walked by 4 pixels), every
    point outside the input (empty lists: dx zero), infinite grid coordinates under every padding
    mode (finite out_grad: the walk without flags), NaN grid coordinates (no taps), and NaN /
    ±inf out_grad values (NaN / ±inf pixels, as the scatter's flags; flag bits kept 1, 3 or 10
    channels a word: K = 4 channels in 4, 2 or 1 words; with 1 and 10, finite out_grad takes the
    walk that keeps no flags; with 1, lists of indices alone, no records, an entry a step of
    the walk over the cells' lists together; with 3, a loop a cell; with 10, two entries a
    step; `direct`: no copies, the grid gradient's kernel finding max |out_grad| and its
    non-finite values): bit for bit the scatter's."""
    use_gather, use_scatter, launched = _force_gather(monkeypatch, runtime, BACKWARD_GATHER_FLAGS=flags,
                                                      BACKWARD_GATHER_GRID_DIRECT=direct,
                                                      BACKWARD_GATHER_FINITE_PATH=flags != 3,
                                                      BACKWARD_GATHER_RECORDS=flags != 1,
                                                      BACKWARD_GATHER_FLAT={1: 1, 3: 0, 10: 2}[flags])
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    go = rng.standard_normal((2, 4, 12, 10)).astype(np.float32) * 1e3
    grid = np.empty((2, 12, 10, 2), np.float32)
    grid[0] = (0.13, -0.21)                     # item 0: one location for all 120 points
    grid[1] = (3.5, -7.0)                       # item 1: all outside (zeros padding: no taps at all)
    for pad in PADS:
        for mode in (GridSampleMode.Bilinear, GridSampleMode.Nearest):
            opts = GridSampleOptions(mode, pad, False)
            gathered, scattered = _both_backwards(runtime, use_gather, use_scatter, launched, x, grid, go, opts)
            np.testing.assert_array_equal(gathered[0], scattered[0], err_msg=str(opts))
            assert np.count_nonzero(gathered[0][0, 0]) == (4 if mode == GridSampleMode.Bilinear else 1)
            if pad == GridSamplePaddingMode.Zeros:
                assert not gathered[0][1].any()
    grid = rng.uniform(-1, 1, (2, 12, 10, 2)).astype(np.float32)
    grid[0, 2, :3] = [(np.inf, 0.3), (-np.inf, 0.5), (0.2, np.inf)]   # infinite coordinates
    for pad in PADS:   # (finite out_grad: the walk that keeps no flags, FINITE_PATH)
        opts = GridSampleOptions(GridSampleMode.Bilinear, pad, pad == GridSamplePaddingMode.Border)
        gathered, scattered = _both_backwards(runtime, use_gather, use_scatter, launched, x, grid,
                                              rng.standard_normal(go.shape).astype(np.float32), opts)
        np.testing.assert_array_equal(gathered[0], scattered[0], err_msg=str(opts))
    grid[0, 3, 4, 0] = grid[1, 0, 1, 1] = np.nan
    grid[1, 1, 1] = grid[1, 0, 0]               # +inf and -inf on the same pixels: NaN
    go[0, 1, 3, 3], go[0, 0, 5, 5], go[1, 2, 0, 0], go[1, 2, 1, 1] = np.inf, np.nan, np.inf, -np.inf
    gathered, scattered = _both_backwards(runtime, use_gather, use_scatter, launched, x, grid, go, GridSampleOptions())
    np.testing.assert_array_equal(gathered[0], scattered[0])
    assert np.isnan(gathered[0][0, 0]).any() and np.isnan(gathered[0][1, 2]).any()
    assert np.isfinite(gathered[0][:, 3]).all()


@kd.kernel
def _fixed_contributions(v: kd.Tensor[kd.f32, 1], max_bits: kd.Tensor[kd.u32, 1], q: kd.Tensor[kd.i64, 1],
                         n: kd.i32, HEADROOM: kd.Const[int]):
    """q[i] = fixed_point.fixed_of(v[i]) at the scale max_bits gives (a test of the helper alone)."""
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        q[i] = fixed_of(v[i], fixed_scale(max_bits[0], HEADROOM))


@pytest.mark.interpreter
def test_fixed_point_contributions_are_exact_truncations(runtime, rng):
    """fixed_point.fixed_of in F32 gives trunc(v·2^k) exactly (Python's exact ldexp), k =
    188 − HEADROOM − (max |out_grad|'s exponent field), for maxima from subnormal (k past 127:
    two factors) to near F32's largest (k negative), values from the maximum down to ones that
    truncate to 0, both signs: the integers every kernel and back end adds must agree."""
    import math
    room = 18
    for top in (np.float32(2.0 ** -140), np.float32(1e-30), np.float32(1.0), np.float32(3.7e4),
                np.float32(2.0 ** 126)):
        bits = int(np.array([top], np.float32).view(np.uint32)[0])
        k = 188 - room - ((bits >> 23) & 255)
        mags = top * np.concatenate([[1.0, 0.999], rng.uniform(0, 1, 20), 2.0 ** -np.arange(10, 80, 7)])
        v = (mags.astype(np.float32) * rng.choice([-1, 1], mags.size)).astype(np.float32)
        q = runtime.empty((v.size,), kd.i64)
        _fixed_contributions[1, 64](runtime.tensor(v), runtime.tensor(np.array([bits, 0], np.uint32)), q, v.size, room)
        want = [math.trunc(math.ldexp(float(x), k)) for x in v]
        assert q.numpy().tolist() == want, (top, k)
        assert max(abs(w) for w in want) < 2 ** (63 - room)


def test_out_grad_copy_finds_the_same_maximum_as_abs_max_bits(runtime, rng):
    """The backward's channels-last copy of out_grad (`_to_channels_last` with max_bits) writes
    what fixed_point.abs_max_bits does: the bits of the largest finite |value| and the flag
    for a non-finite or huge one (NaN, ±inf, 2^127 each alone), over tiles that do not fill
    the cube (C and S not multiples of 32) and vectors of 1 and 2 elements; the copy is the
    transpose either way."""
    import rudnn.grid_sample as gs
    for c, s, scale in ((5, 37, 1.0), (64, 66, 3e-20), (3, 7, 1e30)):
        x = (rng.standard_normal((2, c, 1, 1, s)) * scale).astype(np.float32)
        cases = [None, ("nan", np.nan), ("inf", -np.inf), ("huge", np.float32(2.0 ** 127))]
        for case in cases:
            y = x.copy()
            if case is not None:
                y[1, c - 1, 0, 0, s // 2] = case[1]
            t = runtime.tensor(y)
            fused, alone = runtime.zeros((2,), kd.u32), runtime.zeros((2,), kd.u32)
            rows = gs._to_channels_last(t, fused)
            gs._abs_max(t, alone)
            np.testing.assert_array_equal(fused.numpy(), alone.numpy(), err_msg=f"{c} {s} {case}")
            np.testing.assert_array_equal(rows.numpy().reshape(2, s, c), y.reshape(2, c, s).transpose(0, 2, 1))
            want = np.float32(np.abs(y[np.isfinite(y)]).max())   # (a huge value counts: it is finite)
            assert fused.numpy()[0] == want.view(np.uint32), (c, s, case)
            assert (fused.numpy()[1] != 0) == (case is not None), (c, s, case)


# ---------------------------------------------------------------------------- the device's choice of form (gate.py)
def _first_taps(grid, size):
    """Each point's first tap index along x, y (, z) for zeros padding, align_corners False
    (coords.axis_taps: floor of the pixel coordinate, clamped into the input), in numpy."""
    taps = []
    for axis, n in enumerate(reversed(size)):   # grid's last axis is x (the input's last axis)
        u = ((grid[..., axis].astype(np.float32) + np.float32(1)) * np.float32(n) - np.float32(1)) * np.float32(0.5)
        taps.append(np.clip(np.floor(u), 0, n - 1).astype(np.int64).reshape(-1))
    return taps


def _rough_steps(grid, size):
    """Points e ≥ 1 (flat, over the batch) whose first taps lie more than gate.ROUGH_STEP
    pixels (|dx| + |dy| + |dz|) from point e − 1's: count_rough's count, in numpy."""
    from rudnn.grid_sample.gate import ROUGH_STEP
    apart = sum(np.abs(np.diff(t)) for t in _first_taps(grid, size))
    return int(np.count_nonzero(apart > ROUGH_STEP))


def _affine_points(n, size_out, dims, angle=0.2, zoom=0.9):
    """A smooth grid [n, *size_out, dims]: a rotation (about z in 3-D) and a zoom."""
    axes = np.meshgrid(*[np.linspace(-1, 1, s) for s in reversed(size_out)], indexing="xy")
    pts = np.stack([a.T if dims == 2 else a.transpose(2, 0, 1) for a in axes], -1).reshape(-1, dims)
    rot = np.eye(dims)
    rot[:2, :2] = [[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]
    pts = (pts @ rot.T) * zoom
    return np.broadcast_to(pts.reshape(1, *size_out, dims), (n, *size_out, dims)).astype(np.float32)


@pytest.mark.interpreter
@pytest.mark.parametrize("dims", [2, 3])
def test_rough_steps_are_counted_on_the_device(runtime, rng, dims):
    """backward_gather.count_rough: the rough steps of a smooth (rotated, zoomed) grid and of a
    random one, exactly numpy's count; the smooth grid lies within gate.rough_limit and the
    random one beyond it."""
    import rudnn.grid_sample as gs
    from rudnn.grid_sample import gate, tuning
    size_in, size_out = ((40, 48), (36, 44)) if dims == 2 else ((6, 20, 24), (5, 18, 22))
    mode = GridSampleMode.Bilinear.value
    counts = {}
    for name, grid in (("smooth", _affine_points(2, size_out, dims)),
                       ("random", rng.uniform(-1.1, 1.1, (2, *size_out, dims)).astype(np.float32))):
        points = grid.size // dims
        got = runtime.zeros((1,), kd.u32)
        sizes = (1, *size_in) if dims == 2 else size_in
        gs._gather.count_rough[min(tuning.cubes(points), tuning.MAX_CUBES), tuning.UNITS](
            runtime.tensor(grid).reshape(grid.size), got, points, *sizes, 0, 0, mode, dims, tuning.UNITS)
        counts[name] = int(got.numpy()[0])
        assert counts[name] == _rough_steps(grid, size_in), name
    limit = gate.rough_limit(2 * int(np.prod(size_out)))
    assert counts["smooth"] <= limit < counts["random"], (counts, limit)


@pytest.mark.interpreter
def test_gated_kernels_run_only_for_their_form(runtime, rng, monkeypatch):
    """gate.gate_open in a kernel (abs_max_bits and the channels-last copy, which take it like
    every gated kernel): IF_SMOOTH runs where gate[0] ≤ limit, IF_ROUGH where it is above,
    ALWAYS whatever gate[0] holds; a kernel that does not run writes nothing. Then again with
    one cube a gated launch (tuning.gated_cubes): the copy's cube loops over the three batch
    items."""
    import rudnn.grid_sample as gs
    from rudnn.grid_sample import gate
    x = rng.standard_normal((3, 3, 1, 1, 10)).astype(np.float32)
    want = np.float32(np.abs(x).max()).view(np.uint32)
    t = runtime.tensor(x)
    steps = runtime.tensor(np.array([5], np.uint32))
    for one_cube in (False, True):
        if one_cube:
            monkeypatch.setattr(gs, "gated_cubes", lambda caps, blocks, gated: 1 if gated else blocks)
        for limit, when, runs in ((5, gate.IF_SMOOTH, True), (4, gate.IF_SMOOTH, False), (4, gate.IF_ROUGH, True),
                                  (5, gate.IF_ROUGH, False), (0, gate.ALWAYS, True)):
            what = (limit, when, one_cube)
            alone, fused = runtime.zeros((2,), kd.u32), runtime.zeros((2,), kd.u32)
            gs._abs_max(t, alone, (steps, limit, when))
            rows = gs._to_channels_last(t, fused, (steps, limit, when))
            assert alone.numpy()[0] == (want if runs else 0), what
            assert fused.numpy()[0] == (want if runs else 0), what
            if runs:
                np.testing.assert_array_equal(rows.numpy().reshape(3, 10, 3), x.reshape(3, 3, 10).transpose(0, 2, 1),
                                              err_msg=str(what))


def _backward_with(runtime, use, x, grid, go, opts) -> list:
    """grid_sample_backward's (dx, grad_grid) as float32 numpy arrays, after use()."""
    use()
    args = runtime.tensor(x), runtime.tensor(grid), runtime.tensor(go)
    return [t.numpy().astype(np.float32) for t in grid_sample_backward(*args, opts)]


@needs_torch
@pytest.mark.interpreter
def test_gathered_backward_chosen_on_the_device_is_the_scatters(runtime, rng, monkeypatch):
    """BACKWARD_GATHER_CHOOSE: both forms launched (their walks in one gather), the device
    running one. On a smooth and a random grid, with the limit of gate.rough_limit, then every
    grid smooth (limit 2^31 − 1) and every grid rough (limit 0: each grid here has rough
    steps), that last also with one cube a gated launch: dx bit for bit the scatter's, the
    grid gradient within rounding of it and of torch."""
    import rudnn.grid_sample as gs
    use_gather, use_scatter, launched = _force_gather(monkeypatch, runtime, BACKWARD_GATHER_BYTES=8,
                                                      BACKWARD_GATHER_CHOOSE=True)
    size_in, size_out = (20, 24), (18, 22)
    x = rng.standard_normal((2, 4, *size_in)).astype(np.float32)
    go = rng.standard_normal((2, 4, *size_out)).astype(np.float32)
    grids = {"smooth": _affine_points(2, size_out, 2),
             "random": rng.uniform(-1.1, 1.1, (2, *size_out, 2)).astype(np.float32)}
    opts = GridSampleOptions()
    for limit, one_cube in ((None, False), (2 ** 31 - 1, False), (0, False), (0, True)):
        if limit is not None:
            monkeypatch.setattr(gs._gate, "rough_limit", lambda points, v=limit: v)
        if one_cube:   # the rough form's gated launches (tuning.gated_cubes) looping over every block
            monkeypatch.setattr(gs, "gated_cubes", lambda caps, blocks, gated: 1 if gated else blocks)
        for name, grid in grids.items():
            what = f"{name} limit {limit}{' one cube' if one_cube else ''}"
            before = launched()
            gathered = _backward_with(runtime, use_gather, x, grid, go, opts)
            assert launched() - before == 1, what   # both forms' walks in one gather
            scattered = _backward_with(runtime, use_scatter, x, grid, go, opts)
            np.testing.assert_array_equal(gathered[0], scattered[0], err_msg=what)
            scale = np.abs(scattered[1]).max() + 1
            np.testing.assert_allclose(gathered[1], scattered[1], rtol=1e-5, atol=1e-5 * scale, err_msg=what)
            _, _, gg = torch_grads(x.astype(np.float64), grid.astype(np.float64), go.astype(np.float64), opts)
            np.testing.assert_allclose(gathered[1], gg, rtol=1e-4, atol=1e-4 * scale, err_msg=what)
