"""Where the host time of one kernel launch goes, layer by layer, on one runtime (cuda by default).

    python -m benchmarks.host_probe                     # cuda: the H200 host
    python -m benchmarks.host_probe --runtime cpu --profile

An empty one-cube kernel (`empty[1, 1](x, 4)`) is launched through each layer of the launch
path in turn — the whole call, `Kernel.launch_with` (the plan lookup), the launch plan
(`LaunchPlan.launch`: grid and scalar checks), the runtime's launch of the binary
(`rt.launcher(binary, block)`: slot filling and the driver call; `rt.launch`, the general
form, for comparison) and, on cuda, `cuLaunchKernel` alone with the binary's filled
parameter block — then a few operators of
one, two and three launches. Each line is the best of --rounds rounds of --calls calls:
main-thread CPU time (`time.thread_time`, what the host spends) and wall time. On GPU
runtimes the loop only enqueues (the runtime is synchronised after each round, outside the
timing). --profile adds cProfile's top functions of the empty launch.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

import kerneldsl as kd
from rudnn import normalization as N

from .common import machine


@kd.kernel
def empty(x: kd.Tensor[kd.f32], n: kd.i32):
    """A kernel that does nothing: its launch is pure host overhead."""
    if n < 0:
        x[0] = 0.0


def per_call(rt, fn, calls: int, rounds: int) -> tuple:
    """(best thread µs, best wall µs) per call of `fn` over `rounds` rounds of `calls` calls."""
    for _ in range(min(calls, 200)):
        fn()
    rt.synchronize()
    best_cpu = best_wall = float("inf")
    for _ in range(rounds):
        c, w = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            fn()
        c, w = time.thread_time() - c, time.perf_counter() - w
        rt.synchronize()
        best_cpu, best_wall = min(best_cpu, c), min(best_wall, w)
    return best_cpu / calls * 1e6, best_wall / calls * 1e6


def layers(rt, x) -> dict:
    """The empty launch through each layer of the launch path."""
    empty[1, 1](x, 4)
    rt.synchronize()
    (plan,) = [p for p in empty._plans.values() if p.runtime is rt]
    grid, args, run_args = (1, 1, 1), (x, 4), (x, 4)
    run = rt.launcher(plan.binary, plan.block)
    out = {
        "empty[1, 1](x, 4)": lambda: empty[1, 1](x, 4),
        "Kernel.launch_with": lambda: empty.launch_with(1, 1, args),
        "LaunchPlan.launch": lambda: plan.launch(1, args),
        "rt.launcher(binary, block)": lambda: run(grid, run_args),
        "rt.launch": lambda: rt.launch(plan.binary, grid, plan.block, run_args),
    }
    if rt.kind == "cuda":
        from kerneldsl.backends.cuda import runtime as cuda_rt
        driver, b = cuda_rt._driver(), plan.binary
        stream = rt.current_stream()
        out["cuLaunchKernel alone"] = lambda: driver.cuLaunchKernel(b.function, 1, 1, 1, *plan.block,
                                                                    b.dynamic_shared, stream.cu, b.params_ptr, 0)
    return out


def operators(rt) -> dict:
    rng = np.random.default_rng(0)
    X, G, B, DY = (rt.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 64), (64,), (64,), (4, 64)))
    _, mean, rstd = N.layer_norm_with_stats(X, G, B)
    return {
        "softmax_last_axis [4, 64]": lambda: N.softmax_last_axis(X),
        "layer_norm [4, 64]": lambda: N.layer_norm(X, G, B),
        "layer_norm_backward [4, 64]": lambda: N.layer_norm_backward(X, G, DY, mean, rstd),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", default="cuda")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="cProfile of the empty launch (top 25 by own time)")
    a = ap.parse_args(argv)
    rt = kd.runtime(a.runtime)
    x = rt.zeros((16,), "f32")
    print(f"# host time per call on {rt.name} ({machine()}); best of {a.rounds} rounds of {a.calls} calls")
    print(f"{'what':34s} {'thread µs':>10s} {'wall µs':>10s}")
    for name, fn in list(layers(rt, x).items()) + list(operators(rt).items()):
        cpu, wall = per_call(rt, fn, a.calls, a.rounds)
        print(f"{name:34s} {cpu:10.2f} {wall:10.2f}", flush=True)
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.calls):
            empty[1, 1](x, 4)
        prof.disable()
        rt.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
