"""The `TensorCore` grouped GEMM: F16/BF16 operands on the matrix primitive
(m16n16k16 fragments, f32 accumulation): tensor cores on CUDA, the exact
emulation elsewhere.

Same cube order as the scalar kernels: a 1-D grid over (row tiles of all experts) x
(column tiles), GM row tiles sweeping the columns together so their rows of x stay
in L2 while each weight tile is read about once.
A cube has 8 planes in a 2 x 4 layout over a 128 x BN output tile; each plane
owns 4 x 2 accumulator fragments (plain projection, BN = 128) or 4 x 1 for each of
gate and up (fused projection, BN = 64 per matrix). The A tile (dispatched rows)
and the B tile (weight rows, K contiguous) pass through shared memory BK = 64
columns at a time. With 256 units and 16-byte rows (the GPU case) they go through a ring
of STAGES shared slots filled by `kd.async_copy` (cp.async on CUDA: STAGES - 1 k tiles in
flight while the fragments multiply one, one barrier per step; 3 stages are 110 KiB, so
two cubes share an H200 SM); otherwise each step stages synchronously. Rows past the
expert's end and columns past N are clamped while loading (their results are never
stored); columns past K are zero-filled. Results leave through fragments stored straight
to global memory when the whole tile is inside, else element by element from the
accumulators (`kd.fragment_get` and the tile positions of `kd.fragment_row/col`) with rows
and columns masked; the SwiGLU gating is applied on the accumulators the same way, so no
shared staging tile is needed.
"""
from __future__ import annotations

import kerneldsl as kd

from .gemm_scalar import silu, swizzle
from .tiles import find_tile

PLANES = 8           # 2 x 4 planes per cube
FAST_UNITS = 256     # cube size of the async-copy ring path (8 planes of 32)
BM = 128             # rows per cube: 2 planes x 4 fragments x 16
BK = 64              # reduction step staged in shared memory
SK = BK + 8          # shared row stride in elements: a multiple of 8, skewed against bank conflicts
BN_DOWN = 128        # output columns per cube, plain projection: 4 planes x 2 fragments x 16
BN_FUSED = 64        # output columns per cube and per matrix, fused gate/up: 4 planes x 16
GM = 8               # row tiles per group of the cube order (see gemm_scalar.swizzle)
STAGES = 3           # ring of shared tiles on the 256-unit path, filled by async copies (2 cubes an SM)


@kd.func
def load_chunk(src, e, row, rows_end, k, K, EXPERT):
    """8 consecutive elements src[(e,) row, k:k+8] as one vector; row clamped below
    rows_end, k clamped to 0 past K (the caller zero-fills those)."""
    r = kd.i64(kd.min(row, rows_end - 1))
    kk = kd.select(k < K, k, 0)
    off = r * K + kk
    if EXPERT:
        off = (kd.i64(e) * src.shape[1] + r) * K + kk
    return kd.load_vec(src, off, 8)


@kd.func
def fetch_chunk(dst, at, src, e, row, rows_end, k, K, EXPERT, live):
    """Start the async copy of src[(e,) row, k:k+8] into dst[at:at+8]; zeros instead
    unless `live` and k < K. Rows are clamped into [0, rows_end) so no address leaves the
    tensor even for an empty tile (whose copies are never live)."""
    r = kd.i64(kd.max(kd.min(row, rows_end - 1), 0))
    kk = kd.select(k < K, k, 0)
    off = r * K + kk
    if EXPERT:
        off = (kd.i64(e) * src.shape[1] + r) * K + kk
    kd.async_copy(dst, at, src, off, 8, live & (k < K))


@kd.func
def put_chunk(dst, at, v, live, TAIL):
    """Write the 8 lanes of v to dst[at:at+8], zeros unless live. Without a K tail (TAIL
    false, compile-time) the lanes go as they are: one 16-byte store where the target merges."""
    for l in kd.unroll(8):
        if TAIL:
            dst[at + l] = kd.select(live, kd.f32(v[l]), 0.0)
        else:
            dst[at + l] = v[l]


@kd.func
def stage_tile(dst, base, src, e, row0, rows_end, k0, K, ROWS, VEC, EXPERT, TAIL):
    """Every unit of the cube copies part of src[(e,) row0:row0+ROWS, k0:k0+BK] into
    dst[base + i * SK + j] (rows clamped, zeros past K); synchronous, any cube size."""
    U = kd.cube_units()
    t = kd.unit_pos_x()
    if VEC:
        for c0 in range(0, ROWS * (BK // 8), U):
            c = c0 + t
            if c < ROWS * (BK // 8):
                i = c // (BK // 8)
                j = c % (BK // 8) * 8
                v = load_chunk(src, e, row0 + i, rows_end, k0 + j, K, EXPERT)
                put_chunk(dst, base + i * SK + j, v, k0 + j < K, TAIL)
    else:
        for c0 in range(0, ROWS * BK, U):
            c = c0 + t
            if c < ROWS * BK:
                i = c // BK
                j = c % BK
                r = kd.min(row0 + i, rows_end - 1)
                k = kd.select(k0 + j < K, k0 + j, 0)
                if EXPERT:
                    v = src[e, r, k]
                else:
                    v = src[r, k]
                dst[base + i * SK + j] = kd.select(k0 + j < K, kd.f32(v), 0.0)


@kd.func
def fetch_tile(dst, at, src, e, row0, rows_end, k0, K, NR, EXPERT, live):
    """Async copies of src[(e,) row0:row0+NR, k0:k0+BK] into dst[at + r * SK + c], 16 bytes a
    copy, every unit of the (256-unit) cube taking NR * BK / 8 / 256 of them."""
    U = kd.cube_units()
    CPR = BK // 8
    for j in kd.unroll(NR * CPR // U):
        c = kd.unit_pos_x() + j * U
        r = c // CPR
        col = c % CPR * 8
        fetch_chunk(dst, at + r * SK + col, src, e, row0 + r, rows_end, k0 + col, K, EXPERT, live)


@kd.func
def fetch_tc(sa, sb, x, w, e, slot, kt, KT, r0, rend, n0, N, K):
    """Async copies of k tile kt of the row tile (x) and the weight tile (w) into ring slot
    `slot`, one group; nothing live when kt >= KT."""
    live = kt < KT
    fetch_tile(sa, slot * (BM * SK), x, e, r0, rend, kt * BK, K, BM, False, live)
    fetch_tile(sb, slot * (BN_DOWN * SK), w, e, n0, N, kt * BK, K, BN_DOWN, True, live)
    kd.async_commit()


@kd.func
def tc_products(acc, fa, fb, sa, sb, abase, bbase, pm, pn):
    """acc (4 x 2 fragments) += the plane's 64 x 32 block of A·Bᵀ over one BK step."""
    for kk in kd.unroll(0, BK, 16):
        for i in kd.unroll(4):
            kd.load_fragment(fa[i], sa, abase + (pm + i * 16) * SK + kk, SK)
        for j in kd.unroll(2):
            kd.load_fragment(fb[j], sb, bbase + (pn + j * 16) * SK + kk, SK)
        for i in kd.unroll(4):
            for j in kd.unroll(2):
                kd.mma(acc[i * 2 + j], fa[i], fb[j])


@kd.func
def fetch_swiglu(sa, sg, su, x, gate, up, e, slot, kt, KT, r0, rend, n0, N, K):
    """Like fetch_tc for the fused projection: the row tile and both weight tiles."""
    live = kt < KT
    fetch_tile(sa, slot * (BM * SK), x, e, r0, rend, kt * BK, K, BM, False, live)
    fetch_tile(sg, slot * (BN_FUSED * SK), gate, e, n0, N, kt * BK, K, BN_FUSED, True, live)
    fetch_tile(su, slot * (BN_FUSED * SK), up, e, n0, N, kt * BK, K, BN_FUSED, True, live)
    kd.async_commit()


@kd.func
def swiglu_products(ga, ua, fa, fg, fu, sa, sg, su, abase, bbase, pm, pn):
    """ga, ua (4 fragments each) += the plane's 64 x 16 blocks of A·Gᵀ and A·Uᵀ over one BK step."""
    for kk in kd.unroll(0, BK, 16):
        for i in kd.unroll(4):
            kd.load_fragment(fa[i], sa, abase + (pm + i * 16) * SK + kk, SK)
        kd.load_fragment(fg, sg, bbase + pn * SK + kk, SK)
        kd.load_fragment(fu, su, bbase + pn * SK + kk, SK)
        for i in kd.unroll(4):
            kd.mma(ga[i], fa[i], fg)
            kd.mma(ua[i], fa[i], fu)


@kd.kernel
def grouped_gemm_tc(x: kd.Tensor, w: kd.Tensor, y: kd.Tensor, offsets: kd.Tensor[kd.u32, 1],
                    tile_offsets: kd.Tensor[kd.u32, 1], E: kd.i32, ROWS: kd.i32, COLS: kd.i32,
                    DT: kd.Const[object], VEC: kd.Const[bool], TAIL: kd.Const[bool], GM: kd.Const[int]):
    """y[r, n] = sum_k x[r, k] * w[e(r), n, k] on 16 x 16 x 16 fragments (y contiguous)."""
    kd.static_assert(kd.cube_units() == PLANES * kd.PLANE_DIM, "launch with 8 planes per cube")
    FAST = VEC and kd.cube_units() == FAST_UNITS
    p = kd.plane_pos()
    pm = p // 4 * 64
    pn = p % 4 * 32
    tile, col = swizzle(ROWS, COLS, GM)
    e, r0, rend = find_tile(offsets, tile_offsets, E, tile, BM)
    N = w.shape[1]
    K = x.shape[1]
    n0 = col * BN_DOWN
    NS = STAGES if FAST else 1
    sa = kd.shared(DT, NS * BM * SK)
    sb = kd.shared(DT, NS * BN_DOWN * SK)
    acc = (kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16),
           kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16),
           kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16))
    fa = (kd.fragment_a(DT, 16, 16, 16), kd.fragment_a(DT, 16, 16, 16),
          kd.fragment_a(DT, 16, 16, 16), kd.fragment_a(DT, 16, 16, 16))
    fb = (kd.fragment_b(DT, 16, 16, 16, layout="col"), kd.fragment_b(DT, 16, 16, 16, layout="col"))
    for f in kd.unroll(8):
        kd.fill_fragment(acc[f], 0.0)
    kend = kd.select(r0 < rend, K, 0)          # empty tiles skip the products (barriers stay
    if FAST:                                   # out of conditionals); their stores are masked
        KT = (kend + BK - 1) // BK
        for s in kd.unroll(STAGES - 1):
            fetch_tc(sa, sb, x, w, e, s, s, KT, r0, rend, n0, N, K)
        for kt in range(KT):
            kd.async_wait(STAGES - 2)          # this unit's part of tile kt is in ...
            kd.sync_cube()                     # ... everyone's is, and tile kt - 1 is done with
            nxt = kt + STAGES - 1
            fetch_tc(sa, sb, x, w, e, nxt % STAGES, nxt, KT, r0, rend, n0, N, K)
            tc_products(acc, fa, fb, sa, sb, (kt % STAGES) * (BM * SK), (kt % STAGES) * (BN_DOWN * SK), pm, pn)
        kd.async_wait(0)
    else:
        for k0 in range(0, kend, BK):
            stage_tile(sa, 0, x, e, r0, rend, k0, K, BM, VEC, False, TAIL)
            stage_tile(sb, 0, w, e, n0, N, k0, K, BN_DOWN, VEC, True, TAIL)
            kd.sync_cube()
            tc_products(acc, fa, fb, sa, sb, 0, 0, pm, pn)
            kd.sync_cube()
    if r0 + BM <= rend and n0 + BN_DOWN <= N:   # whole tile inside: fragments straight out
        for i in kd.unroll(4):
            for j in kd.unroll(2):
                kd.store_fragment(y, kd.i64(r0 + pm + i * 16) * N + n0 + pn + j * 16, acc[i * 2 + j], N)
    else:                                       # element by element, rows and columns masked
        for f in kd.unroll(8):
            for i in kd.unroll(kd.fragment_len(acc[f])):
                r = r0 + pm + f // 2 * 16 + kd.fragment_row(acc[f], i)
                n = n0 + pn + f % 2 * 16 + kd.fragment_col(acc[f], i)
                if r < rend and n < N:
                    y[r, n] = kd.fragment_get(acc[f], i)


@kd.kernel
def grouped_gemm_swiglu_tc(x: kd.Tensor, gate: kd.Tensor, up: kd.Tensor, h: kd.Tensor,
                           offsets: kd.Tensor[kd.u32, 1], tile_offsets: kd.Tensor[kd.u32, 1], E: kd.i32,
                           ROWS: kd.i32, COLS: kd.i32, DT: kd.Const[object], VEC: kd.Const[bool],
                           TAIL: kd.Const[bool], GM: kd.Const[int]):
    """h[r, n] = silu(x[r]·gate[e, n]) * (x[r]·up[e, n]) on fragments; gating fused into the store."""
    kd.static_assert(kd.cube_units() == PLANES * kd.PLANE_DIM, "launch with 8 planes per cube")
    FAST = VEC and kd.cube_units() == FAST_UNITS
    p = kd.plane_pos()
    pm = p // 4 * 64
    pn = p % 4 * 16
    tile, col = swizzle(ROWS, COLS, GM)
    e, r0, rend = find_tile(offsets, tile_offsets, E, tile, BM)
    N = gate.shape[1]
    K = x.shape[1]
    n0 = col * BN_FUSED
    NS = STAGES if FAST else 1
    sa = kd.shared(DT, NS * BM * SK)
    sg = kd.shared(DT, NS * BN_FUSED * SK)
    su = kd.shared(DT, NS * BN_FUSED * SK)
    ga = (kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16),
          kd.fragment_acc(16, 16, 16))
    ua = (kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16), kd.fragment_acc(16, 16, 16),
          kd.fragment_acc(16, 16, 16))
    fa = (kd.fragment_a(DT, 16, 16, 16), kd.fragment_a(DT, 16, 16, 16),
          kd.fragment_a(DT, 16, 16, 16), kd.fragment_a(DT, 16, 16, 16))
    fg = kd.fragment_b(DT, 16, 16, 16, layout="col")
    fu = kd.fragment_b(DT, 16, 16, 16, layout="col")
    for f in kd.unroll(4):
        kd.fill_fragment(ga[f], 0.0)
        kd.fill_fragment(ua[f], 0.0)
    kend = kd.select(r0 < rend, K, 0)          # empty tiles skip the products (barriers stay
    if FAST:                                   # out of conditionals); their stores are masked
        KT = (kend + BK - 1) // BK
        for s in kd.unroll(STAGES - 1):
            fetch_swiglu(sa, sg, su, x, gate, up, e, s, s, KT, r0, rend, n0, N, K)
        for kt in range(KT):
            kd.async_wait(STAGES - 2)
            kd.sync_cube()
            nxt = kt + STAGES - 1
            fetch_swiglu(sa, sg, su, x, gate, up, e, nxt % STAGES, nxt, KT, r0, rend, n0, N, K)
            swiglu_products(ga, ua, fa, fg, fu, sa, sg, su, (kt % STAGES) * (BM * SK),
                            (kt % STAGES) * (BN_FUSED * SK), pm, pn)
        kd.async_wait(0)
    else:
        for k0 in range(0, kend, BK):
            stage_tile(sa, 0, x, e, r0, rend, k0, K, BM, VEC, False, TAIL)
            stage_tile(sg, 0, gate, e, n0, N, k0, K, BN_FUSED, VEC, True, TAIL)
            stage_tile(su, 0, up, e, n0, N, k0, K, BN_FUSED, VEC, True, TAIL)
            kd.sync_cube()
            swiglu_products(ga, ua, fa, fg, fu, sa, sg, su, 0, 0, pm, pn)
            kd.sync_cube()
    for i in kd.unroll(4):                     # gating on the accumulators, rows and columns masked
        for q in kd.unroll(kd.fragment_len(ga[i])):
            r = r0 + pm + i * 16 + kd.fragment_row(ga[i], q)
            n = n0 + pn + kd.fragment_col(ga[i], q)
            if r < rend and n < N:
                h[r, n] = silu(kd.fragment_get(ga[i], q)) * kd.fragment_get(ua[i], q)
