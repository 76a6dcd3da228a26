"""Asynchronous global -> shared copies (`kd.async_copy`, `async_commit`, `async_wait`):
zero-fill under a false predicate, every dtype and width, a multi-stage ring of buffers
like a GEMM main loop's, bounds checks and every error rule. Hardware copies on CUDA
(cp.async); a plain copy on the other runtimes, which must give the same answers."""
import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import CompileError, OutOfBoundsError

pytestmark = [pytest.mark.feature("async_copy"), pytest.mark.interpreter]

DTYPES = ["f32", "f16", "bf16", "i32"]


@kd.kernel
def stage_and_read(x: kd.Tensor, y: kd.Tensor, n: kd.i32, L: kd.Const[int]):
    """Each unit copies L elements into shared memory (zeros past n); after the wait and a
    barrier every unit reads other units' elements (so the barrier's visibility counts)."""
    U = kd.cube_units()
    sh = kd.shared(x.dtype, U * L)
    t = kd.unit_pos_x()
    base = kd.cube_pos_x() * (U * L)
    kd.async_copy(sh, t * L, x, base + t * L, L, base + t * L < n)
    kd.async_commit()
    kd.async_wait(0)
    kd.sync_cube()
    for j in range(0, L):
        y[base + j * U + t] = sh[j * U + t]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nbytes", [4, 8, 16])
def test_copy_with_zero_fill(runtime, rng, dtype, nbytes):
    np_dt = kd.as_dtype(dtype)
    lanes = nbytes // np_dt.itemsize
    units = 64
    total = units * lanes * 3
    n = total - 5 * lanes  # the last 5 units' chunks lie past n: zero-filled
    host = (rng.standard_normal(total) * 100).astype(np_dt.np)
    x = runtime.tensor(host)
    y = runtime.tensor(np.full(total, 7, np_dt.np))
    stage_and_read[3, units](x, y, n, lanes)
    want = host.copy()
    want[n:] = 0
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(x.numpy(), host)  # the source is never written


@kd.kernel
def ring_sum(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32], S: kd.Const[int]):
    """Row sums through an S-stage ring of shared tiles, prefetching S - 1 tiles ahead:
    the schedule of a pipelined GEMM's main loop (wait for the oldest group, barrier,
    refill the slot the previous step read, commit, consume)."""
    U = kd.cube_units()
    W = x.shape[1]
    T = W // (4 * U)  # tiles of 4 * U elements in a row
    ring = kd.shared(kd.f32, S * 4 * U)
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    base = kd.i64(row) * W + t * 4
    for s in kd.unroll(S - 1):
        kd.async_copy(ring, s * 4 * U + t * 4, x, base + s * 4 * U, 4, s < T)
        kd.async_commit()
    acc = kd.f32(0)
    for i in range(T):
        kd.async_wait(S - 2)
        kd.sync_cube()
        nxt = i + S - 1
        kd.async_copy(ring, (nxt % S) * 4 * U + t * 4, x, base + kd.i64(nxt) * 4 * U, 4, nxt < T)
        kd.async_commit()
        slot = (i % S) * 4 * U
        for e in kd.unroll(4):
            acc += ring[slot + ((t + 1) % U) * 4 + e]  # a neighbour's chunk: needs the barrier
    kd.async_wait(0)
    s = kd.cube_sum(acc)
    if t == 0:
        out[row] = s


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_multistage_ring(runtime, rng, stages):
    units, rows, tiles = 64, 5, 7
    x = rng.standard_normal((rows, tiles * 4 * units)).astype(np.float32)
    out = runtime.zeros(rows, "f32")
    ring_sum[rows, units](runtime.tensor(x), out, stages)
    np.testing.assert_allclose(out.numpy(), x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-3)


@kd.kernel
def copy_at(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], src: kd.i64):
    sh = kd.shared(kd.f32, 4)
    kd.async_copy(sh, 0, x, src, 4)
    kd.async_commit()
    kd.async_wait()
    y[0] = sh[0]


def test_bounds_check_names_the_tensor(runtime, monkeypatch):
    monkeypatch.setenv("KERNELDSL_BOUNDS_CHECK", "1")
    x = runtime.tensor(np.arange(8, dtype=np.float32))
    y = runtime.zeros(1, "f32")
    copy_at[1, 1](x, y, 4)
    assert y.numpy()[0] == 4
    with pytest.raises(OutOfBoundsError, match="x"):
        copy_at[1, 1](x, y, 6)
        runtime.synchronize()


def _compile(kernel, runtime, *args):
    return kernel.source(1, *args, runtime=runtime)


@kd.kernel
def into_tensor(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32]):
    kd.async_copy(y, 0, x, 0, 4)


@kd.kernel
def mixed_types(x: kd.Tensor[kd.f32]):
    sh = kd.shared(kd.f16, 8)
    kd.async_copy(sh, 0, x, 0, 4)


@kd.kernel
def wrong_width(x: kd.Tensor[kd.f32]):
    sh = kd.shared(kd.f32, 8)
    kd.async_copy(sh, 0, x, 0, 8)


@kd.kernel
def runtime_pending(x: kd.Tensor[kd.f32], n: kd.i32):
    kd.async_wait(n)


def test_errors(runtime):
    x = runtime.zeros(16, "f32")
    with pytest.raises(CompileError, match="into a shared array"):
        _compile(into_tensor, runtime, x, x)
    with pytest.raises(CompileError, match="src is f32 but dst is f16"):
        _compile(mixed_types, runtime, x)
    with pytest.raises(CompileError, match="4, 8 or 16 bytes: 8 lanes of f32 is 32"):
        _compile(wrong_width, runtime, x)
    with pytest.raises(CompileError, match="pending"):
        _compile(runtime_pending, runtime, x, 1)
