"""The caching allocator (kerneldsl/allocator.py) on a fake device, so sizes of many GiB cost
nothing: reuse of big blocks, splitting and coalescing, per-stream free lists and blocks held
back for other streams, statistics, empty_cache and the out-of-memory path; then the same
allocator behind a real runtime (small sizes)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.allocator import ALLOCATED, AllocationFailed, CachingAllocator
from kerneldsl.streams import Event, Stream

GiB, MiB = 1 << 30, 1 << 20


@pytest.fixture(autouse=True)
def _no_guard_bytes(monkeypatch):
    """These tests count the pool's bytes and blocks exactly, and watch blocks return to it on
    `del`: $KERNELDSL_GUARD would add its bytes to every request and hold freed blocks until
    their guards are read (kerneldsl/guard.py), so it is off here."""
    monkeypatch.delenv("KERNELDSL_GUARD", raising=False)


class FakeDevice:
    """Raw segments as addresses, with an optional capacity: asking past it raises MemoryError."""

    def __init__(self, capacity: int | None = None):
        self.capacity = capacity
        self.live: dict = {}  # address -> size
        self.next_address = 1 << 40
        self.allocs = self.frees = 0

    def alloc(self, nbytes):
        if self.capacity is not None and sum(self.live.values()) + nbytes > self.capacity:
            raise MemoryError(f"fake device: {nbytes} bytes do not fit")
        address = self.next_address
        self.next_address += nbytes + (1 << 30)
        self.live[address] = nbytes
        self.allocs += 1
        return address

    def free(self, raw):
        del self.live[raw]
        self.frees += 1

    @staticmethod
    def view(raw, offset, nbytes):
        return raw + offset


class FakeEvent(Event):
    """An event the test completes by hand (`done`)."""

    __slots__ = ("done",)

    def __init__(self, stream):
        super().__init__(stream, None)
        self.done = False

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True


class FakeStream(Stream):
    def __init__(self, name):
        super().__init__(None, name)
        self.events: list = []

    def record_event(self):
        e = FakeEvent(self)
        self.events.append(e)
        return e


def allocator(capacity=None, **options):
    dev = FakeDevice(capacity)
    synced = []
    pool = CachingAllocator(dev.alloc, dev.free, dev.view, synchronize=lambda: synced.append(1), **options)
    return pool, dev, synced


def address(pool, block):
    return pool.view(block)


S = FakeStream("s")


@pytest.mark.parametrize("size", [256 * MiB, GiB, 2 * GiB, 4 * GiB, 8 * GiB])
def test_big_blocks_are_reused(size):
    pool, dev, _ = allocator()
    first = pool.allocate(size, S)
    where = address(pool, first)
    pool.free(first)
    again = pool.allocate(size, S)
    assert address(pool, again) == where and dev.allocs == 1
    assert again.size == size  # a multiple of 2 MiB: exactly one segment, no split


def test_sizes_are_rounded_and_small_requests_share_a_segment():
    pool, dev, _ = allocator()
    a = pool.allocate(1, S)
    b = pool.allocate(700, S)
    assert (a.size, b.size) == (512, 1024)
    assert address(pool, b) == address(pool, a) + 512  # split from the same 2 MiB segment
    assert dev.allocs == 1 and list(dev.live.values()) == [2 * MiB]
    c = pool.allocate(MiB, S)  # the largest small request still fits the small segment's rest
    assert dev.allocs == 1 and address(pool, c) == address(pool, a) + 1536


def test_large_requests_split_their_segment_and_coalesce_when_freed():
    pool, dev, _ = allocator()
    a = pool.allocate(3 * MiB, S)  # under 10 MiB: a 20 MiB segment, split
    b = pool.allocate(3 * MiB, S)
    assert list(dev.live.values()) == [20 * MiB]
    assert address(pool, b) == address(pool, a) + 3 * MiB
    c = pool.allocate(14 * MiB, S)  # the 14 MiB rest: split no further (rest 0)
    assert dev.allocs == 1 and address(pool, c) == address(pool, a) + 6 * MiB
    for blk in (a, c, b):  # freed out of order: the neighbours merge back into one block
        pool.free(blk)
    whole = pool.allocate(20 * MiB, S)
    assert address(pool, whole) == address(pool, a) and dev.allocs == 1


def test_large_rest_below_one_mib_is_not_split_off():
    pool, dev, _ = allocator()
    a = pool.allocate(19 * MiB + 512, S)  # a 20 MiB segment whose rest, under 1 MiB, stays in the block
    assert a.size == 20 * MiB


def test_free_blocks_are_taken_best_fit_then_last_freed_first():
    """An allocation takes the smallest free block that fits; among blocks of that size the
    one freed last. Each free and allocation touches only its size's blocks (FreeList), so a
    cache of thousands of free blocks costs no more a call (benchmarks/allocator.py's crowded
    row: 10.7 µs with a list of every block sorted by size, 3.3 after)."""
    pool, dev, _ = allocator()
    blocks = [pool.allocate(n, S) for n in (1024, 2048, 2048, 4096, 2048)]
    keep = pool.allocate(512, S)  # (the segment's tail stays split off: the freed blocks do not merge with it)
    where = [address(pool, b) for b in blocks]
    for b in (blocks[1], blocks[0], blocks[4], blocks[3], blocks[2]):
        pool.free(b)
    assert address(pool, pool.allocate(1500, S)) == where[2]  # a 2048 block, the last of them freed
    assert address(pool, pool.allocate(2048, S)) == where[4]
    assert address(pool, pool.allocate(1024, S)) == where[0]  # the exact size before larger ones
    assert address(pool, pool.allocate(1025, S)) == where[1]
    assert address(pool, pool.allocate(2049, S)) == where[3]
    crowd = [pool.allocate(4096, S) for _ in range(3000)]
    segments = dev.allocs
    for b in crowd:
        pool.free(b)
    assert address(pool, pool.allocate(4096, S)) == address(pool, crowd[-1]) and dev.allocs == segments
    assert address(pool, pool.allocate(4096, S)) == address(pool, crowd[-2])
    assert keep.state == ALLOCATED


def test_a_block_of_one_stream_is_not_reused_by_another():
    pool, dev, _ = allocator()
    other = FakeStream("other")
    a = pool.allocate(GiB, S)
    pool.free(a)
    b = pool.allocate(GiB, other)
    assert address(pool, b) != address(pool, a) and dev.allocs == 2
    c = pool.allocate(GiB, S)
    assert address(pool, c) == address(pool, a)


def test_a_block_used_on_another_stream_waits_for_its_event():
    pool, dev, _ = allocator()
    other = FakeStream("other")
    a = pool.allocate(GiB, S)
    where = address(pool, a)
    pool.free(a, {other})  # work queued on `other` may still read it
    assert len(other.events) == 1
    b = pool.allocate(GiB, S)
    assert address(pool, b) != where  # not reused while the event is pending
    pool.free(b)
    other.events[0].done = True
    c = pool.allocate(GiB, S)
    d = pool.allocate(GiB, S)
    assert where in (address(pool, c), address(pool, d)) and dev.allocs == 2


def test_free_with_its_own_stream_only_records_nothing():
    pool, dev, _ = allocator()
    a = pool.allocate(MiB, S)
    pool.free(a, {S})
    assert S.events == [] and pool.allocate(MiB, S) is a


def test_statistics_follow_allocations_and_frees():
    pool, dev, _ = allocator()
    a = pool.allocate(1000, S)
    b = pool.allocate(3 * GiB, S)
    st = pool.memory_stats()
    assert st["allocated_bytes.all.current"] == 1024 + 3 * GiB
    assert st["allocated_bytes.small_pool.current"] == 1024
    assert st["allocated_bytes.large_pool.current"] == 3 * GiB
    assert st["reserved_bytes.all.current"] == 2 * MiB + 3 * GiB
    assert st["requested_bytes.all.current"] == 1000 + 3 * GiB
    assert st["allocation.all.current"] == 2 and st["segment.all.current"] == 2
    pool.free(b)
    st = pool.memory_stats()
    assert st["allocated_bytes.all.current"] == 1024 and st["allocated_bytes.all.peak"] == 1024 + 3 * GiB
    assert st["allocated_bytes.all.freed"] == 3 * GiB and st["reserved_bytes.all.current"] == 2 * MiB + 3 * GiB
    assert st["num_device_alloc"] == 2 and st["num_device_free"] == 0
    pool.reset_peak_stats()
    assert pool.memory_stats()["allocated_bytes.all.peak"] == 1024
    pool.free(a)
    assert pool.memory_stats()["active.all.current"] == 0


def test_statistics_folded_by_numpy_match_event_by_event(monkeypatch):
    """A long statistics log is folded by numpy (allocator.fold_events), a short one event by
    event: the same random run of allocations, frees held for other streams and their
    settlements, read at random points, gives every statistic the same either way (peaks
    included), and allocated bytes equal the live blocks' sizes."""
    import kerneldsl.allocator as A

    def run(vector_fold: int) -> list:
        monkeypatch.setattr(A, "VECTOR_FOLD", vector_fold)
        pool, _, _ = allocator()
        other = FakeStream("other")
        rng = np.random.default_rng(7)
        live, seen = [], []
        for step in range(3000):
            r = rng.random()
            if r < 0.5 or not live:
                size = int(rng.choice([rng.integers(1, 4096), rng.integers(1, 3 * MiB)]))
                live.append(pool.allocate(size, S))
            elif r < 0.9:
                block = live.pop(int(rng.integers(len(live))))
                pool.free(block, {other} if rng.random() < 0.3 else None)
            else:
                for e in other.events:
                    e.done = e.done or rng.random() < 0.5
            if rng.random() < 0.01:
                seen.append(pool.memory_stats())
        st = pool.memory_stats()
        assert st["allocated_bytes.all.current"] == sum(b.size for b in live)
        return seen + [st]

    assert run(vector_fold=1) == run(vector_fold=1 << 30)


def test_pending_blocks_count_as_active_until_their_event_completes():
    pool, _, _ = allocator()
    other = FakeStream("other")
    pool.free(pool.allocate(GiB, S), {other})
    st = pool.memory_stats()
    assert st["allocated_bytes.all.current"] == 0 and st["active_bytes.all.current"] == GiB
    other.events[0].done = True
    assert pool.memory_stats()["active_bytes.all.current"] == 0


def test_empty_cache_releases_only_wholly_free_segments():
    pool, dev, _ = allocator()
    keep = pool.allocate(100, S)  # holds a small segment
    other_small = pool.allocate(200, S)
    pool.free(pool.allocate(5 * GiB, S))
    pool.free(other_small)
    released = pool.empty_cache()
    assert released == 5 * GiB and list(dev.live.values()) == [2 * MiB]
    assert pool.memory_stats()["reserved_bytes.all.current"] == 2 * MiB
    pool.free(keep)
    assert pool.empty_cache() == 2 * MiB and dev.live == {}


def test_empty_cache_waits_for_blocks_held_back_for_other_streams():
    pool, dev, _ = allocator()
    other = FakeStream("other")
    pool.free(pool.allocate(GiB, S), {other})
    assert pool.empty_cache() == GiB and other.events[0].done and dev.live == {}


def test_failed_allocation_empties_the_cache_and_retries():
    pool, dev, synced = allocator(capacity=3 * GiB)
    pool.free(pool.allocate(2 * GiB, S))  # cached: the device now has 1 GiB left
    b = pool.allocate(2 * GiB + 2 * MiB, S)  # no cached block fits, the device is full: free the cache, retry
    assert synced == [1] and dev.frees == 1
    st = pool.memory_stats()
    assert st["num_alloc_retries"] == 1 and st["num_ooms"] == 0
    assert st["reserved_bytes.all.current"] == b.size


def test_second_failure_names_the_size_and_what_was_held():
    pool, dev, _ = allocator(capacity=3 * GiB)
    held = pool.allocate(2 * GiB, S)
    pool.free(pool.allocate(20 * MiB, S))
    with pytest.raises(AllocationFailed) as info:
        pool.allocate(2 * GiB, S)
    e = info.value
    assert (e.nbytes, e.cached, e.allocated, e.reserved) == (2 * GiB, 20 * MiB, 2 * GiB, 2 * GiB + 20 * MiB)
    text = e.describe("fake", "a tensor of shape (512, 1048576) f32")
    assert "2147483648 bytes (2.0 GiB) for a tensor of shape (512, 1048576) f32" in text
    assert "held 20.0 MiB of cached buffers, freed before one retry, and 2.0 GiB in live tensors" in text
    assert "(2.0 GiB reserved" in text
    assert pool.memory_stats()["num_ooms"] == 1
    assert pool.allocate(GiB, S) is not None and held.size == 2 * GiB  # still usable afterwards


def test_a_free_during_an_allocation_is_taken_back_later():
    """A destructor may run inside the allocator's own call (garbage collection): the free
    is queued, not deadlocked, and taken back by the next call."""
    pool, dev, _ = allocator()
    early = pool.allocate(GiB, S)

    def alloc_and_collect(nbytes):
        pool.free(early)  # as a Buffer.__del__ run by the collector here would
        return dev.alloc(nbytes)
    pool._alloc = alloc_and_collect
    pool.allocate(4 * GiB, S)
    pool._alloc = dev.alloc
    assert pool.memory_stats()["allocated_bytes.all.current"] == 4 * GiB
    assert address(pool, pool.allocate(GiB, S)) == address(pool, early)


def test_idle_cap_returns_whole_segments_past_it():
    pool, dev, _ = allocator(max_idle_bytes=GiB)
    a, b = pool.allocate(GiB, S), pool.allocate(GiB, S)
    pool.free(a)
    assert len(dev.live) == 2  # 1 GiB idle: at the cap
    pool.free(b)
    assert len(dev.live) == 1 and pool.idle_bytes() == GiB


def test_the_cpu_pool_keeps_an_eighth_of_host_memory_idle(tmp_path):
    from kerneldsl.backends.cpu import runtime as cpu
    assert cpu.idle_cap(24 * GiB) == 3 * GiB and cpu.idle_cap(8 * GiB) == GiB  # at least 1 GiB
    assert cpu.idle_cap(cpu._UNKNOWN_MEMORY) == GiB  # memory size unknown
    assert kd.runtime("cpu").pool.max_idle_bytes == cpu.idle_cap(cpu._memory_limit())
    # a container's memory limit, where lower than the machine's, sets it ("max": no limit)
    v2, v1 = tmp_path / "memory.max", tmp_path / "limit_in_bytes"
    v2.write_text("max\n")
    v1.write_text(f"{GiB}\n")
    assert cpu._memory_limit((str(v2),)) == cpu._physical_memory()
    assert cpu._memory_limit((str(tmp_path / "absent"), str(v2), str(v1))) == min(GiB, cpu._physical_memory())


def test_segments_are_cut_to_the_device_limit():
    pool, dev, _ = allocator(max_segment=8 * MiB)
    pool.allocate(3 * MiB, S)
    assert list(dev.live.values()) == [8 * MiB]
    pool.allocate(9 * MiB, S)  # above the limit: the request itself (the device refuses or not)
    assert sorted(dev.live.values()) == [8 * MiB, 9 * MiB]


def test_views_are_made_once_per_range():
    views = []
    dev = FakeDevice()
    pool = CachingAllocator(dev.alloc, dev.free, lambda raw, off, n: views.append((off, n)) or object())
    a = pool.allocate(4096, S)
    va = pool.view(a)
    pool.free(a)
    b = pool.allocate(4096, S)
    assert b is a and pool.view(b) is va and len(views) == 1


def test_granule_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="granule"):
        CachingAllocator(None, None, None, granule=768)


# ---------------------------------------------------------------- behind a runtime
def test_runtime_reuses_blocks_and_reports_statistics(runtime):
    runtime.empty_cache()
    before = runtime.memory_stats()
    t = runtime.empty((3, 1 << 20), "f32")  # 12 MiB: a segment of its own
    raw = t.buffer.raw
    st = runtime.memory_stats()
    assert st["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] == 12 * MiB
    assert st["reserved_bytes.all.current"] - before["reserved_bytes.all.current"] == 12 * MiB
    del t
    gc.collect()
    u = runtime.empty((12, 1 << 18), "f32")  # the same 12 MiB: the cached block
    assert u.buffer.raw is raw
    assert runtime.memory_stats()["num_device_alloc"] == st["num_device_alloc"]
    np.testing.assert_array_equal(runtime.tensor(np.arange(5, dtype=np.float32)).numpy(), np.arange(5))
    del u
    gc.collect()
    assert runtime.empty_cache() >= 12 * MiB
    assert runtime.memory_stats()["reserved_bytes.all.current"] < st["reserved_bytes.all.current"]


def test_split_blocks_of_a_runtime_hold_independent_data(runtime):
    """Tensors carved from one segment (views, sub-buffers) do not overlap."""
    parts = [runtime.tensor(np.full(1000 + 37 * i, i, np.float32)) for i in range(6)]
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(p.numpy(), np.full(1000 + 37 * i, i, np.float32))


def test_out_of_memory_error_names_request_and_pool(runtime):
    pool = runtime.pool
    held = runtime.empty(1 << 16, "u8")
    real = pool._alloc

    def refuse(nbytes):
        raise MemoryError("simulated")
    pool._alloc = refuse
    try:
        with pytest.raises(kd.OutOfMemoryError, match=r"for a tensor of shape \(64, 1048576\) f32: out of memory "
                                                      r"\(simulated\)\. .* in live tensors \(.* reserved"):
            runtime.empty((64, 1 << 20), "f32")
    finally:
        pool._alloc = real
    assert held.numpy().shape == (1 << 16,)


def test_threads_allocating_and_freeing_leave_consistent_books():
    import random
    import threading
    pool, dev, _ = allocator()
    streams = [FakeStream(f"t{i}") for i in range(4)]
    errors = []

    def work(i):
        rnd = random.Random(i)
        live = []
        try:
            for _ in range(1500):
                if live and rnd.random() < 0.5:
                    pool.free(live.pop(rnd.randrange(len(live))), {streams[(i + 1) % 4]} if rnd.random() < 0.1 else None)
                else:
                    live.append(pool.allocate(rnd.choice([100, 4096, 700_000, 3 * MiB, 40 * MiB]), streams[i]))
            for b in live:
                pool.free(b)
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for s in streams:
        for e in s.events:
            e.done = True
    st = pool.memory_stats()
    assert st["allocated_bytes.all.current"] == 0 and st["active_bytes.all.current"] == 0
    assert st["allocation.all.current"] == 0 and st["requested_bytes.all.current"] == 0
    assert st["allocated_bytes.all.allocated"] == st["allocated_bytes.all.freed"] > 0
    assert pool.empty_cache() == st["reserved_bytes.all.current"] and dev.live == {}
    assert pool.memory_stats()["reserved_bytes.all.current"] == 0


def test_live_blocks_never_overlap():
    import random
    pool, dev, _ = allocator()
    rnd = random.Random(7)
    live = []
    for step in range(3000):
        if live and rnd.random() < 0.45:
            pool.free(live.pop(rnd.randrange(len(live))))
        else:
            live.append(pool.allocate(rnd.choice([1, 513, 4096, 300_000, MiB, MiB + 1, 5 * MiB, 12 * MiB]), S))
        if step % 100 == 0:
            spans = sorted((address(pool, b), address(pool, b) + b.size) for b in live)
            assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
            for b in live:
                assert b.offset + b.size <= b.segment.size and b.size >= b.requested
