"""Scalars of every dtype: arithmetic, comparisons, casts, literals, on every runtime."""
import numpy as np
import pytest

import kerneldsl as kd
from conftest import tol

pytestmark = [pytest.mark.feature("scalars+casts"), pytest.mark.interpreter]

FLOATS = ["f32", "f16", "bf16", "f64"]
INTS = ["i32", "u32", "i64", "u8"]


@kd.kernel
def arith(x: kd.Tensor, y: kd.Tensor, out: kd.Tensor, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        a = x[i]
        b = y[i]
        out[i, 0] = a + b
        out[i, 1] = a - b
        out[i, 2] = a * b
        out[i, 3] = a * 3 + 1
        out[i, 4] = kd.max(a, b)
        out[i, 5] = kd.min(a, b)
        out[i, 6] = kd.select(a < b, a, b)
        out[i, 7] = 1 if a == b else 0


def _pair(rng, dt, n):
    if dt in FLOATS:
        x = rng.uniform(-4, 4, n)
        y = rng.uniform(-4, 4, n)
        y[::5] = x[::5]
    elif dt == "u8":
        x, y = rng.integers(0, 50, n), rng.integers(0, 50, n)
    else:
        x, y = rng.integers(0 if dt[0] == "u" else -1000, 1000, n), rng.integers(0, 1000, n)
    npd = kd.as_dtype(dt).np
    return x.astype(npd), y.astype(npd)


@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("n", [1, 13, 300])
def test_arith(runtime, rng, dt, n):
    if not runtime.capabilities.supports_dtype(dt):
        pytest.skip(f"{runtime.name} has no {dt}")
    x, y = _pair(rng, dt, n)
    out = runtime.zeros((n, 8), dt)
    arith[(n + 63) // 64, 64](runtime.tensor(x), runtime.tensor(y), out, n)
    work = np.float64 if dt in FLOATS else np.int64
    a, b = x.astype(work), y.astype(work)
    ref = np.stack([a + b, a - b, a * b, a * 3 + 1, np.maximum(a, b), np.minimum(a, b),
                    np.where(a < b, a, b), (a == b).astype(work)], 1)
    got = out.numpy()
    if dt in FLOATS:
        rtol, atol = tol(dt)
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(kd.as_dtype(dt).np).astype(np.float64),
                                   rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, ref.astype(kd.as_dtype(dt).np))


@kd.kernel
def int_ops(x: kd.Tensor, y: kd.Tensor, out: kd.Tensor, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        a = x[i]
        b = y[i]
        out[i, 0] = a // b
        out[i, 1] = a % b
        out[i, 2] = a & b
        out[i, 3] = a | b
        out[i, 4] = a ^ b
        out[i, 5] = a << 3
        out[i, 6] = a >> 2
        out[i, 7] = ~a


@pytest.mark.parametrize("dt", ["i32", "u32", "i64"])
def test_integer_ops(runtime, rng, dt):
    n = 97
    npd = kd.as_dtype(dt).np
    lo = 0 if dt == "u32" else -5000
    x = rng.integers(lo, 5000, n).astype(npd)
    y = rng.integers(1, 60, n).astype(npd)
    out = runtime.zeros((n, 8), dt)
    int_ops[1, 128](runtime.tensor(x), runtime.tensor(y), out, n)
    a, b = x, y
    # integer division and remainder truncate toward zero (C semantics)
    q = (np.abs(a.astype(np.int64)) // b.astype(np.int64)) * np.sign(a.astype(np.int64))
    r = a.astype(np.int64) - q * b.astype(np.int64)
    ref = np.stack([q.astype(npd), r.astype(npd), a & b, a | b, a ^ b, (a << 3).astype(npd), a >> 2, ~a], 1)
    np.testing.assert_array_equal(out.numpy(), ref)


@kd.kernel
def cast_kernel(x: kd.Tensor, out: kd.Tensor, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        out[i] = kd.cast(x[i], out.dtype)


CAST_TYPES = ["f32", "f16", "bf16", "f64", "i32", "u32", "i64", "u8", "bool"]


@pytest.mark.parametrize("src", CAST_TYPES)
@pytest.mark.parametrize("dst", CAST_TYPES)
def test_casts(runtime, rng, src, dst):
    n = 40
    if src == "bool":
        x = rng.integers(0, 2, n).astype(bool)
    elif src in ("u8",):
        x = rng.integers(0, 120, n).astype(np.uint8)
    elif src in ("u32",):
        x = rng.integers(0, 120, n).astype(np.uint32)
    elif src in ("i32", "i64"):
        x = rng.integers(-120, 120, n).astype(kd.as_dtype(src).np)
    else:
        lo = 0 if dst in ("u8", "u32") else -120
        x = rng.uniform(lo, 120, n).astype(kd.as_dtype(src).np)
        x[0] = 0.0
    out = runtime.zeros(n, dst)
    cast_kernel[1, 64](runtime.tensor(x), out, n)
    dnp = kd.as_dtype(dst).np
    if dst == "bool":
        ref = x.astype(np.float64) != 0
    elif dst in ("f32", "f16", "bf16", "f64"):
        ref = x.astype(np.float64).astype(dnp) if src != "bf16" else x.astype(np.float32).astype(dnp)
    else:
        ref = np.trunc(x.astype(np.float64)).astype(dnp)
    got = out.numpy()
    if dst in ("f16", "bf16") and src in ("f32", "f64"):
        # one rounding from the source value (f64 -> f16 may double-round via f32)
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol(dst)[0])
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dst", ["f16", "bf16"])
def test_half_casts_of_special_values(runtime, dst):
    """NaN stays NaN (its payload and sign may not: CUDA gives the canonical NaN), infinities
    and signed zeros keep their sign, and ties round to even."""
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e-30,
                  1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8], np.float32)
    out = runtime.zeros(len(x), dst)
    cast_kernel[1, 64](runtime.tensor(x), out, len(x))
    got = out.numpy().astype(np.float32)
    assert np.isnan(got[:2]).all()
    with np.errstate(over="ignore"):  # 1e30 -> f16 is inf, as wanted
        want = x[2:].astype(kd.as_dtype(dst).np).astype(np.float32)
    np.testing.assert_array_equal(got[2:], want)
    np.testing.assert_array_equal(np.signbit(got[2:]), np.signbit(want))


@kd.kernel
def literals(out: kd.Tensor[kd.f32], k: kd.i32, s: kd.f32):
    i = kd.unit_pos_x()
    half = 0.5
    out[i, 0] = i * half            # int * float literal -> f32
    out[i, 1] = i / 4               # true division
    out[i, 2] = (i + k) * s
    out[i, 3] = -i if i % 2 == 0 else i ** 2
    out[i, 4] = kd.f32(7) // 2
    out[i, 5] = float(i) + True


def test_literals_and_promotion(runtime):
    out = runtime.zeros((8, 6), "f32")
    literals[1, 8](out, 3, 1.5)
    i = np.arange(8, dtype=np.float64)
    ref = np.stack([i * 0.5, i / 4, (i + 3) * 1.5, np.where(i % 2 == 0, -i, i ** 2), np.full(8, 3.0), i + 1], 1)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)


@kd.kernel
def scalar_params(out: kd.Tensor[kd.f64], a: kd.i32, b: kd.u32, c: kd.i64, d: kd.f32, e: kd.f64, f: kd.bool,
                  g: kd.f16, h: kd.u8):
    out[0] = a
    out[1] = b
    out[2] = c
    out[3] = d
    out[4] = e
    out[5] = 1.0 if f else 0.0
    out[6] = g
    out[7] = h


def test_scalar_parameters(runtime):
    if not runtime.capabilities.supports_dtype("f64"):
        pytest.skip(f"{runtime.name} has no f64")
    out = runtime.zeros(8, "f64")
    scalar_params[1, 1](out, -7, 4_000_000_000, -(2 ** 40), 1.25, 1e-300, True, 0.5, 200)
    np.testing.assert_array_equal(out.numpy(), [-7, 4e9, -(2.0 ** 40), 1.25, 1e-300, 1, 0.5, 200])
