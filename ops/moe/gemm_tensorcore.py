"""The `TensorCore` grouped GEMM: F16/BF16 operands on the matrix primitive
(m16n16k16 fragments, f32 accumulation): tensor cores on CUDA, the exact
emulation elsewhere.

Same grid as the scalar kernels (x: row tiles of all experts, y: column tiles).
A cube has 4 planes in a 2 x 2 layout over a BM x BN output tile; each plane owns
2 x FN fragments. Per BK-step the cube stages the A tile (dispatched rows) and the
B tile (weight rows, K contiguous) in shared memory, zero-filling the K tail, and
each plane runs its fragment products. Rows past the expert's end and columns
past N are clamped while loading (their results are never stored). Results leave
through a per-plane f32 staging tile so stores can be masked and the SwiGLU
gating applied on the way out.
"""
from __future__ import annotations

import kerneldsl as kd

from .gemm_scalar import silu
from .tiles import find_tile

PLANES = 4       # 2 x 2 planes per cube
BM = 64          # rows per cube: 2 planes x 2 fragments x 16
BK = 32          # reduction step staged in shared memory
SK = BK + 8      # shared row stride (elements): a multiple of 8, skewed against bank conflicts
BN_DOWN = 64     # output columns per cube, plain projection (2 fragments per plane)
BN_FUSED = 32    # output columns per cube and per matrix, fused gate/up (1 fragment per plane)


@kd.func
def stage_tile(dst, src, e, row0, rows_end, k0, K, ROWS, VEC, EXPERT):
    """Copy src[(e,) row0 + i, k0 + j] for i < ROWS, j < BK into dst[i * SK + j]: rows clamped
    below rows_end, zeros past K. EXPERT (compile-time): src is [E, rows, K], else [rows, K].
    VEC: 8-element loads (K % 8 == 0 and src packed and 16-byte aligned)."""
    U = kd.cube_units()
    t = kd.unit_pos_x()
    if VEC:
        for c0 in range(0, ROWS * BK // 8, U):
            c = c0 + t
            if c < ROWS * BK // 8:
                i = c // (BK // 8)
                j = c % (BK // 8) * 8
                r = kd.min(row0 + i, rows_end - 1)
                k = k0 + j
                live = k < K
                k = kd.select(live, k, 0)
                if EXPERT:
                    v = kd.load_vec(src, (e * src.shape[1] + r) * K + k, 8)
                else:
                    v = kd.load_vec(src, r * K + k, 8)
                for l in kd.unroll(8):
                    dst[i * SK + j + l] = kd.select(live, v[l], 0.0)
    else:
        for c0 in range(0, ROWS * BK, U):
            c = c0 + t
            if c < ROWS * BK:
                i = c // BK
                j = c % BK
                r = kd.min(row0 + i, rows_end - 1)
                k = k0 + j
                live = k < K
                k = kd.select(live, k, 0)
                if EXPERT:
                    v = src[e, r, k]
                else:
                    v = src[r, k]
                dst[i * SK + j] = kd.select(live, kd.f32(v), 0.0)


@kd.kernel
def grouped_gemm_tc(x: kd.Tensor, w: kd.Tensor, y: kd.Tensor, offsets: kd.Tensor[kd.u32, 1],
                    tile_offsets: kd.Tensor[kd.u32, 1], E: kd.i32, DT: kd.Const[object], VEC: kd.Const[bool]):
    """y[r, n] = sum_k x[r, k] * w[e(r), n, k], fragments of 16 x 16 x 16."""
    kd.static_assert(kd.cube_units() == PLANES * kd.PLANE_DIM, "launch with 4 planes per cube")
    t = kd.unit_pos_x()
    p = kd.plane_pos()
    lane = kd.lane_pos()
    pm = p // 2
    pn = p % 2
    e, r0, rend = find_tile(offsets, tile_offsets, E, kd.cube_pos_x(), BM)
    if r0 < rend:
        N = w.shape[1]
        K = x.shape[1]
        n0 = kd.cube_pos_y() * BN_DOWN
        sa = kd.shared(DT, BM * SK)
        sb = kd.shared(DT, BN_DOWN * SK)
        stage = kd.shared(kd.f32, PLANES * 256)
        fa0 = kd.fragment_a(DT, 16, 16, 16)
        fa1 = kd.fragment_a(DT, 16, 16, 16)
        fb0 = kd.fragment_b(DT, 16, 16, 16, layout="col")
        fb1 = kd.fragment_b(DT, 16, 16, 16, layout="col")
        c00 = kd.fragment_acc(16, 16, 16)
        c01 = kd.fragment_acc(16, 16, 16)
        c10 = kd.fragment_acc(16, 16, 16)
        c11 = kd.fragment_acc(16, 16, 16)
        kd.fill_fragment(c00, 0.0)
        kd.fill_fragment(c01, 0.0)
        kd.fill_fragment(c10, 0.0)
        kd.fill_fragment(c11, 0.0)
        for k0 in range(0, K, BK):
            stage_tile(sa, x, e, r0, rend, k0, K, BM, VEC, False)
            stage_tile(sb, w, e, n0, N, k0, K, BN_DOWN, VEC, True)
            kd.sync_cube()
            for kk in kd.unroll(0, BK, 16):
                kd.load_fragment(fa0, sa, (pm * 32) * SK + kk, SK)
                kd.load_fragment(fa1, sa, (pm * 32 + 16) * SK + kk, SK)
                kd.load_fragment(fb0, sb, (pn * 32) * SK + kk, SK)
                kd.load_fragment(fb1, sb, (pn * 32 + 16) * SK + kk, SK)
                kd.mma(c00, fa0, fb0)
                kd.mma(c01, fa0, fb1)
                kd.mma(c10, fa1, fb0)
                kd.mma(c11, fa1, fb1)
            kd.sync_cube()
        frags = (c00, c01, c10, c11)
        for f in kd.unroll(4):
            kd.store_fragment(stage, p * 256, frags[f], 16)
            kd.sync_cube()
            for q0 in range(0, 256, kd.PLANE_DIM):
                q = q0 + lane
                r = r0 + pm * 32 + f // 2 * 16 + q // 16
                n = n0 + pn * 32 + f % 2 * 16 + q % 16
                if r < rend and n < N:
                    y[r, n] = stage[p * 256 + q]
            kd.sync_cube()


@kd.kernel
def grouped_gemm_swiglu_tc(x: kd.Tensor, gate: kd.Tensor, up: kd.Tensor, h: kd.Tensor,
                           offsets: kd.Tensor[kd.u32, 1], tile_offsets: kd.Tensor[kd.u32, 1], E: kd.i32,
                           DT: kd.Const[object], VEC: kd.Const[bool]):
    """h[r, n] = silu(x[r]·gate[e, n]) * (x[r]·up[e, n]) on fragments; gating fused into the store."""
    kd.static_assert(kd.cube_units() == PLANES * kd.PLANE_DIM, "launch with 4 planes per cube")
    t = kd.unit_pos_x()
    p = kd.plane_pos()
    lane = kd.lane_pos()
    pm = p // 2
    pn = p % 2
    e, r0, rend = find_tile(offsets, tile_offsets, E, kd.cube_pos_x(), BM)
    if r0 < rend:
        N = gate.shape[1]
        K = x.shape[1]
        n0 = kd.cube_pos_y() * BN_FUSED
        sa = kd.shared(DT, BM * SK)
        sg = kd.shared(DT, BN_FUSED * SK)
        su = kd.shared(DT, BN_FUSED * SK)
        stage_g = kd.shared(kd.f32, PLANES * 256)
        stage_u = kd.shared(kd.f32, PLANES * 256)
        fa0 = kd.fragment_a(DT, 16, 16, 16)
        fa1 = kd.fragment_a(DT, 16, 16, 16)
        fg = kd.fragment_b(DT, 16, 16, 16, layout="col")
        fu = kd.fragment_b(DT, 16, 16, 16, layout="col")
        g0 = kd.fragment_acc(16, 16, 16)
        g1 = kd.fragment_acc(16, 16, 16)
        u0 = kd.fragment_acc(16, 16, 16)
        u1 = kd.fragment_acc(16, 16, 16)
        kd.fill_fragment(g0, 0.0)
        kd.fill_fragment(g1, 0.0)
        kd.fill_fragment(u0, 0.0)
        kd.fill_fragment(u1, 0.0)
        for k0 in range(0, K, BK):
            stage_tile(sa, x, e, r0, rend, k0, K, BM, VEC, False)
            stage_tile(sg, gate, e, n0, N, k0, K, BN_FUSED, VEC, True)
            stage_tile(su, up, e, n0, N, k0, K, BN_FUSED, VEC, True)
            kd.sync_cube()
            for kk in kd.unroll(0, BK, 16):
                kd.load_fragment(fa0, sa, (pm * 32) * SK + kk, SK)
                kd.load_fragment(fa1, sa, (pm * 32 + 16) * SK + kk, SK)
                kd.load_fragment(fg, sg, (pn * 16) * SK + kk, SK)
                kd.load_fragment(fu, su, (pn * 16) * SK + kk, SK)
                kd.mma(g0, fa0, fg)
                kd.mma(g1, fa1, fg)
                kd.mma(u0, fa0, fu)
                kd.mma(u1, fa1, fu)
            kd.sync_cube()
        gs = (g0, g1)
        us = (u0, u1)
        for f in kd.unroll(2):
            kd.store_fragment(stage_g, p * 256, gs[f], 16)
            kd.store_fragment(stage_u, p * 256, us[f], 16)
            kd.sync_cube()
            for q0 in range(0, 256, kd.PLANE_DIM):
                q = q0 + lane
                r = r0 + pm * 32 + f * 16 + q // 16
                n = n0 + pn * 16 + q % 16
                if r < rend and n < N:
                    h[r, n] = silu(stage_g[p * 256 + q]) * stage_u[p * 256 + q]
            kd.sync_cube()
