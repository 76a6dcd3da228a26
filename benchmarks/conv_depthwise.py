"""The depthwise kernels (ops/convolution/depthwise.py) in their variants, next to direct.py's
units plan they replace and cuDNN, on depthwise 3x3 convolutions of issue 17 (N 64, C = K =
groups, padding 1, stride 1; bf16).

    python -m benchmarks.conv_depthwise                          # the cuda runtime, every variant
    python -m benchmarks.conv_depthwise --quick --runtimes opencl  # a smoke run (N 2, no baseline)

Passes and their baselines (`cudnn.benchmark`): the forward in channels-last layout (ours:
x [N, H, W, C]; cuDNN: F.conv2d on channels_last tensors), the forward in NCHW (F.conv2d),
the data and the weight gradients in NCHW (`aten.convolution_backward` for one output alone).
Variants: "vector PXxROWS" (the channels-last vector kernel, PX pixels of a row and ROWS rows
a unit), "tiles" (the plane-tile kernels: forward, and the data gradient's gather), "weight
xS" (the split-batch weight partials, S times weight_splits' splits), "units (before)"
(direct.py). Each variant is checked against torch first (relative L2 error), then the
variants and cuDNN are timed in turn, --rounds rounds of the median of --reps calls each
(CUDA events); the table gives each variant's best round and the range of its ratio to cuDNN
over the rounds ("ratio" = cuDNN time / ours). The last column's TFLOP/s are tiny by nature:
these passes are memory-bound (two 25.7 MB tensors at 28², 256 channels: ~17 µs at 3 TB/s).
"""
from __future__ import annotations

import numpy as np

import kerneldsl as kd
from rudnn.convolution import ConvOptions, depthwise, direct
from rudnn.convolution.problem import as_5d, validate_data_backward, validate_forward, validate_weight_backward

from .common import VARIANT_HEADERS, rounds_in_turn, sweep_arguments, table, variant_rows
from .convolution import rel_err

SHAPES = {"dw-3x3-256@28": (256, 28), "dw-3x3-128@56": (128, 56), "dw-3x3-512@14": (512, 14)}
VECTOR_TILES = ((4, 2), (2, 2), (2, 4), (4, 1), (4, 4), (1, 4))   # (PX, ROWS) of the channels-last forward
WEIGHT_SCALES = (1.0, 0.5, 2.0)


def forward_variants(p, dummy, channels_last: bool) -> dict:
    """name -> fn(out5): one forward pass into out5."""
    out = {}
    if channels_last:
        for px, rows in VECTOR_TILES:
            out[f"vector {px}x{rows}"] = lambda y5, px=px, rows=rows: depthwise.run_forward(p, y5, dummy, px, rows)
    out["tiles"] = lambda y5: depthwise.run_forward_tiles(p, y5, dummy)
    out["units (before)"] = lambda y5: direct.run_forward(p, y5, dummy)
    return out


def weight_variants(p) -> dict:
    out = {}
    base = depthwise.weight_splits
    for scale in WEIGHT_SCALES:
        def run(dw5, scale=scale):
            depthwise.weight_splits = lambda q: max(1, min(q.geo.B, round(base(q) * scale)))
            try:
                depthwise.run_weight_backward(p, dw5)
            finally:
                depthwise.weight_splits = base
        out[f"weight x{scale:g} ({max(1, min(p.geo.B, round(base(p) * scale)))} splits)"] = run
    out["units (before)"] = lambda dw5: direct.run_weight_backward(p, dw5)
    return out


def main(argv=None):
    args = sweep_arguments(__doc__, argv)
    import torch
    F = torch.nn.functional
    torch.backends.cudnn.benchmark = True
    bwd = torch.ops.aten.convolution_backward
    rows = []
    for rt_name in args.runtimes.split(","):
        rt = kd.runtime(rt_name)
        dummy = rt.zeros((1,), "f32")
        cuda = rt.capabilities.backend == "cuda" and torch.cuda.is_available()
        reps = 3 if args.quick else args.reps
        for name, (C, H) in SHAPES.items():
            N = 2 if args.quick else 64
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(N, C, H, H, generator=gen).bfloat16()
            w = (torch.randn(C, 1, 3, 3, generator=gen) / 3).bfloat16()
            dy = torch.randn(N, C, H, H, generator=gen).bfloat16()
            up = lambda a: rt.tensor(a.float().numpy(), dtype="bf16")  # noqa: E731
            kx, kw, kdy = up(x), up(w), up(dy)
            kxl, kwl = up(x.permute(0, 2, 3, 1).contiguous()), up(w.permute(0, 2, 3, 1).contiguous())
            opts = ConvOptions(padding=1, groups=C)
            if cuda:
                xc, wc, dyc = x.cuda(), w.cuda(), dy.cuda()
                xcl, wcl = xc.to(memory_format=torch.channels_last), wc.to(memory_format=torch.channels_last)
                bases = {"fwd NHWC": lambda: F.conv2d(xcl, wcl, None, 1, 1, 1, C),
                         "fwd NCHW": lambda: F.conv2d(xc, wc, None, 1, 1, 1, C),
                         "data": lambda: bwd(dyc, xc, wc, None, (1, 1), (1, 1), (1, 1), False, (0, 0), C,
                                             (True, False, False))[0],
                         "weight": lambda: bwd(dyc, xc, wc, None, (1, 1), (1, 1), (1, 1), False, (0, 0), C,
                                               (False, True, False))[1]}
                wants = {k: f().float().cpu() for k, f in bases.items()}
            else:
                bases = dict.fromkeys(("fwd NHWC", "fwd NCHW", "data", "weight"))
                xt, wt = x.float().requires_grad_(), w.float().requires_grad_()
                y = F.conv2d(xt, wt, None, 1, 1, 1, C)
                y.backward(dy.float())
                wants = {"fwd NHWC": y.detach(), "fwd NCHW": y.detach(), "data": xt.grad, "weight": wt.grad}
            pl = validate_forward("conv_forward_nhwc", kxl, kwl, None, opts, True)
            pn = validate_forward("conv_forward", kx, kw, None, opts, False)
            pd = validate_data_backward(kdy, kw, (N, C, H, H), opts)
            pw = validate_weight_backward(kx, kdy, (C, 1, 3, 3), opts)
            passes = {
                "fwd NHWC": (forward_variants(pl, dummy, True), (N, H, H, C), True),
                "fwd NCHW": (forward_variants(pn, dummy, False), (N, C, H, H), False),
                "data": ({"tiles (gather)": lambda dx5: depthwise.run_data_backward(pd, dx5, dummy),
                          "units (before)": lambda dx5: direct.run_data_backward(pd, dx5)}, (N, C, H, H), False),
                "weight": (weight_variants(pw), (C, 1, 3, 3), False),
            }
            for pss, (runs, shape, cl) in passes.items():
                errs = {}
                for v, fn in runs.items():
                    check = rt.tensor(np.full(shape, np.nan, np.float32), dtype="bf16")
                    fn(as_5d(check, 2, cl))
                    got = torch.from_numpy(check.numpy().astype(np.float32))
                    errs[v] = rel_err(got.permute(0, 3, 1, 2) if cl else got, wants[pss])
                out = as_5d(rt.empty(shape, "bf16"), 2, cl)
                times, base_times = rounds_in_turn(rt, torch, bases[pss], runs, out, args.rounds, reps)
                flops = 2.0 * N * C * H * H * 9
                rows += variant_rows((rt_name, f"{name} {pss}", f"N{N}"), times, base_times, errs, flops)
    print(table(rows, VARIANT_HEADERS))


if __name__ == "__main__":
    main()
