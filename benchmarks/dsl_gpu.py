"""DSL kernels on the cuda runtime next to PyTorch, in one process: a streaming copy, a row
reduction, and a bf16 GEMM through the matrix primitive (tensor cores): plane fragments fed by
async copies, and group products fed by bulk tensor copies (bulk_gemm.py).

    python -m benchmarks.dsl_gpu [--quick] [--reps N]

Each DSL kernel runs in a few tile/unroll variants (one table row each). Inputs are made by torch on the device and shared with kerneldsl through DLPack (no copy).
Times are medians of CUDA-event-timed repetitions after warm-up; each side is timed on its
own stream (kerneldsl's runtime stream, torch's current stream). Copy bandwidth counts the
bytes read plus written; the reduction counts bytes read and is compared with the copy's.
"""
from __future__ import annotations

import argparse


import kerneldsl as kd

from . import bulk_gemm
from .common import median_device_time, median_torch_cuda_time, table
from .tile_order import grouped_tile

VEC = 4  # f32 lanes per wide access (16 bytes)


@kd.kernel
def copy_loop(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i64, BLOCK: kd.Const[int], UNROLL: kd.Const[int]):
    """Each unit moves UNROLL 16-byte vectors, BLOCK * 16 bytes apart, one after the other."""
    step = BLOCK * VEC
    base = kd.i64(kd.cube_pos_x()) * (step * UNROLL) + kd.unit_pos_x() * VEC
    for j in kd.unroll(UNROLL):
        i = base + j * step
        if i + VEC <= n:
            kd.store_vec(y, i, kd.load_vec(x, i, VEC))
        else:
            for e in range(i, kd.min(i + VEC, n)):
                y[e] = x[e]


@kd.kernel
def copy_vec(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i64, BLOCK: kd.Const[int], UNROLL: kd.Const[int]):
    """Each unit moves UNROLL (4 or 8) 16-byte vectors, BLOCK * 16 bytes apart: all loads are
    issued before the first store, so UNROLL loads per unit are in flight at once."""
    step = BLOCK * VEC
    base = kd.i64(kd.cube_pos_x()) * (step * UNROLL) + kd.unit_pos_x() * VEC
    if base + (UNROLL - 1) * step + VEC <= n:
        v0 = kd.load_vec(x, base, VEC)
        v1 = kd.load_vec(x, base + step, VEC)
        v2 = kd.load_vec(x, base + 2 * step, VEC)
        v3 = kd.load_vec(x, base + 3 * step, VEC)
        if UNROLL == 8:
            v4 = kd.load_vec(x, base + 4 * step, VEC)
            v5 = kd.load_vec(x, base + 5 * step, VEC)
            v6 = kd.load_vec(x, base + 6 * step, VEC)
            v7 = kd.load_vec(x, base + 7 * step, VEC)
        kd.store_vec(y, base, v0)
        kd.store_vec(y, base + step, v1)
        kd.store_vec(y, base + 2 * step, v2)
        kd.store_vec(y, base + 3 * step, v3)
        if UNROLL == 8:
            kd.store_vec(y, base + 4 * step, v4)
            kd.store_vec(y, base + 5 * step, v5)
            kd.store_vec(y, base + 6 * step, v6)
            kd.store_vec(y, base + 7 * step, v7)
    else:  # the ragged end
        for j in kd.unroll(UNROLL):
            for e in range(base + j * step, kd.min(base + j * step + VEC, n)):
                y[e] = x[e]


@kd.kernel
def row_sum(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32], BLOCK: kd.Const[int], UNROLL: kd.Const[int]):
    """out[r] = sum of row r: 16-byte loads (UNROLL of them issued before any is added),
    per-unit partials, then kd.cube_sum."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    n = x.shape[1]
    step = BLOCK * VEC * UNROLL
    full = n - n % step
    acc = kd.f32(0)
    base = kd.i64(row) * n + t * VEC
    for i in range(0, full, step):
        vs = ()
        for j in kd.unroll(UNROLL):
            vs = vs + (kd.load_vec(x, base + i + j * (BLOCK * VEC), VEC),)
        for j in kd.unroll(UNROLL):
            acc += kd.vec_sum(vs[j])
    for i in range(full + t, n, BLOCK):
        acc += x[row, i]
    s = kd.cube_sum(acc)
    if t == 0:
        out[row] = s


# GEMM tiling: a cube computes a BM x BN tile of C with (BM/WM) x (BN/WN) planes, each owning
# a WM x WN block of 16x16 accumulator fragments; k advances BK at a time through a ring of
# S shared-memory stages filled by kd.async_copy (S - 1 tiles in flight while the tensor
# cores work on one; one barrier per step). Until session 9 the next tile went through
# registers into one of two stages instead: 146-167 TFLOP/s (benchmarks/RESULTS.md).
@kd.func
def issue_tiles(sa, sb, a, b, slot, tile, ga, gb, sa0, sb0, K, N, BM, BN, BK, LDA, LDB, CA, CB, RA, RB, KT):
    """Start the async copies of k tile `tile` (zero-filled past the last) into ring slot `slot`."""
    ok = tile < KT
    k0 = kd.i64(tile) * BK
    for i in kd.unroll(CA):
        kd.async_copy(sa, slot * (BM * LDA) + sa0 + i * RA * LDA, a, ga + kd.i64(i * RA) * K + k0, 8, ok)
    for j in kd.unroll(CB):
        kd.async_copy(sb, slot * (BK * LDB) + sb0 + j * RB * LDB, b, gb + (k0 + j * RB) * N, 8, ok)
    kd.async_commit()


@kd.kernel
def gemm_pipelined(a: kd.Tensor[kd.bf16, 2], b: kd.Tensor[kd.bf16, 2], c: kd.Tensor, BM: kd.Const[int],
                   BN: kd.Const[int], BK: kd.Const[int], WM: kd.Const[int], WN: kd.Const[int], S: kd.Const[int],
                   GROUP: kd.Const[int]):
    """c = a @ b for M % BM == N % BN == K % BK == 0, with an S-stage ring of shared tiles filled
    by async copies (S - 1 tiles in flight while the tensor cores work on one) and a grouped
    cube order (GROUP row tiles share their column tiles while those sit in L2)."""
    LDA = BK + 8  # padded rows: ldmatrix reads 8 rows without bank conflicts
    LDB = BN + 8
    U = kd.cube_units()
    kd.static_assert(U == (BM // WM) * (BN // WN) * kd.PLANE_DIM, "launch one plane per WM x WN block")
    kd.static_assert(BM * BK % (8 * U) == 0 and BK * BN % (8 * U) == 0, "tiles must split into 16-byte chunks evenly")
    CA = BM * BK // (8 * U)  # 16-byte chunks of the A tile per unit
    CB = BK * BN // (8 * U)
    RA = U // (BK // 8)      # rows between a unit's successive A chunks
    RB = U // (BN // 8)
    FM = WM // 16
    FN = WN // 16
    M = a.shape[0]
    K = a.shape[1]
    N = b.shape[1]
    KT = K // BK
    sa = kd.shared(kd.bf16, S * BM * LDA)
    sb = kd.shared(kd.bf16, S * BK * LDB)
    t = kd.unit_pos_x()
    plane = kd.plane_pos()
    pm = (plane // (BN // WN)) * WM
    pn = (plane % (BN // WN)) * WN
    m0, n0 = grouped_tile(kd.cube_pos_x(), M, N, BM, BN, GROUP)  # grouped order (tile_order.py)
    ar = t // (BK // 8)
    ac = (t % (BK // 8)) * 8
    br = t // (BN // 8)
    bc = (t % (BN // 8)) * 8
    ga = kd.i64(m0 + ar) * K + ac
    gb = kd.i64(br) * N + n0 + bc
    sa0 = ar * LDA + ac
    sb0 = br * LDB + bc
    acc = ()
    for f in kd.unroll(FM * FN):
        acc = acc + (kd.fragment_acc(16, 16, 16),)
        kd.fill_fragment(acc[f], 0.0)
    fa = ()
    for i in kd.unroll(FM):
        fa = fa + (kd.fragment_a(kd.bf16, 16, 16, 16),)
    fb = ()
    for j in kd.unroll(FN):
        fb = fb + (kd.fragment_b(kd.bf16, 16, 16, 16),)
    for s in kd.unroll(S - 1):
        issue_tiles(sa, sb, a, b, s, s, ga, gb, sa0, sb0, K, N, BM, BN, BK, LDA, LDB, CA, CB, RA, RB, KT)
    for kt in range(KT):
        kd.async_wait(S - 2)  # this unit's copies of tile kt have landed ...
        kd.sync_cube()        # ... everyone's have, and everyone is done with tile kt - 1
        nxt = kt + S - 1
        issue_tiles(sa, sb, a, b, nxt % S, nxt, ga, gb, sa0, sb0, K, N, BM, BN, BK, LDA, LDB, CA, CB, RA, RB, KT)
        abase = (kt % S) * (BM * LDA)
        bbase = (kt % S) * (BK * LDB)
        for kk in kd.unroll(BK // 16):
            for i in kd.unroll(FM):
                kd.load_fragment(fa[i], sa, abase + (pm + i * 16) * LDA + kk * 16, LDA)
            for j in kd.unroll(FN):
                kd.load_fragment(fb[j], sb, bbase + (kk * 16) * LDB + pn + j * 16, LDB)
            for i in kd.unroll(FM):
                for j in kd.unroll(FN):
                    kd.mma(acc[i * FN + j], fa[i], fb[j])
    kd.async_wait(0)
    for i in kd.unroll(FM):
        for j in kd.unroll(FN):
            kd.store_fragment(c, kd.i64(m0 + pm + i * 16) * N + n0 + pn + j * 16, acc[i * FN + j], N)


# Pipelined configurations "BMxBNxBK/wWMxWN/sS/gG" -> (BM, BN, BK, WM, WN, stages S, group G)
_PIPELINED_NAMES = (
    "128x128x64/w64x32/s3/g8", "128x128x64/w64x32/s3/g4", "128x128x64/w64x32/s3/g16", "128x128x64/w64x32/s2/g8",
    "128x128x64/w64x64/s3/g8", "128x128x64/w64x64/s4/g8", "128x128x32/w64x32/s4/g8", "128x128x32/w64x32/s6/g8",
    "128x256x64/w64x64/s3/g8", "256x128x64/w64x64/s3/g8", "64x128x64/w32x64/s4/g8", "128x64x64/w64x32/s4/g8",
)


def _parse_config(name: str) -> tuple:
    tile, warp, stages, group = name.split("/")
    BM, BN, BK = (int(v) for v in tile.split("x"))
    WM, WN = (int(v) for v in warp[1:].split("x"))
    return BM, BN, BK, WM, WN, int(stages[1:]), int(group[1:])


PIPELINED = {name: _parse_config(name) for name in _PIPELINED_NAMES}


def gemm(a, b, c, config="128x128x64/w64x64/s3/g8"):
    """Launch one GEMM configuration (a PIPELINED or bulk_gemm.CONFIGS name)."""
    if config in bulk_gemm.CONFIGS:
        return bulk_gemm.gemm(a, b, c, config)
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK, WM, WN, S, G = PIPELINED[config]
    if M % BM or N % BN or K % BK:
        raise ValueError(f"gemm {config} needs M % {BM}, N % {BN}, K % {BK} == 0, got {M}x{K} @ {K}x{N}")
    units = (BM // WM) * (BN // WN) * a.runtime.plane_dim
    gemm_pipelined[(N // BN) * (M // BM), units](a, b, c, BM, BN, BK, WM, WN, S, G)


# ------------------------------------------------------------------ timing
time_kd = median_device_time
time_torch = median_torch_cuda_time


COPY_VARIANTS = (("loop", 256, 4), ("loop", 256, 8), ("loop", 128, 8), ("loop", 512, 4), ("batched", 256, 8),
                 ("batched", 128, 8), ("batched", 512, 4))  # (kernel, units per cube, vectors per unit)
ROW_SUM_VARIANTS = ((512, 1), (512, 4), (512, 8), (256, 8), (1024, 4))  # (units per row, vectors in flight)


def bench_copy(torch, rt, dev, quick, reps):
    n = (1 << 24) if quick else (1 << 28)  # 1 GiB of f32 each way
    xs = torch.randn(n, device=dev)
    ys = torch.empty_like(xs)
    x, y = kd.from_dlpack(xs), kd.from_dlpack(ys)
    t_th = time_torch(torch, lambda: ys.copy_(xs), reps)
    nbytes = 2 * n * 4
    rows = []
    for style, block, unroll in COPY_VARIANTS:
        ys.fill_(float("nan"))
        cubes = -(-n // (block * unroll * VEC))
        kern = copy_loop if style == "loop" else copy_vec
        t_kd = time_kd(rt, lambda: kern[cubes, block](x, y, n, block, unroll), reps)
        rt.synchronize()
        assert torch.equal(ys, xs), f"copy ({style}) produced wrong values"
        rows.append((f"copy {n} ({style}, {block} units x {unroll} vec)", "f32", f"{t_kd * 1e3:.3f}",
                     f"{t_th * 1e3:.3f}", f"{t_th / t_kd:.2f}", f"{nbytes / t_kd / 1e9:.0f} GB/s",
                     f"{nbytes / t_th / 1e9:.0f} GB/s"))
    return rows, nbytes / t_th


def bench_row_sum(torch, rt, dev, quick, reps, copy_bw):
    r, cols = (4096, 4096) if quick else (16384, 16384)
    xm = torch.randn(r, cols, device=dev)
    out = torch.empty(r, device=dev)
    xk, ok = kd.from_dlpack(xm), kd.from_dlpack(out)
    ref = torch.empty(r, device=dev)
    t_th = time_torch(torch, lambda: torch.sum(xm, 1, out=ref), reps)
    exact = xm.double().sum(1)
    nbytes = r * cols * 4
    rows = []
    for block, unroll in ROW_SUM_VARIANTS:
        out.fill_(float("nan"))
        t_kd = time_kd(rt, lambda: row_sum[r, block](xk, ok, block, unroll), reps)
        rt.synchronize()
        err = (out.double() - exact).abs().max().item()
        assert err < 1e-2, f"row_sum ({block} units, {unroll} in flight) error {err}"
        rows.append((f"row sum {r}x{cols} ({block} units, {unroll} vec in flight)", "f32", f"{t_kd * 1e3:.3f}",
                     f"{t_th * 1e3:.3f}", f"{t_th / t_kd:.2f}",
                     f"{nbytes / t_kd / 1e9:.0f} GB/s ({nbytes / t_kd / copy_bw:.0%} of torch copy)",
                     f"{nbytes / t_th / 1e9:.0f} GB/s"))
    return rows


def bench_gemm(torch, rt, dev, quick, reps, configs):
    m = 1024 if quick else 4096
    a_t = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    b_t = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    c_t = torch.empty(m, m, device=dev, dtype=torch.bfloat16)
    a, b, c = kd.from_dlpack(a_t), kd.from_dlpack(b_t), kd.from_dlpack(c_t)
    exact = a_t.double() @ b_t.double()
    ref_t = torch.empty_like(c_t)
    t_th = time_torch(torch, lambda: torch.matmul(a_t, b_t, out=ref_t), reps)
    flops = 2 * m ** 3
    rows = []
    for config in configs:
        c_t.fill_(float("nan"))  # poisoned: every element must be written
        t_kd = time_kd(rt, lambda: gemm(a, b, c, config), reps)
        rt.synchronize()
        rel = ((c_t.double() - exact).norm() / exact.norm()).item()
        assert rel < 1e-2, f"gemm {config}: relative error {rel}"
        rows.append((f"gemm {m}^3 {config}", "bf16", f"{t_kd * 1e3:.3f}", f"{t_th * 1e3:.3f}", f"{t_th / t_kd:.2f}",
                     f"{flops / t_kd / 1e12:.0f} TFLOP/s (rel err {rel:.1e})", f"{flops / t_th / 1e12:.0f} TFLOP/s"))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller problems (a smoke run)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--gemm", default=",".join([*PIPELINED, *bulk_gemm.CONFIGS]),
                    help="comma-separated GEMM configurations (%(default)s)")
    ap.add_argument("--only", default="copy,row sum,gemm", help="which benchmarks to run (%(default)s)")
    args = ap.parse_args(argv)
    configs = [c for c in args.gemm.split(",") if c]
    unknown = [c for c in configs if c not in PIPELINED and c not in bulk_gemm.CONFIGS]
    if unknown:
        ap.error(f"unknown GEMM configurations {unknown}; known: {sorted([*PIPELINED, *bulk_gemm.CONFIGS])}")
    import torch
    rt = kd.runtime("cuda")
    dev = torch.device(f"cuda:{rt.index}")
    print(f"device: {rt.capabilities.device_name} ({rt.capabilities.arch}), torch {torch.__version__}, "
          f"medians of {args.reps} event-timed runs")
    headers = ["shape", "dtype", "kd ms", "torch ms", "kd/torch speed", "kd rate", "torch rate"]
    rows = []
    copy_bw = None
    for name, fn in (("copy", lambda: bench_copy(torch, rt, dev, args.quick, args.reps)),
                     ("row sum", lambda: bench_row_sum(torch, rt, dev, args.quick, args.reps, copy_bw)),
                     ("gemm", lambda: bench_gemm(torch, rt, dev, args.quick, args.reps, configs))):
        if name not in args.only.split(","):
            continue
        try:
            got = fn()
        except Exception as e:  # noqa: BLE001  (report and go on with the next benchmark)
            print(f"{name}: FAILED: {type(e).__name__}: {e}", flush=True)
            continue
        if name == "copy":
            got, copy_bw = got
        rows += got
        print(table(got, headers), flush=True)
    print()
    print(table(rows, headers))


if __name__ == "__main__":
    main()
