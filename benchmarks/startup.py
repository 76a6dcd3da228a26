"""Start-up cost per operator: fresh processes on the cpu runtime, cold and warm kernel cache.

    python -m benchmarks.startup [--runs 3] [--only layer_norm,attention]

For every public operator entry, a new Python process imports numpy, kerneldsl and rudnn,
builds small inputs and calls the operator once, waiting for the result. "cold" runs with
an empty kernel cache (every kernel is parsed, rendered and compiled); "warm" runs again on
the cache the cold run filled (nothing should be parsed or compiled: the `specialized`
column counts front-end runs in the warm process). Times are measured inside the child
from its first line (before `import numpy`; interpreter start-up itself is not counted):
"to result" includes imports and input set-up, "first call" is the operator call alone.
Warm figures are medians over --runs processes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # children import kerneldsl and rudnn from this checkout

CHILD = """
import time
_T0 = time.perf_counter()
import numpy as np
import kerneldsl as kd
{imports}
_T1 = time.perf_counter()
rt = kd.runtime("cpu")
rng = np.random.default_rng(0)
def up(*shape, dtype=np.float32, scale=1.0):
    return rt.tensor((rng.standard_normal(shape) * scale).astype(dtype))
{setup}
_T2 = time.perf_counter()
_out = {call}
for _t in (_out if isinstance(_out, tuple) else (_out,)):
    if not isinstance(_t, kd.Tensor):  # a routing plan or dispatched tokens: their data
        _t = _t.weights() if isinstance(_t, moe.RoutingPlan) else _t.values()
    _t.numpy()
_T3 = time.perf_counter()
import json
print(json.dumps({{"imports": _T1 - _T0, "first_call": _T3 - _T2, "to_result": _T3 - _T0, **kd.cache_stats()}}))
"""

_ROWS = "x = up(64, 1000); g = up(1000); b = up(1000)"
_STATS = ("xn = x.numpy().astype(np.float64); mean = rt.tensor(xn.mean(-1).astype(np.float32)); "
          "rstd = rt.tensor((1 / np.sqrt(xn.var(-1) + 1e-5)).astype(np.float32)); dy = up(64, 1000)")
_MOE = ("T, E, H, I = 32, 8, 64, 48; x = up(T, H); logits = up(T, E); "
        "ex = moe.SwiGluExperts(up(E, I, H, scale=0.1), up(E, I, H, scale=0.1), up(E, H, I, scale=0.1)); "
        "opts = moe.RoutingOptions(top_k=2, renormalize=True)")
_MOE16 = ("T, E, H, I = 32, 8, 64, 48; x = up(T, H, dtype=np.float16); logits = up(T, E); "
          "ex = moe.SwiGluExperts(*(up(*s, dtype=np.float16, scale=0.1) for s in ((E, I, H), (E, I, H), (E, H, I)))); "
          "tokens = moe.route(logits, moe.RoutingOptions(top_k=2, renormalize=True)).dispatch(x)")
_ATT = "q, k, v = (up(1, 2, 64, 64, dtype={dt}) for _ in range(3))"

CASES = {
    "normalization.layer_norm": (_ROWS, "N.layer_norm(x, g, b)"),
    "normalization.layer_norm_with_stats": (_ROWS, "N.layer_norm_with_stats(x, g, b)"),
    "normalization.rms_norm": (_ROWS, "N.rms_norm(x, g)"),
    "normalization.rms_norm_with_stats": (_ROWS, "N.rms_norm_with_stats(x, g)"),
    "normalization.softmax_last_axis": (_ROWS, "N.softmax_last_axis(x)"),
    "normalization.layer_norm_backward": (_ROWS + "; " + _STATS, "N.layer_norm_backward(x, g, dy, mean, rstd)"),
    "normalization.rms_norm_backward": (_ROWS + "; " + _STATS, "N.rms_norm_backward(x, g, dy, rstd)"),
    "moe.route": (_MOE, "moe.route(logits, opts)"),
    "moe.route_sigmoid_grouped": (_MOE, "moe.route_sigmoid_grouped(logits, up(E), moe.GroupRoutingOptions("
                                        "top_k=2, groups=4, selected_groups=2, group_top_two=True, "
                                        "renormalize=True, scale=1.0))"),
    "moe.RoutingPlan.dispatch (after route)": (_MOE + "; plan = moe.route(logits, opts)", "plan.dispatch(x)"),
    "moe.DispatchedTokens.combine (after route, dispatch)": (
        _MOE + "; tokens = moe.route(logits, opts).dispatch(x); y = up(tokens.rows(), H)", "tokens.combine(y)"),
    "moe.SwiGluExperts.forward (Auto)": (_MOE, "ex.forward(x, logits, opts)"),
    "moe.forward_dispatched Scalar f16 (after route, dispatch)": (
        _MOE16, "ex.forward_dispatched_with_strategy(tokens, moe.GroupedStrategy.Scalar)"),
    "moe.forward_dispatched TensorCore f16 (after route, dispatch)": (
        _MOE16, "ex.forward_dispatched_with_strategy(tokens, moe.GroupedStrategy.TensorCore)"),
    "attention Fallback f32": (_ATT.format(dt="np.float32"),
                               "A.attention(q, k, v, strategy=A.AttentionStrategy.Fallback)"),
    "attention FlashUnit f32": (_ATT.format(dt="np.float32"),
                                "A.attention(q, k, v, strategy=A.AttentionStrategy.FlashUnit)"),
    "attention FlashBlackboxAccelerated f16": (
        _ATT.format(dt="np.float16"), "A.attention(q, k, v, strategy=A.AttentionStrategy.FlashBlackboxAccelerated)"),
}


# a case imports only the family it calls, as a program using one family would
FAMILY_IMPORTS = {"normalization": "from rudnn import normalization as N", "moe": "from rudnn import moe",
                  "attention": "from rudnn import attention as A"}


def run_child(name: str, setup: str, call: str, cache_dir: str) -> dict:
    """One fresh process; its measurements and cache statistics. Bytecode caching stays on
    (as for an installed package) even where the shell sets PYTHONDONTWRITEBYTECODE, which
    would otherwise time the compilation of our sources, not their import."""
    env = dict(os.environ, KERNELDSL_RUNTIME="cpu", KERNELDSL_CACHE=cache_dir)
    env.pop("KERNELDSL_DUMP", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    imports = FAMILY_IMPORTS[name.split(".")[0].split(" ")[0]]
    code = CHILD.format(setup=textwrap.indent(setup.replace("; ", "\n"), ""), call=call, imports=imports)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                         cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name: str, runs: int) -> dict:
    """Cold once (empty cache), then `runs` warm processes on the filled cache."""
    setup, call = CASES[name]
    with tempfile.TemporaryDirectory(prefix="kd-startup-") as cache_dir:
        cold = run_child(name, setup, call, cache_dir)
        warm = [run_child(name, setup, call, cache_dir) for _ in range(runs)]
    med = lambda key: statistics.median(w[key] for w in warm)  # noqa: E731
    return {"operator": name, "cold": cold["to_result"], "cold_compiled": cold["compiled"],
            "warm": med("to_result"), "warm_imports": med("imports"), "warm_call": med("first_call"),
            "warm_specialized": max(w.get("specialized", -1) for w in warm),  # -1: a kerneldsl without the count
            "warm_compiled": max(w["compiled"] for w in warm)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="warm processes per operator (median reported)")
    ap.add_argument("--only", default="", help="comma-separated substrings of operator names to run")
    args = ap.parse_args(argv)
    names = [n for n in CASES if not args.only or any(s in n for s in args.only.split(","))]
    from .common import machine, table
    print(f"# start-up on the cpu runtime; {machine()}; warm = median of {args.runs} processes")
    rows = []
    for name in names:
        r = measure(name, args.runs)
        rows.append([r["operator"], f"{r['cold']:.2f}", r["cold_compiled"], f"{r['warm']:.3f}",
                     f"{r['warm_imports']:.3f}", f"{r['warm_call'] * 1e3:.1f}", r["warm_specialized"],
                     r["warm_compiled"]])
        print(f"  {name}: cold {r['cold']:.2f} s, warm {r['warm']:.3f} s (call {r['warm_call'] * 1e3:.1f} ms)",
              file=sys.stderr, flush=True)
    print(table(rows, ["operator", "cold to result s", "kernels compiled", "warm to result s",
                       "warm imports s", "warm first call ms", "warm specialized", "warm compiled"]))


if __name__ == "__main__":
    main()
