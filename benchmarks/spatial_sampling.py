"""rudnn.interpolation and rudnn.grid_sample next to PyTorch, forward and backward:
F.interpolate ×2 bilinear and nearest, F.grid_sample bilinear/zeros on a random and on an
affine grid. GB/s counts the tensors each call must read and write once.

    python -m benchmarks.spatial_sampling                    # every runtime here
    python -m benchmarks.spatial_sampling --quick            # a smoke run (small shapes, 2 reps)
    python -m benchmarks.spatial_sampling --runtimes cuda    # on the H200: N 32, C 64, 256²
    python -m benchmarks.spatial_sampling --runtimes cpu --shape 4,16,128 --dtypes f32,bf16

CPU runtimes: PyTorch CPU eager on host copies; ours and torch run in turn, --reps rounds
after a warm-up, each keeping its best wall time (the machine may be shared). CUDA: inputs
made on the GPU by torch and shared through DLPack; each side timed with CUDA events, the
median of --reps calls. Backward baselines call the aten backward ops directly
(upsample_*_backward, grid_sampler_2d_backward), without autograd's bookkeeping. Every
output is checked against torch in F32 on the same (dtype-rounded) data (max |ours −
torch| / max |torch|, both sides' outputs rounded to the dtype) before it is timed;
"speed-up" is torch time / ours.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

import kerneldsl as kd
import rudnn.grid_sample as gs
import rudnn.interpolation as interp

from .common import machine, median_device_time, median_torch_cuda_time, table

TDTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
GPU_SHAPE = (32, 64, 256)
CPU_SHAPE = (4, 16, 128)
QUICK_SHAPE = (2, 8, 48)
BLOCK = 3  # CPU: calls a side in a row, each timed (time_pair)
INTERP = {"bilinear": (interp.InterpolateMode.Linear, "bilinear"), "nearest": (interp.InterpolateMode.Nearest, "nearest")}


def default_runtimes(torch) -> list:
    avail = kd.available_runtimes()
    if "cuda" in avail and torch.cuda.is_available():
        return ["cuda"]
    return [r for r in avail if r != "cuda"]


def affine_grid(torch, n, h, w, device, dtype):
    """A mild rotation and zoom (every point inside the image)."""
    a = 0.2
    theta = torch.tensor([[math.cos(a) * 0.9, -math.sin(a) * 0.9, 0.05], [math.sin(a) * 0.9, math.cos(a) * 0.9, -0.05]],
                         device=device, dtype=torch.float32).expand(n, 2, 3)
    return torch.nn.functional.affine_grid(theta, (n, 1, h, w), align_corners=False).to(dtype)


def cases(torch, rt, shape, dtype, device, upcast=False):
    """[(name, our callable, torch callable, bytes moved)] for one dtype; with `upcast`, the
    torch callables run in F32 on the data rounded to `dtype` (the accuracy reference)."""
    F = torch.nn.functional
    n, c, s = shape
    tdt = getattr(torch, TDTYPES[dtype])
    gen = torch.Generator(device="cpu").manual_seed(0)
    x_t = torch.randn((n, c, s, s), generator=gen).to(device=device, dtype=tdt)
    g2_t = torch.randn((n, c, 2 * s, 2 * s), generator=gen).to(device=device, dtype=tdt)
    g1_t = torch.randn((n, c, s, s), generator=gen).to(device=device, dtype=tdt)
    grids = {"random": (torch.rand((n, s, s, 2), generator=gen) * 2.2 - 1.1).to(device=device, dtype=tdt),
             "affine": affine_grid(torch, n, s, s, device, tdt)}
    if upcast:
        x_t, g2_t, g1_t = x_t.float(), g2_t.float(), g1_t.float()
        grids = {k: v.float() for k, v in grids.items()}
    share = kd.from_dlpack if device == "cuda" else (lambda t: rt.tensor(t.float().numpy(), dtype=dtype))
    x, g2, g1 = share(x_t), share(g2_t), share(g1_t)
    item = x_t.element_size()
    out = []
    for name, (mode, tmode) in INTERP.items():
        opts = interp.InterpolateOptions(mode)
        size = (2 * s, 2 * s)
        moved = 5 * x_t.numel() * item
        fwd = ({} if tmode == "nearest" else {"align_corners": False})
        out.append((f"interpolate {name} x2 fwd", lambda o=opts: interp.interpolate(x, size, o),
                    lambda t=tmode, k=fwd: F.interpolate(x_t, size=size, mode=t, **k), moved))
        if tmode == "nearest":
            tb = lambda: torch.ops.aten.upsample_nearest2d_backward(g2_t, list(size), list(x_t.shape))  # noqa: E731
        else:
            tb = lambda: torch.ops.aten.upsample_bilinear2d_backward(g2_t, list(size), list(x_t.shape), False)  # noqa: E731
        out.append((f"interpolate {name} x2 bwd", lambda o=opts: interp.interpolate_backward(x, g2, size, o), tb,
                    moved))
    for gname, grid_t in grids.items():
        grid = share(grid_t)
        moved = (2 * x_t.numel() + grid_t.numel()) * item
        out.append((f"grid_sample {gname} fwd", lambda g=grid: gs.grid_sample(x, g),
                    lambda g=grid_t: F.grid_sample(x_t, g, "bilinear", "zeros", align_corners=False), moved))
        out.append((f"grid_sample {gname} bwd", lambda g=grid: gs.grid_sample_backward(x, g, g1),
                    lambda g=grid_t: torch.ops.aten.grid_sampler_2d_backward(g1_t, x_t, g, 0, 0, False, [True, True]),
                    moved + (2 * x_t.numel() + grid_t.numel()) * item))
    return out


def as_torch(torch, t, device):
    return torch.from_dlpack(t) if device == "cuda" else torch.from_numpy(t.numpy().astype(np.float32))


def max_rel_err(torch, ours, theirs, device) -> float:
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, (tuple, list)) else (theirs,)
    err = 0.0
    for a, b in zip(ours, theirs):
        a, b = as_torch(torch, a, device).float(), b.float()
        err = max(err, float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)))
    return err


def time_pair(torch, rt, fn_ours, fn_torch, reps, device) -> tuple:
    if device == "cuda":
        return median_device_time(rt, fn_ours, reps), median_torch_cuda_time(torch, fn_torch, reps)
    import time
    best = [float("inf"), float("inf")]
    fn_ours(), rt.synchronize(), fn_torch()
    for _ in range(reps):  # a block of BLOCK calls a side in turn: the first call after the other
        # side's meets torch's OpenMP threads still spinning on the cores (and ours waking), so a
        # call right after the other side's is not what either costs on its own
        for i, fn in enumerate((lambda: (fn_ours(), rt.synchronize()), fn_torch)):
            for _ in range(BLOCK):
                t0 = time.perf_counter()
                fn()
                best[i] = min(best[i], time.perf_counter() - t0)
    return tuple(best)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", default=None, help="comma-separated kerneldsl runtimes (default: see above)")
    p.add_argument("--dtypes", default="f32", help="comma-separated: f32,f16,bf16")
    p.add_argument("--shape", default=None, help="N,C,S (input [N, C, S, S]); default 32,64,256 on cuda, "
                                                 "4,16,128 on the host")
    p.add_argument("--reps", type=int, default=None, help="timed rounds (default 7, 2 with --quick)")
    p.add_argument("--only", default="", help="run the cases whose name contains this")
    p.add_argument("--quick", action="store_true", help="small shapes and 2 reps: a smoke run")
    args = p.parse_args(argv)
    import torch
    print("machine:", machine(), "| torch", torch.__version__)
    reps = args.reps or (2 if args.quick else 7)
    for rname in (args.runtimes.split(",") if args.runtimes else default_runtimes(torch)):
        rt = kd.runtime(rname)
        device = "cuda" if rname == "cuda" else "cpu"
        shape = (QUICK_SHAPE if args.quick else tuple(int(v) for v in args.shape.split(",")) if args.shape
                 else GPU_SHAPE if device == "cuda" else CPU_SHAPE)
        print(f"\nruntime {rt.name} ({rt.capabilities.device_name}); torch on {device}; input [N, C, S, S] = "
              f"{list(shape[:2]) + [shape[2]] * 2}")
        rows = []
        for dtype in args.dtypes.split(","):
            # the check's reference: torch in F32 on the same data; torch's own F16/BF16
            # kernels round the pixel coordinates to the dtype, so they are no oracle
            refs = {c[0]: c[2] for c in cases(torch, rt, shape, dtype, device, upcast=True)}
            for name, ours, theirs, moved in cases(torch, rt, shape, dtype, device):
                if args.only not in name:
                    continue
                err = max_rel_err(torch, ours(), refs.get(name, theirs)(), device)
                t_ours, t_torch = time_pair(torch, rt, ours, theirs, reps, device)
                rows.append((name, dtype, f"{t_ours * 1e3:.3f}", f"{t_torch * 1e3:.3f}", f"{t_torch / t_ours:.2f}x",
                             f"{moved / t_ours / 1e9:.1f}", f"{err:.1e}"))
        print(table(rows, ["case", "dtype", "ours ms", "torch ms", "speed-up", "ours GB/s", "max rel err"]))


if __name__ == "__main__":
    main()
