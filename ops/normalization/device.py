"""Device functions shared by the normalization kernels: masked loads and stores of one
unit's chunk (a scalar, or an L-lane vector), reductions over the units of a row, and
the exp softmax uses.

A row is handled by BX units of a cube (`unit_pos_x`), and a cube holds RY rows
(`unit_pos_y`). Rows of BX >= PLANE_DIM units reduce with a plane operation, one
value per plane through shared memory, and one more plane operation over those;
rows narrower than a plane sit in aligned segments of one plane and reduce with a
shuffle-xor butterfly inside the segment. Every reduction gives all units of the row
the same value, in a fixed order.
"""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def load_f32(src, off, ok, fill, L):
    """L elements of `src` from flat offset `off`, as f32 (a vector when L > 1); `fill` where not ok."""
    if L == 1:
        v = kd.f32(fill)
        if ok:
            v = kd.f32(src[off])
    else:
        v = kd.splat(kd.f32(fill), L)
        if ok:
            v = kd.cast(kd.load_vec(src, off, L), kd.f32)
    return v


@kd.func
def chunk_in(first, k, t, width, MASK, BX, L):
    """Whether chunk k of this unit, from column first + (k*BX + t)*L, lies inside the row:
    True when not MASK (only a row's last step needs the test)."""
    return first + (k * BX + t) * L < width if MASK else True  # one expression: True stays a constant


@kd.func
def load_chunks(src, base, first, t, width, fill, MASK, BX, N, L, cond=True):
    """N chunks of this unit as f32 (`fill` outside the row, see chunk_in, or where not
    `cond`), every load issued before any value is used: a GPU then has all N in flight
    at once instead of waiting for each in turn. Rows past the last are read as the last
    row (kernels clamp the row they read and store nothing for it), so loads of inputs
    need no test on the row."""
    vals = ()
    for k in kd.unroll(N):
        ok = cond and chunk_in(first, k, t, width, MASK, BX, L)
        vals = vals + (load_f32(src, base + first + (k * BX + t) * L, ok, fill, L),)
    return vals


@kd.func
def store(dst, off, value, L):
    """Store a chunk (scalar or L-lane vector), cast once to dst's dtype."""
    if L == 1:
        dst[off] = value
    else:
        kd.store_vec(dst, off, value)


@kd.func
def lanes_sum(v, L):
    """Sum of a chunk's lanes (the value itself when L == 1)."""
    if L == 1:
        s = v
    else:
        s = kd.vec_sum(v)
    return s


@kd.func
def row_reduce(v, BX, RY, MAX):
    """Sum (or, MAX, max: NaN if any is NaN) of `v` over the BX units of this unit's row:
    a butterfly inside a plane for short rows; else plane reductions, then one value per
    plane through shared memory and one more plane reduction."""
    P = kd.PLANE_DIM
    if BX < P:
        s = v
        for k in kd.unroll(BX.bit_length() - 1):
            o = kd.plane_shuffle_xor(s, BX >> (k + 1))
            if MAX:
                s = kd.max(s, o)
            else:
                s = s + o
    else:
        if MAX:
            s = kd.plane_max(v)
        else:
            s = kd.plane_sum(v)
        NPR = (BX + P - 1) // P
        if NPR > 1:
            parts = kd.shared(kd.f32, RY * NPR)
            if kd.lane_pos() == 0:
                parts[kd.plane_pos()] = s
            kd.sync_cube()
            if MAX:
                s = kd.plane_max(row_parts(parts, NPR, True))
            else:
                s = kd.plane_sum(row_parts(parts, NPR, False))
    return s


@kd.func
def row_sum(v, BX, RY):
    """Sum of `v` over the BX units of this unit's row."""
    return row_reduce(v, BX, RY, False)


@kd.func
def row_max(v, BX, RY):
    """Max of `v` over the BX units of this unit's row (NaN if any is NaN)."""
    return row_reduce(v, BX, RY, True)


@kd.func
def merge_m2(ma, qa, na, mb, qb, nb):
    """(mean, M2, count) of two groups given as (mean, M2 = Σ(x - mean)², count): Chan et
    al.'s pairwise update, as stable as a two-pass variance."""
    n = na + nb
    d = mb - ma
    f = nb / n
    return (ma + d * f, qa + qb + d * d * (na * f), n)


@kd.func
def butterfly_m2(m, q, n, G):
    """Merge (mean, M2, count) over aligned groups of G lanes (a power of two) of a plane,
    every lane of a group ending with the group's values."""
    r = (m, q, n)
    for k in kd.unroll(G.bit_length() - 1):
        off = G >> (k + 1)
        r = merge_m2(r[0], r[1], r[2], kd.plane_shuffle_xor(r[0], off), kd.plane_shuffle_xor(r[1], off), r[2] * 1.0)
    return r


@kd.func
def row_mean_m2(m, q, n, BX, RY):
    """(mean, M2) over the BX units of this unit's row, each holding the mean and M2 of n
    values: one reduction of two values instead of a sum, a barrier and a second sum (the
    units' counts are equal, so every pairwise merge is of equal halves). Same layout as
    row_sum: planes merge by butterfly, then one value pair per plane through shared
    memory, merged again."""
    P = kd.PLANE_DIM
    r = butterfly_m2(m, q, kd.f32(n), BX if BX < P else P)
    if BX > P:
        NPR = BX // P
        pm = kd.shared(kd.f32, RY * NPR)
        pq = kd.shared(kd.f32, RY * NPR)
        if kd.lane_pos() == 0:
            pm[kd.plane_pos()] = r[0]
            pq[kd.plane_pos()] = r[1]
        kd.sync_cube()
        base = kd.unit_pos_y() * NPR
        j = kd.lane_pos() % NPR if NPR < P else kd.lane_pos()
        per_plane = r[2]
        a = (pm[base + j], pq[base + j], per_plane)
        for k in kd.unroll(1, NPR // P if NPR > P else 1):
            a = merge_m2(a[0], a[1], a[2], pm[base + j + k * P], pq[base + j + k * P], per_plane)
        r = butterfly_m2(a[0], a[1], a[2], NPR if NPR < P else P)
    return (r[0], r[1])


@kd.func
def rows_sums(vs, BX, NS):
    """Sums over the BX units of a cube's one row of units of each of the NS values in `vs`,
    one barrier for all (row_sum's layout; the NS reductions' steps interleave)."""
    P = kd.PLANE_DIM
    out = ()
    if BX < P:
        for k in kd.unroll(NS):
            out = out + (row_sum(vs[k], BX, 1),)
    else:
        s = ()
        for k in kd.unroll(NS):
            s = s + (kd.plane_sum(vs[k]),)
        NPR = (BX + P - 1) // P
        if NPR > 1:
            parts = kd.shared(kd.f32, NS * NPR)
            if kd.lane_pos() == 0:
                for k in kd.unroll(NS):
                    parts[k * NPR + kd.plane_pos()] = s[k]
            kd.sync_cube()
            for k in kd.unroll(NS):
                acc = kd.f32(0)
                for i in kd.unroll((NPR + P - 1) // P):
                    j = kd.lane_pos() + i * P
                    if j < NPR:
                        acc += parts[k * NPR + j]
                out = out + (kd.plane_sum(acc),)
        else:
            out = s
    return out


@kd.func
def rows_mean_m2(ms, qs, n, BX, NS):
    """(mean, M2) over the BX units of a cube's one row of units for each of NS rows, every
    unit holding the mean ms[k] and M2 qs[k] of n values of row k: row_mean_m2's layout with
    one barrier for all NS rows (their butterflies interleave)."""
    P = kd.PLANE_DIM
    rs = ()
    for k in kd.unroll(NS):
        rs = rs + (butterfly_m2(ms[k], qs[k], kd.f32(n), BX if BX < P else P),)
    out = ()
    if BX > P:
        NPR = BX // P
        pm = kd.shared(kd.f32, NS * NPR)
        pq = kd.shared(kd.f32, NS * NPR)
        if kd.lane_pos() == 0:
            for k in kd.unroll(NS):
                pm[k * NPR + kd.plane_pos()] = rs[k][0]
                pq[k * NPR + kd.plane_pos()] = rs[k][1]
        kd.sync_cube()
        j = kd.lane_pos() % NPR if NPR < P else kd.lane_pos()
        for k in kd.unroll(NS):
            b = k * NPR + j
            per_plane = rs[k][2]
            a = (pm[b], pq[b], per_plane)
            for i in kd.unroll(1, NPR // P if NPR > P else 1):
                a = merge_m2(a[0], a[1], a[2], pm[b + i * P], pq[b + i * P], per_plane)
            r = butterfly_m2(a[0], a[1], a[2], NPR if NPR < P else P)
            out = out + ((r[0], r[1]),)
    else:
        for k in kd.unroll(NS):
            out = out + ((rs[k][0], rs[k][1]),)
    return out


@kd.func
def row_parts(parts, NPR, MAX):
    """This lane's share (sum, or max when MAX) of its row's NPR per-plane values, lane k
    taking values k, k + P, ...: one more plane reduction then finishes the row, instead
    of every unit reading all NPR values."""
    P = kd.PLANE_DIM
    base = kd.unit_pos_y() * NPR
    lane = kd.lane_pos()
    acc = kd.f32(-kd.inf if MAX else 0.0)
    for k in kd.unroll((NPR + P - 1) // P):
        j = lane + k * P
        if j < NPR:
            if MAX:
                acc = kd.max(acc, parts[base + j])
            else:
                acc += parts[base + j]
    return acc


@kd.func
def row_index(RY):
    """This unit's row: cubes are numbered over a 2-D grid, RY rows per cube."""
    r = (kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()) * RY + kd.unit_pos_y()
    return r


@kd.func
def read_row(row, rows):
    """The row a unit reads: its own, or the last one for units past the end (which
    store nothing), so loads need no test on the row."""
    r = kd.min(row, rows - 1)
    return r


@kd.func
def row_offsets(rows, width, x_stride, RY):
    """(row, live, x row offset, y row offset) of this unit's row: rows past the end read
    the last row and store nothing (y is packed, `width` elements a row)."""
    row = row_index(RY)
    return row, row < rows, kd.i64(read_row(row, rows)) * x_stride, kd.i64(row) * width


@kd.func
def vec_of(t, L):
    """A vector of the L scalars in tuple t (t[0] itself when L == 1)."""
    if L == 1:
        v = t[0]
    elif L == 2:
        v = kd.make_vec(t[0], t[1])
    elif L == 4:
        v = kd.make_vec(t[0], t[1], t[2], t[3])
    else:
        v = kd.make_vec(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7])
    return v


@kd.func
def lanes_of(v, L):
    """The L lanes of a chunk as a tuple of scalars (the value itself when L == 1)."""
    if L == 1:
        t = (v,)
    else:
        t = ()
        for k in kd.unroll(L):
            t = t + (v[k],)
    return t


@kd.func
def sum_sq(v, L):
    """Σ v² over a chunk's lanes, as a chain of fmas (one rounding and one instruction a lane)."""
    t = lanes_of(v, L)
    s = t[0] * t[0]
    for k in kd.unroll(1, L):
        s = kd.fma(t[k], t[k], s)
    return s


@kd.func
def chunks_total(vals, RMS, CH, L):
    """What a unit adds to its row's reduction: Σ x² (RMS) or Σ x over its CH chunks."""
    acc = kd.f32(0)
    for c in kd.unroll(CH):
        if RMS:
            acc += sum_sq(vals[c], L)
        else:
            acc += lanes_sum(vals[c], L)
    return acc


@kd.func
def sum_sq_dev(v, mean, L):
    """Σ (v - mean)² over a chunk's lanes, with fmas."""
    t = lanes_of(v, L)
    d = t[0] - mean
    s = d * d
    for k in kd.unroll(1, L):
        d = t[k] - mean
        s = kd.fma(d, d, s)
    return s


LOG2E = 1.4426950408889634


@kd.func
def exp_minus(v, m, FAST, L):
    """exp(v - m) for softmax (m the row max, so v - m <= 0, or NaN). FAST: exp_nonpos
    (the cpu runtime). Elsewhere exp2((v - m)*log2(e)): a GPU's exp2 is one special-function
    instruction where kd.exp costs about ten more, and the product adds a relative error
    of at most |v - m|*2**-24 to a result of exp(v - m) (only large for results far below
    the row's sum). exp(-inf) is still 0 and NaN stays NaN."""
    if FAST:
        e = exp_nonpos(v - m, FAST, L)
    else:
        e = kd.exp2((v - m) * LOG2E)
    return e


# exp(r) on [-ln2/2, ln2/2]: degree-6 least-squares fit of the relative error (~1 ulp in f32)
_EXP_POLY = (1.0, 1.0, 0.49999991059303284, 0.1666642129421234, 0.0416683591902256,
             0.008374771103262901, 0.0013829420786350965)


@kd.func
def exp_nonpos(d, FAST, L):
    """exp(d) for d <= 0 or NaN (softmax's x - max): exp(-inf) = 0 exactly, NaN stays NaN.

    FAST (scalar chunks only) is a short form for the CPU runtime, where the general
    kd.exp costs more than the memory traffic: n = round(d/ln2) by the 1.5*2**23 trick
    (whose float bits also hold n), Cody-Waite reduction, a degree-6 polynomial, and
    2**n put into the exponent bits; results below 2**-126 flush to 0. Elsewhere kd.exp."""
    if FAST and L == 1:
        dc = kd.select(d < -88.0, -88.0, d)
        big = dc * 1.4426950408889634 + 12582912.0
        n = big - 12582912.0
        r = kd.fma(n, -0.693359375, dc)
        r = kd.fma(n, 2.12194440e-4, r)
        p = kd.f32(_EXP_POLY[6])
        for k in kd.unroll(5, -1, -1):
            p = kd.fma(p, r, _EXP_POLY[k])
        # the bits of big are 0x4B400000 + n; n >= -127 here, so (n + 127) << 23 cannot overflow
        # (a NaN d makes p NaN, and NaN times any scale is NaN)
        scale = kd.bitcast((kd.bitcast(big, kd.i32) - (0x4B400000 - 127)) << 23, kd.f32)
        e = p * scale
    else:
        e = kd.exp(d)
    return e
