"""Running out of memory reads the same on every runtime: `kd.OutOfMemoryError` (a
MemoryError) naming the shape, dtype and bytes asked for and what the pool held, raised
after the pool freed its cache and retried once; the runtime keeps working afterwards."""
from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd


@pytest.mark.parametrize("shape, dtype", [((1 << 48,), "f32"), ((1 << 20, 1 << 20, 1 << 10), "f16"),
                                          ((1 << 62,), "i64")])
def test_absurd_allocation_raises_out_of_memory(runtime, shape, dtype):
    with pytest.raises(kd.OutOfMemoryError) as info:
        runtime.empty(shape, dtype)
    text = str(info.value)
    nbytes = int(np.prod(shape, dtype=object)) * kd.as_dtype(dtype).itemsize
    assert isinstance(info.value, MemoryError)
    assert str(tuple(shape)) in text and dtype in text and str(nbytes) in text
    assert "pool held" in text
    np.testing.assert_array_equal(runtime.tensor(np.arange(6, dtype=np.float32)).numpy(), np.arange(6))


def test_zeros_and_tensor_upload_raise_it_too(runtime):
    with pytest.raises(kd.OutOfMemoryError, match=r"\(4294967296, 4294967296\) u8"):
        runtime.zeros((1 << 32, 1 << 32), "u8")


class _FailingOnce:
    """A raw allocator that reports exhaustion while the pool holds cached buffers."""

    def __init__(self, alloc, pool):
        self.alloc, self.pool, self.calls = alloc, pool, 0

    def __call__(self, nbytes):
        self.calls += 1
        if self.pool.cached_bytes:
            raise MemoryError("simulated: the device is full")
        return self.alloc(nbytes)


def test_pool_frees_its_cache_and_retries_once(runtime):
    pool = runtime.pool
    pool.clear()
    cached = [runtime.empty(1 << 16, "u8") for _ in range(3)]
    del cached  # three 64 KiB buffers now sit in the cache
    assert pool.cached_bytes >= 3 << 16
    real = pool._alloc
    pool._alloc = failing = _FailingOnce(real, pool)
    try:
        # too big for the cached small segment: the first try fails, the retry succeeds
        t = runtime.empty(16 << 20, "u8")
    finally:
        pool._alloc = real
    assert failing.calls == 2 and pool.cached_bytes == 0
    assert t.nbytes == 16 << 20
    assert runtime.memory_stats()["num_alloc_retries"] >= 1


def test_second_failure_names_what_the_pool_held(runtime):
    pool = runtime.pool
    pool.clear()
    held = runtime.empty(1 << 16, "u8")
    del held  # its 2 MiB segment of the small pool is now cached
    assert pool.cached_bytes == 2 << 20
    real = pool._alloc

    def refuse(nbytes):
        raise MemoryError("simulated")
    pool._alloc = refuse
    try:
        with pytest.raises(kd.OutOfMemoryError, match=r"3145728 bytes \(3\.0 MiB\) for a tensor of shape \(3, 262144\) "
                           r"f32: .*pool held 2\.0 MiB of cached buffers, freed before one retry, and 0 B in live "
                           r"tensors \(2\.0 MiB reserved"):
            runtime.empty((3, 1 << 18), "f32")
        assert runtime.memory_stats()["num_ooms"] >= 1
    finally:
        pool._alloc = real
    assert runtime.empty(8).numpy().shape == (8,)
