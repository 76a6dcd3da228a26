"""The bf16 weight gradient on group products (ops/convolution/implicit_gemm_wgrad.py) in
several tile shapes and reduction splits, next to the split gather GEMM it replaces
(implicit_gemm.run_weight_backward_gather) and cuDNN, on the ResNet-50 3x3 set of issue 17
(N 64, C = K = 64/128/256 at 56²/28²/14², padding 1).

    python -m benchmarks.conv_wgrad                    # the cuda runtime, every config
    python -m benchmarks.conv_wgrad --quick --runtimes cpu   # a smoke run (N 2, cpu, no baseline)

Each variant is checked against torch first (relative L2 error), then the variants and cuDNN
(`aten.convolution_backward` for the weight alone, NCHW, `cudnn.benchmark`) are timed in turn,
--rounds rounds of the median of --reps calls each (CUDA events); the table gives each
variant's best round and the range of its ratio to cuDNN over the rounds ("ratio" = cuDNN
time / ours). Group variants are named BN/STAGES/INFLIGHT xS (splits: S times
weight_splits'); "copies only" times the two channels-last transposes a call makes.
"""
from __future__ import annotations

import numpy as np

import kerneldsl as kd
from rudnn.convolution import ConvOptions, implicit_gemm, implicit_gemm_wgrad as wg
from rudnn.convolution.problem import as_5d, validate_weight_backward

from .common import VARIANT_HEADERS, rounds_in_turn, sweep_arguments, table, variant_rows
from .convolution import rel_err

SHAPES = {"r50-3x3-64@56": (64, 64, 56), "r50-3x3-128@28": (128, 128, 28), "r50-3x3-256@14": (256, 256, 14)}
# (BN, STAGES, INFLIGHT, splits scale); BN None: tile_shape's
CONFIGS = ((None, 3, 0, 1.0), (None, 3, 0, 0.5), (None, 3, 0, 2.0), (None, 2, 0, 1.0), (None, 4, 1, 1.0),
           (None, 4, 0, 1.0), (64, 3, 0, 1.0), (64, 4, 1, 1.0))


def variants(p):
    """name -> fn(dw5): one weight gradient into dw5."""
    caps = p.runtime.capabilities
    out = {"gather GEMM (before)": lambda dw5: implicit_gemm.run_weight_backward_gather(p, dw5)}
    default_bn = wg.tile_shape(caps)[0]
    for bn, stages, inflight, scale in CONFIGS:
        bn = bn or default_bn
        if wg.fits(caps, bn, stages):
            splits = max(1, round(wg.weight_splits(p, bn, stages) * scale))
            out[f"group {bn}/{stages}/{inflight} x{scale:g} ({splits} splits)"] = (
                lambda dw5, bn=bn, s=stages, i=inflight, sp=splits: wg.run_weight_backward(p, dw5, bn, s, i, sp))
    out["copies only"] = lambda dw5: (wg._channels_last(p.runtime, p.dy, p.dtype),
                                      wg._channels_last(p.runtime, p.x, p.dtype))
    return out


def main(argv=None):
    args = sweep_arguments(__doc__, argv)
    import torch
    torch.backends.cudnn.benchmark = True
    rows = []
    for rt_name in args.runtimes.split(","):
        rt = kd.runtime(rt_name)
        cuda = rt.capabilities.backend == "cuda" and torch.cuda.is_available()
        reps = 3 if args.quick else args.reps
        for name, (C, K, H) in SHAPES.items():
            N = 2 if args.quick else 64
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(N, C, H, H, generator=gen).bfloat16()
            dy = torch.randn(N, K, H, H, generator=gen).bfloat16()
            kx = rt.tensor(x.float().numpy(), dtype="bf16")
            kdy = rt.tensor(dy.float().numpy(), dtype="bf16")
            p = validate_weight_backward(kx, kdy, (K, C, 3, 3), ConvOptions(padding=1))
            dw5 = as_5d(rt.empty((K, C, 3, 3), "bf16"), 2, False)
            w0 = torch.zeros(K, C, 3, 3).bfloat16()
            if cuda:
                xc, dyc, wc = x.cuda(), dy.cuda(), w0.cuda()
                base = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                    dyc, xc, wc, None, (1, 1), (1, 1), (1, 1), False, (0, 0), 1, (False, True, False))[1]
                want = base().float().cpu().numpy()
            else:
                base = None
                want = torch.nn.grad.conv2d_weight(x.float(), w0.shape, dy.float(), 1, 1).numpy()
            runs = variants(p)
            errs = {}
            for v, fn in runs.items():
                check = rt.tensor(np.full((K, C, 3, 3), np.nan, np.float32), dtype="bf16")  # nothing left from before
                fn(as_5d(check, 2, False))
                rt.synchronize()
                errs[v] = rel_err(check.numpy().astype(np.float32), want) if v != "copies only" else 0.0
            times, base_times = rounds_in_turn(rt, torch, base, runs, dw5, args.rounds, reps)
            flops = 2.0 * N * K * H * H * C * 9
            rows += variant_rows((rt_name, name, f"N{N}"), times, base_times, errs, flops)
    print(table(rows, VARIANT_HEADERS))


if __name__ == "__main__":
    main()
