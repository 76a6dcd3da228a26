"""rudnn.ctc next to torch.nn.functional.ctc_loss on this machine: the loss (forward) and the
loss plus its gradient (forward+backward), "mean" reduction, random log-softmaxed inputs
with full input lengths and target lengths spread over [S/2, S].

    python -m benchmarks.ctc                          # every runtime here, T 500 N 64 C 32 S 100 + a long target
    python -m benchmarks.ctc --quick                  # a smoke run (small shapes, 2 rounds)
    python -m benchmarks.ctc --runtimes cuda --reps 20
    python -m benchmarks.ctc --runtimes cpu --cases 500x64x32x100 --dtypes f32,bf16
    python -m benchmarks.ctc --runtimes cuda --plane-path   # the plane-resident recursion where it fits

Torch's OpenMP threads wait passively (OMP_WAIT_POLICY=PASSIVE unless set), so they do not
spin on the cores our cpu runtime's workers need next. Both sides are called as a user calls them and timed by wall clock around one call and a
synchronise (host work included: rudnn validates targets and lengths on the host, torch's
CUDA path copies the lengths to the host too), best of --reps rounds that run every
candidate in turn, so all see the same moments of a shared machine. The baseline is
F.ctc_loss in F32 on torch CPU (cpu/opencl runtimes) or on the GPU (cuda runtime; targets
and lengths as CUDA tensors: torch's native kernels, cuDNN's CTC needs int32 targets on
the host). Forward+backward is ctc_loss + ctc_loss_backward for us and loss.backward()
for torch. Every result is checked against torch before it is timed. "speed-up" is
torch's time / ours; GB/s counts log_probs read (and the gradient written).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import kerneldsl as kd
import rudnn.ctc as ctc

from .common import machine, table
from .normalization import default_runtimes, interleaved_best  # cuda if usable, else the host runtimes

CASES = ("500x64x32x100", "4500x4x32x2000")   # T x N x C x S: the shape and a long target
QUICK_CASES = ("100x8x16x20", "900x2x8x400")


def _torch():
    # torch's OpenMP threads otherwise spin after each call and take the cores from the cpu
    # runtime's workers that run next (interleaved timing): T 500 N 64 forward 165 -> 92 ms
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch
        return torch
    except ImportError:
        return None


def problem(T, N, C, S, seed=0):
    """(log_probs F32 [T, N, C], padded targets [N, S] I32, input lengths, target lengths)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, N, C)).astype(np.float32)
    lp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    targets = rng.integers(1, C, (N, S)).astype(np.int32)
    tl = rng.integers(S // 2, S + 1, N).astype(np.int32)
    tl[0] = S
    return lp, targets, np.full(N, T, np.int32), tl


def run_case(rt, torch, case: str, dtype: str, rounds: int) -> list:
    T, N, C, S = (int(v) for v in case.split("x"))
    lp, targets, il, tl = problem(T, N, C, S)
    args = (rt.tensor(lp, dtype=dtype), rt.tensor(targets), rt.tensor(il), rt.tensor(tl))
    dev = "cuda" if rt.name.startswith("cuda") else "cpu"
    seen = args[0].numpy().astype(np.float32)                 # the rounded input, for torch
    x = torch.tensor(seen, device=dev, requires_grad=True)
    t_args = [torch.tensor(a.astype(np.int64), device=dev) for a in (targets, il, tl)]
    F = torch.nn.functional

    def sync():
        rt.synchronize()

    def torch_sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    def ours_fwd():
        out = ctc.ctc_loss(*args)
        sync()
        return out

    def ours_both():
        loss = ctc.ctc_loss(*args)
        grad = ctc.ctc_loss_backward(*args, 1.0)
        sync()
        return loss, grad

    def torch_fwd():
        with torch.no_grad():
            out = F.ctc_loss(x, *t_args)
        torch_sync()
        return out

    def torch_both():
        x.grad = None
        loss = F.ctc_loss(x, *t_args)
        loss.backward()
        torch_sync()
        return loss, x.grad

    loss, grad = ours_both()
    want, want_grad = torch_both()
    want = want.detach()
    err = abs(float(loss.numpy()) - float(want)) / abs(float(want))
    gerr = float(np.linalg.norm(grad.numpy().astype(np.float64) - want_grad.cpu().numpy())
                 / np.linalg.norm(want_grad.cpu().numpy()))
    # F32 log-space sums over thousands of steps: at T 4500, S 2000 torch's own F32 gradient is
    # ~1e-3 (relative norm) from ours and from its float64 one
    tol = {"f32": 1e-4, "f16": 5e-3, "bf16": 3e-2}[dtype]
    assert err < tol and gerr < max(tol * 10, 5e-3), f"{case} {dtype}: loss error {err:.1e}, gradient error {gerr:.1e}"
    best = interleaved_best({"ours fwd": ours_fwd, "torch fwd": torch_fwd, "ours both": ours_both,
                             "torch both": torch_both}, rounds)
    item = np.dtype(kd.as_dtype(dtype).np).itemsize
    rows = []
    for what, moved in (("fwd", T * N * C * item), ("fwd+bwd", 2 * T * N * C * item)):
        key = "fwd" if what == "fwd" else "both"
        ours_t, base_t = best[f"ours {key}"], best[f"torch {key}"]
        rows.append((f"T{T} N{N} C{C} S{S}", dtype, what, f"{ours_t * 1e3:.3f}", f"{base_t * 1e3:.3f}",
                     f"{base_t / ours_t:.2f}x", f"{moved / ours_t / 1e9:.2f}"))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", default=None, help="comma-separated (default: cuda if usable, else cpu,opencl)")
    p.add_argument("--cases", default=None, help="comma-separated TxNxCxS (default: %s)" % ",".join(CASES))
    p.add_argument("--dtypes", default="f32")
    p.add_argument("--reps", type=int, default=5, help="rounds; each candidate keeps its best")
    p.add_argument("--quick", action="store_true", help="small shapes, 2 rounds (a smoke run)")
    p.add_argument("--plane-path", action="store_true",
                   help="run the plane-resident recursion where the states fit (rudnn.ctc.tuning.PLANE_PATH; "
                        "not on the cpu runtime)")
    a = p.parse_args(argv)
    ctc.tuning.PLANE_PATH = a.plane_path or ctc.tuning.PLANE_PATH
    torch = _torch()
    if torch is None:
        print("PyTorch is not installed: the baseline is F.ctc_loss (pip install torch)")
        return 1
    runtimes = a.runtimes.split(",") if a.runtimes else default_runtimes(torch)
    cases = a.cases.split(",") if a.cases else (QUICK_CASES if a.quick else CASES)
    rounds = 2 if a.quick else a.reps
    print(f"machine: {machine()}; torch {torch.__version__}")
    for name in runtimes:
        rt = kd.runtime(name)
        print(f"\nruntime {rt.name}: {rt.capabilities.device_name}; baseline F.ctc_loss on "
              f"{'cuda' if rt.name.startswith('cuda') else 'torch cpu'} ({torch.get_num_threads()} threads)")
        for case in cases:
            rows = [r for dt in a.dtypes.split(",") for r in run_case(rt, torch, case, dt, rounds)]
            print(table(rows, ["shape", "dtype", "pass", "ours ms", "torch ms", "speed-up", "ours GB/s"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
