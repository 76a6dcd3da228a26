"""rudnn.convolution next to the best baseline on this machine: forward, data gradient and
weight gradient, TFLOP/s counted as 2·B·Cout·O·(Cin/groups)·taps per pass.

    python -m benchmarks.convolution                         # GPU: cuDNN set; CPU: the 3x3 CPU case
    python -m benchmarks.convolution --quick                 # a smoke run (small batch, few shapes)
    python -m benchmarks.convolution --runtimes cuda --dtypes bf16 --passes forward
    python -m benchmarks.convolution --runtimes cpu --strategies Direct

CUDA runtime (the H200 set of the issue): the ResNet-50 3x3 convolutions (N 64, C = K =
64/128/256 at 56²/28²/14²), a 1x1 (C 256 -> K 1024 at 56²) and a depthwise 3x3 (C = K = 256
at 28²), bf16 and f32. Inputs are made by torch on the GPU and shared through DLPack. The
baseline is cuDNN with `torch.backends.cudnn.benchmark = True`: `F.conv2d` on channels_last
tensors for the forward pass (ours: `conv_forward_nhwc`), `aten.convolution_backward` for the
gradients (ours: `conv_data_backward` / `conv_weight_backward`, NCHW). Both sides are timed with
CUDA events (median of --reps); every result is checked against torch first (relative L2 error).
For F32 a second cuDNN column runs with TF32 off (`torch.backends.cudnn.allow_tf32 = False`):
cuDNN's default F32 rounds operands to TF32 on tensor cores, ours multiplies in full F32.

CPU runtimes: f32 3x3, N 8, C = K = 64, 56² (the issue's CPU case) next to torch CPU
(oneDNN) in NCHW and channels_last and numpy im2col + matmul (forward), torch's
conv2d_input (data backward) and conv2d_weight (weight backward); best wall time of --reps,
in --rounds rounds where the baselines and ours run in turn (best over the rounds, and the
range of the rounds' ratios), and the best process CPU time of each (all threads: the steadier
figure on a loaded machine); torch's OpenMP threads wait passively
(OMP_WAIT_POLICY=PASSIVE unless set) so that they do not spin on the cores our runtime needs. `--plans rows,units` times Direct's
two plans one after the other in one process (an A/B on a busy machine).
"ratio" is baseline time / ours (above 1: ours is faster).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import kerneldsl as kd
from rudnn.convolution import (ConvOptions, ConvStrategy, conv_data_backward, conv_forward,
                               conv_forward_nhwc, conv_weight_backward)

from .common import machine, median_device_time, median_torch_cuda_time, table

# name -> (N, C, K, H=W, kernel, stride, groups)
GPU_SHAPES = {
    "r50-3x3-64@56": (64, 64, 64, 56, 3, 1, 1),
    "r50-3x3-128@28": (64, 128, 128, 28, 3, 1, 1),
    "r50-3x3-256@14": (64, 256, 256, 14, 3, 1, 1),
    "1x1-256to1024@56": (64, 256, 1024, 56, 1, 1, 1),
    "dw-3x3-256@28": (64, 256, 256, 28, 3, 1, 256),
}
CPU_SHAPES = {"3x3-64@56": (8, 64, 64, 56, 3, 1, 1)}
PASSES = ("forward", "data", "weight")
TDTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _torch():
    # torch's OpenMP threads otherwise spin after each call and take the cores from the cpu
    # runtime's workers that run next (as in benchmarks/ctc.py)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch
        return torch
    except ImportError:
        return None


def options(shape) -> ConvOptions:
    _, _, _, _, R, s, g = shape
    return ConvOptions(stride=s, padding=R // 2, groups=g)


def flops(shape) -> float:
    N, C, K, H, R, s, g = shape
    O = (H + 2 * (R // 2) - R) // s + 1
    return 2.0 * N * K * O * O * (C // g) * R * R


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


# ------------------------------------------------------------------------------ GPU
def ieee_f32_time(torch, base, reps: int) -> float:
    """cuDNN's time for `base` with TF32 off: its default F32 convolution rounds the operands
    to TF32 (10-bit mantissas) on tensor cores; ours multiplies in full F32, so this is the
    baseline of the same precision (both columns are printed)."""
    keep = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        return median_torch_cuda_time(torch, base, reps)
    finally:
        torch.backends.cudnn.allow_tf32 = keep


def gpu_rows(args, torch, rt):
    F = torch.nn.functional
    torch.backends.cudnn.benchmark = True
    conv_bwd = torch.ops.aten.convolution_backward
    rows = []
    shapes = {k: v for k, v in GPU_SHAPES.items() if not args.shapes or k in args.shapes}
    for name, shape in shapes.items():
        N, C, K, H, R, s, g = shape
        if args.quick:
            N = 8
            shape = (N, *shape[1:])
        for dt in args.dtypes:
            tdt = getattr(torch, TDTYPES[dt])
            gen = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(N, C, H, H, device="cuda", generator=gen).to(tdt)
            w = (torch.randn(K, C // g, R, R, device="cuda", generator=gen) / (C // g * R * R) ** 0.5).to(tdt)
            opts = options(shape)
            stride, pad = (s, s), (R // 2, R // 2)
            y_ref = F.conv2d(x, w, None, stride, pad, 1, g)
            dy = torch.randn(y_ref.shape, device="cuda", generator=gen).to(tdt)
            x_cl, w_cl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
            x_nhwc, w_nhwc = x.permute(0, 2, 3, 1).contiguous(), w.permute(0, 2, 3, 1).contiguous()
            kx, kw, kdy = kd.from_dlpack(x), kd.from_dlpack(w), kd.from_dlpack(dy)
            kxl, kwl = kd.from_dlpack(x_nhwc), kd.from_dlpack(w_nhwc)
            for pss in args.passes:
                if pss == "forward":
                    base = lambda: F.conv2d(x_cl, w_cl, None, stride, pad, 1, g)  # noqa: E731
                    want = y_ref.permute(0, 2, 3, 1)
                    mine = lambda st: (lambda: conv_forward_nhwc(kxl, kwl, None, opts, st))  # noqa: E731
                elif pss == "data":
                    base = lambda: conv_bwd(dy, x, w, None, stride, pad, (1, 1), False, (0, 0), g,  # noqa: E731
                                            (True, False, False))[0]
                    want = base()
                    mine = lambda st: (lambda: conv_data_backward(kdy, kw, tuple(x.shape), opts, st))  # noqa: E731
                else:
                    base = lambda: conv_bwd(dy, x, w, None, stride, pad, (1, 1), False, (0, 0), g,  # noqa: E731
                                            (False, True, False))[1]
                    want = base()
                    mine = lambda st: (lambda: conv_weight_backward(kx, kdy, tuple(w.shape), opts, st))  # noqa: E731
                t_base = median_torch_cuda_time(torch, base, args.reps)
                t_ieee = ieee_f32_time(torch, base, args.reps) if dt == "f32" else None
                for st in args.strategies:
                    fn = mine(ConvStrategy[st])
                    err = rel_err(torch.from_dlpack(fn()).float().cpu(), want.float().cpu())
                    t = median_device_time(rt, fn, args.reps)
                    ieee = ("-", "-") if t_ieee is None else (f"{t_ieee * 1e3:.3f}", f"{t_ieee / t:.2f}x")
                    rows.append((name, f"N{N}", dt, pss, st, f"{t * 1e3:.3f}", f"{t_base * 1e3:.3f}",
                                 f"{t_base / t:.2f}x", *ieee, f"{flops(shape) / t / 1e12:.1f}", f"{err:.1e}"))
                    print(*rows[-1], flush=True)
    return rows


# ------------------------------------------------------------------------------ CPU
def im2col_conv(x, w, R, pad):
    """numpy baseline: unfold the padded input (3x3, stride 1) then one matmul."""
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.stack([xp[:, :, i:i + H, j:j + W] for i in range(R) for j in range(R)], 2)  # N, C, R*R, H, W
    return np.matmul(w.reshape(w.shape[0], -1), cols.reshape(N, C * R * R, H * W)).reshape(N, -1, H, W)


def best_wall_and_cpu(fn, reps: int) -> tuple:
    """(best wall time, best process CPU time over all threads) of `fn()` over `reps` runs after
    one warm-up, in seconds. On a shared machine a call's wall time moves with the load; its
    CPU time much less (both runtimes use every core when they have them), so the CPU-time
    ratio is the steadier figure where the load is high."""
    fn()
    wall = cpu = float("inf")
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu


def use_plan(plan):
    """Make Direct run `plan` ('rows' or 'units'; None: the device's own choice) from now on."""
    from kerneldsl import replay
    from rudnn.convolution import tuning
    if not hasattr(tuning, "_chosen_plan"):
        tuning._chosen_plan = tuning.direct_plan
    tuning.direct_plan = tuning._chosen_plan if plan is None else (lambda p, pass_name: plan)
    replay.clear()  # recorded calls hold the launches of the plan they ran


def cpu_rows(args, torch, rt):
    rows = []
    for name, shape in CPU_SHAPES.items():
        N, C, K, H, R, s, g = shape
        if args.quick:
            N, H = 2, 28
            shape = (N, C, K, H, R, s, g)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, H)).astype(np.float32)
        w = (rng.standard_normal((K, C, R, R)) / np.sqrt(C * R * R)).astype(np.float32)
        opts = options(shape)
        want = im2col_conv(x, w, R, R // 2)
        dy = rng.standard_normal(want.shape).astype(np.float32)
        kx, kw, kdy = rt.tensor(x), rt.tensor(w), rt.tensor(dy)
        kxl, kwl = rt.tensor(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), rt.tensor(np.ascontiguousarray(w.transpose(0, 2, 3, 1)))
        base = {"forward": {"numpy im2col": lambda: im2col_conv(x, w, R, R // 2)}, "data": {}, "weight": {}}
        want_dx = want_dw = None
        if torch is not None:
            tx, tw, tdy = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy)
            txl, twl = tx.to(memory_format=torch.channels_last), tw.to(memory_format=torch.channels_last)
            base["forward"]["torch NCHW"] = lambda: torch.nn.functional.conv2d(tx, tw, None, 1, R // 2)
            base["forward"]["torch NHWC"] = lambda: torch.nn.functional.conv2d(txl, twl, None, 1, R // 2)
            base["data"]["torch NCHW"] = lambda: torch.nn.grad.conv2d_input(tx.shape, tw, tdy, 1, R // 2)
            base["weight"]["torch NCHW"] = lambda: torch.nn.grad.conv2d_weight(tx, tw.shape, tdy, 1, R // 2)
            want_dx = base["data"]["torch NCHW"]().numpy()
            want_dw = base["weight"]["torch NCHW"]().numpy()
        base = {pss: b for pss, b in base.items() if pss in args.passes}
        cases = []
        for st in args.strategies:
            if "forward" in args.passes:
                cases += [("forward NCHW", st, lambda st=st: conv_forward(kx, kw, None, opts, ConvStrategy[st]),
                           lambda got: rel_err(got, want)),
                          ("forward NHWC", st, lambda st=st: conv_forward_nhwc(kxl, kwl, None, opts, ConvStrategy[st]),
                           lambda got: rel_err(got.transpose(0, 3, 1, 2), want))]
            if "data" in args.passes and want_dx is not None:
                cases.append(("data NCHW", st, lambda st=st: conv_data_backward(kdy, kw, x.shape, opts, ConvStrategy[st]),
                              lambda got: rel_err(got, want_dx)))
            if "weight" in args.passes and want_dw is not None:
                cases.append(("weight NCHW", st,
                              lambda st=st: conv_weight_backward(kx, kdy, w.shape, opts, ConvStrategy[st]),
                              lambda got: rel_err(got, want_dw)))
        errs = {}
        for plan in args.plans:
            use_plan(plan)
            for pss, st, fn, err_of in cases:
                errs[plan, pss, st] = err_of(fn().numpy())
        # rounds: every baseline, then every call of ours, in turn (the load of a shared machine
        # moves within seconds, so a ratio is only read within a round)
        base_t, ours_t = {}, {}
        for _ in range(args.rounds):
            for pss, b in base.items():
                for bname, f in b.items():
                    base_t.setdefault((pss, bname), []).append(best_wall_and_cpu(f, args.reps))
            for plan in args.plans:
                use_plan(plan)
                for pss, st, fn, _ in cases:
                    ours_t.setdefault((plan, pss, st), []).append(
                        best_wall_and_cpu(lambda: (fn(), rt.synchronize()), args.reps))
        for plan in args.plans:
            for pss, st, fn, _ in cases:
                t, tc = zip(*ours_t[plan, pss, st])
                label = st if plan is None else f"{st} ({plan})"
                for (bpss, bname), b_t in base_t.items():
                    if bpss != pss.split()[0]:
                        continue
                    tb, tbc = zip(*b_t)
                    ratios = [b / o for b, o in zip(tb, t)]
                    rows.append((f"{name} N{N}", rt.name, "f32", pss, label, f"{min(t) * 1e3:.2f}", bname,
                                 f"{min(tb) * 1e3:.2f}", f"{min(tb) / min(t):.2f}x",
                                 f"{min(ratios):.2f}-{max(ratios):.2f}x", f"{min(tc) * 1e3:.2f} / {min(tbc) * 1e3:.2f}",
                                 f"{min(tbc) / min(tc):.2f}x", f"{flops(shape) / min(t) / 1e9:.1f}",
                                 f"{errs[plan, pss, st]:.1e}"))
                    print(*rows[-1], flush=True)
        use_plan(None)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtimes", default=None, help="comma list (default: cuda with torch CUDA, else cpu)")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--passes", default=",".join(PASSES))
    ap.add_argument("--strategies", default="ImplicitGemm,Direct")
    ap.add_argument("--shapes", default="", help="comma list of GPU shape names (default: all)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3, help="CPU runtimes: rounds of baselines then ours, in turn "
                    "(best time over the rounds; the ratio column also gives each round's)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: small batch, 3 reps")
    ap.add_argument("--plans", default="", help="CPU runtimes: comma list of Direct plans to time one after the "
                    "other in this process (rows: the SIMD-lane plan, units: a unit per output position; "
                    "default: the device's own choice)")
    args = ap.parse_args(argv)
    args.dtypes, args.passes = args.dtypes.split(","), args.passes.split(",")
    args.strategies = args.strategies.split(",")
    args.shapes = [s for s in args.shapes.split(",") if s]
    args.plans = [p for p in args.plans.split(",") if p] or [None]
    if args.quick:
        args.reps = min(args.reps, 3)
    torch = _torch()
    gpu = torch is not None and torch.cuda.is_available() and "cuda" in kd.available_runtimes()
    runtimes = args.runtimes.split(",") if args.runtimes else (["cuda"] if gpu else ["cpu"])
    print(machine())
    for name in runtimes:
        rt = kd.runtime(name)
        print(f"runtime {rt.name}: {rt.capabilities.device_name}")
        if rt.capabilities.mma_native:
            if torch is None or not torch.cuda.is_available():
                raise SystemExit("the GPU set needs PyTorch with CUDA (the cuDNN baseline and DLPack inputs)")
            rows = gpu_rows(args, torch, rt)
            print(table(rows, ["shape", "batch", "dtype", "pass", "strategy", "ours ms", "cuDNN ms", "ratio",
                               "cuDNN no-TF32 ms", "ratio no-TF32", "TFLOP/s", "rel err"]))
        else:
            rows = cpu_rows(args, torch, rt)
            print(table(rows, ["shape", "runtime", "dtype", "pass", "strategy", "ours ms", "baseline", "base ms",
                               "ratio", "ratio by round", "CPU ms ours / base", "CPU ratio", "GFLOP/s", "rel err"]))


if __name__ == "__main__":
    main()
