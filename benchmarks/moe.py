"""rudnn.moe next to the plain framework equivalent, on every runtime this machine has.

    python -m benchmarks.moe [--small] [--runtimes cpu,cuda] [--reps 15]

Routing: grouped sigmoid (DeepSeek-V3: T 16384, E 256, 8 groups, 4 kept, top-8, bias) and
softmax top-8, against the sigmoid/softmax + topk chain in PyTorch on a GPU, in numpy on
the CPU. Experts (SwiGLU, two grouped GEMMs): on cuda bf16, E 32, 512 rows per expert,
H 7168, I 2048, TensorCore against torch._grouped_mm (per-expert matmuls where it is
missing); on the cpu f32 Scalar against numpy (OpenBLAS) per-expert matmuls, at a smaller
size (E 8, 256 rows, H 2048, I 1024) because the full one takes minutes there.
CPU times are the best of --reps runs, interleaved with the baseline's (the machine may be
shared); GPU times are medians of event-timed runs. Ratios > 1 mean rudnn is faster.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import kerneldsl as kd
from rudnn import moe

from .common import machine, median_device_time, median_torch_cuda_time, table

HEADERS = ["what", "shape", "dtype", "runtime", "rudnn ms", "baseline ms", "baseline", "speed ratio", "rudnn rate",
           "baseline rate"]


# ---------------------------------------------------------------------- timing
def timer(rt, reps):
    """fn -> seconds: CUDA events (median) on a GPU runtime, best wall time elsewhere."""
    return lambda fn: median_device_time(rt, fn, reps)


def interleaved_best(fns, reps):
    """Best wall time of each fn, their runs interleaved so that load from other users of a
    shared machine falls on all of them alike."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def torch_timer(torch, reps):
    return lambda fn: median_torch_cuda_time(torch, fn, reps)


# ---------------------------------------------------------------------- numpy baselines
def numpy_grouped_route(logits, bias, k, groups, kept, scale):
    """DeepSeek-V3 grouped routing in vectorised numpy (sigmoid, top-2 group scores, top-k)."""
    s = 1.0 / (1.0 + np.exp(-logits))
    c = s + bias
    T, E = c.shape
    cg = c.reshape(T, groups, E // groups)
    top2 = np.partition(cg, -2, axis=2)[:, :, -2:].sum(2)
    gidx = np.argpartition(-top2, kept - 1, axis=1)[:, :kept]
    mask = np.zeros((T, groups), bool)
    np.put_along_axis(mask, gidx, True, axis=1)
    masked = np.where(np.repeat(mask, E // groups, axis=1), c, -np.inf)
    idx = np.argpartition(-masked, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(masked, idx, 1), axis=1)
    idx = np.take_along_axis(idx, order, 1)
    w = np.take_along_axis(s, idx, 1)
    return idx, w / w.sum(1, keepdims=True) * scale


def numpy_softmax_route(logits, k):
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    idx = np.argpartition(-p, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(p, idx, 1), axis=1)
    idx = np.take_along_axis(idx, order, 1)
    w = np.take_along_axis(p, idx, 1)
    return idx, w / w.sum(1, keepdims=True)


def numpy_experts(x, counts, gate, up, down):
    out = np.empty((x.shape[0], down.shape[1]), x.dtype)
    start = 0
    for e, c in enumerate(counts):
        xe = x[start:start + c]
        g = xe @ gate[e].T
        h = g / (1 + np.exp(-g)) * (xe @ up[e].T)
        out[start:start + c] = h @ down[e].T
        start += c
    return out


# ---------------------------------------------------------------------- torch (GPU) baselines
def torch_grouped_route(torch, logits, bias, k, groups, kept, scale):
    s = torch.sigmoid(logits)
    c = s + bias
    T, E = c.shape
    gscore = c.view(T, groups, -1).topk(2, dim=-1)[0].sum(-1)
    gidx = gscore.topk(kept, dim=-1)[1]
    mask = torch.zeros_like(gscore).scatter_(1, gidx, 1.0)
    mask = mask.unsqueeze(-1).expand(T, groups, E // groups).reshape(T, E)
    idx = c.masked_fill(mask == 0, float("-inf")).topk(k, dim=-1)[1]
    w = s.gather(1, idx)
    return idx, w / w.sum(-1, keepdim=True) * scale


def torch_experts_fn(torch, x, counts, gate, up, down):
    """The fastest plain-PyTorch SwiGLU experts available: torch._grouped_mm, else a loop."""
    F = torch.nn.functional
    I = gate.shape[1]
    gate_up = torch.cat([gate, up], dim=1)                                    # [E, 2I, H]
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device=x.device)
    if hasattr(torch, "_grouped_mm"):
        def grouped():
            gu = torch._grouped_mm(x, gate_up.transpose(-2, -1), offs=offs)
            h = F.silu(gu[:, :I]) * gu[:, I:]
            return torch._grouped_mm(h, down.transpose(-2, -1), offs=offs)
        try:
            grouped()
            return grouped, "torch._grouped_mm"
        except Exception as e:  # noqa: BLE001  (an older GPU or build: fall back, and say so)
            print(f"torch._grouped_mm unavailable here ({type(e).__name__}: {str(e).splitlines()[0]}); "
                  f"using per-expert matmuls")
    bounds = np.concatenate([[0], np.cumsum(counts)])

    def looped():
        out = torch.empty(x.shape[0], down.shape[1], dtype=x.dtype, device=x.device)
        for e in range(len(counts)):
            xe = x[bounds[e]:bounds[e + 1]]
            gu = xe @ gate_up[e].T
            out[bounds[e]:bounds[e + 1]] = (F.silu(gu[:, :I]) * gu[:, I:]) @ down[e].T
        return out
    return looped, "torch matmul per expert"


# ---------------------------------------------------------------------- cases
def balanced_plan(rt, experts, rows_per_expert, top_k):
    """A routing plan sending exactly rows_per_expert rows to every expert (weights 1/top_k)."""
    T = experts * rows_per_expert // top_k
    ids = ((np.arange(T)[:, None] * top_k + np.arange(top_k)[None, :]) % experts).astype(np.uint32)
    return moe.RoutingPlan(rt.tensor(ids), rt.tensor(np.full((T, top_k), 1.0 / top_k, np.float32)), experts), T


def routing_rows(rt, args, run):
    rows = []
    T, E, G, SG, K = (2048 if args.small else 16384), 256, 8, 4, 8
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((T, E)).astype(np.float32)
    bias = (rng.standard_normal(E) * 0.1).astype(np.float32)
    opts = moe.GroupRoutingOptions(K, G, SG, True, True, 2.5)
    lt, bt = rt.tensor(logits), rt.tensor(bias)
    ours = (lambda: (moe.route_sigmoid_grouped(lt, bt, opts), rt.synchronize()),
            lambda: (moe.route(lt, moe.RoutingOptions(K, True)), rt.synchronize()))
    plan = moe.route_sigmoid_grouped(lt, bt, opts)
    ids_np, _ = numpy_grouped_route(logits.astype(np.float64), bias, K, G, SG, 2.5)
    agree = (np.sort(plan.expert_indices().numpy(), 1) == np.sort(ids_np, 1)).all(1).mean()
    shape = f"T {T}, E {E}"
    if rt.capabilities.backend == "cuda":
        import torch
        trun = torch_timer(torch, args.reps)
        dev = torch.device(f"cuda:{rt.index}")
        tl, tb = torch.from_numpy(logits).to(dev), torch.from_numpy(bias).to(dev)
        t_grouped = run(lambda: moe.route_sigmoid_grouped(lt, bt, opts))
        t_softmax = run(lambda: moe.route(lt, moe.RoutingOptions(K, True)))
        b_grouped = trun(lambda: torch_grouped_route(torch, tl, tb, K, G, SG, 2.5))
        b_softmax = trun(lambda: torch.topk(torch.softmax(tl, -1), K, dim=-1))
        base = "torch chain (GPU)"
    else:
        t_grouped, t_softmax, b_grouped, b_softmax = interleaved_best(
            [*ours, lambda: numpy_grouped_route(logits, bias, K, G, SG, 2.5), lambda: numpy_softmax_route(logits, K)],
            args.reps)
        base = "numpy chain"
    for what, t, b in ((f"route_sigmoid_grouped (G {G}, keep {SG}, top-{K}; ids agree {agree:.1%})", t_grouped,
                        b_grouped), (f"route softmax top-{K}", t_softmax, b_softmax)):
        rows.append([what, shape, "f32", rt.name, f"{t * 1e3:.3f}", f"{b * 1e3:.3f}", base, f"{b / t:.2f}",
                     f"{T / t / 1e6:.1f} Mtok/s", f"{T / b / 1e6:.1f} Mtok/s"])
    return rows


def to_torch(torch, t):
    """A torch view of a kd CUDA tensor (DLPack), or a copy through the host."""
    try:
        return torch.from_dlpack(t)
    except Exception:  # noqa: BLE001  (an older torch or DLPack version: copy instead)
        a = t.numpy()
        dev = torch.device(f"cuda:{t.runtime.index}")
        if t.dtype is kd.bf16:
            return torch.from_numpy(a.view(np.int16)).to(dev).view(torch.bfloat16)
        return torch.from_numpy(a).to(dev)


def expert_rows(rt, args, run):
    cuda = rt.capabilities.backend == "cuda"
    if cuda:
        E, per, H, I = (8, 256, 1024, 512) if args.small else (32, 512, 7168, 2048)
    else:
        E, per, H, I = (4, 64, 512, 256) if args.small else (8, 256, 2048, 1024)
    K = 8
    R = E * per
    flops = 2 * R * H * I * 3
    counts = [per] * E
    plan, T = balanced_plan(rt, E, per, K)
    shape = f"E {E}, {per} rows/expert, H {H}, I {I}"
    rows = []
    if cuda:                       # weights made on the device by torch and shared, not uploaded
        import torch
        dev = torch.device(f"cuda:{rt.index}")
        gen = torch.Generator(device=dev).manual_seed(1)
        tg, tu = (torch.randn(E, I, H, device=dev, generator=gen, dtype=torch.bfloat16) / H ** 0.5 for _ in "gu")
        td = torch.randn(E, H, I, device=dev, generator=gen, dtype=torch.bfloat16) / I ** 0.5
        tx = torch.randn(T, H, device=dev, generator=gen, dtype=torch.bfloat16)
        experts = moe.SwiGluExperts(*(kd.from_dlpack(a) for a in (tg, tu, td)))
        dispatched = plan.dispatch(kd.from_dlpack(tx))
        fn, base = torch_experts_fn(torch, to_torch(torch, dispatched.values()), counts, tg, tu, td)
        b = torch_timer(torch, args.reps)(fn)
        check = fn().float()
        strategies, dt = [moe.GroupedStrategy.TensorCore, moe.GroupedStrategy.Auto], "bf16"

        def rel_diff(y):
            got = to_torch(torch, y).float()
            return float((got - check).norm() / check.norm())
    else:
        rng = np.random.default_rng(1)
        gate = (rng.standard_normal((E, I, H)) / np.sqrt(H)).astype(np.float32)
        up = (rng.standard_normal((E, I, H)) / np.sqrt(H)).astype(np.float32)
        down = (rng.standard_normal((E, H, I)) / np.sqrt(I)).astype(np.float32)
        x = rng.standard_normal((T, H)).astype(np.float32)
        experts = moe.SwiGluExperts(rt.tensor(gate), rt.tensor(up), rt.tensor(down))
        dispatched = plan.dispatch(rt.tensor(x))
        xs = dispatched.values().numpy()
        base = "numpy per-expert matmuls (OpenBLAS)"
        check = numpy_experts(xs, counts, gate, up, down)
        def ours():
            experts.forward_dispatched_with_strategy(dispatched, moe.GroupedStrategy.Scalar)
            rt.synchronize()
        t, b, mm = interleaved_best([ours, lambda: numpy_experts(xs, counts, gate, up, down),
                                     lambda: [xs[i * per:(i + 1) * per] @ gate[i].T for i in range(E)]], args.reps)
        print(f"cpu: numpy matmul alone {2 * R * H * I / mm / 1e9:.1f} GFLOP/s (one projection, {E} experts); "
              f"rudnn Scalar experts {flops / t / 1e9:.1f} GFLOP/s = {flops / t / (2 * R * H * I / mm):.2f}x that")
        strategies, dt = [moe.GroupedStrategy.Scalar], "f32"
        timed = {moe.GroupedStrategy.Scalar: t}

        def rel_diff(y):
            got = y.numpy()
            return float(np.linalg.norm(got - check) / np.linalg.norm(check))
    for strategy in strategies:
        t = timed[strategy] if not cuda else run(lambda: experts.forward_dispatched_with_strategy(dispatched, strategy))
        rel = rel_diff(experts.forward_dispatched_with_strategy(dispatched, strategy))
        rows.append([f"SwiGLU experts, {strategy.name} (rel. diff {rel:.1e})", shape, dt, rt.name,
                     f"{t * 1e3:.2f}", f"{b * 1e3:.2f}", base, f"{b / t:.2f}", f"{flops / t / 1e12:.3f} TFLOP/s",
                     f"{flops / b / 1e12:.3f} TFLOP/s"])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="small problems (a quick smoke run)")
    ap.add_argument("--runtimes", default=",".join(r for r in kd.available_runtimes() if r in ("cpu", "cuda")))
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    print(f"machine: {machine()}")
    rows = []
    for name in args.runtimes.split(","):
        rt = kd.runtime(name)
        print(f"{name}: {rt.capabilities.device_name}")
        run = timer(rt, args.reps)
        rows += routing_rows(rt, args, run)
        rows += expert_rows(rt, args, run)
    print(table(rows, HEADERS))


if __name__ == "__main__":
    main()
