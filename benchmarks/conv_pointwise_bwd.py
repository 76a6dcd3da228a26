"""The 1×1 backward passes as batched products on NCHW operands (ops/convolution/
pointwise_backward.py, issue 17) in several tile shapes, next to the paths they replace (the
channels-last copies and implicit GEMMs of implicit_gemm_dgrad / implicit_gemm_wgrad, i.e.
`pointwise_backward.ENABLED = False`) and cuDNN, on the issue's 1×1 case: N 64, C 256 → K 1024
at 56², bf16, NCHW.

    python -m benchmarks.conv_pointwise_bwd                         # the cuda runtime, both passes
    python -m benchmarks.conv_pointwise_bwd --passes data --only new
    python -m benchmarks.conv_pointwise_bwd --quick --runtimes cpu  # a smoke run (N 2, 8², forced)

Every variant is checked against torch first (relative L2 error against cuDNN's result, or
torch CPU's), then the variants and cuDNN (`aten.convolution_backward` for the one gradient,
`cudnn.benchmark`) are timed in turn, --rounds rounds of the median of --reps calls (CUDA
events); "ratio" = cuDNN time / ours. Data variants are named new BN/STAGES/INFLIGHT g GROUPS
mi MI (input channels a cube 64·GROUPS·MI; "staged": STAGED_DX, bulk stores of the result), weight variants new BN/STAGES/INFLIGHT g GROUPS xS
(S times weight_splits' reduction ranges) and "new roles GEMM" (WEIGHT_KERNEL = "roles": MoE's
roles GEMM, one expert a sample, where the copy engine reads the operands). Off the H200 (--quick on cpu/opencl) the module's
device rule is forced (pointwise_backward.native), so the smoke run runs the kernels.
"""
from __future__ import annotations

import numpy as np

import kerneldsl as kd
from rudnn.convolution import ConvOptions, implicit_gemm, pointwise_backward as pb
from rudnn.convolution.problem import as_5d, validate_data_backward, validate_weight_backward

from .common import VARIANT_HEADERS, rounds_in_turn, table, variant_rows
from .convolution import rel_err

SHAPE = (64, 256, 1024, 56)   # N, C, K, H = W
# data: (BN, STAGES, INFLIGHT, GROUPS, MI); the first is data_shape's H200 default
DATA_CONFIGS = ((256, 3, 0, 2, 1), (128, 3, 0, 2, 1), (128, 4, 0, 2, 1), (128, 4, 1, 2, 1), (128, 3, 0, 2, 2),
                (128, 3, 0, 4, 1), (64, 4, 0, 2, 2))
# weight: (BN, STAGES, INFLIGHT, GROUPS, splits scale); the first is weight_shape's H200 default
WEIGHT_CONFIGS = ((256, 3, 0, 2, 1.0), (128, 3, 0, 2, 1.0), (128, 3, 0, 2, 0.5), (128, 3, 0, 2, 2.0),
                  (128, 4, 0, 2, 1.0), (128, 4, 1, 2, 1.0), (128, 3, 0, 1, 1.0))


def before(fn):
    """fn run with the module switched off (the paths it replaces)."""
    def go(*a):
        pb.ENABLED = False
        try:
            fn(*a)
        finally:
            pb.ENABLED = True
    return go


def data_variants(p, dummy, caps, only):
    """name -> fn(dx5)."""
    out = {"before (dgrad copies + group forward)": before(lambda dx5: implicit_gemm.run_data_backward(p, dx5, dummy))}
    for bn, s, i, gr, mi in DATA_CONFIGS:
        if caps.max_shared_bytes < pb.data_shared_bytes(bn, s, gr, mi) or 4 * gr * caps.plane_dim > caps.max_cube_units:
            continue
        out[f"new {bn}/{s}/{i} g{gr} mi{mi}"] = (lambda dx5, c=(bn, s, i, gr, mi):
                                                 pb.run_data_backward(p, pb.data_operands(p, dx5), *c, False))
        if s * pb.BK >= 64 * gr * mi:
            out[f"new {bn}/{s}/{i} g{gr} mi{mi} staged"] = (lambda dx5, c=(bn, s, i, gr, mi):
                                                            pb.run_data_backward(p, pb.data_operands(p, dx5), *c, True))
    return {k: v for k, v in out.items() if not only or any(o in k for o in only)}


def weight_variants(p, caps, only):
    """name -> fn(dw5)."""
    from rudnn.convolution import implicit_gemm_wgrad
    out = {"before (channels-last copies + wgrad)": before(lambda dw5: implicit_gemm.run_weight_backward(p, dw5))}
    assert implicit_gemm_wgrad.covers(p) or not caps.group_mma_native
    views = pb.weight_operands(p)
    g = p.geo
    steps = g.B * -(-views[0].shape[2] // pb.BK)
    for bn, s, i, gr, scale in WEIGHT_CONFIGS:
        smem = pb.weight_shared_bytes(bn, s, gr)
        if caps.max_shared_bytes < smem or 4 * gr * caps.plane_dim > caps.max_cube_units:
            continue
        tiles = -(-g.K // (64 * gr)) * -(-g.C // bn)
        splits = max(1, round(pb.weight_splits(p, tiles, smem, steps) * scale))
        out[f"new {bn}/{s}/{i} g{gr} x{scale:g} ({splits} splits)"] = (
            lambda dw5, c=(bn, s, i, gr, splits): pb.run_weight_backward(p, dw5, views, *c))
    roles = pb.roles_operands(p, views)
    if roles is not None:
        out[f"new roles GEMM ({g.B} partials)"] = lambda dw5: pb.run_weight_backward_roles(p, dw5, roles)
    return {k: v for k, v in out.items() if not only or any(o in k for o in only)}


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtimes", default="cuda")
    ap.add_argument("--passes", default="data,weight")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="N 2 at 8², 3 reps (a smoke run)")
    ap.add_argument("--only", default="", help="comma-separated substrings of variant names (default: all)")
    args = ap.parse_args(argv)
    only = [o for o in args.only.split(",") if o]
    import torch
    torch.backends.cudnn.benchmark = True
    rows = []
    for rt_name in args.runtimes.split(","):
        rt = kd.runtime(rt_name)
        caps = rt.capabilities
        if not pb.native(caps):   # the smoke run: the emulated group products and bulk copies
            pb.native = lambda caps: True
            from rudnn.moe import gemm_roles
            gemm_roles.usable = lambda rt, ts: True
        cuda = caps.backend == "cuda" and torch.cuda.is_available()
        reps = 3 if args.quick else args.reps
        N, C, K, H = (2, 256, 1024, 8) if args.quick else SHAPE
        dev = "cuda" if cuda else "cpu"
        gen = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(N, C, H, H, generator=gen, device=dev).bfloat16()
        dy = torch.randn(N, K, H, H, generator=gen, device=dev).bfloat16()
        w = (torch.randn(K, C, 1, 1, generator=gen, device=dev) / 16).bfloat16()
        if cuda:   # shared through DLPack (dy is 411 MB)
            kx, kdy, kw = (kd.from_dlpack(t) for t in (x, dy, w))
        else:
            kx, kdy, kw = (rt.tensor(t.float().numpy(), dtype="bf16") for t in (x, dy, w))
        flops = 2.0 * N * K * H * H * C
        for pss in args.passes.split(","):
            if pss == "data":
                p = validate_data_backward(kdy, kw, (N, C, H, H), ConvOptions())
                shape, mask, runs = (N, C, H, H), (True, False, False), data_variants(p, rt.zeros((1,), "f32"), caps,
                                                                                     only)
            else:
                p = validate_weight_backward(kx, kdy, (K, C, 1, 1), ConvOptions())
                shape, mask, runs = (K, C, 1, 1), (False, True, False), weight_variants(p, caps, only)
            idx = 0 if pss == "data" else 1
            if cuda:
                base = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                    dy, x, w, None, (1, 1), (0, 0), (1, 1), False, (0, 0), 1, mask)[idx]
                want = base().float().cpu().numpy()
            else:
                base = None
                want = (torch.nn.grad.conv2d_input(x.shape, w.float(), dy.float()) if pss == "data"
                        else torch.nn.grad.conv2d_weight(x.float(), w.shape, dy.float())).numpy()
            errs = {}
            for v, fn in runs.items():
                check = rt.tensor(np.full(shape, np.nan, np.float32), dtype="bf16")   # nothing left from before
                fn(as_5d(check, 2, False))
                rt.synchronize()
                errs[v] = rel_err(check.numpy().astype(np.float32), want)
                print(f"{pss} {v}: rel err {errs[v]:.1e}", flush=True)
            out = as_5d(rt.empty(shape, "bf16"), 2, False)
            times, base_times = rounds_in_turn(rt, torch, base, runs, out, args.rounds, reps)
            rows += variant_rows((rt_name, f"1x1-{C}to{K}@{H} {pss}", f"N{N}"), times, base_times, errs, flops)
    print(table(rows, VARIANT_HEADERS))


if __name__ == "__main__":
    main()
