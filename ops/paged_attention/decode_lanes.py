"""Decode kernel for devices whose units are SIMD lanes (the CPU): lanes along the head
dimension, tokens looped, so every K and V row is read with contiguous vector loads.

A cube owns one query row, a block of HB neighbouring KV heads with a chunk of HC query heads
of each, and one split of the row's visible tokens (grid: (row, head block · chunks, split)).
It has W units (W: one vector of f32 lanes on the CPU); unit u owns the elements
d = c·W + u (c < D / W) of each row, so a row is read as D / W vector loads, and the cube's
uniform work (page-table lookups, the running max of each head) is scalar code that runs
once a step. The heads of a token row are contiguous, so a block reads HB·D elements of each
row: it streams through a page, where one head's 512-byte slices 4 KiB apart did not (3.4
against 4.6 ms measured on the CPU benchmark, see RESULTS.md). Each step of T tokens (T·HC
(token, head) pairs: whole passes of the cube where HC divides W) has three phases, each
taking the block's heads one after the other:
  A. lanes along d: each lane's partial dot products of the T tokens' K rows with its slices
     of the HC queries (each K load feeds HC heads), stored [head, pair, lane];
  B. lanes along pairs: the W partials of a pair summed (a gather a lane and a tree), masked
     past the split, and p = exp2(s − m) against the head's running max m (one vector exp
     for W pairs). B starts after all of A's stores: a gather of lanes stored just before
     waits for the stores to complete (B right after each head's A: 6.0 against 2.9 ms);
  C. lanes along d: per head the step's max; the running max moves only when a score passes
     it by more than TAU (then the lane's accumulators and the sums are rescaled and this
     step's p recomputed; p <= 2^TAU otherwise), then acc[g] += Σ_t p[t][g]·V[t] (each V load
     feeds HC heads).
The query slices, accumulators and (max, sum) of the block's heads live in shared memory
(on the CPU: the cube's stack frame, in L1). All arithmetic is F32, logits in log2 units
(log2(e) folded into the query). Unsplit, the cube writes softmax·V; split, its unnormalised
accumulator and (max, sum) to the F32 workspace (merge_kernel.py), as decode_kernel.py does."""
from __future__ import annotations

import kerneldsl as kd

from .decode_kernel import TAU, log2_int, rescale
from .paged_kernel import split_range


@kd.func
def step_rows(tables, s, j, je, PS, T):
    """Physical rows (page · PS + slot, i64) of tokens j .. j + T − 1 of sequence s, each clamped
    below je (a token past the split reads the last one; its score is masked)."""
    rows = ()
    for t in kd.unroll(T):
        jt = kd.max(kd.min(j + t, je - 1), 0)
        rows = rows + (kd.i64(tables[s, jt // PS]) * PS + jt % PS,)
    return rows


@kd.func
def tree_sum(xs, LOG):
    """The sum of the 2^LOG values of tuple xs, pairwise (a tree: LOG dependent adds)."""
    for b in kd.unroll(LOG):
        half = len(xs) // 2
        zs = ()
        for i in kd.unroll(half):
            zs = zs + (xs[i] + xs[half + i],)
        xs = zs
    return xs[0]


@kd.kernel
def decode_lanes_kernel(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, tables: kd.Tensor, lengths: kd.Tensor,
                        seq_ids: kd.Tensor, positions: kd.Tensor, out: kd.Tensor, work: kd.Tensor,
                        qscale: kd.f32, causal: kd.i32, splits: kd.i32, span: kd.i32,
                        D: kd.Const[int], DV: kd.Const[int], HC: kd.Const[int], T: kd.Const[int],
                        W: kd.Const[int], HB: kd.Const[int], PS: kd.Const[int], SPLIT: kd.Const[bool]):
    C = D // W                       # K elements per lane
    CV = DV // W                     # V elements (accumulators per head) per lane
    TH = T * HC                      # (token, head) pairs a step
    NB = (TH + W - 1) // W           # passes of the cube over them
    r = kd.cube_pos_x()
    sp = kd.cube_pos_z()
    Hq = q.shape[1]
    Hkv = k.shape[2]
    G = Hq // Hkv
    chunks = (G + HC - 1) // HC
    hb = kd.cube_pos_y() // chunks   # block of HB neighbouring KV heads
    ch = kd.cube_pos_y() % chunks
    hc = kd.min(HC, G - ch * HC)     # heads of this chunk that exist

    qs = kd.shared(kd.f32, HB * HC * D)    # [KV head of the block, head, c, lane]: this lane's query slices
    accs = kd.shared(kd.f32, HB * HC * DV)  # [KV head, c, head, lane]: the output accumulators
    ms = kd.shared(kd.f32, HB * HC)        # running max of each head (log2 units)
    ls = kd.shared(kd.f32, HB * HC)        # running sum
    mrow = kd.shared(kd.f32, HB * TH)      # the running max of each pair's head
    ps = kd.shared(kd.f32, HB * TH * W)    # partial dot products [KV head, pair, lane]
    sc = kd.shared(kd.f32, HB * TH)        # the step's scores (log2 units; -inf past the split)
    pe = kd.shared(kd.f32, HB * TH)        # exp2(score - running max)
    for h in range(HB):
        h0 = (hb * HB + h) * G + ch * HC
        u = kd.unit_pos_x()
        for g in kd.unroll(HC):
            qb = (kd.i64(r) * Hq + kd.min(h0 + g, Hq - 1)) * D  # heads past the chunk repeat the last
            for c in kd.unroll(C):
                qs[((h * HC + g) * C + c) * W + u] = kd.f32(q[qb + c * W + u]) * qscale
        for e in kd.unroll(CV * HC):
            accs[(h * CV * HC + e) * W + u] = 0.0
        if u < HC:
            ms[h * HC + u] = -kd.inf
            ls[h * HC + u] = 0.0
        for b in kd.unroll(NB):
            if b * W + u < TH:
                mrow[h * TH + b * W + u] = -kd.inf
    kd.sync_cube()

    s, jb, je = split_range(seq_ids, lengths, positions, r, causal, sp, splits)
    kst = kd.i64(k.stride(1))
    vst = kd.i64(v.stride(1))
    # to the plan's longest share (`span`, an argument), so that the loop's trip count is
    # argument-bound (kerneldsl/loop_bounds.py); steps past this row's share do nothing
    for i0 in range(0, span, T):
        j0 = jb + i0
        if j0 < je:
            # the step's rows, uniform and kept (a table lookup in C, after stores to shared memory,
            # is not hoisted out of the unit loop: its V loads would become gathers)
            rows = step_rows(tables, s, j0, je, PS, T)
            # ---- A, for each head of the block in turn (together they read whole stretches of each
            # row): lanes along d, partial dot products of the step's tokens with every query head
            for h in range(HB):
                # the lane's offset is added here: a per-lane value kept across regions is an array,
                # and reading it would make these loads gathers
                kb = kd.i64(hb * HB + h) * k.stride(2) + kd.unit_pos_x()
                qv = ()
                for e in kd.unroll(HC * C):
                    qv = qv + (qs[(h * HC * C + e) * W + kd.unit_pos_x()],)
                for t in kd.unroll(T):
                    kr = ()
                    for c in kd.unroll(C):
                        kr = kr + (kd.f32(k[rows[t] * kst + kb + c * W]),)
                    for g in kd.unroll(HC):
                        part = qv[g * C] * kr[0]
                        for c in kd.unroll(1, C):
                            part = kd.fma(qv[g * C + c], kr[c], part)
                        ps[((h * T + t) * HC + g) * W + kd.unit_pos_x()] = part
            kd.sync_cube()
            # ---- B (all of A's stores before the first read: a gather of just-stored lanes waits for them)
            for h in range(HB):
                for b in kd.unroll(NB):
                    i = b * W + kd.unit_pos_x()
                    if i < TH:
                        parts = ()
                        for e in kd.unroll(W):
                            parts = parts + (ps[(h * TH + i) * W + e],)
                        sv = kd.select(j0 + i // HC < je, tree_sum(parts, log2_int(W)), -kd.inf)
                        mo = mrow[h * TH + i]
                        sc[h * TH + i] = sv
                        pe[h * TH + i] = kd.exp2_fast(sv - kd.select(mo == -kd.inf, kd.f32(0), mo))
            kd.sync_cube()
            for h in range(HB):
                # ---- C: lanes along d; per head the step's max (uniform), lazily moved running max
                grow = False
                for g in kd.unroll(HC):
                    mx = sc[h * TH + g]
                    for t in kd.unroll(1, T):
                        mx = kd.max(mx, sc[h * TH + t * HC + g])
                    grow = grow | (mx > ms[h * HC + g] + TAU)
                if grow:  # a split level branch (the barriers in it): the common step pays nothing for it
                    m2 = ()
                    als = ()
                    for g in kd.unroll(HC):
                        mx = sc[h * TH + g]
                        for t in kd.unroll(1, T):
                            mx = kd.max(mx, sc[h * TH + t * HC + g])
                        mo = ms[h * HC + g]
                        mn = kd.max(mo, mx)
                        m2 = m2 + (mn,)
                        als = als + (rescale(mo, mn),)
                    for e in kd.unroll(CV * HC):
                        ai = (h * CV * HC + e) * W + kd.unit_pos_x()
                        accs[ai] = accs[ai] * als[e % HC]
                    for b in kd.unroll(NB):
                        i = b * W + kd.unit_pos_x()
                        if i < TH:  # this step's p against the moved max, and the max B reads next step
                            mi = m2[0]
                            for g in kd.unroll(1, HC):
                                mi = kd.select(i % HC == g, m2[g], mi)
                            mrow[h * TH + i] = mi
                            pe[h * TH + i] = kd.exp2_fast(sc[h * TH + i] - kd.select(mi == -kd.inf, kd.f32(0), mi))
                    kd.sync_cube()  # every lane has read ms before it changes
                    i = kd.unit_pos_x()
                    if i < HC:
                        mi = m2[0]
                        af = als[0]
                        for g in kd.unroll(1, HC):
                            mi = kd.select(i == g, m2[g], mi)
                            af = kd.select(i == g, als[g], af)
                        ms[h * HC + i] = mi
                        ls[h * HC + i] = ls[h * HC + i] * af
                    kd.sync_cube()
                vrow = ()
                for t in kd.unroll(T):
                    vrow = vrow + (rows[t] * vst + kd.i64(hb * HB + h) * v.stride(2),)
                pv = ()
                for e in kd.unroll(TH):
                    pv = pv + (pe[h * TH + e],)
                for c in kd.unroll(CV):
                    vr = ()
                    for t in kd.unroll(T):
                        vr = vr + (kd.f32(v[vrow[t] + c * W + kd.unit_pos_x()]),)
                    for g in kd.unroll(HC):
                        ai = ((h * CV + c) * HC + g) * W + kd.unit_pos_x()
                        acc = accs[ai]
                        for t in kd.unroll(T):
                            acc = kd.fma(pv[t * HC + g], vr[t], acc)
                        accs[ai] = acc
                i = kd.unit_pos_x()
                if i < HC:
                    tot = ls[h * HC + i]
                    for t in kd.unroll(T):
                        tot = tot + pe[h * TH + t * HC + i]
                    ls[h * HC + i] = tot
    kd.sync_cube()

    # ---- each lane's slice of each head's output (or the split's partial state)
    for h in range(HB):
        h0 = (hb * HB + h) * G + ch * HC
        for g in kd.unroll(HC):
            if g < hc:
                l = ls[h * HC + g]
                for c in kd.unroll(CV):
                    a = accs[((h * CV + c) * HC + g) * W + kd.unit_pos_x()]
                    if SPLIT:
                        work[r, h0 + g, sp, c * W + kd.unit_pos_x()] = a
                    else:
                        out[r, h0 + g, c * W + kd.unit_pos_x()] = kd.select(l > 0.0, a / l, kd.f32(0))
                if SPLIT:
                    if kd.unit_pos_x() == 0:
                        work[r, h0 + g, sp, DV] = ms[h * HC + g]
                        work[r, h0 + g, sp, DV + 1] = l
