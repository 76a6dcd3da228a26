"""Shared timing and table helpers for the benchmark scripts (timing never decides a test)."""
from __future__ import annotations

import platform
import threading
import time

import numpy as np

import kerneldsl as kd


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
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return "\n".join(out)


def queued_timing() -> bool:
    """Whether $BENCH_TIMING asks every benchmark for device time alone ("queued"; see
    queued_device_time) instead of events around each call (the default)."""
    import os
    return os.environ.get("BENCH_TIMING", "") == "queued"


def median_device_time(rt, fn, reps: int) -> float:
    """Median seconds of `fn()` on a runtime, timed with its events where it has them
    (CUDA), else by wall clock with a synchronise; one warm-up run first. With
    BENCH_TIMING=queued and events: device time alone (queued_device_time)."""
    import statistics
    if queued_timing() and hasattr(rt, "elapsed_ms"):
        return queued_device_time(rt, fn, reps)
    fn()
    rt.synchronize()
    if not hasattr(rt, "elapsed_ms"):
        return best_time(lambda: (fn(), rt.synchronize()), reps)
    times = []
    for _ in range(reps):
        start = rt.record_event()
        fn()
        end = rt.record_event()
        times.append(rt.elapsed_ms(start, end) / 1e3)
    return statistics.median(times)


def median_torch_cuda_time(torch, fn, reps: int) -> float:
    """Median seconds of `fn()` on torch's current CUDA stream, timed with CUDA events
    (BENCH_TIMING=queued: device time alone, queued_torch_cuda_time)."""
    import statistics
    if queued_timing():
        return queued_torch_cuda_time(torch, fn, reps)
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


# ------------------------------------------------------------------ device time without the host
# median_device_time brackets one call with events: the host's work before the launch (rudnn's
# validation and planning, torch's dispatcher, a Triton launcher) runs after the start event,
# with the device idle, so it is counted; for small kernels it is most of the time measured. The functions below queue `calls` calls behind a spin kernel
# that keeps the device busy until the host has issued them all; the events then see the
# kernels back to back: device time alone, the figure kernel targets are about.
_SPIN = None


def _spin_kernel():
    """A one-unit kernel of `iters` dependent multiply-adds (built on first use)."""
    global _SPIN
    if _SPIN is None:
        @kd.kernel
        def bench_spin(out: kd.Tensor[kd.f32], iters: kd.i32):
            acc = kd.f32(0)
            for _ in range(iters):
                acc = kd.fma(acc, kd.f32(0.999), kd.f32(1.0))
            out[0] = acc

        _SPIN = bench_spin
    return _SPIN


def _queued(issue_spin, record, elapsed_s, sync, fn, reps: int, calls: int) -> float:
    """Median device seconds per call of `fn`: see the note above. `issue_spin(seconds)` queues
    a spin of about that long; `record()` an event; `elapsed_s(a, b)`; `sync()` waits."""
    import statistics
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls  # issue time a call (an upper bound: includes any waits)
    sync()
    times = []
    for _ in range(reps):
        issue_spin(2.0 * host * calls + 1e-3)
        start = record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        issued = time.perf_counter() - t0
        end = record()
        sync()
        per_call = elapsed_s(start, end) / calls
        if issued > 2.0 * host * calls + 1e-3:  # the host fell behind the spin: not device time alone
            per_call = float("nan")
        times.append(per_call)
    good = [t for t in times if t == t]
    return statistics.median(good) if good else float("nan")


def queued_device_time(rt, fn, reps: int, calls: int = 10) -> float:
    """Device seconds per call of `fn` on a runtime with events (CUDA), the host's issue time
    excluded (calls queued behind a spin kernel)."""
    spin, out = _spin_kernel(), rt.empty((1,), kd.f32)
    probe = 200_000
    spin[1, 1](out, probe)
    rt.synchronize()
    a = rt.record_event()
    spin[1, 1](out, probe)
    b = rt.record_event()
    rt.synchronize()
    per_iter = max(rt.elapsed_ms(a, b) / 1e3 / probe, 1e-10)
    return _queued(lambda s: spin[1, 1](out, min(int(s / per_iter), 2**31 - 1)), rt.record_event,
                   lambda x, y: rt.elapsed_ms(x, y) / 1e3, rt.synchronize, fn, reps, calls)


def queued_torch_cuda_time(torch, fn, reps: int, calls: int = 10) -> float:
    """Device seconds per call of `fn` on torch's current CUDA stream, the host's issue time
    excluded (calls queued behind torch.cuda._sleep)."""
    def record():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e
    probe = 1_000_000
    torch.cuda._sleep(probe)
    torch.cuda.synchronize()
    a = record()
    torch.cuda._sleep(probe)
    b = record()
    torch.cuda.synchronize()
    per_cycle = max(a.elapsed_time(b) / 1e3 / probe, 1e-12)
    return _queued(lambda s: torch.cuda._sleep(int(s / per_cycle)), record,
                   lambda x, y: x.elapsed_time(y) / 1e3, torch.cuda.synchronize, fn, reps, calls)


def rounds_in_turn(rt, torch, base, runs: dict, out, rounds: int, reps: int) -> tuple:
    """Time the baseline `base()` (torch CUDA; None: none) and each `runs[name](out)` in turn,
    `rounds` times (medians of `reps` calls each): ({name: [seconds a round]}, [baseline's])."""
    times = {v: [] for v in runs}
    base_times = []
    for _ in range(rounds):
        if base is not None:
            base_times.append(median_torch_cuda_time(torch, base, reps))
        for v, fn in runs.items():
            times[v].append(median_device_time(rt, lambda fn=fn: fn(out), reps))
    return times, base_times


def ratio_cells(base_times: list, times: list) -> tuple:
    """("min-maxx" of baseline / ours over the rounds, the baseline's best ms) or ("-", "-")."""
    if not base_times:
        return "-", "-"
    ratios = [b / o for b, o in zip(base_times, times)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}x", f"{min(base_times) * 1e3:.3f}"


VARIANT_HEADERS = ("runtime", "shape", "batch", "variant", "ms (best round)", "cuDNN ms", "ratio range", "TFLOP/s",
                   "rel err")


def variant_rows(prefix: tuple, times: dict, base_times: list, errs: dict, flops: float) -> list:
    """One row a variant (prefix: runtime, shape, batch) for VARIANT_HEADERS, each printed as it
    is made: its best round, the baseline's, the ratio range, TFLOP/s and its error."""
    rows = []
    for v, ts in times.items():
        t = min(ts)
        ratio, tb = ratio_cells(base_times, ts)
        rows.append((*prefix, v, f"{t * 1e3:.3f}", tb, ratio, f"{flops / t / 1e12:.1f}", f"{errs[v]:.1e}"))
        print(*rows[-1], flush=True)
    return rows


def sweep_arguments(doc: str, argv=None):
    """The options of the tile-shape sweeps next to cuDNN (conv_group, conv_wgrad): --runtimes,
    --reps, --rounds, --quick; --shapes and --only narrow a sweep (conv_group reads them)."""
    import argparse
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtimes", default="cuda")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N 2 and 3 reps (a smoke run)")
    ap.add_argument("--shapes", default="", help="comma-separated substrings of shape names (default: all)")
    ap.add_argument("--only", default="", help="comma-separated substrings of variant names (default: all)")
    return ap.parse_args(argv)
