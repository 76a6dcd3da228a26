"""The `ImplicitGemm` strategy for F32 where the matrix primitive takes no F32 (every GPU
here: tensor-core fragments are F16/BF16): the three passes as register-tiled GEMMs on the
units' own multiply-adds, over the implicit im2col matrix (never built), F32 throughout.

    forward   C[(b, o), co]     = sum_{(tap, c)} x[b, c, o·S + tap·Dil − P] · w[co, c, tap]
    data      C[(b, i), c]      = sum_{(tap, co)} dy[b, co, i + P' − tap·Dil] · w[co, c, tap]   (stride 1:
              a forward over dy with the taps flipped and P' = Dil·(K − 1) − P)
    weight    C[co, (c, tap)]   = sum_{(b, o)} dy[b, co, o] · x[b, c, o·S + tap·Dil − P]

per group (the grid's z axis; for the weight gradient z also counts the reduction's splits,
whose F32 partials implicit_gemm.sum_partials adds in split order: deterministic). The
reduction index of the forward and data passes runs channels fastest, r = tap·Cs + c.

A cube of UNITS units owns a BM x BN tile of C (64 or 128 each, by the GEMM's shape); unit
(u, v) of the 16 x 16 square holds TM x TN = BM/16 x BN/16 sums, in runs of four rows from
4u (and 64 + 4u) and of four columns from 4v (OUT_M: u along the rows, for outputs whose rows
are contiguous, NCHW pixels; else the transpose). Every BK-column step
each unit gathers its share of the A (BM x BK) and B (BK x BN) tiles into registers from
global memory, the units multiply the step staged before from shared memory, then store
the registers into the other of two shared buffers and meet at one barrier. A unit's share
is fixed across steps: KF (k fastest: consecutive units on consecutive columns, for
operands contiguous along the reduction) or rows fastest, so the origin of each of its rows
(pixel, image, input corner, base offset) is computed once a tile and a step adds the
offsets of its columns' taps and channels. Shared rows are padded by 4 words so both
sharings store without bank conflicts and the products read one word a row per unit.
"""
from __future__ import annotations

import kerneldsl as kd

from .gather import group_and_split, pixel_row, split_pixel, split_tap

BK = 8            # reduction columns a step
UNITS = 256       # units a cube (a 16 x 16 square)
PAD = 4           # shared row padding (words)
# cubes a compute unit keeps room for (registers capped to fit them), for tiles of at most
# 128 x 64 and for larger ones: one cube of 256 units at ~150 registers left 8 warps an H200
# SM, issue slots 46 % busy (ncu, 256@14 forward); capped at 128 registers the 128 x 128
# tile spills (64 bytes, channels-last forward). Timed 2/1, 2/2 and 1/1 on the H200: the
# same within noise (RESULTS.md, session 22); 2/1 kept, it costs nothing
CUBES_PER_UNIT = 2
CUBES_PER_UNIT_WIDE = 1
FORWARD, DATA, WEIGHT = 0, 1, 2


@kd.func
def share(t, ROWS, KF):
    """(row, column, row step, column step) of element q of unit t's share of a ROWS x BK
    tile: element q is (row + q·row step, column + q·column step)."""
    out = (t % ROWS, t // ROWS, 0, UNITS // ROWS)
    if KF:
        out = (t // BK, t % BK, UNITS // BK, 0)
    return out


@kd.func
def pixel_rows(src, m_first, m_step, NQ, Mg, P, OH, OW, G):
    """Per A row of a forward-like pass (pixels m_first + q·m_step of the output): (inside
    the matrix, input corner iz0, iy0, ix0, and the element offset of that corner in image b,
    channel 0 of the source)."""
    rows = ()
    for q in kd.unroll(NQ):
        rows = rows + (pixel_row(src, m_first + q * m_step, Mg, P, OH, OW, G),)
    return rows


@kd.func
def window_load(src, row, c, kz, ky, kx, ok, G):
    """src at the tap (kz, ky, kx) of a pixel row (pixel_rows), channel c of the group (c
    already offset by the group's first channel), as f32; 0 outside the input."""
    live, iz0, iy0, ix0, base = row
    dz, dy, dx = kz * G[6], ky * G[7], kx * G[8]
    iz, iy, ix = iz0 + dz, iy0 + dy, ix0 + dx
    inside = (ok and live and iz >= 0 and iz < src.shape[2] and iy >= 0 and iy < src.shape[3] and ix >= 0
              and ix < src.shape[4])
    at = (base + kd.i64(c) * src.stride(1) + kd.i64(dz) * src.stride(2) + kd.i64(dy) * src.stride(3)
          + kd.i64(dx) * src.stride(4))
    v = kd.f32(0)
    if inside:
        v = kd.f32(src[at])
    return v


@kd.func
def split_reduction(r, Cs, G):
    """(channel, kz, ky, kx) of forward-like reduction index r = tap·Cs + c."""
    tap = r // Cs
    kz, ky, kx = split_tap(tap, G)
    return r - tap * Cs, kz, ky, kx


@kd.func
def gather_a(src, arows, g, k0, a_col, a_cstep, R, Cs, Mg, P, OH, OW, MODE, NQ, G):
    """This unit's NQ elements of the A tile of step k0, as f32 registers."""
    vals = ()
    for q in kd.unroll(NQ):
        r = k0 + a_col + q * a_cstep
        ok = r < R
        rr = kd.select(ok, r, 0)
        if MODE == WEIGHT:   # A[co, (b, o)] = dy[b, co, o]
            live, off = arows[q]
            b = rr // P
            od, oh, ow = split_pixel(rr - b * P, OH, OW)
            at = (off + kd.i64(b) * src.stride(0) + kd.i64(od) * src.stride(2) + kd.i64(oh) * src.stride(3)
                  + kd.i64(ow) * src.stride(4))
            v = kd.f32(0)
            if ok and live:
                v = kd.f32(src[at])
            vals = vals + (v,)
        else:
            c, kz, ky, kx = split_reduction(rr, Cs, G)
            vals = vals + (window_load(src, arows[q], g * Cs + c, kz, ky, kx, ok, G),)
    return vals


@kd.func
def gather_b(w, x, brows, g, k0, b_col, b_cstep, R, Cs, Cg, Kg, P, OH, OW, MODE, NQ, G):
    """This unit's NQ elements of the B tile of step k0, as f32 registers."""
    vals = ()
    for q in kd.unroll(NQ):
        r = k0 + b_col + q * b_cstep
        ok = r < R
        rr = kd.select(ok, r, 0)
        if MODE == WEIGHT:   # B[(b, o), (c, tap)] = x[b, c, o·S + tap·Dil − P]
            live, c, kz, ky, kx = brows[q]
            b = rr // P
            od, oh, ow = split_pixel(rr - b * P, OH, OW)
            iz0, iy0, ix0 = od * G[0] - G[3], oh * G[1] - G[4], ow * G[2] - G[5]
            base = (kd.i64(b) * x.stride(0) + kd.i64(iz0) * x.stride(2) + kd.i64(iy0) * x.stride(3)
                    + kd.i64(ix0) * x.stride(4))
            vals = vals + (window_load(x, (live, iz0, iy0, ix0, base), g * Cg + c, kz, ky, kx, ok, G),)
        else:
            live, n = brows[q]
            c, kz, ky, kx = split_reduction(rr, Cs, G)
            v = kd.f32(0)
            if ok and live:
                if MODE == FORWARD:   # B[(tap, c), co] = w[co, c, tap]
                    v = kd.f32(w[g * Kg + n, c, kz, ky, kx])
                else:                 # B[(tap, co), c] = w[co, c, flipped tap]
                    v = kd.f32(w[g * Kg + c, n, G[9] - 1 - kz, G[10] - 1 - ky, G[11] - 1 - kx])
            vals = vals + (v,)
    return vals


@kd.func
def put(s, buf, vals, row, col, rstep, cstep, ROWS, NQ):
    """Store a unit's gathered elements into shared buffer `buf` ([BK][ROWS + PAD] words)."""
    for q in kd.unroll(NQ):
        s[(buf * BK + col + q * cstep) * (ROWS + PAD) + row + q * rstep] = vals[q]


@kd.func
def own(u, i):
    """Row (or column) i of the unit at position u of its side of the square: runs of four
    consecutive ones, 64 apart (so a unit's four are one 16-byte shared load where the
    compiler pairs them)."""
    return i // 4 * 64 + 4 * u + i % 4


@kd.func
def multiply(acc, sa, sb, buf, ra, rb, BM, BN, TM, TN):
    """acc[i·TN + j] += (fused multiply-adds, one rounding each) the step's A[own(ra, i)] ·
    B[own(rb, j)] over its BK columns."""
    for k in kd.unroll(BK):
        a = ()
        for i in kd.unroll(TM):
            a = a + (sa[(buf * BK + k) * (BM + PAD) + own(ra, i)],)
        b = ()
        for j in kd.unroll(TN):
            b = b + (sb[(buf * BK + k) * (BN + PAD) + own(rb, j)],)
        nxt = ()
        for i in kd.unroll(TM):
            for j in kd.unroll(TN):
                nxt = nxt + (kd.fma(a[i], b[j], acc[i * TN + j]),)
        acc = nxt
    return acc


@kd.kernel
def conv_simt(src: kd.Tensor, w: kd.Tensor, x: kd.Tensor, out: kd.Tensor, bias: kd.Tensor, Mg: kd.i32, Ng: kd.i32,
              R: kd.i32, CHUNK: kd.i32, Cs: kd.i32, Cg: kd.i32, Kg: kd.i32, MODE: kd.Const[int],
              HAS_BIAS: kd.Const[bool], G: kd.Const[tuple], PIX: kd.Const[tuple], BM: kd.Const[int], BN: kd.Const[int],
              A_KF: kd.Const[bool], B_KF: kd.Const[bool], OUT_M: kd.Const[bool], CUBES: kd.Const[int]):
    """One BM x BN tile of the pass's GEMM (module docstring). FORWARD / DATA: src is x / dy,
    w the weights, out y / dx; WEIGHT: src is dy, x the input, out the [splits, K, Cg·T] F32
    partials (w unused). `G` is the geometry the pass reads its source with (for DATA the
    flipped one: stride 1, padding Dil·(K − 1) − P). PIX, for WEIGHT: (OH, OW, pixels a
    sample) of dy, compile-time, so the divisions that split every gathered element's pixel
    are multiplications by constants (() for FORWARD / DATA: made compile-time there, the
    same sizes slowed those passes by up to 17 % on the H200, RESULTS.md session 24)."""
    kd.static_assert(kd.cube_units() == UNITS, "launch with UNITS units a cube")
    kd.cubes_per_compute_unit(CUBES)
    TM = BM // 16
    TN = BN // 16
    T = G[9] * G[10] * G[11]
    t = kd.unit_pos()
    g, split = group_and_split(MODE == WEIGHT, out.shape[1] // Kg)
    m0 = kd.cube_pos_x() * BM
    n0 = kd.cube_pos_y() * BN
    OH, OW = 1, 1
    P = 1
    if MODE == WEIGHT:      # the reduction runs over dy's pixels: split per element, so compile-time
        OH, OW, P = PIX[0], PIX[1], PIX[2]
    else:                   # the rows are out's pixels (split once a tile)
        OH, OW = out.shape[3], out.shape[4]
        P = out.shape[2] * OH * OW
    NQA = BM * BK // UNITS
    NQB = BN * BK // UNITS
    a_row, a_col, a_rstep, a_cstep = share(t, BM, A_KF)
    b_row, b_col, b_rstep, b_cstep = share(t, BN, B_KF)
    # the rows of this unit's shares, worked out once
    if MODE == WEIGHT:
        arows = ()
        for q in kd.unroll(NQA):
            m = m0 + a_row + q * a_rstep
            live = m < Mg
            arows = arows + ((live, kd.i64(g * Kg + kd.select(live, m, 0)) * src.stride(1)),)
        brows = ()
        for q in kd.unroll(NQB):
            n = n0 + b_row + q * b_rstep
            live = n < Ng
            nn = kd.select(live, n, 0)
            c = nn // T
            kz, ky, kx = split_tap(nn - c * T, G)
            brows = brows + ((live, c, kz, ky, kx),)
    else:
        arows = pixel_rows(src, m0 + a_row, a_rstep, NQA, Mg, P, OH, OW, G)
        brows = ()
        for q in kd.unroll(NQB):
            n = n0 + b_row + q * b_rstep
            brows = brows + ((n < Ng, kd.min(n, Ng - 1)),)
    sa = kd.shared(kd.f32, 2 * BK * (BM + PAD))
    sb = kd.shared(kd.f32, 2 * BK * (BN + PAD))
    u = t % 16
    v = t // 16
    ra = v
    rb = u
    if OUT_M:
        ra = u
        rb = v
    acc = (kd.f32(0),) * (TM * TN)
    r_lo = split * CHUNK
    r_hi = kd.min(R, r_lo + CHUNK)
    va = gather_a(src, arows, g, r_lo, a_col, a_cstep, r_hi, Cs, Mg, P, OH, OW, MODE, NQA, G)
    vb = gather_b(w, x, brows, g, r_lo, b_col, b_cstep, r_hi, Cs, Cg, Kg, P, OH, OW, MODE, NQB, G)
    put(sa, 0, va, a_row, a_col, a_rstep, a_cstep, BM, NQA)
    put(sb, 0, vb, b_row, b_col, b_rstep, b_cstep, BN, NQB)
    kd.sync_cube()
    buf = 0
    for k0 in range(r_lo, r_hi, BK):
        more = k0 + BK < r_hi
        if more:
            va = gather_a(src, arows, g, k0 + BK, a_col, a_cstep, r_hi, Cs, Mg, P, OH, OW, MODE, NQA, G)
            vb = gather_b(w, x, brows, g, k0 + BK, b_col, b_cstep, r_hi, Cs, Cg, Kg, P, OH, OW, MODE, NQB, G)
        acc = multiply(acc, sa, sb, buf, ra, rb, BM, BN, TM, TN)
        if more:
            put(sa, 1 - buf, va, a_row, a_col, a_rstep, a_cstep, BM, NQA)
            put(sb, 1 - buf, vb, b_row, b_col, b_rstep, b_cstep, BN, NQB)
        kd.sync_cube()
        buf = 1 - buf
    for i in kd.unroll(TM):
        m = m0 + own(ra, i)
        mm = kd.min(m, Mg - 1)
        if MODE == WEIGHT:
            for j in kd.unroll(TN):
                n = n0 + own(rb, j)
                if m < Mg and n < Ng:
                    out[split, g * Kg + mm, n] = acc[i * TN + j]
        else:
            od, oh, ow = split_pixel(mm % P, OH, OW)
            b = mm // P
            for j in kd.unroll(TN):
                n = n0 + own(rb, j)
                if m < Mg and n < Ng:
                    r = acc[i * TN + j]
                    if HAS_BIAS:
                        r = r + kd.f32(bias[g * Kg + n])
                    out[b, g * Ng + n, od, oh, ow] = r


def covers(p) -> str:
    """'' where this path runs p: F32 on a device whose units are not SIMD lanes and whose
    matrix primitive has no F32 (else the reason)."""
    caps = p.runtime.capabilities
    if p.dtype != kd.f32:
        return f"the F32 GEMM path runs F32, not {p.dtype.name.upper()}"
    if caps.units_are_simd_lanes:
        return "devices whose units are SIMD lanes take the row-vector plans (rows.py)"
    if caps.max_cube_units < UNITS:
        return f"a cube of {UNITS} units does not fit this device"
    return ""


def tile_columns(n: int) -> int:
    """BN (and BM) for a GEMM side of n: 64 where 64 holds it (narrow layers), else 128."""
    return 64 if n <= 64 else 128


def cubes(bm: int, bn: int) -> int:
    """The kd.cubes_per_compute_unit hint of a bm x bn tile."""
    return CUBES_PER_UNIT if bm * bn <= 128 * 64 else CUBES_PER_UNIT_WIDE


def pixel_sizes(spatial: tuple) -> tuple:
    """conv_simt's PIX (the WEIGHT pass) for dy's (D, H, W) sizes: (H, W, D·H·W)."""
    return (spatial[1], spatial[2], spatial[0] * spatial[1] * spatial[2])


def _contiguous_channels(t) -> bool:
    return t.strides[1] == 1 or t.shape[1] == 1


def _grid(M: int, N: int, bm: int, bn: int, z: int) -> tuple:
    return (-(-M // bm), -(-N // bn), z)


def run_forward(p, y5, dummy) -> None:
    """y5 = the forward pass of p (any layout: the operands arrive as 5-D strided views)."""
    g = p.geo
    bias = p.bias if p.bias is not None else dummy
    M, R = g.B * g.pixels, g.Cg * g.taps
    bn = tile_columns(g.Kg)
    conv_simt[_grid(M, g.Kg, 128, bn, g.groups), UNITS](
        p.x, p.w, p.x, y5, bias, M, g.Kg, R, R, g.Cg, g.Cg, g.Kg, FORWARD, p.bias is not None, g.consts(), (), 128, bn,
        _contiguous_channels(p.x), _contiguous_channels(p.w), not _contiguous_channels(y5), cubes(128, bn))


def data_covers(p) -> bool:
    """The data pass runs here at stride 1 (a forward over flipped taps)."""
    return p.geo.stride == (1, 1, 1)


def flipped_geometry(g) -> tuple:
    """The geometry the data pass reads dy with: stride 1, padding Dil·(K − 1) − P."""
    pad = tuple(d * (k - 1) - q for d, k, q in zip(g.dil, g.R, g.pad))
    return (1, 1, 1, *pad, *g.dil, *g.R)


def run_data_backward(p, dx5, dummy) -> None:
    """dx5 = the data pass of p at stride 1 (data_covers)."""
    g = p.geo
    M, R = g.B * g.in_pixels, g.Kg * g.taps
    bn = tile_columns(g.Cg)
    conv_simt[_grid(M, g.Cg, 128, bn, g.groups), UNITS](
        p.dy, p.w, p.dy, dx5, dummy, M, g.Cg, R, R, g.Kg, g.Cg, g.Kg, DATA, False, flipped_geometry(g), (),
        128, bn,
        _contiguous_channels(p.dy), False, not _contiguous_channels(dx5), cubes(128, bn))


def weight_splits(p, tiles: int, steps: int) -> int:
    """Reduction ranges of the weight gradient: enough cubes to fill the device twice, each
    range at least 32 steps."""
    want = -(-2 * max(p.runtime.capabilities.compute_units, 1) // tiles)
    return max(1, min(want, steps // 32, 256))


def run_weight_backward(p, dw5) -> None:
    """dw5 = the weight pass of p: split F32 partials, then implicit_gemm.sum_partials."""
    from .implicit_gemm import SUM_UNITS, sum_partials
    g = p.geo
    rt = p.runtime
    R, N = g.B * g.pixels, g.Cg * g.taps
    bm, bn = tile_columns(g.Kg), tile_columns(N)
    tiles = -(-g.Kg // bm) * -(-N // bn) * g.groups
    splits = weight_splits(p, tiles, -(-R // BK))
    chunk = -(-(-(-R // splits)) // BK) * BK
    splits = -(-R // chunk)
    part = rt.empty((splits, g.K, N), "f32")
    conv_simt[_grid(g.Kg, N, bm, bn, g.groups * splits), UNITS](
        p.dy, p.x, p.x, part, part, g.Kg, N, R, chunk, g.Kg, g.Cg, g.Kg, WEIGHT, False, g.consts(),
        pixel_sizes(g.O), bm, bn,
        True, True, False, cubes(bm, bn))
    dw = dw5._view((g.K, N), (N, 1))
    sum_partials[(g.K * N + SUM_UNITS - 1) // SUM_UNITS, SUM_UNITS](part, dw)
