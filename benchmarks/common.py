"""Shared timing and table helpers for the benchmark scripts (timing never decides a test)."""
from __future__ import annotations

import platform
import threading
import time

import numpy as np


def best_time(fn, reps: int = 7, warmup: int = 1) -> float:
    """Best wall time of `fn()` over `reps` runs, in seconds (fn must synchronise)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def threaded(fn, parts: int):
    """Run fn(part_index) on `parts` threads (numpy releases the GIL in copies and reductions)."""
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def machine() -> str:
    import os
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} threads, numpy {np.__version__}"


def table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return "\n".join(out)


def median_device_time(rt, fn, reps: int) -> float:
    """Median seconds of `fn()` on a runtime, timed with its events where it has them
    (CUDA), else by wall clock with a synchronise; one warm-up run first."""
    import statistics
    fn()
    rt.synchronize()
    if not hasattr(rt, "record_event"):
        return best_time(lambda: (fn(), rt.synchronize()), reps)
    times = []
    for _ in range(reps):
        start = rt.record_event()
        fn()
        end = rt.record_event()
        times.append(rt.elapsed_ms(start, end) / 1e3)
    return statistics.median(times)


def median_torch_cuda_time(torch, fn, reps: int) -> float:
    """Median seconds of `fn()` on torch's current CUDA stream, timed with CUDA events."""
    import statistics
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)
