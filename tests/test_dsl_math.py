"""Math functions against numpy/scipy-free float64 references, special values included."""
import math

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("math"), pytest.mark.interpreter]

UNARY = {
    "exp": (kd.exp, np.exp, (-90, 90)),
    "exp2": (kd.exp2, np.exp2, (-130, 130)),
    "exp2_fast": (kd.exp2_fast, np.exp2, (-126, 127)),
    "log": (kd.log, np.log, (1e-30, 1e30)),
    "log2": (kd.log2, np.log2, (1e-30, 1e30)),
    "log1p": (kd.log1p, np.log1p, (-0.999, 100)),
    "sqrt": (kd.sqrt, np.sqrt, (0, 1e6)),
    "rsqrt": (kd.rsqrt, lambda v: 1 / np.sqrt(v), (1e-6, 1e6)),
    "tanh": (kd.tanh, np.tanh, (-12, 12)),
    "sigmoid": (kd.sigmoid, lambda v: 1 / (1 + np.exp(-v)), (-60, 60)),
    "erf": (kd.erf, np.vectorize(math.erf), (-5, 5)),
    "sin": (kd.sin, np.sin, (-100, 100)),
    "cos": (kd.cos, np.cos, (-100, 100)),
    "abs": (kd.abs, np.abs, (-5, 5)),
    "floor": (kd.floor, np.floor, (-50, 50)),
    "ceil": (kd.ceil, np.ceil, (-50, 50)),
    "round": (kd.round, lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5), (-50, 50)),
}

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, 0.5, 2.5, -2.5], np.float64)


def make_unary(fn):
    @kd.kernel
    def k(x: kd.Tensor, out: kd.Tensor, n: kd.i32):
        i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
        if i < n:
            out[i] = fn(x[i])
    return k


KERNELS = {name: make_unary(spec[0]) for name, spec in UNARY.items()}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_unary_math(runtime, rng, name, dt):
    if not runtime.capabilities.supports_dtype(dt):
        pytest.skip(f"{runtime.name} has no {dt}")
    _, ref_fn, (lo, hi) = UNARY[name]
    if name in ("log", "log2", "rsqrt") or (name == "sqrt" and lo == 0):
        body = np.exp(rng.uniform(np.log(max(lo, 1e-30)), np.log(hi), 300))
    else:
        body = rng.uniform(lo, hi, 300)
    x = np.concatenate([body, SPECIALS]).astype(kd.as_dtype(dt).np)
    out = runtime.zeros(len(x), dt)
    KERNELS[name][(len(x) + 127) // 128, 128](runtime.tensor(x), out, len(x))
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(np.float64))
    got = out.numpy().astype(np.float64)
    if dt == "f32":
        ref = ref.astype(np.float32).astype(np.float64)
        rtol, atol = 4e-6, 1e-37
        if name in ("sin", "cos"):
            atol = 2e-6  # absolute error after range reduction of |x| <= 100
        if name in ("erf",):
            rtol, atol = 2e-6, 3e-7
        if name in ("exp2", "exp2_fast", "exp") and dt == "f32":
            rtol = 6e-6
    else:
        rtol, atol = 1e-13, 1e-300
        if name in ("sin", "cos"):
            atol = 1e-13
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)


def test_exp2_fast_subnormal_results(runtime):
    """Below 2**-126 exp2_fast may flush to zero; otherwise it is exp2."""
    x = np.linspace(-149.0, -126.0, 47).astype(np.float32)
    out = runtime.zeros(len(x), "f32")
    KERNELS["exp2_fast"][1, 64](runtime.tensor(x), out, len(x))
    got = out.numpy().astype(np.float64)
    ref = np.exp2(x.astype(np.float64)).astype(np.float32).astype(np.float64)
    ok = (got == 0) | np.isclose(got, ref, rtol=1e-2, atol=0)
    assert ok.all(), list(zip(x[~ok], got[~ok], ref[~ok]))
    assert (got[x >= -126] > 0).all()


@pytest.mark.parametrize("name, edge", [("exp", -103.972084), ("exp2", -150.0)])
def test_exp_results_at_the_underflow_edge(runtime, name, edge):
    """exp and exp2 in F32 from the normal range down past their underflow edge: denormal
    results where they exist (a device may flush them to zero: then exactly zero), zero past
    the edge and for -inf. The cpu runtime computes the inputs past the edge away from the
    denormal range (mathlib._past_zero), which must not move the edge."""
    ln2 = math.log(2) if name == "exp" else 1.0
    x = np.concatenate([np.linspace(-125 * ln2, edge + 2 * ln2, 60), edge + np.array([1e-5, 0, -1e-5]) * 8,
                        np.linspace(edge - 1, edge - 300, 20), [-np.inf, -1e30]]).astype(np.float32)
    out = runtime.zeros(len(x), "f32")
    KERNELS[name][(len(x) + 63) // 64, 64](runtime.tensor(x), out, len(x))
    got = out.numpy().astype(np.float64)
    ref = UNARY[name][1](x.astype(np.float64)).astype(np.float32).astype(np.float64)
    tiny = 2.0 ** -149  # the smallest denormal: the results' spacing below 2^-126
    close = np.abs(got - ref) <= np.maximum(6e-6 * ref, 2 * tiny)
    flushed = (got == 0) & (ref < 2.0 ** -126)
    assert (close | flushed).all(), list(zip(x[~(close | flushed)], got[~(close | flushed)], ref[~(close | flushed)]))
    assert (got[x < edge - 1e-3] == 0).all()
    if runtime.name.split(":")[0] in ("cpu", "interpreter"):  # these keep denormal results
        assert close.all(), list(zip(x[~close], got[~close], ref[~close]))
        assert (got[ref >= 2 * tiny] > 0).all()


@kd.kernel
def binary_math(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32, 2], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        a = x[i]
        b = y[i]
        out[i, 0] = kd.pow(a, b)
        out[i, 1] = kd.fma(a, b, 1.0)
        out[i, 2] = kd.min(a, b)
        out[i, 3] = kd.max(a, b)
        out[i, 4] = kd.clamp(a, -1.0, 2.0)
        out[i, 5] = 1.0 if kd.isnan(a) else 0.0
        out[i, 6] = 1.0 if kd.isinf(a) else 0.0
        out[i, 7] = kd.inf if a > 100.0 else kd.nan if a < -100.0 else a


def test_binary_math_and_specials(runtime, rng):
    a = np.concatenate([rng.uniform(0.01, 10, 50), rng.uniform(-5, 5, 50), [np.nan, np.inf, -np.inf, 0.0, -2.0,
                                                                             200.0, -200.0]]).astype(np.float32)
    b = np.concatenate([rng.uniform(-3, 3, 50), rng.integers(-4, 5, 50), [1.0, 2.0, 1.0, -1.0, 3.0, 1.0,
                                                                          1.0]]).astype(np.float32)
    n = len(a)
    out = runtime.zeros((n, 8), "f32")
    binary_math[(n + 63) // 64, 64](runtime.tensor(a), runtime.tensor(b), out, n)
    got = out.numpy()
    A, B = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        pw = np.power(A, B)
        np.testing.assert_allclose(got[:, 0], pw.astype(np.float32), rtol=2e-5, equal_nan=True)
    np.testing.assert_allclose(got[:, 1], A * B + 1, rtol=1e-6, atol=1e-6, equal_nan=True)
    nan_either = np.isnan(A) | np.isnan(B)
    np.testing.assert_array_equal(got[:, 2], np.where(nan_either, np.nan, np.minimum(A, B)).astype(np.float32))
    np.testing.assert_array_equal(got[:, 3], np.where(nan_either, np.nan, np.maximum(A, B)).astype(np.float32))
    np.testing.assert_array_equal(got[:, 4], np.clip(A, -1, 2).astype(np.float32))
    np.testing.assert_array_equal(got[:, 5], np.isnan(A))
    np.testing.assert_array_equal(got[:, 6], np.isinf(A))
    np.testing.assert_array_equal(got[:, 7], np.where(A > 100, np.inf, np.where(A < -100, np.nan, A)).astype(np.float32))


@kd.kernel
def half_math(x: kd.Tensor, out: kd.Tensor, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        out[i] = kd.exp(x[i]) * 0.5 + kd.tanh(x[i])   # computed in f32, stored in the input dtype


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_types_compute_in_f32(runtime, rng, dt):
    x = rng.uniform(-3, 3, 200).astype(kd.as_dtype(dt).np)
    out = runtime.zeros(200, dt)
    half_math[2, 128](runtime.tensor(x), out, 200)
    xf = x.astype(np.float64)
    ref = (np.exp(xf) * 0.5 + np.tanh(xf)).astype(np.float32).astype(kd.as_dtype(dt).np)
    np.testing.assert_array_equal(out.numpy().astype(np.float32), ref.astype(np.float32))
