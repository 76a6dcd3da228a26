"""DSL kernels on host runtimes next to numpy: a streaming copy and a row sum of squares.

    python -m benchmarks.dsl_cpu [--rows 16384 --cols 4096] [--runtimes cpu,opencl]

Prints GB/s and ratios: the DSL copy against the best streaming copy numpy reaches
on this machine with as many threads as cores, and the row reduction against
numpy's `einsum('ij,ij->i')` (and the machine's read bandwidth).
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import kerneldsl as kd

from .common import best_time, machine, table, threaded


@kd.kernel
def copy_kernel(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i64, BLOCK: kd.Const[int], PER: kd.Const[int]):
    """Each cube copies PER consecutive blocks of BLOCK elements (unit-contiguous)."""
    base = kd.i64(kd.cube_pos_x()) * (BLOCK * PER)
    for j in range(0, BLOCK * PER, BLOCK):
        i = base + j + kd.unit_pos_x()
        if i < n:
            y[i] = x[i]


@kd.kernel
def row_sumsq(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32], BLOCK: kd.Const[int]):
    """out[r] = sum_j x[r, j]^2: unit-strided partial sums, then kd.cube_sum."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    n = x.shape[1]
    full = n - n % BLOCK
    acc = kd.f32(0)
    for i in range(0, full, BLOCK):
        v = x[row, i + t]
        acc += v * v
    if full + t < n:
        v = x[row, full + t]
        acc += v * v
    s = kd.cube_sum(acc)
    if t == 0:
        out[row] = s


def host_baselines(a, b, threads):
    n = a.size
    fa, fb = a.reshape(-1), b.reshape(-1)
    cuts = [n * i // threads for i in range(threads + 1)]
    t_copy1 = best_time(lambda: np.copyto(fb, fa))
    t_copyN = best_time(lambda: threaded(lambda i: np.copyto(fb[cuts[i]:cuts[i + 1]], fa[cuts[i]:cuts[i + 1]]),
                                         threads))
    t_readN = best_time(lambda: threaded(lambda i: fa[cuts[i]:cuts[i + 1]].sum(), threads))
    t_einsum = best_time(lambda: np.einsum("ij,ij->i", a, a))
    return {"copy1": 2 * a.nbytes / t_copy1, "copyN": 2 * a.nbytes / t_copyN, "readN": a.nbytes / t_readN,
            "einsum": a.nbytes / t_einsum}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--runtimes", default=",".join(r for r in kd.available_runtimes() if r in ("cpu", "opencl")))
    args = p.parse_args(argv)
    threads = os.cpu_count() or 1
    a = np.random.default_rng(0).random((args.rows, args.cols), dtype=np.float32)
    b = np.empty_like(a)
    base = host_baselines(a, b, threads)
    print(f"machine: {machine()}; {a.nbytes / 2**20:.0f} MiB f32 input")
    print(f"numpy copyto 1 thread {base['copy1'] / 1e9:.1f} GB/s, {threads} threads {base['copyN'] / 1e9:.1f} GB/s; "
          f"{threads}-thread read {base['readN'] / 1e9:.1f} GB/s; einsum row sumsq {base['einsum'] / 1e9:.1f} GB/s")
    best_stream = max(base["copy1"], base["copyN"])
    rows = []
    ref = np.einsum("ij,ij->i", a, a)
    for name in args.runtimes.split(","):
        rt = kd.runtime(name)
        x, y, out = rt.tensor(a), rt.empty(a.shape, "f32"), rt.empty(args.rows, "f32")
        n = a.size
        B, PER = 256, 16

        def run_copy():
            copy_kernel[(n + B * PER - 1) // (B * PER), B](x, y, n, B, PER)
            rt.synchronize()

        def run_rows():
            row_sumsq[args.rows, B](x, out, B)
            rt.synchronize()

        t_copy = best_time(run_copy)
        t_rows = best_time(run_rows)
        assert np.array_equal(y.numpy(), a), "copy kernel gave wrong data"
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4)
        gc = 2 * a.nbytes / t_copy
        gr = a.nbytes / t_rows
        rows.append([name, "copy", f"{t_copy * 1e3:.1f} ms", f"{gc / 1e9:.1f}", f"{gc / best_stream:.2f}x best numpy copy"])
        rows.append([name, "row sumsq", f"{t_rows * 1e3:.1f} ms", f"{gr / 1e9:.1f}",
                     f"{gr / base['einsum']:.2f}x einsum, {gr / base['readN']:.2f}x read bandwidth"])
    print(table(rows, ["runtime", "kernel", "time", "GB/s", "ratio"]))


if __name__ == "__main__":
    main()
