"""The matrix-multiply-accumulate primitive (m16n16k16, f16/bf16 in, f32 accumulate):
tiles loaded from global and shared memory, both layouts, several planes per cube."""
import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("mma"), pytest.mark.interpreter]


@kd.kernel
def gemm_tiles(a: kd.Tensor, b: kd.Tensor, c: kd.Tensor[kd.f32], M: kd.i32, N: kd.i32, K: kd.i32,
               DT: kd.Const[object]):
    """One 16x16 output tile per plane; A from global memory, B staged through shared."""
    plane = kd.plane_pos()
    tiles_n = N // 16
    tile = kd.cube_pos_x() * kd.plane_count() + plane
    tm = tile // tiles_n
    tn = tile % tiles_n
    acc = kd.fragment_acc(16, 16, 16)
    kd.fill_fragment(acc, 0.0)
    fa = kd.fragment_a(DT, 16, 16, 16)
    fb = kd.fragment_b(DT, 16, 16, 16)
    stage = kd.shared(DT, kd.plane_count() * 256)
    for k0 in range(0, K, 16):
        kd.load_fragment(fa, a, tm * 16 * K + k0, K)
        for e in range(kd.lane_pos(), 256, kd.PLANE_DIM):   # the plane copies its B tile to shared
            stage[plane * 256 + e] = b[(k0 + e // 16) * N + tn * 16 + e % 16]
        kd.sync_cube()
        kd.load_fragment(fb, stage, plane * 256, 16)
        kd.mma(acc, fa, fb)
        kd.sync_cube()
    kd.store_fragment(c, tm * 16 * N + tn * 16, acc, N)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_mma_gemm(runtime, rng, dt):
    M, N, K = 32, 48, 64
    npd = kd.as_dtype(dt).np
    a = rng.integers(-3, 4, (M, K)).astype(npd) * npd.type(0.5)
    b = rng.integers(-3, 4, (K, N)).astype(npd) * npd.type(0.25)
    c = runtime.zeros((M, N), "f32")
    tiles = (M // 16) * (N // 16)
    planes = 2
    units = planes * runtime.plane_dim
    gemm_tiles[tiles // planes, units](runtime.tensor(a), runtime.tensor(b), c, M, N, K, kd.as_dtype(dt))
    ref = a.astype(np.float64) @ b.astype(np.float64)   # exact: small integers times powers of two
    np.testing.assert_array_equal(c.numpy(), ref.astype(np.float32))


@kd.kernel
def mma_col_layout(a: kd.Tensor, b: kd.Tensor, c: kd.Tensor[kd.f32], DT: kd.Const[object]):
    fa = kd.fragment_a(DT, 16, 16, 16, layout="col")   # a stored transposed (K x M)
    fb = kd.fragment_b(DT, 16, 16, 16, layout="col")   # b stored transposed (N x K)
    acc = kd.fragment_acc(16, 16, 16)
    kd.load_fragment(acc, c, 0, 16)                   # accumulate onto c
    kd.load_fragment(fa, a, 0, 16)
    kd.load_fragment(fb, b, 0, 16)
    kd.mma(acc, fa, fb)
    kd.store_fragment(c, 0, acc, 16)


def test_mma_col_major_and_accumulate(runtime, rng):
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    c0 = rng.standard_normal((16, 16)).astype(np.float32)
    c = runtime.tensor(c0)
    mma_col_layout[1, runtime.plane_dim](runtime.tensor(a.T.copy()), runtime.tensor(b.T.copy()), c, kd.f16)
    ref = c0.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5, atol=1e-5)


@kd.kernel
def tile_at(a: kd.Tensor[kd.f16], b: kd.Tensor[kd.f16], c: kd.Tensor[kd.f32], a_off: kd.i64, c_off: kd.i64,
            ACC_IN: kd.Const[bool]):
    fa = kd.fragment_a(kd.f16, 16, 16, 16)
    fb = kd.fragment_b(kd.f16, 16, 16, 16, layout="col")
    acc = kd.fragment_acc(16, 16, 16)
    if ACC_IN:
        kd.load_fragment(acc, c, c_off, 16)
    else:
        kd.fill_fragment(acc, 0.0)
    kd.load_fragment(fa, a, a_off, 16)
    kd.load_fragment(fb, b, 0, 16)
    kd.mma(acc, fa, fb)
    kd.store_fragment(c, c_off, acc, 16)


@pytest.mark.parametrize("what", ["a load", "acc load", "store"])
def test_fragment_bounds_checks(runtime, rng, monkeypatch, what):
    """Under KERNELDSL_BOUNDS_CHECK a fragment that reaches past its tensor raises and names
    the tensor (the tile is 256 elements; the tensors hold 256)."""
    monkeypatch.setenv("KERNELDSL_BOUNDS_CHECK", "1")
    a = runtime.tensor(rng.standard_normal(256).astype(np.float16))
    b = runtime.tensor(rng.standard_normal(256).astype(np.float16))
    c = runtime.zeros(256, "f32")
    P = runtime.plane_dim
    tile_at[1, P](a, b, c, 0, 0, what == "acc load")
    runtime.synchronize()
    ref = a.numpy().reshape(16, 16).astype(np.float64) @ b.numpy().reshape(16, 16).T.astype(np.float64)
    np.testing.assert_allclose(c.numpy().reshape(16, 16), ref, rtol=1e-3, atol=1e-3)  # in bounds: runs
    name, args = {"a load": ("a", (8, 0)), "acc load": ("c", (0, 8)), "store": ("c", (0, 8))}[what]
    with pytest.raises(kd.errors.OutOfBoundsError, match=f"'{name}'"):
        tile_at[1, P](a, b, c, *args, what == "acc load")
        runtime.synchronize()
