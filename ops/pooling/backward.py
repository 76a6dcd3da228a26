"""The pooling backward kernel, deterministic: one unit per input element gathers the
gradient of every output whose window holds it (for max pooling, the outputs whose index
is this element), in increasing output order, the order in which torch's CPU kernels
scatter them; no atomics. Averages divide each output's gradient as the forward divided
its sum (forward.average)."""
import kerneldsl as kd

from .forward import average, flat_position
from .window import candidate, candidates, span


@kd.kernel
def pool_backward(grad: kd.Tensor, indices: kd.Tensor[kd.i64, 1], dx: kd.Tensor, total: kd.i64,
                  ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                  KD: kd.i32, KH: kd.i32, KW: kd.i32, SD: kd.i32, SH: kd.i32, SW: kd.i32,
                  PD: kd.i32, PH: kd.i32, PW: kd.i32, DD: kd.i32, DH: kd.i32, DW: kd.i32, divisor: kd.i32,
                  MAX: kd.Const[bool], ADAPTIVE: kd.Const[bool], INCLUDE_PAD: kd.Const[bool], BX: kd.Const[int]):
    """dx[e] = Σ over the outputs covering input element e of their (selected or divided) gradient."""
    e = flat_position(BX)
    if e < total:
        iw = kd.i32(e % IW)
        r = e // IW
        ih = kd.i32(r % IH)
        r = r // IH
        id_ = kd.i32(r % ID)
        obase = (r // ID) * (kd.i64(OD) * OH * OW)
        here = kd.i64((id_ * IH + ih) * IW + iw)
        ld, nd = candidates(id_, ID, OD, KD, SD, ADAPTIVE)
        lh, nh = candidates(ih, IH, OH, KH, SH, ADAPTIVE)
        lw, nw = candidates(iw, IW, OW, KW, SW, ADAPTIVE)
        acc = kd.f32(0)
        for a in range(nd):
            od, vd = candidate(a, id_, ld, OD, KD, SD, PD, DD, ADAPTIVE)
            if vd:
                for b in range(nh):
                    oh, vh = candidate(b, ih, lh, OH, KH, SH, PH, DH, ADAPTIVE)
                    if vh:
                        for c in range(nw):
                            ow, vw = candidate(c, iw, lw, OW, KW, SW, PW, DW, ADAPTIVE)
                            if vw:
                                o = obase + (od * OH + oh) * OW + ow
                                g = kd.f32(grad[o])
                                if MAX:
                                    if indices[o] == here:
                                        acc += g
                                else:
                                    zd, cd = span(od, ID, OD, KD, SD, PD, DD, ADAPTIVE)
                                    zh, ch = span(oh, IH, OH, KH, SH, PH, DH, ADAPTIVE)
                                    zw, cw = span(ow, IW, OW, KW, SW, PW, DW, ADAPTIVE)
                                    acc += average(g, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW,
                                                   SD, SH, SW, PD, PH, PW, divisor, ADAPTIVE, INCLUDE_PAD)
        dx[e] = acc
