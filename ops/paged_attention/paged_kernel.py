"""The paged attention kernel: one online-softmax pass over the physical pages, in F32.

A cube owns one query row, a chunk of HC query heads that read one KV head, and one split
(a contiguous share of the row's visible tokens; the whole range when unsplit). It walks
its tokens in tiles of T = cube units, three phases a tile:
  1. unit t finds token j0 + t in the page table, and scores it against all HC heads, GC
     heads per K element loaded (query heads of one KV head share each load; where units
     are not vector lanes, K is read VEC elements per access); scores go to shared memory
     in log2 units (log2(e) is folded into the query).
  2. each plane takes whole heads: tile maximum and sum by plane reductions, the running
     (max, sum) and the rescale factor of each head updated in shared memory.
  3. unit t owns output elements d = t, t + T, …: acc[g][d] = acc·alpha + Σ_j p[g][j]·V[j][d],
     each V element loaded once for GC heads.
Causality is by absolute position (the row sees [0, min(L, p + 1))); MLA is the same pass
with keys [latent | kp] (P > 0) and values the latent. Unsplit, the cube writes softmax·V;
split, it writes its unnormalised accumulator and (max, sum) to the F32 workspace, merged
by merge.py."""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def token_row(tables, s, j, ps):
    """Physical row (page · page_size + slot) of token j of sequence s."""
    return tables[s, j // ps] * ps + j % ps


@kd.func
def split_range(seq_ids, lengths, positions, r, causal, sp, splits):
    """(sequence, first token, end token) of query row r's share `sp` of `splits`: its visible
    tokens [0, L) or, causal, [0, min(L, position + 1)), cut into near-equal contiguous parts."""
    s = seq_ids[r]
    vis = lengths[s]
    if causal != 0:
        vis = kd.min(vis, positions[r] + 1)
    return (s, kd.i32(kd.i64(vis) * sp // splits), kd.i32(kd.i64(vis) * (sp + 1) // splits))


@kd.func
def dot_rows(qs, k, koff, g0, D, GC, VEC):
    """(q[g0 + i] · k[koff : koff + D] for i < GC), q in shared memory (f32); with VEC, K is read
    VEC elements per access (D and koff multiples of VEC). Locals are fresh tuples built here:
    a tuple carried through a run-time loop must be assigned in the function that loops."""
    sums = (kd.f32(0),) * GC
    if VEC > 1:
        for d0 in range(0, D, VEC):
            kvec = kd.load_vec(k, koff + d0, VEC)
            nxt = ()
            for i in kd.unroll(GC):
                part = sums[i]
                for e in kd.unroll(VEC):
                    part = kd.fma(qs[(g0 + i) * D + d0 + e], kd.f32(kvec[e]), part)
                nxt = nxt + (part,)
            sums = nxt
    else:
        for d in range(D):
            kx = kd.f32(k[koff + d])
            nxt = ()
            for i in kd.unroll(GC):
                nxt = nxt + (kd.fma(qs[(g0 + i) * D + d], kx, sums[i]),)
            sums = nxt
    return sums


@kd.func
def score_chunk(qs, qps, k, kp, koff, kpoff, g0, D, P, GC, VEC, PVEC):
    """Scores of heads g0 .. g0+GC-1 against one key row (k at koff, its rotary part at kpoff)."""
    main = dot_rows(qs, k, koff, g0, D, GC, VEC)
    if P > 0:
        rope = dot_rows(qps, kp, kpoff, g0, P, GC, PVEC)
        both = ()
        for i in kd.unroll(GC):
            both = both + (main[i] + rope[i],)
        main = both
    return main


@kd.func
def accumulate(acc, al, sc, v, rows, vb, vst, n, d, DV, HC, GC):
    """acc[g][d] = acc[g][d]·alpha[g] + Σ_j<n p[g][j]·V[row j][d] for every head g, GC heads per
    V element loaded."""
    T = kd.cube_units()
    for g0 in range(0, HC, GC):
        a = ()
        for i in kd.unroll(GC):
            a = a + (acc[(g0 + i) * DV + d] * al[g0 + i],)
        for jt in range(T):  # (to T, not n: an argument-bound trip count; rows past n are valid, unused)
            vv = kd.f32(v[kd.i64(rows[jt]) * vst + vb + d])
            b = ()
            for i in kd.unroll(GC):
                b = b + (kd.select(jt < n, kd.fma(sc[(g0 + i) * T + jt], vv, a[i]), a[i]),)
            a = b
        for i in kd.unroll(GC):
            acc[(g0 + i) * DV + d] = a[i]


@kd.kernel
def paged_kernel(q: kd.Tensor, qp: kd.Tensor, k: kd.Tensor, kp: kd.Tensor, v: kd.Tensor, tables: kd.Tensor,
                 lengths: kd.Tensor, seq_ids: kd.Tensor, positions: kd.Tensor, out: kd.Tensor, work: kd.Tensor,
                 qscale: kd.f32, causal: kd.i32, splits: kd.i32, span: kd.i32,
                 D: kd.Const[int], P: kd.Const[int], DV: kd.Const[int], HC: kd.Const[int], GC: kd.Const[int],
                 SPLIT: kd.Const[bool], VEC: kd.Const[int], PVEC: kd.Const[int]):
    T = kd.cube_units()
    t = kd.unit_pos_x()
    r = kd.cube_pos_x()
    sp = kd.cube_pos_z()
    Hq = q.shape[1]
    Hkv = k.shape[2]
    G = Hq // Hkv
    chunks = (G + HC - 1) // HC
    hk = kd.cube_pos_y() // chunks
    c = kd.cube_pos_y() % chunks
    h0 = hk * G + c * HC
    hc = kd.min(HC, G - c * HC)  # heads of this chunk that exist
    ps = k.shape[1]

    qs = kd.shared(kd.f32, HC * D)
    qps = kd.shared(kd.f32, HC * max(P, 1))
    acc = kd.shared(kd.f32, HC * DV)
    sc = kd.shared(kd.f32, HC * T)
    rows = kd.shared(kd.i32, T)
    ms = kd.shared(kd.f32, HC)
    ls = kd.shared(kd.f32, HC)
    al = kd.shared(kd.f32, HC)

    # loops over elements step by T with the unit inline in the index (uniform trip counts:
    # on the CPU the units of a cube are vector lanes, and such accesses stay contiguous)
    for e0 in range(0, HC * D, T):
        e = e0 + t
        if e < HC * D:
            qs[e] = kd.f32(q[r, kd.min(h0 + e // D, Hq - 1), e % D]) * qscale
    if P > 0:
        for e0 in range(0, HC * P, T):
            e = e0 + t
            if e < HC * P:
                qps[e] = kd.f32(qp[r, kd.min(h0 + e // P, Hq - 1), e % P]) * qscale
    for e0 in range(0, HC * DV, T):
        if e0 + t < HC * DV:
            acc[e0 + kd.unit_pos_x()] = 0.0
    for g0 in range(0, HC, T):
        if g0 + t < HC:
            ms[g0 + t] = -kd.inf
            ls[g0 + t] = 0.0
    kd.sync_cube()

    s, jb, je = split_range(seq_ids, lengths, positions, r, causal, sp, splits)
    kst = kd.i64(k.stride(1))
    kpst = kd.i64(kp.stride(1))
    vst = kd.i64(v.stride(1))
    # to the plan's longest share (`span`, an argument), so that the loop's trip count is
    # argument-bound (kerneldsl/loop_bounds.py); steps past this row's share do nothing
    for i0 in range(0, span, T):
        j0 = jb + i0
        if j0 < je:
            n = kd.min(T, je - j0)
            # 1. scores of token j0 + t against every head of the chunk
            row = token_row(tables, s, kd.min(j0 + t, je - 1), ps)
            rows[t] = row
            koff = kd.i64(row) * kst + kd.i64(hk) * k.stride(2)
            kpoff = kd.i64(row) * kpst + kd.i64(hk) * kp.stride(2)
            for g0 in range(0, HC, GC):
                sg = score_chunk(qs, qps, k, kp, koff, kpoff, g0, D, P, GC, VEC, PVEC)
                for i in kd.unroll(GC):
                    sc[(g0 + i) * T + t] = kd.select(t < n, sg[i], -kd.inf)
            kd.sync_cube()
            # 2. per head: tile max and sum (a plane per head), running (max, sum), rescale factor
            for g0 in range(0, HC, kd.plane_count()):
                g = kd.min(g0 + kd.plane_pos(), HC - 1)
                mx = -kd.inf
                for jl in range(0, T, kd.PLANE_DIM):
                    mx = kd.max(mx, sc[g * T + jl + kd.lane_pos()])
                mx = kd.plane_max(mx)
                mold = ms[g]
                mnew = kd.max(mold, mx)
                mu = kd.select(mnew == -kd.inf, kd.f32(0), mnew)  # nothing visible yet: p = 0, never NaN
                mine = g0 + kd.plane_pos() < HC
                tot = kd.f32(0)
                for jl in range(0, T, kd.PLANE_DIM):
                    pj = kd.exp2_fast(sc[g * T + jl + kd.lane_pos()] - mu)
                    tot += pj
                    if mine:
                        sc[g * T + jl + kd.lane_pos()] = pj
                tot = kd.plane_sum(tot)
                if mine and kd.lane_pos() == 0:
                    alpha = kd.exp2_fast(mold - mu)
                    al[g] = alpha
                    ls[g] = ls[g] * alpha + tot
                    ms[g] = mnew
            kd.sync_cube()
            # 3. acc[g][d] = acc[g][d] * alpha[g] + sum_j p[g][j] * V[j][d]
            vb = kd.i64(hk) * v.stride(2)
            # whole chunks of T elements under uniform control (vector loops on the CPU), then the rest
            for d0 in range(0, DV - DV % T, T):
                accumulate(acc, al, sc, v, rows, vb, vst, n, d0 + kd.unit_pos_x(), DV, HC, GC)
            if DV % T != 0:
                # the tail: units past DV stay out (no split point inside, so the branch may diverge;
                # clamping their d instead made them read slots other units write: a shared-memory race)
                d = DV - DV % T + t
                if d < DV:
                    accumulate(acc, al, sc, v, rows, vb, vst, n, d, DV, HC, GC)
            kd.sync_cube()

    for e0 in range(0, HC * DV, T):
        e = e0 + t
        g = e // DV
        if g < hc:
            if SPLIT:
                work[r, h0 + g, sp, e % DV] = acc[e]
            else:
                l = ls[g]
                out[r, h0 + g, e % DV] = kd.select(l > 0.0, acc[e] / l, kd.f32(0))
    if SPLIT:
        for g0 in range(0, HC, T):
            if g0 + t < hc:
                work[r, h0 + g0 + t, sp, DV] = ms[g0 + t]
                work[r, h0 + g0 + t, sp, DV + 1] = ls[g0 + t]
