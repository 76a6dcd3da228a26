"""rudnn.normalization next to the best baselines on this machine: layer_norm, rms_norm and
softmax over the last axis, GB/s counted as input read + output written.

    python -m benchmarks.normalization                       # every runtime here, 512 MiB inputs
    python -m benchmarks.normalization --small               # a quick run (16 MiB, two widths)
    python -m benchmarks.normalization --runtimes cpu --widths 4096 --dtypes f32 --reps 9
    python -m benchmarks.normalization --runtimes cuda --sweep   # also time other cube shapes
    python -m benchmarks.normalization --runtimes cuda --widths 16384,32768 --long-rows

CPU runtimes: numpy (f32) and PyTorch CPU eager baselines on host data; ours and the
baselines run in turn, --reps rounds after a warm-up, each keeping its best wall time (the
CPU may be shared: best-of-N over the same moments is the least noisy comparison).

CUDA runtime: inputs are made on the GPU by torch and shared through DLPack; baselines are
F.layer_norm / F.rms_norm / torch.softmax eager and under torch.compile. Each side is timed
with CUDA events on its own stream around --batch calls queued back to back (one call queued
before the start event keeps the GPU busy, so the host's per-call overhead overlaps the
kernels, as in a model's forward pass); the median of --reps batches, divided by the batch,
is the device time per call. "1-call ms" is our best wall time of one call and a
synchronise (host overhead included). Every output is checked against torch in f32 on the
upcast input (‖out - ref‖ / ‖ref‖) before it is timed. "speed-up" is baseline time / ours.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import kerneldsl as kd
import rudnn.normalization as norm

from .common import best_time, machine, table, threaded

OPS = ("layer_norm", "rms_norm", "softmax")
TDTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
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


def torch_baselines(torch, op, host, gamma, beta, dtype):
    """[(name, fn)]: PyTorch CPU eager on copies of the data."""
    tdt = getattr(torch, TDTYPES[dtype])
    x = torch.from_numpy(host.astype(np.float32)).to(dtype=tdt)
    g = torch.from_numpy(gamma).to(dtype=tdt)
    b = torch.from_numpy(beta).to(dtype=tdt)
    fn = torch_fns(torch, op, host.shape[-1], compiled=False)
    return [("torch cpu eager", lambda: fn(x, g, b))]


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


def copy_rate(host, reps) -> tuple:
    """(name, GB/s) of a plain copy of the same bytes with numpy on every core: the machine's
    practical peak for a read-once, write-once kernel."""
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
    """Our op under each cube-shape knob setting of tuning.choose_shape: [(knobs, shape, GB/s)]."""
    import functools

    from rudnn.normalization import tuning
    seen, out = set(), []
    width, lanes = x.shape[-1], None
    try:
        for per_unit in (1, 2, 4, 8):
            for cube_units in (128, 256, 512):
                pick = functools.partial(tuning.choose_shape, per_unit=per_unit, cube_units=cube_units)
                lanes = tuning.vector_lanes(x.dtype.itemsize, width)
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
        norm.choose_shape = tuning.choose_shape
    return out


# ------------------------------------------------------------------------------ cuda
MAX_REL_ERR = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}


def device_time(start_event, fn, batch: int, reps: int) -> float:
    """Median device seconds per call of `fn` over `reps` event-timed batches of `batch` calls
    queued back to back; `start_event()` returns (record, elapsed_s) for the caller's stream.
    A call queued before each start event keeps the device busy while the host queues more."""
    import statistics
    fn()
    out = []
    for _ in range(reps):
        fn()
        first = start_event()
        for _ in range(batch):
            fn()
        out.append(first() / batch)
    return statistics.median(out)


def kd_events(rt):
    def start():
        s = rt.record_event()
        return lambda: rt.elapsed_ms(s, rt.record_event()) / 1e3
    return start


def torch_events(torch):
    def start():
        s = torch.cuda.Event(enable_timing=True)
        s.record()

        def stop():
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            e.synchronize()
            return s.elapsed_time(e) / 1e3
        return stop
    return start


def torch_reference(torch, op, xt, gt, bt):
    """The op in f32 on the upcast input (the check's reference)."""
    F = torch.nn.functional
    x = xt.float()
    width = x.shape[-1]
    if op == "layer_norm":
        return F.layer_norm(x, (width,), gt, bt, 1e-5)
    if op == "rms_norm":
        return F.rms_norm(x, (width,), gt, 1e-6)
    return torch.softmax(x, -1)


def rel_err(torch, got, want) -> float:
    d = got.float() - want
    e = float(torch.linalg.vector_norm(d) / torch.linalg.vector_norm(want))
    return e if e == e else float("inf")  # NaN never passes


def cuda_inputs(torch, rows, width, dtype):
    """x [rows, width] (standard normal, made on the GPU), gamma and beta f32 [width]."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1000 + width)
    xt = torch.randn((rows, width), generator=gen, device="cuda").to(getattr(torch, TDTYPES[dtype]))
    gt = torch.rand(width, generator=gen, device="cuda") + 0.5
    bt = torch.randn(width, generator=gen, device="cuda")
    return xt, gt, bt


def wall_one_call(rt, fn, reps) -> float:
    def run():
        fn()
        rt.synchronize()
    return best_time(run, reps=reps)


def allow_recompiles(torch):
    """One compiled graph per shape: raise dynamo's per-function limit (8 by default, past
    which it would silently run the function eagerly)."""
    import torch._dynamo
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 1024)


def cuda_rows(torch, rt, args, widths, mib) -> list:
    """Table rows for every (dtype, width, op) on the cuda runtime: ours, torch eager and
    torch.compile, device time per call; plus our one-call wall time."""
    allow_recompiles(torch)
    out = []
    clone_done = False
    for dtype in args.dtypes.split(","):
        tdt = getattr(torch, TDTYPES[dtype])
        item = kd.as_dtype(dtype).itemsize
        for width in widths:
            rows = max(1, int(mib * 2**20) // (width * item))
            xt, gt, bt = cuda_inputs(torch, rows, width, dtype)
            x, g, b = kd.from_dlpack(xt), kd.from_dlpack(gt), kd.from_dlpack(bt)
            moved = 2 * xt.numel() * item
            if not clone_done:
                t = device_time(torch_events(torch), lambda xt=xt: xt.clone(), args.batch, args.reps)
                print(f"  torch clone of {xt.numel() * item / 2**20:.0f} MiB: {moved / t / 1e9:.0f} GB/s", flush=True)
                clone_done = True
            for op in args.ops.split(","):
                fn = ours(rt, op, x, g, b)
                want = torch_reference(torch, op, xt, gt, bt)
                err = rel_err(torch, torch.from_dlpack(fn()), want)
                ok = err <= MAX_REL_ERR[dtype]
                t = device_time(kd_events(rt), fn, args.batch, args.reps)
                t1 = wall_one_call(rt, fn, args.reps)
                rt.synchronize()
                line = [op, f"{rows}x{width}", dtype, f"{t * 1e3:.3f}", f"{moved / t / 1e9:.0f}",
                        f"{t1 * 1e3:.3f}", f"{err:.1e}" + ("" if ok else " FAIL")]
                base = {}
                if not args.no_baselines:
                    for name, compiled in (("eager", False), ("compile", True)):
                        if compiled and args.no_compile:
                            continue
                        fn_t = torch_fns(torch, op, width, compiled)
                        g2, b2 = gt.to(tdt), bt.to(tdt)
                        tfn = (lambda fn_t=fn_t, x2=xt, g2=g2, b2=b2: fn_t(x2, g2, b2))
                        try:
                            terr = rel_err(torch, tfn(), want)
                            base[name] = (device_time(torch_events(torch), tfn, args.batch, args.reps), terr)
                        except Exception as e:  # noqa: BLE001  (a baseline that fails is reported, not fatal)
                            print(f"  torch {name} {op} {dtype} W={width} failed: {type(e).__name__}: {e}"[:300])
                for name in ("eager", "compile"):
                    if name in base:
                        tb, terr = base[name]
                        line += [f"{moved / tb / 1e9:.0f}", f"{tb / t:.2f}x"]
                    else:
                        line += ["-", "-"]
                print("  " + "  ".join(line), flush=True)
                out.append(line)
                if args.long_rows and op != "softmax":
                    for label, plan in long_row_variants(rt, x):
                        rate, perr = time_plan(torch, rt, op, x, g, b, want, moved, args, plan)
                        print(f"    {op} {dtype} W={width} {label}: {rate / 1e9:.0f} GB/s (err {perr:.1e}"
                              f"{'' if perr <= MAX_REL_ERR[dtype] else ' FAIL'})", flush=True)
                del want
                torch.cuda.synchronize()
                if args.sweep and op in (args.sweep_ops or args.ops).split(","):
                    for shape, rate, serr in cuda_sweep(torch, rt, op, x, g, b, xt, gt, bt, args):
                        print(f"    sweep {op} {dtype} W={width} {shape_txt(shape)}: {rate / 1e9:.0f} GB/s"
                              f" err {serr:.1e}", flush=True)
            del x, g, b, xt, gt, bt
            torch.cuda.empty_cache()
    return out


def long_row_variants(rt, x) -> list:
    """[(label, plan)] of the long-row plans worth timing for x's LayerNorm/RMSNorm (tuning.long_row_plan
    overridden): the plain kernels, persistent cubes and several rows a cube; [] for short rows."""
    from rudnn.normalization import tuning
    width, item = x.shape[-1], x.dtype.itemsize
    shape = tuning.choose_shape(rt.capabilities, width, tuning.vector_lanes(item, width))
    if tuning.long_row_plan(rt.capabilities, shape, width, item, True) is None and \
            tuning.long_row_plan(rt.capabilities, shape, width, item, False) is None:
        return []
    shared, row = rt.capabilities.max_shared_bytes - tuning.SHARED_SLACK, width * item
    out = [("plain", None), ("persistent", tuning.LongRowPlan("persistent"))]
    for nr, reg in ((2, 1),) + (((2, 0), (3, 0), (4, 1)) if item == 2 else ()):
        if (nr - reg) * row <= shared:
            out.append((f"{nr} rows a cube, {reg} in registers", tuning.LongRowPlan("paired", nr, reg)))
    return out


def time_plan(torch, rt, op, x, g, b, want, moved, args, plan) -> tuple:
    """(GB/s, rel err) of our op with tuning.long_row_plan forced to `plan`."""
    keep = norm.long_row_plan
    try:
        norm.long_row_plan = lambda *a: plan
        fn = ours(rt, op, x, g, b)
        err = rel_err(torch, torch.from_dlpack(fn()), want)
        t = device_time(kd_events(rt), fn, args.batch, args.reps)
    finally:
        norm.long_row_plan = keep
    return moved / t, err


CUDA_HEADERS = ["op", "shape", "dtype", "ours ms", "ours GB/s", "1-call ms", "rel err",
                "eager GB/s", "vs eager", "compile GB/s", "vs compile"]


def warm_torch_compile(torch, args, widths, mib):
    """Compile and run each torch.compile baseline once, on inputs of the timed shapes."""
    import time
    allow_recompiles(torch)
    t0 = time.perf_counter()
    for dtype in args.dtypes.split(","):
        tdt = getattr(torch, TDTYPES[dtype])
        for width in widths:
            rows = max(1, int(mib * 2**20) // (width * kd.as_dtype(dtype).itemsize))
            xt, gt, bt = cuda_inputs(torch, rows, width, dtype)
            for op in args.ops.split(","):
                torch_fns(torch, op, width, True)(xt, gt.to(tdt), bt.to(tdt))
            del xt
            torch.cuda.synchronize()
    print(f"torch.compile baselines compiled in {time.perf_counter() - t0:.0f} s", flush=True)


def gpu_shapes(caps, width, lanes) -> list:
    """Cube shapes worth timing for rows of `width` on a GPU: register-held rows of 2-16
    chunks a unit, and looped rows of 512 or 1024 units."""
    from rudnn.normalization import tuning
    chunks = -(-width // lanes)
    shapes = []
    for per_unit in (2, 4, 8, 16):
        for cube_units in (128, 256):
            s = tuning.choose_shape(caps, width, lanes, per_unit=per_unit, cube_units=cube_units)
            if s.cached and s.chunks <= 16 and s not in shapes:
                shapes.append(s)
    if width >= 8192:
        for bx in (512, 1024):
            for u in (2, 4):
                if bx * u <= chunks:
                    shapes.append(tuning.RowShape(bx, 1, u, lanes, False))
    return shapes


def cuda_sweep(torch, rt, op, x, g, b, xt, gt, bt, args) -> list:
    """Our op under each cube shape of gpu_shapes: [(shape, GB/s, rel err)]."""
    from rudnn.normalization import tuning
    width = x.shape[-1]
    lanes = tuning.vector_lanes(x.dtype.itemsize, width)
    want = torch_reference(torch, op, xt, gt, bt)
    moved = 2 * xt.numel() * x.dtype.itemsize
    out = []
    try:
        norm.deepen = lambda caps, s, w, c: s  # time each shape as listed
        for shape in gpu_shapes(rt.capabilities, width, lanes):
            norm.choose_shape = lambda caps, w, l, shape=shape: shape
            fn = ours(rt, op, x, g, b)
            err = rel_err(torch, torch.from_dlpack(fn()), want)
            t = device_time(kd_events(rt), fn, args.batch, max(3, args.reps // 2))
            out.append((shape, moved / t, err))
    finally:
        norm.choose_shape, norm.deepen = tuning.choose_shape, tuning.deepen
    rt.synchronize()
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
    p.add_argument("--batch", type=int, default=10, help="cuda: calls queued between two timing events")
    p.add_argument("--small", action="store_true", help="16 MiB inputs, W in {1024, 4096}: a quick check")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    p.add_argument("--no-baselines", action="store_true")
    p.add_argument("--sweep", action="store_true",
                   help="also time other cube shapes (cuda: gpu_shapes; cpu: choose_shape's knobs)")
    p.add_argument("--long-rows", action="store_true",
                   help="cuda: also time LayerNorm/RMSNorm under each long-row plan (tuning.long_row_plan) "
                        "where the rows are long enough for one")
    p.add_argument("--sweep-ops", default=None, help="ops the sweep covers (default: all of --ops)")
    p.add_argument("--compile-only", action="store_true",
                   help="cuda: only run each torch.compile baseline once (fills the compile caches, so a "
                        "timing run started later skips most compile time); times nothing")
    args = p.parse_args(argv)
    torch = _torch()
    runtimes = args.runtimes.split(",") if args.runtimes else default_runtimes(torch)
    widths = [int(w) for w in args.widths.split(",")] if args.widths else ([1024, 4096] if args.small else WIDTHS)
    mib = args.mib or (16 if args.small else 512)
    print(f"machine: {machine()}; torch {torch.__version__ if torch else 'not installed'}")
    rows_out = []
    for rt_name in runtimes:
        rt = kd.runtime(rt_name)
        if rt.capabilities.backend == "cuda":
            print(f"runtime {rt.name}: {rt.capabilities.device_name}; {mib:g} MiB inputs, median of {args.reps} "
                  f"batches of {args.batch}")
            if torch is None or not torch.cuda.is_available():
                raise SystemExit("the cuda benchmark needs a CUDA build of PyTorch (inputs and baselines)")
            if args.compile_only:
                warm_torch_compile(torch, args, widths, mib)
                continue
            rows = cuda_rows(torch, rt, args, widths, mib)
            print()
            print(table(rows, CUDA_HEADERS))
            continue
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
                    peak = copy_rate(host, args.reps)
                    print(f"  copy of {host.nbytes / 2**20:.0f} MiB ({peak[0]}): {peak[1] / 1e9:.1f} GB/s "
                          f"(the 'of copy' column)")
                for op in args.ops.split(","):
                    fn = ours(rt, op, x, g, b)

                    def run(fn=fn):
                        fn()
                        rt.synchronize()
                    base = []
                    if not args.no_baselines:
                        if dtype == "f32":
                            base.append(("numpy", numpy_baseline(op, host, gamma, beta)))
                        if torch is not None:
                            base += torch_baselines(torch, op, host, gamma, beta, dtype)
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
    if rows_out:
        print()
        print(table(rows_out, HEADERS))
    return 0


HEADERS = ["runtime", "op", "shape", "dtype", "ours ms", "ours GB/s", "of copy", "baseline", "base ms", "base GB/s", "speed-up"]

if __name__ == "__main__":
    sys.exit(main())
