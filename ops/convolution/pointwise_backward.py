"""The backward passes of a 1×1 convolution (kernel 1 on every axis, stride 1, no padding,
one group; any dilation, ranks 1-3) as batched matrix products on group products
(`kd.group_mma`: wgmma on the H200, an exact emulation elsewhere), reading the NCDHW
operands where they lie: no channels-last copies (issue 17: dy alone is 411 MB at 256 → 1024
channels, 56², N 64, bf16; the copies and the 3×3-shaped implicit GEMMs cost 1.9 / 1.3 ms
there against cuDNN's 0.21 / 0.22).

With P pixels a sample, x[n] is a [C, P] matrix, dy[n] a [K, P] one and w a [K, C] one:

    weight backward  dw[K, C]   = sum_n dy[n] · x[n]ᵀ   (reduction over the pixels: contiguous
                                  in both operands, so A = dy[n] is staged as stored, K rows x
                                  BK pixels, and B = x[n]ᵀ as its stored transpose, C rows x BK
                                  pixels: the forward's operand forms, implicit_gemm_group)
    data backward    dx[n]      = wᵀ · dy[n]            (reduction over K: A = wᵀ staged as its
                                  stored transpose, BK rows of w x BM input channels; B = dy[n]
                                  as stored, BK channel rows x BN pixels; the result's rows are
                                  dx[n]'s channels, its columns its contiguous pixels)

Both stage their tiles with `kd.async_copy` into the 128-byte group-tile layout, in the
forward's ring (STAGES slots, INFLIGHT products left running across a step's barrier, copies
AHEAD steps ahead; `implicit_gemm_group.next_slot`). A unit copies a fixed 8-element chunk
(`col`) of rows `row + i·RS` of each stored tile; where the pixel rows are not 16-byte
aligned (P, the batch and channel strides or the start not multiples of 8 elements) each
chunk goes as 8 / LANES copies of LANES = 4 or 2 elements, each zero-filled past the last
pixel; LANES 1 (odd P) is not covered (the existing implicit GEMMs run it).

The weight gradient has few output tiles (16 of 128 x 128 at 1024 x 256): its reduction,
the (sample, 64-pixel step) pairs in order, is split into `splits` fixed ranges so that a
wave of cubes runs; each range writes F32 partials [splits, K, C] and
`implicit_gemm.sum_partials` adds them in split order (deterministic, no atomics),
converting to dw's dtype. The data backward's cube (x = input-channel tile fastest, then
pixel tile, then sample, so the cubes that share a dy tile run side by side) stores its
64-row fragments through `implicit_gemm_group.store_tile` over a view of dx whose "pixels"
are (sample, input channel) rows and whose "channels" are the contiguous pixels: a lane's
two neighbouring columns go out as one 4-byte store.

Options (module constants, off until timed on the H200): WEIGHT_KERNEL = "roles" runs the
weight gradient on MoE's roles GEMM instead (bulk copies and a producer group; sample n is
expert n: rows dy[n], weights x[n]; F32 partials a sample, summed in order), where the copy
engine reads the operands; STAGED_DX lets dx's tiles leave through the drained ring and bulk
stores (where Cin is a multiple of the cube's channels, so no store crosses into the next
sample's rows).

Channels-last operands (channel stride 1, as torch's channels_last memory) are not covered:
they keep the existing paths (implicit_gemm_wgrad reads packed channels-last x and dy without
a copy; implicit_gemm_dgrad copies dy to channels-last, as before).
`ENABLED = False` turns the module off (every call takes those paths again)."""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.tensor import Tensor

from .implicit_gemm_group import next_slot, store_tile
from .problem import Problem

ENABLED = True    # route covered 1×1 backward passes here
# the weight gradient's kernel where both fit: "ring" (wgrad_pointwise: async copies, split
# reductions) or "roles" (MoE's roles GEMM, bulk copies and a producer group, one expert a
# sample: F32 partials a sample); H200: ring 0.257 ms (256 columns), roles 0.275
WEIGHT_KERNEL = "ring"
# the data backward's result leaves through shared memory and bulk stores (where they fit,
# run_data_backward) instead of pair stores from the accumulators (H200: 0.277 against 0.314 ms
# at 256 pixels a cube, benchmarks/RESULTS.md session 21)
STAGED_DX = True
MAX_KEPT = 64     # (runtime, samples, rows) whose expert offsets are kept
_EXPERTS: dict = {}
BK = 64           # reduction columns a step: one 128-byte band row
SW = 128          # the group-tile layout's swizzle span (bytes)
CHUNKS = BK // 8  # 16-byte chunks a band row
MIN_STEPS = 8     # reduction steps a weight-gradient split at least (ring fill and epilogue amortised)


@kd.func
def row_bases(r0, row, RS, NR, limit, stride):
    """Per row row + i·RS of a unit (rows r0 + ..): (inside the matrix, i64 offset of the row)."""
    rows = ()
    for i in kd.unroll(NR):
        r = r0 + row + i * RS
        live = r < limit
        rows = rows + ((live, kd.i64(kd.select(live, r, 0)) * stride),)
    return rows


@kd.func
def chunk_at(row, col, i, RS, ROWS):
    """Offset of a unit's chunk (row + i·RS, col) in a 64-column band of ROWS stored rows: its
    first row's chunk moved on by whole rows where RS keeps the swizzle's pattern (RS a
    multiple of 8, every GPU shape), else worked out for the row."""
    off = kd.tile_offset(row + i * RS, col, ROWS, swizzle=SW)
    if RS % 8 == 0:
        off = kd.tile_offset(row, col, ROWS, swizzle=SW) + i * (RS * 64)
    return off


@kd.func
def copy_chunk(dst, at, src, off, live, first, P, LANES):
    """The 8 elements from src[off..] (pixels first.. of a row) into dst[at..] as 8 / LANES
    copies, each zero-filled unless live and inside the row's P pixels."""
    for j in kd.unroll(8 // LANES):
        inside = live and first + j * LANES < P
        kd.async_copy(dst, at + j * LANES, src, kd.select(inside, off + j * LANES, kd.i64(0)), LANES, inside)


@kd.func
def fetch_weight_step(sa, sb, dy, x, abase, bbase, arows, brows, st, ok, row, col, SPB, P, RS, NRA, NRB, BM, BN,
                      LANES):
    """This unit's copies of reduction step st = (sample, 64-pixel range): its chunk of the
    A rows (dy's output channels) and B rows (x's input channels); zeros past the pixels, the
    matrix and the split (ok false). `abase`/`bbase`: the slot's starts."""
    ust = kd.u32(kd.select(ok, st, 0))
    unb = ust // kd.u32(SPB)
    nb = kd.i64(unb)
    p = kd.i32(ust - unb * kd.u32(SPB)) * BK + col
    aoff = nb * dy.stride(0) + kd.i64(p)
    boff = nb * x.stride(0) + kd.i64(p)
    for i in kd.unroll(NRA):
        live, base = arows[i]
        copy_chunk(sa, abase + chunk_at(row, col, i, RS, BM), dy, base + aoff, ok and live, p, P, LANES)
    for i in kd.unroll(NRB):
        live, base = brows[i]
        copy_chunk(sb, bbase + chunk_at(row, col, i, RS, BN), x, base + boff, ok and live, p, P, LANES)
    kd.async_commit()


@kd.kernel
def wgrad_pointwise(dy: kd.Tensor, x: kd.Tensor, part: kd.Tensor[kd.f32, 3], CHUNK: kd.i32, DT: kd.Const[object],
                    BN: kd.Const[int], STAGES: kd.Const[int], INFLIGHT: kd.Const[int], GROUPS: kd.Const[int],
                    LANES: kd.Const[int]):
    """part[split, k, c] = sum over the split's steps (n, pixels p) of dy[n, k, p]·x[n, c, p]
    (dy [B, K, P] and x [B, C, P] views with pixel stride 1). Cube (x, y, z): output rows
    64·GROUPS·x.., columns BN·y.., split z; GROUPS groups of 4 planes, each a 64 x BN tile."""
    kd.static_assert(kd.cube_units() == 4 * GROUPS * kd.PLANE_DIM, "launch with 4 planes per group")
    kd.static_assert(INFLIGHT == 0 or INFLIGHT == 1, "INFLIGHT: 0 or 1 products left running")
    kd.static_assert(STAGES >= 2 + INFLIGHT, "the ring needs STAGES - 1 - INFLIGHT >= 1 steps ahead")
    BM = 64 * GROUPS
    RS = kd.cube_units() // CHUNKS
    kd.static_assert(BM % RS == 0 and BN % RS == 0, "units must split the tiles' rows evenly")
    NRA = BM // RS
    NRB = BN // RS
    AHEAD = STAGES - 1 - INFLIGHT
    A_STAGE = BM * BK
    B_STAGE = BN * BK

    K = dy.shape[1]
    C = x.shape[1]
    P = dy.shape[2]
    SPB = (P + BK - 1) // BK
    split = kd.cube_pos_z()
    s_lo = split * CHUNK
    s_hi = kd.min(dy.shape[0] * SPB, s_lo + CHUNK)
    KT = s_hi - s_lo
    m0 = kd.cube_pos_x() * BM
    n0 = kd.cube_pos_y() * BN
    grp = kd.plane_pos() // 4

    t = kd.unit_pos()
    row = t // CHUNKS
    col = t % CHUNKS * 8
    arows = row_bases(m0, row, RS, NRA, K, dy.stride(1))
    brows = row_bases(n0, row, RS, NRB, C, x.stride(1))

    sa = kd.shared(DT, STAGES * A_STAGE)
    sb = kd.shared(DT, STAGES * B_STAGE)
    acc = kd.group_fragment_acc(64, BN)
    kd.fill_fragment(acc, 0.0)

    for s in kd.unroll(AHEAD):
        fetch_weight_step(sa, sb, dy, x, s * A_STAGE, s * B_STAGE, arows, brows, s_lo + s, s_lo + s < s_hi, row, col,
                          SPB, P, RS, NRA, NRB, BM, BN, LANES)
    rs = 0
    ws = AHEAD
    for kt in range(KT):
        kd.async_wait(AHEAD - 1)   # this unit's copies of step kt are in ...
        kd.sync_cube()             # ... everyone's are, and slot ws's last product is done
        kd.group_mma(acc, kd.shared_tile(sa, rs * A_STAGE + grp * (64 * BK), 64, BK, swizzle=SW),
                     kd.shared_tile(sb, rs * B_STAGE, BK, BN, transposed=True, swizzle=SW))
        st = s_lo + kt + AHEAD
        fetch_weight_step(sa, sb, dy, x, ws * A_STAGE, ws * B_STAGE, arows, brows, st, st < s_hi, row, col, SPB, P,
                          RS, NRA, NRB, BM, BN, LANES)
        kd.group_wait(INFLIGHT)
        rs = next_slot(rs, STAGES)
        ws = next_slot(ws, STAGES)
    kd.group_wait(0)
    kd.async_wait(0)
    for q in kd.unroll(kd.fragment_len(acc)):
        m = m0 + grp * 64 + kd.fragment_row(acc, q)
        c = n0 + kd.fragment_col(acc, q)
        if m < K and c < C:
            part[split, m, c] = kd.fragment_get(acc, q)


@kd.func
def fetch_data_step(sa, sb, w, dy, abase, bbase, acols, bcols, kt, row, col, nb, RS, NR, NBA, NBB, K, P, LANES):
    """This unit's copies of reduction step kt (output channels kt·BK..): its chunk of the
    rows of w (A's stored transpose: BK rows, NBA 64-column bands of input channels) and of
    dy[nb] (B as stored: BK rows, NBB bands of pixels); zeros past K, C and P. `abase`/`bbase`:
    the slot's starts."""
    k0 = kt * BK
    for i in kd.unroll(NR):
        at = chunk_at(row, col, i, RS, BK)
        k = k0 + row + i * RS
        live = k < K
        kk = kd.i64(kd.select(live, k, 0))
        for q in kd.unroll(NBA):
            ok, cin = acols[q]
            inside = live and ok
            kd.async_copy(sa, abase + q * (BK * 64) + at, w,
                          kd.select(inside, kk * w.stride(0) + cin, kd.i64(0)), 8, inside)
        base = kd.i64(nb) * dy.stride(0) + kk * dy.stride(1)
        for q in kd.unroll(NBB):
            pix = bcols[q]
            copy_chunk(sb, bbase + q * (BK * 64) + at, dy, base + pix, live, pix, P, LANES)
    kd.async_commit()


@kd.func
def store_staged(dx2, sb, accs, grp, row0, p0, MI, BN):
    """(Every product done, the ring drained) each fragment's 64 x BN tile laid out in sb in
    the 128-byte layout, then unit 0 writes them with bulk stores into dx2 ([B·C, P] rows) at
    rows row0 + 64·(fragment), columns p0 (the stores leave out pixels past P; the caller
    makes sure no tile runs past its sample's channels)."""
    for f in kd.unroll(MI):
        at = (grp * MI + f) * (64 * BN)
        for q in kd.unroll(kd.fragment_len(accs[f])):
            sb[at + kd.tile_offset(kd.fragment_row(accs[f], q), kd.fragment_col(accs[f], q), 64, swizzle=SW)] = \
                kd.cast(kd.fragment_get(accs[f], q), sb.dtype)
    kd.sync_cube()
    if kd.unit_pos() == 0:
        for h in kd.unroll(kd.cube_units() // (4 * kd.PLANE_DIM) * MI):
            kd.bulk_store(dx2, row0 + 64 * h, p0, sb, h * (64 * BN), 64, BN, swizzle=SW)
        kd.bulk_store_wait()


@kd.kernel
def dgrad_pointwise(dy: kd.Tensor, w: kd.Tensor, dxv: kd.Tensor, dx2: kd.Tensor[None, 2], DT: kd.Const[object],
                    BN: kd.Const[int], STAGES: kd.Const[int], INFLIGHT: kd.Const[int], GROUPS: kd.Const[int],
                    MI: kd.Const[int], LANES: kd.Const[int], PAIRS: kd.Const[bool], STAGED: kd.Const[bool]):
    """dx[n, c, p] = sum_k w[k, c]·dy[n, k, p] (dy a [B, K, P] view with pixel stride 1, w a
    [K, C] view with channel stride 1, dxv dx as the [B, P, C, 1, 1] view store_tile writes;
    STAGED: dx2, dx as packed [B·C, P] rows, written by bulk stores from shared memory instead).
    Cube x = (sample, pixel tile, channel tile), channel tile fastest: BM = 64·GROUPS·MI input
    channels x BN pixels; group q multiplies its MI 64-row fragments."""
    kd.static_assert(kd.cube_units() == 4 * GROUPS * kd.PLANE_DIM, "launch with 4 planes per group")
    kd.static_assert(INFLIGHT == 0 or INFLIGHT == 1, "INFLIGHT: 0 or 1 steps of products left running")
    kd.static_assert(STAGES >= 2 + INFLIGHT, "the ring needs STAGES - 1 - INFLIGHT >= 1 steps ahead")
    BM = 64 * GROUPS * MI
    RS = kd.cube_units() // CHUNKS
    kd.static_assert(BK % RS == 0 and BN % 64 == 0, "units must split a step's rows evenly")
    NR = BK // RS
    NBA = BM // 64
    NBB = BN // 64
    AHEAD = STAGES - 1 - INFLIGHT
    A_STAGE = BK * BM
    B_STAGE = BK * BN

    K = dy.shape[1]
    P = dy.shape[2]
    C = w.shape[1]
    CT = (C + BM - 1) // BM
    PT = (P + BN - 1) // BN
    cid = kd.u32(kd.cube_pos_x())
    rest = cid // kd.u32(CT)
    m0 = kd.i32(cid - rest * kd.u32(CT)) * BM
    unb = rest // kd.u32(PT)
    p0 = kd.i32(rest - unb * kd.u32(PT)) * BN
    nb = kd.i32(unb)
    KT = (K + BK - 1) // BK
    grp = kd.plane_pos() // 4

    t = kd.unit_pos()
    row = t // CHUNKS
    col = t % CHUNKS * 8
    acols = ()
    for q in kd.unroll(NBA):
        c = m0 + q * 64 + col
        acols = acols + ((c < C, kd.i64(c)),)
    bcols = ()
    for q in kd.unroll(NBB):
        bcols = bcols + (p0 + q * 64 + col,)

    sa = kd.shared(DT, STAGES * A_STAGE)
    sb = kd.shared(DT, STAGES * B_STAGE)
    accs = ()
    for f in kd.unroll(MI):
        acc = kd.group_fragment_acc(64, BN)
        kd.fill_fragment(acc, 0.0)
        accs = accs + (acc,)

    for s in kd.unroll(AHEAD):
        fetch_data_step(sa, sb, w, dy, s * A_STAGE, s * B_STAGE, acols, bcols, s, row, col, nb, RS, NR, NBA, NBB, K, P,
                        LANES)
    rs = 0
    ws = AHEAD
    for kt in range(KT):
        kd.async_wait(AHEAD - 1)   # this unit's copies of step kt are in ...
        kd.sync_cube()             # ... everyone's are, and slot ws's last products are done
        for f in kd.unroll(MI):    # fragment f of group grp: input channels (grp·MI + f)·64.. of the tile
            kd.group_mma(accs[f], kd.shared_tile(sa, rs * A_STAGE + (grp * MI + f) * (BK * 64), 64, BK,
                                                 transposed=True, swizzle=SW),
                         kd.shared_tile(sb, rs * B_STAGE, BK, BN, swizzle=SW))
        fetch_data_step(sa, sb, w, dy, ws * A_STAGE, ws * B_STAGE, acols, bcols, kt + AHEAD, row, col, nb, RS, NR,
                        NBA, NBB, K, P, LANES)
        kd.group_wait(INFLIGHT * MI)
        rs = next_slot(rs, STAGES)
        ws = next_slot(ws, STAGES)
    kd.group_wait(0)
    kd.async_wait(0)
    if STAGED:
        kd.static_assert(STAGES * BK >= BM, "STAGED: the B ring holds the BM x BN tile")
        kd.sync_cube()        # every group's products have read the ring
        store_staged(dx2, sb, accs, grp, nb * C + m0, p0, MI, BN)
    else:
        for f in kd.unroll(MI):   # rows (sample, input channel) of dxv, columns its pixels
            store_tile(dxv, w, False, PAIRS, accs[f], nb * C + m0 + (grp * MI + f) * 64, p0, 0, nb * C + C, P, C, 1, 1)


def native(caps) -> bool:
    """Group products read shared memory themselves (wgmma) and copies run asynchronously:
    where this module is the fast path (tests force it elsewhere)."""
    return "group_mma" in caps.matrix_kinds and caps.async_copy


def weight_shape(caps, columns: int = 256) -> tuple:
    """(BN, STAGES, INFLIGHT, GROUPS) of the weight gradient for `columns` input channels.
    Native: 128 x 256 tiles (two groups) where the channels fill them, else 128 x 128; a 3-slot
    ring, each product waited for in its step. On the H200 (256 -> 1024 at 56², N 64, bf16)
    256 columns took 0.257 ms against 0.300 for 128 (cuDNN 0.219). Emulated: one group,
    64 columns, one product in flight."""
    if caps.group_mma_native:
        return (256 if columns >= 256 else 128), 3, 0, 2
    return 64, 3, 1, 1


def data_shape(caps) -> tuple:
    """(BN, STAGES, INFLIGHT, GROUPS, MI) of the data backward: BN pixels a cube, its input
    channels 64·GROUPS·MI. Native: 256 pixels (H200, 256 -> 1024 at 56², N 64: 0.277 ms with
    the staged epilogue, 0.289 with 128 pixels, 0.310 without staging; cuDNN 0.185)."""
    if caps.group_mma_native:
        return 256, 3, 0, 2, 1
    return 64, 3, 1, 1, 1


def weight_shared_bytes(bn: int, stages: int, groups: int) -> int:
    return stages * (64 * groups + bn) * BK * 2


def data_shared_bytes(bn: int, stages: int, groups: int, mi: int) -> int:
    return stages * (64 * groups * mi + bn) * BK * 2


def _cube_fits(caps, groups: int, smem: int) -> bool:
    U = 4 * groups * caps.plane_dim
    rs = U // CHUNKS
    return U <= caps.max_cube_units and U % CHUNKS == 0 and BK % rs == 0 and smem <= caps.max_shared_bytes


def _pixel_matrix(t, rt, dtype):
    """t (a [B, C, D, H, W] view) as a [B, C, P] view when its pixels are one run of stride 1
    (NCDHW memory), else None."""
    N, C, D, H, W = t.shape
    if not all(n == 1 or st == want for n, st, want in zip((D, H, W), t.strides[2:], (H * W, W, 1))):
        return None
    if C > 1 and t.strides[1] == 1:   # channels-last memory (with one pixel both read as stride 1)
        return None
    return Tensor(rt, t.buffer, (N, C, D * H * W), dtype, (t.strides[0], t.strides[1], 1), t.offset)


def _lanes(P: int, views) -> int:
    """Elements a copy: the most of 8, 4, 2 dividing P and every view's start and its batch and
    channel strides (axes of size 1 aside), so no copy straddles a row end or a 16-byte line;
    1 where none does (not covered)."""
    for lanes in (8, 4, 2):
        if P % lanes == 0 and all(v.offset % lanes == 0 and all(n == 1 or s % lanes == 0
                                                                for n, s in zip(v.shape[:2], v.strides[:2]))
                                  for v in views):
            return lanes
    return 1


def _pointwise(p: Problem) -> bool:
    g = p.geo
    caps = p.runtime.capabilities
    return (ENABLED and native(caps) and p.dtype in (kd.f16, kd.bf16) and p.dtype in caps.mma_dtypes
            and g.taps == 1 and g.groups == 1 and all(s == 1 for s in g.stride) and not any(g.pad)
            and g.B * g.C < 1 << 31 and g.B * g.pixels < 1 << 31)


def weight_operands(p: Problem) -> tuple | None:
    """(dy [B, K, P], x [B, C, P], LANES) when this module runs p's weight gradient, else None:
    a 1×1 convolution (_pointwise) on a device with native group products, NCDHW operands whose
    pixel rows are at least 4-byte aligned, the tile shape within the device."""
    if not _pointwise(p):
        return None
    rt = p.runtime
    dy, x = _pixel_matrix(p.dy, rt, p.dtype), _pixel_matrix(p.x, rt, p.dtype)
    if dy is None or x is None:
        return None
    lanes = _lanes(dy.shape[2], (dy, x))
    bn, stages, _, groups = weight_shape(rt.capabilities, x.shape[1])
    if lanes < 2 or not _cube_fits(rt.capabilities, groups, weight_shared_bytes(bn, stages, groups)):
        return None
    return dy, x, lanes


def data_operands(p: Problem, dx5) -> tuple | None:
    """(dy [B, K, P], w [K, C], dx as [B, P, C, 1, 1], dx as [B·C, P] or None, LANES, PAIRS)
    when this module runs p's
    data backward into dx5, else None: as weight_operands for dy and dx, and w's input channels
    contiguous in 16-byte aligned rows (C, its row stride and start multiples of 8)."""
    if not _pointwise(p):
        return None
    rt = p.runtime
    g = p.geo
    dy, dx = _pixel_matrix(p.dy, rt, p.dtype), _pixel_matrix(dx5, rt, p.dtype)
    w = p.w
    if dy is None or dx is None or (g.C > 1 and w.strides[1] != 1):
        return None
    if g.C % 8 or w.offset % 8 or (g.K > 1 and w.strides[0] % 8):
        return None
    lanes = _lanes(dy.shape[2], (dy,))
    bn, stages, _, groups, mi = data_shape(rt.capabilities)
    if lanes < 2 or not _cube_fits(rt.capabilities, groups, data_shared_bytes(bn, stages, groups, mi)):
        return None
    w2 = Tensor(rt, w.buffer, (g.K, g.C), p.dtype, (w.strides[0], 1), w.offset)
    P = dx.shape[2]
    dxv = Tensor(rt, dx.buffer, (g.B, P, g.C, 1, 1), p.dtype, (dx.strides[0], 1, dx.strides[1], 0, 0), dx.offset)
    pairs = dx.offset % 2 == 0 and all(n == 1 or s % 2 == 0 for n, s in zip(dx.shape[:2], dx.strides[:2]))
    packed = dx.strides[1:] == (P, 1) and (g.B == 1 or dx.strides[0] == g.C * P) and P % 8 == 0 and dx.offset % 8 == 0
    dx2 = Tensor(rt, dx.buffer, (g.B * g.C, P), p.dtype, (P, 1), dx.offset) if packed else None
    return dy, w2, dxv, dx2, lanes, pairs


def weight_splits(p: Problem, tiles: int, shared: int, steps: int) -> int:
    """Reduction ranges: as many as make one full wave of cubes (an SM holds as many as the
    ring's shared memory allows, at most 4), each at least MIN_STEPS steps."""
    caps = p.runtime.capabilities
    per_sm = max(1, min(4, caps.max_shared_bytes // shared))
    wave = max(caps.compute_units, 1) * per_sm
    return max(1, min(wave // tiles, steps // MIN_STEPS))


def run_weight_backward(p: Problem, dw5, views: tuple, bn: int | None = None, stages: int | None = None,
                        inflight: int | None = None, groups: int | None = None, splits: int | None = None) -> None:
    """dw5 (a packed [K, C, 1, 1, 1] weight) = the weight gradient of p; `views` from
    weight_operands(). The tile shape from weight_shape() and the splits from weight_splits()
    unless given (tests and benchmarks force others)."""
    from .implicit_gemm import SUM_UNITS, sum_partials
    dy, x, lanes = views
    rt = p.runtime
    g = p.geo
    BN, S, L, GR = weight_shape(rt.capabilities, g.C)
    BN, S, GR = bn or BN, stages or S, groups or GR
    L = L if inflight is None else inflight
    steps = g.B * -(-dy.shape[2] // BK)
    tiles = -(-g.K // (64 * GR)) * -(-g.C // BN)
    splits = splits or weight_splits(p, tiles, weight_shared_bytes(BN, S, GR), steps)
    chunk = -(-steps // splits)
    splits = -(-steps // chunk)
    part = rt.empty((splits, g.K, g.C), "f32")
    grid = (-(-g.K // (64 * GR)), -(-g.C // BN), splits)
    wgrad_pointwise[grid, 4 * GR * rt.plane_dim](dy, x, part, chunk, p.dtype, BN, S, L, GR, lanes)
    dw = dw5._view((g.K, g.C), (g.C, 1))
    sum_partials[-(-(g.K * g.C) // SUM_UNITS), SUM_UNITS](part, dw)


def roles_operands(p: Problem, views: tuple) -> tuple | None:
    """(dy [B·K, P], x [B·C, P]) 2-D views for the roles GEMM (one expert a sample: rows of
    dy[n], weights x[n]) when the copy engine reads both (packed, 16-byte aligned rows) and the
    device has it, else None; `views` from weight_operands()."""
    from ..moe import gemm_roles
    dy, x, lanes = views
    B, K, P = dy.shape
    C = x.shape[1]
    def packed(t, rows):
        return t.strides[2] == 1 and (rows == 1 or t.strides[1] == P) and (B == 1 or t.strides[0] == rows * P)

    if lanes != 8 or not (packed(dy, K) and packed(x, C)):
        return None
    dy2 = Tensor(p.runtime, dy.buffer, (B * K, P), p.dtype, (P, 1), dy.offset)
    x2 = Tensor(p.runtime, x.buffer, (B * C, P), p.dtype, (P, 1), x.offset)
    if not gemm_roles.usable(p.runtime, (dy2, x2)):
        return None
    return dy2, x2


def _experts(rt, B: int, K: int, bm: int) -> tuple:
    """Row offsets [0, K, 2K, .. B·K] and row-tile offsets of B experts of K rows, as device
    tensors made once per (runtime, B, K, BM): an upload in every call would stop the call
    being replayed."""
    import numpy as np
    key = (id(rt), B, K, bm)
    got = _EXPERTS.get(key)
    if got is None or got[0].runtime is not rt:
        n = np.arange(B + 1, dtype=np.uint32)
        got = (rt.tensor(n * K), rt.tensor(n * -(-K // bm)))
        if len(_EXPERTS) >= MAX_KEPT:
            _EXPERTS.clear()
        _EXPERTS[key] = got
    return got


def run_weight_backward_roles(p: Problem, dw5, roles: tuple) -> None:
    """dw5 = the weight gradient of p on MoE's roles GEMM: sample n is expert n, its rows dy[n]
    ([K, P]) times its weight x[n] ([C, P]) transposed, F32 partials [B, K, C] (element stores),
    then implicit_gemm.sum_partials in sample order (deterministic); `roles` from
    roles_operands()."""
    from ..moe import gemm_roles
    from .implicit_gemm import SUM_UNITS, sum_partials
    dy2, x2 = roles
    rt = p.runtime
    g = p.geo
    _, bn, stages = gemm_roles.tile_shape(rt.capabilities)
    offsets, tiles = _experts(rt, g.B, g.K, gemm_roles.BM)
    rows, cols = g.B * -(-g.K // gemm_roles.BM), -(-g.C // bn)
    part = rt.empty((g.B * g.K, g.C), "f32")
    gemm_roles.grouped_gemm_roles[rows * cols, gemm_roles.UNITS_PLANES * rt.plane_dim](
        dy2, x2, x2, part, offsets, tiles, g.B, g.C, rows, cols, False, bn, stages, gemm_roles.GM, part, False, False)
    dw = dw5._view((g.K, g.C), (g.C, 1))
    sum_partials[-(-(g.K * g.C) // SUM_UNITS), SUM_UNITS](part._view((g.B, g.K, g.C), (g.K * g.C, g.C, 1)), dw)


def run_weight(p: Problem, dw5, views: tuple) -> None:
    """dw5 = the weight gradient of p: the roles GEMM where WEIGHT_KERNEL asks for it and it
    reads the operands, else the ring kernel (run_weight_backward)."""
    roles = roles_operands(p, views) if WEIGHT_KERNEL == "roles" else None
    if roles is not None:
        run_weight_backward_roles(p, dw5, roles)
    else:
        run_weight_backward(p, dw5, views)


def run_data_backward(p: Problem, views: tuple, bn: int | None = None, stages: int | None = None,
                      inflight: int | None = None, groups: int | None = None, mi: int | None = None,
                      staged: bool | None = None) -> None:
    """dx = the data backward of p into the view data_operands() gave (`views`); the tile
    shape from data_shape() and the epilogue from STAGED_DX unless given (tests and
    benchmarks force others). The staged epilogue runs only where its bulk stores stay in
    their sample's channels (Cin a multiple of the cube's channels), dx is packed rows of
    16-byte multiples and the ring holds the tile; else the pair stores."""
    dy, w2, dxv, dx2, lanes, pairs = views
    rt = p.runtime
    g = p.geo
    BN, S, L, GR, MI = data_shape(rt.capabilities)
    BN, S, GR, MI = bn or BN, stages or S, groups or GR, mi or MI
    L = L if inflight is None else inflight
    bm = 64 * GR * MI
    staged = (STAGED_DX if staged is None else staged) and dx2 is not None and g.C % bm == 0 and S * BK >= bm
    cubes = -(-g.C // bm) * -(-dy.shape[2] // BN) * g.B
    dgrad_pointwise[cubes, 4 * GR * rt.plane_dim](dy, w2, dxv, dx2 if staged else w2, p.dtype, BN, S, L, GR, MI, lanes,
                                                  pairs, staged)
