"""The online softmax of the MLA kernels (mla_mma.py, mla_group.py) on accumulator fragments:
logits in log2 units, a running (max, sum) per row slot of the fragment layout, the max
moved lazily (only when a row's grows by more than TAU, so P <= 2^TAU between rescales),
P = exp2(S - m) in place."""
from __future__ import annotations

import kerneldsl as kd

from ..attention.flash_regs import row_combine
from .decode_kernel import rescale
from .decode_mma import TAU


@kd.func
def fresh_state(ref):
    """(max, sum) per row slot of fragment ref's layout before any token: (-inf, 0)."""
    m = ()
    l = ()
    for sl in kd.unroll(kd.fragment_row_slots(ref)):
        m = m + (-kd.inf,)
        l = l + (kd.f32(0),)
    return m, l


@kd.func
def lazy_max(frags, ref, m, l):
    """The new running (max, sum) and the factor of the old sums and outputs, per row slot,
    after the scores in `frags` (a tuple of fragments laid out as ref): the row maxima over
    the lanes holding each row; only if some row's grows by more than TAU on this plane
    (`moved`, returned first) the max moves (factor 1 otherwise)."""
    NS = kd.fragment_row_slots(ref)
    NE = kd.fragment_len(ref)
    grow = False
    mts = ()
    for sl in kd.unroll(NS):
        mx = -kd.inf
        for t in kd.unroll(len(frags)):
            for e in kd.unroll(NE):
                if kd.fragment_row_slot(ref, e) == sl:
                    mx = kd.max(mx, kd.fragment_get(frags[t], e))
        mx = row_combine(mx, ref, True)
        mts = mts + (mx,)
        grow = grow | (mx > m[sl] + TAU)
    moved = kd.plane_any(grow)
    m2 = ()
    l2 = ()
    alpha = ()
    for sl in kd.unroll(NS):
        mn = kd.select(moved, kd.max(m[sl], mts[sl]), m[sl])
        a = kd.select(moved, rescale(m[sl], mn), kd.f32(1))
        alpha = alpha + (a,)
        m2 = m2 + (mn,)
        l2 = l2 + (l[sl] * a,)
    return moved, alpha, m2, l2


@kd.func
def scale_rows(frags, alpha):
    """Every element of the fragments in `frags` times its row slot's factor."""
    for t in kd.unroll(len(frags)):
        for e in kd.unroll(kd.fragment_len(frags[t])):
            kd.fragment_set(frags[t], e, kd.fragment_get(frags[t], e) * alpha[kd.fragment_row_slot(frags[t], e)])


@kd.func
def exp_rows(frags, ref, m, l):
    """P = exp2(S - m) in place in the fragments of `frags` (laid out as ref; a row with no
    visible token yet, m = -inf, gives P = 0); returns the sums l plus this lane's part of
    each row's P."""
    NE = kd.fragment_len(ref)
    l2 = ()
    for sl in kd.unroll(kd.fragment_row_slots(ref)):
        mu = kd.select(m[sl] == -kd.inf, kd.f32(0), m[sl])
        tot = l[sl]
        for t in kd.unroll(len(frags)):
            for e in kd.unroll(NE):
                if kd.fragment_row_slot(ref, e) == sl:
                    p = kd.exp2_fast(kd.fragment_get(frags[t], e) - mu)
                    kd.fragment_set(frags[t], e, p)
                    tot = tot + p
        l2 = l2 + (tot,)
    return l2


@kd.func
def row_sums(l, ref):
    """The running sums over the lanes holding each row."""
    lt = ()
    for sl in kd.unroll(kd.fragment_row_slots(ref)):
        lt = lt + (row_combine(l[sl], ref, False),)
    return lt


@kd.func
def store_group_output(o, sacc, m, l, out, work, r, h0, sp, g, DVG, H, R, SPLIT):
    """Consumer group g's columns (g·DVG ..) of query r's output from its accumulator o (heads
    h0 ..): normalised into out[r, h, d], or with SPLIT unnormalised into work[r, h, sp, d] and
    the rows' (max, sum) once (group 0) into work[r, h, sp, R : R + 2]; sacc is the score tile
    whose row slots m and l follow. A lane's elements at columns d, d + 1 of one row (d even)
    leave as one 2-lane store where the row's start is even (R even: out's rows are R, the
    workspace's R + 2 elements apart; both are allocated whole): a warp then fills every 32-byte
    sector it writes (the MLA epilogue's element stores were ~15 % of its samples on the H200)."""
    lt = row_sums(l, sacc)
    L = kd.fragment_len(o)
    for q in kd.unroll(0, L, 2):
        done = False
        if R % 2 == 0 and q + 1 < L and kd.fragment_row_slot(o, q) == kd.fragment_row_slot(o, q + 1):
            h = h0 + kd.fragment_row(o, q)
            c = kd.fragment_col(o, q)
            d = g * DVG + c
            if kd.fragment_col(o, q + 1) == c + 1 and c % 2 == 0 and (h < H) & (d + 1 < R):
                x0 = kd.fragment_get(o, q)
                x1 = kd.fragment_get(o, q + 1)
                if SPLIT:
                    at = (kd.i64(r) * work.stride(0) + kd.i64(h) * work.stride(1) + kd.i64(sp) * work.stride(2)
                          + kd.i64(d) * work.stride(3))
                    kd.store_vec(work, at, kd.make_vec(x0, x1))
                else:
                    tot = lt[kd.fragment_row_slot(o, q)]
                    y0 = kd.select(tot > 0.0, x0 / tot, kd.f32(0))
                    y1 = kd.select(tot > 0.0, x1 / tot, kd.f32(0))
                    at = kd.i64(r) * out.stride(0) + kd.i64(h) * out.stride(1) + kd.i64(d) * out.stride(2)
                    kd.store_vec(out, at, kd.cast(kd.make_vec(y0, y1), out.dtype))
                done = True
        for i in kd.unroll(q, q + 2):
            if i < L:
                h = h0 + kd.fragment_row(o, i)
                d = g * DVG + kd.fragment_col(o, i)
                x = kd.fragment_get(o, i)
                if (h < H) & (d < R) and not done:
                    if SPLIT:
                        work[r, h, sp, d] = x
                    else:
                        tot = lt[kd.fragment_row_slot(o, i)]
                        out[r, h, d] = kd.select(tot > 0.0, x / tot, kd.f32(0))
    if SPLIT:
        for e in kd.unroll(kd.fragment_len(sacc)):
            h = h0 + kd.fragment_row(sacc, e)
            if (h < H) & (g == 0) & (kd.fragment_col(sacc, e) == 0):
                work[r, h, sp, R] = m[kd.fragment_row_slot(sacc, e)]
                work[r, h, sp, R + 1] = lt[kd.fragment_row_slot(sacc, e)]
