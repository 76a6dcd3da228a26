"""Paged MLA decode on the matrix primitive: all query heads of a chunk share every latent load.

MLA has one KV head whose keys are [latent | kp] and whose values are the latent, so per
tile of TT = 16·NT tokens the scores are a [heads, R + P] × [R + P, TT] product and the
output update a [heads, TT] × [TT, R] one. A cube owns one query row, HB = 16·HG query heads
(HG head groups, the rows of one m16n16k16 tile each; rows past the heads are zeros, never
stored) and one split of the row's visible tokens (grid x: row-major over (row, head chunk);
z: the split). Its planes are HG × RP: plane (hg, rp) holds head group hg's accumulator for
the rp-th of RP equal slices of R (an H × R F32 accumulator is too big for one plane's
registers) and, for the scores, the rp-th slice of the contraction over [latent | kp]:
it writes its partial scores to shared memory, and after a barrier every plane of the group
sums the RP partials in one order, so the group's planes hold bit-identical scores and keep
identical running (max, sum) without talking again. Tiles come in through a ring of STAGES
slots filled by `kd.async_copy` by the whole cube (each 16-byte chunk of a row found through
the page table; tokens past the split and columns past R or P zero-filled), STAGES - 1 tiles
ahead. Softmax as in decode_mma.py (log2 units, lazy rescale, P rounded to the input dtype).
Unsplit, each plane writes its slice of O / l; split, its unnormalised slice and (by the
rp = 0 plane) the (max, sum) to the F32 workspace (merge_kernel.py)."""
from __future__ import annotations

import kerneldsl as kd

from ..attention.blocks import slot
from .decode_mma import CHUNK
from .online_softmax import exp_rows, fresh_state, lazy_max, row_sums, scale_rows
from .paged_kernel import split_range

PART_STRIDE = 20  # partial scores are stored token-major, 20 floats a token: a plane's 8 rows x 4 column
#                   pairs of an accumulator fall in 32 different banks (2·20 = 8 mod 32)


@kd.func
def chunk_place(c, NC, ROWS, RS):
    """(row, column) of chunk c of a band of ROWS rows of NC 16-byte chunks: row-major where
    rows have a stride (RS > 0); in kd.tile_offset's layout (RS < 0) band-major, the two
    chunks of a row's 16 columns and then the next row's, so a plane's copies fill
    consecutive 32-byte rows of one band (row-major, its 32-byte pieces would sit a band
    apart, all in the same eight banks: 16-way conflicts, measured by ncu on the H200)."""
    row = c // NC
    col = c % NC * CHUNK
    if RS < 0:
        row = c // 2 % ROWS
        col = (c // (2 * ROWS) * 2 + c % 2) * CHUNK
    return row, col


@kd.func
def band_tokens(tables, s, j0, je, PS, NC, ROWS, RS):
    """The physical rows (page · PS + slot) of the tokens whose chunks this unit copies in a
    band of NC chunks a row (chunk c = unit + i·units, placed by chunk_place; tokens clamped
    into [0, je)), all looked up before any copy is issued, so the loads overlap."""
    rows = ()
    for i in kd.unroll((ROWS * NC + kd.cube_units() - 1) // kd.cube_units()):
        row, col = chunk_place(kd.unit_pos() + i * kd.cube_units(), NC, ROWS, RS)
        jc = kd.max(kd.min(j0 + row, je - 1), 0)
        rows = rows + (kd.i64(tables[s, jc // PS]) * PS + jc % PS,)
    return rows


@kd.func
def copy_band(dst, at, RS, c0, NC, src, rows, j0, je, DIM, ROWS):
    """Start copying this unit's 16-byte chunks of a band (`rows` from band_tokens) from src
    ([pages, PS, 1, DIM]) to column c0 + column of dst's tile at `at` (row stride RS > 0, or
    RS = -ROWS: kd.tile_offset's layout, see blocks.slot); columns from DIM on and tokens
    from je on zero-filled."""
    for i in kd.unroll(len(rows)):
        c = kd.unit_pos() + i * kd.cube_units()
        row, col = chunk_place(c, NC, ROWS, RS)
        if c < ROWS * NC:  # a false predicate still writes (zeros): units past the band copy nothing
            kd.async_copy(dst, slot(at, row, c0 + col, RS, 0, 32), src,
                          rows[i] * src.stride(1) + kd.min(col, DIM - CHUNK), CHUNK, (j0 + row < je) & (col < DIM))


@kd.func
def fetch_tile(ring, at, ST, RW, KW, lat, kp, tables, s, j0, je, PS, R, P, ROWS):
    """Start copying the [latent | kp] rows of tokens j0 .. j0 + ROWS - 1 of sequence s into
    the ring's tile at `at` (layout ST as in copy_band; latent in columns [0, RW), kp in
    [RW, KW), the rest zeros)."""
    lrows = band_tokens(tables, s, j0, je, PS, RW // CHUNK, ROWS, ST)
    prows = band_tokens(tables, s, j0, je, PS, (KW - RW) // CHUNK, ROWS, ST)
    copy_band(ring, at, ST, 0, RW // CHUNK, lat, lrows, j0, je, R, ROWS)
    copy_band(ring, at, ST, RW, (KW - RW) // CHUNK, kp, prows, j0, je, P, ROWS)


@kd.func
def fetch_query_band(dst, RS, c0, CW, src, r, h0, ROWS, DIM):
    """Start copying columns [0, CW) of heads h0 .. h0 + ROWS - 1 of query row r (src
    [queries, H, DIM]) to column c0 + column of dst's tile (layout RS as in copy_band);
    heads past H and columns past DIM zero-filled."""
    NC = CW // CHUNK
    H = src.shape[1]
    for i in kd.unroll((ROWS * NC + kd.cube_units() - 1) // kd.cube_units()):
        c = kd.unit_pos() + i * kd.cube_units()
        row = c // NC
        col = c % NC * CHUNK
        h = h0 + row
        if c < ROWS * NC:
            kd.async_copy(dst, slot(0, row, c0 + col, RS, 0, 32), src,
                          (kd.i64(r) * H + kd.min(h, H - 1)) * DIM + kd.min(col, DIM - CHUNK), CHUNK,
                          (h < H) & (col < DIM))


@kd.kernel
def mla_mma_kernel(q: kd.Tensor, qp: kd.Tensor, lat: kd.Tensor, kp: kd.Tensor, tables: kd.Tensor,
                   lengths: kd.Tensor, seq_ids: kd.Tensor, positions: kd.Tensor, out: kd.Tensor, work: kd.Tensor,
                   qscale: kd.f32, causal: kd.i32, splits: kd.i32,
                   R: kd.Const[int], P: kd.Const[int], HG: kd.Const[int], NT: kd.Const[int], PS: kd.Const[int],
                   STAGES: kd.Const[int], SPLIT: kd.Const[bool]):
    DT = lat.dtype
    NP = kd.plane_count()
    RP = NP // HG
    RW = (R + 15) // 16 * 16               # the latent band of a shared row (also the values)
    KCP = (RW // 16 + (P + 15) // 16 + RP - 1) // RP  # contraction chunks of 16 per plane
    KW = KCP * RP * 16                     # a shared row: [latent | kp | zeros]
    VC = RW // 16 // RP                    # output tiles of 16 columns per plane
    ST = KW + 8                            # shared row stride, padded by 16 bytes against bank conflicts
    TT = 16 * NT                           # tokens per step
    TILE = TT * ST
    HB = 16 * HG
    w = kd.plane_pos()
    hg = w // RP
    rp = w % RP
    sp = kd.cube_pos_z()
    H = q.shape[1]
    chunks = (H + HB - 1) // HB
    r = kd.cube_pos_x() // chunks
    h0 = kd.cube_pos_x() % chunks * HB

    ring = kd.shared(DT, STAGES * TILE)   # slot i: the [latent | kp] rows of step i's TT tokens
    q_sh = kd.shared(DT, HB * ST)         # [q | qp] of the chunk's heads, same row layout
    part = kd.shared(kd.f32, NP * TT * PART_STRIDE)  # each plane's partial scores, [plane][token][head]

    # ---- the chunk's queries, then the first STAGES - 1 tiles
    fetch_query_band(q_sh, ST, 0, RW, q, r, h0, HB, R)
    fetch_query_band(q_sh, ST, RW, KW - RW, qp, r, h0, HB, P)
    kd.async_commit()
    s, jb, je = split_range(seq_ids, lengths, positions, r, causal, sp, splits)
    for st in kd.unroll(STAGES - 1):
        fetch_tile(ring, st * TILE, ST, RW, KW, lat, kp, tables, s, jb + st * TT, je, PS, R, P, TT)
        kd.async_commit()
    kd.async_wait(STAGES - 1)
    kd.sync_cube()

    qf = ()
    for c in kd.unroll(KCP):
        f = kd.fragment_a(DT, 16, 16, 16)
        kd.load_fragment(f, q_sh, hg * 16 * ST + (rp * KCP + c) * 16, ST)
        qf = qf + (f,)
    of = ()
    for v in kd.unroll(VC):
        o = kd.fragment_acc(16, 16, 16)
        kd.fill_fragment(o, 0.0)
        of = of + (o,)
    sfs = ()
    for t in kd.unroll(NT):
        sfs = sfs + (kd.fragment_acc(16, 16, 16),)
    sf = sfs[0]
    pf = kd.fragment_a(DT, 16, 16, 16)
    kf = kd.fragment_b(DT, 16, 16, 16, layout="col")
    vf = kd.fragment_b(DT, 16, 16, 16)
    NE = kd.fragment_len(sf)
    m, l = fresh_state(sf)

    for i in range(0, (je - jb + TT - 1) // TT):
        kd.async_wait(STAGES - 2)  # this unit's copies of step i are in ...
        kd.sync_cube()             # ... every unit's are; slot i - 1 and the partials of step i - 1 are read
        nxt = i + STAGES - 1
        fetch_tile(ring, nxt % STAGES * TILE, ST, RW, KW, lat, kp, tables, s, jb + nxt * TT, je, PS, R, P, TT)
        kd.async_commit()
        cur = i % STAGES * TILE
        j0 = jb + i * TT
        # ---- this plane's share of S = [q | qp]·[latent | kp]ᵀ, to shared memory
        for t in kd.unroll(NT):
            kd.fill_fragment(sfs[t], 0.0)
            for c in kd.unroll(KCP):
                kd.load_fragment(kf, ring, cur + t * 16 * ST + (rp * KCP + c) * 16, ST)
                kd.mma(sfs[t], qf[c], kf)
            for e in kd.unroll(NE):
                at_e = (t * 16 + kd.fragment_col(sfs[t], e)) * PART_STRIDE + kd.fragment_row(sfs[t], e)
                part[w * TT * PART_STRIDE + at_e] = kd.fragment_get(sfs[t], e)
        kd.sync_cube()
        # ---- the group's RP partials summed in one order, logits in log2 units, tokens past the split masked
        for t in kd.unroll(NT):
            for e in kd.unroll(NE):
                at_e = (t * 16 + kd.fragment_col(sfs[t], e)) * PART_STRIDE + kd.fragment_row(sfs[t], e)
                x = part[hg * RP * TT * PART_STRIDE + at_e]
                for o in kd.unroll(1, RP):
                    x = x + part[(hg * RP + o) * TT * PART_STRIDE + at_e]
                ok = j0 + t * 16 + kd.fragment_col(sfs[t], e) < je
                kd.fragment_set(sfs[t], e, kd.select(ok, x * qscale, -kd.inf))
        # ---- the running max (moved lazily), P = exp2(S - m) in place, the lane's part of each row sum
        moved, alpha, m, l = lazy_max(sfs, sf, m, l)
        if moved:
            scale_rows(of, alpha)
        l = exp_rows(sfs, sf, m, l)
        # ---- O += P·V on this plane's slice
        for t in kd.unroll(NT):
            kd.fragment_convert(pf, sfs[t])
            for v in kd.unroll(VC):
                kd.load_fragment(vf, ring, cur + t * 16 * ST + (rp * VC + v) * 16, ST)
                kd.mma(of[v], pf, vf)
    kd.async_wait(0)

    # ---- this plane's slice of the output (split: unnormalised, and the group's (max, sum) once)
    lt = row_sums(l, sf)
    for v in kd.unroll(VC):
        for e in kd.unroll(NE):
            h = h0 + hg * 16 + kd.fragment_row(of[v], e)
            d = (rp * VC + v) * 16 + kd.fragment_col(of[v], e)
            x = kd.fragment_get(of[v], e)
            if (h < H) & (d < R):
                if SPLIT:
                    work[r, h, sp, d] = x
                else:
                    tot = lt[kd.fragment_row_slot(of[v], e)]
                    out[r, h, d] = kd.select(tot > 0.0, x / tot, kd.f32(0))
    if SPLIT:
        for e in kd.unroll(NE):
            h = h0 + hg * 16 + kd.fragment_row(sf, e)
            if (h < H) & (rp == 0) & (kd.fragment_col(sf, e) == 0):
                work[r, h, sp, R] = m[kd.fragment_row_slot(sf, e)]
                work[r, h, sp, R + 1] = lt[kd.fragment_row_slot(sf, e)]
