"""Short vectors: wide loads/stores, lane-wise arithmetic, lane access, reductions."""
import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("vectors"), pytest.mark.interpreter]


@kd.kernel
def saxpy_vec(x: kd.Tensor, y: kd.Tensor, out: kd.Tensor, a: kd.f32, n: kd.i32, L: kd.Const[int]):
    i = (kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()) * L
    if i + L <= n:
        vx = kd.load_vec(x, i, L)
        vy = kd.load_vec(y, i, L)
        r = vx * a + vy
        kd.store_vec(out, i, r)
    elif i < n:
        for j in range(i, n):
            out[j] = x[j] * a + y[j]


@pytest.mark.parametrize("lanes", [2, 4, 8])
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "i32"])
def test_vector_saxpy(runtime, rng, lanes, dt):
    n = 203
    npd = kd.as_dtype(dt).np
    x = rng.integers(-20, 20, n).astype(npd)
    y = rng.integers(-20, 20, n).astype(npd)
    out = runtime.zeros(n, dt)
    per = (n + lanes - 1) // lanes
    saxpy_vec[(per + 31) // 32, 32](runtime.tensor(x), runtime.tensor(y), out, 0.5, n, lanes)
    ref = (x.astype(np.float32) * 0.5 + y.astype(np.float32)).astype(npd)
    np.testing.assert_array_equal(out.numpy(), ref)


@kd.kernel
def vec_lanes(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    i = kd.unit_pos_x() * 4
    v = kd.load_vec(x, i, 4)
    w = kd.make_vec(v[3], v[2], v[1], v[0])        # reverse the lanes
    s = kd.splat(kd.vec_sum(v), 4)
    m = kd.vec_max(v) - kd.vec_min(v)
    e = kd.exp(w) * 0.0 + w + s * 0.0 + m * 0.0
    z = kd.make_vec(e[0], e[1], e[2] + m, e[3])
    kd.store_vec(out, i, z)


def test_vector_lanes_and_reductions(runtime, rng):
    x = rng.standard_normal(32).astype(np.float32)
    out = runtime.zeros(32, "f32")
    vec_lanes[1, 8](runtime.tensor(x), out)
    r = x.reshape(8, 4)[:, ::-1].copy()
    r[:, 2] += x.reshape(8, 4).max(1) - x.reshape(8, 4).min(1)
    np.testing.assert_allclose(out.numpy(), r.reshape(-1), rtol=1e-6, atol=1e-6)
