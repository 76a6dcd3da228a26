"""The CTC alpha (forward) and beta (backward) recursions in log space, F32: one cube per
sample and direction stepping through time, the 2S + 1 extended-label states of a step
spread over the cube's units (unit u takes states u, u + B, ...), two planes of states
(the previous step's and this one's) in a buffer, and one cube barrier per step. State s of
a plane lies FRONT slots into it: the front slots stay -inf, so a state's neighbours s - 1
and s - 2 are read as one run of consecutive slots, with no clamp (a clamped index makes the
cpu runtime gather lane by lane).

The buffer is a shared array when two planes fit the device's shared memory
(`ctc_shared`), else a slice of a global F32 workspace (`ctc_global`); the steps are the
same device function over either. Unreachable states hold a true -inf (log-sum-exp with
a -inf guard), so long sequences of tiny probabilities are never taken for impossible
ones. State loops are uniform loops over blocks of B states (unit u takes state s0 + u),
so on the cpu runtime the unit loop runs innermost as a SIMD loop. Every loop runs to a
bound the launch's arguments fix (T steps, the plane's states; a sample's own lengths only
guard the work), so the cpu runtime may run a small launch on the calling thread
(kerneldsl/loop_bounds.py). Cube y = 0 of a launch
runs alpha, y = 1 beta (alpha and beta of one call run side by side).

This cube path serves any target length and is the default (tuning.py says why); plane.py
keeps a short target's states in one plane's registers instead and uses this module's
state rules and output helpers (state_info, fill_outside, store_state)."""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def log_add3(a, b, c, BASE2):
    """log(e^a + e^b + e^c), -inf when all three are -inf: the largest m plus log(1 + e^(x - m)
    + e^(y - m)) of the other two (two exponentials, not three). With BASE2 (a constant) the
    logarithms are base 2, through exp2_fast and log2."""
    hi = kd.max(a, b)
    m = kd.max(hi, c)
    x = kd.min(hi, c)
    y = kd.min(a, b)
    none = m == -kd.inf
    safe = kd.select(none, kd.f32(0.0), m)
    if BASE2:
        s = safe + kd.log2(kd.f32(1.0) + kd.exp2_fast(x - safe) + kd.exp2_fast(y - safe))
    else:
        s = safe + kd.log(kd.f32(1.0) + kd.exp(x - safe) + kd.exp(y - safe))
    return kd.select(none, -kd.inf, s)


@kd.func
def state_label(labels, off, s, blank):
    """The label of extended state s: the blank on even states, target (s - 1) / 2 on odd ones."""
    lab = blank
    if s % 2 == 1:
        lab = labels[off + (s - 1) // 2]
    return lab


@kd.func
def state_info(labels, off, s, sn, L, blank, rev):
    """(label of state s, whether s may take the transition from the state two away: s - 2
    forward, s + 2 in reverse). Only odd (label) states skip, and only between different
    labels: a repeated label needs the blank between. Branch-free, and defined for any
    s >= 0 (label indices are clamped into the sample), so SIMD lanes past L need no mask."""
    last = kd.max(sn - 1, 0)
    odd = s % 2 == 1
    lab = kd.select(odd, labels[off + kd.clamp((s - 1) // 2, 0, last)], blank)
    near = labels[off + kd.clamp(kd.select(rev, (s + 1) // 2, (s - 3) // 2), 0, last)]
    inside = kd.select(rev, s + 2 < L, s >= 2)
    skip = kd.select(odd, kd.select(inside, near != lab, False), False)
    return lab, skip


FRONT = 2  # -inf slots before each plane's first state (tuning.recursion_plan counts them)


@kd.func
def store_state(out_a, out_b, rev, t, n, s, v, STORE):
    """State s of step t is v: into beta (rev) or alpha, if STORE."""
    if STORE:
        if rev:
            out_b[t, n, s] = v
        else:
            out_a[t, n, s] = v


@kd.func
def fill_outside(out, n, tn, L, T, B, u):
    """-inf for every (t, s) of sample n outside t < tn, s < L (the stored alpha or beta), by
    B units of which this is unit u."""
    W = out.shape[2]
    for t in range(T):
        first = kd.select(t < tn, L, 0)
        for s0 in range(0, W, B):
            s = s0 + u
            if s < W and s >= first:
                out[t, n, s] = -kd.inf


@kd.func
def recurse(buf, base, labs, skips, lp, labels, offsets, in_len, tg_len, out_a, out_b, nll, blank, plane, STORE,
            LABELS, B):
    """One cube's recursion over sample cube_pos_x() in the direction of its y (0 alpha, 1 beta;
    see the module docstring): planes of `plane` floats at buf[base], buf[base + plane]. With
    LABELS, each state's label and skip rule are worked out once, into labs and skips (plane
    slots each), instead of every step (two label gathers a step for each block of states past
    the first; where units are SIMD lanes those are gathers lane by lane)."""
    u = kd.unit_pos_x()
    n = kd.cube_pos_x()
    rev = kd.cube_pos_y() == 1
    tn = in_len[n]
    sn = tg_len[n]
    off = offsets[n]
    L = 2 * sn + 1
    T = lp.shape[0]
    if STORE:
        if rev:
            fill_outside(out_b, n, tn, L, T, B, u)
        else:
            fill_outside(out_a, n, tn, L, T, B, u)
    # both planes start at -inf in every slot: the lanes past L (the planes' padding) then
    # compute with defined values instead of reading memory no unit wrote (the interpreter
    # runtime reports such reads); a slot's -inf and its first state come from one unit (unit u
    # clears slot FRONT + s0 + u, wrapping past the second plane's end to the first's front)
    for s0 in range(0, 2 * plane, B):
        j = s0 + u + FRONT
        if j < 2 * plane + FRONT:
            buf[base + kd.select(j >= 2 * plane, j - 2 * plane, j)] = -kd.inf
    if tn > 0:
        t0 = kd.select(rev, tn - 1, 0)
        for s0 in range(0, plane, B):
            s = s0 + u
            if s < L:
                v = -kd.inf
                if (rev and s >= L - 2) or (not rev and s < 2):
                    v = kd.f32(lp[t0, n, state_label(labels, off, s, blank)])
                buf[base + FRONT + s] = v
                store_state(out_a, out_b, rev, t0, n, s, v, STORE)
    kd.sync_cube()
    # a unit's first state (s = u: every state when 2S + 1 <= B) keeps its label and skip rule
    # in registers, and loads its next emission a step ahead (the load's latency overlaps a
    # step). Steps are branch-free: lanes past L compute into the planes' padding (never read
    # by a state below L) and store nothing else.
    lab0, skip0 = state_info(labels, off, u, sn, L, blank, rev)
    if LABELS:  # (unit u writes and later reads slots s0 + u alone: no barrier)
        for s0 in range(B, plane, B):
            s = s0 + u
            lab, skip = state_info(labels, off, s, sn, L, blank, rev)
            labs[s] = lab
            skips[s] = kd.select(skip, 1, 0)
    nxt = kd.f32(0.0)
    if tn > 1:
        nxt = kd.f32(lp[kd.select(rev, tn - 2, 1), n, lab0])
    for i in range(1, T):  # (to T, not the sample's length: the loops' trip counts stay argument-bound)
        if i < tn:
            t = kd.select(rev, tn - 1 - i, i)
            src = base + ((i - 1) % 2) * plane + FRONT
            dst = base + (i % 2) * plane + FRONT
            e0 = nxt
            if i + 1 < tn:
                nxt = kd.f32(lp[kd.select(rev, tn - 2 - i, i + 1), n, lab0])
            for s0 in range(0, plane, B):
                if s0 < L:
                    s = s0 + u
                    lab = lab0
                    skip = skip0
                    e = e0
                    if s0 > 0:
                        if LABELS:
                            lab = labs[s]
                            skip = skips[s] != 0
                        else:
                            lab, skip = state_info(labels, off, s, sn, L, blank, rev)
                        e = kd.f32(lp[t, n, lab])
                    a = buf[src + s]
                    b = -kd.inf
                    c = -kd.inf
                    if rev:
                        b = kd.select(s + 1 < L, buf[src + s + 1], -kd.inf)
                        c = kd.select(skip, buf[src + s + 2], -kd.inf)
                    else:
                        b = buf[src + s - 1]  # (s = 0 reads a front slot: -inf)
                        c = kd.select(skip, buf[src + s - 2], -kd.inf)
                    v = log_add3(a, b, c, False) + e
                    buf[dst + s] = v
                    if s < L:
                        store_state(out_a, out_b, rev, t, n, s, v, STORE)
            kd.sync_cube()
    if not rev and u == 0:
        if tn == 0:
            nll[n] = kd.select(sn == 0, kd.f32(0.0), kd.inf)
        else:
            last = base + ((tn - 1) % 2) * plane + FRONT
            end = buf[last + L - 1]
            before = -kd.inf
            if sn > 0:
                before = buf[last + L - 2]
            nll[n] = -log_add3(end, before, -kd.inf, False)


@kd.kernel
def ctc_shared(lp: kd.Tensor, labels: kd.Tensor[kd.i32, 1], offsets: kd.Tensor[kd.i32, 1],
               in_len: kd.Tensor[kd.i32, 1], tg_len: kd.Tensor[kd.i32, 1], out_a: kd.Tensor[kd.f32, 3],
               out_b: kd.Tensor[kd.f32, 3], nll: kd.Tensor[kd.f32, 1], blank: kd.i32,
               PLANE: kd.Const[int], STORE: kd.Const[bool], LABELS: kd.Const[bool], B: kd.Const[int]):
    """States in shared memory: two planes of PLANE floats (and with LABELS the states' labels
    and skip rules, `recurse`)."""
    buf = kd.shared(kd.f32, 2 * PLANE)
    labs = kd.shared(kd.i32, PLANE if LABELS else 1)
    skips = kd.shared(kd.i32, PLANE if LABELS else 1)
    recurse(buf, 0, labs, skips, lp, labels, offsets, in_len, tg_len, out_a, out_b, nll, blank, PLANE, STORE,
            LABELS, B)


@kd.kernel
def ctc_global(lp: kd.Tensor, labels: kd.Tensor[kd.i32, 1], offsets: kd.Tensor[kd.i32, 1],
               in_len: kd.Tensor[kd.i32, 1], tg_len: kd.Tensor[kd.i32, 1], out_a: kd.Tensor[kd.f32, 3],
               out_b: kd.Tensor[kd.f32, 3], nll: kd.Tensor[kd.f32, 1], work: kd.Tensor[kd.f32, 1],
               blank: kd.i32, plane: kd.i32, STORE: kd.Const[bool], B: kd.Const[int]):
    """States in `work`: two planes of `plane` floats per cube, cube (x, y) at 2·plane·(x·Y + y)."""
    base = 2 * plane * (kd.cube_pos_x() * kd.cube_count_y() + kd.cube_pos_y())
    unused = kd.shared(kd.i32, 1)
    recurse(work, base, unused, unused, lp, labels, offsets, in_len, tg_len, out_a, out_b, nll, blank, plane, STORE,
            False, B)
