"""rudnn.moe routing on one runtime: where a call's time goes (host work vs the kernel).

    python -m benchmarks.moe_routing [--runtime cuda] [--tokens 16384] [--reps 50]

DeepSeek-V3 grouped sigmoid routing (E 256, 8 groups, keep 4, top-8, bias, renormalise)
and softmax top-8, f32. For each: the whole `route_*` call timed as benchmarks/moe.py
does (events around one call, median: host work before the launch counts), the host part
alone (wall time of calls without waiting), the kernel alone (the device's own record via
torch's profiler where torch has CUDA, else events around back-to-back calls), and the
one-cube-per-token kernels for comparison. Ids and weights are checked against float64
numpy on fresh inputs, and every output element is checked written.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import kerneldsl as kd
from rudnn import moe
from rudnn.moe import routing as rmod
from rudnn.moe import routing_kernels as rk

from .common import machine, median_device_time, table
from .moe import numpy_grouped_route, numpy_softmax_route

E, G, SG, K, SCALE = 256, 8, 4, 8, 2.5


def host_time(rt, fn, reps):
    """Mean wall time of a call that does not wait for the device (launch overhead)."""
    fn()
    rt.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
        rt.synchronize()
    return best


def back_to_back(rt, fn, reps):
    """Event time of `reps` calls in a row, per call (host-bound when the launch is slower)."""
    fn()
    rt.synchronize()
    if not hasattr(rt, "record_event"):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        rt.synchronize()
        return (time.perf_counter() - t0) / reps
    start = rt.record_event()
    for _ in range(reps):
        fn()
    end = rt.record_event()
    return rt.elapsed_ms(start, end) / 1e3 / reps


def profiled_kernel_times(fns, reps):
    """Median device duration of each fn's kernels (CUPTI through torch.profiler), or None."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
        if not torch.cuda.is_available():
            return None
        torch.cuda.init()
    except Exception:  # noqa: BLE001  (no torch with CUDA: the caller falls back to events)
        return None
    out = []
    for fn in fns:
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
        durs = [e.device_time for e in prof.events() if e.device_time > 0 and "kd_" in e.name]
        out.append(statistics.median(durs) / 1e6 if durs else None)
    return out


def check(name, plan, ids_ref, w_ref, T):
    ids, w = plan.expert_indices().numpy(), plan.weights().numpy().astype(np.float64)
    written = bool((ids < E).all() and np.isfinite(w).all())
    agree = float((ids == ids_ref).all(1).mean())
    rel = float(np.linalg.norm(w - w_ref) / np.linalg.norm(w_ref))
    return f"{name}: ids agree {agree:.2%}, weights rel err {rel:.1e}, all written {written}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", default="cuda")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args(argv)
    rt = kd.runtime(args.runtime)
    T = args.tokens
    print(f"machine: {machine()}; {rt.name}: {rt.capabilities.device_name}")
    rng = np.random.default_rng()
    logits = rng.standard_normal((T, E)).astype(np.float32)
    bias = (rng.standard_normal(E) * 0.1).astype(np.float32)
    lt, bt = rt.tensor(logits), rt.tensor(bias)
    gopts, sopts = moe.GroupRoutingOptions(K, G, SG, True, True, SCALE), moe.RoutingOptions(K, True)
    gi, gw = numpy_grouped_route(logits.astype(np.float64), bias.astype(np.float64), K, G, SG, SCALE)
    si, sw = numpy_softmax_route(logits.astype(np.float64), K)
    print(check("grouped", moe.route_sigmoid_grouped(lt, bt, gopts), gi, gw, T))
    print(check("softmax", moe.route(lt, sopts), si, sw, T))

    ids, wts, probs = rt.empty((T, K), kd.u32), rt.empty((T, K), kd.f32), rt.empty((T, K), kd.f32)
    units = rmod.routing_units(E)
    for name, plan, cube in (("grouped", moe.route_sigmoid_grouped(lt, bt, gopts),
                              lambda: rk.sigmoid_grouped_topk[T, units](lt, bt, ids, wts, G, SG, SCALE, True, True,
                                                                        True, E)),
                             ("softmax", moe.route(lt, sopts),
                              lambda: rk.softmax_topk[T, units](lt, ids, wts, probs, True, E))):
        cube()
        same = (plan.expert_indices().numpy() == ids.numpy()).all()
        diff = np.abs(plan.weights().numpy() - wts.numpy()).max()
        print(f"{name}: route() ids equal the cube-per-token kernel's: {same}; max weight difference {diff:.1e}")
    calls = {"route_sigmoid_grouped": lambda: moe.route_sigmoid_grouped(lt, bt, gopts),
             "route softmax": lambda: moe.route(lt, sopts),
             "grouped, cube per token (old kernel)":
                 lambda: rk.sigmoid_grouped_topk[T, units](lt, bt, ids, wts, G, SG, SCALE, True, True, True, E),
             "softmax, cube per token (old kernel)": lambda: rk.softmax_topk[T, units](lt, ids, wts, probs, True, E)}
    for planes in (2, 8):
        def fn(planes=planes):
            saved = rmod.PLANES_PER_CUBE
            rmod.PLANES_PER_CUBE = planes
            moe.route_sigmoid_grouped(lt, bt, gopts)
            rmod.PLANES_PER_CUBE = saved
        calls[f"route_sigmoid_grouped, {planes} planes/cube"] = fn
    kernel = profiled_kernel_times(list(calls.values()), args.reps) if hasattr(rt, "record_event") else None
    rows = []
    for i, (what, fn) in enumerate(calls.items()):
        call = median_device_time(rt, fn, args.reps)
        host = host_time(rt, fn, args.reps)
        b2b = back_to_back(rt, fn, args.reps)
        k = kernel[i] if kernel else None
        rows.append([what, f"T {T}, E {E}", f"{call * 1e3:.4f}", f"{host * 1e3:.4f}", f"{b2b * 1e3:.4f}",
                     "-" if k is None else f"{k * 1e3:.4f}", f"{T / call / 1e6:.0f} Mtok/s"])
    print(table(rows, ["what", "shape", "call ms (events)", "host ms", "back-to-back ms", "kernel ms (CUPTI)",
                       "call rate"]))


if __name__ == "__main__":
    main()
