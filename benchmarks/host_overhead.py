"""Host time per call: an empty one-cube kernel and one call of every public operator at a
tiny shape, side by side with the PyTorch CPU call that does the same where there is one.

    python -m benchmarks.host_overhead                          # cpu and opencl (cuda where usable)
    python -m benchmarks.host_overhead --runtimes cpu --only kernel,normalization.layer_norm --calls 20000
    python -m benchmarks.host_overhead --runtimes cuda --only gated_delta --profile 12   # where the time goes

At tiny shapes the device work is negligible, so a call's time is the host's: argument
checks, plan choice, allocations, views and each kernel launch. Every case runs once to warm
up (compiling what it needs), then --reps rounds of --calls calls; the median round, divided
by the calls, is the time per call; "thread µs" is the best round's CPU time of the calling
thread per call (steadier than wall time on a shared machine; on the cpu runtime it leaves
out the kernels that ran on worker threads). On the cpu runtime a launch returns when its
kernel has run, so one wall figure is given. On GPU runtimes (opencl, cuda) "enqueue µs" is the loop of
calls alone (work queued, not waited for; the runtime is synchronised after the round,
outside the timing) and "synced µs" a call followed by `rt.synchronize()`. The torch
figure is the same median for the CPU eager equivalent on tensors of the same shape.
"""
from __future__ import annotations

import argparse
import importlib
import re
import statistics
import sys
import time

import numpy as np

import kerneldsl as kd
from rudnn import attention as A
from rudnn import convolution as C
from rudnn import ctc as CTC
from rudnn import gated_delta as GD
from rudnn import grid_sample as GS
from rudnn import interpolation as I
from rudnn import moe
from rudnn import normalization as N
from rudnn import paged_attention as PA
from rudnn import pooling as P

from .common import machine, table


@kd.kernel
def empty_kernel(x: kd.Tensor[kd.f32], n: kd.i32):
    """A kernel that does nothing: its launch is pure host overhead."""
    if n < 0:
        x[0] = 0.0


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


# ------------------------------------------------------------------------------ cases
class Inputs:
    """Tiny inputs on one runtime (`up`) and, where torch is importable, the same values as
    CPU torch tensors (`tt`)."""

    def __init__(self, rt, torch):
        self.rt, self.torch = rt, torch
        self.rng = np.random.default_rng(0)

    def array(self, *shape, dtype=np.float32, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(dtype)

    def up(self, a):
        return self.rt.tensor(a)

    def tt(self, a):
        return None if self.torch is None else self.torch.from_numpy(np.ascontiguousarray(a))


def _normalization(s: Inputs) -> dict:
    t = s.torch
    F = t.nn.functional if t else None
    x, g, b, dy = s.array(4, 64), s.array(64), s.array(64), s.array(4, 64)
    X, G, B, DY = map(s.up, (x, g, b, dy))
    _, mean, rstd = N.layer_norm_with_stats(X, G, B)
    _, rrstd = N.rms_norm_with_stats(X, G)
    tx, tg, tb, tdy = map(s.tt, (x, g, b, dy))
    if t:
        _, tmean, trstd = t.native_layer_norm(tx, [64], tg, tb, 1e-5)
    return {
        "layer_norm": (lambda: N.layer_norm(X, G, B), t and (lambda: F.layer_norm(tx, (64,), tg, tb))),
        "layer_norm_with_stats": (lambda: N.layer_norm_with_stats(X, G, B),
                                  t and (lambda: t.native_layer_norm(tx, [64], tg, tb, 1e-5))),
        "rms_norm": (lambda: N.rms_norm(X, G), t and (lambda: F.rms_norm(tx, (64,), tg, 1e-6))),
        "rms_norm_with_stats": (lambda: N.rms_norm_with_stats(X, G), None),
        "softmax_last_axis": (lambda: N.softmax_last_axis(X), t and (lambda: t.softmax(tx, -1))),
        "layer_norm_backward": (lambda: N.layer_norm_backward(X, G, DY, mean, rstd),
                                t and (lambda: t.ops.aten.native_layer_norm_backward(
                                    tdy, tx, [64], tmean, trstd, tg, tb, [True, True, True]))),
        "rms_norm_backward": (lambda: N.rms_norm_backward(X, G, DY, rrstd), None),
    }


def _attention(s: Inputs) -> dict:
    t = s.torch
    q, k, v = (s.array(1, 2, 16, 16) for _ in range(3))
    Q, K, V = map(s.up, (q, k, v))
    tq, tk, tv = map(s.tt, (q, k, v))
    return {"attention": (lambda: A.attention(Q, K, V),
                          t and (lambda: t.nn.functional.scaled_dot_product_attention(tq, tk, tv)))}


def _convolution(s: Inputs) -> dict:
    t = s.torch
    x, w, dy = s.array(1, 4, 8, 8), s.array(4, 4, 3, 3), s.array(1, 4, 6, 6)
    X, W, DY = map(s.up, (x, w, dy))
    XL, WL = s.up(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), s.up(np.ascontiguousarray(w.transpose(0, 2, 3, 1)))
    tx, tw, tdy = map(s.tt, (x, w, dy))
    opts = C.ConvOptions()
    return {
        "conv_forward": (lambda: C.conv_forward(X, W), t and (lambda: t.nn.functional.conv2d(tx, tw))),
        "conv_forward_nhwc": (lambda: C.conv_forward_nhwc(XL, WL), None),
        "conv_data_backward": (lambda: C.conv_data_backward(DY, W, (1, 4, 8, 8), opts),
                               t and (lambda: t.nn.grad.conv2d_input((1, 4, 8, 8), tw, tdy))),
        "conv_weight_backward": (lambda: C.conv_weight_backward(X, DY, (4, 4, 3, 3), opts),
                                 t and (lambda: t.nn.grad.conv2d_weight(tx, (4, 4, 3, 3), tdy))),
    }


def _pooling(s: Inputs) -> dict:
    t = s.torch
    out = {}
    for d in (1, 2, 3):
        x, dy = s.array(1, 4, *(8,) * d), s.array(1, 4, *(4,) * d)
        X, DY, tx = s.up(x), s.up(dy), s.tt(x)
        ours = lambda name: getattr(P, name.format(d=d))  # noqa: E731
        ref = (lambda name: getattr(t.nn.functional, name.format(d=d))) if t else (lambda name: None)  # noqa: E731
        _, idx = ours("max_pool{d}d_with_indices")(X, 2)
        _, aidx = ours("adaptive_max_pool{d}d")(X, 4)
        cases = {  # name: (our call's arguments, torch's function and arguments or None)
            "max_pool{d}d": ((X, 2), ("max_pool{d}d", tx, 2)),
            "max_pool{d}d_with_indices": ((X, 2), ("max_pool{d}d", tx, 2, None, 0, 1, False, True)),
            "avg_pool{d}d": ((X, 2), ("avg_pool{d}d", tx, 2)),
            "adaptive_avg_pool{d}d": ((X, 4), ("adaptive_avg_pool{d}d", tx, 4)),
            "adaptive_max_pool{d}d": ((X, 4), ("adaptive_max_pool{d}d", tx, 4, True)),
            "max_pool{d}d_backward": ((X, DY, idx, 2), None),
            "avg_pool{d}d_backward": ((X, DY, 2), None),
            "adaptive_avg_pool{d}d_backward": ((X, DY), None),
            "adaptive_max_pool{d}d_backward": ((X, DY, aidx), None),
        }
        for name, (args, torch_call) in cases.items():
            call = (lambda f=ours(name), args=args: f(*args))
            base = None
            if t and torch_call is not None:
                base = (lambda f=ref(torch_call[0]), args=torch_call[1:]: f(*args))
            out[name.format(d=d)] = (call, base)
    return out


def _interpolation(s: Inputs) -> dict:
    t = s.torch
    x, dy = s.array(1, 4, 8, 8), s.array(1, 4, 16, 16)
    X, DY, tx = s.up(x), s.up(dy), s.tt(x)
    o = I.InterpolateOptions(I.InterpolateMode.Linear)
    return {
        "interpolate": (lambda: I.interpolate(X, (16, 16), o),
                        t and (lambda: t.nn.functional.interpolate(tx, (16, 16), mode="bilinear"))),
        "interpolate_backward": (lambda: I.interpolate_backward(X, DY, (16, 16), o), None),
    }


def _grid_sample(s: Inputs) -> dict:
    t = s.torch
    x, grid, dy = s.array(1, 4, 8, 8), s.array(1, 8, 8, 2, scale=0.5), s.array(1, 4, 8, 8)
    X, GR, DY = map(s.up, (x, grid, dy))
    tx, tg = s.tt(x), s.tt(grid)
    return {
        "grid_sample": (lambda: GS.grid_sample(X, GR),
                        t and (lambda: t.nn.functional.grid_sample(tx, tg, align_corners=False))),
        "grid_sample_backward": (lambda: GS.grid_sample_backward(X, GR, DY), None),
    }


def _ctc(s: Inputs) -> dict:
    t = s.torch
    T, N_, Cn = 12, 2, 5
    lp = s.array(T, N_, Cn)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    targets = np.array([[1, 2, 3], [2, 2, 0]], np.int32)
    il, tl = np.array([12, 10], np.int32), np.array([3, 2], np.int32)
    LP, TG, IL, TL = map(s.up, (lp, targets, il, tl))
    tlp = s.tt(lp)
    ttg, til, ttl = (s.tt(a.astype(np.int64)) for a in (targets, il, tl))
    return {
        "ctc_loss": (lambda: CTC.ctc_loss(LP, TG, IL, TL),
                     t and (lambda: t.nn.functional.ctc_loss(tlp, ttg, til, ttl))),
        "ctc_alpha_beta": (lambda: CTC.ctc_alpha_beta(LP, TG, IL, TL), None),
        "ctc_loss_backward": (lambda: CTC.ctc_loss_backward(LP, TG, IL, TL, 1.0), None),
    }


def _gated_delta(s: Inputs) -> dict:
    B, H, T, K, V = 1, 2, 8, 16, 16
    q, k = s.array(B, H, T, K, scale=0.3), s.array(B, H, T, K, scale=0.3)
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    inp = GD.GatedDeltaInput(s.up(q), s.up(k), s.up(s.array(B, H, T, V)),
                             s.up(np.full((B, H, T), 0.5, np.float32)), s.up(np.full((B, H, T), -0.1, np.float32)),
                             s.up(np.zeros((B, H, K, V), np.float32)), 0.25)
    return {"gated_delta_rule": (lambda: GD.gated_delta_rule(inp), None),
            "chunk_gated_delta_rule": (lambda: GD.chunk_gated_delta_rule(inp, 4), None)}


def _moe(s: Inputs) -> dict:
    T, E, Hd, In = 8, 4, 32, 16
    x, logits = s.up(s.array(T, Hd)), s.up(s.array(T, E))
    ex = moe.SwiGluExperts(*(s.up(s.array(*shape, scale=0.1)) for shape in ((E, In, Hd), (E, In, Hd), (E, Hd, In))))
    opts = moe.RoutingOptions(top_k=2, renormalize=True)
    gopts = moe.GroupRoutingOptions(top_k=2, groups=2, selected_groups=1, group_top_two=True, renormalize=True,
                                    scale=1.0)
    bias = s.up(s.array(E))
    plan = moe.route(logits, opts)
    tokens = plan.dispatch(x)
    y = s.up(s.array(tokens.rows(), Hd))
    return {"route": (lambda: moe.route(logits, opts), None),
            "route_sigmoid_grouped": (lambda: moe.route_sigmoid_grouped(logits, bias, gopts), None),
            "RoutingPlan.dispatch": (lambda: plan.dispatch(x), None),
            "DispatchedTokens.combine": (lambda: tokens.combine(y), None),
            "SwiGluExperts.forward": (lambda: ex.forward(x, logits, opts), None),
            "SwiGluExperts.forward_dispatched": (lambda: ex.forward_dispatched(tokens), None)}


def _paged_attention(s: Inputs) -> dict:
    host = PA.HostPlan(page_size=4, pages=4, tables=[[3, 0], [2]], lengths=[6, 2], sequence_ids=[0, 1, 0],
                       positions=[4, 1, 5])
    q, k, v = s.up(s.array(3, 2, 8)), s.up(s.array(4, 4, 1, 8)), s.up(s.array(4, 4, 1, 8))
    qp, latent, kp = s.up(s.array(3, 2, 4)), s.up(s.array(4, 4, 1, 8)), s.up(s.array(4, 4, 1, 4))
    nk, nv = s.up(s.array(3, 1, 8)), s.up(s.array(3, 1, 8))
    plan = PA.DevicePlan.upload(host, q)
    return {"DevicePlan.upload": (lambda: PA.DevicePlan.upload(host, q), None),
            "DevicePlan.attention": (lambda: plan.attention(q, k, v, 0.1, True), None),
            "DevicePlan.mla": (lambda: plan.mla(q, qp, latent, kp, 0.1, True), None),
            "DevicePlan.append": (lambda: plan.append(nk, nv, k, v), None)}


def _kernel(s: Inputs) -> dict:
    x = s.up(np.zeros(4, np.float32))
    launch = empty_kernel[1, 1]
    return {"empty one-cube kernel": (lambda: launch(x, 4), None)}


FAMILIES = {"kernel": _kernel, "normalization": _normalization, "attention": _attention,
            "convolution": _convolution, "pooling": _pooling, "interpolation": _interpolation,
            "grid_sample": _grid_sample, "ctc": _ctc, "gated_delta": _gated_delta, "moe": _moe,
            "paged_attention": _paged_attention}


# ------------------------------------------------------------------------------ timing
def per_call(fn, calls: int, reps: int, after=None, cpu: list | None = None) -> float:
    """Median over `reps` rounds of the seconds per call of `calls` back-to-back calls of
    `fn`; `after` (e.g. a synchronise) runs after each round, outside the timing. With `cpu`,
    the best round's main-thread CPU seconds per call (`time.thread_time`) is appended to it:
    on a shared machine the wall time counts other processes' turns too."""
    rounds, threads = [], []
    for _ in range(reps):
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls)
        threads.append((time.thread_time() - c0) / calls)
        if after is not None:
            after()
    if cpu is not None:
        cpu.append(min(threads))
    return statistics.median(rounds)


def measure(rt, fn, calls: int, reps: int) -> tuple:
    """(µs per call without waiting, µs per call with a synchronise — None on the cpu runtime,
    whose launches return when their kernels ran —, the calling thread's CPU µs per call
    without waiting)."""
    fn()
    rt.synchronize()
    cpu: list = []
    enqueue = per_call(fn, calls, reps, rt.synchronize, cpu) * 1e6
    if rt.kind == "cpu":
        return enqueue, None, cpu[0] * 1e6
    synced = per_call(lambda: (fn(), rt.synchronize()), max(1, calls // 4), reps) * 1e6
    return enqueue, synced, cpu[0] * 1e6


def replayed(family: str, op: str) -> str:
    """Whether the operator's calls were replayed (kerneldsl/replay.py): "yes", "no: <why>" for
    a refused record, "-" for an entry point that is not replayable itself (it may call
    replayed functions: ctc's checks run on every call, then its launches replay) or not a
    function. `op` may name a method ("SwiGluExperts.forward")."""
    try:
        fn = importlib.import_module(f"rudnn.{family}")
    except ImportError:  # the "kernel" row
        fn = None
    for name in op.split("."):
        fn = getattr(fn, name, None)
    if fn is None or not hasattr(fn, "replay_records"):
        return "-"
    if not kd.replay.enabled():
        return "off"
    if fn.replay_records:
        return "yes"
    return "no: " + ", ".join(sorted(set(map(str, fn.replay_refusals.values())))) if fn.replay_refusals else "no"


def profile(fn, calls: int, top: int) -> str:
    """cProfile of `calls` calls of `fn`: its `top` functions by own time, one line each
    (calls, own s, cumulative s, where), to see which Python a call's host time is."""
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    rows = [line for line in out.getvalue().splitlines() if re.match(r"\s*[\d/]+\s+\d", line)]
    return "\n".join("    " + line.strip() for line in rows[:top])


def default_runtimes() -> list:
    return kd.available_runtimes()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtimes", default=None, help="comma-separated (default: every available runtime)")
    ap.add_argument("--only", default="", help="comma-separated families (kernel, normalization, ...) or "
                    "family.operator names")
    ap.add_argument("--calls", type=int, default=1000, help="calls per round")
    ap.add_argument("--reps", type=int, default=5, help="rounds (the median round is reported)")
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch CPU column")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after each operator's timing, print its N functions of most own time (cProfile)")
    args = ap.parse_args(argv)
    torch = None if args.no_torch else _torch()
    if torch is not None:
        torch.set_num_threads(1)
    names = args.runtimes.split(",") if args.runtimes else default_runtimes()
    only = [w for w in args.only.split(",") if w]
    print(f"# host time per call; {machine()}; median of {args.reps} rounds of {args.calls} calls; "
          f"torch {torch.__version__ if torch else 'not installed'} (1 thread)")
    torch_cache: dict = {}
    for name in names:
        rt = kd.runtime(name)
        inputs = Inputs(rt, torch)
        rows = []
        for family, make in FAMILIES.items():
            if only and not any(o == family or o.startswith(family + ".") for o in only):
                continue
            try:
                cases = make(inputs)
            except Exception as e:  # noqa: BLE001  (a family that cannot run here: say so, go on)
                rows.append([family, "-", f"set-up failed: {type(e).__name__}: {e}"[:80], "", "", "", "", ""])
                continue
            for op, (ours, ref) in cases.items():
                if only and family not in only and f"{family}.{op}" not in only:
                    continue
                try:
                    enq, synced, thread = measure(rt, ours, args.calls, args.reps)
                except Exception as e:  # noqa: BLE001
                    rows.append([family, op, f"failed: {type(e).__name__}: {e}"[:80], "", "", "", "", ""])
                    continue
                if ref is not None and (family, op) not in torch_cache:
                    ref()
                    torch_cache[family, op] = per_call(ref, args.calls, args.reps) * 1e6
                tus = torch_cache.get((family, op))
                rows.append([family, op, f"{enq:.1f}", f"{thread:.1f}", "" if synced is None else f"{synced:.1f}",
                             "" if tus is None else f"{tus:.1f}",
                             "" if tus is None else f"{enq / tus:.1f}x", replayed(family, op)])
                print(f"  {name} {family}.{op}: {enq:.1f} µs", file=sys.stderr, flush=True)
                if args.profile:
                    print(f"  profile of {name} {family}.{op} ({args.calls} calls):\n"
                          f"{profile(ours, args.calls, args.profile)}", flush=True)
                    rt.synchronize()
        print(f"\n## {name} ({rt.capabilities.device_name})")
        print(table(rows, ["family", "operator", "µs / call" if rt.kind == "cpu" else "enqueue µs",
                           "thread µs", "synced µs", "torch cpu µs", "ours / torch", "replayed"]))


if __name__ == "__main__":
    main()
