"""The channels-last forward `ImplicitGemm` path on group products (`kd.group_mma`: wgmma on
the H200, an exact emulation elsewhere), for the operands the async-copy ring takes
(implicit_gemm_nhwc.covers: F16/BF16, Cin/groups a multiple of 8, 16-byte aligned).

A cube of GROUPS groups (4 planes each) owns a BM x BN tile of [B·O pixels] x [Cout of one
group], BM = 64·GROUPS·MI; group q multiplies its MI 64-row fragments (rows 64(q·MI + f) ..
+ 63) into 64 x BN f32 accumulators, with the same B tile. The default is 2 groups of one
fragment (BM = 128); 4 groups (16 planes) or 2 fragments a group (BM = 256) halve the weight
reads and the barriers per pixel (issue 17: variants for the H200 sweep). The reduction index
is r = tap·Cg + c (channels innermost, as they lie in memory), BK = 64 columns a step. Every
unit copies its share of a step with 16-byte `kd.async_copy`s straight from the NHWC input
(A, zero-filled outside it: the padding is never stored) and the weights (B, stored as its
BN x BK transpose) into a ring slot, both in the group-tile layout with the 128-byte swizzle
(`kd.tile_offset(..., swizzle=128)`: a 64-column row is one band row, so a unit's chunk lands
in 16 contiguous bytes), which `kd.group_mma` reads itself: no plane loads a fragment.

The ring has STAGES slots. With INFLIGHT = 1 a group keeps one product running across the
step's barrier (`kd.group_wait(1)`), so the copies look STAGES - 2 steps ahead; with INFLIGHT =
0 each product is waited for in its step and the copies look STAGES - 1 ahead. Step kt: wait
for this unit's copies of step kt, barrier (everyone's are in, and every group has waited for
the product that last read the slot to be refilled), issue product kt (MI products, one a
fragment), issue the copies of step kt + AHEAD into slot (kt + AHEAD) mod STAGES, wait for
products down to INFLIGHT steps' (INFLIGHT·MI products). Why the refilled slot is free: it last
held step kt + AHEAD - STAGES = kt - 1 - INFLIGHT, whose product each group waited for at the
end of step kt - 1 (it then had at most INFLIGHT newer ones), before this step's barrier. Ring
positions are counters, never divided (a division between a product's issue and its wait made
ptxas serialise wgmma), and the unit's per-step index arithmetic is unsigned for the same
reason.

Each unit copies a fixed 8-column chunk (`col`) of NR = BM / RS rows of A and of BN / RS rows of
B (RS = units / 8 rows apart), so the pixel decomposition of its A rows and the weight rows'
bases are worked out once, before the loop; a step only splits r into (tap, channel).
"""
from __future__ import annotations

import kerneldsl as kd

from .gather import forward_sizes, pixel_row, split_pixel

BK = 64           # reduction columns a step: one 128-byte band row
SW = 128          # the group-tile layout's swizzle span (bytes)
CHUNKS = BK // 8  # 16-byte chunks a staged row


@kd.func
def next_slot(s, S):
    """The ring position after s (a counter, never a remainder)."""
    s += 1
    if s == S:
        s = 0
    return s


@kd.func
def a_rows(x, m0, row, RS, NR, Mg, P, OH, OW, G):
    """Per A row of this unit (pixels m0 + row + i·RS): (inside the matrix, its output pixel's
    input origin iz0, iy0, ix0, and that origin's element offset in x, channel 0): a step
    then adds one offset of its tap and channel to every row's, instead of four 64-bit
    products a row (the forward at 64@56 issued more integer than tensor work)."""
    rows = ()
    for i in kd.unroll(NR):
        rows = rows + (pixel_row(x, m0 + row + i * RS, Mg, P, OH, OW, G),)
    return rows


@kd.func
def b_rows(n0, row, RS, NRB, Kg, g, w):
    """Per B row of this unit (output channels n0 + row + i·RS of group g): (inside the
    group, the offset of its weight row)."""
    rows = ()
    for i in kd.unroll(NRB):
        n = n0 + row + i * RS
        live = n < Kg
        rows = rows + ((live, kd.i64(g * Kg + kd.select(live, n, 0)) * w.stride(0)),)
    return rows


@kd.func
def fetch_step(sa, sb, x, w, abase, bbase, arows, brows, kt, col, R, g, Cg, RS, NR, NRB, G):
    """This unit's async copies of reduction step kt: its chunk (columns col .. col + 8) of
    its NR rows of A into sa[abase..] and of its NRB rows of B into sb[bbase..]; zeros outside
    the input and past the matrix (steps past the last copy only zeros). `abase`/`bbase`
    already hold the unit's offset in the slot; its rows are RS·BK elements apart."""
    r = kt * BK + col
    ok = r < R
    ur = kd.u32(kd.select(ok, r, 0))
    utap = ur // kd.u32(Cg)
    ch = kd.i32(ur - utap * kd.u32(Cg))
    kz = kd.i32(utap // kd.u32(G[10] * G[11]))
    ky = kd.i32(utap // kd.u32(G[11]) % kd.u32(G[10]))
    kx = kd.i32(utap % kd.u32(G[11]))
    dz, dy, dx = kz * G[6], ky * G[7], kx * G[8]
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    tap = (kd.i64(g * Cg + ch) + kd.i64(dz) * x.stride(2) + kd.i64(dy) * x.stride(3)
           + kd.i64(dx) * x.stride(4))
    for i in kd.unroll(NR):
        live, iz0, iy0, ix0, base = arows[i]
        iz, iy, ix = iz0 + dz, iy0 + dy, ix0 + dx
        inside = ok and live and iz >= 0 and iz < D and iy >= 0 and iy < H and ix >= 0 and ix < W
        kd.async_copy(sa, abase + i * (RS * BK), x, kd.select(inside, base + tap, kd.i64(0)), 8, inside)
    woff = (kd.i64(ch) + kd.i64(kz) * w.stride(2) + kd.i64(ky) * w.stride(3) + kd.i64(kx) * w.stride(4))
    for i in kd.unroll(NRB):
        live, wrow = brows[i]
        inside = ok and live
        kd.async_copy(sb, bbase + i * (RS * BK), w, kd.select(inside, wrow + woff, kd.i64(0)), 8, inside)
    kd.async_commit()


@kd.kernel
def conv_gemm_group(x: kd.Tensor, w: kd.Tensor, y: kd.Tensor, bias: kd.Tensor, HAS_BIAS: kd.Const[bool],
                    DT: kd.Const[object], G: kd.Const[tuple], BN: kd.Const[int], STAGES: kd.Const[int],
                    INFLIGHT: kd.Const[int], GROUPS: kd.Const[int], MI: kd.Const[int], PAIRS: kd.Const[bool],
                    CG: kd.Const[int]):
    """y[b, o, g·Kg + n] (+ bias) = sum_{tap, c} x[b, o·S + tap·Dil − P, g·Cg + c]·w[g·Kg + n, tap, c].
    GROUPS groups of 4 planes a cube, each multiplying MI 64-row fragments: BM = 64·GROUPS·MI."""
    kd.static_assert(kd.cube_units() == 4 * GROUPS * kd.PLANE_DIM, "launch with 4 planes per group")
    kd.static_assert(INFLIGHT == 0 or INFLIGHT == 1, "INFLIGHT: 0 or 1 steps of products left running")
    kd.static_assert(STAGES >= 2 + INFLIGHT, "the ring needs STAGES - 1 - INFLIGHT >= 1 steps ahead")
    BM = 64 * GROUPS * MI
    U = kd.cube_units()
    RS = U // CHUNKS                      # rows between a unit's rows
    kd.static_assert(RS % 8 == 0 and BM % RS == 0 and BN % RS == 0, "units must split the tiles by whole 8-row blocks")
    NR = BM // RS
    NRB = BN // RS
    AHEAD = STAGES - 1 - INFLIGHT         # steps of copies in flight beyond the current one
    A_STAGE = BM * BK
    B_STAGE = BN * BK

    OH, OW, P, Mg, Cg, Kg, R = forward_sizes(x, w, y, G)
    if CG > 0:   # the group's input channels as a constant: a step's tap and channel without a division
        Cg = kd.i32(CG)
    KT = (R + BK - 1) // BK
    g = kd.cube_pos_z()
    m0 = kd.cube_pos_x() * BM
    n0 = kd.cube_pos_y() * BN
    grp = kd.plane_pos() // 4

    t = kd.unit_pos()
    row = t // CHUNKS
    col = t % CHUNKS * 8
    arows = a_rows(x, m0, row, RS, NR, Mg, P, OH, OW, G)
    brows = b_rows(n0, row, RS, NRB, Kg, g, w)
    # the unit's chunk in a slot: rows row + i·RS share row % 8, hence the swizzle's xor
    adst = kd.tile_offset(row, col, BM, swizzle=SW)
    bdst = kd.tile_offset(row, col, BN, swizzle=SW)

    sa = kd.shared(DT, STAGES * A_STAGE)
    sb = kd.shared(DT, STAGES * B_STAGE)
    accs = ()
    for f in kd.unroll(MI):
        acc = kd.group_fragment_acc(64, BN)
        kd.fill_fragment(acc, 0.0)
        accs = accs + (acc,)

    for s in kd.unroll(AHEAD):
        fetch_step(sa, sb, x, w, s * A_STAGE + adst, s * B_STAGE + bdst, arows, brows, s, col, R, g, Cg,
                   RS, NR, NRB, G)
    rs = 0        # ring slot of step kt
    ws = AHEAD    # ring slot of step kt + AHEAD
    for kt in range(KT):
        kd.async_wait(AHEAD - 1)   # this unit's copies of step kt are in ...
        kd.sync_cube()             # ... everyone's are, and slot ws's last products are done
        for f in kd.unroll(MI):    # the group's fragments share the step's B tile
            kd.group_mma(accs[f], kd.shared_tile(sa, rs * A_STAGE + (grp * MI + f) * (64 * BK), 64, BK, swizzle=SW),
                         kd.shared_tile(sb, rs * B_STAGE, BK, BN, transposed=True, swizzle=SW))
        fetch_step(sa, sb, x, w, ws * A_STAGE + adst, ws * B_STAGE + bdst, arows, brows, kt + AHEAD, col, R, g,
                   Cg, RS, NR, NRB, G)
        kd.group_wait(INFLIGHT * MI)   # one product a fragment a step
        rs = next_slot(rs, STAGES)
        ws = next_slot(ws, STAGES)
    kd.group_wait(0)
    kd.async_wait(0)
    for f in kd.unroll(MI):
        store_tile(y, bias, HAS_BIAS, PAIRS, accs[f], m0 + (grp * MI + f) * 64, n0, g, Mg, Kg, P, OH, OW)


@kd.func
def store_tile(y, bias, HAS_BIAS, PAIRS, acc, mbase, n0, g, Mg, Kg, P, OH, OW):
    """The epilogue of one 64 x BN fragment (rows from pixel mbase, columns from n0 of group
    g): each of the lane's row slots (a pixel) resolved once, then its elements stored. PAIRS
    (y's channels contiguous, its strides, start and Kg even: run_forward): a lane's elements
    q, q + 1 of one row at columns c, c + 1 with c even go out as one 2-lane store."""
    rows = ()
    for sl in kd.unroll(kd.fragment_row_slots(acc)):
        r = 0
        for q in kd.unroll(kd.fragment_len(acc)):
            if kd.fragment_row_slot(acc, q) == sl:
                r = kd.fragment_row(acc, q)
        m = mbase + r
        live = m < Mg
        mm = kd.select(live, m, 0)
        od, oh, ow = split_pixel(mm % P, OH, OW)
        rows = rows + ((live, kd.i64(mm // P) * y.stride(0) + kd.i64(od) * y.stride(2) + kd.i64(oh) * y.stride(3)
                        + kd.i64(ow) * y.stride(4)),)
    L = kd.fragment_len(acc)
    for q in kd.unroll(0, L, 2):
        done = False
        if PAIRS and q + 1 < L and kd.fragment_row_slot(acc, q) == kd.fragment_row_slot(acc, q + 1):
            live, at = rows[kd.fragment_row_slot(acc, q)]
            c = kd.fragment_col(acc, q)
            n = n0 + c
            if live and kd.fragment_col(acc, q + 1) == c + 1 and c % 2 == 0 and n + 1 < Kg:
                v0 = kd.fragment_get(acc, q)
                v1 = kd.fragment_get(acc, q + 1)
                co = g * Kg + n
                if HAS_BIAS:
                    v0 = v0 + kd.f32(bias[co])
                    v1 = v1 + kd.f32(bias[co + 1])
                kd.store_vec(y, at + kd.i64(co) * y.stride(1), kd.cast(kd.make_vec(v0, v1), y.dtype))
                done = True
        for e in kd.unroll(q, q + 2):
            if e < L:
                live, at = rows[kd.fragment_row_slot(acc, e)]
                n = n0 + kd.fragment_col(acc, e)
                if live and n < Kg and not done:
                    v = kd.fragment_get(acc, e)
                    co = g * Kg + n
                    if HAS_BIAS:
                        v = v + kd.f32(bias[co])
                    y[at + kd.i64(co) * y.stride(1)] = v


def tile_shape(caps, Kg: int) -> tuple:
    """(BN, STAGES, INFLIGHT). Native group products: 128-column tiles (64 where the group has
    at most 64 output channels, so no half-empty products) and a 3-slot ring, each product
    waited for in its step (measured best on the H200 over BN 64/128, 3/4/6 slots, 0/1
    products in flight: benchmarks/RESULTS.md, session 18; 3 slots of 128 columns are 96 KiB,
    so two cubes share an SM). Emulated ones keep their accumulators in shared memory too (an
    OpenCL CPU device has 256 KiB): 64-column tiles and 3 slots."""
    if caps.group_mma_native:
        return (64 if Kg <= 64 else 128), 3, 0
    return 64, 3, 1


# 256-row tiles (two groups of two 64-row fragments: half the weight copies a pixel) where
# the reduction is this long or longer. H200, bf16, N 64 (`python -m benchmarks.conv_group`,
# session 20): 3x3 256@14 (2304 columns) 0.103-0.107 ms against 0.114-0.118 with 128 rows; at
# 128@28 (1152) 128 rows stayed ahead (0.108 against 0.124), at 64@56 too (0.148 against 0.180)
LONG_REDUCTION = 2048
# the epilogue stores a lane's column pair as one 4-byte store where pairs_fit: H200, 64@56
# 0.140 ms against 0.148-0.152 with 2-byte stores (session 20)
PAIRS = True


def tile_rows(caps, reduction: int) -> tuple:
    """(groups a cube, 64-row fragments a group) for a forward whose reduction has
    `reduction` columns (channels a group times taps)."""
    if caps.group_mma_native and reduction >= LONG_REDUCTION:
        return 2, 2
    return 2, 1


def block_m(groups: int, mi: int) -> int:
    """Output pixels a cube: `groups` groups of `mi` 64-row fragments."""
    return 64 * groups * mi


def shared_bytes(bn: int, stages: int, groups: int = 2, mi: int = 1) -> int:
    """Shared memory of the ring (16-bit elements)."""
    return stages * (block_m(groups, mi) + bn) * BK * 2


def fits(p, bn: int, stages: int, groups: int = 2, mi: int = 1) -> bool:
    """The launch shape works for p's device: `groups` groups of 4 planes whose units split
    the tiles in whole 8-row blocks, and the ring within the device's shared memory."""
    caps = p.runtime.capabilities
    U = 4 * groups * caps.plane_dim
    rs = U // CHUNKS
    bm = block_m(groups, mi)
    return (U <= caps.max_cube_units and U % CHUNKS == 0 and rs % 8 == 0 and bm % rs == 0 and bn % rs == 0
            and shared_bytes(bn, stages, groups, mi) <= caps.max_shared_bytes)


def covers(p) -> bool:
    """This kernel is the forward pass for p: group products are native and the ring path's
    operand rules hold (implicit_gemm_nhwc.covers)."""
    from . import implicit_gemm_nhwc
    caps = p.runtime.capabilities
    return (caps.group_mma_native and p.dtype in caps.mma_dtypes and implicit_gemm_nhwc.covers(p)
            and fits(p, *tile_shape(caps, p.geo.Kg)[:2], *tile_rows(caps, p.geo.Cg * p.geo.taps)))


def pairs_fit(p, y5) -> bool:
    """The epilogue may store column pairs: y's channels contiguous, its start, its other
    strides (of axes longer than 1) and Kg even, so an even column's pair is 4-byte aligned."""
    return (y5.strides[1] == 1 and y5.offset % 2 == 0 and p.geo.Kg % 2 == 0
            and all(s % 2 == 0 for i, (n, s) in enumerate(zip(y5.shape, y5.strides)) if i != 1 and n > 1))


def const_channels(cg: int) -> int:
    """The CG constant of conv_gemm_group: the group's input channels where they are a multiple
    of a step's BK (the ResNet-style layers, a few values: one specialisation each), else 0
    (a run-time value, divided per step)."""
    return cg if cg % BK == 0 else 0


def run_forward(p, y5, dummy, bn: int | None = None, stages: int | None = None, inflight: int | None = None,
                groups: int | None = None, mi: int | None = None, pairs: bool = PAIRS) -> None:
    """y5 = the forward pass of p (implicit_gemm_nhwc.covers(p) and fits(...) must hold); the
    tile shape from tile_shape() and tile_rows() unless given (tests and benchmarks force
    others): BN, ring slots, steps of products in flight, groups a cube and 64-row fragments a
    group; `pairs`: 2-lane stores in the epilogue where pairs_fit (else it is ignored)."""
    g = p.geo
    if groups is None or mi is None:
        groups, mi = tile_rows(p.runtime.capabilities, g.Cg * g.taps)
    BN, S, L = tile_shape(p.runtime.capabilities, g.Kg)
    BN, S, L = bn or BN, stages or S, L if inflight is None else inflight
    bm = block_m(groups, mi)
    M = g.B * g.pixels
    grid = ((M + bm - 1) // bm, (g.Kg + BN - 1) // BN, g.groups)
    bias = p.bias if p.bias is not None else dummy
    conv_gemm_group[grid, 4 * groups * p.runtime.plane_dim](p.x, p.w, y5, bias, p.bias is not None, p.dtype,
                                                            g.consts(), BN, S, L, groups, mi,
                                                            pairs and pairs_fit(p, y5), const_channels(g.Cg))
