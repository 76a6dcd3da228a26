"""`FlashBlackboxAccelerated` with the softmax on the accumulators (FlashAttention-2 style).

A cube of NP planes owns BQ = 16·seq_q·NP rows of the flattened [group heads x Sq] query
block of one KV head; each plane owns seq_q tiles of 16 rows and keeps its output in acc
fragments for the whole kernel, and its Q tiles in a fragments too when it owns one
(several: Q is read from shared memory each step, their accumulators need the registers);
each K and V fragment loaded serves all of the plane's query tiles. Each step takes
BK = 16·KT keys, KT = ceil(NP·seq_kv / seq_q) (`key_tiles`): a plane's S tiles number
NP·seq_kv whatever seq_q is, so a plane owning two query tiles (32 rows, FlashAttention-2's
shape: each K/V fragment read from shared memory serves twice the work) takes fewer keys a
step and stays within the registers. K and V tiles go through a two-slot ring in shared
memory filled by `kd.async_copy` (cp.async on CUDA: the next tile lands while this one is
used; `blocks.fetch_kv`: one address and a fixed row stride per unit):

1. S = Q·Kᵀ into acc fragments (BK/16 per query tile);
2. on those fragments, element by element: the shared logit rule (scale, softcap, mask,
   causal, bias) in log2 units; tiles every row of the cube sees in full (no mask, bias or
   softcap, all keys present and visible) skip it, and with a positive scale keep raw
   scores (the scale is applied to each row's max and inside the exponent). Then the row
   max (a lane's elements of one row slot, reduced pairwise so the dependency chain is
   short, then `plane_shuffle_xor` over the lanes holding the row), P = exp2(logit - m) in
   place (`kd.exp2_fast` of one `kd.fma`), and the lane's part of the row sum. The running
   max moves only when some row of the plane grows by more than TAU (a plane vote; then O
   and l are rescaled by exp2(m_old - m_new)), so P <= 2^TAU and most steps skip the
   rescale;
3. P converted to a fragments (`kd.fragment_convert`, rounded to the input dtype) and
   O += P·V.

Row statistics live in registers per row slot; the lanes of a row finish the row sum at
the end (O / l, zeros for a row with no visible key). Where a row lands in the tile and
which lanes share it come from the fragment layout queries, so the same kernel runs on
tensor cores and on the emulation. The query rows' (head, position, causal limit) are
worked out per row slot on the tiles that need them (edges, masks, bias, softcap), not
held in registers through the key loop.
"""
from __future__ import annotations

import kerneldsl as kd

from .blocks import cube_block, fetch_kv, fetch_rows, key_range
from .scores import LOG2E, logit2

TAU = 8.0  # lazy rescale threshold in log2 units: P <= 256, safe in f16 and bf16


@kd.func
def slot_row(f, s):
    """Tile row of this lane's row slot s of fragment f."""
    r = 0
    for i in kd.unroll(kd.fragment_len(f)):
        if kd.fragment_row_slot(f, i) == s:
            r = kd.fragment_row(f, i)
    return r


@kd.func
def query_row(rg, rows, Sq, hk, G, causal, off, Skv):
    """(head, position, last visible key + 1) of flattened query row rg (clamped into the
    block): worked out where needed, not held in registers through the key loop."""
    rc = kd.min(rg, rows - 1)
    iq = rc % Sq
    return (hk * G + rc // Sq, iq, kd.select(causal != 0, iq + off, Skv))


@kd.func
def pair(a, b, MAX):
    """max(a, b) when MAX, else a + b."""
    if MAX:
        r = kd.max(a, b)
    else:
        r = a + b
    return r


@kd.func
def tree_fold(v, MAX):
    """Max (MAX) or sum of a tuple of up to 128 values pairwise: a dependency chain of
    log2(len) steps, not len."""
    for level in kd.unroll(7):
        if len(v) > 1:
            w = ()
            for i in kd.unroll(0, len(v) - 1, 2):
                w = w + (pair(v[i], v[i + 1], MAX),)
            if len(v) % 2 == 1:
                w = w + (v[len(v) - 1],)
            v = w
    return v[0]


@kd.func
def row_combine(x, f, MAX):
    """Max (MAX) or sum of x over the lanes that hold one row of fragment f."""
    masks = kd.fragment_row_lanes(f)
    for j in kd.unroll(len(masks)):
        x = pair(x, kd.plane_shuffle_xor(x, masks[j]), MAX)
    return x


@kd.kernel
def flash_regs_kernel(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, out: kd.Tensor, mask: kd.Tensor, bias: kd.Tensor,
                      scale: kd.f32, softcap: kd.f32, causal: kd.i32, D: kd.Const[int], DV: kd.Const[int],
                      SQT: kd.Const[int], KT: kd.Const[int], HAS_MASK: kd.Const[bool], HAS_BIAS: kd.Const[bool],
                      SOFTCAP: kd.Const[bool], VEC: kd.Const[bool], QSH: kd.Const[bool]):
    DT = q.dtype
    NP = kd.plane_count()
    BQ = 16 * SQT * NP
    BK = 16 * KT
    DP = (D + 15) // 16 * 16
    DVP = (DV + 15) // 16 * 16
    KS = DP + 8    # shared row strides, padded by 8 elements (16 bytes) against bank conflicts
    VS = DVP + 8
    NDC = DP // 16
    NDV = DVP // 16
    NKT = BK // 16

    b, hk, G, Sq, Skv, rows, r0 = cube_block(q, k, BQ)
    prow = kd.plane_pos() * (16 * SQT)
    off = Skv - Sq

    if QSH:  # Q stays in shared memory, read once per step and query tile (frees its registers)
        k_sh = kd.shared(DT, (2 * BK + BQ) * KS)     # two K slots, then the Q block
        QOFF = 2 * BK * KS
    else:    # Q in fragments for the whole kernel; the Q block first sits at slot 1
        k_sh = kd.shared(DT, max(2 * BK, BK + BQ) * KS)
        QOFF = BK * KS
    v_sh = kd.shared(DT, 2 * BK * VS)

    # ---- Q block -> shared (one copy group), K/V tile 0 -> slot 0 (the next group)
    i_min, kv_end = key_range(r0, BQ, rows, Sq, Skv, causal)
    scale2 = scale * LOG2E
    fetch_rows(k_sh, QOFF, KS, q, b, hk, r0, rows, G, Sq, BQ, D, DP, VEC, True, 32)
    kd.async_commit()
    fetch_kv(k_sh, 0, KS, k, b, hk, 0, kv_end, BK, D, DP, VEC, 32)
    fetch_kv(v_sh, 0, VS, v, b, hk, 0, kv_end, BK, DV, DVP, VEC, 32)
    kd.async_commit()
    kd.async_wait(1)
    kd.sync_cube()

    qf = ()
    of = ()
    qa = ()
    for qt in kd.unroll(SQT):
        if QSH:
            qa = qa + (kd.fragment_a(DT, 16, 16, 16),)
        else:
            for dc in kd.unroll(NDC):
                f = kd.fragment_a(DT, 16, 16, 16)
                kd.load_fragment(f, k_sh, QOFF + (prow + qt * 16) * KS + dc * 16, KS)
                qf = qf + (f,)
        for dv in kd.unroll(NDV):
            o = kd.fragment_acc(16, 16, 16)
            kd.fill_fragment(o, 0.0)
            of = of + (o,)
    sf = ()  # S, then P in place, of each (query tile, key tile)
    pf = ()  # P as a fragments
    for n in kd.unroll(SQT * NKT):
        sf = sf + (kd.fragment_acc(16, 16, 16),)
        pf = pf + (kd.fragment_a(DT, 16, 16, 16),)
    kf = kd.fragment_b(DT, 16, 16, 16, layout="col")
    vf = kd.fragment_b(DT, 16, 16, 16)
    NS = kd.fragment_row_slots(sf[0])
    NE = kd.fragment_len(sf[0])

    # per (query tile, row slot): the running max m and sum l
    m = ()
    l = ()
    for n in kd.unroll(SQT * NS):
        m = m + (-kd.inf,)
        l = l + (kd.f32(0),)

    for j0 in range(0, kv_end, BK):
        cur = (j0 // BK) % 2
        kd.async_wait(0)   # this unit's part of tile j0 is in ...
        kd.sync_cube()     # ... everyone's is, and everyone is done with the other slot
        nslot = 1 - cur
        fetch_kv(k_sh, nslot * (BK * KS), KS, k, b, hk, j0 + BK, kv_end, BK, D, DP, VEC, 32)
        fetch_kv(v_sh, nslot * (BK * VS), VS, v, b, hk, j0 + BK, kv_end, BK, DV, DVP, VEC, 32)
        kd.async_commit()
        kbase = cur * (BK * KS)
        vbase = cur * (BK * VS)
        interior = False
        if not (HAS_MASK or HAS_BIAS or SOFTCAP):
            interior = (j0 + BK <= Skv) & ((causal == 0) | (j0 + BK - 1 <= i_min + off))
        # interior tiles with a positive scale keep raw scores in S: the max is taken on them
        # and scaled once per row, and the scale joins the exponent (one fma per element)
        fold = interior & (scale2 > 0.0)
        sc = kd.select(fold, scale2, kd.f32(1))
        # ---- S = Q·Kᵀ: each K fragment serves all of the plane's query tiles
        for n in kd.unroll(SQT * NKT):
            kd.fill_fragment(sf[n], 0.0)
        for dc in kd.unroll(NDC):
            if QSH:
                for qt in kd.unroll(SQT):
                    kd.load_fragment(qa[qt], k_sh, QOFF + (prow + qt * 16) * KS + dc * 16, KS)
            for kt in kd.unroll(NKT):
                kd.load_fragment(kf, k_sh, kbase + kt * 16 * KS + dc * 16, KS)
                for qt in kd.unroll(SQT):
                    if QSH:
                        kd.mma(sf[qt * NKT + kt], qa[qt], kf)
                    else:
                        kd.mma(sf[qt * NKT + kt], qf[qt * NDC + dc], kf)
        for qt in kd.unroll(SQT):
            # ---- logits (log2 units), in place: interior tiles with no mask, bias or softcap
            # (every key exists and is visible to every row of the cube) need only the scale
            if interior:
                if not fold:  # a scale <= 0: scale first (the max of raw logits is not theirs)
                    for kt in kd.unroll(NKT):
                        for i in kd.unroll(NE):
                            f = sf[qt * NKT + kt]
                            kd.fragment_set(f, i, kd.fragment_get(f, i) * scale2)
            else:
                qrows = ()
                for s in kd.unroll(NS):
                    qrows = qrows + (query_row(r0 + prow + qt * 16 + slot_row(sf[0], s), rows, Sq, hk, G, causal,
                                               off, Skv),)
                for kt in kd.unroll(NKT):
                    for i in kd.unroll(NE):
                        f = sf[qt * NKT + kt]
                        h, iq, lim = qrows[kd.fragment_row_slot(f, i)]
                        ctx = (mask, bias, b, h, iq, lim, Skv, softcap, LOG2E)
                        j = j0 + kt * 16 + kd.fragment_col(f, i)
                        kd.fragment_set(f, i, logit2(kd.fragment_get(f, i) * scale, j, ctx, HAS_MASK, HAS_BIAS,
                                                     SOFTCAP))
            # ---- row maxima; the running max moves only when a row's grows by more than TAU
            # (lazily, as in FlashAttention-4: P <= 2^TAU), decided for the whole plane
            mts = ()
            for s in kd.unroll(NS):
                xs = ()
                for kt in kd.unroll(NKT):
                    for i in kd.unroll(NE):
                        if kd.fragment_row_slot(sf[qt * NKT + kt], i) == s:
                            xs = xs + (kd.fragment_get(sf[qt * NKT + kt], i),)
                mts = mts + (row_combine(tree_fold(xs, True), sf[0], True) * sc,)
            grow = mts[0] > m[qt * NS] + TAU
            for s in kd.unroll(1, NS):
                grow = grow | (mts[s] > m[qt * NS + s] + TAU)
            if kd.plane_any(grow):
                m2 = ()
                l2 = ()
                alpha = ()
                for s in kd.unroll(NS):
                    m_old = m[qt * NS + s]
                    mn = kd.max(m_old, mts[s])
                    a = kd.exp2_fast(m_old - kd.select(mn == -kd.inf, kd.f32(0), mn))
                    alpha = alpha + (a,)
                    m2 = m2 + (mn,)
                    l2 = l2 + (l[qt * NS + s] * a,)
                for dv in kd.unroll(NDV):
                    o = of[qt * NDV + dv]
                    for i in kd.unroll(NE):
                        kd.fragment_set(o, i, kd.fragment_get(o, i) * alpha[kd.fragment_row_slot(o, i)])
                m_new = ()
                l_new = ()
                for n in kd.unroll(SQT * NS):
                    if n // NS == qt:
                        m_new = m_new + (m2[n % NS],)
                        l_new = l_new + (l2[n % NS],)
                    else:
                        m_new = m_new + (m[n],)
                        l_new = l_new + (l[n],)
                m = m_new
                l = l_new
            # ---- P = exp2(logit - m) in place, the lane's part of each row sum
            l2 = ()
            for s in kd.unroll(NS):
                mu = kd.select(m[qt * NS + s] == -kd.inf, kd.f32(0), m[qt * NS + s])  # nothing visible yet
                ps = ()
                for kt in kd.unroll(NKT):
                    for i in kd.unroll(NE):
                        if kd.fragment_row_slot(sf[qt * NKT + kt], i) == s:
                            p = kd.exp2_fast(kd.fma(kd.fragment_get(sf[qt * NKT + kt], i), sc, -mu))
                            kd.fragment_set(sf[qt * NKT + kt], i, p)
                            ps = ps + (p,)
                l2 = l2 + (l[qt * NS + s] + tree_fold(ps, False),)
            for kt in kd.unroll(NKT):
                kd.fragment_convert(pf[qt * NKT + kt], sf[qt * NKT + kt])
            l_new = ()
            for n in kd.unroll(SQT * NS):
                if n // NS == qt:
                    l_new = l_new + (l2[n % NS],)
                else:
                    l_new = l_new + (l[n],)
            l = l_new
        # ---- O += P·V: each V fragment serves all of the plane's query tiles
        for kt in kd.unroll(NKT):
            for dv in kd.unroll(NDV):
                kd.load_fragment(vf, v_sh, vbase + kt * 16 * VS + dv * 16, VS)
                for qt in kd.unroll(SQT):
                    kd.mma(of[qt * NDV + dv], pf[qt * NKT + kt], vf)
    kd.async_wait(0)

    # ---- out = O / l (rows with no visible key: zeros)
    for qt in kd.unroll(SQT):
        inv = ()
        for s in kd.unroll(NS):
            lr = row_combine(l[qt * NS + s], sf[0], False)
            inv = inv + (kd.select(lr > 0.0, 1.0 / lr, kd.f32(0)),)
        for dv in kd.unroll(NDV):
            o = of[qt * NDV + dv]
            for i in kd.unroll(NE):
                so = kd.fragment_row_slot(o, i)
                rg = r0 + prow + qt * 16 + kd.fragment_row(o, i)
                h, iq, lim = query_row(rg, rows, Sq, hk, G, causal, off, Skv)
                c = dv * 16 + kd.fragment_col(o, i)
                if (rg < rows) & (c < DV):
                    out[b, h, iq, c] = kd.fragment_get(o, i) * inv[so]


def key_tiles(tiling) -> int:
    """16-key tiles per step: num_planes·seq_kv spread over the plane's seq_q query tiles."""
    return max(1, -(-tiling.num_planes * tiling.seq_kv // tiling.seq_q))


def q_in_shared(tiling) -> bool:
    """Read Q from shared memory each step (rather than hold it in fragments) when a plane
    owns several query tiles: their accumulators need the registers."""
    return tiling.seq_q > 1


def shared_bytes(p, tiling) -> int:
    """Shared memory the kernel declares for problem p and this tiling."""
    bq = 16 * tiling.seq_q * tiling.num_planes
    bk = 16 * key_tiles(tiling)
    dp, dvp = (p.D + 15) // 16 * 16, (p.Dv + 15) // 16 * 16
    k_rows = 2 * bk + bq if q_in_shared(tiling) else max(2 * bk, bk + bq)
    return p.dtype.itemsize * (k_rows * (dp + 8) + 2 * bk * (dvp + 8))


def run(p, out, dummy_mask, dummy_bias, tiling, vec: bool) -> None:
    """Launch for a validated problem (flash_mma.check first)."""
    plane = p.runtime.capabilities.plane_dim
    units = tiling.num_planes * plane
    bq = 16 * tiling.seq_q * tiling.num_planes
    rows = p.group * p.Sq
    grid = ((rows + bq - 1) // bq, p.B * p.Hkv)
    flash_regs_kernel[grid, units](
        p.q, p.k, p.v, out, p.mask if p.mask is not None else dummy_mask,
        p.bias if p.bias is not None else dummy_bias, p.scale, p.softcap or 1.0, int(p.causal), p.D, p.Dv,
        tiling.seq_q, key_tiles(tiling), p.mask is not None, p.bias is not None, p.softcap is not None, vec,
        q_in_shared(tiling))
