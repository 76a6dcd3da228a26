"""rudnn.grid_sample's GPU forms next to PyTorch in one run (issue 19): every forward form
(the direct kernel with flat cubes or tiles of grid points, chunks.py at several chunk sizes
and vote bounds, the staged forward at several tile widths, channels a step and box sizes,
the channels-last forward at several vector and transpose widths, and the device's choice
between it and chunks) and every backward form (the direct fixed-point scatter, the
channels-last backward at several units a point, the gathered input gradient of
backward_gather.py at several channel widths and out_grad layouts), plus the channels-last
transpose alone, on a random and an affine grid, bilinear / zeros / align_corners False,
input [N, C, S, S] and grid [N, S, S, 2].

    BENCH_TIMING=queued python -m benchmarks.grid_variants               # H200: N 32, C 64, 256²
    python -m benchmarks.grid_variants --runtimes opencl --quick         # a smoke run on the host
    BENCH_TIMING=queued python -m benchmarks.grid_variants --only bwd    # the backward forms alone
    BENCH_TIMING=queued python -m benchmarks.grid_variants --only fwd --shape 32,16,256   # few channels
    BENCH_TIMING=queued python -m benchmarks.grid_variants --only fwd --forms "last V2,choose"

A form is a set of tuning constants (rudnn.grid_sample.tuning), set before its timing with
the replay records dropped, so each call plans anew. Rounds: torch, then every form, in
turn, --rounds times (medians of --reps calls each; CUDA events, or device time alone
with BENCH_TIMING=queued); a row gives a form's best round, torch's best, and the range of
torch / ours over the rounds. Every form's output is first checked against torch in F32
on the same (dtype-rounded) data: max |ours − torch| / max |torch| over its outputs."""
from __future__ import annotations

import argparse
import contextlib

import kerneldsl as kd
import rudnn.grid_sample as gs
from kerneldsl import replay
from rudnn.grid_sample import tuning

from .common import machine, median_device_time, median_torch_cuda_time, table
from .spatial_sampling import TDTYPES, affine_grid, default_runtimes, max_rel_err


def staged(tile_w: int, channels: int, area: int) -> dict:
    """The staged forward's constants (the channels-last forward, which precedes it, off)."""
    return {"CHANNELS_LAST": False, "STAGED_FORWARD": True, "STAGED_TILE_W": tile_w, "STAGED_CHANNELS": channels,
            "STAGED_AREA": area}


FORWARD = {   # name -> tuning constants
    "direct": {"CHANNELS_LAST": False, "FORWARD_TILE_W": 0, "FORWARD_CHANNELS": 0},
    "direct tiles 32w": {"CHANNELS_LAST": False, "FORWARD_CHANNELS": 0, "FORWARD_TILE_W": 32},
    "direct tiles 16w": {"CHANNELS_LAST": False, "FORWARD_CHANNELS": 0, "FORWARD_TILE_W": 16},
    "direct tiles 8w": {"CHANNELS_LAST": False, "FORWARD_CHANNELS": 0, "FORWARD_TILE_W": 8},
    # chunks.py: K channels a unit, all at once in planes whose taps' box holds at most A pixels a lane
    **{f"chunks K{k} A{a}": {"CHANNELS_LAST": False, "FORWARD_CHANNELS": k, "FORWARD_AREA": a}
       for k, a in ((4, 32), (8, 32), (16, 32), (8, 0), (8, 2 ** 20), (8, 8), (8, 128))},
    "staged 16w CH4 A1024": staged(16, 4, 1024),
    "staged 16w CH8 A1024": staged(16, 8, 1024),
    "staged 32w CH4 A1024": staged(32, 4, 1024),
    "staged 16w CH2 A2048": staged(16, 2, 2048),
    # the channels-last forward alone, at several vector and transpose widths
    **{f"last V{v} T{t}": {"CHANNELS_LAST": True, "FORWARD_CHOOSE_CHANNELS": 0, "CHANNELS_LAST_VECTORS": v,
                           "TRANSPOSE_LANES": t} for v, t in ((1, 1), (1, 2), (1, 4), (2, 4))},
    # the device choosing between it and chunks of K channels, a channel at a time (gate.py)
    **{f"choose K{k}": {"CHANNELS_LAST": True, "FORWARD_CHOOSE_CHANNELS": k, "CHANNELS_LAST_VECTORS": 2,
                        "TRANSPOSE_LANES": 4, "GATED_CUBES_PER_UNIT": 0} for k in (4, 8, 16)},
    # ... with the gated transpose looping over the batch in 8 cubes a compute unit
    "choose K8 looping": {"CHANNELS_LAST": True, "FORWARD_CHOOSE_CHANNELS": 8, "CHANNELS_LAST_VECTORS": 2,
                          "TRANSPOSE_LANES": 4, "GATED_CUBES_PER_UNIT": 8},
}
BACKWARD = {   # the scatter forms with the gathered input gradient off, then the gathered forms
    "direct": {"BACKWARD_GATHER": False, "BACKWARD_CHANNELS_LAST": False},
    "last G8": {"BACKWARD_GATHER": False, "BACKWARD_CHANNELS_LAST": True, "BACKWARD_GROUP": 8},
    "last G16": {"BACKWARD_GATHER": False, "BACKWARD_CHANNELS_LAST": True, "BACKWARD_GROUP": 16},
    "last G32": {"BACKWARD_GATHER": False, "BACKWARD_CHANNELS_LAST": True, "BACKWARD_GROUP": 32},
    "last G8 go-rows": {"BACKWARD_GATHER": False, "BACKWARD_CHANNELS_LAST": True, "BACKWARD_GROUP": 8,
                        "BACKWARD_STAGED_CHANNELS": 64},
    "last G16 go-rows": {"BACKWARD_GATHER": False, "BACKWARD_CHANNELS_LAST": True, "BACKWARD_GROUP": 16,
                         "BACKWARD_STAGED_CHANNELS": 64},
    "last G32 go-rows": {"BACKWARD_GATHER": False, "BACKWARD_CHANNELS_LAST": True, "BACKWARD_GROUP": 32,
                         "BACKWARD_STAGED_CHANNELS": 64},
    # backward_gather.py (issue 19): K = BYTES of channels a unit; out_grad's channels-last copy
    # (last) or [N, C, points] itself (nchw); go-rows: no out_grad copy at all (the grid
    # gradient reads its rows through shared memory, the gather reads [N, C, points]); direct:
    # no copies at all (the grid gradient by sample.py's kernel, a unit a point)
    **{f"gather G{g} K{b}B {'last' if last else 'nchw'}": {
        "BACKWARD_GATHER": True, "BACKWARD_GROUP": g, "BACKWARD_GATHER_BYTES": b, "BACKWARD_GATHER_LAST": last,
        "BACKWARD_STAGED_CHANNELS": 0} for g, b, last in ((8, 32, True), (8, 16, True), (8, 64, True),
                                                          (16, 32, True), (8, 32, False))},
    "gather G8 K32B last scalar": {"BACKWARD_GATHER": True, "BACKWARD_GROUP": 8, "BACKWARD_GATHER_BYTES": 32,
                                   "BACKWARD_GATHER_LAST": True, "BACKWARD_STAGED_CHANNELS": 0,
                                   "BACKWARD_GATHER_VECTOR": 1},
    "gather G8 K32B last flags10": {"BACKWARD_GATHER": True, "BACKWARD_GROUP": 8, "BACKWARD_GATHER_BYTES": 32,
                                   "BACKWARD_GATHER_LAST": True, "BACKWARD_STAGED_CHANNELS": 0,
                                   "BACKWARD_GATHER_FLAGS": 10},
    **{f"gather G8 K32B last finite flags{f}": {
        "BACKWARD_GATHER": True, "BACKWARD_GROUP": 8, "BACKWARD_GATHER_BYTES": 32, "BACKWARD_GATHER_LAST": True,
        "BACKWARD_STAGED_CHANNELS": 0, "BACKWARD_GATHER_FINITE_PATH": True, "BACKWARD_GATHER_FLAGS": f}
       for f in (1, 10)},
    **{f"gather G8 K{b}B last finite flags10 {'records' if r else 'index'}": {
        "BACKWARD_GATHER": True, "BACKWARD_GROUP": 8, "BACKWARD_GATHER_BYTES": b, "BACKWARD_GATHER_LAST": True,
        "BACKWARD_STAGED_CHANNELS": 0, "BACKWARD_GATHER_FINITE_PATH": True, "BACKWARD_GATHER_FLAGS": 10,
        "BACKWARD_GATHER_RECORDS": r, "BACKWARD_GATHER_FLAT": 0} for b, r in ((32, False), (32, True), (64, True))},
    **{f"gather G8 K{b}B last finite flags10 records flat{f}": {
        "BACKWARD_GATHER": True, "BACKWARD_GROUP": 8, "BACKWARD_GATHER_BYTES": b, "BACKWARD_GATHER_LAST": True,
        "BACKWARD_STAGED_CHANNELS": 0, "BACKWARD_GATHER_FINITE_PATH": True, "BACKWARD_GATHER_FLAGS": 10,
        "BACKWARD_GATHER_RECORDS": True, "BACKWARD_GATHER_FLAT": f} for b, f in ((32, 1), (32, 2), (32, 4), (64, 2))},
    "gather choose (device: no copies where smooth)": {"BACKWARD_GATHER": True, "BACKWARD_GATHER_CHOOSE": True},
    "gather choose, gated launches looping (8 cubes a unit)": {"BACKWARD_GATHER": True, "BACKWARD_GATHER_CHOOSE": True,
                                                              "GATED_CUBES_PER_UNIT": 8},
    **{f"gather choose, grid gradient CU{cu}": {"BACKWARD_GATHER": True, "BACKWARD_GATHER_CHOOSE": True,
                                                "GRID_GRAD_CHANNELS": cu} for cu in (1, 2, 3, 4, 8)},
    "gather choose, grid gradient CU2, gated launches looping": {
        "BACKWARD_GATHER": True, "BACKWARD_GATHER_CHOOSE": True, "GRID_GRAD_CHANNELS": 2, "GATED_CUBES_PER_UNIT": 8},
    **{f"gather K32B direct CU{cu}": {"BACKWARD_GATHER": True, "BACKWARD_GATHER_BYTES": 32,
                                      "BACKWARD_GATHER_GRID_DIRECT": True, "GRID_GRAD_CHANNELS": cu} for cu in (1, 4)},
    "gather K32B direct": {"BACKWARD_GATHER": True, "BACKWARD_GATHER_BYTES": 32, "BACKWARD_GATHER_GRID_DIRECT": True},
    "gather G8 K32B go-rows": {"BACKWARD_GATHER": True, "BACKWARD_GROUP": 8, "BACKWARD_GATHER_BYTES": 32,
                               "BACKWARD_GATHER_LAST": False, "BACKWARD_STAGED_CHANNELS": 64},
}
TRANSPOSE = {f"transpose T{v}": {"TRANSPOSE_LANES": v} for v in (1, 2, 4)}


@contextlib.contextmanager
def constants(settings: dict):
    """tuning constants set to `settings` (records of earlier plans dropped), then restored."""
    old = {k: getattr(tuning, k) for k in settings}
    for k, v in settings.items():
        setattr(tuning, k, v)
    replay.clear()
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(tuning, k, v)
        replay.clear()


def timed(rt, fn, settings: dict, reps: int) -> float:
    with constants(settings):
        return median_device_time(rt, fn, reps)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", default=None, help="comma-separated kerneldsl runtimes (default: cuda where present)")
    p.add_argument("--dtypes", default="bf16,f32")
    p.add_argument("--shape", default="32,64,256", help="N,C,S")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="", help="cases whose name contains this (e.g. 'random fwd', 'bwd')")
    p.add_argument("--forms", default="", help="comma-separated: forms whose name contains one of these")
    p.add_argument("--quick", action="store_true", help="N 2, C 32, S 48, 2 reps, 2 rounds: a smoke run")
    args = p.parse_args(argv)
    import torch
    F = torch.nn.functional
    print("machine:", machine(), "| torch", torch.__version__)
    n, c, s = (2, 32, 48) if args.quick else tuple(int(v) for v in args.shape.split(","))
    reps, rounds = (2, 2) if args.quick else (args.reps, args.rounds)
    for rname in (args.runtimes.split(",") if args.runtimes else default_runtimes(torch)):
        rt = kd.runtime(rname)
        device = "cuda" if rname == "cuda" else "cpu"
        share = kd.from_dlpack if device == "cuda" else (lambda t, d: rt.tensor(t.float().numpy(), dtype=d))
        print(f"\nruntime {rt.name} ({rt.capabilities.device_name}); input [{n}, {c}, {s}, {s}]")
        rows = []
        for dtype in args.dtypes.split(","):
            tdt = getattr(torch, TDTYPES[dtype])
            gen = torch.Generator(device="cpu").manual_seed(0)
            x_t = torch.randn((n, c, s, s), generator=gen).to(device=device, dtype=tdt)
            go_t = torch.randn((n, c, s, s), generator=gen).to(device=device, dtype=tdt)
            grids = {"random": (torch.rand((n, s, s, 2), generator=gen) * 2.2 - 1.1).to(device=device, dtype=tdt),
                     "affine": affine_grid(torch, n, s, s, device, tdt)}
            wrap = (lambda t: share(t)) if device == "cuda" else (lambda t: share(t, dtype))
            x, go = wrap(x_t), wrap(go_t)
            item = x_t.element_size()
            x5 = x.reshape(n, c, 1, s, s)
            for v, settings in TRANSPOSE.items():
                if args.only and args.only not in "transpose":
                    continue
                t = timed(rt, lambda: gs._to_channels_last(x5), settings, reps)
                rate = 2 * x_t.numel() * item / t / 1e9
                rows.append((f"{v} (input copy)", dtype, f"{t * 1e3:.3f}", "-", "-", f"{rate:.0f}", "-"))
                print(*rows[-1], flush=True)
            for gname, grid_t in grids.items():
                grid = wrap(grid_t)
                xf, gf, gof = x_t.float(), grid_t.float(), go_t.float()
                fwd_ref = F.grid_sample(xf, gf, "bilinear", "zeros", align_corners=False)
                bwd_ref = torch.ops.aten.grid_sampler_2d_backward(gof, xf, gf, 0, 0, False, [True, True])
                work = {
                    f"grid_sample {gname} fwd": (FORWARD, lambda g=grid: gs.grid_sample(x, g),
                                                 lambda g=grid_t: F.grid_sample(x_t, g, "bilinear", "zeros",
                                                                                align_corners=False),
                                                 fwd_ref, (2 * x_t.numel() + grid_t.numel()) * item),
                    f"grid_sample {gname} bwd": (BACKWARD, lambda g=grid: gs.grid_sample_backward(x, g, go),
                                                 lambda g=grid_t: torch.ops.aten.grid_sampler_2d_backward(
                                                     go_t, x_t, g, 0, 0, False, [True, True]),
                                                 bwd_ref, (3 * x_t.numel() + 2 * grid_t.numel()) * item),
                }
                for name, (forms, ours, theirs, ref, moved) in work.items():
                    if args.only not in name:
                        continue
                    if args.forms:
                        forms = {v: f for v, f in forms.items() if any(w in v for w in args.forms.split(","))}
                    errs = {}
                    for v, settings in forms.items():
                        with constants(settings):
                            errs[v] = max_rel_err(torch, ours(), ref, device)
                    times = {v: [] for v in forms}
                    base = []
                    for _ in range(rounds):   # torch, then every form, in turn
                        base.append(median_torch_cuda_time(torch, theirs, reps) if device == "cuda"
                                    else median_device_time(rt, theirs, reps))
                        for v, settings in forms.items():
                            times[v].append(timed(rt, ours, settings, reps))
                    for v, ts in times.items():
                        ratios = [b / o for b, o in zip(base, ts)]
                        rows.append((f"{name}: {v}", dtype, f"{min(ts) * 1e3:.3f}", f"{min(base) * 1e3:.3f}",
                                     f"{min(ratios):.2f}-{max(ratios):.2f}x", f"{moved / min(ts) / 1e9:.0f}",
                                     f"{errs[v]:.1e}"))
                        print(*rows[-1], flush=True)
        print(table(rows, ["case: form", "dtype", "ours ms", "torch ms", "torch/ours", "ours GB/s", "max rel err"]))
    return 0


if __name__ == "__main__":
    main()
