"""rudnn.grid_sample on the cpu runtime: lanes_last.py (channels last, tuning.LANE_LAST and
LANE_LAST_BACKWARD, both on here whatever their defaults, and for 16-bit inputs too) against
lanes.py (LANE_LAST off) and PyTorch CPU, forward and backward, random and affine grids, in
one process, in turn (old, new, torch) so that a shared machine's load hits all three alike.

    python -m benchmarks.grid_lanes_cpu                         # f32 and bf16, [4, 16, 128²]
    python -m benchmarks.grid_lanes_cpu --shape 8,64,128 --dtypes f32 --rounds 5

Each round times a block of --reps calls of each (best wall time, and best process CPU time:
every thread's, which on a shared box says what the call costs whatever the others do;
torch's CPU time includes its OpenMP threads' spinning), then the table gives the median
over rounds of each block's best. Outputs are checked against torch first (max |ours −
torch| / max |torch|, F32 torch on the same dtype-rounded data). Backward: torch's
aten.grid_sampler_2d_backward (no autograd bookkeeping)."""
from __future__ import annotations

import argparse
import os
import statistics
import time

import kerneldsl as kd
import kerneldsl.replay as replay
import rudnn.grid_sample as gs
from rudnn.grid_sample import tuning

from .spatial_sampling import TDTYPES, affine_grid


def timed(rt, fn, reps: int) -> tuple:
    """(best wall s, best process CPU s) over reps calls, 20 ms apart (torch's spinning
    OpenMP threads settle)."""
    wall = cpu = float("inf")
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        rt.synchronize()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        time.sleep(0.02)
    return wall, cpu


def use(new: bool) -> None:
    """lanes_last.py (new: forward and backward, F32 and 16-bit, whatever the defaults) or lanes.py; replay's
    records forget the other choice (they replay the first call's launches whatever the
    tuning constants say now)."""
    tuning.LANE_LAST = tuning.LANE_LAST_BACKWARD = new
    tuning.LAST_ITEMSIZES = (2, 4) if new else (4,)
    replay.clear()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="4,16,128", help="N,C,S: input [N, C, S, S], grid [N, S, S, 2]")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    import torch
    F = torch.nn.functional
    rt = kd.runtime("cpu")
    n, c, s = (int(v) for v in args.shape.split(","))
    print(f"input [{n}, {c}, {s}, {s}], torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"load {os.getloadavg()[0]:.1f}")
    print("case | old (lanes.py) ms wall / cpu | new (lanes_last.py) ms wall / cpu | torch ms wall / cpu | "
          "torch/new wall | old/new cpu | err new, old")
    gen = torch.Generator().manual_seed(0)
    for dtype in args.dtypes.split(","):
        tdt = getattr(torch, TDTYPES[dtype])
        xt = torch.randn((n, c, s, s), generator=gen).to(tdt)
        got = torch.randn((n, c, s, s), generator=gen).to(tdt)
        grids = {"random": (torch.rand((n, s, s, 2), generator=gen) * 2.2 - 1.1).to(tdt),
                 "affine": affine_grid(torch, n, s, s, "cpu", tdt)}
        x, go = rt.tensor(xt.float().numpy(), dtype=dtype), rt.tensor(got.float().numpy(), dtype=dtype)
        for gname, gt in grids.items():
            g = rt.tensor(gt.float().numpy(), dtype=dtype)
            for kind in ("fwd", "bwd"):
                if kind == "fwd":
                    ours = (lambda: gs.grid_sample(x, g))
                    ref = (lambda: F.grid_sample(xt, gt, "bilinear", "zeros", align_corners=False))
                    exact = F.grid_sample(xt.float(), gt.float(), "bilinear", "zeros", align_corners=False)
                else:
                    ours = (lambda: gs.grid_sample_backward(x, g, go))
                    ref = (lambda: torch.ops.aten.grid_sampler_2d_backward(got, xt, gt, 0, 0, False, [True, True]))
                    exact = torch.ops.aten.grid_sampler_2d_backward(got.float(), xt.float(), gt.float(), 0, 0, False,
                                                                    [True, True])
                exact = exact if isinstance(exact, tuple) else (exact,)

                def err():
                    out = ours()
                    out = out if isinstance(out, tuple) else (out,)
                    return max(float((torch.from_numpy(a.numpy().astype("float32")) - b).abs().max()
                                     / b.abs().max()) for a, b in zip(out, exact))
                use(False)
                err_old = err()
                use(True)
                err_new = err()
                rows = {"old": [], "new": [], "torch": []}
                ref()
                for _ in range(args.rounds):
                    for name in ("old", "new", "torch"):
                        use(name != "old")
                        rows[name].append(timed(rt, ref if name == "torch" else ours, args.reps))
                use(True)
                med = {k: (statistics.median(w for w, _ in v) * 1e3, statistics.median(cp for _, cp in v) * 1e3)
                       for k, v in rows.items()}
                print(f"{gname} {kind} {dtype} | {med['old'][0]:.3f} / {med['old'][1]:.3f} | "
                      f"{med['new'][0]:.3f} / {med['new'][1]:.3f} | {med['torch'][0]:.3f} / {med['torch'][1]:.3f} | "
                      f"{med['torch'][0] / med['new'][0]:.2f}x | {med['old'][1] / med['new'][1]:.2f}x | "
                      f"{err_new:.1e}, {err_old:.1e}")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
