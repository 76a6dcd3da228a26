"""rudnn.normalization (SPEC §1) on every runtime: float64 numpy references, PyTorch CPU
cross-checks, special values, every error rule, odd widths, strided inputs, both kernel
forms (the shapes a GPU picks, run here too), deterministic dgamma/dbeta."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kerneldsl as kd
import rudnn
import rudnn.normalization as N
from reference import normalization as ref
from rudnn.normalization import NormalizationError
from rudnn.normalization.tuning import choose_shape
from family_checks import OtherRuntime as _OtherRuntime, assert_each_rejected

pytestmark = pytest.mark.feature("normalization")
ROOT = Path(__file__).resolve().parent.parent
DTYPES = ["f32", "f16", "bf16"]
WIDTHS = [1, 3, 1023, 4097]
TILED = 2048  # a width of whole 16-byte chunks: GPU runtimes hold bf16 rows as packed pairs (packed.py)
RTOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}


def host(a, dtype):
    """`a` rounded to `dtype` on the host (what the kernels see)."""
    return np.asarray(a, np.float32).astype(kd.as_dtype(dtype).np)


def close(got, want, dtype, scale=1.0):
    """Compare a result stored in `dtype` with a float64 reference of magnitude ~scale."""
    r = RTOL[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=r, atol=r * scale)


def stats_close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-5, atol=1e-6)


def problem(rng, rows_shape, width, dtype):
    x = host(rng.standard_normal((*rows_shape, width)) * 2 + 0.5, dtype)
    gamma = rng.standard_normal(width).astype(np.float32)
    beta = rng.standard_normal(width).astype(np.float32)
    return x, gamma, beta


def dx_scale(rstd, grad, gamma):
    """The magnitude dx is made of (rstd·grad·gamma): its cancellations leave noise of that size."""
    return float(np.abs(np.asarray(rstd, np.float64)[..., None] * grad.astype(np.float64) * gamma).max())


def lead_for(width):
    return (2, 3) if width < 64 else (5,)


# ---------------------------------------------------------------------------- forward
@pytest.mark.parametrize("width", WIDTHS + [TILED])
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_matches_reference(runtime, rng, dtype, width):
    x, gamma, beta = problem(rng, lead_for(width), width, dtype)
    tx, tg, tb = runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(beta)

    y, mean, rstd = N.layer_norm_with_stats(tx, tg, tb, 1e-5)
    ry, rmean, rrstd = ref.layer_norm(x, gamma, beta, 1e-5)
    assert y.dtype is kd.as_dtype(dtype) and y.shape == x.shape
    assert mean.dtype is kd.f32 and mean.shape == x.shape[:-1] and rstd.shape == x.shape[:-1]
    close(y.numpy(), ry, dtype)
    stats_close(mean.numpy(), rmean)
    np.testing.assert_allclose(rstd.numpy(), rrstd, rtol=2e-5)
    close(N.layer_norm(tx, tg).numpy(), ref.layer_norm(x, gamma, None, 1e-5)[0], dtype)

    y, rstd = N.rms_norm_with_stats(tx, tg, 1e-6)
    ry, rrstd = ref.rms_norm(x, gamma, 1e-6)
    close(y.numpy(), ry, dtype)
    np.testing.assert_allclose(rstd.numpy(), rrstd, rtol=2e-5)
    close(N.rms_norm(tx, tg, epsilon=0.5).numpy(), ref.rms_norm(x, gamma, 0.5)[0], dtype)

    s = N.softmax_last_axis(tx)
    assert s.dtype is kd.as_dtype(dtype) and s.shape == x.shape
    close(s.numpy(), ref.softmax(x), dtype, scale=1.0 / width)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_streaming_outputs_match_reference(runtime, rng, monkeypatch, dtype):
    """LayerNorm and RMSNorm with their outputs written through kd.streaming_stores()
    (forced at any size; on the cpu runtime, non-temporal where a row's vectors are aligned):
    rows of 1024 (aligned) and 1023 (not), as the reference."""
    monkeypatch.setattr(N, "streams", lambda caps, nbytes, run_bytes=None: True)
    for width in (1024, 1023):
        x, gamma, beta = problem(rng, lead_for(width), width, dtype)
        tx, tg, tb = runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(beta)
        close(N.layer_norm(tx, tg, tb).numpy(), ref.layer_norm(x, gamma, beta, 1e-5)[0], dtype)
        close(N.rms_norm(tx, tg).numpy(), ref.rms_norm(x, gamma, 1e-6)[0], dtype)


@pytest.mark.feature("normalization: backward")
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_matches_reference(runtime, rng, dtype, width):
    x, gamma, beta = problem(rng, lead_for(width), width, dtype)
    grad = host(rng.standard_normal(x.shape), dtype)
    tx, tg, tgrad = runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(grad)
    rows = int(np.prod(x.shape[:-1]))

    _, mean, rstd = N.layer_norm_with_stats(tx, tg, runtime.tensor(beta))
    dx, dgamma, dbeta = N.layer_norm_backward(tx, tg, tgrad, mean, rstd)
    rdx, rdg, rdb = ref.layer_norm_backward(x, gamma, grad, mean.numpy(), rstd.numpy())
    assert dx.dtype is kd.as_dtype(dtype) and dx.shape == x.shape
    assert dgamma.dtype is kd.f32 and dgamma.shape == (width,) and dbeta.shape == (width,)
    close(dx.numpy(), rdx, dtype, scale=dx_scale(rstd.numpy(), grad, gamma))
    np.testing.assert_allclose(dgamma.numpy(), rdg, rtol=1e-4, atol=1e-5 * rows)
    np.testing.assert_allclose(dbeta.numpy(), rdb, rtol=1e-4, atol=1e-5 * rows)

    _, rstd = N.rms_norm_with_stats(tx, tg)
    dx, dgamma = N.rms_norm_backward(tx, tg, tgrad, rstd)
    rdx, rdg = ref.rms_norm_backward(x, gamma, grad, rstd.numpy())
    close(dx.numpy(), rdx, dtype, scale=dx_scale(rstd.numpy(), grad, gamma))
    np.testing.assert_allclose(dgamma.numpy(), rdg, rtol=1e-4, atol=1e-5 * rows)


@pytest.mark.feature("normalization: backward")
def test_column_sums_are_deterministic(runtime, rng):
    x, gamma, _ = problem(rng, (301,), 1023, "f32")
    grad = rng.standard_normal(x.shape).astype(np.float32)
    tx, tg, tgrad = runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(grad)
    _, mean, rstd = N.layer_norm_with_stats(tx, tg)
    first = [t.numpy() for t in N.layer_norm_backward(tx, tg, tgrad, mean, rstd)[1:]]
    for _ in range(3):
        again = [t.numpy() for t in N.layer_norm_backward(tx, tg, tgrad, mean, rstd)[1:]]
        for a, b in zip(first, again):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    rdx, rdg, rdb = ref.layer_norm_backward(x, gamma, grad, mean.numpy(), rstd.numpy())
    np.testing.assert_allclose(first[0], rdg, rtol=1e-4, atol=3e-3)
    np.testing.assert_allclose(first[1], rdb, rtol=1e-4, atol=3e-3)


@pytest.mark.feature("normalization: backward")
@pytest.mark.parametrize("rows, width, count", [(1, 96, 1), (7, 96, 1), (64, 256, 1), (3, 4000, 1), (64, 300, 2),
                                                (65, 96, 3)])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_small_backwards_take_fewer_launches(runtime, rng, launches, rows, width, count, dtype):
    """Up to ONE_PASS_ROWS rows and ONE_LAUNCH_ELEMENTS elements, one launch gives dx, dgamma
    and dbeta (backward.norm_bwd_small); up to ONE_PASS_ROWS rows, two (dx's kernel, then one
    column launch summing rows in order); past them, three (partials and a finishing
    launch). Every form matches the reference, LayerNorm and RMSNorm."""
    x, gamma, _ = problem(rng, (rows,), width, dtype)
    grad = host(rng.standard_normal(x.shape), dtype)
    tx, tg, tgrad = runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(grad)
    xf, gradf = np.float32(x), np.float32(grad)
    _, mean, rstd = N.layer_norm_with_stats(tx, tg)
    _, rrstd = N.rms_norm_with_stats(tx, tg)
    kd.replay.clear()  # (a recorded call of this shape would replay without launching through kernels)
    launches[0] = 0
    dx, dgamma, dbeta = N.layer_norm_backward(tx, tg, tgrad, mean, rstd)
    assert launches[0] == count
    rdx, rdg, rdb = ref.layer_norm_backward(xf, gamma, gradf, mean.numpy(), rstd.numpy())
    np.testing.assert_allclose(dgamma.numpy(), rdg, rtol=1e-5, atol=1e-5 * rows)
    np.testing.assert_allclose(dbeta.numpy(), rdb, rtol=1e-5, atol=1e-5 * rows)
    close(np.float32(dx.numpy()), rdx, dtype, scale=dx_scale(rstd.numpy(), gradf, gamma))
    launches[0] = 0
    dx, dgamma = N.rms_norm_backward(tx, tg, tgrad, rrstd)
    assert launches[0] == count
    rdx, rdg = ref.rms_norm_backward(xf, gamma, gradf, rrstd.numpy())
    np.testing.assert_allclose(dgamma.numpy(), rdg, rtol=1e-5, atol=1e-5 * rows)
    close(np.float32(dx.numpy()), rdx, dtype, scale=dx_scale(rrstd.numpy(), gradf, gamma))


# ---------------------------------------------------------------------------- kernel forms
# sub-plane rows (butterfly), several rows a cube with shared-memory partials, vector
# chunks of 4 and 8, register-cached rows, and a row too long for registers (looped)
GPU_CASES = [(64, "f32"), (64, "bf16"), (1000, "f32"), (1000, "bf16"), (2048, "bf16"), (33000, "f32")]


def use_gpu_shapes(runtime, monkeypatch) -> list:
    """Make rudnn.normalization pick the shapes a GPU runtime would (plane size of this
    runtime, 1024 units per cube) on this cpu runtime; returns the list of shapes picked."""
    if not runtime.capabilities.units_are_simd_lanes:
        pytest.skip(f"{runtime.name} picks these shapes itself in every other test")
    gpu_caps = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False, shared_memory_emulated=False,
                                   max_cube_units=1024)
    picked = []

    def gpu_shape(caps, w, lanes):
        picked.append(choose_shape(gpu_caps, w, lanes))
        return picked[-1]

    monkeypatch.setattr(N, "choose_shape", gpu_shape)
    return picked


@pytest.mark.feature("normalization: GPU shapes")
@pytest.mark.parametrize("width, dtype", GPU_CASES)
def test_gpu_shapes_run_here(runtime, rng, monkeypatch, dtype, width):
    """The cube shapes, vector chunks and register-cached kernels a GPU runtime picks
    (plane size of this runtime, 1024 units per cube), run on this runtime."""
    picked = use_gpu_shapes(runtime, monkeypatch)
    x, gamma, beta = problem(rng, (3,) if width > 1000 else (7,), width, dtype)
    grad = host(rng.standard_normal(x.shape), dtype)
    tx, tg, tb, tgrad = (runtime.tensor(a) for a in (x, gamma, beta, grad))

    y, mean, rstd = N.layer_norm_with_stats(tx, tg, tb)
    ry, rmean, rrstd = ref.layer_norm(x, gamma, beta)
    close(y.numpy(), ry, dtype)
    stats_close(mean.numpy(), rmean)
    y, rstd2 = N.rms_norm_with_stats(tx, tg)
    close(y.numpy(), ref.rms_norm(x, gamma)[0], dtype)
    close(N.softmax_last_axis(tx).numpy(), ref.softmax(x), dtype, scale=1.0 / width)
    dx, dgamma, dbeta = N.layer_norm_backward(tx, tg, tgrad, mean, rstd)
    rdx, rdg, rdb = ref.layer_norm_backward(x, gamma, grad, mean.numpy(), rstd.numpy())
    close(dx.numpy(), rdx, dtype, scale=dx_scale(rstd.numpy(), grad, gamma))
    np.testing.assert_allclose(dgamma.numpy(), rdg, rtol=1e-4, atol=1e-4)
    dx, _ = N.rms_norm_backward(tx, tg, tgrad, rstd2)
    rdx = ref.rms_norm_backward(x, gamma, grad, rstd2.numpy())[0]
    close(dx.numpy(), rdx, dtype, scale=dx_scale(rstd2.numpy(), grad, gamma))
    assert picked and all(s.bx * s.ry <= 1024 for s in picked)
    if width == 33000:
        assert all(not s.cached and s.lanes == 4 for s in picked)
    if width in (64, 1000, 2048):
        assert all(s.lanes > 1 and s.cached for s in picked)


@pytest.mark.parametrize("width", [262147])
def test_very_long_rows(runtime, rng, width):
    x, gamma, beta = problem(rng, (2,), width, "f32")
    tx, tg = runtime.tensor(x), runtime.tensor(gamma)
    y, mean, rstd = N.layer_norm_with_stats(tx, tg, runtime.tensor(beta))
    close(y.numpy(), ref.layer_norm(x, gamma, beta)[0], "f32")
    close(N.softmax_last_axis(tx).numpy(), ref.softmax(x), "f32", scale=1.0 / width)
    xb = host(x, "bf16")  # longer than the cpu softmax's scratch row: two exps per element
    close(N.softmax_last_axis(runtime.tensor(xb)).numpy(), ref.softmax(xb), "bf16", scale=1.0 / width)
    grad = rng.standard_normal(x.shape).astype(np.float32)
    dx, dgamma, dbeta = N.layer_norm_backward(tx, tg, runtime.tensor(grad), mean, rstd)
    rdx, rdg, rdb = ref.layer_norm_backward(x, gamma, grad, mean.numpy(), rstd.numpy())
    close(dx.numpy(), rdx, "f32", scale=dx_scale(rstd.numpy(), grad, gamma))
    np.testing.assert_allclose(dgamma.numpy(), rdg, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- special values
@pytest.mark.feature("normalization: special values")
@pytest.mark.parametrize("width", [4, 1023])
@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(runtime, rng, dtype, width):
    check_special_values(runtime, rng, dtype, width)


@pytest.mark.feature("normalization: special values")
@pytest.mark.parametrize("width", [64, TILED])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_special_values_gpu_shapes(runtime, rng, monkeypatch, dtype, width):
    """The same rules in the kernels a GPU picks: vector chunks, rows held in registers
    (bf16 as packed pairs), sub-plane and multi-plane rows."""
    use_gpu_shapes(runtime, monkeypatch)
    check_special_values(runtime, rng, dtype, width)


def check_special_values(runtime, rng, dtype, width):
    x = rng.standard_normal((7, width)).astype(np.float32)
    x[1, 2] = np.nan
    x[2, 1] = np.inf
    x[3, :] = -np.inf
    x[4, [0, 3]] = -np.inf
    x[5, :] = 0.0
    x[6, 0] = np.inf
    x = host(x, dtype)
    gamma = rng.uniform(0.5, 2.0, width).astype(np.float32)
    tx, tg = runtime.tensor(x), runtime.tensor(gamma)

    sm = N.softmax_last_axis(tx).numpy().astype(np.float64)
    assert np.isnan(sm[[1, 2, 3, 6]]).all(), "NaN, +inf or all -inf in a row -> whole row NaN"
    assert (sm[4, [0, 3]] == 0).all(), "-inf entries of a finite row are exactly 0"
    finite = np.delete(np.arange(width), [0, 3])
    close(sm[4, finite], ref.softmax(x[4, finite]), dtype, scale=1.0 / width)
    close(sm[[0, 5]], ref.softmax(x[[0, 5]]), dtype, scale=1.0 / width)

    rms = N.rms_norm(tx, tg).numpy().astype(np.float64)
    assert np.isnan(rms[1]).all(), "NaN in a row -> whole row NaN"
    assert (rms[5] == 0).all(), "an all-zero row -> zeros"
    assert np.isnan(rms[6, 0]) and (rms[6, 1:] == 0).all(), "[inf, finite...] -> [NaN, 0...]"
    close(rms[0], ref.rms_norm(x[0], gamma)[0], dtype)

    ln = N.layer_norm(tx, tg).numpy().astype(np.float64)
    assert np.isnan(ln[1]).all(), "NaN in a row -> whole row NaN"
    assert (ln[5] == 0).all()
    close(ln[0], ref.layer_norm(x[0], gamma)[0], dtype)


@pytest.mark.feature("normalization: special values")
def test_rms_norm_inf_one(runtime):
    tx = runtime.tensor(np.array([[np.inf, 1.0]], np.float32))
    y = N.rms_norm(tx, runtime.tensor(np.ones(2, np.float32))).numpy()
    assert np.isnan(y[0, 0]) and y[0, 1] == 0


# ---------------------------------------------------------------------------- layouts and inputs
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_strided_inputs(runtime, rng, dtype):
    width = 1023
    base = host(rng.standard_normal((6, width + 5)), dtype)
    gbase = rng.standard_normal(2 * width).astype(np.float32)
    tbase, tgbase = runtime.tensor(base), runtime.tensor(gbase)
    gamma = gbase[::2]
    tgamma = tgbase[::2]
    views = {
        "row-strided slice (no copy)": (tbase[1:, 2:2 + width], base[1:, 2:2 + width]),
        "every other row": (tbase[::2, :width], base[::2, :width]),
        "transposed": (runtime.tensor(np.ascontiguousarray(base[:, :width].T)).transpose(0, 1), base[:, :width]),
        "strided last axis": (runtime.tensor(host(rng.standard_normal((4, 2 * width)), dtype))[:, ::2], None),
    }
    for name, (tv, hv) in views.items():
        hv = tv.numpy() if hv is None else hv
        assert not tv.is_contiguous(), name
        close(N.layer_norm(tv, tgamma).numpy(), ref.layer_norm(hv, gamma)[0], dtype)
        close(N.rms_norm(tv, tgamma).numpy(), ref.rms_norm(hv, gamma)[0], dtype)
        close(N.softmax_last_axis(tv).numpy(), ref.softmax(hv), dtype, scale=1.0 / width)
        _, mean, rstd = N.layer_norm_with_stats(tv, tgamma)
        grad_t = tv.transpose(0, 1).contiguous().transpose(0, 1)  # a strided grad as well
        dx, dg, db = N.layer_norm_backward(tv, tgamma, grad_t, mean, rstd)
        rdx, rdg, rdb = ref.layer_norm_backward(hv, gamma, hv, mean.numpy(), rstd.numpy())
        close(dx.numpy(), rdx, dtype, scale=dx_scale(rstd.numpy(), hv, gamma))
        np.testing.assert_allclose(dg.numpy(), rdg, rtol=1e-4, atol=1e-4)


def test_one_dim_input_and_stats_shapes(runtime, rng):
    x, gamma, beta = problem(rng, (), 3, "f32")
    tx, tg = runtime.tensor(x), runtime.tensor(gamma)
    y, mean, rstd = N.layer_norm_with_stats(tx, tg)
    assert y.shape == (3,) and mean.shape == () and rstd.shape == ()
    ry, rm, rr = ref.layer_norm(x, gamma)
    close(y.numpy(), ry, "f32")
    stats_close(mean.numpy(), rm)
    dx, dg, db = N.layer_norm_backward(tx, tg, tx, mean, rstd)
    close(dx.numpy(), ref.layer_norm_backward(x, gamma, x, mean.numpy(), rstd.numpy())[0], "f32")


def test_inputs_are_not_modified(runtime, rng):
    x, gamma, beta = problem(rng, (4,), 1023, "bf16")
    grad = host(rng.standard_normal(x.shape), "bf16")
    t = {k: runtime.tensor(v) for k, v in dict(x=x, gamma=gamma, beta=beta, grad=grad).items()}
    _, mean, rstd = N.layer_norm_with_stats(t["x"], t["gamma"], t["beta"])
    t["mean"], t["rstd"] = mean, rstd
    before = {k: v.numpy().copy() for k, v in t.items()}
    N.layer_norm(t["x"], t["gamma"], t["beta"])
    N.rms_norm_with_stats(t["x"], t["gamma"])
    N.softmax_last_axis(t["x"])
    N.layer_norm_backward(t["x"], t["gamma"], t["grad"], t["mean"], t["rstd"])
    N.rms_norm_backward(t["x"], t["gamma"], t["grad"], t["rstd"])
    for k, v in t.items():
        assert np.array_equal(v.numpy().view(np.uint8), before[k].view(np.uint8)), k


# ---------------------------------------------------------------------------- zero rows, errors
@pytest.mark.feature("normalization: errors")
@pytest.mark.parametrize("shape", [(0, 7), (2, 0, 5)])
def test_zero_rows_return_empty_without_launching(runtime, launches, shape):
    tx = runtime.tensor(np.zeros(shape, np.float16))
    tg = runtime.tensor(np.ones(shape[-1], np.float32))
    y, mean, rstd = N.layer_norm_with_stats(tx, tg, tg)
    assert y.shape == shape and y.dtype is kd.f16 and mean.shape == shape[:-1] and rstd.shape == shape[:-1]
    assert N.rms_norm(tx, tg).shape == shape and N.softmax_last_axis(tx).shape == shape
    dx, dg, db = N.layer_norm_backward(tx, tg, tx, mean, rstd)
    assert dx.shape == shape and (dg.numpy() == 0).all() and (db.numpy() == 0).all()
    dx, dg = N.rms_norm_backward(tx, tg, tx, rstd)
    assert dx.shape == shape and dg.shape == (shape[-1],) and (dg.numpy() == 0).all()
    assert launches[0] == 0


def _bad_calls(rt):
    x = rt.tensor(np.ones((2, 4), np.float32))
    g = rt.tensor(np.ones(4, np.float32))
    m = rt.tensor(np.zeros(2, np.float32))
    foreign = kd.Tensor(_OtherRuntime(), g.buffer, g.shape, g.dtype)
    return [
        ("input", lambda: N.layer_norm(np.ones((2, 4), np.float32), g)),
        ("input", lambda: N.rms_norm(rt.tensor(np.ones((2, 4), np.int32)), g)),
        ("input", lambda: N.softmax_last_axis(rt.tensor(np.ones((2, 4), np.float64)))),
        ("W > 0", lambda: N.softmax_last_axis(rt.tensor(np.ones((3, 0), np.float32)))),
        ("W > 0", lambda: N.layer_norm(rt.tensor(np.ones(1, np.float32)).reshape(()), g)),
        ("gamma", lambda: N.layer_norm(x, rt.tensor(np.ones(4, np.float16)))),
        ("gamma", lambda: N.rms_norm(x, rt.tensor(np.ones(5, np.float32)))),
        ("gamma", lambda: N.rms_norm(x, None)),
        ("beta", lambda: N.layer_norm(x, g, rt.tensor(np.ones((1, 4), np.float32)))),
        ("beta", lambda: N.layer_norm_with_stats(x, g, rt.tensor(np.ones(4, np.float16)))),
        ("epsilon", lambda: N.layer_norm(x, g, None, 0.0)),
        ("epsilon", lambda: N.rms_norm(x, g, -1e-6)),
        ("epsilon", lambda: N.rms_norm_with_stats(x, g, float("nan"))),
        ("epsilon", lambda: N.layer_norm(x, g, None, float("inf"))),
        ("epsilon", lambda: N.layer_norm(x, g, None, "1e-5")),
        ("epsilon", lambda: N.layer_norm(x, g, None, True)),
        ("other", lambda: N.layer_norm(x, foreign)),
        ("other", lambda: N.rms_norm_backward(x, g, x, kd.Tensor(_OtherRuntime(), m.buffer, (2,), kd.f32))),
        ("grad", lambda: N.layer_norm_backward(x, g, rt.tensor(np.ones((2, 5), np.float32)), m, m)),
        ("grad", lambda: N.rms_norm_backward(x, g, rt.tensor(np.ones((2, 4), np.int32)), m)),
        ("mean", lambda: N.layer_norm_backward(x, g, x, rt.tensor(np.zeros(3, np.float32)), m)),
        ("mean", lambda: N.layer_norm_backward(x, g, x, None, m)),
        ("rstd", lambda: N.layer_norm_backward(x, g, x, m, rt.tensor(np.zeros(2, np.float16)))),
        ("rstd", lambda: N.rms_norm_backward(x, g, x, rt.tensor(np.zeros((2, 1), np.float32)))),
        ("gamma", lambda: N.rms_norm_backward(x, rt.tensor(np.ones(3, np.float32)), x, m)),
    ]


@pytest.mark.feature("normalization: errors")
def test_every_error_rule_before_launch(runtime, launches):
    assert_each_rejected(_bad_calls(runtime), NormalizationError)
    assert launches[0] == 0


@pytest.mark.feature("normalization: errors")
def test_mixed_runtimes_name_both(runtime):
    others = [n for n in kd.available_runtimes() if kd.runtime(n).device_key != runtime.device_key]
    if not others:
        pytest.skip("this machine has a single runtime device; the stand-in runtime test covers the message")
    other = kd.runtime(others[0])
    x = runtime.tensor(np.ones((2, 4), np.float32))
    g = other.tensor(np.ones(4, np.float32))
    with pytest.raises(NormalizationError, match=f"{other.name}.*{runtime.name}"):
        N.layer_norm(x, g)


def test_error_is_exported_from_rudnn():
    assert rudnn.NormalizationError is NormalizationError
    assert issubclass(NormalizationError, rudnn.RudnnError)


# ---------------------------------------------------------------------------- PyTorch
@pytest.mark.feature("normalization: torch")
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_matches_torch(runtime, rng, dtype):
    torch = pytest.importorskip("torch", reason="PyTorch (the `oracle` extra) is not installed")
    F = torch.nn.functional
    width = 129
    x, gamma, beta = problem(rng, (3, 5), width, dtype)
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    xt = torch.from_numpy(x.astype(np.float32)).to(tdt)
    gt, bt = torch.from_numpy(gamma), torch.from_numpy(beta)
    tx, tg, tb = runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(beta)
    # torch keeps the input dtype for the output and computes in f32, like the SPEC
    want = F.layer_norm(xt.float(), (width,), gt, bt, 1e-5).to(tdt).float().numpy()
    close(N.layer_norm(tx, tg, tb).numpy(), want, dtype)
    want = F.rms_norm(xt.float(), (width,), gt, 1e-6).to(tdt).float().numpy()
    close(N.rms_norm(tx, tg).numpy(), want, dtype)
    want = torch.softmax(xt, -1).float().numpy()
    close(N.softmax_last_axis(tx).numpy(), want, dtype, scale=1.0 / width)


@pytest.mark.feature("normalization: torch")
def test_backward_matches_torch_autograd(runtime, rng):
    torch = pytest.importorskip("torch", reason="PyTorch (the `oracle` extra) is not installed")
    F = torch.nn.functional
    width = 129
    x, gamma, beta = problem(rng, (4, 3), width, "f32")
    grad = rng.standard_normal(x.shape).astype(np.float32)
    tx, tg, tgrad = runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(grad)

    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    bt = torch.tensor(beta, requires_grad=True)
    F.layer_norm(xt, (width,), gt, bt, 1e-5).backward(torch.from_numpy(grad))
    _, mean, rstd = N.layer_norm_with_stats(tx, tg, runtime.tensor(beta))
    dx, dg, db = N.layer_norm_backward(tx, tg, tgrad, mean, rstd)
    np.testing.assert_allclose(dx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dg.numpy(), gt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db.numpy(), bt.grad.numpy(), rtol=1e-4, atol=1e-4)

    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    F.rms_norm(xt, (width,), gt, 1e-6).backward(torch.from_numpy(grad))
    _, rstd = N.rms_norm_with_stats(tx, tg)
    dx, dg = N.rms_norm_backward(tx, tg, tgrad, rstd)
    np.testing.assert_allclose(dx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dg.numpy(), gt.grad.numpy(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------- example
@pytest.mark.feature("docs+examples")
def test_example_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "normalize.py"), "--rows", "33", "--width", "100"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
