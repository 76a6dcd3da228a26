"""Max and average pooling of 1- and 2-D windows (dilation 1) read a row at a time: a unit
takes OUTS neighbouring outputs of an output row and reads each input row its windows
cover as one aligned vector of OUTS·SW elements (plus the few columns the windows reach
past it). Every size is compile-time, so positions are multiplications by constants and
only taps that may leave the input (known at compile time) cost anything. Max: such a tap
reads the nearest input element, which always lies in the same window and comes before
(left, top) or after (right, bottom) it in scan order, so neither the maximum nor torch's
index (the first maximum in scan order, the last NaN) changes and no tap needs a mask; the
maximum is taken along each row's window, then down the rows. Average: the taps summed in
torch's scan order, those outside masked to 0, divided as forward.average divides. The
pooling kernels are instruction-bound on a GPU; these have few instructions an output."""
import kerneldsl as kd

from ..normalization.device import vec_of
from .forward import average
from .window import span


@kd.func
def clamped(p, lo_risk, hi_risk, size):
    """p clamped into [0, size) where compile-time flags say it may leave it."""
    q = kd.max(p, 0) if lo_risk else p
    return kd.min(q, size - 1) if hi_risk else q


@kd.func
def inside(p, lo_risk, hi_risk, size):
    """Whether p lies in [0, size), testing only the sides compile-time flags say it may leave."""
    ok = p >= 0 if lo_risk else True
    return (ok and p < size) if hi_risk else ok


@kd.func
def row_taps(x, line, col0, IW, V, LO, HI, LAST):
    """(values as f32, their columns, whether each lies inside the row): input columns
    col0 + r, r = LO .. HI - 1 (compile-time), of the row starting at `line`; those of the
    aligned vector [col0, col0 + V) in one load,
    the others (the windows' reach past it) one by one, clamped into the row. LAST: the
    last unit of a row's col0 (compile-time), to know where a column may pass the row's end."""
    vec = kd.cast(kd.load_vec(x, line + col0, V), kd.f32)
    vals = ()
    cols = ()
    oks = ()
    for r in kd.unroll(LO, HI):
        if r >= 0 and r < V:
            vals = vals + (vec[r],)
            cols = cols + (col0 + r,)
            oks = oks + (True,)
        else:
            c = clamped(col0 + r, r < 0, LAST + r > IW - 1, IW)
            vals = vals + (kd.f32(x[line + c]),)
            cols = cols + (c,)
            oks = oks + (inside(col0 + r, r < 0, LAST + r > IW - 1, IW),)
    return vals, cols, oks


@kd.func
def first_max(best, at, v, p, INDICES):
    """(best, at) after a later tap (v at p) in scan order, as torch scans: a greater value
    or a NaN replaces (so NaN wins, with the last NaN's position); without indices, the
    NaN-keeping maximum (the same value)."""
    if INDICES:
        take = v > best or kd.isnan(v)
        best = kd.select(take, v, best)
        at = kd.select(take, p, at)
    else:
        best = kd.max(best, v)
    return best, at


@kd.func
def window_max(taps, cols, ys, j, W, SW, KH, KW, INDICES):
    """(maximum, flat position) of output j's window as torch scans it: along each row,
    then down the rows (first_max is associative in scan order). taps, cols: every row's
    values and columns, W a row; ys: each row's flat start."""
    m = kd.f32(0)
    p = 0
    for b in kd.unroll(KH):
        t = b * W + j * SW
        r = taps[t]
        q = ys[b] + cols[t] if INDICES else 0
        for c in kd.unroll(1, KW):
            r, q = first_max(r, q, taps[t + c], ys[b] + cols[t + c] if INDICES else 0, INDICES)
        m, p = first_max(m, p, r, q, INDICES) if b > 0 else (r, q)
    return m, p


@kd.func
def window_sum(taps, oks, rows_ok, j, W, SW, KH, KW):
    """The F32 sum of output j's window in torch's scan order, taps outside the input as 0."""
    acc = kd.f32(0)
    for b in kd.unroll(KH):
        for c in kd.unroll(KW):
            t = b * W + j * SW + c
            acc += kd.select(rows_ok[b] and oks[t], taps[t], kd.f32(0))
    return acc


@kd.kernel
def pool_rows(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], units: kd.i32, divisor: kd.i32,
              IH: kd.Const[int], IW: kd.Const[int], OH: kd.Const[int], OW: kd.Const[int],
              KH: kd.Const[int], KW: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
              PH: kd.Const[int], PW: kd.Const[int], OUTS: kd.Const[int], MAX: kd.Const[bool],
              INCLUDE_PAD: kd.Const[bool], INDICES: kd.Const[bool]):
    """out (and, for max with INDICES, indices: flat positions in a plane) of max or average
    pooling [planes, IH, IW] -> [planes, OH, OW]; unit g (of `units` = planes·OH·ceil(OW / OUTS),
    a 1-D launch whose grid wraps from x into y) takes outputs OUTS·k .. OUTS·k + OUTS - 1 of
    output row g // ceil(OW / OUTS). The host guarantees the vectors stay inside each row and
    are aligned (IW a multiple of OUTS·SW, as is the input's offset)."""
    V = OUTS * SW
    U = (OW + OUTS - 1) // OUTS
    LO = -PW
    W = (OUTS - 1) * SW + KW   # columns a row: LO .. LO + W - 1 from col0
    g = (kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()) * kd.cube_dim_x() + kd.unit_pos_x()
    live = g < units
    n = kd.cast(kd.min(g, units - 1), kd.u32)   # unsigned: divisions by constants are cheaper
    row = n // U
    k = kd.i32(n - row * U)
    plane = row // OH
    oh = kd.i32(row - plane * OH)
    base = kd.i64(plane) * (IH * IW)
    col0 = k * V
    taps = ()     # every row's values, KH rows of W
    cols = ()
    oks = ()
    ys = ()
    rows_ok = ()
    for b in kd.unroll(KH):
        y = oh * SH - PH + b
        lo_risk = b < PH
        hi_risk = (OH - 1) * SH - PH + b > IH - 1
        yc = clamped(y, lo_risk, hi_risk, IH)
        vals, where, fits = row_taps(x, base + yc * IW, col0, IW, V, LO, LO + W, (U - 1) * V)
        taps = taps + vals
        cols = cols + where
        oks = oks + fits
        ys = ys + (yc * IW,)
        rows_ok = rows_ok + (inside(y, lo_risk, hi_risk, IH),)
    best = ()
    at = ()
    for j in kd.unroll(OUTS):
        if MAX:
            m, p = window_max(taps, cols, ys, j, W, SW, KH, KW, INDICES)
        else:
            ow = kd.min(k * OUTS + j, OW - 1)
            zh, ch = span(oh, IH, OH, KH, SH, PH, 1, False, False)
            zw, cw = span(ow, IW, OW, KW, SW, PW, 1, False, False)
            m = average(window_sum(taps, oks, rows_ok, j, W, SW, KH, KW), 0, oh, ow, 1, ch, cw, 1, IH, IW,
                        1, KH, KW, 1, SH, SW, 0, PH, PW, divisor, False, INCLUDE_PAD)
            p = 0
        best = best + (m,)
        at = at + (p,)
    first_out = kd.i64(row) * OW + k * OUTS
    if live:
        if OW % OUTS == 0 and OUTS > 1:
            kd.store_vec(out, first_out, vec_of(best, OUTS))
        else:
            for j in kd.unroll(OUTS):
                if k * OUTS + j < OW:
                    out[first_out + j] = best[j]
        if MAX and INDICES:
            for j in kd.unroll(OUTS):
                if k * OUTS + j < OW:
                    indices[first_out + j] = kd.i64(at[j])
