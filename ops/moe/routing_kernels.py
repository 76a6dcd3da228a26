"""Routing kernels: one cube per token row.

Top-k is iterative: each round the cube takes the maximum of an order key that
packs (score, lower id first) into one i64, over the candidates strictly below the
previous round's key, so no "taken" marks are needed and no expert comes twice.
Rows holding a NaN (softmax: also +inf, or only -inf) get ids 0, 1, 2, ... and NaN
weights.
"""
from __future__ import annotations

import kerneldsl as kd

ID_SPAN = 2147483648          # 2**31: low bits of a key hold (ID_SPAN - 1 - id)
NO_KEY = -1                   # below every real key
TOP_KEY = 9223372036854775807  # above every real key


@kd.func
def order_key(v, idx):
    """An i64 that orders by v (f32, not NaN), then by lower idx."""
    b = kd.bitcast(v + 0.0, kd.u32)                       # + 0.0 folds -0 into +0
    ordered = kd.select(b >= 0x80000000, ~b, b | 0x80000000)
    return kd.i64(ordered) * ID_SPAN + (ID_SPAN - 1 - kd.i64(idx))


@kd.func
def key_id(key):
    return kd.i32(ID_SPAN - 1 - key % ID_SPAN)


@kd.func
def key_value(key):
    """The f32 a key was made from."""
    ordered = kd.u32(key // ID_SPAN)
    b = kd.select(ordered >= 0x80000000, ordered & 0x7FFFFFFF, ~ordered)
    return kd.bitcast(b, kd.f32)


@kd.func
def cube_max(v, part, slot):
    """Maximum of v over the cube (every unit gets it); part holds 2 x plane_count values
    of v's type and `slot` alternates between 0 and plane_count() on successive calls."""
    m = kd.plane_max(v)
    if kd.lane_pos() == 0:
        part[slot + kd.plane_pos()] = m
    kd.sync_cube()
    best = part[slot]
    for p in range(1, kd.plane_count()):
        best = kd.max(best, part[slot + p])
    return best


@kd.func
def cube_sum(v, part):
    """Sum of an f32 over the cube (every unit gets it); part holds plane_count() f32."""
    s = kd.plane_sum(v)
    if kd.lane_pos() == 0:
        part[kd.plane_pos()] = s
    kd.sync_cube()
    total = kd.f32(0)
    for p in range(kd.plane_count()):
        total += part[p]
    kd.sync_cube()
    return total


@kd.func
def sigmoid_stable(x):
    e = kd.exp(-kd.abs(x))
    return kd.select(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


@kd.kernel
def softmax_topk(logits: kd.Tensor, ids: kd.Tensor[kd.u32, 2], weights: kd.Tensor, probs: kd.Tensor[kd.f32, 2],
                 RENORMALIZE: kd.Const[bool], ONE: kd.Const[bool]):
    """ids/weights[row, :top_k] of the softmax over logits[row, :]. probs is f32 scratch
    [T, top_k] for the selected probabilities. ONE: every expert fits one unit."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    U = kd.cube_units()
    E = logits.shape[1]
    k = ids.shape[1]
    fpart = kd.shared(kd.f32, 2 * kd.plane_count())
    ipart = kd.shared(kd.i32, 2 * kd.plane_count())
    kpart = kd.shared(kd.i64, 2 * kd.plane_count())
    spart = kd.shared(kd.f32, kd.plane_count())
    # pass 1: the row maximum over non-NaN entries, and whether a NaN is present
    mx = -kd.inf
    nan = 0
    mine = -kd.inf
    if ONE:
        v = kd.f32(logits[row, kd.min(t, E - 1)])
        if t < E:
            mine = v
            if kd.isnan(v):
                nan = 1
            else:
                mx = v
    else:
        for e0 in range(0, E, U):
            e = e0 + t
            if e < E:
                v = kd.f32(logits[row, e])
                if kd.isnan(v):
                    nan = 1
                else:
                    mx = kd.max(mx, v)
    row_max = cube_max(mx, fpart, 0)      # fresh names: the reduced values are uniform
    any_nan = cube_max(nan, ipart, 0)
    if any_nan > 0 or row_max == kd.inf or row_max == -kd.inf:
        for j0 in range(0, k, U):
            j = j0 + t
            if j < k:
                ids[row, j] = j
                weights[row, j] = kd.nan
    else:
        # pass 2: the softmax denominator
        s = kd.f32(0)
        p_mine = kd.f32(0)
        if ONE:
            if t < E:
                p_mine = kd.exp(mine - row_max)
                s = p_mine
        else:
            for e0 in range(0, E, U):
                e = e0 + t
                if e < E:
                    s += kd.exp(kd.f32(logits[row, e]) - row_max)
        denom = cube_sum(s, spart)
        # top-k rounds
        prev = kd.i64(TOP_KEY)
        chosen = kd.f32(0)
        for j in range(k):
            cand = kd.i64(NO_KEY)
            if ONE:
                if t < E:
                    key = order_key(p_mine / denom, t)
                    if key < prev:
                        cand = key
            else:
                for e0 in range(0, E, U):
                    e = e0 + t
                    if e < E:
                        key = order_key(kd.exp(kd.f32(logits[row, e]) - row_max) / denom, e)
                        if key < prev:
                            cand = kd.max(cand, key)
            prev = cube_max(cand, kpart, j % 2 * kd.plane_count())
            p = key_value(prev)
            chosen += p
            if t == 0:
                ids[row, j] = key_id(prev)
                probs[row, j] = p
        kd.sync_cube()                     # probs of this row are visible to every unit
        for j0 in range(0, k, U):
            j = j0 + t
            if j < k:
                if RENORMALIZE:
                    weights[row, j] = probs[row, j] / chosen
                else:
                    weights[row, j] = probs[row, j]


@kd.kernel
def sigmoid_grouped_topk(logits: kd.Tensor, bias: kd.Tensor[kd.f32, 1], ids: kd.Tensor[kd.u32, 2],
                         weights: kd.Tensor, G: kd.i32, SG: kd.i32, scale: kd.f32, HAS_BIAS: kd.Const[bool],
                         TOP_TWO: kd.Const[bool], RENORMALIZE: kd.Const[bool], KMAX: kd.Const[int]):
    """DeepSeek-V3 routing of logits[row, :] (E <= cube units): p = sigmoid, c = p + bias
    chooses, p weighs. G groups, the SG best kept, then ids.shape[1] experts."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    E = logits.shape[1]
    k = ids.shape[1]
    S = E // G
    c_all = kd.shared(kd.f32, kd.cube_units())
    score = kd.shared(kd.f32, 128)
    picked = kd.shared(kd.i32, 128)
    sel_p = kd.shared(kd.f32, KMAX)
    ipart = kd.shared(kd.i32, 2 * kd.plane_count())
    kpart = kd.shared(kd.i64, 2 * kd.plane_count())
    live = t < E
    tc = kd.min(t, E - 1)
    p = sigmoid_stable(kd.f32(logits[row, tc]))
    c = p
    if HAS_BIAS:
        c = p + bias[tc]
    nan = 0
    if live and kd.isnan(c):
        nan = 1
    c_all[t] = c
    any_nan = cube_max(nan, ipart, 0)      # its barrier also publishes c_all
    if any_nan > 0:
        if t < k:
            ids[row, t] = t
            weights[row, t] = kd.nan
    else:
        if t < G:                          # group scores
            b1 = -kd.inf
            b2 = -kd.inf
            for i in range(S):
                v = c_all[t * S + i]
                if v > b1:
                    b2 = b1
                    b1 = v
                elif v > b2:
                    b2 = v
            sc = b1
            if TOP_TWO:
                sc = b1 + b2
            if kd.isnan(sc):
                sc = -kd.inf
            score[t] = sc
        kd.sync_cube()
        if t < G:                          # a group is kept when fewer than SG groups beat it
            mine = score[t]
            rank = 0
            for g in range(G):
                other = score[g]
                if other > mine or (other == mine and g < t):
                    rank += 1
            picked[t] = kd.select(rank < SG, 1, 0)
        kd.sync_cube()
        key = kd.i64(NO_KEY)
        if live and picked[t // S] != 0:
            key = order_key(c, t)
        prev = kd.i64(TOP_KEY)
        for j in range(k):
            cand = kd.select(key < prev, key, kd.i64(NO_KEY))
            prev = cube_max(cand, kpart, j % 2 * kd.plane_count())
            if t == key_id(prev):
                sel_p[j] = p
                ids[row, j] = t
        kd.sync_cube()
        if t < k:
            total = kd.f32(0)
            if RENORMALIZE:
                for j in range(k):
                    total += sel_p[j]
            w = sel_p[t] * scale
            if RENORMALIZE:
                w = sel_p[t] / total * scale
            weights[row, t] = w
