"""Max pooling of 1- and 2-D windows (dilation 1) read a row at a time: a unit takes OUTS
neighbouring outputs of an output row, reads each input row its windows cover as one
aligned vector of OUTS·SW elements (plus the few columns the windows reach past it), and
takes the maximum along each row's window, then down the rows. Every size is compile-time,
so positions are multiplications by constants and no tap needs a mask: a tap outside the
input reads the nearest input element, which always lies in the same window and comes
before (left, top) or after (right, bottom) it in scan order, so neither the maximum nor
torch's index (the first maximum in scan order, the last NaN) changes. The pooling kernels
are instruction-bound on a GPU; this one has the fewest instructions an output."""
import kerneldsl as kd


@kd.func
def clamped(p, lo_risk, hi_risk, size):
    """p clamped into [0, size) where compile-time flags say it may leave it."""
    q = kd.max(p, 0) if lo_risk else p
    return kd.min(q, size - 1) if hi_risk else q


@kd.func
def row_taps(x, line, col0, IW, V, LO, HI, LAST):
    """(values as f32, their columns): input columns col0 + r, r = LO .. HI - 1 (compile-time)
    of the row starting at `line`; those of the aligned vector [col0, col0 + V) in one load,
    the others (the windows' reach past it) one by one, clamped into the row. LAST: the
    last unit of a row's col0 (compile-time), to know where a column may pass the row's end."""
    vec = kd.cast(kd.load_vec(x, line + col0, V), kd.f32)
    vals = ()
    cols = ()
    for r in kd.unroll(LO, HI):
        if r >= 0 and r < V:
            vals = vals + (vec[r],)
            cols = cols + (col0 + r,)
        else:
            c = clamped(col0 + r, r < 0, LAST + r > IW - 1, IW)
            vals = vals + (kd.f32(x[line + c]),)
            cols = cols + (c,)
    return vals, cols


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
def as_vector(t, N):
    """The N (2, 4 or 8) values of tuple t as one vector."""
    if N == 2:
        v = kd.make_vec(t[0], t[1])
    elif N == 4:
        v = kd.make_vec(t[0], t[1], t[2], t[3])
    else:
        v = kd.make_vec(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7])
    return v


@kd.kernel
def pool_max_rows(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], units: kd.i32,
                  IH: kd.Const[int], IW: kd.Const[int], OH: kd.Const[int], OW: kd.Const[int],
                  KH: kd.Const[int], KW: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
                  PH: kd.Const[int], PW: kd.Const[int], OUTS: kd.Const[int], INDICES: kd.Const[bool]):
    """out (and indices, flat positions in a plane) of max pooling [planes, IH, IW] ->
    [planes, OH, OW]; unit g (of `units` = planes·OH·ceil(OW / OUTS), a 1-D launch whose grid
    wraps from x into y) takes outputs OUTS·k .. OUTS·k + OUTS - 1 of output row g // ceil(OW / OUTS).
    The host guarantees the vectors stay inside each row and are aligned (IW a multiple of
    OUTS·SW, as is the input's offset)."""
    V = OUTS * SW
    U = (OW + OUTS - 1) // OUTS
    LO = -PW
    HI = (OUTS - 1) * SW - PW + KW
    g = (kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()) * kd.cube_dim_x() + kd.unit_pos_x()
    live = g < units
    n = kd.cast(kd.min(g, units - 1), kd.u32)   # unsigned: divisions by constants are cheaper
    row = n // U
    k = kd.i32(n - row * U)
    plane = row // OH
    oh = kd.i32(row - plane * OH)
    base = kd.i64(plane) * (IH * IW)
    col0 = k * V
    taps = ()     # every row's values, KH rows of HI - LO
    cols = ()
    ys = ()
    for b in kd.unroll(KH):
        y = clamped(oh * SH - PH + b, b < PH, (OH - 1) * SH - PH + b > IH - 1, IH)
        vals, where = row_taps(x, base + y * IW, col0, IW, V, LO, HI, (U - 1) * V)
        taps = taps + vals
        cols = cols + where
        ys = ys + (y * IW,)
    best = ()
    at = ()
    for j in kd.unroll(OUTS):
        m = kd.f32(0)
        p = 0
        for b in kd.unroll(KH):
            t = b * (HI - LO) + j * SW
            r = taps[t]
            q = ys[b] + cols[t] if INDICES else 0
            for c in kd.unroll(1, KW):
                r, q = first_max(r, q, taps[t + c], ys[b] + cols[t + c] if INDICES else 0, INDICES)
            m, p = first_max(m, p, r, q, INDICES) if b > 0 else (r, q)
        best = best + (m,)
        at = at + (p,)
    first_out = kd.i64(row) * OW + k * OUTS
    if live:
        if OW % OUTS == 0 and OUTS > 1:
            kd.store_vec(out, first_out, as_vector(best, OUTS))
        else:
            for j in kd.unroll(OUTS):
                if k * OUTS + j < OW:
                    out[first_out + j] = best[j]
        if INDICES:
            for j in kd.unroll(OUTS):
                if k * OUTS + j < OW:
                    indices[first_out + j] = kd.i64(at[j])
