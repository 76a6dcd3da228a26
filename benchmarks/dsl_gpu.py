"""DSL kernels on the cuda runtime next to PyTorch, in one process: a streaming copy, a row
reduction, and a bf16 GEMM through the matrix primitive (tensor cores).

    python -m benchmarks.dsl_gpu [--quick] [--check]

Inputs are made by torch on the device and shared with kerneldsl through DLPack (no copy).
Times are medians of CUDA-event-timed repetitions after warm-up; each side is timed on its
own stream (kerneldsl's runtime stream, torch's current stream). Copy bandwidth counts the
bytes read plus written; the reduction counts bytes read and is compared with the copy's.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

import kerneldsl as kd

from .common import table

VEC = 4  # f32 lanes per wide access (16 bytes)


@kd.kernel
def copy_vec(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i64, BLOCK: kd.Const[int], UNROLL: kd.Const[int]):
    """Each unit moves UNROLL 16-byte vectors; a cube covers BLOCK * UNROLL * 4 elements."""
    base = kd.i64(kd.cube_pos_x()) * (BLOCK * UNROLL * VEC)
    t = kd.unit_pos_x()
    for j in kd.unroll(UNROLL):
        i = base + (j * BLOCK + t) * VEC
        if i + VEC <= n:
            kd.store_vec(y, i, kd.load_vec(x, i, VEC))
        elif i < n:
            for e in range(i, n):
                y[e] = x[e]


@kd.kernel
def row_sum(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32], BLOCK: kd.Const[int]):
    """out[r] = sum of row r: 16-byte loads, per-unit partials, plane_sum, shared memory."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    n = x.shape[1]
    full = n - n % (BLOCK * VEC)
    acc = kd.f32(0)
    for i in range(0, full, BLOCK * VEC):
        v = kd.load_vec(x, kd.i64(row) * n + i + t * VEC, VEC)
        acc += kd.vec_sum(v)
    for i in range(full + t, n, BLOCK):
        acc += x[row, i]
    acc = kd.plane_sum(acc)
    part = kd.shared(kd.f32, kd.plane_count())
    if kd.plane_elect():
        part[kd.plane_pos()] = acc
    kd.sync_cube()
    if t == 0:
        s = kd.f32(0)
        for j in kd.unroll(kd.plane_count()):
            s += part[j]
        out[row] = s


# GEMM tiling: a cube of 8 planes computes a 128x128 tile of C; plane p owns a 64x32 block
# (4x2 fragments of 16x16); k advances 32 at a time through two shared-memory stages (the
# next tile is fetched into registers while the tensor cores work on the current one).
BM, BN, BK = 128, 128, 32
LDA, LDB = BK + 8, BN + 8  # padded rows: ldmatrix reads 8 rows without bank conflicts
UNITS = 256


@kd.func
def stage_tiles(sa, sb, stage, va0, va1, vb0, vb1, oa0, oa1, ob0, ob1):
    """Registers -> shared stage `stage`: one vector after another, so each becomes a
    single 16-byte shared store."""
    a0 = stage * (BM * LDA)
    b0 = stage * (BK * LDB)
    for e in kd.unroll(8):
        sa[a0 + oa0 + e] = va0[e]
    for e in kd.unroll(8):
        sa[a0 + oa1 + e] = va1[e]
    for e in kd.unroll(8):
        sb[b0 + ob0 + e] = vb0[e]
    for e in kd.unroll(8):
        sb[b0 + ob1 + e] = vb1[e]


@kd.kernel
def gemm_bf16(a: kd.Tensor[kd.bf16, 2], b: kd.Tensor[kd.bf16, 2], c: kd.Tensor):
    """c = a @ b for M % 128 == N % 128 == K % 32 == 0 (row-major a: MxK, b: KxN, c: MxN)."""
    K = a.shape[1]
    N = b.shape[1]
    sa = kd.shared(kd.bf16, 2 * BM * LDA)
    sb = kd.shared(kd.bf16, 2 * BK * LDB)
    t = kd.unit_pos_x()
    plane = kd.plane_pos()
    pm = (plane // 4) * 64
    pn = (plane % 4) * 32
    m0 = kd.cube_pos_y() * BM
    n0 = kd.cube_pos_x() * BN
    # this unit's 16-byte chunks of the A tile (128 x 32: 4 per row) and B tile (32 x 128: 16 per row)
    ar0, ac0 = t // 4, (t % 4) * 8
    ar1 = ar0 + 64
    br0, bc0 = t // 16, (t % 16) * 8
    br1 = br0 + 16
    a_row0 = kd.i64(m0 + ar0) * K + ac0
    a_row1 = kd.i64(m0 + ar1) * K + ac0
    b_row0 = kd.i64(br0) * N + n0 + bc0
    b_row1 = kd.i64(br1) * N + n0 + bc0
    acc = (kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16),
           kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16),
           kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16))
    fa = (kd.fragment_a(kd.bf16, 16, 16, 16), kd.fragment_a(kd.bf16, 16, 16, 16),
          kd.fragment_a(kd.bf16, 16, 16, 16), kd.fragment_a(kd.bf16, 16, 16, 16))
    fb = (kd.fragment_b(kd.bf16, 16, 16, 16), kd.fragment_b(kd.bf16, 16, 16, 16))
    for f in kd.unroll(8):
        kd.fill_fragment(acc[f], 0.0)
    # stage 0 <- k tile 0
    va0 = kd.load_vec(a, a_row0, 8)
    va1 = kd.load_vec(a, a_row1, 8)
    vb0 = kd.load_vec(b, b_row0, 8)
    vb1 = kd.load_vec(b, b_row1, 8)
    stage_tiles(sa, sb, 0, va0, va1, vb0, vb1, ar0 * LDA + ac0, ar1 * LDA + ac0, br0 * LDB + bc0, br1 * LDB + bc0)
    kd.sync_cube()
    for k0 in range(0, K, BK):
        cur = (k0 // BK) % 2
        more = k0 + BK < K
        if more:  # fetch the next k tile into registers; it lands in the other stage below
            va0 = kd.load_vec(a, a_row0 + k0 + BK, 8)
            va1 = kd.load_vec(a, a_row1 + k0 + BK, 8)
            vb0 = kd.load_vec(b, b_row0 + kd.i64(k0 + BK) * N, 8)
            vb1 = kd.load_vec(b, b_row1 + kd.i64(k0 + BK) * N, 8)
        abase = cur * (BM * LDA)
        bbase = cur * (BK * LDB)
        for kk in kd.unroll(BK // 16):
            for i in kd.unroll(4):
                kd.load_fragment(fa[i], sa, abase + (pm + i * 16) * LDA + kk * 16, LDA)
            for j in kd.unroll(2):
                kd.load_fragment(fb[j], sb, bbase + (kk * 16) * LDB + pn + j * 16, LDB)
            for i in kd.unroll(4):
                for j in kd.unroll(2):
                    kd.mma(acc[i * 2 + j], fa[i], fb[j])
        if more:
            stage_tiles(sa, sb, 1 - cur, va0, va1, vb0, vb1, ar0 * LDA + ac0, ar1 * LDA + ac0, br0 * LDB + bc0,
                        br1 * LDB + bc0)
        kd.sync_cube()
    for i in kd.unroll(4):
        for j in kd.unroll(2):
            kd.store_fragment(c, kd.i64(m0 + pm + i * 16) * N + n0 + pn + j * 16, acc[i * 2 + j], N)


def gemm(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    if M % BM or N % BN or K % BK:
        raise ValueError(f"gemm_bf16 needs M, N multiples of {BM} and K of {BK}, got {M}x{K} @ {K}x{N}")
    gemm_bf16[(N // BN, M // BM), UNITS](a, b, c)


# ------------------------------------------------------------------ timing
def time_kd(rt, fn, reps):
    fn()
    rt.synchronize()
    times = []
    for _ in range(reps):
        start = rt.record_event()
        fn()
        end = rt.record_event()
        times.append(rt.elapsed_ms(start, end) / 1e3)
    return statistics.median(times)


def time_torch(torch, fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller problems (a smoke run)")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    import torch
    rt = kd.runtime("cuda")
    dev = torch.device(f"cuda:{rt.index}")
    print(f"device: {rt.capabilities.device_name} ({rt.capabilities.arch}), torch {torch.__version__}, "
          f"medians of {args.reps} event-timed runs")
    rows = []

    # ---- copy
    n = (1 << 24) if args.quick else (1 << 28)  # 1 GiB of f32 each way
    xs = torch.randn(n, device=dev)
    ys = torch.empty_like(xs)
    x, y = kd.from_dlpack(xs), kd.from_dlpack(ys)
    block, unroll = 256, 4
    cubes = -(-n // (block * unroll * VEC))
    t_kd = time_kd(rt, lambda: copy_vec[cubes, block](x, y, n, block, unroll), args.reps)
    t_th = time_torch(torch, lambda: ys.copy_(xs), args.reps)
    assert torch.equal(ys, xs)
    nbytes = 2 * n * 4
    copy_bw = nbytes / t_th
    rows.append((f"copy {n}", "f32", f"{t_kd * 1e3:.3f}", f"{t_th * 1e3:.3f}", f"{t_th / t_kd:.2f}",
                 f"{nbytes / t_kd / 1e9:.0f} GB/s", f"{nbytes / t_th / 1e9:.0f} GB/s"))

    # ---- row reduction
    r, cols = (4096, 4096) if args.quick else (16384, 16384)
    xm = torch.randn(r, cols, device=dev)
    out = torch.empty(r, device=dev)
    xk, ok = kd.from_dlpack(xm), kd.from_dlpack(out)
    t_kd = time_kd(rt, lambda: row_sum[r, 512](xk, ok, 512), args.reps)
    ref = torch.empty(r, device=dev)
    t_th = time_torch(torch, lambda: torch.sum(xm, 1, out=ref), args.reps)
    rt.synchronize()
    err = (out.double() - xm.double().sum(1)).abs().max().item()
    assert err < 1e-2, f"row_sum error {err}"
    nbytes = r * cols * 4
    rows.append((f"row sum {r}x{cols}", "f32", f"{t_kd * 1e3:.3f}", f"{t_th * 1e3:.3f}", f"{t_th / t_kd:.2f}",
                 f"{nbytes / t_kd / 1e9:.0f} GB/s ({nbytes / t_kd / copy_bw:.0%} of copy)",
                 f"{nbytes / t_th / 1e9:.0f} GB/s"))

    # ---- bf16 GEMM on tensor cores
    m = 1024 if args.quick else 4096
    a_t = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    b_t = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    c_t = torch.empty(m, m, device=dev, dtype=torch.bfloat16)
    a, b, c = kd.from_dlpack(a_t), kd.from_dlpack(b_t), kd.from_dlpack(c_t)
    t_kd = time_kd(rt, lambda: gemm(a, b, c), args.reps)
    ref_t = torch.empty_like(c_t)
    t_th = time_torch(torch, lambda: torch.matmul(a_t, b_t, out=ref_t), args.reps)
    rt.synchronize()
    exact = a_t.double() @ b_t.double()
    rel = ((c_t.double() - exact).norm() / exact.norm()).item()
    assert rel < 1e-2, f"gemm relative error {rel}"
    flops = 2 * m ** 3
    rows.append((f"gemm {m}^3", "bf16", f"{t_kd * 1e3:.3f}", f"{t_th * 1e3:.3f}", f"{t_th / t_kd:.2f}",
                 f"{flops / t_kd / 1e12:.0f} TFLOP/s (rel err {rel:.1e})", f"{flops / t_th / 1e12:.0f} TFLOP/s"))

    print(table(rows, ["shape", "dtype", "kd ms", "torch ms", "kd/torch speed", "kd rate", "torch rate"]))


if __name__ == "__main__":
    main()
