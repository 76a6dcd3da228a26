"""The online-softmax steps shared by the group-product attention kernels (flash_group.py and
flash_roles.py) on a score tile `s` held in a group accumulator, row slot by row slot: the
tile's row maxima with the lazy-rescale test, and P = exp2(logit − max) in place with the row
sums, and the normalised output. `sc` is the scale folded into the exponent (1 where the logits
are already scaled)."""
from __future__ import annotations

import kerneldsl as kd

from .flash_regs import TAU, query_row, row_combine, tree_fold


@kd.func
def tile_maxima(s, m, sc):
    """(per row slot: the tile's row maximum times sc, whether any row of the plane grew past its
    running max m by more than TAU — the running max moves only then)."""
    NS = kd.fragment_row_slots(s)
    NE = kd.fragment_len(s)
    mts = ()
    for sl in kd.unroll(NS):
        xs = ()
        for i in kd.unroll(NE):
            if kd.fragment_row_slot(s, i) == sl:
                xs = xs + (kd.fragment_get(s, i),)
        mts = mts + (row_combine(tree_fold(xs, True), s, True) * sc,)
    grow = mts[0] > m[0] + TAU
    for sl in kd.unroll(1, NS):
        grow = grow | (mts[sl] > m[sl] + TAU)
    return mts, kd.plane_any(grow)


@kd.func
def exp_in_place(s, m, l, sc):
    """s = exp2(s·sc − m) per row slot (m = −inf: nothing visible yet, taken as 0); returns the
    running sums l plus this lane's part of each row's sum."""
    NS = kd.fragment_row_slots(s)
    NE = kd.fragment_len(s)
    l2 = ()
    for sl in kd.unroll(NS):
        mu = kd.select(m[sl] == -kd.inf, kd.f32(0), m[sl])
        ps = ()
        for i in kd.unroll(NE):
            if kd.fragment_row_slot(s, i) == sl:
                p = kd.exp2_fast(kd.fma(kd.fragment_get(s, i), sc, -mu))
                kd.fragment_set(s, i, p)
                ps = ps + (p,)
        l2 = l2 + (l[sl] + tree_fold(ps, False),)
    return l2


@kd.func
def store_normalised(out, o, s, l, b, rfirst, rows, Sq, hk, G, causal, off, Skv, DV):
    """out[b, h, i, :DV] = O / l for the group's rows rfirst .. (of the block's [heads x Sq]
    rows; those past `rows` not stored); a row with no visible key (l = 0) gets zeros."""
    inv = ()
    for sl in kd.unroll(kd.fragment_row_slots(s)):
        lr = row_combine(l[sl], s, False)
        inv = inv + (kd.select(lr > 0.0, 1.0 / lr, kd.f32(0)),)
    for i in kd.unroll(kd.fragment_len(o)):
        rg = rfirst + kd.fragment_row(o, i)
        h, iq, lim = query_row(rg, rows, Sq, hk, G, causal, off, Skv)
        c = kd.fragment_col(o, i)
        if (rg < rows) & (c < DV):
            out[b, h, iq, c] = kd.fragment_get(o, i) * inv[kd.fragment_row_slot(o, i)]
