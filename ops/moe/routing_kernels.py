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
                 RENORMALIZE: kd.Const[bool], CACHE: kd.Const[int]):
    """ids/weights[row, :top_k] of the softmax over logits[row, :]; unit t handles experts
    t, t + U, ... probs is f32 scratch [T, top_k] for the selected probabilities. CACHE > 0:
    exp(x - max) of the row is kept in shared memory (E <= CACHE) instead of recomputed."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    U = kd.cube_units()
    E = logits.shape[1]
    k = ids.shape[1]
    fpart = kd.shared(kd.f32, 2 * kd.plane_count())
    ipart = kd.shared(kd.i32, 2 * kd.plane_count())
    kpart = kd.shared(kd.i64, 2 * kd.plane_count())
    spart = kd.shared(kd.f32, kd.plane_count())
    cache = kd.shared(kd.f32, kd.max(CACHE, 1))
    keys = kd.shared(kd.i64, kd.max(CACHE, 1))
    # pass 1: the row maximum over non-NaN entries, and whether a NaN is present
    mx = -kd.inf
    nan = 0
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
        for e0 in range(0, E, U):
            e = e0 + t
            if e < E:
                v = kd.exp(kd.f32(logits[row, e]) - row_max)
                s += v
                if CACHE > 0:
                    cache[e] = v
        denom = cube_sum(s, spart)            # its barriers also publish the cache
        if CACHE > 0:
            for e0 in range(0, E, U):
                e = e0 + t
                if e < E:
                    keys[e] = order_key(cache[e] / denom, e)
            kd.sync_cube()
        # top-k rounds: the best key strictly below the previous round's
        prev = kd.i64(TOP_KEY)
        chosen = kd.f32(0)
        for j in range(k):
            cand = kd.i64(NO_KEY)
            for e0 in range(0, E, U):
                e = e0 + t
                if e < E:
                    key = kd.i64(0)
                    if CACHE > 0:
                        key = keys[e]
                    else:
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
                         TOP_TWO: kd.Const[bool], RENORMALIZE: kd.Const[bool], EMAX: kd.Const[int]):
    """DeepSeek-V3 routing of logits[row, :] (E <= EMAX <= 1024, G <= 128, top_k <= 64): p = sigmoid,
    c = p + bias chooses, p weighs. G groups, the SG best kept, then ids.shape[1] experts.
    Unit t handles experts t, t + U, ... and groups t, t + U, ..."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    U = kd.cube_units()
    E = logits.shape[1]
    k = ids.shape[1]
    S = E // G
    p_all = kd.shared(kd.f32, EMAX)       # EMAX >= E (a power of two): small rows keep occupancy high
    c_all = kd.shared(kd.f32, EMAX)
    keys = kd.shared(kd.i64, EMAX)
    score = kd.shared(kd.f32, 128)
    picked = kd.shared(kd.i32, 128)
    sel_p = kd.shared(kd.f32, 64)
    ipart = kd.shared(kd.i32, 2 * kd.plane_count())
    kpart = kd.shared(kd.i64, 2 * kd.plane_count())
    nan = 0
    for e0 in range(0, E, U):
        e = e0 + t
        if e < E:
            p = sigmoid_stable(kd.f32(logits[row, e]))
            c = p
            if HAS_BIAS:
                c = p + bias[e]
            if kd.isnan(c):
                nan = 1
            p_all[e] = p
            c_all[e] = c
    any_nan = cube_max(nan, ipart, 0)      # its barrier also publishes p_all and c_all
    if any_nan > 0:
        for j0 in range(0, k, U):
            j = j0 + t
            if j < k:
                ids[row, j] = j
                weights[row, j] = kd.nan
    else:
        for g0 in range(0, G, U):          # group scores: the best c, or the two best summed
            g = g0 + t
            if g < G:
                b1 = -kd.inf
                b2 = -kd.inf
                for i in range(S):
                    v = c_all[g * S + i]
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
                score[g] = sc
        kd.sync_cube()
        for g0 in range(0, G, U):          # a group is kept when fewer than SG groups beat it
            g = g0 + t
            if g < G:
                mine = score[g]
                rank = 0
                for o in range(G):
                    other = score[o]
                    if other > mine or (other == mine and o < g):
                        rank += 1
                picked[g] = kd.select(rank < SG, 1, 0)
        kd.sync_cube()
        for e0 in range(0, E, U):          # the order keys of the candidates (experts of kept groups)
            e = e0 + t
            if e < E:
                key = kd.i64(NO_KEY)
                if picked[e // S] != 0:
                    key = order_key(c_all[e], e)
                keys[e] = key
        kd.sync_cube()
        prev = kd.i64(TOP_KEY)
        for j in range(k):
            cand = kd.i64(NO_KEY)
            for e0 in range(0, E, U):
                e = e0 + t
                if e < E:
                    key = keys[e]
                    if key < prev:
                        cand = kd.max(cand, key)
            prev = cube_max(cand, kpart, j % 2 * kd.plane_count())
            if t == 0:
                pick = key_id(prev)
                sel_p[j] = p_all[pick]
                ids[row, j] = pick
        kd.sync_cube()
        for j0 in range(0, k, U):
            j = j0 + t
            if j < k:
                total = kd.f32(0)
                if RENORMALIZE:
                    for i in range(k):
                        total += sel_p[i]
                w = sel_p[j] * scale
                if RENORMALIZE:
                    w = sel_p[j] / total * scale
                weights[row, j] = w
