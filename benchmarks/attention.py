"""rudnn.attention next to PyTorch's scaled_dot_product_attention, on the runtimes this machine has.

    python -m benchmarks.attention [--small] [--reps N] [--runtimes cpu,cuda] [--tilings] [--kernels]
                                   [--rounds N] [--interleave SECONDS]

cuda (when a device and torch with CUDA exist): bf16, B·S = 16k tokens, H·D = 2048,
D in {64, 128}, S in {1024, 4096}, causal and not. FlashBlackboxAccelerated (its default
tiling; `--tilings` adds a sweep of BlackboxAcceleratedStrategy tilings; `--kernels` adds
the group kernel (flash_group, tiling 4,1,1) and the roles kernel (flash_roles, tiling
12,1,1, where the device has bulk copies; as chosen, and with ping-pong forced on and off)
side by side) next to torch's sdpa with the cuDNN
and FLASH backends. Inputs are made by torch on the device and shared through DLPack; times
are medians of event-timed repetitions; with `--rounds N` every contender of a shape is
timed in turn N times and the table gives the medians of the rounds and, in "x cuDNN
range", the lowest and highest per-round ratio.

cpu: f32, B 1, H 16, S 2048, D 64, causal and not. FlashUnit and Fallback next to torch's
CPU sdpa and a numpy batched-matmul reference (BLAS on every core); times are best of N
wall-clock runs, or with `--interleave S` the best seen while running every contender in
turn for S seconds (on a shared machine each then gets the quiet moments).

FLOPs are 4·B·H·Sq·Skv·D (two matrix products), halved for causal. "peak" is this
machine's measured dense matmul rate (torch bf16 GEMM on the GPU, numpy f32 GEMM on the
CPU), so "% peak" says how far attention is from what the hardware does on plain GEMMs.
Every row also checks the result against the baseline (max abs difference).
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

import kerneldsl as kd
from rudnn.attention import AttentionModuleOptions, AttentionStrategy, BlackboxAcceleratedStrategy, attention

from .common import best_time, machine, median_device_time, median_torch_cuda_time, table

S = AttentionStrategy
# (n, 1, k) with n a multiple of 4 run the group kernel where group products are native
# (wgmma), except (8, 1, k) and (12, 1, 1), which run the roles kernel where the device also has
# bulk copies (one or two consumer groups and a producer; 64·k or 128 keys a step); the
# others the register kernel
TILINGS = [BlackboxAcceleratedStrategy(8, 1, 1), BlackboxAcceleratedStrategy(4, 1, 1),
           BlackboxAcceleratedStrategy(4, 1, 2), BlackboxAcceleratedStrategy(4, 2, 2),
           BlackboxAcceleratedStrategy(8, 2, 1), BlackboxAcceleratedStrategy(12, 1, 1),
           BlackboxAcceleratedStrategy(8, 1, 2)]
# --kernels: the kernels compared side by side (what the tiling runs where the device has
# bulk copies and native group products)
KERNELS = [("  group kernel 4,1,1", BlackboxAcceleratedStrategy(4, 1, 1)),
           ("  roles kernel 12,1,1", BlackboxAcceleratedStrategy(12, 1, 1)),
           ("  roles 12,1,1 ping-pong", ("roles", True)),
           ("  roles 12,1,1 no ping-pong", ("roles", False))]


def roles_variant(q, k, v, opts, pingpong: bool):
    """The roles kernel (tiling 12,1,1) with ping-pong on or off, past the public API's choice;
    refuses (AttentionSetupError) where the kernel does not serve these inputs."""
    from rudnn.attention import flash_roles, problem
    p = problem.validate(q, k, v, None, None, opts)
    tiling = BlackboxAcceleratedStrategy(12, 1, 1)
    if not flash_roles.usable(p, tiling):
        raise problem.AttentionSetupError("the roles kernel does not serve these inputs here")
    out = p.runtime.empty(p.out_shape, p.dtype)
    flash_roles.run(p, out, *_dummies(p.runtime), tiling, pingpong=pingpong)
    return out


_DUMMIES: dict = {}


def _dummies(rt):
    """The stand-ins for an absent mask and bias, made once per runtime (not in the timed calls)."""
    if rt.name not in _DUMMIES:
        _DUMMIES[rt.name] = (rt.zeros((1, 1, 1, 1), "bool"), rt.zeros((1, 1, 1, 1), "f32"))
    return _DUMMIES[rt.name]


def flops(B, H, Sq, Skv, D, causal):
    f = 4.0 * B * H * Sq * Skv * D
    return f / 2 if causal else f


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


# ------------------------------------------------------------------ cpu
def numpy_attention(q, k, v, causal):
    """Batched-matmul reference in f32 (BLAS does the products)."""
    s = np.matmul(q, k.transpose(0, 1, 3, 2)) * np.float32(1 / math.sqrt(q.shape[-1]))
    if causal:
        sq, skv = s.shape[-2:]
        s[..., np.arange(skv)[None, :] > np.arange(sq)[:, None] + (skv - sq)] = -np.inf
    s -= s.max(-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(-1, keepdims=True)
    return np.matmul(s, v)


def cpu_peak(reps, torch=None):
    """The best f32 GEMM rate here (numpy's BLAS, or torch's when faster), best of many runs."""
    n = 2048
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    best = best_time(lambda: a @ a, max(reps, 10))
    if torch is not None:
        ta = torch.from_numpy(a)
        best = min(best, best_time(lambda: ta @ ta, max(reps, 10)))
    return 2 * n ** 3 / best


def measure(fns: dict, reps: int, interleave: float) -> dict:
    """Best time of each function: best of `reps` runs each, or, with `interleave` seconds,
    the best seen while running them in turn for that long (fairer on a shared machine:
    every function gets the quiet moments)."""
    if interleave <= 0:
        return {key: best_time(fn, reps) for key, fn in fns.items()}
    for fn in fns.values():
        fn()
    best = {key: float("inf") for key in fns}
    end = time.perf_counter() + interleave
    while time.perf_counter() < end:
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[key] = min(best[key], time.perf_counter() - t0)
    return best


def bench_cpu(rt, small, reps, interleave=0.0):
    torch = torch_or_none()
    B, H, Sq, D = (1, 4, 512, 64) if small else (1, 16, 2048, 64)
    rng = np.random.default_rng(0)
    qn, kn, vn = (rng.standard_normal((B, H, Sq, D)).astype(np.float32) for _ in range(3))
    q, k, v = rt.tensor(qn), rt.tensor(kn), rt.tensor(vn)
    peak = cpu_peak(reps, torch)
    ours = (S.FlashUnit, S.Fallback)
    fns = {}
    for causal in (False, True):
        opts = AttentionModuleOptions(is_causal=causal)
        fns[("numpy", causal)] = lambda c=causal: numpy_attention(qn, kn, vn, c)
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(x) for x in (qn, kn, vn))
            sdpa = torch.nn.functional.scaled_dot_product_attention
            fns[("torch", causal)] = lambda c=causal: sdpa(tq, tk, tv, is_causal=c)
        for strategy in ours:
            fns[(strategy, causal)] = lambda o=opts, st=strategy: attention(q, k, v, options=o, strategy=st)
    times = measure(fns, reps, interleave)
    rows = []
    for causal in (False, True):
        f = flops(B, H, Sq, Sq, D, causal)
        want = numpy_attention(qn, kn, vn, causal)
        t_np, t_th = times[("numpy", causal)], times.get(("torch", causal))
        for strategy in ours:
            t = times[(strategy, causal)]
            err = float(np.abs(fns[(strategy, causal)]().numpy() - want).max())
            rows.append((f"[{B},{H},{Sq},{D}]", "f32", "causal" if causal else "full", strategy.name,
                         f"{t * 1e3:.1f}", f"{t_th * 1e3:.1f}" if t_th else "-", f"{t_np * 1e3:.1f}",
                         f"{t_th / t:.2f}" if t_th else "-", f"{t_np / t:.2f}", f"{f / t / 1e9:.1f}",
                         f"{f / t / peak:.0%}", f"{err:.1e}"))
    how = f"best of {interleave:.0f} s of interleaved runs" if interleave > 0 else f"best of {reps}"
    print(f"\ncpu runtime: {rt.capabilities.device_name}; {machine()}; torch threads: "
          f"{torch.get_num_threads() if torch else '-'}; measured f32 GEMM peak {peak / 1e9:.0f} GFLOP/s; {how}")
    print(table(rows, ["shape [B,H,S,D]", "dtype", "mask", "ours", "ours ms", "torch sdpa ms", "numpy ms",
                       "x torch", "x numpy", "GFLOP/s", "% peak", "max err"]))


# ------------------------------------------------------------------ cuda
time_events = median_device_time
time_torch = median_torch_cuda_time



def _time_sdpa(torch, sdpa_kernel, backend, sdpa, qkv, causal, reps):
    """Median time of torch's sdpa on one backend (selected once, outside the timed calls)."""
    with sdpa_kernel([backend]):
        return time_torch(torch, lambda: sdpa(*qkv, is_causal=causal), reps)


def gpu_peak(torch, reps):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return 2 * n ** 3 / time_torch(torch, lambda: a @ a, reps)


def bench_cuda(rt, small, reps, sweep, kernels=False, rounds=1):
    torch = torch_or_none()
    if torch is None or not torch.cuda.is_available():
        print("\ncuda runtime present but torch has no CUDA: skipping the GPU table")
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    peak = gpu_peak(torch, reps)
    tokens = 4096 if small else 16384
    configs = [(d, s) for d in ((128,) if small else (64, 128)) for s in ((1024,) if small else (1024, 4096))]
    rows = []
    for D, Sq in configs:
        H, B = 2048 // D, tokens // Sq
        tq, tk, tv = (torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        torch.cuda.synchronize()  # kerneldsl runs on its own stream: the inputs must be ready
        q, k, v = kd.from_dlpack(tq), kd.from_dlpack(tk), kd.from_dlpack(tv)
        for causal in (False, True):
            f = flops(B, H, Sq, Sq, D, causal)
            fns = {}
            for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FLASH", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel([backend]):
                        sdpa(tq, tk, tv, is_causal=causal)
                    fns[name] = lambda b=backend, c=causal: _time_sdpa(torch, sdpa_kernel, b, sdpa, (tq, tk, tv), c,
                                                                       reps)
                except RuntimeError as e:  # backend not built or not supported for this shape
                    print(f"  torch {name} unavailable for D={D}, S={Sq}: {str(e).splitlines()[0]}")
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]):
                want = sdpa(tq, tk, tv, is_causal=causal).float()
            opts = AttentionModuleOptions(is_causal=causal)
            ours = [("FlashBlackboxAccelerated", S.FlashBlackboxAccelerated)]
            if kernels:
                ours += KERNELS
            if sweep:
                ours += [(f"  tiling {t.num_planes},{t.seq_q},{t.seq_kv}", t) for t in TILINGS]
            errs = {}
            for label, strategy in ours:
                if isinstance(strategy, tuple):  # a roles kernel variant
                    call = lambda o=opts, pp=strategy[1]: roles_variant(q, k, v, o, pp)
                else:
                    call = lambda o=opts, st=strategy: attention(q, k, v, options=o, strategy=st)
                try:
                    result = call()
                except Exception as e:  # noqa: BLE001  (a tiling too large for this device: say so, go on)
                    print(f"  {label} D={D} S={Sq}: {type(e).__name__}: {str(e).splitlines()[0]}")
                    continue
                rt.synchronize()  # before torch reads it on its own stream
                errs[label] = (torch.from_dlpack(result).float() - want).abs().max().item()
                fns[label] = lambda fn=call: time_events(rt, fn, reps)
            times = {key: [] for key in fns}
            for _ in range(rounds):  # every contender in turn, each round
                for key, timer in fns.items():
                    times[key].append(timer())
            cus = times.get("cuDNN")
            cu = statistics.median(cus) if cus else None
            fl = statistics.median(times["FLASH"]) if "FLASH" in times else None
            for label, _ in ours:
                if label not in errs:
                    continue
                t = statistics.median(times[label])
                ratios = [c / x for c, x in zip(cus, times[label])] if cus else []
                rows.append((f"[{B},{H},{Sq},{D}]", "bf16", "causal" if causal else "full", label,
                             f"{t * 1e3:.3f}", f"{cu * 1e3:.3f}" if cu else "-", f"{fl * 1e3:.3f}" if fl else "-",
                             f"{cu / t:.2f}" if cu else "-",
                             f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-",
                             f"{fl / t:.2f}" if fl else "-",
                             f"{f / t / 1e12:.0f}", f"{f / t / peak:.0%}", f"{errs[label]:.1e}"))
    print(f"\ncuda runtime: {rt.capabilities.device_name}; torch {torch.__version__}; measured bf16 GEMM peak "
          f"{peak / 1e12:.0f} TFLOP/s; medians of {reps}" + (f", {rounds} rounds in turn" if rounds > 1 else ""))
    print(table(rows, ["shape [B,H,S,D]", "dtype", "mask", "ours", "ours ms", "cuDNN ms", "FLASH ms",
                       "x cuDNN", "x cuDNN range", "x FLASH", "TFLOP/s", "% peak", "max err"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="small shapes: a quick check that everything runs")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--runtimes", default=None, help="comma-separated subset of the available runtimes")
    ap.add_argument("--tilings", action="store_true", help="also sweep BlackboxAcceleratedStrategy tilings (cuda)")
    ap.add_argument("--kernels", action="store_true",
                    help="cuda: also time the group kernel (4,1,1) and the roles kernel (12,1,1) side by side")
    ap.add_argument("--rounds", type=int, default=1,
                    help="cuda: time every contender of a shape in turn this many times (medians and ranges)")
    ap.add_argument("--interleave", type=float, default=0.0, metavar="SECONDS",
                    help="cpu: run ours and the baselines in turn for this long and keep each one's best "
                         "(fairer than best-of-N on a shared machine)")
    args = ap.parse_args(argv)
    avail = kd.available_runtimes()
    names = [n.strip() for n in args.runtimes.split(",")] if args.runtimes else avail
    t0 = time.perf_counter()
    for name in names:
        if name.split(":")[0] not in avail:
            print(f"{name}: not available here ({avail})")
        elif name.startswith("cuda"):
            bench_cuda(kd.runtime(name), args.small, args.reps, args.tilings, args.kernels, max(args.rounds, 1))
        elif name.startswith("cpu"):
            bench_cpu(kd.runtime(name), args.small, args.reps, args.interleave)
        else:
            print(f"\n{name}: no attention table for this runtime (the cpu and cuda tables cover the targets)")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
