"""The weight gradient (`ImplicitGemm`) on group products (`kd.group_mma`: wgmma on the H200,
an exact emulation elsewhere), for F16/BF16 with Cin/groups and Cout/groups multiples of 8.

Per group g the weight gradient is a GEMM whose reduction runs over every (sample, output
pixel) pair r = (b, o):

    dW[g·Kg + k, n = (tap, c)] = sum_r dy[r, g·Kg + k] · x[b, o·S + tap·Dil − P, g·Cg + c]

M = Cout/groups, N = taps·Cin/groups (channels innermost, as they lie in channels-last
memory) and a reduction of B·O pixels (about 200k on the ResNet-50 set) while M x N is small,
so the reduction is split into `splits` fixed ranges of whole BK steps: cube (x, y, z) owns
the 64 x BN tile (x, y) of group z % groups over range z // groups, and writes it as F32
partials [splits, K, N]; `sum_partials` then adds the ranges in split order (deterministic,
no atomics) into dw's [K, Cin/groups, *R] layout, converting to its dtype.

Both operands come from channels-last copies (small transpose kernels, as in
implicit_gemm_dgrad): dy's pixel rows have their Cout contiguous and x's have their Cin
contiguous, so a reduction step of BK = 64 pixels stages, with 16-byte `kd.async_copy`s,
A = dyᵀ as its stored transpose (BK pixel rows x 64 output channels: one 128-byte band row
a pixel) and B = im2col(x) as stored (BK pixel rows x BN (tap, channel) columns), both in
the 128-byte group-tile layout; the copies of a tap outside the input are zero-filled, so the
padding is never stored. The ring is the forward's (implicit_gemm_group): STAGES slots,
INFLIGHT products left running across a step's barrier, copies AHEAD steps ahead.

A cube is one group of 4 planes. Each unit copies one fixed 8-column chunk of A (an 8-channel
run of dy) and one of B (an 8-channel run of one tap), for rows `row + i·RS` of a step: the
tap and channel of its B chunk are worked out once; a step splits the pixel of its first B
row and carries the next rows' through by subtraction.
"""
from __future__ import annotations

import kerneldsl as kd

from .gather import split_tap
from .implicit_gemm_dgrad import channels_last_view, copy_to_channels_last
from .implicit_gemm_group import next_slot
from .problem import Problem

BM = 64           # output channels a cube (one group of 4 planes)
BK = 64           # pixels a reduction step: A's stored rows are one 128-byte band row each
SW = 128          # the group-tile layout's swizzle span (bytes)
SUM_UNITS = 256
MIN_STEPS = 8     # reduction steps a split at least (the ring's fill and the epilogue amortised)


@kd.func
def fetch_step(sa, sb, dy, x, abase, bbase, bcol, kt, r_lo, r_hi, arow, acol, brow, kcol, OD, OH, OW, ARS, NRA, BRS,
               NRB, G):
    """This unit's async copies of reduction step kt: A rows arow + i·ARS (pixels of the
    step) of dy's channels kcol.. (kcol < 0: past Cout, zeros) into column acol of the
    stored A tile from sa[abase..], B rows brow + i·BRS of x under its chunk's tap
    (bcol = (live, tap offsets dz, dy, dx, input channel, column in the tile)) into
    sb[bbase..]; zeros outside the input and past the range. `abase`/`bbase` are the
    slot's starts."""
    p0 = r_lo + kt * BK
    for i in kd.unroll(NRA):
        r = arow + i * ARS
        pix = p0 + r
        inside = pix < r_hi and kcol >= 0
        off = kd.i64(kd.select(inside, pix, 0)) * dy.stride(4) + kd.i64(kd.max(kcol, 0))
        kd.async_copy(sa, abase + kd.tile_offset(r, acol, BK, swizzle=SW), dy, kd.select(inside, off, kd.i64(0)), 8,
                      inside)
    live, dz, dyy, dxx, cin, ccol = bcol
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    # the first row's pixel p0 + brow = ((b·OD + od)·OH + oh)·OW + ow in three divisions; each
    # next row is BRS pixels on: carried through (ow, oh, od, b) by subtractions
    up = kd.u32(p0 + brow)
    q = up // kd.u32(OW)
    ow = kd.i32(up - q * kd.u32(OW))
    q2 = q // kd.u32(OH)
    oh = kd.i32(q - q2 * kd.u32(OH))
    ub = q2 // kd.u32(OD)
    od = kd.i32(q2 - ub * kd.u32(OD))
    b = kd.i32(ub)
    for i in kd.unroll(NRB):
        r = brow + i * BRS
        pix = p0 + r
        ok = live and pix < r_hi
        iz, iy, ix = od * G[0] + dz, oh * G[1] + dyy, ow * G[2] + dxx
        inside = ok and iz >= 0 and iz < D and iy >= 0 and iy < H and ix >= 0 and ix < W
        off = (kd.i64(b) * x.stride(0) + cin + kd.i64(iz) * x.stride(2) + kd.i64(iy) * x.stride(3)
               + kd.i64(ix) * x.stride(4))
        kd.async_copy(sb, bbase + kd.tile_offset(r, ccol, BK, swizzle=SW), x, kd.select(inside, off, kd.i64(0)), 8,
                      inside)
        if i + 1 < NRB:
            ow += BRS
            while ow >= OW:
                ow -= OW
                oh += 1
            while oh >= OH:
                oh -= OH
                od += 1
            while od >= OD:
                od -= OD
                b += 1
    kd.async_commit()


@kd.kernel
def wgrad_group(dy: kd.Tensor, x: kd.Tensor, part: kd.Tensor[kd.f32, 3], Kg: kd.i32, Cg: kd.i32, CHUNK: kd.i32,
                DT: kd.Const[object], G: kd.Const[tuple], BN: kd.Const[int], STAGES: kd.Const[int],
                INFLIGHT: kd.Const[int]):
    """part[split, g·Kg + k, tap·Cg + c] = sum over the split's pixels r = (b, o) of
    dy[b, g·Kg + k, o]·x[b, g·Cg + c, o·S + tap·Dil − P] (dy and x channels-last 5-D views,
    dy packed: its pixel r starts at r·Cout)."""
    kd.static_assert(kd.cube_units() == 4 * kd.PLANE_DIM, "launch with 4 planes (one group) per cube")
    kd.static_assert(INFLIGHT == 0 or INFLIGHT == 1, "INFLIGHT: 0 or 1 products left running")
    kd.static_assert(STAGES >= 2 + INFLIGHT, "the ring needs STAGES - 1 - INFLIGHT >= 1 steps ahead")
    U = kd.cube_units()
    ACH = BM // 8                  # 16-byte chunks of an A row
    BCH = BN // 8                  # ... of a B row
    kd.static_assert(U % ACH == 0 and U % BCH == 0, "units must split the rows' chunks evenly")
    ARS = U // ACH
    BRS = U // BCH
    kd.static_assert(BK % ARS == 0 and BK % BRS == 0, "units must split a step's rows evenly")
    NRA = BK // ARS
    NRB = BK // BRS
    AHEAD = STAGES - 1 - INFLIGHT
    A_STAGE = BM * BK
    B_STAGE = BK * BN

    groups = x.shape[1] // Cg
    g = kd.cube_pos_z() % groups
    split = kd.cube_pos_z() // groups
    m0 = kd.cube_pos_x() * BM
    n0 = kd.cube_pos_y() * BN
    Ng = part.shape[2]
    OD, OH, OW = dy.shape[2], dy.shape[3], dy.shape[4]
    R = dy.shape[0] * OD * OH * OW
    r_lo = split * CHUNK
    r_hi = kd.min(R, r_lo + CHUNK)
    KT = (r_hi - r_lo + BK - 1) // BK

    t = kd.unit_pos()
    arow = t // ACH
    acol = t % ACH * 8
    kcol = kd.select(m0 + acol < Kg, g * Kg + m0 + acol, -1)
    brow = t // BCH
    ccol = t % BCH * 8
    n = n0 + ccol
    live = n < Ng
    nn = kd.select(live, n, 0)
    tap = nn // Cg
    kz, ky, kx = split_tap(tap, G)
    bcol = (live, kz * G[6] - G[3], ky * G[7] - G[4], kx * G[8] - G[5], kd.i64(g * Cg + nn - tap * Cg), ccol)

    sa = kd.shared(DT, STAGES * A_STAGE)
    sb = kd.shared(DT, STAGES * B_STAGE)
    acc = kd.group_fragment_acc(64, BN)
    kd.fill_fragment(acc, 0.0)

    for s in kd.unroll(AHEAD):
        fetch_step(sa, sb, dy, x, s * A_STAGE, s * B_STAGE, bcol, s, r_lo, r_hi, arow, acol, brow, kcol, OD, OH, OW,
                   ARS, NRA, BRS, NRB, G)
    rs = 0
    ws = AHEAD
    for kt in range(KT):
        kd.async_wait(AHEAD - 1)   # this unit's copies of step kt are in ...
        kd.sync_cube()             # ... everyone's are, and slot ws's last product is done
        kd.group_mma(acc, kd.shared_tile(sa, rs * A_STAGE, BM, BK, transposed=True, swizzle=SW),
                     kd.shared_tile(sb, rs * B_STAGE, BK, BN, swizzle=SW))
        fetch_step(sa, sb, dy, x, ws * A_STAGE, ws * B_STAGE, bcol, kt + AHEAD, r_lo, r_hi, arow, acol, brow, kcol,
                   OD, OH, OW, ARS, NRA, BRS, NRB, G)
        kd.group_wait(INFLIGHT)
        rs = next_slot(rs, STAGES)
        ws = next_slot(ws, STAGES)
    kd.group_wait(0)
    kd.async_wait(0)

    for q in kd.unroll(kd.fragment_len(acc)):
        m = m0 + kd.fragment_row(acc, q)
        c = n0 + kd.fragment_col(acc, q)
        if m < Kg and c < Ng:
            part[split, g * Kg + m, c] = kd.fragment_get(acc, q)


@kd.kernel
def sum_partials(part: kd.Tensor[kd.f32, 3], dw: kd.Tensor, n: kd.i32, G: kd.Const[tuple]):
    """dw[k, c, tap] = sum over splits s, in order, of part[s, k, tap·Cg + c] (dw the 5-D
    weight view [K, Cg, *R]); a unit per element of a partial, in the partials' memory order
    (the reads, split after split, are the bulk of the traffic: they stay contiguous)."""
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        N = part.shape[2]
        Cg = dw.shape[1]
        k = i // N
        col = i % N
        tap = col // Cg
        s = kd.f32(0)
        for q in range(part.shape[0]):
            s += part[q, k, col]
        kz, ky, kx = split_tap(tap, G)
        dw[k, col - tap * Cg, kz, ky, kx] = s


def tile_shape(caps) -> tuple:
    """(BN, STAGES, INFLIGHT). Native group products: 128 (tap, channel) columns a cube and a
    3-slot ring, each product waited for in its step (the forward's measured best shape,
    implicit_gemm_group.tile_shape; 3 slots are 72 KiB, so three cubes share an SM). Emulated
    ones keep their accumulators in shared memory too: 64 columns, one product in flight."""
    if caps.group_mma_native:
        return 128, 3, 0
    return 64, 3, 1


def shared_bytes(bn: int, stages: int) -> int:
    """Shared memory of the ring (16-bit elements)."""
    return stages * (BM + bn) * BK * 2


def fits(caps, bn: int, stages: int) -> bool:
    """The launch shape works on the device: a cube of 4 planes whose units split a step's
    chunks of both operands evenly, and the ring within the device's shared memory."""
    U = 4 * caps.plane_dim
    ach, bch = BM // 8, bn // 8
    return (bn % 64 == 0 and U <= caps.max_cube_units and U % ach == 0 and U % bch == 0
            and BK % (U // ach) == 0 and BK % (U // bch) == 0 and shared_bytes(bn, stages) <= caps.max_shared_bytes)


def covers(p: Problem) -> bool:
    """This kernel is the weight gradient for p: native group products of p's dtype (F16/BF16),
    Cin/groups and Cout/groups multiples of 8 (16-byte channel runs in both channels-last
    copies), and the tile shape fits the device."""
    caps = p.runtime.capabilities
    g = p.geo
    return (caps.group_mma_native and p.dtype in caps.mma_dtypes and g.Cg % 8 == 0 and g.Kg % 8 == 0
            and fits(caps, *tile_shape(caps)[:2]))


def weight_splits(p: Problem, bn: int, stages: int) -> int:
    """Reduction ranges: as many as make one full wave of cubes (an SM holds as many as the
    ring's shared memory allows, at most 4; all cubes do the same work, so a partial second
    wave would only add its time), each range at least MIN_STEPS steps."""
    g = p.geo
    caps = p.runtime.capabilities
    tiles = -(-g.Kg // BM) * -(-(g.Cg * g.taps) // bn) * g.groups
    steps = -(-(g.B * g.pixels) // BK)
    per_sm = max(1, min(4, caps.max_shared_bytes // shared_bytes(bn, stages)))
    wave = max(caps.compute_units, 1) * per_sm
    return max(1, min(wave // tiles, steps // MIN_STEPS))


def _packed_channels_last(t, shape5: tuple) -> bool:
    """t is already the packed NDHWC layout of a [N, C, D, H, W] view, 16-byte aligned."""
    N, C, D, H, W = shape5
    return t.strides == (D * H * W * C, 1, H * W * C, W * C, C) and t.offset % 8 == 0


def _channels_last(rt, t, dtype):
    """t as a packed channels-last 5-D view: itself where it is one, else a transposed copy."""
    shape5 = tuple(t.shape)
    if _packed_channels_last(t, shape5):
        return t
    N, C, D, H, W = shape5
    buf = rt.empty((N * D * H * W * C,), dtype)
    cl = channels_last_view(rt, buf.buffer, shape5, dtype, buf.offset)
    copy_to_channels_last(rt, t, cl, dtype)
    return cl


def run_weight_backward(p: Problem, dw5, bn: int | None = None, stages: int | None = None,
                        inflight: int | None = None, splits: int | None = None) -> None:
    """dw5 = the weight gradient of p (fits(...) and the channel rules of covers(p) must
    hold): the channels-last copies, the split group-product GEMM, the ordered sum. The
    tile shape and splits from tile_shape() / weight_splits() unless given (tests and
    benchmarks force others)."""
    g = p.geo
    rt = p.runtime
    BN, S, L = tile_shape(rt.capabilities)
    BN, S, L = bn or BN, stages or S, L if inflight is None else inflight
    R, N = g.B * g.pixels, g.Cg * g.taps
    splits = splits or weight_splits(p, BN, S)
    chunk = -(-(-(-R // splits)) // BK) * BK
    splits = -(-R // chunk)
    dy_cl = _channels_last(rt, p.dy, p.dtype)
    x_cl = _channels_last(rt, p.x, p.dtype)
    part = rt.empty((splits, g.K, N), "f32")
    grid = (-(-g.Kg // BM), -(-N // BN), g.groups * splits)
    wgrad_group[grid, 4 * rt.plane_dim](dy_cl, x_cl, part, g.Kg, g.Cg, chunk, p.dtype, g.consts(), BN, S, L)
    n = g.K * N
    sum_partials[-(-n // SUM_UNITS), SUM_UNITS](part, dw5, n, g.consts())
