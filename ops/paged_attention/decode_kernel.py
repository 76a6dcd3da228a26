"""Flash-decoding kernel for paged GQA/MHA: the query heads of one KV head held in registers,
each K and V row read once, coalesced, for all of them; F32 online softmax per lane group.

A cube owns one query row, a block of HB neighbouring KV heads (plane w reads head w % HB, so
the cube reads HB·D contiguous elements of each token row at once), a chunk of HC query heads
of each, and one split of the row's visible tokens (grid x: row-major over (row, head block,
chunk); z: the split). Its planes are cut into lane groups of LPT lanes; a lane group is an
independent token stream: every step it takes U consecutive tokens, and lane i of the group
holds elements (c·LPT + i)·VEC .. + VEC of each row (c < D / (LPT·VEC)), so the group's load of
a row is one contiguous read (VEC-element vector loads). The step's K and V rows are all
loaded before any is used (U·(C + CV) loads in flight per lane). Scores: each lane's partial
dot products for the HC heads, summed over the group's lanes by xor shuffles (reduce-scatter
then all-gather). The running max (moved lazily, as in FlashAttention-4: only when a score
passes it by more than TAU), sum and the lane's slice of the output accumulator are registers
of the lane group.
At the end the groups of a plane merge by xor shuffles (max-rescaled), the planes through
shared memory (those reading one KV head); unsplit, the cube writes softmax·V, split, its unnormalised accumulator and
(max, sum) to the F32 workspace (merge_kernel.py). Logits are in log2 units (log2(e) folded
into the query)."""
from __future__ import annotations

import kerneldsl as kd

from .paged_kernel import split_range

TAU = 8.0  # lazy rescale threshold (log2 units): probabilities stay <= 256 between rescales


def log2_int(n: int) -> int:
    """log2 of a power of two (compile-time)."""
    return n.bit_length() - 1


@kd.func
def load_chunk(x, off, VEC):
    """VEC consecutive elements of x from element offset `off`, as a tuple of f32 (one vector
    load when VEC > 1)."""
    vals = ()
    if VEC > 1:
        vec = kd.load_vec(x, off, VEC)
        for e in kd.unroll(VEC):
            vals = vals + (kd.f32(vec[e]),)
    else:
        vals = (kd.f32(x[off]),)
    return vals


@kd.func
def load_row(x, base, li, N, LPT, VEC):
    """This lane's N·VEC elements of a row starting at `base`: chunks (c·LPT + li)·VEC."""
    vals = ()
    for c in kd.unroll(N):
        vals = vals + load_chunk(x, base + (c * LPT + li) * VEC, VEC)
    return vals


@kd.func
def step_rows(tables, s, j, je, PS, U):
    """Physical rows (page · PS + slot, i64) of tokens j .. j + U - 1 of sequence s, each
    clamped below je (a token past the split reads the last one; its score is masked)."""
    rows = ()
    for u in kd.unroll(U):
        ju = kd.max(kd.min(j + u, je - 1), 0)
        rows = rows + (kd.i64(tables[s, ju // PS]) * PS + ju % PS,)
    return rows


@kd.func
def load_step(k, v, rows, kst, kb, vst, vb, li, C, CV, LPT, VEC, U):
    """This lane's K and V elements of the step's U rows (f32 tuples)."""
    ks = ()
    vs = ()
    for u in kd.unroll(U):
        ks = ks + load_row(k, rows[u] * kst + kb, li, C, LPT, VEC)
        vs = vs + load_row(v, rows[u] * vst + vb, li, CV, LPT, VEC)
    return (ks, vs)


def halvings(n: int, levels: int) -> int:
    """Reduction levels that halve a tuple of n values (compile-time): while n stays even."""
    h = 0
    while h < levels and n % (2 << h) == 0:
        h += 1
    return h


@kd.func
def group_sums(xs, LPT, li):
    """Each value of the tuple xs summed over the LPT lanes of this lane's group (li: the lane
    in its group), given to all of them. Reduce-scatter, then all-gather: at each of the first
    levels a lane keeps half the values and sends its partner the other half (one shuffle per
    kept value, not per value), the rest reduce whole; the gather then reverses the halving.
    A level's shuffles are all issued before any result is used."""
    L = log2_int(LPT)
    H = halvings(len(xs), L)
    for b in kd.unroll(L):
        mask = 1 << (L - 1 - b)
        if b < H:
            half = len(xs) // 2
            up = (li & mask) != 0
            send = ()
            keep = ()
            for i in kd.unroll(half):
                send = send + (kd.select(up, xs[i], xs[half + i]),)
                keep = keep + (kd.select(up, xs[half + i], xs[i]),)
            recv = ()
            for i in kd.unroll(half):
                recv = recv + (kd.plane_shuffle_xor(send[i], mask),)
            zs = ()
            for i in kd.unroll(half):
                zs = zs + (keep[i] + recv[i],)
            xs = zs
        else:
            ys = ()
            for i in kd.unroll(len(xs)):
                ys = ys + (kd.plane_shuffle_xor(xs[i], mask),)
            zs = ()
            for i in kd.unroll(len(xs)):
                zs = zs + (xs[i] + ys[i],)
            xs = zs
    for b in kd.unroll(H):
        mask = 1 << (L - H + b)
        up = (li & mask) != 0
        recv = ()
        for i in kd.unroll(len(xs)):
            recv = recv + (kd.plane_shuffle_xor(xs[i], mask),)
        lo = ()
        hi = ()
        for i in kd.unroll(len(xs)):
            lo = lo + (kd.select(up, recv[i], xs[i]),)
            hi = hi + (kd.select(up, xs[i], recv[i]),)
        xs = lo + hi
    return xs


@kd.func
def rescale(m_old, m_new):
    """exp2(m_old - m_new), with m_new = -inf (nothing seen yet) taken as 0: never NaN."""
    return kd.exp2_fast(m_old - kd.select(m_new == -kd.inf, kd.f32(0), m_new))


@kd.func
def merge_planes(msh, lsh, ash, b, g, d, PH, HB, HC, DV, out, work, r, h, sp, SPLIT):
    """Element d of head g's output from the PH planes pw·HB + b that read its KV head (their
    max, sum and accumulator in shared memory, [plane, HC(, DV)]), max-rescaled; stored to
    out[r, h, d] normalised, or SPLIT to the workspace with the (max, sum) of split sp."""
    mx = msh[b * HC + g]
    for pw in kd.unroll(1, PH):
        mx = kd.max(mx, msh[(pw * HB + b) * HC + g])
    tot = kd.f32(0)
    a = kd.f32(0)
    for pw in kd.unroll(PH):
        f = rescale(msh[(pw * HB + b) * HC + g], mx)
        tot = kd.fma(lsh[(pw * HB + b) * HC + g], f, tot)
        a = kd.fma(ash[((pw * HB + b) * HC + g) * DV + d], f, a)
    if SPLIT:
        work[r, h, sp, d] = a
        if d == 0:
            work[r, h, sp, DV] = mx
            work[r, h, sp, DV + 1] = tot
    else:
        out[r, h, d] = kd.select(tot > 0.0, a / tot, kd.f32(0))


@kd.kernel
def decode_kernel(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, tables: kd.Tensor, lengths: kd.Tensor,
                  seq_ids: kd.Tensor, positions: kd.Tensor, out: kd.Tensor, work: kd.Tensor,
                  qscale: kd.f32, causal: kd.i32, splits: kd.i32,
                  D: kd.Const[int], DV: kd.Const[int], HC: kd.Const[int], LPT: kd.Const[int],
                  VEC: kd.Const[int], U: kd.Const[int], PS: kd.Const[int], PREFETCH: kd.Const[bool],
                  HB: kd.Const[int], SPLIT: kd.Const[bool]):
    NP = kd.plane_count()
    PH = NP // HB                      # planes per KV head (plane w reads KV head w % HB of the block)
    TPP = kd.PLANE_DIM // LPT          # token streams (lane groups) per plane
    C = D // (LPT * VEC)               # K chunks per lane
    CV = DV // (LPT * VEC)             # V chunks per lane
    NE = C * VEC                       # K elements per lane
    NV = CV * VEC                      # V elements per lane
    NS = PH * TPP                      # token streams per KV head
    t = kd.unit_pos()
    lane = kd.lane_pos()
    li = lane % LPT
    w = kd.plane_pos()
    stream = (w // HB) * TPP + lane // LPT
    sp = kd.cube_pos_z()
    Hq = q.shape[1]
    Hkv = k.shape[2]
    G = Hq // Hkv
    chunks = (G + HC - 1) // HC
    # a cube reads HB neighbouring KV heads of the same tokens (their rows are contiguous in a
    # page: the cube's planes read HB·D elements of each token row together)
    per_row = (Hkv // HB) * chunks
    r = kd.cube_pos_x() // per_row
    hy = kd.cube_pos_x() % per_row
    ch = hy % chunks
    hk = (hy // chunks) * HB + w % HB
    h0 = hk * G + ch * HC
    hc = kd.min(HC, G - ch * HC)  # heads of this chunk that exist

    # this lane's slice of the chunk's queries (heads past the chunk repeat the last: never stored)
    qv = ()
    for g in kd.unroll(HC):
        row = load_row(q, (kd.i64(r) * Hq + kd.min(h0 + g, Hq - 1)) * D, li, C, LPT, VEC)
        for e in kd.unroll(NE):
            qv = qv + (row[e] * qscale,)
    m = ()
    l = ()
    acc = ()
    for g in kd.unroll(HC):
        m = m + (-kd.inf,)
        l = l + (kd.f32(0),)
        for e in kd.unroll(NV):
            acc = acc + (kd.f32(0),)

    s, jb, je = split_range(seq_ids, lengths, positions, r, causal, sp, splits)
    kst = kd.i64(k.stride(1))
    vst = kd.i64(v.stride(1))
    kb = kd.i64(hk) * k.stride(2)
    vb = kd.i64(hk) * v.stride(2)
    rows = step_rows(tables, s, jb + stream * U, je, PS, U)
    ks = ()
    vs = ()
    if PREFETCH:
        ks, vs = load_step(k, v, rows, kst, kb, vst, vb, li, C, CV, LPT, VEC, U)
    for j0 in range(jb, je, NS * U):
        # ---- the step's K and V rows all in flight before any is used (with PREFETCH loaded
        # a step ahead); the next step's rows looked up meanwhile
        if PREFETCH:
            kc = ks
            vc = vs
            rows = step_rows(tables, s, j0 + NS * U + stream * U, je, PS, U)
            ks, vs = load_step(k, v, rows, kst, kb, vst, vb, li, C, CV, LPT, VEC, U)
        else:
            kc, vc = load_step(k, v, rows, kst, kb, vst, vb, li, C, CV, LPT, VEC, U)
            rows = step_rows(tables, s, j0 + NS * U + stream * U, je, PS, U)
        # ---- scores of the step's tokens for every head, summed over the group's lanes
        dots = ()
        for u in kd.unroll(U):
            for g in kd.unroll(HC):
                dot = kd.f32(0)
                for e in kd.unroll(NE):
                    dot = kd.fma(qv[g * NE + e], kc[u * NE + e], dot)
                dots = dots + (dot,)
        dots = group_sums(dots, LPT, li)
        sc = ()
        for u in kd.unroll(U):
            live = j0 + stream * U + u < je
            for g in kd.unroll(HC):
                sc = sc + (kd.select(live, dots[u * HC + g], -kd.inf),)
        # ---- online softmax per head; the running max moves only when some head's step max
        # exceeds it by more than TAU (then acc and l are rescaled), so p <= 2^TAU
        mxs = ()
        grow = False
        for g in kd.unroll(HC):
            mx = sc[g]
            for u in kd.unroll(1, U):
                mx = kd.max(mx, sc[u * HC + g])
            mxs = mxs + (mx,)
            grow = grow | (mx > m[g] + TAU)
        if grow:
            m2 = ()
            l2 = ()
            acc2 = ()
            for g in kd.unroll(HC):
                mn = kd.max(m[g], mxs[g])
                alpha = rescale(m[g], mn)
                for e in kd.unroll(NV):
                    acc2 = acc2 + (acc[g * NV + e] * alpha,)
                m2 = m2 + (mn,)
                l2 = l2 + (l[g] * alpha,)
            m = m2
            l = l2
            acc = acc2
        l2 = ()
        acc2 = ()
        for g in kd.unroll(HC):
            mu = kd.select(m[g] == -kd.inf, kd.f32(0), m[g])
            pu = ()
            tot = l[g]
            for u in kd.unroll(U):
                pu = pu + (kd.exp2_fast(sc[u * HC + g] - mu),)
                tot = tot + pu[u]
            for e in kd.unroll(NV):
                a = acc[g * NV + e]
                for u in kd.unroll(U):
                    a = kd.fma(pu[u], vc[u * NV + e], a)
                acc2 = acc2 + (a,)
            l2 = l2 + (tot,)
        l = l2
        acc = acc2

    # ---- merge the lane groups of each plane (xor shuffles across groups: same li, same elements)
    for b in kd.unroll(log2_int(LPT), log2_int(kd.PLANE_DIM)):
        m2 = ()
        l2 = ()
        acc2 = ()
        for g in kd.unroll(HC):
            mo = kd.plane_shuffle_xor(m[g], 1 << b)
            lo = kd.plane_shuffle_xor(l[g], 1 << b)
            mn = kd.max(m[g], mo)
            a_mine = rescale(m[g], mn)
            a_other = rescale(mo, mn)
            for e in kd.unroll(NV):
                acc2 = acc2 + (acc[g * NV + e] * a_mine + kd.plane_shuffle_xor(acc[g * NV + e], 1 << b) * a_other,)
            m2 = m2 + (mn,)
            l2 = l2 + (l[g] * a_mine + lo * a_other,)
        m = m2
        l = l2
        acc = acc2

    # ---- then the planes of each KV head, through shared memory
    msh = kd.shared(kd.f32, NP * HC)
    lsh = kd.shared(kd.f32, NP * HC)
    ash = kd.shared(kd.f32, NP * HC * DV)
    if lane < LPT:
        for g in kd.unroll(HC):
            if li == 0:
                msh[w * HC + g] = m[g]
                lsh[w * HC + g] = l[g]
            for c in kd.unroll(CV):
                for e in kd.unroll(VEC):
                    ash[(w * HC + g) * DV + (c * LPT + li) * VEC + e] = acc[g * NV + c * VEC + e]
    kd.sync_cube()
    for e0 in range(0, HB * HC * DV, kd.cube_units()):
        e = e0 + t
        b = e // (HC * DV)          # KV head of the block
        g = e // DV % HC
        d = e % DV
        if (e < HB * HC * DV) & (g < hc):
            merge_planes(msh, lsh, ash, b, g, d, PH, HB, HC, DV, out, work, r,
                         ((hy // chunks) * HB + b) * G + ch * HC + g, sp, SPLIT)
