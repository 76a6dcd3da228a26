"""Plane operations against numpy models (tests/reference/planes.py), at several cube
sizes including partial planes, in uniform loops."""
import numpy as np
import pytest

import kerneldsl as kd
from reference import planes as ref

pytestmark = [pytest.mark.feature("plane ops"), pytest.mark.interpreter]

CUBES = [1, 7, 32, 64, 100]


@kd.kernel
def plane_all_ops(x: kd.Tensor[kd.f32], k: kd.Tensor[kd.i32], out: kd.Tensor[kd.f32, 2],
                  bits: kd.Tensor[kd.u32], mask: kd.i32):
    t = kd.unit_pos()
    v = x[t]
    out[t, 0] = kd.plane_sum(v)
    out[t, 1] = kd.plane_max(v)
    out[t, 2] = kd.plane_min(v)
    out[t, 3] = kd.plane_prod(v * 0.1 + 1.0)
    out[t, 4] = kd.plane_inclusive_sum(v)
    out[t, 5] = kd.plane_exclusive_sum(v)
    out[t, 6] = kd.plane_broadcast(v, 0)
    out[t, 7] = kd.plane_shuffle(v, k[t])
    out[t, 8] = kd.plane_shuffle_xor(v, mask)
    pos = v > 0.0
    bits[t] = kd.plane_ballot(pos)
    out[t, 9] = 1.0 if kd.plane_all(pos) else 0.0
    out[t, 10] = 1.0 if kd.plane_any(pos) else 0.0
    out[t, 11] = 1.0 if kd.plane_elect() else 0.0


@pytest.mark.parametrize("units", CUBES + [(4, 32), (64, 2), (3, 5, 7)])
def test_plane_ops(runtime, rng, units):
    """Planes are consecutive units in linear order (x fastest), whatever the cube's shape;
    a driver that forms sub-groups along the first axis only must not change that."""
    block = units
    units = int(np.prod(units))
    P = runtime.plane_dim
    x = rng.integers(-8, 8, units).astype(np.float32)  # small integers: sums are exact in any order
    if units > 3:
        x[: min(P, units)] = np.abs(x[: min(P, units)]) + 1  # first plane all positive
    k = rng.integers(0, 2 * P, units).astype(np.int32)
    out = runtime.zeros((units, 12), "f32")
    bits = runtime.zeros(units, "u32")
    mask = 1 if P > 1 else 0
    plane_all_ops[1, block](runtime.tensor(x), runtime.tensor(k), out, bits, mask)
    got = out.numpy()
    np.testing.assert_array_equal(got[:, 0], ref.plane_reduce(x, P, np.sum))
    np.testing.assert_array_equal(got[:, 1], ref.plane_reduce(x, P, np.max))
    np.testing.assert_array_equal(got[:, 2], ref.plane_reduce(x, P, np.min))
    y = (x * np.float32(0.1) + np.float32(1.0)).astype(np.float32)
    np.testing.assert_allclose(got[:, 3], ref.plane_reduce(y, P, np.prod), rtol=1e-5)
    np.testing.assert_array_equal(got[:, 4], ref.plane_scan(x, P, True))
    np.testing.assert_array_equal(got[:, 5], ref.plane_scan(x, P, False))
    np.testing.assert_array_equal(got[:, 6], ref.plane_reduce(x, P, lambda a: a[0]))
    np.testing.assert_array_equal(got[:, 7], ref.plane_shuffle(x, k, P))
    np.testing.assert_array_equal(got[:, 8], ref.plane_shuffle_xor(x, mask, P))
    np.testing.assert_array_equal(bits.numpy(), ref.plane_ballot(x > 0, P))
    np.testing.assert_array_equal(got[:, 9], ref.plane_reduce(x > 0, P, np.all).astype(np.float32))
    np.testing.assert_array_equal(got[:, 10], ref.plane_reduce(x > 0, P, np.any).astype(np.float32))
    np.testing.assert_array_equal(got[:, 11], (np.arange(units) % P == 0).astype(np.float32))


@kd.kernel
def int_plane_ops(x: kd.Tensor[kd.i32], out: kd.Tensor[kd.i32, 2]):
    t = kd.unit_pos()
    v = x[t]
    out[t, 0] = kd.plane_sum(v)
    out[t, 1] = kd.plane_max(v)
    out[t, 2] = kd.plane_min(v)
    out[t, 3] = kd.plane_exclusive_sum(v)
    out[t, 4] = kd.plane_broadcast(v, kd.PLANE_DIM - 1)


def test_integer_plane_ops(runtime, rng):
    P = runtime.plane_dim
    units = 2 * P
    x = rng.integers(-1000, 1000, units).astype(np.int32)
    out = runtime.zeros((units, 5), "i32")
    int_plane_ops[1, units](runtime.tensor(x), out)
    got = out.numpy()
    np.testing.assert_array_equal(got[:, 0], ref.plane_reduce(x, P, np.sum))
    np.testing.assert_array_equal(got[:, 1], ref.plane_reduce(x, P, np.max))
    np.testing.assert_array_equal(got[:, 2], ref.plane_reduce(x, P, np.min))
    np.testing.assert_array_equal(got[:, 3], ref.plane_scan(x, P, False))
    np.testing.assert_array_equal(got[:, 4], ref.plane_reduce(x, P, lambda a: a[-1]))


@kd.kernel
def butterfly_rowsum(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32], B: kd.Const[int]):
    """Row sums: per-unit partial sums, a shuffle-xor butterfly inside each plane, then
    one value per plane through shared memory (plane ops inside a uniform loop)."""
    row = kd.cube_pos_x()
    t = kd.unit_pos()
    n = x.shape[1]
    acc = kd.f32(0)
    for i in range(t, n, B):
        acc += x[row, i]
    off = kd.PLANE_DIM // 2
    while off > 0:
        acc += kd.plane_shuffle_xor(acc, off)
        off //= 2
    parts = kd.shared(kd.f32, kd.plane_count())
    if kd.lane_pos() == 0:
        parts[kd.plane_pos()] = acc
    kd.sync_cube()
    if t == 0:
        s = kd.f32(0)
        for p in range(kd.plane_count()):
            s += parts[p]
        out[row] = s


@pytest.mark.parametrize("B", [32, 128])
def test_butterfly_reduction_in_loop(runtime, rng, B):
    if B % runtime.plane_dim:
        pytest.skip("cube size must be a multiple of the plane size for a butterfly")
    x = rng.standard_normal((9, 333)).astype(np.float32)
    out = runtime.zeros(9, "f32")
    butterfly_rowsum[9, B](runtime.tensor(x), out, B)
    np.testing.assert_allclose(out.numpy(), x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
