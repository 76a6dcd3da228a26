"""Paged GQA/MHA decode on the matrix primitive: S = Q·Kᵀ and O += P·V as plane-owned
m16n16k16 products (tensor cores on CUDA), K and V tiles brought into shared memory by
`kd.async_copy` rings several tiles ahead, so the bytes in flight do not live in registers.

A cube owns one query row, HC (<= 16) query heads of one KV head (rows of the A operand;
rows past the chunk's heads are zeros, never stored) and one split of the row's visible
tokens (grid x: row-major over (row, KV head, chunk); z: the split). Each of its NP planes
takes every NP-th tile of 16 consecutive tokens; its tiles pass through its own S slots of
the ring: copies of tile i + S - 1 are issued before tile i is used. Each lane copies 16-byte
chunks of the tile's rows, every row found through the page table (any page size); tokens
past the split are zero-filled and their scores masked. Per tile: S = Q·Kᵀ (Q in fragments
for the whole kernel), logits in log2 units, the running max moved lazily (only when a row's
grows by more than TAU), P = exp2(S - m) rounded to the input dtype, O += P·V. At the end the
planes merge through shared memory (max-rescaled); unsplit, the cube writes O / l, split,
its unnormalised O and (max, sum) to the F32 workspace (merge_kernel.py)."""
from __future__ import annotations

import kerneldsl as kd

from ..attention.flash_regs import row_combine
from .decode_kernel import merge_planes, rescale
from .paged_kernel import split_range

TAU = 8.0  # lazy rescale threshold (log2 units): P <= 256 between rescales, exact in f16/bf16
CHUNK = 8  # elements per 16-byte copy (the matrix primitive's dtypes are 2 bytes)


@kd.func
def fetch_tiles(k_sh, v_sh, kat, vat, KS, VS, k, v, tables, s, j0, je, hk, PS, D, DV):
    """Start copying the K and V rows of tokens j0 .. j0 + 15 of sequence s, KV head hk, into
    k_sh / v_sh from elements kat / vat (row strides KS, VS): this lane's 16-byte chunks of
    each (chunk c of a tile: row c // NC, column (c % NC)·8, NC chunks covering the width
    rounded up to 16; columns past it and tokens from je on zero-filled). A row's page comes
    from the table (its index clamped into the row), looked up once for K and V."""
    NC = (D + 15) // 16 * 2
    NCV = (DV + 15) // 16 * 2
    lane = kd.lane_pos()
    if (NC == NCV) & (kd.PLANE_DIM % NC == 0):  # a lane's column is fixed, its rows evenly spaced
        RS = kd.PLANE_DIM // NC
        col = lane % NC * CHUNK
        kcol = kd.i64(hk) * k.stride(2) + kd.min(col, D - CHUNK)
        vcol = kd.i64(hk) * v.stride(2) + kd.min(col, DV - CHUNK)
        for i in kd.unroll(16 // RS):
            row = lane // NC + i * RS
            j = j0 + row
            jc = kd.max(kd.min(j, je - 1), 0)
            token = kd.i64(tables[s, jc // PS]) * PS + jc % PS
            kd.async_copy(k_sh, kat + row * KS + col, k, token * k.stride(1) + kcol, CHUNK, (j < je) & (col < D))
            kd.async_copy(v_sh, vat + row * VS + col, v, token * v.stride(1) + vcol, CHUNK, (j < je) & (col < DV))
    else:
        fetch_rows(k_sh, kat, KS, k, tables, s, j0, je, hk, PS, D)
        fetch_rows(v_sh, vat, VS, v, tables, s, j0, je, hk, PS, DV)


@kd.func
def fetch_rows(dst, at, RS, src, tables, s, j0, je, hk, PS, DIM):
    """fetch_tiles for one of K and V, any width: chunk c of the tile goes to lane c % PLANE_DIM."""
    NC = (DIM + 15) // 16 * 2
    lane = kd.lane_pos()
    for i in kd.unroll((16 * NC + kd.PLANE_DIM - 1) // kd.PLANE_DIM):
        c = lane + i * kd.PLANE_DIM
        row = c // NC
        col = (c % NC) * CHUNK
        j = j0 + row
        jc = kd.max(kd.min(j, je - 1), 0)
        if c < 16 * NC:  # a false predicate still writes (zeros): lanes past the tile copy nothing
            token = kd.i64(tables[s, jc // PS]) * PS + jc % PS
            kd.async_copy(dst, at + row * RS + col, src,
                          token * src.stride(1) + kd.i64(hk) * src.stride(2) + kd.min(col, DIM - CHUNK), CHUNK,
                          (j < je) & (col < DIM))


@kd.kernel
def decode_mma_kernel(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, tables: kd.Tensor, lengths: kd.Tensor,
                      seq_ids: kd.Tensor, positions: kd.Tensor, out: kd.Tensor, work: kd.Tensor,
                      qscale: kd.f32, causal: kd.i32, splits: kd.i32,
                      D: kd.Const[int], DV: kd.Const[int], HC: kd.Const[int], PS: kd.Const[int],
                      STAGES: kd.Const[int], SPLIT: kd.Const[bool]):
    DT = k.dtype
    NP = kd.plane_count()
    DP = (D + 15) // 16 * 16
    DVP = (DV + 15) // 16 * 16
    KS = DP + 8    # shared row strides, padded by 16 bytes against bank conflicts
    VS = DVP + 8
    KT = 16 * KS   # elements of a K tile, a V tile
    VT = 16 * VS
    w = kd.plane_pos()
    sp = kd.cube_pos_z()
    Hq = q.shape[1]
    Hkv = k.shape[2]
    G = Hq // Hkv
    chunks = (G + HC - 1) // HC
    r = kd.cube_pos_x() // (Hkv * chunks)
    hk = kd.cube_pos_x() // chunks % Hkv
    ch = kd.cube_pos_x() % chunks
    h0 = hk * G + ch * HC
    hc = kd.min(HC, G - ch * HC)  # heads of this chunk that exist

    k_sh = kd.shared(DT, STAGES * NP * KT)  # plane w's slot i of the ring: tile (i·NP + w)
    v_sh = kd.shared(DT, STAGES * NP * VT)
    q_sh = kd.shared(DT, KT)

    # ---- the chunk's query rows (zeros past hc), then the first STAGES - 1 tiles
    NQC = DP // CHUNK
    for i in kd.unroll((16 * NQC + kd.cube_units() - 1) // kd.cube_units()):
        c = kd.unit_pos() + i * kd.cube_units()
        g = c // NQC
        col = (c % NQC) * CHUNK
        if c < 16 * NQC:
            kd.async_copy(q_sh, g * KS + col, q, (kd.i64(r) * Hq + h0 + kd.min(g, hc - 1)) * D + kd.min(col, D - CHUNK),
                          CHUNK, (g < hc) & (col < D))
    kd.async_commit()
    s, jb, je = split_range(seq_ids, lengths, positions, r, causal, sp, splits)
    step = 16 * NP
    for st in kd.unroll(STAGES - 1):
        j0 = jb + (st * NP + w) * 16
        fetch_tiles(k_sh, v_sh, (st * NP + w) * KT, (st * NP + w) * VT, KS, VS, k, v, tables, s, j0, je, hk, PS, D, DV)
        kd.async_commit()
    kd.async_wait(STAGES - 1)
    kd.sync_cube()

    qf = ()
    for dc in kd.unroll(DP // 16):
        f = kd.fragment_a(DT, 16, 16, 16)
        kd.load_fragment(f, q_sh, dc * 16, KS)
        qf = qf + (f,)
    of = ()
    for dv in kd.unroll(DVP // 16):
        o = kd.fragment_acc(16, 16, 16)
        kd.fill_fragment(o, 0.0)
        of = of + (o,)
    sf = kd.fragment_acc(16, 16, 16)
    pf = kd.fragment_a(DT, 16, 16, 16)
    kf = kd.fragment_b(DT, 16, 16, 16, layout="col")
    vf = kd.fragment_b(DT, 16, 16, 16)
    NS = kd.fragment_row_slots(sf)
    NE = kd.fragment_len(sf)
    m = ()
    l = ()
    for n in kd.unroll(NS):
        m = m + (-kd.inf,)
        l = l + (kd.f32(0),)

    for i in range(0, (je - jb + step - 1) // step):
        kd.async_wait(STAGES - 2)  # this lane's copies of tile i are in ...
        kd.sync_cube()             # ... every lane's are, and slot i - 1 is read by all
        nxt = i + STAGES - 1
        slot = nxt % STAGES * NP + w
        fetch_tiles(k_sh, v_sh, slot * KT, slot * VT, KS, VS, k, v, tables, s, jb + nxt * step + w * 16, je, hk, PS,
                    D, DV)
        kd.async_commit()
        cur = i % STAGES * NP + w
        j0 = jb + i * step + w * 16
        # ---- S = Q·Kᵀ, logits in log2 units, tokens past the split masked
        kd.fill_fragment(sf, 0.0)
        for dc in kd.unroll(DP // 16):
            kd.load_fragment(kf, k_sh, cur * KT + dc * 16, KS)
            kd.mma(sf, qf[dc], kf)
        for e in kd.unroll(NE):
            x = kd.fragment_get(sf, e) * qscale
            kd.fragment_set(sf, e, kd.select(j0 + kd.fragment_col(sf, e) < je, x, -kd.inf))
        # ---- row maxima; the running max moves only when a row's grows by more than TAU
        mts = ()
        grow = False
        for sl in kd.unroll(NS):
            mx = -kd.inf
            for e in kd.unroll(NE):
                if kd.fragment_row_slot(sf, e) == sl:
                    mx = kd.max(mx, kd.fragment_get(sf, e))
            mx = row_combine(mx, sf, True)
            mts = mts + (mx,)
            grow = grow | (mx > m[sl] + TAU)
        if kd.plane_any(grow):
            m2 = ()
            l2 = ()
            alpha = ()
            for sl in kd.unroll(NS):
                mn = kd.max(m[sl], mts[sl])
                a = rescale(m[sl], mn)
                alpha = alpha + (a,)
                m2 = m2 + (mn,)
                l2 = l2 + (l[sl] * a,)
            for dv in kd.unroll(DVP // 16):
                for e in kd.unroll(NE):
                    kd.fragment_set(of[dv], e, kd.fragment_get(of[dv], e) * alpha[kd.fragment_row_slot(of[dv], e)])
            m = m2
            l = l2
        # ---- P = exp2(S - m) in place, the lane's part of each row sum; O += P·V
        l2 = ()
        for sl in kd.unroll(NS):
            mu = kd.select(m[sl] == -kd.inf, kd.f32(0), m[sl])
            tot = l[sl]
            for e in kd.unroll(NE):
                if kd.fragment_row_slot(sf, e) == sl:
                    p = kd.exp2_fast(kd.fragment_get(sf, e) - mu)
                    kd.fragment_set(sf, e, p)
                    tot = tot + p
            l2 = l2 + (tot,)
        l = l2
        kd.fragment_convert(pf, sf)
        for dv in kd.unroll(DVP // 16):
            kd.load_fragment(vf, v_sh, cur * VT + dv * 16, VS)
            kd.mma(of[dv], pf, vf)
    kd.async_wait(0)

    # ---- the planes' (m, l, O) merged through shared memory, rows < hc
    lt = ()
    for sl in kd.unroll(NS):
        lt = lt + (row_combine(l[sl], sf, False),)
    msh = kd.shared(kd.f32, NP * HC)
    lsh = kd.shared(kd.f32, NP * HC)
    osh = kd.shared(kd.f32, NP * HC * DV)
    for dv in kd.unroll(DVP // 16):
        for e in kd.unroll(NE):
            g = kd.fragment_row(of[dv], e)
            d = dv * 16 + kd.fragment_col(of[dv], e)
            if (g < HC) & (d < DV):
                osh[(w * HC + g) * DV + d] = kd.fragment_get(of[dv], e)
    for e in kd.unroll(NE):
        g = kd.fragment_row(sf, e)
        if (g < HC) & (kd.fragment_col(sf, e) == 0):
            msh[w * HC + g] = m[kd.fragment_row_slot(sf, e)]
            lsh[w * HC + g] = lt[kd.fragment_row_slot(sf, e)]
    kd.sync_cube()
    for e0 in range(0, HC * DV, kd.cube_units()):
        e = e0 + kd.unit_pos()
        g = e // DV
        d = e % DV
        if (e < HC * DV) & (g < hc):
            merge_planes(msh, lsh, osh, 0, g, d, NP, 1, HC, DV, out, work, r, h0 + g, sp, SPLIT)
