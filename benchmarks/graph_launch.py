"""Host time of cuda launches as CUDA graph launches against `cuLaunchKernel`, in one process.

    python -m benchmarks.graph_launch                  # the H200 host: the table of RESULTS.md, session 29
    python -m benchmarks.graph_launch --rounds 5 --calls 20000

The cuda runtime launches a binary's second and later launches as graph launches
(backends/cuda/graphs.py). This times the same calls both ways in alternating rounds (the
runtime's `_graph_run` set or cleared, replay records and launch plans dropped between rounds
so each round makes its own), so host drift hits both columns alike:
- the driver call alone, both ways (`cuLaunchKernel`, and the native `graph_run` of a one-node
  graph whose arguments did not move);
- an empty kernel through `rt.launcher(binary, block)` and through `empty[1, 1](x, 4)`;
- host_overhead.py's normalization, gated delta, MoE and paged-attention calls.

Each figure is the best round's µs a call (the worst in brackets). The loop only enqueues; the
runtime is synchronised after each round, outside the timing.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import kerneldsl as kd
from kerneldsl import replay
from rudnn import normalization as N

from . import host_overhead as H
from .common import machine
from .host_probe import empty


def _per_call(rt, fn, calls: int) -> float:
    for _ in range(min(calls, 200)):
        fn()
    rt.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    took = time.perf_counter() - start
    rt.synchronize()
    return took / calls * 1e6


def _cases(rt, x, plan) -> dict:
    """The calls timed each round (made again per round: launchers and plans hold their graphs)."""
    run = rt.launcher(plan.binary, plan.block)
    rng = np.random.default_rng(0)
    X, G, B, DY = (rt.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 64), (64,), (64,), (4, 64)))
    _, mean, rstd = N.layer_norm_with_stats(X, G, B)
    cases = {"rt.launcher(binary, block)": lambda: run((1, 1, 1), (x, 4)),
             "empty[1, 1](x, 4)": lambda: empty[1, 1](x, 4),
             "softmax_last_axis": lambda: N.softmax_last_axis(X),
             "layer_norm": lambda: N.layer_norm(X, G, B),
             "layer_norm_backward": lambda: N.layer_norm_backward(X, G, DY, mean, rstd)}
    inputs = H.Inputs(rt, None)
    for family in (H._gated_delta, H._moe, H._paged_attention):
        cases.update({name: call for name, (call, _) in family(inputs).items()})
    return cases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds each way")
    a = ap.parse_args(argv)
    if "cuda" not in kd.available_runtimes():
        raise SystemExit("graph_launch times the cuda runtime: no CUDA driver and device here")
    rt = kd.runtime("cuda")
    graph_run = rt._graph_run
    if graph_run is None:
        raise SystemExit("this driver (or $KERNELDSL_CUDA_GRAPHS=0) gives no graph launches: nothing to compare")
    from kerneldsl.backends.cuda import graphs
    from kerneldsl.backends.cuda import runtime as cuda_rt

    x = rt.tensor(np.zeros(4, np.float32))
    empty[1, 1](x, 4)
    rt.synchronize()
    (plan,) = [p for p in empty._plans.values() if p.runtime is rt]
    b, driver, stream = plan.binary, cuda_rt._driver(), rt.current_stream()
    one = graphs.KernelGraph(driver, graph_run, [(b.function, (1, 1, 1), plan.block, b.dynamic_shared, b.params_ptr,
                                                  b.slots)])
    for _ in range(graphs.BUILD_AT):
        one.launch(stream.handle)
    rt.synchronize()
    driver_calls = {
        "driver call alone": {
            "graphs": lambda: one.launch(stream.handle),
            "launches": lambda: driver.cuLaunchKernel(b.function, 1, 1, 1, *plan.block, b.dynamic_shared, stream.cu,
                                                      b.params_ptr, 0)}}
    results: dict = {}
    for _ in range(a.rounds):
        for way in ("graphs", "launches"):
            rt._graph_run = graph_run if way == "graphs" else None
            replay.clear()
            empty._plans.clear()
            timed = {name: calls[way] for name, calls in driver_calls.items()}
            timed.update(_cases(rt, x, plan))
            for name, fn in timed.items():
                results.setdefault(name, {}).setdefault(way, []).append(_per_call(rt, fn, a.calls))
    rt._graph_run = graph_run
    print(f"# host µs a call on cuda, graph launches against cuLaunchKernel ({machine()}); best of {a.rounds} "
          f"rounds of {a.calls} calls each way (worst)")
    print(f"{'call':32s} {'graphs':>16s} {'cuLaunchKernel':>16s}")
    for name, ways in results.items():
        print(f"{name:32s} " + " ".join(f"{min(ways[w]):7.2f} ({max(ways[w]):5.2f})" for w in ("graphs", "launches")))


if __name__ == "__main__":
    main()
