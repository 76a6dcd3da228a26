"""The pooling backward kernels, deterministic: each input element gathers the gradient of
every output whose window holds it (for max pooling, the outputs whose index is this
element), in increasing output order, the order in which torch's CPU kernels scatter them;
no atomics. Averages divide each output's gradient as the forward divided its sum
(forward.average). pool_backward: a unit an element, any window; pool_backward_taps: small
windows unrolled; pool_backward_cells: small windows without dilation, a unit the few
elements that share their candidate outputs (tuning.cell_backward)."""
import kerneldsl as kd

from .forward import average, locate, locate_row
from .window import candidate, candidates, span, taps_to_outputs


@kd.kernel
def pool_backward(grad: kd.Tensor, indices: kd.Tensor[kd.i64, 1], dx: kd.Tensor, rows: kd.i32,
                  ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                  KD: kd.i32, KH: kd.i32, KW: kd.i32, SD: kd.i32, SH: kd.i32, SW: kd.i32,
                  PD: kd.i32, PH: kd.i32, PW: kd.i32, DD: kd.i32, DH: kd.i32, DW: kd.i32, divisor: kd.i32,
                  MAX: kd.Const[bool], ADAPTIVE: kd.Const[bool], WIDE: kd.Const[bool], DIMS: kd.Const[int],
                  INCLUDE_PAD: kd.Const[bool], GLOBAL: kd.Const[bool]):
    """dx[e] = Σ over the outputs covering input element e of their (selected or divided)
    gradient, the input seen as [rows = planes·ID·IH, IW]. GLOBAL (one adaptive bin over the
    whole plane): torch's global average is a mean, whose gradient is divided once by the
    plane's size, not by each axis's in turn (which differs in the last bit for some values)."""
    live, e, iw, ih, id_, plane = locate(rows, IW, IH, ID, DIMS)
    obase = kd.i64(plane) * (kd.i64(OD) * OH * OW)
    here = kd.i64((id_ * IH + ih) * IW + iw)
    ld, nd = candidates(id_, ID, OD, KD, SD, PD, DD, ADAPTIVE, WIDE, DIMS == 3)
    lh, nh = candidates(ih, IH, OH, KH, SH, PH, DH, ADAPTIVE, WIDE, DIMS >= 2)
    lw, nw = candidates(iw, IW, OW, KW, SW, PW, DW, ADAPTIVE, WIDE)
    acc = kd.f32(0)
    for a in range(nd):
        od, vd = candidate(a, id_, ld, SD, PD, DD, ADAPTIVE)
        if vd:
            for b in range(nh):
                oh, vh = candidate(b, ih, lh, SH, PH, DH, ADAPTIVE)
                if vh:
                    for c in range(nw):
                        ow, vw = candidate(c, iw, lw, SW, PW, DW, ADAPTIVE)
                        if vw:
                            o = obase + (od * OH + oh) * OW + ow
                            g = kd.f32(grad[o])
                            if MAX:
                                if indices[o] == here:
                                    acc += g
                            else:
                                zd, cd = span(od, ID, OD, KD, SD, PD, DD, ADAPTIVE, WIDE, DIMS == 3)
                                zh, ch = span(oh, IH, OH, KH, SH, PH, DH, ADAPTIVE, WIDE, DIMS >= 2)
                                zw, cw = span(ow, IW, OW, KW, SW, PW, DW, ADAPTIVE, WIDE)
                                if GLOBAL:
                                    acc += g / kd.f32(ID * IH * IW)
                                else:
                                    acc += average(g, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW,
                                                   SD, SH, SW, PD, PH, PW, divisor, ADAPTIVE, INCLUDE_PAD)
    if live:
        dx[e] = acc


@kd.func
def candidate_gradient(grad, obase, od, oh, ow, OH, OW):
    """(flat index, gradient as F32) of candidate output (od, oh, ow) of the plane at obase;
    candidates are clamped into the output, so a missing one is read too (and masked)."""
    o = obase + (od * OH + oh) * OW + ow
    return o, kd.f32(grad[o])


@kd.func
def window_share(g, od, oh, ow, ID, IH, IW, OD, OH, OW, KD, KH, KW, SD, SH, SW, PD, PH, PW, divisor, DIMS,
                 INCLUDE_PAD):
    """Output (od, oh, ow)'s gradient g divided as the forward divided its window's sum
    (forward.average), for a window without dilation."""
    zd, cd = span(od, ID, OD, KD, SD, PD, 1, False, False, DIMS == 3)
    zh, ch = span(oh, IH, OH, KH, SH, PH, 1, False, False, DIMS >= 2)
    zw, cw = span(ow, IW, OW, KW, SW, PW, 1, False, False)
    return average(g, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH, PW, divisor, False,
                   INCLUDE_PAD)


@kd.kernel
def pool_backward_taps(grad: kd.Tensor, indices: kd.Tensor[kd.i64, 1], dx: kd.Tensor, rows: kd.i32,
                       ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                       PD: kd.i32, PH: kd.i32, PW: kd.i32, DD: kd.i32, DH: kd.i32, DW: kd.i32, divisor: kd.i32,
                       KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int],
                       SD: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
                       MAX: kd.Const[bool], DIMS: kd.Const[int], INCLUDE_PAD: kd.Const[bool]):
    """pool_backward for small pooling windows whose sizes and strides are compile-time:
    every tap of every axis unrolled, invalid ones masked instead of branched around, so
    the body is straight-line code (the cpu runtime vectorises it across units) and the
    strides' divisions become multiplications. Same sums in the same order."""
    live, e, iw, ih, id_, plane = locate(rows, IW, IH, ID, DIMS)
    obase = kd.i64(plane) * (kd.i64(OD) * OH * OW)
    here = kd.i64((id_ * IH + ih) * IW + iw)
    ods, vds = taps_to_outputs(id_, OD, KD, SD, PD, DD)
    ohs, vhs = taps_to_outputs(ih, OH, KH, SH, PH, DH)
    ows, vws = taps_to_outputs(iw, OW, KW, SW, PW, DW)
    acc = kd.f32(0)
    for a in kd.unroll(KD):
        for b in kd.unroll(KH):
            for c in kd.unroll(KW):
                ok = vds[a] and vhs[b] and vws[c]
                o, g = candidate_gradient(grad, obase, ods[a], ohs[b], ows[c], OH, OW)
                if MAX:
                    acc += kd.select(ok and indices[o] == here, g, kd.f32(0))
                else:
                    share = window_share(g, ods[a], ohs[b], ows[c], ID, IH, IW, OD, OH, OW, KD, KH, KW,
                                         SD, SH, SW, PD, PH, PW, divisor, DIMS, INCLUDE_PAD)
                    acc += kd.select(ok, share, kd.f32(0))
    if live:
        dx[e] = acc


@kd.func
def cell_outputs(c, out, N):
    """The N outputs c − N + 1 .. c (increasing) whose windows may hold an input of cell c of
    an axis (see pool_backward_cells), each clamped into [0, out) so that it can be read, and
    whether it exists."""
    outs = ()
    oks = ()
    for j in kd.unroll(N):
        o = c - (N - 1 - j)
        outs = outs + (kd.clamp(o, 0, out - 1),)
        oks = oks + (o >= 0 and o < out,)
    return outs, oks


@kd.kernel
def pool_backward_cells(grad: kd.Tensor, indices: kd.Tensor[kd.i64, 1], dx: kd.Tensor, rows: kd.i32,
                        ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                        CD: kd.i32, CH: kd.i32, CW: kd.i32, PD: kd.i32, PH: kd.i32, PW: kd.i32, divisor: kd.i32,
                        KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int],
                        SD: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
                        ND: kd.Const[int], NH: kd.Const[int], NW: kd.Const[int],
                        MAX: kd.Const[bool], DIMS: kd.Const[int], INCLUDE_PAD: kd.Const[bool]):
    """pool_backward_taps for windows without dilation, a unit a cell: the SD·SH·SW inputs
    whose last covering window is output (cd, ch, cw) (on each axis the inputs c·S − P ..
    c·S − P + S − 1; CD, CH, CW cells an axis, the cells seen as [rows = planes·CD·CH, CW]).
    Those inputs share their N = ceil(K / S) candidate outputs an axis, c − N + 1 .. c, so a
    unit reads each candidate's gradient (and index) once for all of them, where the taps
    kernel reads K an axis for each input; whether tap (input, candidate) lies in the window
    is known at compile time. Same sums in the same order (increasing outputs)."""
    live, row, cw, ch, cd, plane = locate_row(rows, CW, CH, CD, DIMS)
    obase = kd.i64(plane) * (kd.i64(OD) * OH * OW)
    ibase = kd.i64(plane) * (kd.i64(ID) * IH * IW)
    ods, vds = cell_outputs(cd, OD, ND)
    ohs, vhs = cell_outputs(ch, OH, NH)
    ows, vws = cell_outputs(cw, OW, NW)
    shares = ()   # each candidate's gradient (max) or share of it (average); 0 where it does not exist
    picks = ()    # each candidate's index (max); -1 where it does not exist
    for a in kd.unroll(ND):
        for b in kd.unroll(NH):
            for c in kd.unroll(NW):
                ok = vds[a] and vhs[b] and vws[c]
                o, g = candidate_gradient(grad, obase, ods[a], ohs[b], ows[c], OH, OW)
                if MAX:
                    picks = picks + (kd.select(ok, indices[o], kd.i64(-1)),)
                else:
                    g = window_share(g, ods[a], ohs[b], ows[c], ID, IH, IW, OD, OH, OW, KD, KH, KW,
                                     SD, SH, SW, PD, PH, PW, divisor, DIMS, INCLUDE_PAD)
                shares = shares + (kd.select(ok, g, kd.f32(0)),)
    for x in kd.unroll(SD):
        id_ = cd * SD - PD + x
        for y in kd.unroll(SH):
            ih = ch * SH - PH + y
            for z in kd.unroll(SW):
                iw = cw * SW - PW + z
                here = kd.i64((id_ * IH + ih) * IW + iw)
                acc = kd.f32(0)
                for a in kd.unroll(ND):
                    for b in kd.unroll(NH):
                        for c in kd.unroll(NW):
                            # input x of the cell lies in candidate a's window when it is within K of
                            # the window's start, (N − 1 − a)·S before the cell's: compile-time
                            if x + (ND - 1 - a) * SD < KD and y + (NH - 1 - b) * SH < KH and \
                                    z + (NW - 1 - c) * SW < KW:
                                k = (a * NH + b) * NW + c
                                if MAX:
                                    acc += kd.select(picks[k] == here, shares[k], kd.f32(0))
                                else:
                                    acc += shares[k]
                if live and id_ >= 0 and id_ < ID and ih >= 0 and ih < IH and iw >= 0 and iw < IW:
                    dx[ibase + here] = acc
