"""Running out of memory reads the same on every runtime: `kd.OutOfMemoryError` (a
MemoryError) naming the shape, dtype and bytes asked for and what the pool held, raised
after the pool freed its cache and retried once; the runtime keeps working afterwards."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.allocator import human_bytes


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
    """A raw allocator that reports exhaustion once, then allocates."""

    def __init__(self, alloc):
        self.alloc, self.calls = alloc, 0

    def __call__(self, nbytes):
        self.calls += 1
        if self.calls == 1:
            raise MemoryError("simulated: the device is full")
        return self.alloc(nbytes)


def test_pool_frees_its_cache_and_retries_once(runtime):
    pool = runtime.pool
    runtime.empty_cache()  # earlier tests' cached segments (partly live ones too) out of the way
    cached = [runtime.empty(12 << 20, "u8") for _ in range(3)]
    del cached  # three 12 MiB segments now sit wholly free in the cache
    before = runtime.memory_stats()
    assert pool.cached_bytes >= 36 << 20
    real = pool._alloc
    pool._alloc = failing = _FailingOnce(real)
    try:
        t = runtime.empty(16 << 20, "u8")  # no cached block fits: the first try fails, the retry succeeds
    finally:
        pool._alloc = real
    after = runtime.memory_stats()
    assert failing.calls == 2 and t.nbytes == 16 << 20
    assert after["num_alloc_retries"] == before["num_alloc_retries"] + 1
    # the cache went back before the retry: every wholly free segment (a segment that a block
    # still live elsewhere in the suite shares stays; the full run showed one such on the cpu)
    assert after["num_device_free"] >= before["num_device_free"] + 1
    assert after["num_ooms"] == before["num_ooms"]


def test_second_failure_names_what_the_pool_held(runtime, monkeypatch):
    monkeypatch.delenv("KERNELDSL_GUARD", raising=False)  # (it would hold the freed block: guard.py)
    pool = runtime.pool
    runtime.empty_cache()
    held = runtime.empty(4 << 20, "u8")
    del held  # its 20 MiB segment of the large pool is now cached
    cached = pool.cached_bytes
    assert cached >= 20 << 20
    real = pool._alloc

    def refuse(nbytes):
        raise MemoryError("simulated")
    pool._alloc = refuse
    try:
        live = human_bytes(pool.allocated_bytes)
        with pytest.raises(kd.OutOfMemoryError, match=rf"25165824 bytes \(24\.0 MiB\) for a tensor of shape "
                           rf"\(3, 2097152\) f32: .*pool held {re.escape(human_bytes(cached))} of cached buffers, "
                           rf"freed before one retry, and {re.escape(live)} in live tensors \(.* reserved"):
            runtime.empty((3, 1 << 21), "f32")  # more than the cached block holds
        assert runtime.memory_stats()["num_ooms"] >= 1
    finally:
        pool._alloc = real
    assert runtime.empty(8).numpy().shape == (8,)


def test_guard_bytes_catch_a_write_past_the_end(runtime, monkeypatch):
    """Under $KERNELDSL_GUARD every allocation carries guard bytes after what was asked; a
    byte changed there is reported when the buffer is freed, naming the request and the byte
    (kerneldsl/guard.py); untouched buffers and buffers made with the mode off report nothing."""
    from kerneldsl import guard
    monkeypatch.setenv("KERNELDSL_GUARD", "1")
    guard.violations()
    t = runtime.empty((5, 3), "bf16")  # 30 bytes
    runtime._upload(t.buffer, t.size * 2 + 1, np.array([0x5A], np.uint8))  # a stray write one byte past
    clean = runtime.tensor(np.arange(7, dtype=np.float32))
    del t, clean
    found = guard.violations()
    assert len(found) == 1, found
    assert f"the {runtime.name} runtime's buffer for a tensor of shape (5, 3) bf16" in found[0]
    assert "1 of the 64 guard bytes after its 30 bytes changed, the first at byte 31 (now 0x5a)" in found[0]
    monkeypatch.delenv("KERNELDSL_GUARD")
    plain = runtime.empty((5, 3), "bf16")
    assert plain.buffer.guard is None
    del plain
    assert guard.violations() == []


def test_a_guarded_buffer_freed_without_a_driver_gives_its_block_back(runtime, monkeypatch):
    """Where a stream can no longer record an event (a lost device or driver), a guarded
    buffer's destructor frees its block unchecked: nothing raises, nothing waits, and the
    pool's live bytes fall back."""
    from kerneldsl import guard
    monkeypatch.setenv("KERNELDSL_GUARD", "1")
    guard.violations()
    t = runtime.empty((1024,), "f32")
    live = runtime.pool.allocated_bytes
    stream = t.buffer.stream

    def lost():
        raise RuntimeError("the driver is gone")
    monkeypatch.setattr(stream, "record_event", lost)
    waiting = len(guard.waiting)
    del t
    assert len(guard.waiting) == waiting
    assert runtime.pool.allocated_bytes < live
