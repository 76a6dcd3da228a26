"""The caching allocator behind every runtime's memory: segments from the driver, split into blocks.

A runtime hands it three hooks: `alloc(nbytes)` (a raw segment from the driver; MemoryError
when the device is full), `free(raw)` and `view(raw, offset, nbytes)` (what a kernel is given
for the bytes of a block: a pointer, a numpy slice, an OpenCL sub-buffer). Everything else is
here and runtime-independent, so the cpu and OpenCL runtimes run the same code CI tests.

The scheme follows PyTorch's CUDA caching allocator:
- requests are rounded up to `granule` bytes (512, or more where the device asks for it);
- requests up to 1 MiB come from 2 MiB "small" segments, larger ones from their own
  "large" segments (20 MiB for requests under 10 MiB, else the request rounded up to 2 MiB);
- a free block is found best-fit among the blocks cached for the *same stream and pool*
  and split when the rest is worth keeping (>= granule in the small pool, > 1 MiB in the
  large pool); freed neighbours in a segment coalesce again, lazily: when an allocation
  finds no cached block that fits (before a new segment is asked for) and in
  `empty_cache`, so a size freed and asked for again is reused without a split and a merge
  each time (Python pays for every block object made);
- nothing is returned to the driver unless `empty_cache()` is called, an allocation fails
  (then the cache is emptied and the allocation retried once), or an optional
  `max_idle_bytes` caps the fully free segments kept (the cpu runtime caps host memory).

Streams: a block belongs to the stream it was allocated on and goes back to that stream's
free lists; reusing it there is safe without a wait because that stream's work is ordered.
A block also used on other streams (recorded by launches, like PyTorch's `record_stream`)
is held back at free time until an event recorded on each of those streams has completed.

`free` may be called from a destructor on any thread, also while this allocator is in the
middle of an allocation on the same thread (garbage collection): it queues the block and
returns it at once only if the lock is free, else the next call into the allocator does.
"""
from __future__ import annotations

import bisect
import itertools
import threading
from collections import deque
from typing import Callable

ROUND = 512  # every block is a multiple of this many bytes
SMALL_REQUEST = 1 << 20  # requests up to this size use the small pool
SMALL_SEGMENT = 2 << 20  # segment size of the small pool
MEDIUM_SEGMENT = 20 << 20  # segment size for large-pool requests under LARGE_REQUEST
LARGE_REQUEST = 10 << 20
SEGMENT_ROUND = 2 << 20  # large segments of LARGE_REQUEST and more are rounded to this

FREE, ALLOCATED, PENDING = 0, 1, 2  # block states (PENDING: freed, waiting for other streams)
ALLOC_EVENT, FREE_EVENT, SETTLE_EVENT = 0, 1, 2  # what the statistics log records (CachingAllocator._fold)
LOG_LIMIT = 4096  # logged events folded into the statistics at the latest
VECTOR_FOLD = 64  # logs of at least this many events are folded by numpy (fold_events)

# statistics kept with current / peak / cumulative allocated / freed, per pool, as PyTorch names them
STAT_NAMES = ("allocation", "allocated_bytes", "requested_bytes", "active", "active_bytes", "segment",
              "reserved_bytes")
ALLOCATION, ALLOCATED_BYTES, REQUESTED_BYTES, ACTIVE, ACTIVE_BYTES, SEGMENT, RESERVED_BYTES = range(7)


def human_bytes(n: int) -> str:
    """`n` bytes in the largest binary unit that keeps it >= 1 ("1.5 GiB")."""
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


class AllocationFailed(MemoryError):
    """The driver refused a segment twice (before and after the cache was emptied). The
    runtime turns this into `kd.OutOfMemoryError` naming the tensor asked for."""

    def __init__(self, nbytes: int, cause: str, cached: int, allocated: int, reserved: int):
        super().__init__(cause)
        self.nbytes, self.cause, self.cached, self.allocated, self.reserved = nbytes, cause, cached, allocated, reserved

    def describe(self, runtime: str, what: str) -> str:
        """The message of the OutOfMemoryError: the size asked for and what the pool held."""
        cause = f" ({self.cause})" if self.cause else ""
        return (f"the {runtime} runtime cannot allocate {self.nbytes} bytes ({human_bytes(self.nbytes)}) for {what}: "
                f"out of memory{cause}. Its memory pool held {human_bytes(self.cached)} of cached buffers, freed "
                f"before one retry, and {human_bytes(self.allocated)} in live tensors ({human_bytes(self.reserved)} "
                f"reserved from the device before the retry)")


class Segment:
    """One raw allocation from the driver."""

    __slots__ = ("raw", "size", "stream", "small")

    def __init__(self, raw, size: int, stream, small: bool):
        self.raw, self.size, self.stream, self.small = raw, size, stream, small


class Block:
    """A byte range [offset, offset + size) of a segment, free or handed out; neighbours in
    the segment are linked (`prev`, `next`) so freed ones can coalesce."""

    __slots__ = ("segment", "offset", "size", "requested", "state", "prev", "next", "view")

    def __init__(self, segment: Segment, offset: int, size: int, before=None, after=None):
        self.segment, self.offset, self.size = segment, offset, size
        self.requested = 0
        self.state = FREE
        self.prev, self.next = before, after
        self.view = None  # (offset, size, what `view` made for that range): reused when the range comes back

    @property
    def stream(self):
        return self.segment.stream

    def whole_segment(self) -> bool:
        return self.prev is None and self.next is None


class FreeList:
    """The free blocks of one stream and pool, by size: a sorted list of the sizes held and,
    per size, its blocks in the order freed. Best fit is a bisection over the distinct sizes
    and taking a block is O(1), so the cost of an allocation does not grow with the number of
    free blocks (a sorted list of every block paid a list shift per allocation and free: 7 µs
    each once 20,000 small blocks were free). Among blocks of the best size the one freed
    last is taken (its memory is the likeliest to be in cache)."""

    __slots__ = ("sizes", "by_size")

    def __init__(self, blocks=()):
        self.sizes: list = []  # distinct sizes with a free block, ascending
        self.by_size: dict = {}  # size -> [block, ...], in the order the blocks were added
        for block in blocks:
            self.add(block)

    def __len__(self) -> int:
        return sum(len(d) for d in self.by_size.values())

    def __bool__(self) -> bool:
        return bool(self.sizes)

    def __iter__(self):
        """Every block, by size, then in the order freed."""
        for size in self.sizes:
            yield from self.by_size[size]

    def add(self, block: Block) -> None:
        same = self.by_size.get(block.size)
        if same is None:
            same = self.by_size[block.size] = []
            bisect.insort(self.sizes, block.size)
        same.append(block)

    def take(self, size: int):
        """The free block that fits `size` best, removed from the list; None if none fits."""
        sizes = self.sizes
        i = bisect.bisect_left(sizes, size)
        if i == len(sizes):
            return None
        best = sizes[i]
        same = self.by_size[best]
        block = same.pop()
        if not same:
            del self.by_size[best]
            del sizes[i]
        return block


class Counters:
    """current / peak / cumulative increases / cumulative decreases of every statistic of one
    pool ("all", "small_pool" or "large_pool"), indexed as STAT_NAMES. The allocation and
    free paths are written out: they run on every tensor made and collected."""

    __slots__ = ("current", "peak", "increased", "decreased")

    def __init__(self):
        n = len(STAT_NAMES)
        self.current, self.peak, self.increased, self.decreased = [0] * n, [0] * n, [0] * n, [0] * n

    def change(self, i: int, delta: int):
        v = self.current[i] = self.current[i] + delta
        if delta > 0:
            self.increased[i] += delta
            if v > self.peak[i]:
                self.peak[i] = v
        else:
            self.decreased[i] -= delta

    def allocated(self, size: int, requested: int):
        """A block handed out (allocation, active and their bytes, requested bytes)."""
        cur, peak, inc = self.current, self.peak, self.increased
        cur[0] += 1
        cur[1] += size
        cur[2] += requested
        cur[3] += 1
        cur[4] += size
        inc[0] += 1
        inc[1] += size
        inc[2] += requested
        inc[3] += 1
        inc[4] += size
        if cur[1] > peak[1]:  # (allocated bytes peak first: the others rise with it)
            peak[1] = cur[1]
        if cur[0] > peak[0]:
            peak[0] = cur[0]
        if cur[2] > peak[2]:
            peak[2] = cur[2]
        if cur[3] > peak[3]:
            peak[3] = cur[3]
        if cur[4] > peak[4]:
            peak[4] = cur[4]

    def freed(self, size: int, requested: int, still_active: bool):
        """A block given back (still active while held back for other streams)."""
        cur, dec = self.current, self.decreased
        cur[0] -= 1
        cur[1] -= size
        cur[2] -= requested
        dec[0] += 1
        dec[1] += size
        dec[2] += requested
        if not still_active:  # settled(size), inlined
            cur[3] -= 1
            cur[4] -= size
            dec[3] += 1
            dec[4] += size

    def settled(self, size: int):
        """A freed block no longer active (its streams' work is done)."""
        self.current[3] -= 1
        self.current[4] -= size
        self.decreased[3] += 1
        self.decreased[4] += size


class CachingAllocator:
    """Blocks of any size, reused per stream, split and coalesced inside driver segments."""

    def __init__(self, alloc: Callable, free: Callable, view: Callable, *, synchronize: Callable | None = None,
                 granule: int = ROUND, max_segment: int | None = None, max_idle_bytes: int | None = None):
        """`synchronize()` waits for every stream of the runtime (called before cached segments
        are returned to the driver on an allocation failure); `max_segment` is the largest
        segment the driver allows (segments are cut down to the request there);
        `max_idle_bytes` caps the bytes of wholly free segments kept (None: no cap)."""
        if granule < 1 or granule & (granule - 1):
            raise ValueError(f"granule must be a power of two, got {granule}")
        self._alloc, self._free, self._view = alloc, free, view
        self._synchronize = synchronize
        self.granule = max(granule, ROUND)
        self.max_segment = max_segment
        self.max_idle_bytes = max_idle_bytes
        self._lock = threading.Lock()
        self._free_lists: dict = {}  # (stream, small) -> FreeList
        self._segments: dict = {}  # id(segment) -> segment
        self._freed: deque = deque()  # (block, streams) freed but not yet taken back
        self._pending: list = []  # (block, events): freed, waiting for other streams' work
        self._all = Counters()
        self._small, self._large = Counters(), Counters()
        self._stats = {"all": self._all, "small_pool": self._small, "large_pool": self._large}
        self._log: list = []  # (ALLOC_EVENT | FREE_EVENT | SETTLE_EVENT, size, requested, small, held) not yet counted
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    # ------------------------------------------------------------------ sizes
    def round_size(self, nbytes: int) -> int:
        g = self.granule
        return max(g, (nbytes + g - 1) & ~(g - 1))

    def segment_size(self, size: int) -> int:
        if size <= SMALL_REQUEST:
            seg = SMALL_SEGMENT
        elif size < LARGE_REQUEST:
            seg = MEDIUM_SEGMENT
        else:
            seg = (size + SEGMENT_ROUND - 1) & ~(SEGMENT_ROUND - 1)
        if self.max_segment is not None and seg > self.max_segment:
            seg = max(size, self.max_segment - self.max_segment % self.granule)
        return seg

    # ------------------------------------------------------------------ allocate / free
    def allocate(self, nbytes: int, stream) -> Block:
        """A block of at least `nbytes` for work on `stream`; raises AllocationFailed."""
        g = self.granule
        size = max(g, (nbytes + g - 1) & ~(g - 1))  # round_size, inlined (every tensor comes here)
        small = size <= SMALL_REQUEST
        with self._lock:
            if self._freed:
                self._drain()
            if self._pending:
                self._collect_pending(wait=False)
            block = self._take_free(stream, small, size)
            if block is None and self._coalesce(stream, small):
                block = self._take_free(stream, small, size)
            if block is None:
                block = self._new_segment(size, stream, small, nbytes)
            self._split(block, size, small)
            block.state = ALLOCATED
            block.requested = nbytes
            log = self._log  # statistics are folded in later, in order (`_fold`)
            log.append((ALLOC_EVENT, block.size, nbytes, small, False))
            if len(log) >= LOG_LIMIT:
                self._fold()
        return block

    def view(self, block: Block):
        """What kernels are given for `block` (made once per range a block object takes)."""
        made = block.view
        if made is not None and made[0] == block.offset and made[1] == block.size:
            return made[2]
        v = self._view(block.segment.raw, block.offset, block.size)
        block.view = (block.offset, block.size, v)
        return v

    def free(self, block: Block, streams=None):
        """Give `block` back; `streams`: other streams that used it (their queued work is
        waited for, through events, before the block is reused)."""
        if self._lock.acquire(blocking=False):
            try:
                if self._freed:
                    self._drain()
                self._give_back(block, streams)
            finally:
                self._lock.release()
        else:
            self._freed.append((block, streams))

    def _try_drain(self):
        """Take freed blocks back now unless the lock is held (by another thread, or by this
        one further up the stack: the next call into the allocator takes them then)."""
        if self._lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._lock.release()

    def _drain(self):
        freed = self._freed
        while freed:
            self._give_back(*freed.popleft())

    def _give_back(self, block: Block, streams):
        """A freed block: held back for the other streams that used it, or returned."""
        others = [s for s in streams if s is not block.stream] if streams else None
        held = bool(others)
        self._log.append((FREE_EVENT, block.size, block.requested, block.segment.small, held))
        if held:
            block.state = PENDING
            self._pending.append((block, [s.record_event() for s in others]))
        else:
            self._return(block)

    def _collect_pending(self, wait: bool):
        """Return pending blocks whose events completed (all of them, waiting, if `wait`)."""
        keep = []
        for block, events in self._pending:
            if wait:
                for e in events:
                    e.synchronize()
            elif not all(e.query() for e in events):
                keep.append((block, events))
                continue
            self._log.append((SETTLE_EVENT, block.size, 0, block.segment.small, False))
            self._return(block)
        self._pending = keep

    # ------------------------------------------------------------------ free lists
    def _list(self, stream, small: bool) -> FreeList:
        lst = self._free_lists.get((stream, small))
        if lst is None:
            lst = self._free_lists[(stream, small)] = FreeList()
        return lst

    def _insert(self, block: Block):
        self._list(block.stream, block.segment.small).add(block)

    def _take_free(self, stream, small: bool, size: int):
        lst = self._free_lists.get((stream, small))
        return None if lst is None else lst.take(size)

    def _split(self, block: Block, size: int, small: bool):
        rest = block.size - size
        if rest >= self.granule if small else rest > SMALL_REQUEST:
            tail = Block(block.segment, block.offset + size, rest, before=block, after=block.next)
            if block.next is not None:
                block.next.prev = tail
            block.next = tail
            block.size = size
            self._insert(tail)

    def _return(self, block: Block):
        """A freed block back on its stream's free list. Neighbours are merged later, when
        an allocation finds no cached block that fits (`_coalesce`): a block freed and asked
        for again at the same size is then reused without a split and a merge each time."""
        block.state = FREE
        if (self.max_idle_bytes is not None and block.prev is None and block.next is None
                and self.idle_bytes() > self.max_idle_bytes):
            self._release_segment(block.segment)
            return
        key = (block.segment.stream, block.segment.small)  # _insert and FreeList.add, inlined
        lst = self._free_lists.get(key)
        if lst is None:
            lst = self._free_lists[key] = FreeList()
        same = lst.by_size.get(block.size)  # FreeList.add, inlined
        if same is None:
            same = lst.by_size[block.size] = []
            bisect.insort(lst.sizes, block.size)
        same.append(block)

    def _coalesce(self, stream, small: bool) -> bool:
        """Merge adjacent free blocks on one free list (neighbours share a segment, hence the
        list); whether any merged."""
        lst = self._free_lists.get((stream, small))
        if not lst:
            return False
        merged = []
        for block in lst:
            if block.prev is not None and block.prev.state == FREE:
                continue  # absorbed by the start of its run
            after = block.next
            while after is not None and after.state == FREE:
                block.size += after.size
                after = block.next = after.next
                if after is not None:
                    after.prev = block
            if (self.max_idle_bytes is not None and block.prev is None and block.next is None
                    and self.idle_bytes() > self.max_idle_bytes):
                self._release_segment(block.segment)
                continue
            merged.append(block)
        if len(merged) == len(lst):
            return False
        self._free_lists[(stream, small)] = FreeList(merged)
        return True

    # ------------------------------------------------------------------ segments
    def _new_segment(self, size: int, stream, small: bool, nbytes: int) -> Block:
        seg_size = self.segment_size(size)
        try:
            raw = self._alloc(seg_size)
        except MemoryError as first:
            self.num_alloc_retries += 1
            cached, allocated, reserved = self.idle_bytes(), self.allocated_bytes, self.reserved_bytes
            self._empty_cache(wait_for_streams=True)
            try:
                raw = self._alloc(seg_size)
            except MemoryError as second:
                self.num_ooms += 1
                raise AllocationFailed(nbytes, str(second).strip() or str(first).strip(), cached, allocated,
                                       reserved) from None
        self.num_device_alloc += 1
        seg = Segment(raw, seg_size, stream, small)
        self._segments[id(seg)] = seg
        self._count(small, SEGMENT, 1)
        self._count(small, RESERVED_BYTES, seg_size)
        return Block(seg, 0, seg_size)

    def _release_segment(self, seg: Segment):
        del self._segments[id(seg)]
        self._count(seg.small, SEGMENT, -1)
        self._count(seg.small, RESERVED_BYTES, -seg.size)
        self.num_device_free += 1
        self._free(seg.raw)

    def empty_cache(self) -> int:
        """Return every wholly free segment to the driver (after waiting for blocks other
        streams still used); the bytes released."""
        with self._lock:
            return self._empty_cache(wait_for_streams=False)

    def _empty_cache(self, wait_for_streams: bool) -> int:
        if wait_for_streams and self._synchronize is not None:
            self._synchronize()
        self._drain()
        self._collect_pending(wait=True)
        for key in list(self._free_lists):
            self._coalesce(*key)
        released = 0
        for key, lst in list(self._free_lists.items()):
            keep = []
            for block in lst:
                if block.whole_segment():
                    released += block.size
                    self._release_segment(block.segment)
                else:
                    keep.append(block)
            self._free_lists[key] = FreeList(keep)
        return released

    clear = empty_cache  # the name the pool had before it split blocks

    # ------------------------------------------------------------------ statistics
    def _fold(self):
        """Apply the logged allocations, frees and settlements to the counters, as if in order
        (so peaks are exact). Allocation and free only log: counting both pools' statistics on
        every tensor made and collected cost about a µs; a long log is folded by numpy
        (`fold_events`), a short one event by event."""
        log = self._log
        if not log:
            return
        if len(log) >= VECTOR_FOLD:
            fold_events(log, self._all, self._small, self._large)
            log.clear()
            return
        everything, small_pool, large_pool = self._all, self._small, self._large
        for what, size, requested, small, held in log:
            pool = small_pool if small else large_pool
            if what == ALLOC_EVENT:
                everything.allocated(size, requested)
                pool.allocated(size, requested)
            elif what == FREE_EVENT:
                everything.freed(size, requested, held)
                pool.freed(size, requested, held)
            else:
                everything.settled(size)
                pool.settled(size)
        log.clear()

    def _count(self, small: bool, stat: int, delta: int):
        self._fold()
        self._all.change(stat, delta)
        (self._small if small else self._large).change(stat, delta)

    @property
    def allocated_bytes(self) -> int:
        """Bytes of blocks handed out and not yet freed."""
        self._fold()
        return self._all.current[ALLOCATED_BYTES]

    in_use_bytes = allocated_bytes

    @property
    def reserved_bytes(self) -> int:
        """Bytes of segments held from the driver."""
        self._fold()
        return self._all.current[RESERVED_BYTES]

    def idle_bytes(self) -> int:
        """Reserved bytes in free blocks (reusable now, or releasable by empty_cache)."""
        return self.reserved_bytes - self._all.current[ACTIVE_BYTES]

    @property
    def cached_bytes(self) -> int:
        """Reserved bytes not in live tensors (`idle_bytes`, after taking back freed blocks)."""
        self._try_drain()
        return self.idle_bytes()

    def memory_stats(self) -> dict:
        """PyTorch's `torch.cuda.memory_stats()` keys where they mean the same:
        "<stat>.<all|small_pool|large_pool>.<current|peak|allocated|freed>" for allocation,
        segment, active (counts) and allocated_bytes, reserved_bytes, active_bytes,
        requested_bytes; plus num_alloc_retries, num_ooms, num_device_alloc, num_device_free."""
        with self._lock:
            self._drain()
            if self._pending:
                self._collect_pending(wait=False)
            self._fold()
            out = {}
            for i, name in enumerate(STAT_NAMES):
                for pool, c in self._stats.items():
                    out[f"{name}.{pool}.current"] = c.current[i]
                    out[f"{name}.{pool}.peak"] = c.peak[i]
                    out[f"{name}.{pool}.allocated"] = c.increased[i]
                    out[f"{name}.{pool}.freed"] = c.decreased[i]
            out.update(num_alloc_retries=self.num_alloc_retries, num_ooms=self.num_ooms,
                       num_device_alloc=self.num_device_alloc, num_device_free=self.num_device_free)
            return out

    def reset_peak_stats(self):
        """Set every peak to its current value."""
        with self._lock:
            self._fold()
            for c in self._stats.values():
                c.peak[:] = c.current


def fold_events(log: list, everything: Counters, small_pool: Counters, large_pool: Counters) -> None:
    """`CachingAllocator._fold` of a log of (what, size, requested, small, held) events in a
    few numpy passes: each event's change of the first five statistics, their running sums
    per pool (a peak is the largest running value) and the sums of their rises and falls.
    The same counts as applying the events one by one, at about a third of the cost on long
    logs (the conversion of the events to an array is most of it)."""
    import numpy as np  # (the allocator's other paths need no numpy)

    ev = np.fromiter(itertools.chain.from_iterable(log), np.int64, count=5 * len(log)).reshape(-1, 5)
    what, size, requested, small, held = np.ascontiguousarray(ev.T)
    gone = (what == FREE_EVENT).astype(np.int64)
    change = (what == ALLOC_EVENT) - gone  # allocation count, allocated and requested bytes
    active = change + gone * held - (what == SETTLE_EVENT)  # active count and bytes (a held free stays active)
    deltas = np.stack([change, change * size, change * requested, active, active * size])  # [5, events]
    is_small = small.astype(bool)
    for counters, rows in ((everything, None), (small_pool, is_small), (large_pool, ~is_small)):
        d = deltas if rows is None else deltas[:, rows]
        if not d.shape[1]:
            continue
        running = np.cumsum(d, axis=1)
        top, total = running.max(axis=1).tolist(), running[:, -1].tolist()
        size_sum = np.abs(d).sum(axis=1).tolist()  # rises + falls (and rises - falls = total)
        cur, peak, inc, dec = counters.current, counters.peak, counters.increased, counters.decreased
        for i in range(5):
            peak[i] = max(peak[i], cur[i] + top[i])
            cur[i] += total[i]
            inc[i] += (size_sum[i] + total[i]) // 2
            dec[i] += (size_sum[i] - total[i]) // 2
