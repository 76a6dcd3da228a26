"""Interpolation kernels for devices whose units are SIMD lanes (the cpu runtime), used where
the width axis is upsampled by an integer factor S with taps that stay next to their input
column (tuning.lane_factor: Nearest / NearestExact at out = S·in, Linear at out = S·in, or
with aligned corners at out − 1 = S·(in − 1)).

On such devices a load whose index is not affine in the unit position becomes a gather
(13-18x slower than a vector load: RESULTS.md, 2026-12-01), and resample.py's kernels read
x[iw[ow]] through index tables. Here a unit owns one INPUT column i: the forward kernel
reads x[i − 1], x[i], x[i + 1] of each line (vector loads; the ends masked) and writes the S
outputs S·i + k (interleaved stores); the backward kernel reads the outputs S·(i − 1) ..
S·(i + 2) − 1 of each line (interleaved loads) and weighs each with what its taps give i.
The taps are computed per unit with taps.axis_taps, the same arithmetic as the tables of
resample.py, and the sums run in the same order, so the results are those of resample.py.
Depth and height are uniform over a cube (one row): the forward kernel computes their taps
inline (a table entry in an address makes the vectoriser gather), the backward kernel reads
their weights and touch ranges from resample.py's tables (values and loop bounds only)."""
from __future__ import annotations

import kerneldsl as kd

from .taps import axis_taps


@kd.func
def pick(t, i, vm, v0, vp):
    """The value at column t ∈ {i − 1, i, i + 1} of a line, given those three."""
    return kd.select(t < i, vm, kd.select(t > i, vp, v0))


@kd.func
def output_taps(i, k, size_in, size_out, scale, MODE, ALIGN, S):
    """Output S·i + k's width taps (clamped into the row): (T indices, T weights) as
    axis_taps; one-tap modes read column i with weight 1 (exact: floor(j·in/out) = i)."""
    if MODE == "Linear":
        taps = axis_taps(kd.min(S * i + k, size_out - 1), size_in, size_out, scale, MODE, ALIGN)
    else:
        taps = (i, kd.f32(1.0))
    return taps


@kd.func
def line_taps(od, oh, x, y, scale_d, scale_h, MODES, ALIGN):
    """Output row (od, oh)'s input lines: a tuple of in-plane offsets followed by their
    weights (depth taps × height taps), computed with axis_taps from cube-uniform values, so
    the offsets stay loop-invariant for the vectoriser (a table read here would make every
    load that uses it a gather)."""
    td = axis_taps(od, x.shape[1], y.shape[1], scale_d, MODES[0], ALIGN)
    th = axis_taps(oh, x.shape[2], y.shape[2], scale_h, MODES[1], ALIGN)
    TD = len(td) // 2
    TH = len(th) // 2
    offsets = ()
    weights = ()
    for a in kd.unroll(TD):
        for b in kd.unroll(TH):
            offsets = offsets + ((td[a] * x.shape[2] + th[b]) * x.shape[3],)
            weights = weights + (td[TD + a] * th[TH + b],)
    return offsets + weights


@kd.func
def phase_row(i, k, W_in, vm, v0, vp, S, ALIGN):
    """One line's Linear width sum for output S·i + k where S is a power of two (forward_lanes'
    PHASES): the weights are then exact constants a phase k, but at the row's ends, so the
    taps need no axis_taps and no pick. The same operations, in the same order and on the
    same values, as the general path: (0 + w0·a) + w1·b, for the taps axis_taps gives."""
    more = i + 1 < W_in   # the next column exists (else axis_taps repeats column i)
    if ALIGN:
        # coordinate i + k/S: taps (i, i + 1), the second weight k/S
        a = v0
        b = kd.select(more, vp, v0)
        w0 = kd.f32(1.0 - k / S)
        w1 = kd.f32(k / S)
    elif 2 * k + 1 < S:
        # coordinate i − (S − 2k − 1)/(2S): taps (i − 1, i); at i = 0 it clamps to 0:
        # taps (0, 1), weights (1, 0)
        off = (S - 2 * k - 1) / (2 * S)
        first = i == 0
        a = kd.select(first, v0, vm)
        b = kd.select(first, kd.select(more, vp, v0), v0)
        w0 = kd.select(first, kd.f32(1.0), kd.f32(off))
        w1 = kd.select(first, kd.f32(0.0), kd.f32(1.0 - off))
    else:
        # coordinate i + (2k + 1 − S)/(2S): taps (i, i + 1)
        off = (2 * k + 1 - S) / (2 * S)
        a = v0
        b = kd.select(more, vp, v0)
        w0 = kd.f32(1.0 - off)
        w1 = kd.f32(off)
    row = kd.f32(0)
    row += w0 * a
    row += w1 * b
    return row


@kd.kernel
def forward_lanes(x: kd.Tensor, y: kd.Tensor, rows: kd.i32, scale_d: kd.f32, scale_h: kd.f32, scale_w: kd.f32,
                  MODES: kd.Const[tuple], ALIGN: kd.Const[bool], S: kd.Const[int], PLANES: kd.Const[int],
                  EXACT: kd.Const[bool], WIDE: kd.Const[bool], BX: kd.Const[int], STREAM: kd.Const[bool],
                  PHASES: kd.Const[bool]):
    """y = x resampled, both contiguous [planes, D, H, W] (MODES: the three axes' modes), the
    width upsampled by S. Cube x is output row r (of the `rows` = D·H a plane) of plane
    group g; cube y and the unit pick the input column i, whose S outputs the unit computes
    in each of its PLANES planes (all loads before any store). EXACT (the host checked):
    every unit's column lies in the row and every group's planes exist (no masks on the
    stores). WIDE: 64-bit element offsets. STREAM: y is large (ops/streaming.py), its stores
    bypass the caches. PHASES (the host checked tuning.width_phases): the width is Linear by a
    power of two, its taps worked out a phase (phase_row), the same values."""
    if STREAM:
        kd.streaming_stores()
    g = kd.cube_pos_x() // rows
    r = kd.cube_pos_x() - g * rows
    od = r // y.shape[2]
    oh = r - od * y.shape[2]
    W_in = x.shape[3]
    W = y.shape[3]
    i = kd.cube_pos_y() * BX + kd.unit_pos_x()
    col = kd.i64(kd.cube_pos_y() * BX) + kd.unit_pos_x()   # i in 64 bits: offsets affine in the unit
    lt = line_taps(od, oh, x, y, scale_d, scale_h, MODES, ALIGN)
    L = len(lt) // 2
    T = 2 if MODES[2] == "Linear" else 1
    taps = ()
    if not PHASES:
        for k in kd.unroll(S):
            taps = taps + output_taps(i, k, W_in, W, scale_w, MODES[2], ALIGN, S)
    plane_in = x.shape[1] * x.shape[2] * W_in
    plane_out = y.shape[1] * y.shape[2] * W
    values = ()
    for q in kd.unroll(PLANES):
        p = kd.min(g * PLANES + q, x.shape[0] - 1)
        base = kd.i64(p) * plane_in if WIDE else p * plane_in
        lines = ()
        for t in kd.unroll(L):
            at = kd.i64(base + lt[t]) + col
            vm = kd.f32(0)
            v0 = kd.f32(0)
            vp = kd.f32(0)
            if EXACT:
                v0 = kd.f32(x[at])
            elif i < W_in:
                v0 = kd.f32(x[at])
            if T > 1:
                if i >= 1 and i <= W_in:
                    vm = kd.f32(x[at - 1])
                if i + 1 < W_in:
                    vp = kd.f32(x[at + 1])
            lines = lines + (vm, v0, vp)
        for k in kd.unroll(S):
            acc = kd.f32(0)
            for t in kd.unroll(L):
                if PHASES:
                    row = phase_row(i, k, W_in, lines[3 * t], lines[3 * t + 1], lines[3 * t + 2], S, ALIGN)
                else:
                    row = kd.f32(0)
                    for c in kd.unroll(T):
                        at_k = k * 2 * T
                        v = pick(taps[at_k + c], i, lines[3 * t], lines[3 * t + 1], lines[3 * t + 2])
                        row += taps[at_k + T + c] * v
                acc += lt[L + t] * row
            values = values + (acc,)
    for q in kd.unroll(PLANES):
        p = g * PLANES + q
        first = kd.i64((kd.i64(p) * plane_out if WIDE else p * plane_out) + r * W) + S * col
        for k in kd.unroll(S):
            if EXACT:
                y[first + k] = values[q * S + k]
            elif p < x.shape[0] and S * i + k < W:
                y[first + k] = values[q * S + k]


@kd.func
def add_line(acc, g, bases, line, start, weights, a, b, M, PLANES, MASKED, MODE):
    """acc (each plane's sum) plus a · b · (the sum over m of weights[m] · g[line, start + m]),
    where a and b are not 0; MASKED: read only where weights[m] is not 0 (else every m)."""
    summed = ()
    for q in kd.unroll(PLANES):
        at = kd.i64(bases[q] + line) + start
        row = kd.f32(0)
        for m in kd.unroll(M):
            v = kd.f32(0)
            if not MASKED:
                v = kd.f32(g[at + m])
            elif weights[m] != 0.0:
                v = kd.f32(g[at + m])
            row = kd.select(weights[m] != 0.0, row + weights[m] * v, row)
        summed = summed + (kd.select(a != 0.0 and b != 0.0, acc[q] + a * b * row, acc[q]),)
    return summed


@kd.func
def line_weight(j, i, index, weight, T):
    """What output line j gives input line i: the weights of j's taps (its row of the [O, T]
    index and weight tables) that land on i, summed in tap order."""
    w = kd.f32(0)
    for t in kd.unroll(T):
        w += kd.select(index[j, t] == i, weight[j, t], 0.0)
    return w


@kd.kernel
def backward_lanes(g: kd.Tensor, dx: kd.Tensor, rd: kd.Tensor[kd.i32, 1], rh: kd.Tensor[kd.i32, 1],
                   id_: kd.Tensor[kd.i32, 2], wd: kd.Tensor[kd.f32, 2], ih: kd.Tensor[kd.i32, 2],
                   wh: kd.Tensor[kd.f32, 2], rows: kd.i32, scale_w: kd.f32, span_d: kd.i32, span_h: kd.i32,
                   TD: kd.Const[int], TH: kd.Const[int],
                   MODE: kd.Const[str], ALIGN: kd.Const[bool], S: kd.Const[int], PLANES: kd.Const[int],
                   EXACT: kd.Const[bool], WIDE: kd.Const[bool], BX: kd.Const[int], STREAM: kd.Const[bool]):
    """dx = the adjoint of the forward map applied to g, both contiguous [planes, D, H, W]
    (dx the input's shape), the width upsampled by S (MODE: the width's). Cube x is input row
    r of plane group c; cube y and the unit pick the input column i. The unit weighs the
    outputs S·(i − 1) .. S·(i + 2) − 1 (Linear; S·i .. S·i + S − 1 for one tap) of each line
    with what their taps give i (computed once), and walks the lines (jd, jh) the ranges rd,
    rh list, weighed from the tables, as resample_backward does: the same sums in the same
    order (a weight-0 output or line adds nothing). Those walks take span_d and span_h steps
    (the most lines any input line is touched by), each past its range skipped: trip counts
    set by the arguments, not by the tables' values, so a small launch may run on the calling
    thread (kerneldsl/loop_bounds.py). EXACT: every unit's column lies in the row and every
    group's planes exist. WIDE: 64-bit element offsets. STREAM: as forward_lanes', for dx."""
    if STREAM:
        kd.streaming_stores()
    c = kd.cube_pos_x() // rows
    r = kd.cube_pos_x() - c * rows
    i_d = r // dx.shape[2]
    i_h = r - i_d * dx.shape[2]
    W_in = dx.shape[3]
    W = g.shape[3]
    i = kd.cube_pos_y() * BX + kd.unit_pos_x()
    col = kd.i64(kd.cube_pos_y() * BX) + kd.unit_pos_x()
    M = 3 * S if MODE == "Linear" else S
    first_j = S * i - S if MODE == "Linear" else S * i
    weights = ()   # what output first_j + m gives column i (0 outside the row)
    for m in kd.unroll(M):
        j = first_j + m
        live = j >= 0 and j < W and i < W_in
        if MODE == "Linear":
            taps = axis_taps(kd.clamp(j, 0, W - 1), W_in, W, scale_w, MODE, ALIGN)
            w = kd.f32(0)
            for t in kd.unroll(2):
                w += kd.select(taps[t] == i, taps[2 + t], 0.0)
        else:
            w = kd.f32(1.0)
        weights = weights + (kd.select(live, w, 0.0),)
    plane_g = g.shape[1] * g.shape[2] * W
    bases = ()
    acc = ()
    for q in kd.unroll(PLANES):
        p = kd.min(c * PLANES + q, g.shape[0] - 1)
        bases = bases + ((kd.i64(p) * plane_g if WIDE else p * plane_g),)
        acc = acc + (kd.f32(0),)
    start = S * col - S if MODE == "Linear" else S * col
    first_d = rd[2 * i_d]
    last_d = rd[2 * i_d + 1]
    first_h = rh[2 * i_h]
    last_h = rh[2 * i_h + 1]
    for step_d in range(span_d):
        jd = first_d + step_d
        if jd <= last_d:
            a = line_weight(jd, i_d, id_, wd, TD)
            for step_h in range(span_h):
                jh = first_h + step_h
                if jh <= last_h:
                    b = line_weight(jh, i_h, ih, wh, TH)
                    line = (jd * g.shape[2] + jh) * W
                    # the window of every unit of the cube in every plane lies inside g: the loads
                    # need no mask (a unit reads the row's neighbours where its weights are 0), and a
                    # uniform loop of one trip lifts this branch out of the unit loop, so they stay
                    # plain vector loads (under a mask they would be gathers); else masked loads
                    lo = kd.i64(bases[0] + line) + (S * kd.i64(kd.cube_pos_y() * BX) - S)
                    hi = kd.i64(bases[PLANES - 1] + line) + S * kd.i64(kd.cube_pos_y() * BX + BX + 2)
                    if lo >= 0 and hi <= kd.i64(g.shape[0]) * plane_g:
                        for _ in range(1):
                            acc = add_line(acc, g, bases, line, start, weights, a, b, M, PLANES, False, MODE)
                    else:
                        acc = add_line(acc, g, bases, line, start, weights, a, b, M, PLANES, True, MODE)
    plane_dx = dx.shape[1] * dx.shape[2] * W_in
    for q in kd.unroll(PLANES):
        p = c * PLANES + q
        at = kd.i64((kd.i64(p) * plane_dx if WIDE else p * plane_dx) + r * W_in) + col
        if EXACT:
            dx[at] = acc[q]
        elif p < dx.shape[0] and i < W_in:
            dx[at] = acc[q]
