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
