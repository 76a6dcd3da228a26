"""The `ImplicitGemm` strategy for F16/BF16 (F32: implicit_gemm_simt.py): each pass as one GEMM over an im2col matrix
that is never built, on the matrix primitive (m16n16k16 fragments, F32 accumulation:
tensor cores on CUDA, the exact emulation elsewhere).

    forward        C[(b, o), co]      = sum_{(c, tap)}  x[b, c, o·S + tap·Dil − P] · w[co, c, tap]
    data backward  C[(b, i), c]       = sum_{(co, tap)} dy[b, co, (i + P − tap·Dil) / S] · w[co, c, tap]
                   (stride 1: a forward over flipped weights where implicit_gemm_dgrad covers it)
    weight backward C[co, (c, tap)]   = sum_{(b, o)}    dy[b, co, o] · x[b, c, o·S + tap·Dil − P]
                   (on group products where implicit_gemm_wgrad covers it)

per group (the grid's z axis). A cube of 4 planes owns a 64 x 64 tile of C (each plane
32 x 32, 2 x 2 fragments); every BK = 32 step the units gather the A and B tiles into shared
memory (zeros outside the input, past the edges, and where no output position reaches an
input), then the planes multiply them. The weight gradient splits its (batch x pixel)
reduction into `splits` fixed ranges written as F32 partials; a second kernel sums them in
split order, so the result is deterministic.
"""
from __future__ import annotations

import kerneldsl as kd

from .gather import group_and_split, reaching_value, split_pixel, split_tap, window_value

BM = 64
BN = 64
BK = 32
SK = BK + 8     # shared row stride (elements), skewed against bank conflicts
FORWARD, DATA, WEIGHT = 0, 1, 2
SUM_UNITS = 256
MIN_GROUP_CHANNELS = 4   # below this per group (depthwise), 64-wide tiles would be mostly padding


@kd.func
def fwd_a(x, m, r, g, Mg, R, Cg, P, OH, OW, G):
    """x gathered for output pixel m = (b, o) and reduction index r = (c, tap)."""
    T = G[9] * G[10] * G[11]
    live = m < Mg and r < R
    mm = kd.select(live, m, 0)
    rr = kd.select(live, r, 0)
    od, oh, ow = split_pixel(mm % P, OH, OW)
    kz, ky, kx = split_tap(rr % T, G)
    v = window_value(x, mm // P, g * Cg + rr // T, od, oh, ow, kz, ky, kx, G)
    return kd.select(live, v, 0.0)


@kd.func
def data_a(dy, m, r, g, Mg, R, Kg, P, H, W, G):
    """dy gathered for input pixel m = (b, i) and reduction index r = (co, tap)."""
    T = G[9] * G[10] * G[11]
    live = m < Mg and r < R
    mm = kd.select(live, m, 0)
    rr = kd.select(live, r, 0)
    iz, iy, ix = split_pixel(mm % P, H, W)
    kz, ky, kx = split_tap(rr % T, G)
    v = reaching_value(dy, mm // P, g * Kg + rr // T, iz, iy, ix, kz, ky, kx, G)
    return kd.select(live, v, 0.0)


@kd.func
def weight_value(w, co, c, t, live, G):
    """w[co, c, tap t] as f32, 0 unless live (indices clamped by the caller)."""
    kz, ky, kx = split_tap(t, G)
    return kd.select(live, kd.f32(w[co, c, kz, ky, kx]), 0.0)


@kd.func
def stage(sa, sb, A, Bt, g, m0, n0, k0, Mg, Ng, R, Cg, Kg, P, OH, OW, H, W, MODE, G):
    """The A tile (m0.., k0..) into sa[m * SK + k] and the B tile (k0.., n0..) into
    sb[n * SK + k] (n-major: read as column-layout B fragments), every unit a share."""
    U = kd.cube_units()
    t = kd.unit_pos()
    T = G[9] * G[10] * G[11]
    for e0 in range(0, BM * BK, U):
        e = e0 + t
        i = e // BK
        k = e % BK
        if MODE == FORWARD:
            v = fwd_a(A, m0 + i, k0 + k, g, Mg, R, Cg, P, OH, OW, G)
        elif MODE == DATA:
            v = data_a(A, m0 + i, k0 + k, g, Mg, R, Kg, P, H, W, G)
        else:   # A = dy[b, co = m, o], r = (b, o) over this split
            r = k0 + k
            live = m0 + i < Mg and r < R
            rr = kd.select(live, r, 0)
            od, oh, ow = split_pixel(rr % P, OH, OW)
            v = kd.select(live, kd.f32(A[rr // P, g * Kg + kd.min(m0 + i, Mg - 1), od, oh, ow]), 0.0)
        sa[i * SK + k] = v
    for e0 in range(0, BN * BK, U):
        e = e0 + t
        j = e // BK
        k = e % BK
        n = n0 + j
        r = k0 + k
        live = n < Ng and r < R
        nn = kd.select(live, n, 0)
        rr = kd.select(live, r, 0)
        if MODE == FORWARD:     # B[(c, tap), co] = w[co, c, tap]
            v = weight_value(Bt, g * Kg + nn, rr // T, rr % T, live, G)
        elif MODE == DATA:      # B[(co, tap), c] = w[co, c, tap]
            v = weight_value(Bt, g * Kg + rr // T, nn, rr % T, live, G)
        else:                   # B[(b, o), (c, tap)] = x[b, c, o·S + tap·Dil − P]
            od, oh, ow = split_pixel(rr % P, OH, OW)
            kz, ky, kx = split_tap(nn % T, G)
            v = kd.select(live, window_value(Bt, rr // P, g * Cg + nn // T, od, oh, ow, kz, ky, kx, G), 0.0)
        sb[j * SK + k] = v


@kd.func
def products(acc, fa, fb, sa, sb, abase, bbase, pm, pn):
    """acc (2 x 2 fragments) += the plane's 32 x 32 block of the A·B staged at sa[abase..]
    (row-major m x BK) and sb[bbase..] (n-major n x BK)."""
    for kk in kd.unroll(0, BK, 16):
        for i in kd.unroll(2):
            kd.load_fragment(fa[i], sa, abase + (pm + i * 16) * SK + kk, SK)
        for j in kd.unroll(2):
            kd.load_fragment(fb[j], sb, bbase + (pn + j * 16) * SK + kk, SK)
        for i in kd.unroll(2):
            for j in kd.unroll(2):
                kd.mma(acc[i * 2 + j], fa[i], fb[j])


@kd.func
def plane_tiles(DT):
    """A plane's 2 x 2 zeroed accumulators and its A and B operand fragments."""
    acc = (kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16),
           kd.fragment_acc(16, 16, 16))
    fa = (kd.fragment_a(DT, 16, 16, 16), kd.fragment_a(DT, 16, 16, 16))
    fb = (kd.fragment_b(DT, 16, 16, 16, layout="col"), kd.fragment_b(DT, 16, 16, 16, layout="col"))
    for f in kd.unroll(4):
        kd.fill_fragment(acc[f], 0.0)
    return acc, fa, fb


@kd.kernel
def conv_gemm(A: kd.Tensor, Bt: kd.Tensor, out: kd.Tensor, bias: kd.Tensor, Mg: kd.i32, Ng: kd.i32,
              R: kd.i32, CHUNK: kd.i32, Cg: kd.i32, Kg: kd.i32, MODE: kd.Const[int], HAS_BIAS: kd.Const[bool],
              DT: kd.Const[object], G: kd.Const[tuple]):
    """One 64 x 64 tile of the pass's implicit GEMM (see the module docstring); `out` is y
    (forward), dx (data backward) or the [splits, K, Cg·T] F32 partials (weight backward)."""
    kd.static_assert(kd.cube_units() == 4 * kd.PLANE_DIM, "launch with 4 planes per cube")
    g, split = group_and_split(MODE == WEIGHT, out.shape[1] // Kg)
    m0 = kd.cube_pos_x() * BM
    n0 = kd.cube_pos_y() * BN
    H, W = 1, 1
    OH, OW = 1, 1
    if MODE == FORWARD:
        H, W = A.shape[3], A.shape[4]
        OH, OW = out.shape[3], out.shape[4]
        P = out.shape[2] * OH * OW
    elif MODE == DATA:
        H, W = out.shape[3], out.shape[4]
        OH, OW = A.shape[3], A.shape[4]
        P = out.shape[2] * H * W
    else:
        OH, OW = A.shape[3], A.shape[4]
        P = A.shape[2] * OH * OW
    p = kd.plane_pos()
    pm = p // 2 * 32
    pn = p % 2 * 32
    sa = kd.shared(DT, BM * SK)
    sb = kd.shared(DT, BN * SK)
    acc, fa, fb = plane_tiles(DT)
    r_lo = split * CHUNK
    r_hi = kd.min(R, r_lo + CHUNK)
    for k0 in range(r_lo, r_hi, BK):
        stage(sa, sb, A, Bt, g, m0, n0, k0, Mg, Ng, r_hi, Cg, Kg, P, OH, OW, H, W, MODE, G)
        kd.sync_cube()
        products(acc, fa, fb, sa, sb, 0, 0, pm, pn)
        kd.sync_cube()
    for f in kd.unroll(4):
        for q in kd.unroll(kd.fragment_len(acc[f])):
            m = m0 + pm + f // 2 * 16 + kd.fragment_row(acc[f], q)
            n = n0 + pn + f % 2 * 16 + kd.fragment_col(acc[f], q)
            if m < Mg and n < Ng:
                v = kd.fragment_get(acc[f], q)
                if MODE == FORWARD:
                    od, oh, ow = split_pixel(m % P, OH, OW)
                    co = g * Kg + n
                    if HAS_BIAS:
                        v = v + kd.f32(bias[co])
                    out[m // P, co, od, oh, ow] = v
                elif MODE == DATA:
                    iz, iy, ix = split_pixel(m % P, H, W)
                    out[m // P, g * Cg + n, iz, iy, ix] = v
                else:
                    out[split, g * Kg + m, n] = v


@kd.kernel
def sum_partials(part: kd.Tensor[kd.f32, 3], dw: kd.Tensor):
    """dw[k, j] = sum over splits s, in order, of part[s, k, j] (dw a [K, Cg·T] view)."""
    N = dw.shape[1]
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < dw.shape[0] * N:
        s = kd.f32(0)
        for q in range(part.shape[0]):
            s += part[q, i // N, i % N]
        dw[i // N, i % N] = s


def covers(p, pass_name: str = "forward") -> str:
    """'' when the implicit GEMM runs p's `pass_name` ('forward', 'data' or 'weight'), else
    why it falls back to Direct. F32 takes implicit_gemm_simt (the units' own multiply-adds)
    where that covers it."""
    if p.dtype == kd.f32:
        return _f32_covers(p, pass_name)
    if p.dtype not in (kd.f16, kd.bf16):
        return f"ImplicitGemm runs F16/BF16 on the matrix primitive, not {p.dtype.name.upper()}"
    if p.dtype not in p.runtime.capabilities.mma_dtypes:
        return f"the matrix primitive of this device has no {p.dtype.name.upper()}"
    if _group_channels(p):
        return _group_channels(p)
    if 4 * p.runtime.capabilities.plane_dim > p.runtime.capabilities.max_cube_units or 256 % p.runtime.plane_dim:
        return "a cube of 4 planes does not fit this device"
    return ""


def _group_channels(p) -> str:
    if p.geo.Cg < MIN_GROUP_CHANNELS or p.geo.Kg < MIN_GROUP_CHANNELS:
        return (f"ImplicitGemm needs at least {MIN_GROUP_CHANNELS} channels per group on both sides "
                f"(Cin/groups = {p.geo.Cg}, Cout/groups = {p.geo.Kg}): depthwise runs Direct")
    return ""


def _f32_covers(p, pass_name: str) -> str:
    from . import implicit_gemm_simt
    why = implicit_gemm_simt.covers(p) or _group_channels(p)
    if not why and pass_name == "data" and not implicit_gemm_simt.data_covers(p):
        why = "the F32 data pass runs as a GEMM at stride 1 only (a forward over flipped taps)"
    return why


def _grid(M, N, z):
    return ((M + BM - 1) // BM, (N + BN - 1) // BN, z)


def _units(p) -> int:
    return 4 * p.runtime.plane_dim


def run_forward(p, y5, dummy) -> None:
    """y5 = the forward pass: a 1×1 channels-last convolution as the roles GEMM where the device
    has it (pointwise.py), group products where the device has them natively and the
    channels-last layout allows it, else the async-copy ring where the layout allows it."""
    from . import implicit_gemm_group, implicit_gemm_nhwc, implicit_gemm_simt, pointwise
    if p.dtype == kd.f32:
        implicit_gemm_simt.run_forward(p, y5, dummy)
        return
    views = pointwise.operands(p, y5)
    if views is not None:
        pointwise.run_forward(p, views, dummy)
        return
    if implicit_gemm_group.covers(p):
        implicit_gemm_group.run_forward(p, y5, dummy)
        return
    if implicit_gemm_nhwc.covers(p):
        implicit_gemm_nhwc.run_forward(p, y5, dummy)
        return
    g = p.geo
    bias = p.bias if p.bias is not None else dummy
    M, R = g.B * g.pixels, g.Cg * g.taps
    conv_gemm[_grid(M, g.Kg, g.groups), _units(p)](p.x, p.w, y5, bias, M, g.Kg, R, R, g.Cg, g.Kg, FORWARD,
                                                   p.bias is not None, p.dtype, g.consts())


def run_data_backward(p, dx5, dummy) -> None:
    """dx5 = the data backward pass: a 1×1 convolution on NCDHW operands as batched products
    on group products (pointwise_backward, no copies), for stride 1 as a forward on group
    products where that kernel covers it (implicit_gemm_dgrad), else the gather GEMM here."""
    from . import implicit_gemm_dgrad, implicit_gemm_simt, pointwise_backward
    if p.dtype == kd.f32:
        implicit_gemm_simt.run_data_backward(p, dx5, dummy)
        return
    views = pointwise_backward.data_operands(p, dx5)
    if views is not None:
        pointwise_backward.run_data_backward(p, views)
        return
    if implicit_gemm_dgrad.covers(p):
        implicit_gemm_dgrad.run_data_backward(p, dx5, dummy)
        return
    g = p.geo
    M, R = g.B * g.in_pixels, g.Kg * g.taps
    conv_gemm[_grid(M, g.Cg, g.groups), _units(p)](p.dy, p.w, dx5, dx5, M, g.Cg, R, R, g.Cg, g.Kg, DATA,
                                                   False, p.dtype, g.consts())


def weight_splits(p) -> int:
    """Reduction ranges of the weight gradient: enough cubes to fill the device twice."""
    g = p.geo
    tiles = ((g.Kg + BM - 1) // BM) * ((g.Cg * g.taps + BN - 1) // BN) * g.groups
    steps = (g.B * g.pixels + BK - 1) // BK
    want = -(-2 * max(p.runtime.capabilities.compute_units, 1) // tiles)
    return max(1, min(want, steps // 4, 64))


def run_weight_backward(p, dw5) -> None:
    """dw5 = the weight gradient: a 1×1 convolution on NCDHW operands as batched products on
    group products (pointwise_backward, no copies), else on group products where
    implicit_gemm_wgrad covers p (native group products, channel counts a group multiples of
    8), else the split gather GEMM here."""
    from . import implicit_gemm_simt, implicit_gemm_wgrad, pointwise_backward
    views = pointwise_backward.weight_operands(p)
    if p.dtype == kd.f32:
        implicit_gemm_simt.run_weight_backward(p, dw5)
    elif views is not None:
        pointwise_backward.run_weight(p, dw5, views)
    elif implicit_gemm_wgrad.covers(p):
        implicit_gemm_wgrad.run_weight_backward(p, dw5)
    else:
        run_weight_backward_gather(p, dw5)


def run_weight_backward_gather(p, dw5) -> None:
    """dw5 = the weight gradient as the split gather GEMM (conv_gemm in WEIGHT mode): every
    F16/BF16 problem covers() accepts."""
    g = p.geo
    rt = p.runtime
    R, N = g.B * g.pixels, g.Cg * g.taps
    splits = weight_splits(p)
    chunk = -(-(-(-R // splits)) // BK) * BK
    splits = -(-R // chunk)
    part = rt.empty((splits, g.K, N), "f32")
    conv_gemm[_grid(g.Kg, N, g.groups * splits), _units(p)](p.dy, p.x, part, part, g.Kg, N, R, chunk, g.Cg, g.Kg,
                                                             WEIGHT, False, p.dtype, g.consts())
    dw = dw5._view((g.K, N), (N, 1))
    sum_partials[(g.K * N + SUM_UNITS - 1) // SUM_UNITS, SUM_UNITS](part, dw)
