"""The CTC alpha and beta recursions with a sample's states in one plane's registers, for
targets whose 2S + 1 states fit R·PLANE_DIM (tuning.py picks R and this path).

One plane per (sample, direction), several planes a cube (cube y = 0 runs alpha, y = 1
beta). Lane l holds states l·R .. l·R + R − 1 in registers with their labels and skip rules;
a step takes the two states of the neighbouring lane it needs (s − 1 and s − 2 of the lane
before for alpha, s + 1 and s + 2 of the lane after for beta) by two plane shuffles, so no
cube barrier runs per step. Each state's emission is loaded a step ahead. The planes of a
cube step together up to the cube's longest input (the loop holds plane operations, so its
bound is cube-uniform); a plane whose sample is shorter keeps its states from then on and
stores nothing. The nll is a plane-level log-sum-exp of alpha's last two states
(a plane_max, then a plane_sum of 2^(x − max), with the −inf guard).

The states are kept in base 2 (log2 of the probabilities: emissions scaled by log2(e) as
they load, outputs by ln 2 as they store), so a log-add is two exp2_fast and one log2: a
step is R log-adds one after another on one plane, and transcendental throughput bounds it
(natural exp and log cost about three times the instructions on CUDA). exp2_fast's flush
of results below 2^-126 to zero loses nothing here: they are added to 1.

Outputs, unreachable states (a true −inf) and the lanes past L (−inf, never feeding a state
below L) are as in recursion.py, whose cube-wide path serves targets too long for a plane."""
from __future__ import annotations

import kerneldsl as kd

from .recursion import fill_outside, log_add3, state_info, store_state

LOG2E = 1.4426950408889634  # log2(e): natural log-probabilities to base 2
LN2 = 0.6931471805599453    # ln(2): base 2 back to natural


@kd.func
def emissions(lp, t, n, lab, R):
    """lp[t, n, lab[j]] for the R states of a lane, in base 2 (F32)."""
    e = ()
    for j in kd.unroll(R):
        e = e + (kd.f32(lp[t, n, lab[j]]) * kd.f32(LOG2E),)
    return e


@kd.func
def store_lane(out, t, n, s0, L, v, R):
    """States s0 .. s0 + R - 1 of step t (those below L) are v, in base 2: into out, natural."""
    for j in kd.unroll(R):
        if s0 + j < L:
            out[t, n, s0 + j] = v[j] * kd.f32(LN2)


@kd.func
def plane_log_sum_exp(x, R):
    """log2 Σ 2^x over the R values x of every lane of the plane (a plane_max, then a plane_sum
    of 2^(x − max)); −inf when every value is −inf."""
    m = x[0]
    for j in kd.unroll(1, R):
        m = kd.max(m, x[j])
    m = kd.plane_max(m)
    none = m == -kd.inf
    safe = kd.select(none, kd.f32(0.0), m)
    total = kd.f32(0.0)
    for j in kd.unroll(R):
        total += kd.exp2_fast(x[j] - safe)
    total = kd.plane_sum(total)
    return kd.select(none, -kd.inf, safe + kd.log2(total))


@kd.kernel
def ctc_plane(lp: kd.Tensor, labels: kd.Tensor[kd.i32, 1], offsets: kd.Tensor[kd.i32, 1],
              in_len: kd.Tensor[kd.i32, 1], tg_len: kd.Tensor[kd.i32, 1], out_a: kd.Tensor[kd.f32, 3],
              out_b: kd.Tensor[kd.f32, 3], nll: kd.Tensor[kd.f32, 1], blank: kd.i32,
              R: kd.Const[int], STORE: kd.Const[bool]):
    """Sample cube_pos_x()·plane_count() + plane_pos() (planes past N idle along), R states a lane."""
    lane = kd.lane_pos()
    N = nll.shape[0]
    T = lp.shape[0]
    first = kd.cube_pos_x() * kd.plane_count() + kd.plane_pos()
    live = first < N
    n = kd.min(first, N - 1)
    rev = kd.cube_pos_y() == 1
    tn = kd.select(live, in_len[n], 0)
    sn = tg_len[n]
    off = offsets[n]
    L = 2 * sn + 1
    steps = kd.i32(kd.cube_max(kd.f32(tn)))  # the cube's longest input (exact in F32: T < 2^24)
    if STORE and live:
        if rev:
            fill_outside(out_b, n, tn, L, T, kd.PLANE_DIM, lane)
        else:
            fill_outside(out_a, n, tn, L, T, kd.PLANE_DIM, lane)
    # the states of step t0 (tn - 1 for beta, 0 for alpha): the emission on the first two
    # (last two) states, -inf elsewhere; labels and skip rules stay in registers
    t0 = kd.select(rev, tn - 1, 0)
    a = ()
    lab = ()
    skip = ()
    for j in kd.unroll(R):
        s = lane * R + j
        lj, kj = state_info(labels, off, s, sn, L, blank, rev)
        v = -kd.inf
        if tn > 0 and s < L and ((rev and s >= L - 2) or (not rev and s < 2)):
            v = kd.f32(lp[t0, n, lj]) * kd.f32(LOG2E)
        if STORE and tn > 0 and s < L:
            store_state(out_a, out_b, rev, t0, n, s, v * kd.f32(LN2), STORE)
        a = a + (v,)
        lab = lab + (lj,)
        skip = skip + (kj,)
    nxt = a
    if tn > 1:
        nxt = emissions(lp, kd.select(rev, tn - 2, 1), n, lab, R)
    # the neighbour lane's states come from lane - 1 (alpha) or lane + 1 (beta); none past the ends
    src = kd.select(rev, (lane + 1) % kd.PLANE_DIM, (lane + kd.PLANE_DIM - 1) % kd.PLANE_DIM)
    edge = kd.select(rev, lane == kd.PLANE_DIM - 1, lane == 0)
    for i in range(1, steps):
        on = i < tn
        t = kd.select(rev, tn - 1 - i, i)
        o1 = kd.plane_shuffle(kd.select(rev, a[0], a[R - 1]), src)
        o2 = kd.plane_shuffle(kd.select(rev, a[1], a[R - 2]), src)
        o1 = kd.select(edge, -kd.inf, o1)
        o2 = kd.select(edge, -kd.inf, o2)
        before = (o2, o1) + a   # alpha: state s - k of slot j is before[j + 2 - k]
        after = a + (o1, o2)    # beta: state s + k of slot j is after[j + k]
        new = ()
        for j in kd.unroll(R):
            b = kd.select(rev, after[j + 1], before[j + 1])
            c = kd.select(skip[j], kd.select(rev, after[j + 2], before[j]), -kd.inf)
            new = new + (kd.select(lane * R + j < L, log_add3(a[j], b, c, True) + nxt[j], -kd.inf),)
        # stored after the R log-adds (no branch between them, so they overlap), then kept
        if STORE and on:
            if rev:
                store_lane(out_b, t, n, lane * R, L, new, R)
            else:
                store_lane(out_a, t, n, lane * R, L, new, R)
        kept = ()
        for j in kd.unroll(R):
            kept = kept + (kd.select(on, new[j], a[j]),)
        a = kept
        # the next step's emissions, loaded a step ahead (a step past the sample's end is
        # clamped into the input: loaded, never used)
        nxt = emissions(lp, kd.clamp(kd.select(rev, tn - 2 - i, i + 1), 0, T - 1), n, lab, R)
    if not rev:
        s0 = lane * R
        ends = ()
        for j in kd.unroll(R):
            ends = ends + (kd.select(s0 + j == L - 1 or s0 + j == L - 2, a[j], -kd.inf),)
        lse = plane_log_sum_exp(ends, R)
        if live and lane == 0:
            nll[n] = kd.select(tn == 0, kd.select(sn == 0, kd.f32(0.0), kd.inf), -lse * kd.f32(LN2))
