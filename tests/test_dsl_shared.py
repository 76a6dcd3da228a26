"""Shared memory and barriers: values across several barriers, barriers inside uniform
loops and branches, every cube size from 1 to 1024."""
import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("shared+sync_cube"), pytest.mark.interpreter]

SIZES = [1, 7, 64, 1024]


@kd.kernel
def reverse_and_shift(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], rounds: kd.i32, N: kd.Const[int]):
    t = kd.unit_pos_x()
    base = kd.cube_pos_x() * N
    buf = kd.shared(kd.f32, N)
    mine = x[base + t]              # lives across every barrier below
    buf[t] = mine
    kd.sync_cube()
    rev = buf[N - 1 - t]
    kd.sync_cube()
    acc = rev
    for r in range(rounds):         # barriers inside a uniform runtime loop
        buf[t] = acc
        kd.sync_cube()
        acc = buf[(t + 1) % N] + 1.0
        kd.sync_cube()
    if rounds > 2:                  # a uniform branch containing a barrier
        buf[t] = acc * 2.0
        kd.sync_cube()
        acc = buf[t]
    out[base + t] = acc + mine * 0.0 + (mine - mine)


def _ref(x, n, rounds):
    out = np.empty_like(x)
    for c in range(len(x) // n):
        v = x[c * n:(c + 1) * n][::-1].copy()
        for _ in range(rounds):
            v = np.roll(v, -1) + 1.0
        if rounds > 2:
            v = v * 2.0
        out[c * n:(c + 1) * n] = v
    return out


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("rounds", [0, 3])
def test_shared_reverse_and_rotate(runtime, rng, n, rounds):
    if n > runtime.capabilities.max_cube_units:
        pytest.skip(f"{runtime.name} allows at most {runtime.capabilities.max_cube_units} units per cube")
    cubes = 3
    x = rng.standard_normal(cubes * n).astype(np.float32)
    out = runtime.zeros(cubes * n, "f32")
    reverse_and_shift[cubes, n](runtime.tensor(x), out, rounds, n)
    np.testing.assert_allclose(out.numpy(), _ref(x, n, rounds), rtol=1e-6)


@kd.kernel
def tile_transpose(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2], T: kd.Const[int]):
    tile = kd.shared(kd.f32, (T, T + 1))       # 2-D shared array, padded rows
    r0 = kd.cube_pos_y() * T
    c0 = kd.cube_pos_x() * T
    tx, ty = kd.unit_pos_x(), kd.unit_pos_y()
    if r0 + ty < x.shape[0] and c0 + tx < x.shape[1]:
        tile[ty, tx] = x[r0 + ty, c0 + tx]
    kd.sync_cube()
    if c0 + ty < x.shape[1] and r0 + tx < x.shape[0]:
        out[c0 + ty, r0 + tx] = tile[tx, ty]


def test_2d_cube_tile_transpose(runtime, rng):
    x = rng.standard_normal((37, 50)).astype(np.float32)
    out = runtime.zeros((50, 37), "f32")
    T = 8
    tile_transpose[((50 + T - 1) // T, (37 + T - 1) // T), (T, T)](runtime.tensor(x), out, T)
    np.testing.assert_array_equal(out.numpy(), x.T)


@kd.kernel
def block_reduce(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], n: kd.i32, B: kd.Const[int]):
    t = kd.unit_pos_x()
    s = kd.shared(kd.f32, B)
    acc = kd.f32(0)
    for i in range(t, n, B):
        acc += x[i]
    s[t] = acc
    kd.sync_cube()
    stride = B // 2
    while stride > 0:                # tree reduction: barrier in a uniform while loop
        if t < stride:
            s[t] += s[t + stride]
        kd.sync_cube()
        stride //= 2
    if t == 0:
        out[0] = s[0]


@pytest.mark.parametrize("B", [1, 64, 256])
def test_tree_reduction(runtime, rng, B):
    x = rng.standard_normal(1999).astype(np.float32)
    out = runtime.zeros(1, "f32")
    block_reduce[1, B](runtime.tensor(x), out, 1999, B)
    np.testing.assert_allclose(out.numpy()[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-4)
