"""The caching allocator at real sizes: `rt.empty` with a warm cache, and what a cached block
does to a bandwidth-bound operator (f32 layer_norm at two sizes, GB/s = input read + output written).

    python -m benchmarks.allocator --runtimes cuda          # 256 MiB..8 GiB; layer_norm 512 vs 1024 MiB
    python -m benchmarks.allocator                          # every host runtime, small sizes
    python -m benchmarks.allocator --runtimes cpu --sizes 4,64 --norm-mib 8,16 --reps 50

"warm µs" is the median host time of `t = rt.empty(...); del t` when the block is cached
(targets: <= 10 µs at every size); "cold µs" the first allocation after `rt.empty_cache()`
(the driver's cost). The "crowded" rows time a small `rt.empty` (4 KiB) and its free with
none, then CROWD other blocks of its size, free in the cache: a caching allocator must not slow
down as its free blocks pile up (a list sorted by size paid a shift of it per call). The
normalization rows time `rudnn.normalization.layer_norm` on rows of
4096 f32 (device time with the runtime's events where it has them, else best wall time with
a synchronise); "vs first" compares each size's GB/s with the first (target: within 5%).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import kerneldsl as kd
import rudnn.normalization as norm

from .common import machine, median_device_time, table

GPU_SIZES_MIB = (256, 1024, 2048, 4096, 8192)
HOST_SIZES_MIB = (4, 16, 64)
GPU_NORM_MIB = (512, 1024)
HOST_NORM_MIB = (8, 16)
WIDTH = 4096
CROWD = 20000  # small blocks freed before the crowded row
SMALL_BYTES = 4096


def empty_times(rt, mib: float, reps: int) -> tuple:
    """(cold µs, warm median µs) of rt.empty of `mib` MiB of f32."""
    n = int(mib * (1 << 20)) // 4
    rt.empty_cache()
    t0 = time.perf_counter()
    t = rt.empty(n)
    cold = time.perf_counter() - t0
    del t
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        t = rt.empty(n)
        times.append(time.perf_counter() - t0)
        del t
    return cold * 1e6, statistics.median(times) * 1e6


def crowded_times(rt, crowd: int, reps: int) -> tuple:
    """(median µs of a small rt.empty and its free, the same with `crowd` other blocks of
    its size free in the cache)."""
    def median_of_calls() -> float:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            t = rt.empty(SMALL_BYTES // 4)
            del t
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e6
    rt.empty_cache()
    alone = median_of_calls()
    held = [rt.empty(SMALL_BYTES // 4) for _ in range(crowd)]
    del held
    crowded = median_of_calls()
    rt.empty_cache()
    return alone, crowded


def layer_norm_rate(rt, mib: float, reps: int) -> float:
    """GB/s of f32 layer_norm over rows of WIDTH, `mib` MiB of input."""
    rows = max(1, int(mib * (1 << 20)) // (4 * WIDTH))
    rng = np.random.default_rng(0)
    x = rt.tensor(rng.standard_normal((rows, WIDTH), dtype=np.float32))
    g = rt.tensor(np.ones(WIDTH, np.float32))
    b = rt.tensor(np.zeros(WIDTH, np.float32))
    seconds = median_device_time(rt, lambda: norm.layer_norm(x, g, b), reps)
    return 2 * rows * WIDTH * 4 / seconds / 1e9


def run(rt, sizes, norm_mib, reps: int) -> tuple:
    alloc_rows = []
    for mib in sizes:
        cold, warm = empty_times(rt, mib, reps)
        alloc_rows.append((rt.name, f"{mib:g} MiB", f"{cold:.1f}", f"{warm:.1f}", "yes" if warm <= 10 else "no"))
    alone, crowded = crowded_times(rt, CROWD, reps)
    alloc_rows.append((rt.name, f"{SMALL_BYTES // 1024} KiB", "", f"{alone:.1f}", "yes" if alone <= 10 else "no"))
    alloc_rows.append((rt.name, f"{SMALL_BYTES // 1024} KiB, crowded", "", f"{crowded:.1f}",
                       "yes" if crowded <= 10 else "no"))
    norm_rows, first = [], None
    for mib in norm_mib:
        rate = layer_norm_rate(rt, mib, max(5, reps // 10))
        first = first or rate
        norm_rows.append((rt.name, f"{mib:g} MiB", f"{rate:.1f}", f"{rate / first:.3f}"))
    st = rt.memory_stats()
    norm_rows.append((rt.name, "reserved after", f"{st['reserved_bytes.all.peak'] / (1 << 20):.0f} MiB peak", ""))
    return alloc_rows, norm_rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", default=None, help="comma-separated runtimes (default: every one here but cuda)")
    p.add_argument("--sizes", default=None, help="rt.empty sizes in MiB (default: 256..8192 on cuda, 4,16,64 else)")
    p.add_argument("--norm-mib", default=None, help="layer_norm input sizes in MiB (default: 512,1024 on cuda, "
                                                    "8,16 else)")
    p.add_argument("--reps", type=int, default=200, help="rt.empty calls timed per size")
    args = p.parse_args(argv)
    names = args.runtimes.split(",") if args.runtimes else [r for r in kd.available_runtimes() if r != "cuda"]
    alloc_rows, norm_rows = [], []
    for name in names:
        rt = kd.runtime(name)
        gpu = rt.kind == "cuda"
        sizes = [float(s) for s in args.sizes.split(",")] if args.sizes else (GPU_SIZES_MIB if gpu else HOST_SIZES_MIB)
        nm = [float(s) for s in args.norm_mib.split(",")] if args.norm_mib else (GPU_NORM_MIB if gpu else HOST_NORM_MIB)
        a, n = run(rt, sizes, nm, args.reps)
        alloc_rows += a
        norm_rows += n
    print(f"machine: {machine()}")
    print(table(alloc_rows, ["runtime", "rt.empty", "cold µs", "warm µs", "<= 10 µs"]))
    print()
    print(table(norm_rows, ["runtime", "layer_norm f32", "GB/s", "vs first"]))


if __name__ == "__main__":
    main()
