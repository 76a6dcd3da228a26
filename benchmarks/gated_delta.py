"""rudnn.gated_delta next to the best baselines on this machine: the chunked kernels (prefill)
and the recurrent kernel (decode).

    python -m benchmarks.gated_delta                       # every runtime here
    python -m benchmarks.gated_delta --quick               # small shapes: a smoke run
    python -m benchmarks.gated_delta --runtimes cuda       # the H200 targets
    python -m benchmarks.gated_delta --runtimes cuda --kernels   # recurrent kernels and their tilings
    python -m benchmarks.gated_delta --runtimes cuda --chunked-kernels   # each kernel of the chunked paths

CPU runtimes: chunked (chunk 64) next to our recurrent kernel and to numpy (float32): the
same chunked WY/UT algorithm on BLAS matmuls, and the plain recurrence, at T 4096. Best wall
time of --reps runs after a warm-up.

CUDA runtime: chunked B 4, T 8192, H 16, K = V = 128, bf16, next to flash-linear-attention's
`chunk_gated_delta_rule` (`pip install fla-core`: pure Python on the installed Triton); decode
B 256, T 1, H 16 next to fla's `fused_recurrent_gated_delta_rule`, with the state traffic
(F32 state read + written) in TB/s. Without fla the baseline is the chunked algorithm in
torch float32 (a weaker baseline: the table says which ran). Times are medians of --reps,
CUDA events around one call; outputs are checked against the baseline (max |diff|).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import kerneldsl as kd
from rudnn.gated_delta import GatedDeltaInput, chunk_gated_delta_rule, gated_delta_rule

from .common import best_time, machine, median_device_time, median_torch_cuda_time, table

CHUNK = 64


def inputs(rng, B, H, T, K, V):
    """q, k (unit rows), v, beta, g (F32 log decay), s0 as float32 host arrays, [B, H, T, ·]."""
    q = rng.standard_normal((B, H, T, K), dtype=np.float32)
    k = rng.standard_normal((B, H, T, K), dtype=np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, H, T, V), dtype=np.float32)
    beta = rng.uniform(0.05, 1.0, (B, H, T)).astype(np.float32)
    g = -rng.uniform(0.001, 0.1, (B, H, T)).astype(np.float32)
    s0 = (rng.standard_normal((B, H, K, V), dtype=np.float32) * 0.1)
    return q, k, v, beta, g, s0


def flops(B, H, T, K, V, C=CHUNK) -> float:
    """Useful work of the chunked form: k·kᵀ and q·kᵀ, the triangular solves, w·S, q·S, p·Δ, kᵀ·Δ."""
    return 2.0 * B * H * T * (2 * C * K + C * (K + V) / 2 + 3 * K * V + C * V)


# ------------------------------------------------------------------------------ baselines
def chunked_reference(xp, q, k, v, beta, g, s0, scale, C, eye):
    """The chunked algorithm on whole-array products (numpy or torch `xp`), T a multiple of C;
    returns (output, final state)."""
    B, H, T, K = q.shape
    N = T // C
    q, k, v = (a.reshape(B, H, N, C, a.shape[-1]) for a in (q, k, v))
    beta = beta.reshape(B, H, N, C)
    G = xp.cumsum(g.reshape(B, H, N, C), -1)
    decay = xp.exp(xp.tril(G[..., :, None] - G[..., None, :]))      # lower part only: no overflow
    system = eye + xp.tril(beta[..., None] * decay * (k @ k.swapaxes(-1, -2)), -1)
    w = xp.linalg.solve(system, (beta * xp.exp(G))[..., None] * k)
    u = xp.linalg.solve(system, beta[..., None] * v)
    p = xp.tril(scale * decay * (q @ k.swapaxes(-1, -2)))
    S, outs = s0, []
    for n in range(N):
        d = u[:, :, n] - w[:, :, n] @ S
        outs.append((scale * xp.exp(G[:, :, n])[..., None] * q[:, :, n]) @ S + p[:, :, n] @ d)
        gl = G[:, :, n, -1:]
        S = xp.exp(gl)[..., None] * S + (xp.exp(gl - G[:, :, n])[..., None] * k[:, :, n]).swapaxes(-1, -2) @ d
    return xp.stack(outs, 2).reshape(B, H, T, v.shape[-1]), S


def recurrent_reference(q, k, v, beta, g, s0, scale):
    """The recurrence in numpy float32, one token at a time over all (b, h)."""
    S = s0.copy()
    out = np.empty(v.shape, np.float32)
    for t in range(q.shape[2]):
        S *= np.exp(g[:, :, t])[..., None, None]
        kt = k[:, :, t]
        d = beta[:, :, t, None] * (v[:, :, t] - np.einsum("bhkv,bhk->bhv", S, kt))
        S += kt[..., None] * d[..., None, :]
        out[:, :, t] = np.einsum("bhkv,bhk->bhv", S, scale * q[:, :, t])
    return out, S


# ------------------------------------------------------------------------------ cpu
def bench_cpu(rt, quick, reps):
    B, H, T, K, V = (1, 2, 512, 64, 64) if quick else (1, 4, 4096, 64, 64)
    a = inputs(np.random.default_rng(0), B, H, T, K, V)
    scale = K ** -0.5
    inp = GatedDeltaInput(*(rt.tensor(x) for x in a), scale)
    eye = np.eye(CHUNK, dtype=np.float32)
    want = chunked_reference(np, *a, scale, CHUNK, eye)[0]

    def run(fn):
        def go():
            r = fn()
            r.output.numpy()
            return r
        return go

    cases = [("ours chunked C64", run(lambda: chunk_gated_delta_rule(inp, CHUNK))),
             ("ours recurrent", run(lambda: gated_delta_rule(inp))),
             ("numpy chunked (BLAS)", lambda: chunked_reference(np, *a, scale, CHUNK, eye)),
             ("numpy recurrence", lambda: recurrent_reference(*a, scale))]
    f = flops(B, H, T, K, V)
    times = {}
    rows = []
    for name, fn in cases:
        times[name] = best_time(fn, reps=reps)
        res = fn()
        out = res.output.numpy() if hasattr(res, "output") else res[0]
        err = np.abs(out - want).max()
        rows.append((f"[{B},{H},{T},{K},{V}]", "f32", name, f"{times[name] * 1e3:.1f}",
                     f"{f / times[name] / 1e9:.1f}", f"{err:.1e}"))
    for i, (name, _) in enumerate(cases):
        rows[i] += (f"{times[name] / times['ours chunked C64']:.2f}",)
    print(f"\n{rt.name} runtime: {rt.capabilities.device_name}; {machine()}; best of {reps}")
    print(table(rows, ["shape [B,H,T,K,V]", "dtype", "what", "ms", "GFLOP/s (chunked count)", "max err vs numpy",
                       "time / ours chunked"]))


# ------------------------------------------------------------------------------ cuda
def _fla():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent
        return fla_chunk, fla_recurrent
    except ImportError as e:  # fla-core not installed (or its Triton import failed)
        print(f"note: flash-linear-attention unavailable ({e}); baselines are torch float32 references")
        return None


def bench_cuda(rt, quick, reps):
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("\ncuda runtime present but torch has no CUDA: skipping the GPU table")
        return
    fla = _fla()
    rows = []
    shapes = [("chunked", 4, 16, 8192, 128, 128), ("decode", 256, 16, 1, 128, 128)]
    if quick:
        shapes = [("chunked", 1, 4, 1024, 128, 128), ("decode", 32, 16, 1, 128, 128)]
    for kind, B, H, T, K, V in shapes:
        a = inputs(np.random.default_rng(0), B, H, T, K, V)
        scale = K ** -0.5
        dev = [torch.from_numpy(x).cuda() for x in a]
        dev = [x.bfloat16() if i < 4 else x for i, x in enumerate(dev)]        # q, k, v, beta bf16
        torch.cuda.synchronize()  # kerneldsl runs on its own stream: the inputs must be ready
        inp = GatedDeltaInput(*(kd.from_dlpack(x) for x in dev), scale)
        if kind == "chunked":
            ours = lambda: chunk_gated_delta_rule(inp, CHUNK)  # noqa: E731
        else:
            ours = lambda: gated_delta_rule(inp)  # noqa: E731
        t_ours = median_device_time(rt, ours, reps)
        res = ours()
        rt.synchronize()
        got = torch.from_dlpack(res.output).float()
        if fla is not None:
            bthk = [x.transpose(1, 2).contiguous() for x in dev[:5]]           # fla takes [B, T, H, ·]
            fn = fla[0] if kind == "chunked" else fla[1]
            base = lambda: fn(*bthk[:3], g=bthk[4], beta=bthk[3], scale=scale,  # noqa: E731
                              initial_state=dev[5], output_final_state=True)
            label = "fla " + ("chunk_gated_delta_rule" if kind == "chunked" else "fused_recurrent_gated_delta_rule")
            want = base()[0].transpose(1, 2).float()
        else:
            f32 = [x.float() for x in dev]
            eye = torch.eye(CHUNK if kind == "chunked" else 1, device="cuda")
            c = CHUNK if kind == "chunked" else 1
            base = lambda: chunked_reference(torch, *f32, scale, c, eye)  # noqa: E731
            label = "torch f32 chunked reference"
            want = base()[0]
        t_base = median_torch_cuda_time(torch, base, reps)
        err = (got - want).abs().max().item()
        state_bytes = 2 * B * H * K * V * 4
        io_bytes = sum(x.numel() * x.element_size() for x in dev[:5]) + got.numel() * 2 + state_bytes
        speed = (f"{flops(B, H, T, K, V) / t_ours / 1e12:.1f} TFLOP/s" if kind == "chunked"
                 else f"{state_bytes / t_ours / 1e12:.2f} TB/s state")
        rows.append((kind, f"[{B},{H},{T},{K},{V}]", "bf16", f"{t_ours * 1e3:.3f}", label, f"{t_base * 1e3:.3f}",
                     f"{t_base / t_ours:.2f}", speed, f"{io_bytes / t_ours / 1e9:.0f}", f"{err:.1e}"))
    print(f"\ncuda runtime: {rt.capabilities.device_name}; torch {torch.__version__}; medians of {reps}")
    print(table(rows, ["kernel", "shape [B,H,T,K,V]", "dtype", "ours ms", "baseline", "baseline ms",
                       "x baseline (>1: ours faster)", "ours", "ours GB/s (in+out+state)", "max |diff|"]))


# ------------------------------------------------------------------------------ recurrent shapes
RECURRENT_SHAPES = [("decode", 256, 16, 1, 128, 128), ("decode T4", 64, 16, 4, 128, 128),
                    ("recurrent T1024", 4, 16, 1024, 128, 128)]
PLANE_TILINGS = [(1, 4, 4), (2, 4, 4), (4, 4, 4), (2, 4, 2), (2, 4, 1), (2, 4, 8), (2, 2, 8)]  # (planes, width, lanes)


def bench_recurrent_kernels(rt, reps):
    """Each recurrent kernel on the GPU shapes (bf16): the row-group kernel (recurrent.py) and the
    planes kernel (recurrent_planes.py) as chosen and over PLANE_TILINGS, with and without the
    prefetch of the next token, device time and state TB/s, each
    output against the row-group kernel's (max |diff|)."""
    from rudnn import gated_delta as package
    from rudnn.gated_delta.tuning import PlaneTiling
    real = package.prefer_planes, package.plane_tiling
    variants = [("row groups", False, None), ("planes (chosen)", True, None)]
    variants += [(f"planes P{p} W{w} LC{c}{' pre' if pre else ''}", True, PlaneTiling(p, w, c, pre))
                 for p, w, c in PLANE_TILINGS for pre in (False, True)]
    rows = []
    try:
        for kind, B, H, T, K, V in RECURRENT_SHAPES:
            a = inputs(np.random.default_rng(0), B, H, T, K, V)
            dt = [rt.tensor(x.astype(kd.bf16.np)) for x in a[:4]]
            inp = GatedDeltaInput(*dt, rt.tensor(a[4]), rt.tensor(a[5]), K ** -0.5)
            base = None
            for name, planes, til in variants:
                package.prefer_planes = lambda caps, planes=planes: planes  # noqa: E731
                package.plane_tiling = (lambda caps, K, V, T, heads, aligned, til=til: til) if til else real[1]
                kd.replay.clear()
                t = median_device_time(rt, lambda: gated_delta_rule(inp), reps)
                out = gated_delta_rule(inp).output.numpy().astype(np.float32)
                base = out if base is None else base
                state = 2 * B * H * K * V * 4
                rows.append((kind, f"[{B},{H},{T},{K},{V}]", name, f"{t * 1e3:.4f}", f"{state / t / 1e12:.2f}",
                             f"{np.abs(out - base).max():.1e}"))
    finally:
        package.prefer_planes, package.plane_tiling = real
        kd.replay.clear()
    print(f"\n{rt.name} recurrent kernels: {rt.capabilities.device_name}; medians of {reps}")
    print(table(rows, ["shape", "[B,H,T,K,V]", "kernel", "ms", "state TB/s", "max |diff| vs row groups"]))


def bench_chunked_kernels(rt, quick, reps):
    """Each kernel of the chunked rule apart (B 4, T 8192, H 16, K = V = 128, bf16, chunk 64;
    --quick: B 1, H 4, T 1024), for both paths where the device has them: the group products
    (chunk_prepare_group, chunk_state_group, chunk_output_group) and the fragment kernels
    (chunk_prepare_mma, chunk_sweep_mma). Every launch is bracketed by the runtime's events
    (on CUDA: device time of that kernel); medians of `reps` rounds, each round running the
    paths and (on CUDA with fla-core) fla's chunk_gated_delta_rule in turn, each output
    against the first path's (max |diff|)."""
    import statistics
    from rudnn import gated_delta as package
    B, H, T, K, V = (1, 4, 1024, 128, 128) if quick else (4, 16, 8192, 128, 128)
    a = inputs(np.random.default_rng(0), B, H, T, K, V)
    scale = K ** -0.5
    torch = fla = None
    if rt.name.startswith("cuda"):
        try:
            import torch
        except ImportError:
            torch = None
    if torch is not None and torch.cuda.is_available():
        dev = [torch.from_numpy(x).cuda() for x in a]
        dev = [x.bfloat16() if i < 4 else x for i, x in enumerate(dev)]
        torch.cuda.synchronize()
        inp = GatedDeltaInput(*(kd.from_dlpack(x) for x in dev), scale)
        fla = _fla()
        bthk = [x.transpose(1, 2).contiguous() for x in dev[:5]]
    else:
        inp = GatedDeltaInput(*(rt.tensor(x.astype(kd.bf16.np)) for x in a[:4]), rt.tensor(a[4]), rt.tensor(a[5]),
                              scale)
    real_group, real_launch = package.group_sweep, kd.Kernel.launch_with
    paths = {"group": lambda caps, dt, K, V, C: real_group(caps, dt, K, V, C),
             "fragment": lambda caps, dt, K, V, C: False}
    times = {name: {} for name in paths}
    times["fla"] = {}
    outs = {}
    timed = hasattr(rt, "elapsed_ms")
    current = {}

    def launch(self, grid, block, args, runtime=None):
        if not timed:
            return real_launch(self, grid, block, args, runtime)
        start = rt.record_event()
        res = real_launch(self, grid, block, args, runtime)
        current.setdefault(self.__name__, []).append((start, rt.record_event()))
        return res

    try:
        kd.Kernel.launch_with = launch
        for rep in range(reps + 1):  # the first round warms up
            for name, choice in paths.items():
                package.group_sweep = choice
                kd.replay.clear()
                current.clear()
                res = chunk_gated_delta_rule(inp, CHUNK)
                rt.synchronize()
                outs.setdefault(name, res.output.numpy().astype(np.float32))
                if rep and timed:
                    for kern, events in current.items():
                        times[name].setdefault(kern, []).append(sum(rt.elapsed_ms(s, e) for s, e in events) / 1e3)
            if fla is not None:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                o = fla[0](*bthk[:3], g=bthk[4], beta=bthk[3], scale=scale, initial_state=dev[5],
                           output_final_state=True)[0]
                end.record()
                torch.cuda.synchronize()
                outs.setdefault("fla", o.transpose(1, 2).float().cpu().numpy())
                if rep:
                    times["fla"].setdefault("chunk_gated_delta_rule (whole call)", []).append(
                        start.elapsed_time(end) / 1e3)
    finally:
        package.group_sweep, kd.Kernel.launch_with = real_group, real_launch
        kd.replay.clear()
    first = next(iter(outs.values()))
    rows = []
    for name in times:
        if name not in outs:
            continue
        total = 0.0
        for kern, ts in times[name].items():
            total += statistics.median(ts)
            rows.append((name, kern, f"{statistics.median(ts) * 1e3:.3f}", f"{min(ts) * 1e3:.3f}-{max(ts) * 1e3:.3f}"))
        check = f"max |diff| {np.abs(outs[name] - first).max():.1e}"
        rows.append((name, "(sum of medians)", f"{total * 1e3:.3f}", check))
    print(f"\n{rt.name} chunked kernels [{B},{H},{T},{K},{V}] bf16 chunk {CHUNK}: {rt.capabilities.device_name}; "
          f"medians of {reps}" + ("" if timed else " (no events on this runtime: no times)"))
    print(table(rows, ["path", "kernel", "median ms", "range ms / check"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes: a quick check that everything runs")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--runtimes", default=None, help="comma-separated subset of the available runtimes")
    ap.add_argument("--kernels", action="store_true",
                    help="only the recurrent kernels and their tilings on the GPU shapes (a tuning table)")
    ap.add_argument("--chunked-kernels", action="store_true",
                    help="only the chunked rule, each kernel timed apart, group and fragment paths")
    args = ap.parse_args(argv)
    avail = kd.available_runtimes()
    t0 = time.perf_counter()
    for name in (n.strip() for n in (args.runtimes or ",".join(avail)).split(",")):
        bench = bench_cuda if name.startswith("cuda") else bench_cpu
        if args.kernels:
            bench = lambda rt, quick, reps: bench_recurrent_kernels(rt, reps)  # noqa: E731
        if args.chunked_kernels:
            bench = bench_chunked_kernels
        if name.split(":")[0] in avail:
            bench(kd.runtime(name), args.quick, args.reps)
        else:
            print(f"{name}: not available here ({avail})")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
