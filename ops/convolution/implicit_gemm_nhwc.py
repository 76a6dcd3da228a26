"""The channels-last forward `ImplicitGemm` path with the async-copy ring (F16/BF16):
NHWC input and weights whose per-group channel count is a multiple of 8, every stride a
multiple of 8 elements, so each 8-channel run of one kernel tap is 16 contiguous, aligned
bytes in both operands.

The reduction index is r = tap·Cg + c (channels innermost, as they lie in memory), so a row
of the implicit A matrix (one output pixel) is a sequence of 16-byte chunks, each copied by
`kd.async_copy` straight from the input (zero-filled outside it: the padding is never
stored), and a column of B is a weight row read the same way. A cube of 8 planes (4 x 2)
owns a 128 x 64 tile of [B·O pixels] x [Cout of one group]; STAGES - 1 tiles of BK = 32
reduction steps are in flight while the fragments multiply the current one (cp.async on
CUDA, an immediate copy elsewhere), one barrier per step, as in benchmarks/dsl_gpu.py's GEMM.
"""
from __future__ import annotations

import kerneldsl as kd

from .gather import forward_sizes, split_pixel, split_tap
from .implicit_gemm import BK, SK, plane_tiles, products

BM = 128
BN = 64
STAGES = 3
CPR = BK // 8        # 16-byte chunks per staged row


@kd.func
def fetch_a(sa, at, x, m, r, Mg, R, g, Cg, P, OH, OW, G):
    """Async copy of the 8 input channels of A[m, r..r+8] (pixel m, tap r // Cg) into sa[at..];
    zeros outside the input and past the matrix."""
    b = m // P
    od, oh, ow = split_pixel(m % P, OH, OW)
    kz, ky, kx = split_tap(r // Cg, G)
    iz = od * G[0] + kz * G[6] - G[3]
    iy = oh * G[1] + ky * G[7] - G[4]
    ix = ow * G[2] + kx * G[8] - G[5]
    live = (m < Mg and r < R and iz >= 0 and iz < x.shape[2] and iy >= 0 and iy < x.shape[3]
            and ix >= 0 and ix < x.shape[4])
    off = (kd.i64(b) * x.stride(0) + kd.i64(g * Cg + r % Cg) + kd.i64(iz) * x.stride(2)
           + kd.i64(iy) * x.stride(3) + kd.i64(ix) * x.stride(4))
    kd.async_copy(sa, at, x, kd.select(live, off, kd.i64(0)), 8, live)


@kd.func
def fetch_b(sb, at, w, n, r, Ng, R, g, Kg, Cg, G):
    """Async copy of w[g·Kg + n, r % Cg .. +8, tap r // Cg] into sb[at..]; zeros past the matrix."""
    kz, ky, kx = split_tap(r // Cg, G)
    live = n < Ng and r < R
    off = (kd.i64(g * Kg + n) * w.stride(0) + kd.i64(r % Cg) + kd.i64(kz) * w.stride(2)
           + kd.i64(ky) * w.stride(3) + kd.i64(kx) * w.stride(4))
    kd.async_copy(sb, at, w, kd.select(live, off, kd.i64(0)), 8, live)


@kd.func
def fetch_stage(sa, sb, x, w, slot, kt, KT, m0, n0, Mg, Ng, R, g, Kg, Cg, P, OH, OW, G):
    """Every unit's share of the copies of reduction tile kt into ring slot `slot` (one group)."""
    U = kd.cube_units()
    t = kd.unit_pos()
    k0 = kt * BK
    for j in kd.unroll(BM * CPR // U):
        c = t + j * U
        row = c // CPR
        col = c % CPR * 8
        fetch_a(sa, slot * (BM * SK) + row * SK + col, x, m0 + row, kd.select(kt < KT, k0 + col, R),
                Mg, R, g, Cg, P, OH, OW, G)
    for j in kd.unroll(BN * CPR // U):
        c = t + j * U
        row = c // CPR
        col = c % CPR * 8
        fetch_b(sb, slot * (BN * SK) + row * SK + col, w, n0 + row, kd.select(kt < KT, k0 + col, R),
                Ng, R, g, Kg, Cg, G)
    kd.async_commit()


@kd.kernel
def conv_gemm_nhwc(x: kd.Tensor, w: kd.Tensor, y: kd.Tensor, bias: kd.Tensor, HAS_BIAS: kd.Const[bool],
                   DT: kd.Const[object], G: kd.Const[tuple]):
    """y[b, o, g·Kg + n] (+ bias) = sum_{tap, c} x[b, o·S + tap·Dil − P, g·Cg + c]·w[g·Kg + n, tap, c]."""
    kd.static_assert(kd.cube_units() == 8 * kd.PLANE_DIM, "launch with 8 planes per cube")
    OH, OW, P, Mg, Cg, Kg, R = forward_sizes(x, w, y, G)
    g = kd.cube_pos_z()
    m0 = kd.cube_pos_x() * BM
    n0 = kd.cube_pos_y() * BN
    p = kd.plane_pos()
    pm = p // 2 * 32
    pn = p % 2 * 32
    sa = kd.shared(DT, STAGES * BM * SK)
    sb = kd.shared(DT, STAGES * BN * SK)
    acc, fa, fb = plane_tiles(DT)
    KT = (R + BK - 1) // BK
    for s in kd.unroll(STAGES - 1):
        fetch_stage(sa, sb, x, w, s, s, KT, m0, n0, Mg, Kg, R, g, Kg, Cg, P, OH, OW, G)
    for kt in range(KT):
        kd.async_wait(STAGES - 2)          # this unit's part of tile kt is in ...
        kd.sync_cube()                     # ... everyone's is, and tile kt - 1 is done with
        nxt = kt + STAGES - 1
        fetch_stage(sa, sb, x, w, nxt % STAGES, nxt, KT, m0, n0, Mg, Kg, R, g, Kg, Cg, P, OH, OW, G)
        products(acc, fa, fb, sa, sb, (kt % STAGES) * (BM * SK), (kt % STAGES) * (BN * SK), pm, pn)
    kd.async_wait(0)
    for f in kd.unroll(4):
        for q in kd.unroll(kd.fragment_len(acc[f])):
            m = m0 + pm + f // 2 * 16 + kd.fragment_row(acc[f], q)
            n = n0 + pn + f % 2 * 16 + kd.fragment_col(acc[f], q)
            if m < Mg and n < Kg:
                v = kd.fragment_get(acc[f], q)
                co = g * Kg + n
                if HAS_BIAS:
                    v = v + kd.f32(bias[co])
                od, oh, ow = split_pixel(m % P, OH, OW)
                y[m // P, co, od, oh, ow] = v


def _aligned(t) -> bool:
    """Channels contiguous and every other stride and the start on a 16-byte boundary. Axes of
    size 1 never move an address, whatever their stride (torch gives a 1×1 kernel's [K, 1, 1, C]
    copy strides of 1 there), so they are left out."""
    return t.strides[1] == 1 and t.offset % 8 == 0 and all(
        s % 8 == 0 for i, (n, s) in enumerate(zip(t.shape, t.strides)) if i != 1 and n > 1)


def covers(p) -> bool:
    """The ring path runs p: channels-last F16/BF16 operands with Cin/groups a multiple of 8,
    16-byte aligned, and a cube of 8 planes that splits the copies evenly."""
    U = 8 * p.runtime.plane_dim
    return (p.geo.Cg % 8 == 0 and _aligned(p.x) and _aligned(p.w) and U <= p.runtime.capabilities.max_cube_units
            and (BN * CPR) % U == 0)


def run_forward(p, y5, dummy) -> None:
    g = p.geo
    M = g.B * g.pixels
    grid = ((M + BM - 1) // BM, (g.Kg + BN - 1) // BN, g.groups)
    bias = p.bias if p.bias is not None else dummy
    conv_gemm_nhwc[grid, 8 * p.runtime.plane_dim](p.x, p.w, y5, bias, p.bias is not None, p.dtype, g.consts())
