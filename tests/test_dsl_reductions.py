"""`kd.cube_sum` / `kd.cube_max`: cube-wide reductions written in the DSL, at every cube
size (partial last planes included) and with NaN inputs."""
import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("cube reductions"), pytest.mark.interpreter]


@kd.kernel
def reduce_cubes(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    t = kd.unit_pos_x()
    v = x[kd.cube_pos_x() * kd.cube_units() + t]
    s = kd.cube_sum(v)
    m = kd.cube_max(v)
    out[(kd.cube_pos_x() * kd.cube_units() + t) * 2] = s    # every unit gets the results
    out[(kd.cube_pos_x() * kd.cube_units() + t) * 2 + 1] = m


@pytest.mark.parametrize("units", [1, 7, 32, 100, 256])
def test_cube_sum_and_max(runtime, rng, units):
    cubes = 3
    x = rng.standard_normal(cubes * units).astype(np.float32)
    x[units + 3 % units] = np.nan  # the second cube holds a NaN
    out = runtime.zeros(cubes * units * 2, "f32")
    reduce_cubes[cubes, units](runtime.tensor(x), out)
    got = out.numpy().reshape(cubes, units, 2)
    xr = x.reshape(cubes, units).astype(np.float64)
    for c in range(cubes):
        want_sum, want_max = xr[c].sum(), xr[c].max()
        if np.isnan(want_sum):
            assert np.isnan(got[c]).all()
            continue
        np.testing.assert_allclose(got[c, :, 0], want_sum, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(got[c, :, 1], np.float32(want_max))
