"""rudnn.interpolation (SPEC §8) on every runtime: PyTorch CPU (forward, and backward through
autograd) over a sweep of sizes and modes, float64 numpy references for what torch lacks
(Lanczos3, Bicubic in 1-D and 3-D), F16/BF16, strided and NaN inputs, determinism, and
every error rule before any launch."""
import dataclasses

import numpy as np
import pytest

import kerneldsl as kd
from family_checks import assert_each_rejected, foreign
import rudnn.interpolation as interpolation_package
from reference import interpolation as ref
from rudnn.interpolation.tuning import lane_factor, lane_launch, lane_units, plan_launch, width_phases
from rudnn.interpolation import InterpolateMode, InterpolateOptions, InterpolationError, interpolate, \
    interpolate_backward

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the oracle extra is installed in CI
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch CPU (the oracle extra) is not installed")

pytestmark = pytest.mark.feature("interpolation")
M = InterpolateMode
TORCH_MODE = {(M.Nearest, 1): "nearest", (M.Nearest, 2): "nearest", (M.Nearest, 3): "nearest",
              (M.NearestExact, 2): "nearest-exact", (M.Linear, 1): "linear", (M.Linear, 2): "bilinear",
              (M.Linear, 3): "trilinear", (M.Bicubic, 2): "bicubic"}
# (input, output) spatial sizes per rank: upsampling, downsampling, odd sizes, size-1 axes
SIZES = {1: [((7,), (16,)), ((13,), (5,)), ((1,), (3,)), ((6,), (1,))],
         2: [((5, 7), (11, 4)), ((8, 8), (16, 16)), ((1, 6), (3, 6)), ((9, 2), (4, 1))],
         3: [((3, 4, 5), (6, 3, 7)), ((2, 1, 3), (1, 2, 5))]}
F32_TOL = dict(rtol=1e-5, atol=2e-6)
LOW_TOL = {"f16": dict(rtol=4e-3, atol=4e-3), "bf16": dict(rtol=3e-2, atol=3e-2)}


def aligns(mode):
    return [False] if mode in (M.Nearest, M.NearestExact) else [False, True]


@needs_torch
@pytest.mark.parametrize("mode, dims", list(TORCH_MODE))
def test_forward_and_backward_match_torch(runtime, rng, mode, dims):
    for align in aligns(mode):
        opts = InterpolateOptions(mode, align)
        for size_in, size_out in SIZES[dims]:
            x = rng.standard_normal((2, 3, *size_in)).astype(np.float32)
            g = rng.standard_normal((2, 3, *size_out)).astype(np.float32)
            tx = torch.tensor(x, requires_grad=True)
            kw = {} if mode in (M.Nearest, M.NearestExact) else {"align_corners": align}
            ty = F.interpolate(tx, size=size_out, mode=TORCH_MODE[mode, dims], **kw)
            ty.backward(torch.tensor(g))
            got = interpolate(runtime.tensor(x), size_out, opts).numpy()
            np.testing.assert_allclose(got, ty.detach().numpy(), **F32_TOL, err_msg=f"{size_in}->{size_out} {align}")
            dx = interpolate_backward(runtime.tensor(x), runtime.tensor(g), size_out, opts).numpy()
            np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-5,
                                       err_msg=f"backward {size_in}->{size_out} {align}")


@needs_torch
@pytest.mark.parametrize("outs, planes, wide", [(1, 1, False), (1, 3, True), (2, 8, False), (4, 2, True)])
def test_every_launch_shape_matches_torch(runtime, rng, monkeypatch, outs, planes, wide):
    """The forward and backward kernels forced to each launch shape (elements and planes a
    unit, forward vector stores where the width allows) on any runtime: odd plane counts that
    leave a group part full, widths that are and are not multiples of `outs`, size-1 axes,
    down- and upsampling, 1-3 spatial axes and non-contiguous inputs, with 32- and 64-bit
    (`wide`) index arithmetic, against torch (nearest's forward: bit for bit)."""
    elements = (lambda n: 2**31) if wide else (lambda n: n)
    monkeypatch.setattr(interpolation_package, "lane_plan", lambda *_: None)   # (test_lane_plans_match_torch)
    monkeypatch.setattr(interpolation_package, "forward_plan",
                        lambda caps, shape, n, *_: plan_launch(shape, elements(n), outs, planes))
    monkeypatch.setattr(interpolation_package, "backward_plan",
                        lambda caps, shape, n, *_: plan_launch(shape, elements(n), 1, planes))
    assert plan_launch((1, 1, 1, 1), elements(1), outs, planes).wide is wide
    cases = [((5, 7), (11, 4)), ((1, 6), (3, 6)), ((9, 2), (4, 1)), ((8, 8), (16, 16)), ((3, 5), (3, 9)),
             ((7,), (16,)), ((3, 4, 5), (6, 3, 7))]
    for mode in (M.Linear, M.Nearest):
        for align in aligns(mode):
            for size_in, size_out in cases:
                base = rng.standard_normal((3, 5, *size_in)).astype(np.float32)
                g_base = rng.standard_normal((3, 5, *size_out)).astype(np.float32)
                swap = (1, 0, *range(2, base.ndim))
                x = runtime.tensor(base).permute(*swap)   # [5, 3, ...], not contiguous
                g = runtime.tensor(g_base).permute(*swap)
                tx = torch.tensor(np.ascontiguousarray(base.transpose(swap)), requires_grad=True)
                kw = {} if mode is M.Nearest else {"align_corners": align}
                ty = F.interpolate(tx, size=size_out, mode=TORCH_MODE[mode, len(size_in)], **kw)
                ty.backward(torch.tensor(np.ascontiguousarray(g_base.transpose(swap))))
                opts = InterpolateOptions(mode, align)
                got = interpolate(x, size_out, opts).numpy()
                msg = f"{mode} {size_in}->{size_out} align={align}"
                if mode is M.Nearest:
                    np.testing.assert_array_equal(got, ty.detach().numpy(), err_msg=msg)
                else:
                    np.testing.assert_allclose(got, ty.detach().numpy(), **F32_TOL, err_msg=msg)
                dx = interpolate_backward(x, g, size_out, opts).numpy()
                np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg="backward " + msg)


@needs_torch
@pytest.mark.parametrize("planes, wide, bx, stream", [(1, False, None, False), (3, True, 32, False),
                                                     (1, False, None, True)])
def test_lane_plans_match_torch(runtime, rng, monkeypatch, planes, wide, bx, stream):
    """The kernels for integer width upscaling where units are SIMD lanes (lanes.py), forced on
    any runtime: factors 2 and 3, Linear with and without aligned corners, Nearest and
    NearestExact, 1-3 spatial axes, a cube the row (bx None) or cubes of 32 the rows do not
    fill, a plane group part full (3 planes a unit), 32- and 64-bit offsets, F32 and BF16,
    their outputs written through kd.streaming_stores() or not (`stream`, forced at any size),
    against torch (nearest's forward bit for bit)."""
    monkeypatch.setattr(interpolation_package, "lane_plan", lambda caps, shape, n, factor: lane_launch(
        shape, 2**31 if wide else n, planes, bx) if factor >= 2 else None)
    monkeypatch.setattr(interpolation_package, "streams", lambda caps, nbytes, run_bytes=None: stream)
    # (nearest.py has its own test)
    monkeypatch.setattr(interpolation_package, "nearest_factors", lambda caps, ax, itemsize: None)
    cases = [(M.Linear, False, (6, 32), (12, 64)), (M.Linear, True, (3, 5), (7, 13)),
             (M.Nearest, False, (4, 5), (4, 15)), (M.Nearest, False, (4, 16), (8, 32)),
             (M.Nearest, False, (2, 3, 7), (3, 4, 14)), (M.NearestExact, False, (3, 4), (5, 12)),
             (M.Linear, False, (9,), (27,))]
    for mode, align, size_in, size_out in cases:
        assert lane_factor(interpolation_package.axes(size_in, size_out, mode, align)[2]) >= 2
        for dtype, tol in (("f32", F32_TOL), ("bf16", LOW_TOL["bf16"])):
            base = rng.standard_normal((2, 5, *size_in)).astype(np.float32)
            g_base = rng.standard_normal((2, 5, *size_out)).astype(np.float32)
            x, g = runtime.tensor(base, dtype=dtype), runtime.tensor(g_base, dtype=dtype)
            tx = torch.tensor(x.numpy().astype(np.float32), requires_grad=True)
            kw = {} if mode in (M.Nearest, M.NearestExact) else {"align_corners": align}
            tmode = {M.Nearest: "nearest", M.NearestExact: "nearest-exact"}.get(mode) or TORCH_MODE[mode, len(size_in)]
            ty = F.interpolate(tx, size=size_out, mode=tmode, **kw)
            ty.backward(torch.tensor(g.numpy().astype(np.float32)))
            opts = InterpolateOptions(mode, align)
            msg = f"{mode} {size_in}->{size_out} align={align} {dtype}"
            got = interpolate(x, size_out, opts).numpy().astype(np.float32)
            want = runtime.tensor(ty.detach().numpy(), dtype=dtype).numpy().astype(np.float32)
            if mode is M.Nearest:
                np.testing.assert_array_equal(got, want, err_msg=msg)
            else:
                np.testing.assert_allclose(got, want, **tol, err_msg=msg)
            dx = interpolate_backward(x, g, size_out, opts).numpy().astype(np.float32)
            np.testing.assert_allclose(dx, tx.grad.numpy(), **(dict(rtol=1e-5, atol=1e-5) if dtype == "f32" else tol),
                                       err_msg="backward " + msg)


@needs_torch
@pytest.mark.interpreter
def test_linear_width_phases_give_the_general_taps_values(runtime, rng, monkeypatch):
    """lanes.forward_lanes' PHASES (Linear widths by a power of two: each phase's weights
    constants, the ends of the row apart) against its general taps (axis_taps, pick), forced
    on any runtime: factors 2, 4 and 8, with and without aligned corners, rows of 1, 2, 3 and
    17 columns (the first and last column in one cube, and alone), 1-3 spatial axes, F32 and
    BF16, inputs with inf, NaN and -0.0: the same values (NaN payloads aside), and on finite
    F32 inputs torch's F.interpolate within rounding. Other factors and modes do not take it."""
    monkeypatch.setattr(interpolation_package, "lane_plan", lambda caps, shape, n, factor: lane_launch(
        shape, n, 1) if factor >= 2 else None)
    general = []
    monkeypatch.setattr(interpolation_package, "width_phases",
                        lambda ax, factor: not general and width_phases(ax, factor))
    for dims, factor, align, width in [(1, 2, False, 1), (1, 2, True, 2), (2, 4, False, 3), (2, 2, True, 17),
                                       (3, 8, False, 2), (1, 4, True, 17), (2, 2, False, 17), (1, 8, True, 3)]:
        lead = (3, 4)[:dims - 1]
        base = rng.standard_normal((2, 3, *lead, width)).astype(np.float32)
        base.reshape(-1)[rng.choice(base.size, 3, replace=False)] = [np.inf, -np.inf, np.nan]
        base.reshape(-1)[0] = -0.0
        size_out = tuple(2 * n for n in lead) + ((width - 1) * factor + 1 if align else width * factor,)
        opts = InterpolateOptions(M.Linear, align)
        assert width_phases(interpolation_package.axes(base.shape[2:], size_out, M.Linear, align)[2], factor)
        for dtype in ("f32", "bf16"):
            x = runtime.tensor(base, dtype=dtype)
            general.clear()
            kd.replay.clear()  # (a replayed call would not ask width_phases again)
            phased = interpolate(x, size_out, opts).numpy()
            general.append(True)
            kd.replay.clear()
            want = interpolate(x, size_out, opts).numpy()
            # (as F32: a NaN equals a NaN whatever its payload, which a GPU may canonicalise)
            np.testing.assert_array_equal(phased.astype(np.float32), want.astype(np.float32),
                                          err_msg=f"{dims}-D ×{factor} align={align} width {width} {dtype}")
        finite = rng.standard_normal(base.shape).astype(np.float32)
        general.clear()
        kd.replay.clear()
        got = interpolate(runtime.tensor(finite), size_out, opts).numpy()
        ty = F.interpolate(torch.from_numpy(finite), size=size_out, mode=TORCH_MODE[M.Linear, dims],
                           align_corners=align)
        np.testing.assert_allclose(got, ty.numpy(), **F32_TOL,
                                   err_msg=f"{dims}-D ×{factor} align={align} width {width}")
    for mode, align, size_in, size_out in [(M.Linear, False, (5,), (15,)), (M.Nearest, False, (5,), (10,)),
                                           (M.Linear, True, (4,), (10,))]:
        ax = interpolation_package.axes(size_in, size_out, mode, align)[2]
        assert not width_phases(ax, lane_factor(ax)), (mode, size_in, size_out)


@needs_torch
@pytest.mark.parametrize("lanes, rows, stream, chunk", [(True, 8, False, 256), (True, 1, True, 7), (True, 2, False, 0),
                                                       (False, 2, False, 0)])
def test_nearest_backward_by_whole_factors_equals_torch(runtime, rng, monkeypatch, lanes, rows, stream, chunk):
    """nearest.py's kernels, forced on any runtime with either plan (`lanes`: units as SIMD
    lanes, any dtype; else as threads, 4-byte dtypes only), on lanes by output rows in turn
    (`chunk` columns a pass: several passes and a part-full one at 7) or by blocks (chunk 0):
    Nearest and NearestExact upsampled by whole factors 1-3 on 1-3 spatial axes, widths that
    fill no cube and one cube and part of another, more rows than a cube takes (`rows` a
    cube), dx written through kd.streaming_stores() or not: f32 bit for bit against torch
    autograd, bf16 (where it takes it) as torch's f32 gradient rounded once. Other modes,
    fractional factors and 16-bit dtypes on threads do not take it."""
    from rudnn.interpolation import tuning
    caps = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=lanes)
    monkeypatch.setattr(runtime, "capabilities", caps)
    monkeypatch.setattr(tuning, "NEAREST_ROWS" if lanes else "NEAREST_THREAD_ROWS", rows)
    monkeypatch.setattr(tuning, "NEAREST_ROW_CHUNK", chunk)
    monkeypatch.setattr(interpolation_package, "streams", lambda caps, nbytes, run_bytes=None: stream)
    launched = []
    name = "nearest_backward_rows" if chunk else "nearest_backward_sums"
    kernel = getattr(interpolation_package._nearest, name)
    monkeypatch.setattr(interpolation_package._nearest, name, type("Spy", (), {
        "__getitem__": lambda self, launch: launched.append(launch) or kernel[launch]})())
    cases = [(M.Nearest, (5, 37), (10, 74)), (M.NearestExact, (4, 9), (12, 18)), (M.Nearest, (3,), (9,)),
             (M.Nearest, (2, 3, 5), (4, 6, 10)), (M.Nearest, (3, 140), (3, 280)), (M.NearestExact, (6,), (6,))]
    for mode, size_in, size_out in cases:
        assert tuning.nearest_factors(caps, interpolation_package.axes(size_in, size_out, mode, False), 4)
        g32 = rng.standard_normal((2, 3, *size_out)).astype(np.float32)
        tx = torch.zeros((2, 3, *size_in), requires_grad=True)
        tmode = TORCH_MODE.get((mode, len(size_in)), "nearest-exact")
        F.interpolate(tx, size=size_out, mode=tmode).backward(torch.from_numpy(g32))
        for dtype in ("f32", "bf16"):
            x, g = runtime.zeros((2, 3, *size_in), dtype), runtime.tensor(g32, dtype=dtype)
            if dtype == "bf16":  # (torch's gradient of the rounded out_grad, rounded once)
                tx.grad = None
                F.interpolate(tx, size=size_out, mode=tmode).backward(torch.from_numpy(g.numpy().astype(np.float32)))
            want = runtime.tensor(tx.grad.numpy(), dtype=dtype).numpy()
            dx = interpolate_backward(x, g, size_out, InterpolateOptions(mode)).numpy()
            msg = f"{mode} {size_in}->{size_out} {dtype}"
            if dtype == "f32" or lanes:
                np.testing.assert_array_equal(dx, want, err_msg=msg)
            else:  # (the gather kernel: another order)
                np.testing.assert_allclose(dx.astype(np.float32), want.astype(np.float32), **LOW_TOL[dtype],
                                           err_msg=msg)
    assert len(launched) == (2 if lanes else 1) * len(cases)
    for mode, size_in, size_out in [(M.Linear, (4, 5), (8, 10)), (M.Nearest, (4, 6), (6, 12))]:
        assert tuning.nearest_factors(caps, interpolation_package.axes(size_in, size_out, mode, False), 4) is None
    assert tuning.nearest_plan(caps, 2**31, 1) is None  # (rows past its 32-bit row index: the other kernels)


def test_lane_cubes_split_rows_evenly():
    """lanes.py's cubes: the whole row up to 256 units, else the fewest even split (no part-full
    cube: its loads and stores would be masked), else a power of two."""
    assert [lane_units(w) for w in (5, 48, 256, 300, 512, 257)] == [5, 48, 256, 150, 256, 256]
    assert lane_launch((4, 1, 3, 48), 576, 4).vec and not lane_launch((4, 1, 3, 257), 4112, 4).vec


@pytest.mark.parametrize("mode, dims", [(M.Lanczos3, 1), (M.Lanczos3, 2), (M.Lanczos3, 3), (M.Bicubic, 1),
                                        (M.Bicubic, 3), (M.NearestExact, 3)])
def test_modes_without_torch_match_numpy(runtime, rng, mode, dims):
    for align in aligns(mode):
        opts = InterpolateOptions(mode, align)
        for size_in, size_out in SIZES[dims]:
            x = rng.standard_normal((1, 2, *size_in)).astype(np.float32)
            g = rng.standard_normal((1, 2, *size_out)).astype(np.float32)
            got = interpolate(runtime.tensor(x), size_out, opts).numpy()
            np.testing.assert_allclose(got, ref.interpolate(x, size_out, mode.value, align), **F32_TOL)
            dx = interpolate_backward(runtime.tensor(x), runtime.tensor(g), size_out, opts).numpy()
            np.testing.assert_allclose(dx, ref.interpolate_backward(x.shape, g, mode.value, align), rtol=1e-5,
                                       atol=1e-5)


@pytest.mark.parametrize("mode", [M.Linear, M.Bicubic, M.Lanczos3, M.Nearest, M.NearestExact])
def test_backward_reaches_every_tap(runtime, rng, mode):
    """Sizes whose source coordinates land exactly on pixels (aligned corners with integer
    or half-integer scales) and strong down-/upsampling: the backward pass's per-input ranges
    of outputs (tuning.touch_ranges) must include every output whose taps reach the input."""
    for align in aligns(mode):
        for size_in, size_out in [(5, 9), (10, 4), (9, 5), (3, 7), (16, 6), (31, 3), (2, 17)]:
            x = np.zeros((1, 1, size_in), np.float32)
            g = rng.standard_normal((1, 1, size_out)).astype(np.float32)
            dx = interpolate_backward(runtime.tensor(x), runtime.tensor(g), (size_out,), InterpolateOptions(mode, align))
            np.testing.assert_allclose(dx.numpy(), ref.interpolate_backward(x.shape, g, mode.value, align), rtol=1e-5,
                                       atol=1e-5, err_msg=f"{size_in}->{size_out} align={align}")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_dtypes_accumulate_in_f32(runtime, rng, dtype):
    np_dtype = kd.as_dtype(dtype).np
    for mode in (M.Linear, M.Bicubic):
        x = rng.standard_normal((2, 2, 6, 9)).astype(np_dtype)
        g = rng.standard_normal((2, 2, 13, 4)).astype(np_dtype)
        opts = InterpolateOptions(mode)
        y = interpolate(runtime.tensor(x), (13, 4), opts)
        assert y.dtype is kd.as_dtype(dtype) and y.shape == (2, 2, 13, 4)
        want = ref.interpolate(x.astype(np.float32), (13, 4), mode.value)
        np.testing.assert_allclose(y.numpy().astype(np.float64), want, **LOW_TOL[dtype])
        dx = interpolate_backward(runtime.tensor(x), runtime.tensor(g), (13, 4), opts)
        assert dx.dtype is kd.as_dtype(dtype)
        want = ref.interpolate_backward(x.shape, g.astype(np.float32), mode.value)
        np.testing.assert_allclose(dx.numpy().astype(np.float64), want, **LOW_TOL[dtype])


def test_strided_inputs(runtime, rng):
    base = rng.standard_normal((5, 3, 2, 7)).astype(np.float32)
    view = runtime.tensor(base).permute(2, 1, 0, 3)  # [2, 3, 5, 7], not contiguous
    x = np.ascontiguousarray(base.transpose(2, 1, 0, 3))
    opts = InterpolateOptions(M.Linear)
    np.testing.assert_allclose(interpolate(view, (9, 12), opts).numpy(), ref.interpolate(x, (9, 12), "Linear"),
                               **F32_TOL)
    g = rng.standard_normal((2, 3, 9, 12)).astype(np.float32)
    g_view = runtime.tensor(np.ascontiguousarray(g.transpose(0, 1, 3, 2))).permute(0, 1, 3, 2)
    dx = interpolate_backward(view, g_view, (9, 12), opts).numpy()
    np.testing.assert_allclose(dx, ref.interpolate_backward(x.shape, g, "Linear"), rtol=1e-5, atol=1e-5)
    assert np.array_equal(view.numpy(), x)  # the input is not modified


@needs_torch
@pytest.mark.parametrize("mode", [M.Linear, M.Bicubic, M.Nearest])
def test_nan_inputs_propagate_as_in_torch(runtime, rng, mode):
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    kw = {} if mode is M.Nearest else {"align_corners": False}
    want = F.interpolate(torch.tensor(x), size=(9, 12), mode=TORCH_MODE[mode, 2], **kw).numpy()
    got = interpolate(runtime.tensor(x), (9, 12), InterpolateOptions(mode)).numpy()
    assert np.isnan(want).any()
    np.testing.assert_allclose(got, want, **F32_TOL)  # NaN exactly where torch has it


@needs_torch
@pytest.mark.parametrize("align", [False, True])
def test_linear_axes_of_unchanged_size_copy_as_in_torch(runtime, rng, align):
    """An axis whose size stays is a copy in torch (both taps on input j): a NaN or inf in
    the input reaches its own output only (inf · 0 is NaN there too). The backward gives the
    same gradient as before. (A NaN in out_grad spreads to other inputs than in torch: ours
    gathers each input's window, weights 0 included; that is not matched.)"""
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    x[0, 0, 2, 3], x[0, 1, 1, 5], x[0, 1, 4, 0] = np.nan, np.inf, -np.inf
    g = rng.standard_normal((1, 2, 3, 6)).astype(np.float32)
    opts = InterpolateOptions(M.Linear, align)
    tx = torch.tensor(x, requires_grad=True)
    ty = F.interpolate(tx, size=(3, 6), mode="bilinear", align_corners=align)
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(interpolate(runtime.tensor(x), (3, 6), opts).numpy(), ty.detach().numpy(), **F32_TOL)
    np.testing.assert_allclose(interpolate_backward(runtime.tensor(x), runtime.tensor(g), (3, 6), opts).numpy(),
                               tx.grad.numpy(), **F32_TOL)
    row = np.array([[[1.0, 2.0, np.inf, np.nan]]], np.float32)  # 1-D, every size unchanged
    want = F.interpolate(torch.tensor(row), size=(4,), mode="linear", align_corners=align).numpy()
    np.testing.assert_array_equal(interpolate(runtime.tensor(row), (4,), opts).numpy(), want)


def test_backward_is_deterministic(runtime, rng):
    x = runtime.tensor(rng.standard_normal((1, 2, 17, 5)).astype(np.float32))
    g = runtime.tensor(rng.standard_normal((1, 2, 6, 11)).astype(np.float32))
    opts = InterpolateOptions(M.Bicubic, True)
    first = interpolate_backward(x, g, (6, 11), opts).numpy()
    for _ in range(2):
        assert np.array_equal(interpolate_backward(x, g, (6, 11), opts).numpy(), first)


def test_axis_tables_are_made_once_per_axis(runtime, rng, launches, monkeypatch):
    """The [O, T] tap tables of an axis are made on its first call and kept: a later call
    launches only its resampling kernel (one launch, which replay can then repeat alone);
    every call, forward and backward, matches the float64 reference."""
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")   # count the operator's own launches
    xh = rng.standard_normal((1, 2, 11, 6)).astype(np.float32)
    gh = rng.standard_normal((1, 2, 9, 13)).astype(np.float32)
    x, g = runtime.tensor(xh), runtime.tensor(gh)
    opts = InterpolateOptions(M.Bicubic, False)
    for a in interpolation_package.axes((11, 6), (9, 13), M.Bicubic, False):
        interpolation_package._TABLES.pop((runtime, a), None)
    want = ref.interpolate(xh, (9, 13), "Bicubic")
    first = interpolate(x, (9, 13), opts).numpy()
    made = launches[0]
    assert made == 1 + 3   # the three axes' new tables, then the resampling kernel
    again = interpolate(x, (9, 13), opts).numpy()
    assert launches[0] - made == 1
    for got in (first, again):
        np.testing.assert_allclose(got, want, **F32_TOL)
    dx = interpolate_backward(x, g, (9, 13), opts).numpy()   # the kept tables, read by the backward pass
    np.testing.assert_allclose(dx, ref.interpolate_backward(xh.shape, gh, "Bicubic"), rtol=1e-5, atol=1e-5)


def test_lane_backward_runs_on_the_calling_thread_when_small(rng):
    """The SIMD-lane backward walks its touch ranges for a number of steps set by its
    arguments (the longest range), not by the ranges' values, so the cpu runtime may run a
    small launch of it on the calling thread (kerneldsl/loop_bounds.py)."""
    rt = kd.runtime("cpu")
    xh = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    gh = rng.standard_normal((1, 2, 10, 16)).astype(np.float32)
    dx = interpolate_backward(rt.tensor(xh), rt.tensor(gh), (10, 16), InterpolateOptions(M.Linear)).numpy()
    np.testing.assert_allclose(dx, ref.interpolate_backward(xh.shape, gh, "Linear"), rtol=1e-5, atol=1e-5)
    plans = list(interpolation_package._lanes.backward_lanes._plans.values())
    assert plans and all(p.binary.info.argument_bound for p in plans)


# ---------------------------------------------------------------------------- empty, errors
@pytest.mark.feature("interpolation: errors")
def test_zero_planes_return_empty_without_launching(runtime, launches):
    x = runtime.tensor(np.zeros((0, 3, 4, 5), np.float16))
    opts = InterpolateOptions(M.Linear)
    y = interpolate(x, (7, 2), opts)
    assert y.shape == (0, 3, 7, 2) and y.dtype is kd.f16
    assert interpolate_backward(x, y, (7, 2), opts).shape == (0, 3, 4, 5)
    assert launches[0] == 0


def _bad_calls(rt):
    x = rt.tensor(np.ones((1, 2, 4, 4), np.float32))
    g = rt.tensor(np.ones((1, 2, 8, 8), np.float32))
    lin = InterpolateOptions(M.Linear)
    other = foreign(g)
    return [
        ("input must be", lambda: interpolate(np.ones((1, 2, 4)), 8, lin)),
        ("F32, F16 or BF16", lambda: interpolate(rt.tensor(np.ones((1, 2, 4), np.int32)), 8, lin)),
        ("rank 3, 4 or 5", lambda: interpolate(rt.tensor(np.ones((2, 4), np.float32)), 8, lin)),
        ("rank 3, 4 or 5", lambda: interpolate(rt.tensor(np.ones((1, 1, 2, 2, 2, 2), np.float32)), 2, lin)),
        ("spatial axes must be > 0", lambda: interpolate(rt.tensor(np.ones((1, 2, 0, 3), np.float32)), 2, lin)),
        ("output_size[1]", lambda: interpolate(x, (8, 0), lin)),
        ("output_size[0]", lambda: interpolate(x, 0, lin)),
        ("output_size[0] must be an int", lambda: interpolate(x, (2.0, 3), lin)),
        ("2 entries", lambda: interpolate(x, (8, 8, 8), lin)),
        ("options must be", lambda: interpolate(x, 8, {"mode": M.Linear})),
        ("options.mode", lambda: interpolate(x, 8, InterpolateOptions("bilinear"))),
        ("options.align_corners", lambda: interpolate(x, 8, InterpolateOptions(M.Linear, 1))),
        ("out_grad must have shape [1, 2, 8, 8]",
         lambda: interpolate_backward(x, rt.tensor(np.ones((1, 2, 8, 7), np.float32)), 8, lin)),
        ("out_grad must be", lambda: interpolate_backward(x, None, 8, lin)),
        ("out_grad must be F32", lambda: interpolate_backward(x, rt.tensor(np.ones((1, 2, 8, 8))), 8, lin)),
        ("on runtime 'other'", lambda: interpolate_backward(x, other, 8, lin)),
    ]


@pytest.mark.feature("interpolation: errors")
def test_every_error_rule_before_launch(runtime, launches):
    assert_each_rejected(_bad_calls(runtime), InterpolationError)
    assert launches[0] == 0
