"""Routing kernels: one cube per token row, and (further down) one plane per token row
for rows that fit a plane's registers.

In the cube kernels top-k is iterative: each round the cube takes the maximum of an
order key that packs (score, lower id first) into one i64, over the candidates strictly
below the previous round's key, so no "taken" marks are needed and no expert comes twice.
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


# ---------------------------------------------------------------------- one plane per token
# Lane l of a plane holds experts SLOTS*l ... SLOTS*l + SLOTS - 1 of its token in registers
# (an 8-lane vector), so E <= SLOTS * PLANE_DIM. Scores become u32 keys that order like the
# f32 (0: no candidate). A top-k round is one plane_max of each lane's best key and one
# ballot: among lanes holding the maximum, the lowest lane has the lowest ids, and inside a
# lane the lowest slot is taken, so ties go to the lower id. Lane j keeps pick j (top_k <=
# PLANE_DIM), so the results leave as one contiguous store. No shared memory, no barriers:
# several tokens (planes) share a cube, and plane-divergent branches hold no plane ops.
SLOTS = 8


@kd.func
def ordered_bits(v):
    """A u32 that orders like the f32 v (not NaN), -0 folded into +0; every value is > 0."""
    b = kd.bitcast(v + 0.0, kd.u32)
    return kd.select(b >= 0x80000000, ~b, b | 0x80000000)


@kd.func
def ordered_value(key):
    """The f32 that ordered_bits turned into key."""
    return kd.bitcast(kd.select(key >= 0x80000000, key & 0x7FFFFFFF, ~key), kd.f32)


@kd.func
def slot_or_ninf(x, base, e, n):
    """x[base + e] in f32 when e < n, else -inf (the load stays in bounds)."""
    return kd.select(e < n, kd.f32(x[base + kd.min(e, n - 1)]), -kd.inf)


@kd.func
def load_slots(x, base, first, n):
    """f32 vector of x[base + first + i], i < SLOTS; -inf past n. x's last axis has stride 1."""
    v = kd.splat(-kd.inf, SLOTS)
    if first + SLOTS <= n:
        w = kd.load_vec(x, base + first, SLOTS)
        v = kd.make_vec(kd.f32(w[0]), kd.f32(w[1]), kd.f32(w[2]), kd.f32(w[3]), kd.f32(w[4]), kd.f32(w[5]),
                        kd.f32(w[6]), kd.f32(w[7]))
    elif first < n:
        v = kd.make_vec(slot_or_ninf(x, base, first, n), slot_or_ninf(x, base, first + 1, n),
                        slot_or_ninf(x, base, first + 2, n), slot_or_ninf(x, base, first + 3, n),
                        slot_or_ninf(x, base, first + 4, n), slot_or_ninf(x, base, first + 5, n),
                        slot_or_ninf(x, base, first + 6, n), slot_or_ninf(x, base, first + 7, n))
    return v


@kd.func
def key_or_none(v, ok):
    return kd.select(ok, ordered_bits(v), kd.u32(0))


@kd.func
def unless_taken(key, i, slot, hit):
    return kd.select(hit and slot == i, kd.u32(0), key)


@kd.func
def clear_slot(keys, slot, hit):
    """keys with lane `slot` set to 0 where hit."""
    return kd.make_vec(unless_taken(keys[0], 0, slot, hit), unless_taken(keys[1], 1, slot, hit),
                       unless_taken(keys[2], 2, slot, hit), unless_taken(keys[3], 3, slot, hit),
                       unless_taken(keys[4], 4, slot, hit), unless_taken(keys[5], 5, slot, hit),
                       unless_taken(keys[6], 6, slot, hit), unless_taken(keys[7], 7, slot, hit))


@kd.func
def best_slot(keys, best):
    """The lowest slot whose key is best."""
    slot = SLOTS - 1
    for i in kd.unroll(SLOTS - 2, -1, -1):
        slot = kd.select(keys[i] == best, i, slot)
    return slot


@kd.func
def lowest_lane_is_me(mask):
    """True on the lowest lane whose bit is set in the (non-zero) ballot mask."""
    low = mask & (~mask + 1)
    return low == (kd.u32(1) << kd.u32(kd.lane_pos()))


@kd.func
def write_choice(ids, weights, row, lane, bad, expert, w):
    """Lane j's pick (the j-th choice of the token): its expert id and weight, or for a
    row with a NaN logit ids 0..k-1 and NaN weights."""
    if bad:
        ids[row, lane] = lane
        weights[row, lane] = kd.nan
    else:
        ids[row, lane] = expert
        weights[row, lane] = w


@kd.func
def take_best(keys, first):
    """One top-k round over the plane: the largest key anywhere (ties: the lowest lane, whose
    experts have the lowest ids, then the lowest slot) is taken out of `keys`. Returns the
    keys left, its expert id and its key (both plane-uniform)."""
    best = kd.max(kd.max(kd.max(keys[0], keys[1]), kd.max(keys[2], keys[3])),
                  kd.max(kd.max(keys[4], keys[5]), kd.max(keys[6], keys[7])))
    top = kd.plane_max(best)
    win = lowest_lane_is_me(kd.plane_ballot(best == top))
    slot = best_slot(keys, best)
    pick = kd.plane_max(kd.select(win, kd.u32(first + slot), kd.u32(0)))
    return clear_slot(keys, slot, win), pick, top


@kd.kernel
def softmax_topk_plane(logits: kd.Tensor, ids: kd.Tensor[kd.u32, 2], weights: kd.Tensor,
                       RENORMALIZE: kd.Const[bool]):
    """Softmax top-k, one token per plane (E <= SLOTS * PLANE_DIM, top_k <= PLANE_DIM, the
    last axis of logits contiguous); see the section comment."""
    T = logits.shape[0]
    E = logits.shape[1]
    k = ids.shape[1]
    token = kd.cube_pos_x() * kd.plane_count() + kd.plane_pos()
    row = kd.min(token, T - 1)           # spare planes of the last cube redo a row and store nothing
    lane = kd.lane_pos()
    first = lane * SLOTS
    x = load_slots(logits, kd.i64(row) * logits.stride(0), first, E)
    mx = -kd.inf
    nan = 0
    for i in kd.unroll(SLOTS):
        nan = kd.select(kd.isnan(x[i]), 1, nan)
        mx = kd.max(mx, x[i])
    row_max = kd.plane_max(mx)
    bad = kd.plane_max(nan) > 0 or row_max == kd.inf or row_max == -kd.inf
    s = kd.f32(0)
    for i in kd.unroll(SLOTS):
        s += kd.exp(x[i] - row_max)
    denom = kd.plane_sum(s)
    keys = kd.make_vec(key_or_none(kd.exp(x[0] - row_max) / denom, first < E),
                       key_or_none(kd.exp(x[1] - row_max) / denom, first + 1 < E),
                       key_or_none(kd.exp(x[2] - row_max) / denom, first + 2 < E),
                       key_or_none(kd.exp(x[3] - row_max) / denom, first + 3 < E),
                       key_or_none(kd.exp(x[4] - row_max) / denom, first + 4 < E),
                       key_or_none(kd.exp(x[5] - row_max) / denom, first + 5 < E),
                       key_or_none(kd.exp(x[6] - row_max) / denom, first + 6 < E),
                       key_or_none(kd.exp(x[7] - row_max) / denom, first + 7 < E))
    mine_id = kd.u32(0)
    mine_key = kd.u32(0)
    for j in range(k):
        keys, pick, top = take_best(keys, first)
        mine_id = kd.select(lane == j, pick, mine_id)
        mine_key = kd.select(lane == j, top, mine_key)
    p = ordered_value(mine_key)
    total = kd.plane_sum(kd.select(lane < k, p, 0.0))
    if token < T and lane < k:
        w = p
        if RENORMALIZE:
            w = p / total
        write_choice(ids, weights, row, lane, bad, mine_id, w)


@kd.kernel
def sigmoid_grouped_plane(logits: kd.Tensor, bias: kd.Tensor[kd.f32, 1], ids: kd.Tensor[kd.u32, 2],
                          weights: kd.Tensor, G: kd.i32, SG: kd.i32, scale: kd.f32, HAS_BIAS: kd.Const[bool],
                          TOP_TWO: kd.Const[bool], RENORMALIZE: kd.Const[bool], LOG_LPG: kd.Const[int]):
    """Grouped sigmoid routing, one token per plane: each group spans LPG = 2**LOG_LPG
    lanes, so E = G * LPG * SLOTS <= SLOTS * PLANE_DIM; top_k <= PLANE_DIM; bias and the
    last axis of logits contiguous. Group scores merge across a group's lanes by xor
    shuffles; each lane ranks its group against every group's score."""
    T = logits.shape[0]
    E = logits.shape[1]
    k = ids.shape[1]
    token = kd.cube_pos_x() * kd.plane_count() + kd.plane_pos()
    row = kd.min(token, T - 1)
    lane = kd.lane_pos()
    first = lane * SLOTS
    base = kd.i64(row) * logits.stride(0)
    x = load_slots(logits, base, first, E)
    p = kd.make_vec(sigmoid_stable(x[0]), sigmoid_stable(x[1]), sigmoid_stable(x[2]), sigmoid_stable(x[3]),
                    sigmoid_stable(x[4]), sigmoid_stable(x[5]), sigmoid_stable(x[6]), sigmoid_stable(x[7]))
    c = p
    if HAS_BIAS:
        c = p + load_slots(bias, 0, first, E)
    nan = 0
    b1 = -kd.inf
    b2 = -kd.inf
    for i in kd.unroll(SLOTS):
        nan = kd.select(kd.isnan(c[i]), 1, nan)
        b2 = kd.max(b2, kd.min(b1, c[i]))
        b1 = kd.max(b1, c[i])
    bad = kd.plane_max(nan) > 0
    LPG = 1 << LOG_LPG
    for s in kd.unroll(LOG_LPG):         # merge the best (two) of the group's lanes
        o1 = kd.plane_shuffle_xor(b1, 1 << s)
        if TOP_TWO:
            o2 = kd.plane_shuffle_xor(b2, 1 << s)
            b2 = kd.max(kd.min(b1, o1), kd.max(b2, o2))
        b1 = kd.max(b1, o1)
    sc = b1
    if TOP_TWO:
        sc = b1 + b2
    sc = kd.select(kd.isnan(sc), -kd.inf, sc)
    g = lane // LPG
    rank = 0
    for o in range(G):                   # groups that beat mine (ties: the lower group id wins)
        other = kd.plane_shuffle(sc, o * LPG)
        rank += kd.select(other > sc or (other == sc and o < g), 1, 0)
    ok = rank < SG and first < E
    keys = kd.make_vec(key_or_none(c[0], ok), key_or_none(c[1], ok), key_or_none(c[2], ok), key_or_none(c[3], ok),
                       key_or_none(c[4], ok), key_or_none(c[5], ok), key_or_none(c[6], ok), key_or_none(c[7], ok))
    mine_id = kd.u32(0)
    for j in range(k):
        keys, pick, top = take_best(keys, first)
        mine_id = kd.select(lane == j, pick, mine_id)
    w = sigmoid_stable(kd.f32(logits[base + kd.min(kd.i32(mine_id), E - 1)]))
    total = kd.plane_sum(kd.select(lane < k, w, 0.0))
    if token < T and lane < k:
        if RENORMALIZE:
            w = w / total
        write_choice(ids, weights, row, lane, bad, mine_id, w * scale)
