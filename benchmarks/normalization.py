"""rudnn.normalization next to the best baselines on this machine: layer_norm, rms_norm and
softmax over the last axis, GB/s counted as input read + output written.

    python -m benchmarks.normalization                       # every runtime here, 512 MiB inputs
    python -m benchmarks.normalization --small               # a quick run (16 MiB, two widths)
    python -m benchmarks.normalization --runtimes cpu --widths 4096 --dtypes f32 --reps 9

Baselines: with a CUDA runtime and a CUDA build of PyTorch, F.layer_norm / F.rms_norm /
torch.softmax eager and under torch.compile on the GPU; otherwise numpy (f32) and PyTorch
CPU eager. Ours and the baselines run in turn, --reps rounds after a warm-up, and each
keeps its best time (the CPU may be shared: best-of-N over the same moments is the least
noisy comparison); "speed-up" is baseline time / our time.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import kerneldsl as kd
import rudnn.normalization as norm

from .common import best_time, machine, table, threaded

OPS = ("layer_norm", "rms_norm", "softmax")
WIDTHS = (1024, 4096, 8192, 32768)


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def default_runtimes(torch) -> list:
    """cuda when both kerneldsl and PyTorch can use the GPU; else the host runtimes."""
    avail = kd.available_runtimes()
    if "cuda" in avail and torch is not None and torch.cuda.is_available():
        return ["cuda"]
    return [r for r in avail if r != "cuda"]


# ------------------------------------------------------------------------------ ours
def ours(rt, op, x, g, b):
    if op == "layer_norm":
        return lambda: norm.layer_norm(x, g, b)
    if op == "rms_norm":
        return lambda: norm.rms_norm(x, g)
    return lambda: norm.softmax_last_axis(x)


# ------------------------------------------------------------------------------ baselines
def numpy_baseline(op, a, g, b):
    def ln():
        m = a.mean(-1, keepdims=True)
        d = a - m
        return d / np.sqrt((d * d).mean(-1, keepdims=True) + np.float32(1e-5)) * g + b

    def rms():
        return a / np.sqrt((a * a).mean(-1, keepdims=True) + np.float32(1e-6)) * g

    def sm():
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return {"layer_norm": ln, "rms_norm": rms, "softmax": sm}[op]


def torch_fns(torch, op, width, compiled: bool):
    F = torch.nn.functional
    fns = {
        "layer_norm": lambda x, g, b: F.layer_norm(x, (width,), g, b, 1e-5),
        "rms_norm": lambda x, g, b: F.rms_norm(x, (width,), g, 1e-6),
        "softmax": lambda x, g, b: torch.softmax(x, -1),
    }
    fn = fns[op]
    return torch.compile(fn, dynamic=False) if compiled else fn


def torch_baselines(torch, op, host, gamma, beta, dtype, device):
    """[(name, fn)] of PyTorch eager (and torch.compile on a GPU) on copies of the data."""
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    x = torch.from_numpy(host.astype(np.float32)).to(device=device, dtype=tdt)
    g = torch.from_numpy(gamma).to(device=device, dtype=tdt)
    b = torch.from_numpy(beta).to(device=device, dtype=tdt)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    width = host.shape[-1]
    out = []
    variants = [("eager", False)] + ([("compile", True)] if device == "cuda" else [])
    for name, compiled in variants:
        fn = torch_fns(torch, op, width, compiled)

        def run(fn=fn):
            fn(x, g, b)
            sync()
        out.append((f"torch {device} {name}", run))
    return out


def interleaved_best(fns: dict, rounds: int) -> dict:
    """Best time of each callable over `rounds` rounds that run every one in turn (after one
    warm-up each), so ours and the baselines see the same moments of a shared machine."""
    import time
    best = {}
    for name, fn in fns.items():
        fn()
        best[name] = float("inf")
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def shape_txt(s) -> str:
    form = f"{s.chunks} chunks held" if s.cached else f"looped, {s.chunks} chunks a step"
    return f"[{s.bx} units x {s.ry} rows, {form}, {s.lanes} lanes]"


def copy_rate(torch, device, host, reps) -> tuple:
    """(name, GB/s) of a plain copy of the same bytes: the machine's practical peak for a
    read-once, write-once kernel (torch clone on a GPU; numpy copies on every core here)."""
    if device == "cuda":
        x = torch.from_numpy(host.view(np.uint8)).to("cuda")

        def run():
            x.clone()
            torch.cuda.synchronize()
        return "torch clone", 2 * host.nbytes / best_time(run, reps=reps)
    import os
    src, dst = host.reshape(-1), np.empty(host.size, host.dtype)
    best = ("numpy copy, 1 thread", 2 * host.nbytes / best_time(lambda: np.copyto(dst, src), reps=reps))
    parts = os.cpu_count() or 1
    if parts > 1:
        cuts = [src.size * i // parts for i in range(parts + 1)]
        t = best_time(lambda: threaded(lambda i: np.copyto(dst[cuts[i]:cuts[i + 1]], src[cuts[i]:cuts[i + 1]]),
                                       parts), reps=reps)
        best = max(best, (f"numpy copy, {parts} threads", 2 * host.nbytes / t), key=lambda r: r[1])
    return best


def sweep(rt, op, x, g, b, reps, moved) -> list:
    """Our op under each cube-shape knob setting of layout.choose_shape: [(knobs, shape, GB/s)]."""
    import functools

    from rudnn.normalization import layout
    seen, out = set(), []
    width, lanes = x.shape[-1], None
    try:
        for per_unit in (1, 2, 4, 8):
            for cube_units in (128, 256, 512):
                pick = functools.partial(layout.choose_shape, per_unit=per_unit, cube_units=cube_units)
                lanes = layout.vector_lanes(x.dtype.itemsize, width)
                shape = pick(rt.capabilities, width, lanes)
                if shape in seen:
                    continue
                seen.add(shape)
                norm.choose_shape = pick
                fn = ours(rt, op, x, g, b)

                def run(fn=fn):
                    fn()
                    rt.synchronize()
                out.append((f"per_unit={per_unit} cube_units={cube_units}", shape, moved / best_time(run, reps=reps)))
    finally:
        norm.choose_shape = layout.choose_shape
    return out


# ------------------------------------------------------------------------------ main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", default=None, help="comma-separated kerneldsl runtimes (default: see above)")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--widths", default=None, help=f"comma-separated W (default {','.join(map(str, WIDTHS))})")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--mib", type=float, default=None, help="input size in MiB (default 512)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--small", action="store_true", help="16 MiB inputs, W in {1024, 4096}: a quick check")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    p.add_argument("--no-baselines", action="store_true")
    p.add_argument("--sweep", action="store_true",
                   help="also time every cube-shape knob setting of layout.choose_shape (for tuning a GPU)")
    args = p.parse_args(argv)
    torch = _torch()
    runtimes = args.runtimes.split(",") if args.runtimes else default_runtimes(torch)
    widths = [int(w) for w in args.widths.split(",")] if args.widths else ([1024, 4096] if args.small else WIDTHS)
    mib = args.mib or (16 if args.small else 512)
    print(f"machine: {machine()}; torch {torch.__version__ if torch else 'not installed'}")
    rows_out = []
    for rt_name in runtimes:
        rt = kd.runtime(rt_name)
        device = "cuda" if rt.capabilities.backend == "cuda" else "cpu"
        print(f"runtime {rt.name}: {rt.capabilities.device_name}; {mib:g} MiB inputs, best of {args.reps}")
        peak = None
        for dtype in args.dtypes.split(","):
            item = kd.as_dtype(dtype).itemsize
            for width in widths:
                rows = max(1, int(mib * 2**20) // (width * item))
                rng = np.random.default_rng(0)
                host = rng.standard_normal((rows, width), dtype=np.float32).astype(kd.as_dtype(dtype).np)
                gamma = rng.uniform(0.5, 1.5, width).astype(np.float32)
                beta = rng.standard_normal(width).astype(np.float32)
                x, g, b = rt.tensor(host), rt.tensor(gamma), rt.tensor(beta)
                moved = 2 * host.nbytes  # read the input once, write the output once
                if peak is None:
                    peak = copy_rate(torch, device, host, args.reps)
                    print(f"  copy of {host.nbytes / 2**20:.0f} MiB ({peak[0]}): {peak[1] / 1e9:.1f} GB/s "
                          f"(the 'of copy' column)")
                for op in args.ops.split(","):
                    fn = ours(rt, op, x, g, b)

                    def run(fn=fn):
                        fn()
                        rt.synchronize()
                    base = []
                    if not args.no_baselines:
                        if device == "cpu" and dtype == "f32":
                            base.append(("numpy", numpy_baseline(op, host, gamma, beta)))
                        if torch is not None and (device == "cpu" or torch.cuda.is_available()):
                            for name, bfn in torch_baselines(torch, op, host, gamma, beta, dtype, device):
                                if name.endswith("compile") and args.no_compile:
                                    continue
                                base.append((name, bfn))
                    best = interleaved_best({"ours": run, **dict(base)}, args.reps)
                    t = best["ours"]
                    shape = f"{rows}x{width}"
                    line = [rt.name, op, shape, dtype, f"{t * 1e3:.2f}", f"{moved / t / 1e9:.1f}",
                            f"{moved / t / peak[1]:.0%}"]
                    added = [line + ["-", "-", "-", "-"]] if not base else []
                    for name, _ in base:
                        tb = best[name]
                        added.append(line + [name, f"{tb * 1e3:.2f}", f"{moved / tb / 1e9:.1f}", f"{tb / t:.2f}x"])
                    for r in added:
                        print("  ".join(map(str, r)), flush=True)
                    rows_out += added
                    if args.sweep:
                        for knobs, shape, rate in sweep(rt, op, x, g, b, args.reps, moved):
                            print(f"    sweep {op} {shape_txt(shape)} ({knobs}): {rate / 1e9:.1f} GB/s", flush=True)
                del x, host
    print()
    print(table(rows_out, HEADERS))
    return 0


HEADERS = ["runtime", "op", "shape", "dtype", "ours ms", "ours GB/s", "of copy", "baseline", "base ms", "base GB/s", "speed-up"]

if __name__ == "__main__":
    sys.exit(main())
