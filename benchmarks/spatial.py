"""rudnn's spatial operators next to PyTorch: pooling and ×2 interpolation (this file's
cases), forward and backward, on the shapes vision models run. GB/s counts every tensor read or written once
(input, output, indices, gradients).

    python -m benchmarks.spatial                          # cuda if here (with torch CUDA), else cpu
    python -m benchmarks.spatial --quick                  # small shapes: a smoke run
    python -m benchmarks.spatial --runtimes cpu --cases max_pool2d,global_avg --dtypes f32 --reps 5

Structure: CASES lists the benchmark cases; each is a function `case(ctx) -> Bench`
that builds its inputs (on ctx's runtime, shared with torch) and returns ours and torch's
callables and the bytes they move. Other spatial families add their cases to CASES in the
same form. Every case checks ours against torch before timing ("err": max |ours - torch|
over max |torch|); where they differ past the dtype's tolerance and the case has an F64
arbiter (torch's op on the same inputs in F64), the row gives both sides' error against it
and fails only where ours is past the tolerance.

CUDA: inputs are made by torch on the GPU and shared through DLPack; both sides are timed
with CUDA events (median of --reps): each call between two events by default, which counts
the host's issue time where it exceeds the kernel's; `--queued` gives device time alone
(ten calls queued behind a spin kernel, benchmarks/common.py). CPU: torch CPU eager on the same host memory, best
wall time of --reps calls each (the machine may be shared).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

import kerneldsl as kd
import rudnn.interpolation as I
import rudnn.pooling as P

from .common import (best_time, machine, median_device_time, median_torch_cuda_time, queued_device_time,
                     queued_torch_cuda_time, table)

TDTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


@dataclass
class Context:
    """What a case needs: torch, our runtime, the dtype, and whether to use quick shapes."""
    torch: object
    rt: object
    dtype: str
    quick: bool
    cuda: bool

    def randn(self, shape, seed=0):
        """A standard-normal tensor of `shape` in ctx.dtype: (ours, torch's), sharing memory."""
        torch = self.torch
        tdt = getattr(torch, TDTYPES[self.dtype])
        if self.cuda:
            gen = torch.Generator(device="cuda")
            gen.manual_seed(seed)
            t = torch.randn(shape, generator=gen, device="cuda").to(tdt)
            return kd.from_dlpack(t), t
        t = torch.from_numpy(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)).to(tdt)
        return self.rt.tensor(t.float().numpy(), dtype=self.dtype), t

    def shared(self, ours):
        """torch's view of one of our output tensors (to feed a backward baseline)."""
        if self.cuda:
            return self.torch.from_dlpack(ours)
        a = ours.numpy()
        if ours.dtype is kd.bf16:
            return self.torch.from_numpy(a.astype(np.float32)).to(self.torch.bfloat16)
        return self.torch.from_numpy(np.ascontiguousarray(a))


@dataclass
class Bench:
    """One timed comparison: `ours()` and `torch()` return their results; `moved` bytes;
    `exact()`, where given, torch's op in F64 on the same (dtype-rounded) inputs, the arbiter
    when ours and torch differ past the dtype's tolerance (torch's bf16 kernels that round a
    running sum to bf16, e.g. CUDA's bilinear backward)."""
    what: str
    shape: str
    ours: Callable
    torch: Callable
    moved: int
    exact: Callable | None = None


def _nbytes(t) -> int:
    return int(np.prod(t.shape)) * t.dtype.itemsize


# ------------------------------------------------------------------------------ pooling cases
def _stem(ctx):
    """ResNet's stem pooling input: N 64, C 64, 112² (quick: N 4, C 16, 56²)."""
    return (4, 16, 56, 56) if ctx.quick else (64, 64, 112, 112)


def max_pool2d(ctx) -> Bench:
    x, xt = ctx.randn(_stem(ctx))
    F = ctx.torch.nn.functional
    out = P.max_pool2d(x, 3, 2, 1)
    return Bench("max_pool2d 3x3 s2 p1", str(list(x.shape)), lambda: P.max_pool2d(x, 3, 2, 1),
                 lambda: F.max_pool2d(xt, 3, 2, 1), _nbytes(x) + _nbytes(out))


def max_pool2d_with_indices(ctx) -> Bench:
    x, xt = ctx.randn(_stem(ctx))
    F = ctx.torch.nn.functional
    out, idx = P.max_pool2d_with_indices(x, 3, 2, 1)
    return Bench("max_pool2d +indices", str(list(x.shape)), lambda: P.max_pool2d_with_indices(x, 3, 2, 1)[0],
                 lambda: F.max_pool2d(xt, 3, 2, 1, return_indices=True)[0], _nbytes(x) + _nbytes(out) + _nbytes(idx))


def _max_backward(ctx, shape: tuple, k: int, s: int, p: int, what: str) -> Bench:
    x, xt = ctx.randn(shape)
    out, idx = P.max_pool2d_with_indices(x, k, s, p)
    g, gt = ctx.randn(out.shape, seed=1)
    it = ctx.shared(idx)
    aten = ctx.torch.ops.aten
    return Bench(what, str(list(x.shape)), lambda: P.max_pool2d_backward(x, g, idx, k, s, p),
                 lambda: aten.max_pool2d_with_indices_backward(gt, xt, [k, k], [s, s], [p, p], [1, 1], False, it),
                 _nbytes(g) + _nbytes(idx) + _nbytes(x))


def max_pool2d_backward(ctx) -> Bench:
    return _max_backward(ctx, _stem(ctx), 3, 2, 1, "max_pool2d backward")


def max_pool2d_backward_large(ctx) -> Bench:
    """U-Net's first 2×2 down-sampling: planes of 512² (quick: 128²), larger than the cpu
    runtime's shared memory holds."""
    shape = (1, 4, 128, 128) if ctx.quick else (2, 32, 512, 512)
    return _max_backward(ctx, shape, 2, 2, 0, "max_pool2d 2x2 backward")


def avg_pool2d(ctx) -> Bench:
    x, xt = ctx.randn(_stem(ctx))
    F = ctx.torch.nn.functional
    out = P.avg_pool2d(x, 3, 2, 1)
    return Bench("avg_pool2d 3x3 s2 p1", str(list(x.shape)), lambda: P.avg_pool2d(x, 3, 2, 1),
                 lambda: F.avg_pool2d(xt, 3, 2, 1), _nbytes(x) + _nbytes(out))


def avg_pool2d_backward(ctx) -> Bench:
    x, xt = ctx.randn(_stem(ctx))
    g, gt = ctx.randn(P.avg_pool2d(x, 3, 2, 1).shape, seed=1)
    aten = ctx.torch.ops.aten
    return Bench("avg_pool2d backward", str(list(x.shape)), lambda: P.avg_pool2d_backward(x, g, 3, 2, 1),
                 lambda: aten.avg_pool2d_backward(gt, xt, [3, 3], [2, 2], [1, 1], False, True, None),
                 _nbytes(g) + _nbytes(x))


def _head(ctx):
    """Global average pooling inputs: large enough to measure bandwidth (quick: small)."""
    return (8, 64, 28, 28) if ctx.quick else (64, 256, 56, 56)


def global_avg(ctx) -> Bench:
    x, xt = ctx.randn(_head(ctx))
    F = ctx.torch.nn.functional
    return Bench("adaptive_avg_pool2d to 1", str(list(x.shape)), lambda: P.adaptive_avg_pool2d(x, 1),
                 lambda: F.adaptive_avg_pool2d(xt, 1), _nbytes(x) + int(np.prod(x.shape[:2])) * x.dtype.itemsize)


def global_avg_resnet_head(ctx) -> Bench:
    x, xt = ctx.randn((8, 256, 7, 7) if ctx.quick else (64, 2048, 7, 7))
    F = ctx.torch.nn.functional
    return Bench("adaptive_avg_pool2d to 1", str(list(x.shape)), lambda: P.adaptive_avg_pool2d(x, 1),
                 lambda: F.adaptive_avg_pool2d(xt, 1), _nbytes(x) + int(np.prod(x.shape[:2])) * x.dtype.itemsize)


def global_avg_backward(ctx) -> Bench:
    x, xt = ctx.randn(_head(ctx))
    g, gt = ctx.randn((*x.shape[:2], 1, 1), seed=1)
    aten = ctx.torch.ops.aten
    return Bench("adaptive_avg_pool2d to 1 backward", str(list(x.shape)), lambda: P.adaptive_avg_pool2d_backward(x, g),
                 lambda: aten._adaptive_avg_pool2d_backward(gt, xt), _nbytes(g) + _nbytes(x))


def adaptive_avg_pool2d(ctx) -> Bench:
    x, xt = ctx.randn((8, 64, 28, 28) if ctx.quick else (64, 256, 56, 56))
    F = ctx.torch.nn.functional
    out = P.adaptive_avg_pool2d(x, 7)
    return Bench("adaptive_avg_pool2d to 7x7", str(list(x.shape)), lambda: P.adaptive_avg_pool2d(x, 7),
                 lambda: F.adaptive_avg_pool2d(xt, 7), _nbytes(x) + _nbytes(out))


def adaptive_max_pool2d(ctx) -> Bench:
    x, xt = ctx.randn((8, 64, 28, 28) if ctx.quick else (64, 256, 56, 56))
    F = ctx.torch.nn.functional
    out, idx = P.adaptive_max_pool2d(x, 7)
    return Bench("adaptive_max_pool2d to 7x7", str(list(x.shape)), lambda: P.adaptive_max_pool2d(x, 7)[0],
                 lambda: F.adaptive_max_pool2d(xt, 7, return_indices=True)[0],
                 _nbytes(x) + _nbytes(out) + _nbytes(idx))


def max_pool3d(ctx) -> Bench:
    x, xt = ctx.randn((2, 8, 16, 32, 32) if ctx.quick else (8, 64, 32, 56, 56))
    F = ctx.torch.nn.functional
    out = P.max_pool3d(x, 3, 2, 1)
    return Bench("max_pool3d 3x3x3 s2 p1", str(list(x.shape)), lambda: P.max_pool3d(x, 3, 2, 1),
                 lambda: F.max_pool3d(xt, 3, 2, 1), _nbytes(x) + _nbytes(out))


# ------------------------------------------------------------------------ interpolation cases
def _upsample(ctx, mode: str, backward: bool) -> Bench:
    """F.interpolate ×2 of [32, 64, 256²] (issue 19's H200 shape; quick: [2, 8, 48²]),
    bilinear (align_corners False) or nearest; backward: the aten backward op directly."""
    x, xt = ctx.randn((2, 8, 48, 48) if ctx.quick else (32, 64, 256, 256))
    size = (2 * x.shape[2], 2 * x.shape[3])
    opts = I.InterpolateOptions(I.InterpolateMode.Linear if mode == "bilinear" else I.InterpolateMode.Nearest)
    moved = 5 * _nbytes(x)
    if not backward:
        kw = {"align_corners": False} if mode == "bilinear" else {}
        return Bench(f"interpolate {mode} x2", str(list(x.shape)), lambda: I.interpolate(x, size, opts),
                     lambda: ctx.torch.nn.functional.interpolate(xt, size=size, mode=mode, **kw), moved)
    g, gt = ctx.randn((*x.shape[:2], *size), seed=1)
    aten = ctx.torch.ops.aten
    if mode == "bilinear":
        op = lambda t: aten.upsample_bilinear2d_backward(t, list(size), list(x.shape), False)  # noqa: E731
    else:
        op = lambda t: aten.upsample_nearest2d_backward(t, list(size), list(x.shape))  # noqa: E731
    return Bench(f"interpolate {mode} x2 backward", str(list(x.shape)),
                 lambda: I.interpolate_backward(x, g, size, opts), lambda: op(gt), moved, lambda: op(gt.double()))


def interpolate_bilinear(ctx) -> Bench:
    return _upsample(ctx, "bilinear", False)


def interpolate_bilinear_backward(ctx) -> Bench:
    return _upsample(ctx, "bilinear", True)


def interpolate_nearest(ctx) -> Bench:
    return _upsample(ctx, "nearest", False)


def interpolate_nearest_backward(ctx) -> Bench:
    return _upsample(ctx, "nearest", True)


CASES = {f.__name__: f for f in (max_pool2d, max_pool2d_with_indices, max_pool2d_backward, max_pool2d_backward_large,
                                 avg_pool2d,
                                 avg_pool2d_backward, global_avg, global_avg_resnet_head, global_avg_backward,
                                 adaptive_avg_pool2d, adaptive_max_pool2d, max_pool3d, interpolate_bilinear,
                                 interpolate_bilinear_backward, interpolate_nearest, interpolate_nearest_backward)}


# ------------------------------------------------------------------------------ running
def _as_torch(ctx, result):
    """A result as a torch tensor (ours shared through ctx)."""
    return result if not isinstance(result, kd.Tensor) else ctx.shared(result)


def max_rel_err(ctx, ours, theirs) -> float:
    a = _as_torch(ctx, ours).float()
    b = theirs.float()
    scale = float(b.abs().max()) or 1.0
    e = float((a - b).abs().max()) / scale
    return e if e == e else float("inf")


def check(ctx, bench: Bench, tol: float) -> tuple:
    """(max rel err of ours against torch, a note): "" within `tol`; past it, where the case
    has an F64 arbiter (Bench.exact), each side's error against it, and FAIL only where ours
    is past `tol` of F64; else " FAIL"."""
    ours, theirs = bench.ours(), bench.torch()
    err = max_rel_err(ctx, ours, theirs)
    if err <= tol:
        return err, ""
    if bench.exact is None:
        return err, " FAIL"
    exact = bench.exact()
    e_ours, e_torch = max_rel_err(ctx, ours, exact), max_rel_err(ctx, theirs, exact)
    return err, f" (F64: ours {e_ours:.0e}, torch {e_torch:.0e})" + ("" if e_ours <= tol else " FAIL")


def time_case(ctx, bench: Bench, reps: int, queued: bool = False) -> tuple:
    """(our seconds, torch's seconds) per call; `queued`: device time alone (common.py)."""
    if ctx.cuda and queued:
        return (queued_device_time(ctx.rt, bench.ours, reps),
                queued_torch_cuda_time(ctx.torch, bench.torch, reps))
    if ctx.cuda:
        return (median_device_time(ctx.rt, bench.ours, reps),
                median_torch_cuda_time(ctx.torch, bench.torch, reps))
    ours = best_time(lambda: (bench.ours(), ctx.rt.synchronize()), reps)
    return ours, best_time(bench.torch, reps)


def run(torch, runtime: str, cases, dtypes, quick: bool, reps: int, queued: bool = False, rounds: int = 1) -> list:
    rt = kd.runtime(runtime)
    cuda = rt.name.startswith("cuda")
    if not cuda:
        torch.set_num_threads(max(1, rt.capabilities.compute_units))
    rows = []
    for dtype in dtypes:
        ctx = Context(torch, rt, dtype, quick, cuda)
        for name in cases:
            bench = CASES[name](ctx)
            err, arbiter = check(ctx, bench, {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}[dtype])
            times = [time_case(ctx, bench, reps, queued) for _ in range(rounds)]  # ours and torch in turn
            t_ours, t_torch = min(t[0] for t in times), min(t[1] for t in times)
            ratios = sorted(t[1] / t[0] for t in times)
            speed = f"{ratios[0]:.2f}-{ratios[-1]:.2f}x" if rounds > 1 else f"{t_torch / t_ours:.2f}x"
            row = [bench.what, bench.shape, dtype, f"{t_ours * 1e3:.3f}", f"{t_torch * 1e3:.3f}",
                   speed, f"{bench.moved / t_ours / 1e9:.0f}", f"{bench.moved / t_torch / 1e9:.0f}",
                   f"{err:.0e}" + arbiter]
            print("  " + "  ".join(row), flush=True)
            rows.append(row)
            if cuda:
                torch.cuda.empty_cache()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", default=None, help="comma-separated kerneldsl runtimes (default: cuda if usable, "
                                                     "else cpu)")
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--reps", type=int, default=None, help="timed calls a side (default 10; 3 with --quick)")
    p.add_argument("--quick", action="store_true", help="small shapes, 3 reps: a smoke run")
    p.add_argument("--rounds", type=int, default=1, help="time ours and torch in turn this many times (on a shared "
                                                       "machine): best times, and the range of the rounds' ratios")
    p.add_argument("--queued", action="store_true", help="cuda: device time alone, calls queued behind a spin "
                                                        "kernel (default: each call between two events, which "
                                                        "counts the host's time where it exceeds the kernel's)")
    p.add_argument("--pool-backward", choices=("cells", "taps"), default=None,
                   help="the gather kernel of unrollable pooling backward windows (default: rudnn.pooling.tuning's; "
                        "devices whose units are SIMD lanes scatter instead)")
    args = p.parse_args(argv)
    if args.pool_backward:
        from rudnn.pooling import tuning
        tuning.CELL_BACKWARD = args.pool_backward == "cells"
    # torch's OpenMP threads spin after each call, taking the cores from our cpu runtime's
    # workers when the two run in turn: let them sleep (set before torch loads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    if args.runtimes:
        runtimes = args.runtimes.split(",")
    else:
        runtimes = ["cuda"] if "cuda" in kd.available_runtimes() and torch.cuda.is_available() else ["cpu"]
    reps = args.reps or (3 if args.quick else 10)
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    print(f"machine: {machine()}, torch {torch.__version__}")
    headers = ["case", "input", "dtype", "ours ms", "torch ms", "speed-up", "ours GB/s", "torch GB/s", "err"]
    for name in runtimes:
        rt = kd.runtime(name)
        timing = "device time alone (--queued)" if args.queued else "per call, between events"
        print(f"runtime {rt.name}: {rt.capabilities.device_name}; {timing}", flush=True)
        rows = run(torch, name, cases, args.dtypes.split(","), args.quick, reps, args.queued, args.rounds)
        print(table(rows, headers))


if __name__ == "__main__":
    main()
