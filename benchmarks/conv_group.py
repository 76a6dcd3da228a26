"""The channels-last bf16 forward convolution on group products (ops/convolution/
implicit_gemm_group.py) in several tile shapes, next to today's async-copy ring
(implicit_gemm_nhwc.py) and cuDNN, on the ResNet-50 3x3 set of issue 17 (N 64, C = K =
64/128/256 at 56²/28²/14², padding 1).

    python -m benchmarks.conv_group                    # the cuda runtime, every config
    python -m benchmarks.conv_group --quick --runtimes cpu   # a smoke run (N 2, cpu, no baseline)
    python -m benchmarks.conv_group --shapes 64@56 --only "g2m1,persistent"   # a part of the sweep

Each variant is checked against torch first (relative L2 error), then the variants and cuDNN
(`F.conv2d` on channels_last tensors, `cudnn.benchmark`) are timed in turn, --rounds rounds of
the median of --reps launches each (CUDA events); the table gives each variant's best round and
the range of its ratio to cuDNN over the rounds ("ratio" = cuDNN time / ours). Group variants
are named BMxBN/STAGES/INFLIGHT gGROUPSmMI (see tile_shape and run_forward), "persistent ...
xC" the persistent form with C cubes a multiprocessor in all (implicit_gemm_group_persistent;
"persistent W": the weights copied once a cube), a trailing "P" the epilogue storing column
pairs (pairs=True); they run wherever the runtime can launch them (native group products only
on the H200).
"""
from __future__ import annotations

import numpy as np

import kerneldsl as kd
from rudnn.convolution import ConvOptions, implicit_gemm_group, implicit_gemm_group_persistent, implicit_gemm_nhwc
from rudnn.convolution.problem import as_5d, user_shape, validate_forward

from .common import VARIANT_HEADERS, rounds_in_turn, sweep_arguments, table, variant_rows
from .convolution import rel_err

SHAPES = {"r50-3x3-64@56": (64, 64, 56), "r50-3x3-128@28": (128, 128, 28), "r50-3x3-256@14": (256, 256, 14)}
# (BN, STAGES, INFLIGHT, GROUPS, MI); BN None: tile_shape's. GROUPS x MI 64-row fragments a cube:
# BM = 128 (2, 1: today's), 256 (4, 1: 16 planes; 2, 2: two fragments a group), issue 17.
CONFIGS = ((None, 3, 0, 2, 1), (None, 4, 1, 2, 1), (None, 4, 0, 2, 1), (128, 3, 0, 2, 1),
           (None, 3, 0, 4, 1), (None, 2, 0, 4, 1), (None, 4, 1, 4, 1), (None, 4, 0, 4, 1),
           (None, 3, 0, 2, 2), (None, 2, 0, 2, 2), (None, 4, 1, 2, 2), (None, 4, 0, 2, 2))

# the persistent form (implicit_gemm_group_persistent): (BN, STAGES, INFLIGHT, GROUPS, MI, cubes a SM,
# weights stationary)
PERSISTENT = ((None, 3, 0, 2, 1, 2, False), (None, 4, 1, 2, 1, 2, False), (None, 4, 0, 2, 1, 2, False),
              (None, 3, 0, 2, 1, 1, False), (None, 3, 0, 2, 2, 1, False), (None, 4, 1, 2, 2, 1, False),
              (None, 3, 0, 4, 1, 1, False), (None, 3, 0, 2, 1, 1, True), (None, 4, 0, 2, 1, 1, True),
              (None, 3, 0, 2, 2, 1, True), (None, 3, 0, 4, 1, 1, True))

# epilogue storing column pairs (run_forward pairs=True): (BN, STAGES, INFLIGHT, GROUPS, MI)
PAIRED = ((None, 3, 0, 2, 1), (None, 3, 0, 4, 1), (None, 3, 0, 2, 2))
# and the persistent form with it: (BN, STAGES, INFLIGHT, GROUPS, MI, cubes a SM, weights stationary)
PAIRED_PERSISTENT = ((None, 3, 0, 2, 1, 2, False), (None, 3, 0, 2, 1, 1, True), (None, 3, 0, 2, 2, 1, False))


def variants(p, dummy):
    """name -> fn(y5): a launch of one forward into y5."""
    out = {"ring (plane fragments)": lambda y5: implicit_gemm_nhwc.run_forward(p, y5, dummy)}
    default_bn = implicit_gemm_group.tile_shape(p.runtime.capabilities, p.geo.Kg)[0]
    for bn, stages, inflight, groups, mi in CONFIGS:
        bn = bn or default_bn
        if implicit_gemm_group.fits(p, bn, stages, groups, mi):
            bm = implicit_gemm_group.block_m(groups, mi)
            out[f"group {bm}x{bn}/{stages}/{inflight} g{groups}m{mi}"] = (
                lambda y5, bn=bn, s=stages, i=inflight, gr=groups, m=mi:
                implicit_gemm_group.run_forward(p, y5, dummy, bn, s, i, gr, m, pairs=False))
    for bn, stages, inflight, groups, mi, per, st in PERSISTENT:
        bn = bn or default_bn
        if implicit_gemm_group_persistent.fits(p, bn, stages, inflight, groups, mi, st):
            bm = implicit_gemm_group.block_m(groups, mi)
            out[f"persistent{' W' if st else ''} {bm}x{bn}/{stages}/{inflight} g{groups}m{mi} x{per}"] = (
                lambda y5, bn=bn, s=stages, i=inflight, gr=groups, m=mi, c=per, st=st:
                implicit_gemm_group_persistent.run_forward(p, y5, dummy, bn, s, i, gr, m, c, st))
    for bn, stages, inflight, groups, mi in PAIRED:
        bn = bn or default_bn
        if implicit_gemm_group.fits(p, bn, stages, groups, mi):
            bm = implicit_gemm_group.block_m(groups, mi)
            out[f"group {bm}x{bn}/{stages}/{inflight} g{groups}m{mi} P"] = (
                lambda y5, bn=bn, s=stages, i=inflight, gr=groups, m=mi:
                implicit_gemm_group.run_forward(p, y5, dummy, bn, s, i, gr, m, pairs=True))
    for bn, stages, inflight, groups, mi, per, st in PAIRED_PERSISTENT:
        bn = bn or default_bn
        if implicit_gemm_group_persistent.fits(p, bn, stages, inflight, groups, mi, st):
            bm = implicit_gemm_group.block_m(groups, mi)
            out[f"persistent{' W' if st else ''} {bm}x{bn}/{stages}/{inflight} g{groups}m{mi} x{per} P"] = (
                lambda y5, bn=bn, s=stages, i=inflight, gr=groups, m=mi, c=per, st=st:
                implicit_gemm_group_persistent.run_forward(p, y5, dummy, bn, s, i, gr, m, c, st, pairs=True))
    return out


def main(argv=None):
    args = sweep_arguments(__doc__, argv)
    import torch
    F = torch.nn.functional
    torch.backends.cudnn.benchmark = True
    rows = []
    for rt_name in args.runtimes.split(","):
        rt = kd.runtime(rt_name)
        cuda = rt.capabilities.backend == "cuda" and torch.cuda.is_available()
        reps = 3 if args.quick else args.reps
        for name, (C, K, H) in SHAPES.items():
            if args.shapes and not any(t in name for t in args.shapes.split(",")):
                continue
            N = 2 if args.quick else 64
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(N, C, H, H, generator=gen).bfloat16()
            w = (torch.randn(K, C, 3, 3, generator=gen) / (9 * C) ** 0.5).bfloat16()
            kx = rt.tensor(x.permute(0, 2, 3, 1).contiguous().float().numpy(), dtype="bf16")
            kw = rt.tensor(w.permute(0, 2, 3, 1).contiguous().float().numpy(), dtype="bf16")
            p = validate_forward("conv_forward_nhwc", kx, kw, None, ConvOptions(padding=1), True)
            g = p.geo
            shape = user_shape((g.B, g.K, *g.O), g.rank, True)
            y5 = as_5d(rt.empty(shape, "bf16"), g.rank, True)
            dummy = rt.zeros((1,), "f32")
            if cuda:
                xc = x.cuda().to(memory_format=torch.channels_last)
                wc = w.cuda().to(memory_format=torch.channels_last)
                base = lambda: F.conv2d(xc, wc, None, 1, 1)  # noqa: E731
                want = base().float().permute(0, 2, 3, 1).cpu().numpy()
            else:
                base = None
                want = F.conv2d(x.float(), w.float(), None, 1, 1).permute(0, 2, 3, 1).numpy()
            runs = variants(p, dummy)
            if args.only:
                runs = {v: fn for v, fn in runs.items() if any(t in v for t in args.only.split(","))}
            errs = {}
            for v, fn in runs.items():
                check = rt.tensor(np.full(shape, np.nan, np.float32), dtype="bf16")  # nothing left from before
                fn(as_5d(check, g.rank, True))
                rt.synchronize()
                errs[v] = rel_err(check.numpy().astype(np.float32), want)
            times, base_times = rounds_in_turn(rt, torch, base, runs, y5, args.rounds, reps)
            flops = 2.0 * N * K * H * H * C * 9
            rows += variant_rows((rt_name, name, f"N{N}"), times, base_times, errs, flops)
    print(table(rows, VARIANT_HEADERS))


if __name__ == "__main__":
    main()
