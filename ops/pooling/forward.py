"""The pooling forward kernel: one unit per output element, for max, average, adaptive
average and adaptive max pooling over [planes, D, H, W] (1- and 2-D calls have leading
axes of 1), torch's semantics: NaN wins a max (the last NaN's index), the first maximum
in scan order otherwise; averages sum in F32 in scan order and divide as torch does."""
import kerneldsl as kd

from .window import padded_extent, span


@kd.func
def flat_position(BX):
    """This unit's element in a grid that wraps from x into y."""
    return (kd.i64(kd.cube_pos_y()) * kd.cube_count_x() + kd.cube_pos_x()) * BX + kd.unit_pos_x()


@kd.func
def average(acc, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH, PW, divisor,
            ADAPTIVE, INCLUDE_PAD):
    """acc (a window's sum, or a gradient) divided as torch divides it for this output:
    by each adaptive bin size in turn, by divisor_override (divisor != 0), by the padded
    window size (count_include_pad) or by the taps inside the input."""
    if ADAPTIVE:
        r = acc / kd.f32(cd) / kd.f32(ch) / kd.f32(cw)
    else:
        if INCLUDE_PAD:
            n = (padded_extent(od, ID, KD, SD, PD) * padded_extent(oh, IH, KH, SH, PH)
                 * padded_extent(ow, IW, KW, SW, PW))
        else:
            n = cd * ch * cw
        n = kd.select(divisor != 0, divisor, n)
        r = kd.select(cd * ch * cw > 0, acc / kd.f32(n), kd.f32(0))
    return r


@kd.kernel
def pool_forward(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], total: kd.i64,
                 ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                 KD: kd.i32, KH: kd.i32, KW: kd.i32, SD: kd.i32, SH: kd.i32, SW: kd.i32,
                 PD: kd.i32, PH: kd.i32, PW: kd.i32, DD: kd.i32, DH: kd.i32, DW: kd.i32, divisor: kd.i32,
                 MAX: kd.Const[bool], ADAPTIVE: kd.Const[bool], INCLUDE_PAD: kd.Const[bool],
                 INDICES: kd.Const[bool], BX: kd.Const[int]):
    """out[e] (and indices[e], the flat per-plane input position of a max) for output e."""
    e = flat_position(BX)
    if e < total:
        ow = kd.i32(e % OW)
        r = e // OW
        oh = kd.i32(r % OH)
        r = r // OH
        od = kd.i32(r % OD)
        base = (r // OD) * (kd.i64(ID) * IH * IW)
        zd, cd = span(od, ID, OD, KD, SD, PD, DD, ADAPTIVE)
        zh, ch = span(oh, IH, OH, KH, SH, PH, DH, ADAPTIVE)
        zw, cw = span(ow, IW, OW, KW, SW, PW, DW, ADAPTIVE)
        best = kd.f32(-kd.inf)
        where = kd.i64((zd * IH + zh) * IW + zw)
        acc = kd.f32(0)
        for a in range(cd):
            plane_row = (zd + a * DD) * IH
            for b in range(ch):
                row = kd.i64((plane_row + zh + b * DH) * IW)
                for c in range(cw):
                    pos = row + zw + c * DW
                    v = kd.f32(x[base + pos])
                    if MAX:
                        if v > best or kd.isnan(v):
                            best = v
                            where = pos
                    else:
                        acc += v
        if MAX:
            out[e] = best
            if INDICES:
                indices[e] = where
        else:
            out[e] = average(acc, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH, PW,
                             divisor, ADAPTIVE, INCLUDE_PAD)
