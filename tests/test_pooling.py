"""rudnn.pooling (SPEC §7) on every runtime: PyTorch CPU as the oracle over one sweep per
kind of pooling (values, indices and backward against torch autograd, bit for bit where
torch is exact), float64 numpy references, NaN inputs, odd and size-1 axes, down- and
upsampling adaptive bins, non-contiguous and unbatched inputs, global average pooling
(the row reduction), both backward kernels (unrolled taps and loops), every error rule
before any launch."""
import dataclasses
import types

import numpy as np
import pytest

import kerneldsl as kd
import rudnn.pooling as P
from reference import pooling as ref
from rudnn.pooling import PoolingError
from family_checks import OtherRuntime as _OtherRuntime, assert_each_rejected

pytestmark = pytest.mark.feature("pooling")
DTYPES = ["f32", "f16", "bf16"]
RTOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}

# (input shape [N, C, *S], kernel_size, stride, padding, dilation, ceil_mode)
WINDOWS = [
    ((2, 3, 17), 3, 2, 1, 1, True),
    ((1, 2, 10), 4, None, 2, 2, False),
    ((2, 3, 9, 11), 3, 2, 1, 1, True),
    ((1, 2, 7, 8), (2, 3), (1, 2), (1, 0), (2, 1), False),
    ((2, 1, 1, 5), (1, 2), 1, 0, 1, True),
    ((1, 2, 5, 6, 7), 3, 2, 1, 1, True),
    ((2, 1, 4, 5, 3), (2, 2, 1), (1, 2, 1), (1, 0, 0), (1, 2, 1), False),
    # windows too large (> 27 taps) or strides too long (> 4) for the unrolled backward kernel
    ((1, 2, 40), 29, 6, 3, 1, True),
    ((1, 2, 12, 13), 5, 5, 2, 1, False),
    ((1, 1, 6, 7, 8), (4, 3, 3), (2, 1, 2), (2, 1, 1), (1, 1, 2), True),
]
# (input shape, output_size): downsampling, upsampling, None axes, global pooling
ADAPTIVE = [
    ((2, 3, 10), 4),
    ((2, 3, 5), 7),
    ((2, 3, 9, 11), (4, 5)),
    ((2, 2, 5, 3), (None, 6)),
    ((1, 2, 7, 7), 1),
    ((1, 3, 16, 16), 2),       # 8x8 bins: 64 taps, the most a SIMD-lane kernel unrolls
    ((1, 2, 5, 6, 7), (2, 3, 4)),
    ((2, 3, 4, 4, 8), 1),
]
# avg pooling's extra rules, cycled over WINDOWS: (count_include_pad, divisor_override)
AVG_RULES = [(True, None), (False, None), (True, 5), (False, -3)]


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch (the `oracle` extra) is not installed")


def host(a, dtype):
    """`a` rounded to `dtype` on the host (what the kernels see)."""
    return np.asarray(a, np.float32).astype(kd.as_dtype(dtype).np)


def f32(t):
    return np.asarray(t.numpy(), np.float32)


def fn(name, shape):
    """rudnn.pooling's function `name` with {d} replaced by the spatial rank of `shape`."""
    return getattr(P, name.format(d=len(shape) - 2))


def tfn(torch, name, shape):
    return getattr(torch.nn.functional, name.format(d=len(shape) - 2))


def planes(a):
    """[N, C, *S] -> [N·C, *S] for the numpy references."""
    return np.asarray(a).reshape(-1, *np.shape(a)[2:])


def per_axis(v, dims):
    return tuple(v) if isinstance(v, tuple) else (v,) * dims


def close(got, want, dtype, scale=1.0):
    r = RTOL[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=r, atol=r * scale)


def torch_grad(torch, call, x, grad):
    """x's gradient under torch autograd (f32) of call(x) weighted by grad."""
    xt = torch.from_numpy(np.asarray(x, np.float32)).requires_grad_(True)
    out = call(xt)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(torch.from_numpy(np.asarray(grad, np.float32)))
    return xt.grad.numpy()


# ---------------------------------------------------------------------------- max pooling
@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_matches_torch(runtime, rng, torch, dtype):
    for shape, k, s, p, d, ceil in WINDOWS:
        x = host(rng.standard_normal(shape), dtype)
        x.reshape(-1)[::7] = x.reshape(-1)[1]          # ties: the first maximum wins
        tx = runtime.tensor(x)
        out, idx = fn("max_pool{d}d_with_indices", shape)(tx, k, s, p, d, ceil)
        want, widx = tfn(torch, "max_pool{d}d", shape)(torch.from_numpy(np.float32(x)), k, s, p, d, ceil,
                                                       return_indices=True)
        assert out.dtype is kd.as_dtype(dtype) and idx.dtype is kd.i64 and out.shape == tuple(want.shape)
        np.testing.assert_array_equal(f32(out), want.numpy(), err_msg=str(shape))
        np.testing.assert_array_equal(idx.numpy(), widx.numpy(), err_msg=str(shape))
        np.testing.assert_array_equal(f32(fn("max_pool{d}d", shape)(tx, k, s, p, d, ceil)), want.numpy())
        dims = len(shape) - 2
        rv, ri = ref.max_pool(planes(x), *(per_axis(v, dims) for v in (k, s if s else k, p, d)), ceil)
        np.testing.assert_array_equal(planes(f32(out)), rv)
        np.testing.assert_array_equal(planes(idx.numpy()), ri)

        g = host(rng.standard_normal(want.shape), dtype)
        dx = fn("max_pool{d}d_backward", shape)(tx, runtime.tensor(g), idx, k, s, p, d, ceil)
        wdx = torch_grad(torch, lambda t: tfn(torch, "max_pool{d}d", shape)(t, k, s, p, d, ceil), x, g)
        assert dx.dtype is kd.as_dtype(dtype) and dx.shape == x.shape
        if dtype == "f32":
            np.testing.assert_array_equal(dx.numpy(), wdx, err_msg=str(shape))
        close(f32(dx), ref.max_backward(planes(x).shape, planes(g), planes(idx.numpy())).reshape(x.shape), dtype)


@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("outs", [2, 3])
def test_units_taking_several_outputs_match_torch(runtime, rng, torch, monkeypatch, outs):
    """The unrolled-taps forward kernel with a unit taking `outs` neighbouring outputs of a row
    (what GPUs run, tuning.outputs_per_unit), forced on this runtime: rows that end inside a
    unit's group, padding at both edges, ties, a NaN, max with indices and avg."""
    import rudnn.pooling as pooling
    monkeypatch.setattr(pooling, "outputs_per_unit", lambda caps, width: outs)
    x = rng.standard_normal((2, 3, 9, 23)).astype(np.float32)
    x[0, 1, 4, 7] = x[0, 1, 4, 8]
    x[1, 2, 3, 10] = np.nan
    tx, xt = runtime.tensor(x), torch.from_numpy(x)
    out, idx = P.max_pool2d_with_indices(tx, 3, 2, 1)
    want, widx = torch.nn.functional.max_pool2d(xt, 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    np.testing.assert_array_equal(idx.numpy(), widx.numpy())
    avg = P.avg_pool2d(tx, (3, 2), (1, 2), (1, 1), count_include_pad=False)
    close(avg.numpy(), torch.nn.functional.avg_pool2d(xt, (3, 2), (1, 2), (1, 1), count_include_pad=False).numpy(),
          "f32")


# (shape [N, C, *S], kernel_size, stride, padding, ceil_mode): every case takes the row-vector
# kernel in f32 (4-lane vectors) and in f16/bf16 (8 lanes): padding on both edges, ceil mode,
# stride 1 and 2, windows of 2 to 5 columns, odd heights, rows whose last unit is partial
ROW_VECTOR_WINDOWS = [
    ((2, 3, 9, 16), 3, 2, 1, False),
    ((1, 2, 7, 24), 3, 2, 0, True),
    ((2, 2, 5, 8), 2, 2, 0, True),
    ((1, 3, 6, 16), (3, 3), 1, 1, False),
    ((2, 2, 7, 32), (3, 5), (2, 1), (1, 2), True),
    ((1, 2, 4, 24), (2, 4), (1, 2), (1, 1), False),
    ((2, 3, 1, 8), (1, 3), 1, (0, 1), False),
    ((2, 3, 16), 3, 2, 1, False),
]


def _as_gpu(caps):
    """caps as a device whose units are not SIMD lanes (the row-vector kernel's condition)."""
    return dataclasses.replace(caps, units_are_simd_lanes=False)


@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_vector_pooling_matches_torch(runtime, rng, torch, monkeypatch, dtype):
    """rows.pool_rows (what GPUs run for max and average pooling over 1 or 2 axes without
    dilation), forced on this runtime: max values and indices bit for bit against torch,
    with ties, NaNs (two in a window: the later one's index) and windows of -inf (the first
    position); averages under each count_include_pad / divisor_override rule."""
    import rudnn.pooling as pooling
    from rudnn.pooling.problem import window_problem
    from rudnn.pooling.tuning import row_vector_outputs
    monkeypatch.setattr(pooling, "row_vector_outputs",
                        lambda caps, *a: row_vector_outputs(_as_gpu(caps), *a))
    for i, (shape, k, s, p, ceil) in enumerate(ROW_VECTOR_WINDOWS):
        plain = host(rng.standard_normal(shape), dtype)
        x = plain.copy()
        flat = x.reshape(-1)
        flat[::5] = flat[1]                     # ties: the first maximum in scan order wins
        flat[3] = flat[4] = np.nan              # neighbours: two NaNs in some window
        flat[-6:] = -np.inf                     # windows of -inf at the end
        flat[-1] = flat[len(flat) // 2] = np.nan
        tx = runtime.tensor(x)
        dims = len(shape) - 2
        problem = window_problem("max_pool", dims, tx, k, s, p, 1, ceil)
        assert row_vector_outputs(_as_gpu(runtime.capabilities), problem, tx.dtype.itemsize, 0) > 0, shape
        out, idx = fn("max_pool{d}d_with_indices", shape)(tx, k, s, p, 1, ceil)
        want, widx = tfn(torch, "max_pool{d}d", shape)(torch.from_numpy(np.float32(x)), k, s, p, 1, ceil,
                                                       return_indices=True)
        np.testing.assert_array_equal(f32(out), want.numpy(), err_msg=str(shape))
        np.testing.assert_array_equal(idx.numpy(), widx.numpy(), err_msg=str(shape))
        np.testing.assert_array_equal(f32(fn("max_pool{d}d", shape)(tx, k, s, p, 1, ceil)), want.numpy(),
                                      err_msg=str(shape))

        include, divisor = AVG_RULES[i % len(AVG_RULES)]
        divisor = None if dims == 1 else divisor    # torch's avg_pool1d has no divisor_override
        avg = fn("avg_pool{d}d", shape)(runtime.tensor(plain), k, s, p, ceil, include, divisor)
        targs = {} if divisor is None else {"divisor_override": divisor}
        wavg = tfn(torch, "avg_pool{d}d", shape)(torch.from_numpy(np.float32(plain)), k, s, p, ceil, include,
                                                 **targs)
        # the taps summed in torch's order in F32, rounded once
        np.testing.assert_array_equal(avg.numpy(), host(wavg.numpy(), dtype), err_msg=str(shape))


def test_row_vector_kernel_is_chosen_from_the_problem_and_capabilities(runtime):
    """tuning.row_vector_outputs: the widest 16-byte-or-less vector a row allows, and none on
    devices whose units are SIMD lanes, for dilation, 3-D or adaptive pooling, misaligned
    inputs, or a last vector that would leave the row."""
    from rudnn.pooling.problem import adaptive_problem, window_problem
    from rudnn.pooling.tuning import row_vector_outputs
    gpu = _as_gpu(runtime.capabilities)

    def outs(shape, k, s, p, d=1, ceil=False, dtype=kd.bf16, offset=0, caps=gpu):
        x = runtime.empty(shape, dtype)
        return row_vector_outputs(caps, window_problem("max_pool", len(shape) - 2, x, k, s, p, d, ceil),
                                  dtype.itemsize, offset)

    assert outs((64, 64, 112, 112), 3, 2, 1) == 4            # 8 bf16 a row vector, stride 2
    assert outs((64, 64, 112, 112), 3, 2, 1, dtype=kd.f32) == 2
    assert outs((1, 1, 8, 8), 3, 1, 1) == 8
    assert outs((1, 1, 8, 28), 3, 2, 1) == 2                  # 8 lanes would pass the row's end
    assert outs((1, 1, 9, 16), 3, 2, 1, ceil=True) == 0       # ceil mode's extra output: 9·2 > 16
    assert outs((1, 1, 8, 12), 3, 3, 0) == 0                  # no vector width is a multiple of 3
    assert outs((1, 1, 8, 16), 3, 2, 1, d=2) == 0
    assert outs((1, 1, 8, 16), 3, 2, 1, offset=2) == 1 and outs((1, 1, 8, 16), 3, 2, 1, offset=1) == 0
    assert outs((1, 1, 4, 8, 16), 3, 2, 1) == 0
    simd = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True)
    assert outs((64, 64, 112, 112), 3, 2, 1, caps=simd) == 0
    adaptive = adaptive_problem("adaptive_max_pool", 2, runtime.empty((1, 1, 8, 16), kd.bf16), 4)
    assert row_vector_outputs(gpu, adaptive, 2, 0) == 0


@pytest.mark.feature("pooling: torch")
def test_simd_lane_kernels_match_torch(runtime, rng, torch, monkeypatch):
    """What devices whose units are SIMD lanes run (the cpu runtime), forced on this runtime:
    backward passes scattering a plane a cube in torch's order (max through indices, with a
    NaN and ties; average under each rule; adaptive average; 3-D), f32 bit for bit; the forward
    kernel a unit an output column (lanes.pool_lanes: windows, equal adaptive bins, 3-D with
    dilation; a unit an output of the plane for rows narrower than 8) and the masked one
    (unequal adaptive bins, f64 divisions), bit for bit; global average as a row of lanes and
    its backward as a row store."""
    monkeypatch.setattr(runtime, "capabilities", dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True))
    F = torch.nn.functional
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    x.reshape(-1)[::7] = x.reshape(-1)[1]
    x[1, 2, 4, 5] = np.nan
    tx, xt = runtime.tensor(x), torch.from_numpy(x)
    out, idx = P.max_pool2d_with_indices(tx, 3, 2, 1, ceil_mode=True)
    want, widx = F.max_pool2d(xt, 3, 2, 1, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    np.testing.assert_array_equal(idx.numpy(), widx.numpy())
    g = rng.standard_normal(want.shape).astype(np.float32)
    dx = P.max_pool2d_backward(tx, runtime.tensor(g), idx, 3, 2, 1, ceil_mode=True)
    np.testing.assert_array_equal(dx.numpy(), torch_grad(torch, lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True),
                                                         x, g))
    for include, divisor in AVG_RULES:
        call = lambda t: F.avg_pool2d(t, (3, 2), (2, 1), 1, True, include, divisor)  # noqa: E731
        np.testing.assert_array_equal(P.avg_pool2d(tx, (3, 2), (2, 1), 1, True, include, divisor).numpy(),
                                      call(xt).numpy())
        g = rng.standard_normal(call(xt).shape).astype(np.float32)
        dx = P.avg_pool2d_backward(tx, runtime.tensor(g), (3, 2), (2, 1), 1, True, include, divisor)
        np.testing.assert_array_equal(dx.numpy(), torch_grad(torch, call, x, g))
    avg, (mx, midx) = P.adaptive_avg_pool2d(tx, (4, 5)), P.adaptive_max_pool2d(tx, (4, 5))
    np.testing.assert_array_equal(avg.numpy(), F.adaptive_avg_pool2d(xt, (4, 5)).numpy())
    wmx, wmidx = F.adaptive_max_pool2d(xt, (4, 5), return_indices=True)
    np.testing.assert_array_equal(mx.numpy(), wmx.numpy())
    np.testing.assert_array_equal(midx.numpy(), wmidx.numpy())
    g = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(P.adaptive_avg_pool2d_backward(tx, runtime.tensor(g)).numpy(),
                                  torch_grad(torch, lambda t: F.adaptive_avg_pool2d(t, (4, 5)), x, g))
    y = np.ascontiguousarray(x[:, :, :, :10])          # equal adaptive bins (3×2): lanes.pool_lanes
    ty, yt = runtime.tensor(y), torch.from_numpy(y)
    for size in ((3, 5), (3, 10)):                       # rows of 5 (a unit an output) and of 10
        np.testing.assert_array_equal(P.adaptive_avg_pool2d(ty, size).numpy(), F.adaptive_avg_pool2d(yt, size).numpy())
        for got, want in zip(P.adaptive_max_pool2d(ty, size), F.adaptive_max_pool2d(yt, size, return_indices=True)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    x3 = rng.standard_normal((1, 2, 5, 6, 7)).astype(np.float32)
    for w in (x3, rng.standard_normal((1, 2, 5, 6, 17)).astype(np.float32)):   # rows of 4 and of 9
        for got, want in zip(P.max_pool3d_with_indices(runtime.tensor(w), 3, 2, 1, (1, 2, 1)),
                             F.max_pool3d(torch.from_numpy(w), 3, 2, 1, (1, 2, 1), return_indices=True)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(P.avg_pool3d(runtime.tensor(w), 3, 2, 1).numpy(),
                                      F.avg_pool3d(torch.from_numpy(w), 3, 2, 1).numpy())
    g3 = rng.standard_normal((1, 2, 3, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(P.avg_pool3d_backward(runtime.tensor(x3), runtime.tensor(g3), 3, 2, 1).numpy(),
                                  torch_grad(torch, lambda t: F.avg_pool3d(t, 3, 2, 1), x3, g3))
    xb = host(x, "bf16")                               # read through an f32 copy (forward.widen)
    out, idx = P.max_pool2d_with_indices(runtime.tensor(xb, dtype="bf16"), 3, 2, 1, ceil_mode=True)
    want, widx = F.max_pool2d(torch.from_numpy(np.float32(xb)), 3, 2, 1, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(f32(out), want.numpy())
    np.testing.assert_array_equal(idx.numpy(), widx.numpy())
    y = x[:, :, :, :10] + 3
    y[0, 1, 2, 3] = 3                                  # (no NaN: a row mean to compare)
    ty = runtime.tensor(np.ascontiguousarray(y))
    close(P.adaptive_avg_pool2d(ty, 1).numpy(), y.astype(np.float64).mean((2, 3), keepdims=True), "f32")
    g = rng.standard_normal((2, 3, 1, 1)).astype(np.float32)
    np.testing.assert_array_equal(P.adaptive_avg_pool2d_backward(ty, runtime.tensor(g)).numpy(),
                                  torch_grad(torch, lambda t: F.adaptive_avg_pool2d(t, 1), y, g))


@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("dtype,widen,packed", [("f32", False, False), ("f32", True, True), ("bf16", True, False),
                                                ("bf16", False, True), ("f16", True, True)])
@pytest.mark.parametrize("f32_positions", [True, False])
def test_equal_bins_in_narrow_rows_take_scalar_units_and_match_torch(runtime, rng, torch, monkeypatch, dtype, widen,
                                                                     packed, f32_positions):
    """bins.pool_bins (devices whose units are SIMD lanes, forced here): adaptive average and max
    into equal bins with output rows narrower than a vector, 1-, 2- and 3-D, bit for bit
    torch's values and indices: ties take the first maximum, two NaNs in a bin the later one's
    index, a bin of -inf its first position; max positions tracked in F32 and in I64; rows
    widened to F32 first (`widen`) or each tap converted in the chains; chains packed into
    vectors by the compiler or scalar (`packed`)."""
    import rudnn.pooling as pooling
    from family_checks import on_launch
    from rudnn.pooling import tuning
    monkeypatch.setattr(runtime, "capabilities", dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True))
    monkeypatch.setattr(tuning, "BIN_F32_POSITIONS", 2**24 if f32_positions else 0)
    monkeypatch.setattr(pooling, "bin_row_widening", lambda problem, dtype, maximum: problem.axes[2].size * widen)
    monkeypatch.setattr(pooling, "bin_packing", lambda dtype: packed)
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    names = []
    on_launch(monkeypatch, lambda kernel: names.append(kernel.__name__))
    F = torch.nn.functional
    for shape, size in (((2, 3, 12), 4), ((2, 3, 12, 14), (3, 7)), ((1, 2, 4, 6, 6), (2, 3, 3)),
                        ((3, 1, 5, 10), (1, 2))):
        x = host(np.round(rng.standard_normal(shape) * 2) / 2, dtype)   # (halves: ties in most bins)
        x.reshape(-1)[3] = x.reshape(-1)[4] = np.nan
        x.reshape(x.shape[0], -1)[-1, -6:] = -np.inf
        tx, xt = runtime.tensor(x), torch.from_numpy(np.float32(x))
        d = len(shape) - 2
        names.clear()
        avg = getattr(P, f"adaptive_avg_pool{d}d")(tx, size)
        out, idx = getattr(P, f"adaptive_max_pool{d}d")(tx, size)
        assert names == ["pool_bins"] * 2, (shape, names)
        want = getattr(F, f"adaptive_avg_pool{d}d")(xt, size).numpy()
        np.testing.assert_array_equal(f32(avg), np.float32(host(want, dtype)), err_msg=str(shape))
        wout, widx = getattr(F, f"adaptive_max_pool{d}d")(xt, size, return_indices=True)
        np.testing.assert_array_equal(f32(out), wout.numpy(), err_msg=str(shape))
        np.testing.assert_array_equal(idx.numpy(), widx.numpy(), err_msg=str(shape))


@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_equal_bins_reduced_down_columns_first_match_torch(runtime, rng, torch, monkeypatch, dtype):
    """columns.max_bins_columns (devices whose units are SIMD lanes, forced here, small planes
    allowed): adaptive max down each bin's columns, then across them, bit for bit torch's
    values and indices in 2-D and 3-D, one pass or several (the last part full), a column's
    taps unrolled or in steps. Placed so that column order and scan order disagree: ties
    whose first in scan order lies in a later column, two NaNs whose last in scan order lies
    in an earlier column, -inf bins. Bins of consecutive elements (a global max of any rank,
    1-D bins) are seen as rows (tuning._row_width), in one unrolled step or several."""
    from family_checks import on_launch
    from rudnn.pooling import tuning
    monkeypatch.setattr(runtime, "capabilities", dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True))
    monkeypatch.setattr(tuning, "COLUMN_PLANE", 0)
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    names = []
    on_launch(monkeypatch, lambda kernel: names.append(kernel.__name__))

    def check(x, size):
        """Our call on x against torch's, through the column form; torch's indices."""
        d = x.ndim - 2
        names.clear()
        out, idx = getattr(P, f"adaptive_max_pool{d}d")(runtime.tensor(x), size)
        assert names == ["max_bins_columns"], (x.shape, names)
        wout, widx = getattr(torch.nn.functional, f"adaptive_max_pool{d}d")(torch.from_numpy(np.float32(x)), size,
                                                                            return_indices=True)
        np.testing.assert_array_equal(f32(out), wout.numpy(), err_msg=str(x.shape))
        np.testing.assert_array_equal(idx.numpy(), widx.numpy(), err_msg=str(x.shape))
        return widx.numpy().reshape(x.shape[0] * x.shape[1], -1)

    for shape, size, rows, taps in (((2, 3, 12, 20), (3, 5), 2, 16), ((1, 2, 8, 16), (2, 4), 16, 16),
                                    ((1, 2, 4, 6, 8), (2, 3, 2), 4, 16), ((2, 1, 4, 4, 12), (2, 2, 3), 16, 16),
                                    ((1, 2, 6, 8, 8), (2, 2, 2), 16, 8)):    # (12 taps down: 3 steps of 4)
        monkeypatch.setattr(tuning, "COLUMN_ROWS", rows)
        monkeypatch.setattr(tuning, "COLUMN_TAPS", taps)
        x = host(np.round(rng.standard_normal(shape) * 2) / 2, dtype)   # (halves: ties in most bins)
        planes, d = x.reshape(-1, *shape[2:]), len(shape) - 2
        bins = [s // o for s, o in zip(shape[2:], size)]
        top, kw = (0,) * (d - 2), bins[-1]                       # (depth 0 in 3-D)
        planes[(0, *(slice(0, k) for k in bins))] = 0
        planes[(0, *top, 1, 0)] = planes[(0, *top, 0, kw - 1)] = 5          # a tie: the first in scan order
        planes[(1, *(slice(0, k) for k in bins))] = 0                       # is in the last column;
        planes[(1, *top, 0, kw - 1)] = planes[(1, *top, 1, 0)] = np.nan     # two NaNs: the later is in the first
        planes[(-1, *(slice(-k, None) for k in bins))] = -np.inf           # one; a bin of -inf
        assert check(x, size)[1, 0] == shape[-1], "the NaN case is placed"
    # bins of consecutive elements (global max of any rank, 1-D bins): seen as rows of `width`
    for shape, size in (((2, 3, 4, 8), 1), ((1, 2, 96), 1), ((1, 2, 4, 8, 16), 1), ((2, 1, 2048), 1),
                        ((2, 3, 448), 7), ((1, 2, 384), 3)):
        width = tuning._row_width(int(np.prod(shape[2:])) // size)
        x = host(np.round(rng.standard_normal(shape) * 2) / 2, dtype)
        planes = x.reshape(x.shape[0] * x.shape[1], -1)
        planes[0] = 0
        planes[0, width - 1] = planes[0, width] = 5            # a tie, the first in scan order in the last column
        planes[1] = 0
        planes[1, width - 1] = planes[1, width] = np.nan       # two NaNs, the later in the first column
        if len(planes) > 2:
            planes[-1] = -np.inf                               # a plane of -inf: its first position
        assert check(x, size)[1, 0] == width, "the NaN case is placed"


@pytest.mark.feature("pooling: nan")
def test_max_pool_nan_wins_with_the_last_nan_index(runtime, torch):
    x = np.arange(2 * 9 * 9, dtype=np.float32).reshape(1, 2, 9, 9) % 13
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = np.nan     # two NaNs in one window: the later one's index
    x[0, 1, 4, :] = -np.inf                     # windows of -inf: the first position's index
    x[0, 1, 3:6, :] = -np.inf
    tx = runtime.tensor(x)
    for call in (lambda a, m: m.max_pool2d(a, 3, 2, 1, return_indices=True) if m is not P else
                 P.max_pool2d_with_indices(a, 3, 2, 1),
                 lambda a, m: m.adaptive_max_pool2d(a, (4, 3), return_indices=True) if m is not P else
                 P.adaptive_max_pool2d(a, (4, 3))):
        out, idx = call(tx, P)
        want, widx = call(torch.from_numpy(x), torch.nn.functional)
        np.testing.assert_array_equal(out.numpy(), want.numpy())
        np.testing.assert_array_equal(idx.numpy(), widx.numpy())
    assert np.isnan(out.numpy()[0, 0, 0, 0])


# ---------------------------------------------------------------------------- average pooling
@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("dtype", DTYPES)
def test_avg_pool_matches_torch(runtime, rng, torch, dtype):
    for n, (shape, k, s, p, _, ceil) in enumerate(WINDOWS):
        include, divisor = AVG_RULES[n % len(AVG_RULES)]
        if len(shape) == 3 and divisor is not None:
            divisor = None                      # torch's avg_pool1d has no divisor_override
        x = host(rng.standard_normal(shape), dtype)
        tx = runtime.tensor(x)
        rules = dict(count_include_pad=include, divisor_override=divisor)
        out = fn("avg_pool{d}d", shape)(tx, k, s, p, ceil, **rules)
        targs = {} if divisor is None else {"divisor_override": divisor}
        tcall = lambda t: tfn(torch, "avg_pool{d}d", shape)(t, k, s, p, ceil, include, **targs)  # noqa: E731
        want = tcall(torch.from_numpy(np.float32(x))).numpy()
        # torch in f32 on the same values, rounded once: what F32 accumulation gives
        np.testing.assert_array_equal(out.numpy(), host(want, dtype), err_msg=str(shape))
        dims = len(shape) - 2
        kk, ss, pp = (per_axis(v, dims) for v in (k, s if s else k, p))
        close(planes(f32(out)), ref.avg_pool(planes(x), kk, ss, pp, ceil, include, divisor), dtype)

        g = host(rng.standard_normal(want.shape), dtype)
        dx = fn("avg_pool{d}d_backward", shape)(tx, runtime.tensor(g), k, s, p, ceil, **rules)
        assert dx.dtype is kd.as_dtype(dtype) and dx.shape == x.shape
        wdx = torch_grad(torch, tcall, x, g)
        if dtype == "f32":
            np.testing.assert_array_equal(dx.numpy(), wdx, err_msg=str(shape))
        rdx = ref.avg_pool_backward(planes(x).shape, planes(g), kk, ss, pp, ceil, include, divisor)
        close(planes(f32(dx)), rdx, dtype, scale=float(np.abs(rdx).max()))


# ---------------------------------------------------------------------------- adaptive pooling
@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("dtype", DTYPES)
def test_adaptive_pooling_matches_torch(runtime, rng, torch, dtype):
    for shape, size in ADAPTIVE:
        x = host(rng.standard_normal(shape), dtype)
        tx = runtime.tensor(x)
        xt = torch.from_numpy(np.float32(x))
        avg = fn("adaptive_avg_pool{d}d", shape)(tx, size)
        want = tfn(torch, "adaptive_avg_pool{d}d", shape)(xt, size).numpy()
        outs = want.shape[2:]
        if np.prod(outs) == 1:                 # the row reduction sums in another order
            close(f32(avg), want, dtype)
        else:
            np.testing.assert_array_equal(avg.numpy(), host(want, dtype), err_msg=str(shape))
        close(planes(f32(avg)), ref.adaptive_avg_pool(planes(x), outs), dtype)
        out, idx = fn("adaptive_max_pool{d}d", shape)(tx, size)
        wout, widx = tfn(torch, "adaptive_max_pool{d}d", shape)(xt, size, return_indices=True)
        np.testing.assert_array_equal(f32(out), wout.numpy(), err_msg=str(shape))
        np.testing.assert_array_equal(idx.numpy(), widx.numpy(), err_msg=str(shape))

        g = host(rng.standard_normal(want.shape), dtype)
        tg = runtime.tensor(g)
        dx = fn("adaptive_avg_pool{d}d_backward", shape)(tx, tg)
        wdx = torch_grad(torch, lambda t: tfn(torch, "adaptive_avg_pool{d}d", shape)(t, size), x, g)
        rdx = ref.adaptive_avg_pool_backward(planes(x).shape, planes(g), outs)
        close(planes(f32(dx)), rdx, dtype, scale=float(np.abs(rdx).max()))
        if dtype == "f32":
            np.testing.assert_array_equal(dx.numpy(), wdx, err_msg=str(shape))
        np.testing.assert_array_equal(f32(fn("adaptive_avg_pool{d}d_backward", shape)(tx, tg, size)), f32(dx))
        dx = fn("adaptive_max_pool{d}d_backward", shape)(tx, tg, idx)
        wdx = torch_grad(torch, lambda t: tfn(torch, "adaptive_max_pool{d}d", shape)(t, size), x, g)
        if dtype == "f32":
            np.testing.assert_array_equal(dx.numpy(), wdx, err_msg=str(shape))
        close(f32(dx), ref.max_backward(planes(x).shape, planes(g), planes(idx.numpy())).reshape(x.shape), dtype)


@pytest.mark.feature("pooling: global average")
@pytest.mark.parametrize("shape", [(3, 5, 1, 1), (2, 19, 7, 7), (2, 3, 13, 17), (2, 3, 32, 32), (1, 4, 64, 66),
                                   (2, 2, 3, 4, 5)])
def test_global_average_is_a_row_mean(runtime, rng, shape):
    x = rng.standard_normal(shape).astype(np.float32) + 3
    out = fn("adaptive_avg_pool{d}d", shape)(runtime.tensor(x), 1)
    want = x.astype(np.float64).reshape(*shape[:2], -1).mean(-1).reshape(*shape[:2], *(1,) * (len(shape) - 2))
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-6)


@pytest.mark.feature("pooling: global average")
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_global_average_of_rows_as_vectors_sums_each_row_alone(runtime, rng, dtype):
    """Rows of every length class of the cpu runtime's reduction.vector_row_mean (a one-unit
    cube several rows, each row's whole vectors then its rest): shorter than a vector,
    vectors of 4 with a rest, exactly six vectors of 8, the ResNet head's 49, the longest
    unrolled rows, F32 rows looped over two vectors a step with a rest of a vector and more;
    130 planes (whole cubes and a partial one), taken from an offset view so rows start off
    any alignment; each row's values shifted apart, so a row summed into its neighbour's
    place fails."""
    sizes = [(1, 3), (3, 3), (1, 9), (6, 8), (7, 7), (7, 9)]
    sizes += [(16, 16), (1, 257), (17, 19)] if dtype == "f32" else [(7, 9), (8, 8)]
    for h, w in sizes:
        base = rng.standard_normal((1 + 130 * h * w,)).astype(np.float32)
        base[1:] += np.repeat(np.arange(130, dtype=np.float32) / 8, h * w)
        x = host(base, dtype)
        view = runtime.tensor(x, dtype=dtype)[1:].reshape(2, 65, h, w)
        out = P.adaptive_avg_pool2d(view, 1)
        want = np.asarray(x[1:], np.float64).reshape(130, h * w).mean(-1).reshape(2, 65, 1, 1)
        np.testing.assert_allclose(f32(out), want, rtol=RTOL[dtype] if dtype != "f32" else 2e-6, atol=1e-6,
                                   err_msg=f"{h}x{w}")


def test_rows_as_vectors_unroll_short_rows_and_loop_long_f32_rows():
    """tuning.vector_row_plan: rows up to 256 elements unrolled (vectors of 8 from six of
    them, else 4), SHORT_ROW_CUBE rows a cube; longer F32 rows looped, LONG_ROW_CUBE a cube;
    16-bit rows past 63 elements left to lane_row_mean; the grid wraps into y."""
    from rudnn.pooling.tuning import GRID_Y, LONG_ROW_CUBE, SHORT_ROW_CUBE, vector_row_plan
    head = vector_row_plan(131072, 49, 4)
    assert (head.grid, head.size, head.rows_per_cube, head.lanes) == ((131072 // SHORT_ROW_CUBE, 1), 49,
                                                                      SHORT_ROW_CUBE, 8)
    assert vector_row_plan(131072, 49, 2).lanes == 8 and vector_row_plan(100, 47, 2).lanes == 4
    assert vector_row_plan(100, 256, 4).size == 256
    assert (vector_row_plan(100, 257, 4).size, vector_row_plan(100, 257, 4).rows_per_cube) == (0, LONG_ROW_CUBE)
    assert vector_row_plan(100, 63, 2) is not None and vector_row_plan(100, 64, 2) is None
    grid = vector_row_plan(SHORT_ROW_CUBE * (GRID_Y + 1), 4, 4).grid
    assert grid[1] == 2 and grid[0] * grid[1] * SHORT_ROW_CUBE >= SHORT_ROW_CUBE * (GRID_Y + 1)


@pytest.mark.feature("pooling: global average")
def test_every_row_reduction_shape_gives_the_row_mean(runtime, rng):
    """The global-average kernel's three reductions (a cube a row, a plane a row, an aligned
    group of lanes a row: tuning.reduction_plan picks them by device and row length, so one
    runtime reaches only some) on this runtime, with rows that end mid-cube."""
    from rudnn.pooling.reduction import plane_mean
    rows, size = 37, 49
    x = rng.standard_normal((rows, size)).astype(np.float32)
    want = x.astype(np.float64).mean(-1)
    P_ = runtime.capabilities.plane_dim
    for seg in sorted({0, 1, 4, P_ // 2, P_}):
        bx, by = (64, 1) if seg == 0 else (seg, 256 // seg)
        out = runtime.zeros((rows,), "f32")
        plane_mean[(-(-rows // by), 1), (bx, by)](runtime.tensor(x).reshape(rows * size), out, rows, size, 1, seg)
        np.testing.assert_allclose(out.numpy(), want, rtol=2e-6, atol=1e-7, err_msg=f"seg {seg}")


def test_short_rows_on_a_gpu_take_groups_of_lanes_and_long_rows_fill_the_device():
    """reduction_plan on an H200's capabilities: 49-element rows in groups of 8 lanes, the
    56² rows of the benchmark a plane each, few long rows a cube of 256 each."""
    import dataclasses
    from kerneldsl.backends.cuda.capabilities import for_arch
    from rudnn.pooling.tuning import reduction_plan
    caps = dataclasses.replace(for_arch("sm_90"), compute_units=132)
    assert reduction_plan(caps, 131072, 49, 1).block == (8, 32)
    assert reduction_plan(caps, 16384, 3136, 8).block == (32, 8)
    assert reduction_plan(caps, 64, 1 << 20, 8).block == (256, 1)
    assert reduction_plan(caps, 1 << 20, 1 << 14, 4).block == (64, 1)


def test_the_sweep_takes_both_backward_kernels(runtime):
    """The windows above reach the unrolled-taps kernel and the looped one (tuning.unrolled_taps)."""
    from rudnn.pooling.problem import window_problem
    from rudnn.pooling.tuning import unrolled_taps
    picks = set()
    for shape, k, s, p, d, ceil in WINDOWS:
        x = runtime.tensor(np.zeros(shape, np.float32))
        picks.add(unrolled_taps(window_problem("max_pool", len(shape) - 2, x, k, s, p, d, ceil)))
    assert picks == {True, False}


@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("by_cells", [True, False])
def test_gather_backward_by_cells_and_by_taps_match_torch(runtime, rng, torch, monkeypatch, by_cells):
    """The gather backward kernels GPUs run, forced on this runtime: pool_backward_cells (a
    unit the inputs sharing their candidate outputs; windows without dilation) or, with it
    off, pool_backward_taps (a unit an input), over the sweep's windows and two whose stride
    passes the window (inputs no window holds), max (with ties and a NaN) and average under
    each rule, f32 bit for bit against torch autograd."""
    import rudnn.pooling as pooling
    from rudnn.pooling import tuning
    from rudnn.pooling.problem import window_problem
    monkeypatch.setattr(runtime, "capabilities", dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False))
    monkeypatch.setattr(tuning, "CELL_BACKWARD", by_cells)
    launched = []
    kernel = pooling.pool_backward_cells
    monkeypatch.setattr(pooling, "pool_backward_cells", type("Spy", (), {
        "__getitem__": lambda self, launch: launched.append(launch) or kernel[launch]})())
    reached = 0
    gaps = [((1, 2, 9, 10), 2, 3, 0, 1, False), ((2, 2, 11), 1, 2, 0, 1, True)]   # strides past the window
    for n, (shape, k, s, p, d, ceil) in enumerate(WINDOWS + gaps):
        x = rng.standard_normal(shape).astype(np.float32)
        x.reshape(-1)[::7] = x.reshape(-1)[1]
        x.reshape(-1)[3] = np.nan
        tx = runtime.tensor(x)
        reached += tuning.cell_backward(window_problem("max_pool", len(shape) - 2, tx, k, s, p, d, ceil))
        out, idx = fn("max_pool{d}d_with_indices", shape)(tx, k, s, p, d, ceil)
        g = rng.standard_normal(out.shape).astype(np.float32)
        dx = fn("max_pool{d}d_backward", shape)(tx, runtime.tensor(g), idx, k, s, p, d, ceil)
        want = torch_grad(torch, lambda t: tfn(torch, "max_pool{d}d", shape)(t, k, s, p, d, ceil), x, g)
        np.testing.assert_array_equal(dx.numpy(), want, err_msg=f"max {shape}")
        include, divisor = AVG_RULES[n % len(AVG_RULES)]
        divisor = None if len(shape) == 3 else divisor   # torch's avg_pool1d has no divisor_override
        call = lambda t: tfn(torch, "avg_pool{d}d", shape)(t, k, s, p, ceil, include,  # noqa: E731
                                                          **({} if divisor is None else {"divisor_override": divisor}))
        g = rng.standard_normal(call(torch.from_numpy(x)).shape).astype(np.float32)
        dx = fn("avg_pool{d}d_backward", shape)(tx, runtime.tensor(g), k, s, p, ceil, include, divisor)
        np.testing.assert_array_equal(dx.numpy(), torch_grad(torch, call, x, g), err_msg=f"avg {shape}")
    assert reached == (6 if by_cells else 0) and len(launched) == (6 + 9 if by_cells else 0)  # (averages: no dilation)


@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_max_backward_of_planes_past_shared_memory_sums_in_global_memory(runtime, rng, torch, monkeypatch, dtype):
    """scatter_max_backward (devices whose units are SIMD lanes) for planes that do not fit
    shared memory, forced on this runtime: an F32 dx summed in place, a 16-bit one through an
    F32 workspace plane a cube (two cubes, each taking several planes in turn); ties and a NaN,
    1-, 2- and 3-D windows, f32 bit for bit against torch."""
    import rudnn.pooling as pooling
    from rudnn.pooling import tuning
    monkeypatch.setattr(runtime, "capabilities", dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True,
                                                                     compute_units=2))
    for where in (pooling, tuning):
        monkeypatch.setattr(where, "plane_in_shared", lambda caps, problem: False)
    for shape, k, s, p, d, ceil in (WINDOWS[0], WINDOWS[2], WINDOWS[5], WINDOWS[8]):
        x = host(rng.standard_normal(shape), dtype)
        x.reshape(-1)[::7] = x.reshape(-1)[1]
        x.reshape(-1)[3] = np.nan
        tx = runtime.tensor(x)
        out, idx = fn("max_pool{d}d_with_indices", shape)(tx, k, s, p, d, ceil)
        g = host(rng.standard_normal(out.shape), dtype)
        dx = fn("max_pool{d}d_backward", shape)(tx, runtime.tensor(g), idx, k, s, p, d, ceil)
        want = torch_grad(torch, lambda t: tfn(torch, "max_pool{d}d", shape)(t, k, s, p, d, ceil), x, g)
        assert dx.dtype is kd.as_dtype(dtype)
        np.testing.assert_array_equal(f32(dx), host(want, dtype), err_msg=str(shape))


# windows that tile their input (kernel = stride, no padding): (input shape, kernel_size); one
# adaptive call of 2x2 bins. Rows of 20 outputs: a vector of 16 units, then the row's last 16.
TILINGS = [((2, 3, 8, 12), 2), ((1, 2, 6, 40), 2), ((2, 3, 36), 4), ((1, 2, 4, 6, 8), (2, 1, 2)),
           ((2, 2, 8, 8), "adaptive")]


def _bits(a):
    """The bits of an array (so that -0 and +0 differ)."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.itemsize])


@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_max_backward_through_tiling_windows_writes_each_window_once(runtime, rng, torch, monkeypatch, dtype):
    """tiles.tiled_max_backward (devices whose units are SIMD lanes; forced here at any plane
    size), windows that tile the input in 1, 2 and 3 axes and adaptive bins: ties, a NaN and
    -0 gradients, bit for bit against torch (a -0 gradient lands as +0, as a sum into zeros).
    Then indices of the caller's that leave their window (into another window, past the plane,
    negative) send just their planes to the scatter kernel: the result is the untiled path's
    and a numpy scatter's (indices outside the plane ignored)."""
    import rudnn.pooling as pooling
    from rudnn.pooling import tuning
    monkeypatch.setattr(runtime, "capabilities", dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True))
    monkeypatch.setattr(tuning, "TILED_PLANE", 1)
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")   # (each call takes the form the patches choose)
    launched = []
    kernel = pooling.tiled_max_backward
    monkeypatch.setattr(pooling, "tiled_max_backward", type("Spy", (), {
        "__getitem__": lambda self, launch: launched.append(launch) or kernel[launch]})())
    for shape, k in TILINGS:
        x = host(rng.standard_normal(shape), dtype)
        x.reshape(-1)[::7] = x.reshape(-1)[1]
        x.reshape(-1)[3] = np.nan
        tx = runtime.tensor(x)
        if k == "adaptive":
            out, idx = P.adaptive_max_pool2d(tx, 4)
            call = lambda t: torch.nn.functional.adaptive_max_pool2d(t, 4)  # noqa: E731
            backward = lambda g, i: P.adaptive_max_pool2d_backward(tx, g, i)  # noqa: E731
        else:
            out, idx = fn("max_pool{d}d_with_indices", shape)(tx, k)
            call = lambda t: tfn(torch, "max_pool{d}d", shape)(t, k)  # noqa: E731
            backward = lambda g, i: fn("max_pool{d}d_backward", shape)(tx, g, i, k)  # noqa: E731
        g = host(rng.standard_normal(out.shape), dtype)
        g.reshape(-1)[::5] = -0.0
        before = len(launched)
        dx = backward(runtime.tensor(g), idx)
        assert len(launched) == before + 1, f"{shape}: the tiled kernel did not run"
        want = host(torch_grad(torch, call, x, g), dtype)
        assert dx.dtype is kd.as_dtype(dtype)
        np.testing.assert_array_equal(_bits(dx.numpy()), _bits(want), err_msg=str(shape))

    shape, k = TILINGS[0]
    x = host(rng.standard_normal(shape), dtype)
    out, idx = P.max_pool2d_with_indices(runtime.tensor(x), k)
    g = host(rng.standard_normal(out.shape), dtype)
    own = idx.numpy().reshape(6, -1)
    plane = 8 * 12
    own[0, 0] = own[0, 5]        # two outputs on one element: a sum, in output order
    own[1, 2] = plane + 3         # past the plane: ignored
    own[2, 7] = -1                # negative: ignored
    own[4, 1] = 0                 # into the first window
    want = np.zeros((6, plane), np.float32)
    for p, row in enumerate(own):
        for o, j in enumerate(row):
            if 0 <= j < plane:
                want[p, j] += np.float32(g.reshape(6, -1)[p, o])
    want = _bits(host(want.reshape(shape), dtype))
    tx, tg, ti = runtime.tensor(x), runtime.tensor(g), runtime.tensor(own.reshape(idx.shape))
    for in_shared in (True, False):   # the scatter's plane in shared memory; in dx (f32) or a workspace
        for where in (pooling, tuning):
            monkeypatch.setattr(where, "plane_in_shared", lambda caps, problem, v=in_shared: v)
        for plane_size in (1, 1 << 40):   # tiled, then not
            monkeypatch.setattr(tuning, "TILED_PLANE", plane_size)
            dx = P.max_pool2d_backward(tx, tg, ti, k)
            np.testing.assert_array_equal(_bits(dx.numpy()), want, err_msg=f"{in_shared} {plane_size}")

    # replayed (one recording for the layout): the marks of one call do not reach the next
    monkeypatch.setenv("KERNELDSL_REPLAY", "1")
    monkeypatch.setattr(tuning, "TILED_PLANE", 1)
    P.max_pool2d_backward.replay_records.clear()
    plain = _bits(host(torch_grad(torch, lambda t: torch.nn.functional.max_pool2d(t, k), x, g), dtype))
    for indices, expected in ((idx, plain), (ti, want), (idx, plain), (ti, want)):
        np.testing.assert_array_equal(_bits(P.max_pool2d_backward(tx, tg, indices, k).numpy()), expected)
    assert P.max_pool2d_backward.replay_records


def test_only_windows_that_tile_large_planes_take_the_tiled_backward():
    """tuning.tiled_windows: kernel = stride without padding or dilation over whole windows,
    or adaptive bins of one size; widths 1, 2 and 4; planes of TILED_PLANE elements or more;
    devices whose units are SIMD lanes only."""
    from rudnn.pooling.problem import adaptive_problem, window_problem
    from rudnn.pooling.tuning import TILED_PLANE, tiled_windows
    cpu = kd.runtime("cpu")
    lanes = dataclasses.replace(cpu.capabilities, units_are_simd_lanes=True)
    gpu = dataclasses.replace(cpu.capabilities, units_are_simd_lanes=False)
    side = 256
    assert side * side >= TILED_PLANE

    def window(shape, k, s=None, p=0, d=1, ceil=False):
        return window_problem("max_pool", len(shape) - 2, cpu.empty(shape, "f32"), k, s, p, d, ceil)

    assert tiled_windows(lanes, window((1, 1, side, side), 2)) == (1, 2, 2)
    assert tiled_windows(lanes, window((1, 1, side, side), (2, 4))) == (1, 2, 4)
    assert tiled_windows(lanes, window((1, 1, 4, side, side), (2, 2, 1))) == (2, 2, 1)
    assert tiled_windows(lanes, adaptive_problem("adaptive_max_pool2d", 2, cpu.empty((1, 1, side, side), "f32"),
                                                 side // 2)) == (1, 2, 2)
    assert tiled_windows(gpu, window((1, 1, side, side), 2)) is None
    assert tiled_windows(lanes, window((1, 1, 16, 16), 2)) is None                    # a small plane
    for shape, k, s, p, d, ceil in [((1, 1, side, side), 3, 2, 1, 1, False),            # overlapping
                                    ((1, 1, side, side), 2, 2, 1, 1, False),            # padding
                                    ((1, 1, side, side), 2, 2, 0, 2, False),            # dilation
                                    ((1, 1, side + 1, side + 1), 2, 2, 0, 1, False),    # a row no window holds
                                    ((1, 1, side + 1, side + 1), 2, 2, 0, 1, True),     # a partial last window
                                    ((1, 1, side, 3 * side), 3, 3, 0, 1, False),        # width 3
                                    ((1, 1, side, 8 * side), 8, 8, 0, 1, False)]:       # width 8
        assert tiled_windows(lanes, window(shape, k, s, p, d, ceil)) is None, (shape, k, s, p, d, ceil)


def test_outputs_stream_when_large_and_written_in_whole_lines():
    """ops/streaming.streams: only where the runtime's stores can bypass the caches, the output
    is STREAM_BYTES or more, and each contiguous run ends on a line (a part line streamed next
    to a cached store ran 4x slower: global average backward of [256, 2048, 7²] f32, rows of
    196 bytes, 2.1 -> 8.4 ms on the 2-core dev box)."""
    from rudnn.streaming import LINE_BYTES, STREAM_BYTES, streams
    on, off = (types.SimpleNamespace(streaming_stores=v) for v in (True, False))
    assert streams(on, STREAM_BYTES) and streams(on, STREAM_BYTES, 7 * LINE_BYTES)
    assert not streams(on, STREAM_BYTES - 1) and not streams(off, STREAM_BYTES << 4)
    assert not streams(on, STREAM_BYTES, 196) and not streams(on, STREAM_BYTES, 224)


@pytest.mark.feature("pooling: torch")
@pytest.mark.parametrize("stream", [False, True])
def test_scatter_backward_with_streaming_stores_matches_torch(runtime, rng, torch, monkeypatch, stream):
    """The scatter backward kernels (devices whose units are SIMD lanes, forced here) with dx
    written through kd.streaming_stores() or not (`stream`, forced at any size): max through
    the indices, averages by output columns, by rows and one output at a time (adaptive), f32
    bit for bit against torch autograd; dx rows of 11 and 17 put stores off their vectors'
    alignment."""
    import rudnn.pooling as pooling
    monkeypatch.setattr(runtime, "capabilities", dataclasses.replace(runtime.capabilities, units_are_simd_lanes=True))
    monkeypatch.setattr(pooling, "streams", lambda caps, nbytes, run_bytes=None: stream)
    ran = set()
    for name in ("scatter_max_backward", "cols_avg_backward", "rows_avg_backward", "scatter_avg_backward"):
        kernel = getattr(pooling, name)
        monkeypatch.setattr(pooling, name, type("Spy", (), {
            "__getitem__": lambda self, launch, k=kernel, n=name: ran.add(n) or k[launch]})())
    by_rows = ((1, 3, 9, 11), 3, 2, 1, 1, True)
    for n, (shape, k, s, p, d, ceil) in enumerate((WINDOWS[0], WINDOWS[2], WINDOWS[8], by_rows)):
        x = rng.standard_normal(shape).astype(np.float32)
        x.reshape(-1)[::7] = x.reshape(-1)[1]
        tx = runtime.tensor(x)
        out, idx = fn("max_pool{d}d_with_indices", shape)(tx, k, s, p, d, ceil)
        g = rng.standard_normal(out.shape).astype(np.float32)
        dx = fn("max_pool{d}d_backward", shape)(tx, runtime.tensor(g), idx, k, s, p, d, ceil)
        want = torch_grad(torch, lambda t: tfn(torch, "max_pool{d}d", shape)(t, k, s, p, d, ceil), x, g)
        np.testing.assert_array_equal(dx.numpy(), want, err_msg=f"max {shape}")
        if n == 3:  # the last average by rows (as where a plane sum by columns would not fit)
            monkeypatch.setattr(pooling, "column_units", lambda caps, problem: 0)
        call = lambda t: tfn(torch, "avg_pool{d}d", shape)(t, k, s, p, ceil, False)  # noqa: E731
        g = rng.standard_normal(call(torch.from_numpy(x)).shape).astype(np.float32)
        dx = fn("avg_pool{d}d_backward", shape)(tx, runtime.tensor(g), k, s, p, ceil, False)
        np.testing.assert_array_equal(dx.numpy(), torch_grad(torch, call, x, g), err_msg=f"avg {shape}")
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    g = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    dx = P.adaptive_avg_pool2d_backward(runtime.tensor(x), runtime.tensor(g))
    want = torch_grad(torch, lambda t: torch.nn.functional.adaptive_avg_pool2d(t, (4, 5)), x, g)
    np.testing.assert_array_equal(dx.numpy(), want, err_msg="adaptive")
    assert ran == {"scatter_max_backward", "cols_avg_backward", "rows_avg_backward", "scatter_avg_backward"}


# ---------------------------------------------------------------------------- layouts
@pytest.mark.feature("pooling: layouts")
def test_strided_and_unbatched_inputs(runtime, rng, torch):
    base = rng.standard_normal((3, 10, 2, 12)).astype(np.float32)
    view = runtime.tensor(base).permute(2, 0, 1, 3)[:, :, 1:, ::2]    # [2, 3, 9, 6], non-contiguous
    x = base.transpose(2, 0, 1, 3)[:, :, 1:, ::2]
    assert not view.is_contiguous()
    out, idx = P.max_pool2d_with_indices(view, 3, 2, 1, ceil_mode=True)
    want, widx = torch.nn.functional.max_pool2d(torch.from_numpy(x.copy()), 3, 2, 1, ceil_mode=True,
                                                return_indices=True)
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    np.testing.assert_array_equal(idx.numpy(), widx.numpy())
    grad = runtime.tensor(rng.standard_normal((*want.shape[:3], 2 * want.shape[3])).astype(np.float32))[..., ::2]
    dx = P.max_pool2d_backward(view, grad, idx, 3, 2, 1, ceil_mode=True)
    wdx = torch_grad(torch, lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1, ceil_mode=True), x,
                     grad.numpy())
    np.testing.assert_array_equal(dx.numpy(), wdx)

    unb = x[0]                                                         # [C, H, W]
    out = P.avg_pool2d(runtime.tensor(unb), 2, count_include_pad=False)
    assert out.shape == (3, 4, 3)
    np.testing.assert_array_equal(out.numpy(), torch.nn.functional.avg_pool2d(torch.from_numpy(unb.copy()), 2).numpy())
    o1, i1 = P.adaptive_max_pool1d(runtime.tensor(unb[0]), 4)          # [C, L]
    w1, wi1 = torch.nn.functional.adaptive_max_pool1d(torch.from_numpy(unb[0].copy()), 4, return_indices=True)
    np.testing.assert_array_equal(o1.numpy(), w1.numpy())
    np.testing.assert_array_equal(i1.numpy(), wi1.numpy())


@pytest.mark.feature("pooling: layouts")
def test_backward_is_deterministic_and_leaves_inputs_alone(runtime, rng):
    x = rng.standard_normal((2, 3, 15, 15)).astype(np.float32)
    tx = runtime.tensor(x)
    g = runtime.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    first = P.avg_pool2d_backward(tx, g, 3, 2, 1, True).numpy()
    for _ in range(3):
        assert np.array_equal(P.avg_pool2d_backward(tx, g, 3, 2, 1, True).numpy(), first)
    np.testing.assert_array_equal(tx.numpy(), x)


# ---------------------------------------------------------------------------- zero sizes, errors
@pytest.mark.feature("pooling: errors")
def test_zero_planes_return_empty_without_launching(runtime, launches):
    x = runtime.tensor(np.zeros((0, 3, 8, 8), np.float16))
    out, idx = P.max_pool2d_with_indices(x, 3, 2, 1)
    assert out.shape == (0, 3, 4, 4) and out.dtype is kd.f16 and idx.shape == (0, 3, 4, 4)
    assert P.avg_pool2d(x, 2).shape == (0, 3, 4, 4)
    assert P.adaptive_avg_pool2d(x, 1).shape == (0, 3, 1, 1)
    assert P.max_pool2d_backward(x, out, idx, 3, 2, 1).shape == (0, 3, 8, 8)
    assert P.adaptive_max_pool1d(runtime.tensor(np.zeros((0, 5), np.float32)), 2)[0].shape == (0, 2)
    assert launches[0] == 0


def _bad_calls(rt):
    x = rt.tensor(np.ones((2, 3, 8, 8), np.float32))
    g = rt.tensor(np.ones((2, 3, 4, 4), np.float32))
    i = rt.tensor(np.zeros((2, 3, 4, 4), np.int64))
    foreign = kd.Tensor(_OtherRuntime(), g.buffer, g.shape, g.dtype)
    return [
        ("input", lambda: P.max_pool2d(np.ones((2, 3, 8, 8), np.float32), 2)),
        ("input must be F32, F16 or BF16", lambda: P.avg_pool2d(rt.tensor(np.ones((2, 3, 8, 8), np.int32)), 2)),
        ("input must have rank 3", lambda: P.max_pool2d(rt.tensor(np.ones((8, 8), np.float32)), 2)),
        ("input must have rank 4", lambda: P.avg_pool3d(rt.tensor(np.ones((8,), np.float32)), 2)),
        ("non-zero spatial", lambda: P.adaptive_avg_pool2d(rt.tensor(np.ones((2, 3, 0, 4), np.float32)), 1)),
        ("kernel_size must be positive", lambda: P.max_pool2d(x, 0)),
        ("kernel_size must be an int or 2 ints", lambda: P.max_pool2d(x, (2, 2, 2))),
        ("kernel_size must be an int", lambda: P.avg_pool1d(rt.tensor(np.ones((2, 8), np.float32)), 2.0)),
        ("stride must be positive", lambda: P.max_pool2d(x, 2, stride=(1, 0))),
        ("stride must be positive", lambda: P.avg_pool3d(rt.tensor(np.ones((1, 4, 4, 4), np.float32)), 2, -1)),
        ("dilation must be positive", lambda: P.max_pool1d(rt.tensor(np.ones((2, 8), np.float32)), 2, dilation=0)),
        ("padding must be >= 0", lambda: P.max_pool2d(x, 3, padding=-1)),
        ("padding must be at most half of kernel_size", lambda: P.max_pool2d(x, 3, padding=2)),
        ("padding must be at most half of kernel_size", lambda: P.avg_pool2d(x, (4, 2), padding=(2, 2))),
        ("output would be empty", lambda: P.max_pool2d(x, 5, dilation=2)),
        ("output would be empty", lambda: P.avg_pool2d(x, 9)),
        ("divisor_override must be non-zero", lambda: P.avg_pool2d(x, 2, divisor_override=0)),
        ("divisor_override must be an int", lambda: P.avg_pool2d(x, 2, divisor_override=1.5)),
        ("ceil_mode must be a bool", lambda: P.max_pool2d(x, 2, ceil_mode=1)),
        ("count_include_pad must be a bool", lambda: P.avg_pool2d(x, 2, count_include_pad="yes")),
        ("output_size must be positive", lambda: P.adaptive_avg_pool2d(x, (0, 2))),
        ("output_size must be an int or 2 ints", lambda: P.adaptive_max_pool2d(x, (1, 2, 3))),
        ("grad must have shape [2, 3, 4, 4]",
         lambda: P.max_pool2d_backward(x, rt.tensor(np.ones((2, 3, 4, 5), np.float32)), i, 2)),
        ("grad must have the dtype of input",
         lambda: P.avg_pool2d_backward(x, rt.tensor(np.ones((2, 3, 4, 4), np.float16)), 2)),
        ("indices must be an I64 tensor", lambda: P.max_pool2d_backward(x, g, None, 2)),
        ("indices must be I64", lambda: P.adaptive_max_pool2d_backward(x, g, g)),
        ("indices must have shape", lambda: P.max_pool2d_backward(x, g, rt.tensor(np.zeros((2, 3, 4), np.int64)), 2)),
        ("other", lambda: P.avg_pool2d_backward(x, foreign, 2)),
        ("other", lambda: P.max_pool2d_backward(x, g, kd.Tensor(_OtherRuntime(), i.buffer, i.shape, i.dtype), 2)),
    ]


@pytest.mark.feature("pooling: errors")
def test_every_error_rule_before_launch(runtime, launches):
    assert_each_rejected(_bad_calls(runtime), PoolingError)
    assert launches[0] == 0


@pytest.mark.feature("pooling: errors")
def test_mixed_runtimes_name_both(runtime):
    others = [n for n in kd.available_runtimes() if kd.runtime(n).device_key != runtime.device_key]
    if not others:
        pytest.skip("this machine has a single runtime device; the stand-in runtime test covers the message")
    other = kd.runtime(others[0])
    x = runtime.tensor(np.ones((1, 2, 4, 4), np.float32))
    g = other.tensor(np.ones((1, 2, 2, 2), np.float32))
    with pytest.raises(PoolingError, match=f"{other.name}.*{runtime.name}"):
        P.avg_pool2d_backward(x, g, 2)


def test_row_vector_pooling_skips_memory_that_starts_off_its_vectors(monkeypatch):
    """Imported memory may start at any address: where the input's first element is not on a
    vector boundary the row-vector kernel is not used (its vector loads would be misaligned
    on a GPU) and the result is still torch's."""
    import rudnn.pooling as pooling
    from rudnn.pooling.tuning import row_vector_outputs
    rt = kd.runtime("cpu")
    monkeypatch.setattr(pooling, "row_vector_outputs", lambda caps, *a: row_vector_outputs(_as_gpu(caps), *a))
    launched = []
    real = pooling._rows
    monkeypatch.setattr(pooling, "_rows", lambda *a: launched.append(real(*a)) or launched[-1])
    base = np.arange(1 + 2 * 3 * 8 * 16, dtype=np.float32)[::-1].copy()
    for start, used in ((0, True), (1, False)):
        x = base[start:start + 2 * 3 * 8 * 16].reshape(2, 3, 8, 16)
        launched.clear()
        out = pooling.max_pool2d(rt.wrap(x), 3, 2, 1)
        assert launched == [used], start
        want = np.full((2, 3, 4, 8), -np.inf, np.float32)
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        for i in range(3):
            for j in range(3):
                want = np.maximum(want, padded[:, :, i:i + 8:2, j:j + 16:2])
        np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.feature("pooling: global average")
@pytest.mark.parametrize("stream", [False, True])
def test_global_average_backward_divides_once_as_a_mean(runtime, rng, monkeypatch, stream):
    """torch's global average pooling is a mean: its gradient is grad / (H·W) in one f32
    division, on every kernel (dividing by H then W differs in the last bit for some values,
    several of these); rows of 21 (stores off their vectors' alignment) and of 256, dx written
    through kd.streaming_stores() or not (`stream`, forced at any size)."""
    monkeypatch.setattr(P, "streams", lambda caps, nbytes, run_bytes=None: stream)
    for h, w in ((3, 7), (16, 16)):
        x = runtime.zeros((4, 16, h, w), "f32")
        g = rng.standard_normal((4, 16, 1, 1)).astype(np.float32)
        got = P.adaptive_avg_pool2d_backward(x, runtime.tensor(g)).numpy()
        want = np.broadcast_to(g / np.float32(h * w), (4, 16, h, w))
        np.testing.assert_array_equal(got, want)
    assert np.any(g / np.float32(3) / np.float32(7) != g / np.float32(21))  # the case can fail
