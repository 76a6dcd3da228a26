"""The pooling forward kernel for devices whose units are SIMD lanes (the cpu runtime): a unit
an OUTPUT COLUMN, so that every tap of a window is one strided vector load across the cube.

forward.pool_forward_taps gives a unit an output anywhere in the tensor: its position comes
from run-time divisions and its taps' addresses from clamps, so on such devices each tap is
a gather (and 2-byte inputs must first be widened to f32, which has gathers). Here a cube is
one output row (od, oh) of PLANES planes and its units its consecutive columns ow, so the
depth and height taps are uniform over the cube (scalars) and the width tap c of unit ow
reads column ow·SW − PW + c·DW: affine in the unit, SW (compile-time) apart, an interleaved
vector load. Taps outside the input are masked by value (a select), not by the load: where
every address the cube can form lies inside the tensor (all but the first and last rows of
the tensor), the loads are plain (a unit reads its row's neighbours, or the next row's first
elements, where its taps leave the row, and selects them away), in a branch lifted out of the
unit loop by a uniform loop of one trip; else each load is masked.

Same taps in the same scan order, same sums and divisions (forward.fold_tap, forward.average)
as pool_forward_taps: identical results. Adaptive pooling takes this kernel where every bin
has the same size (the input a multiple of the output on each axis: bins are windows with
kernel = stride = size / out, no padding) and divides as adaptive pooling divides."""
import kerneldsl as kd

from .forward import average, fold_tap, taps_window
from .window import quotient, span


@kd.func
def row_window(x, q_base, col, lines, oks, zw, ID, IH, IW, PW, DW, KW, SW, where, MAX, MASKED):
    """(max or sum, position of the max) of unit ow's window in one plane (`q_base` its first
    element): `lines` the in-plane offsets of the window's (depth, height) rows (clamped into
    the plane) and `oks` whether each lies inside the input; the width taps unrolled."""
    best = kd.f32(-kd.inf)
    acc = kd.f32(0)
    for t in kd.unroll(len(lines)):
        for c in kd.unroll(KW):
            w = SW * col + (c * DW - kd.i64(PW))   # (64-bit run-time terms: the taps' offsets differ by constants)
            ok = oks[t] and w >= 0 and w < IW
            pos = lines[t] + w
            v = kd.f32(0)
            if not MASKED:
                v = kd.f32(x[q_base + pos])
            elif ok:
                v = kd.f32(x[q_base + pos])
            best, where, acc = fold_tap(v, ok, pos, best, where, acc, MAX)
    return (best if MAX else acc), where


@kd.func
def window_spans(od, oh, ow, ID, IH, IW, OD, OH, OW, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW):
    """(first tap, taps) of output (od, oh, ow)'s window along each axis, and the elements of
    an input and of an output plane (64-bit)."""
    zd, cd = span(od, ID, OD, KD, SD, PD, DD, False, False)
    zh, ch = span(oh, IH, OH, KH, SH, PH, DH, False, False)
    zw, cw = span(ow, IW, OW, KW, SW, PW, DW, False, False)
    return zd, cd, zh, ch, zw, cw, kd.i64(ID * IH * IW), kd.i64(OD * OH * OW)


@kd.func
def row_outputs(x, out, indices, g, r, od, oh, lines, oks, ID, IH, IW, OD, OH, OW, PD, PH, PW, DD, DH, DW, divisor,
                KD, KH, KW, SD, SH, SW, MAX, ADAPTIVE, INCLUDE_PAD, INDICES, PLANES, BX, MASKED):
    """Every unit's output (ow) of row (od, oh) in each of the PLANES planes of group g."""
    ow = kd.cube_pos_y() * BX + kd.unit_pos_x()
    col = kd.i64(kd.cube_pos_y() * BX) + kd.unit_pos_x()   # ow in 64 bits: addresses affine in the unit
    zd, cd, zh, ch, zw, cw, plane_in, plane_out = window_spans(od, oh, ow, ID, IH, IW, OD, OH, OW, KD, KH, KW,
                                                               SD, SH, SW, PD, PH, PW, DD, DH, DW)
    for q in kd.unroll(PLANES):
        p = kd.i64(g * PLANES + q)
        r0, where = row_window(x, p * plane_in, col, lines, oks, zw, ID, IH, IW, PW, DW, KW, SW,
                               kd.i64((zd * IH + zh) * IW + zw), MAX, MASKED)
        result = r0 if MAX else average(r0, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH,
                                        PW, divisor, ADAPTIVE, INCLUDE_PAD)
        e = p * plane_out + r * OW + col
        out[e] = result
        if MAX and INDICES:
            indices[e] = where


@kd.kernel
def pool_lanes(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], rows: kd.i32,
               ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
               PD: kd.i32, PH: kd.i32, PW: kd.i32, divisor: kd.i32,
               KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int],
               SD: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
               DD: kd.Const[int], DH: kd.Const[int], DW: kd.Const[int],
               MAX: kd.Const[bool], ADAPTIVE: kd.Const[bool], INCLUDE_PAD: kd.Const[bool], INDICES: kd.Const[bool],
               PLANES: kd.Const[int], BX: kd.Const[int]):
    """out (and, for max with INDICES, indices: flat positions in a plane) of max or average
    pooling [planes, ID, IH, IW] -> [planes, OD, OH, OW], windows KD×KH×KW with strides SD,
    SH, SW (compile-time), paddings and dilations run-time (ADAPTIVE: equal bins, divided as
    adaptive pooling divides). Cube x is output row r (of `rows` = OD·OH) of plane group g
    (planes g·PLANES ..), cube y and the unit pick the column. The host guarantees that BX
    divides OW and PLANES the plane count (no masked stores). Its stride-SW loads are vector
    loads and shuffles, not gathers (kd.avoid_gathers): on a 2-core Zen 4 box, where LLVM made
    them gathers, f32 3×3 s2 p1 pooling of [64, 64, 112²] took max 20.4-20.6 -> 16.8-21.0 ms,
    average 13.1-13.5 -> 11.5-11.8, and 3×3×3 of [8, 64, 32, 56²] 44-46 -> 35 (RESULTS.md,
    session 50)."""
    kd.avoid_gathers()
    g = kd.cube_pos_x() // rows
    r = kd.cube_pos_x() - g * rows
    od = r // OH
    oh = r - od * OH
    lines = ()    # each (depth, height) tap's row: in-plane offset (clamped) and whether inside
    oks = ()
    for a in kd.unroll(KD):
        z = od * SD - PD + a * DD
        for b in kd.unroll(KH):
            y = oh * SH - PH + b * DH
            lines = lines + (kd.i64((kd.clamp(z, 0, ID - 1) * IH + kd.clamp(y, 0, IH - 1)) * IW),)
            oks = oks + (z >= 0 and z < ID and y >= 0 and y < IH,)
    # every address this cube forms (rows as clamped, columns from the first unit's first tap
    # to the last unit's last) inside the tensor: plain loads
    plane_in = kd.i64(ID * IH * IW)
    first_col = kd.cube_pos_y() * BX * SW - PW
    last_col = (kd.cube_pos_y() * BX + BX - 1) * SW - PW + (KW - 1) * DW
    lo = kd.i64(g * PLANES) * plane_in + lines[0] + first_col
    hi = kd.i64(g * PLANES + PLANES - 1) * plane_in + lines[len(lines) - 1] + last_col
    if lo >= 0 and hi < kd.i64(x.shape[0]):
        for _ in range(1):
            row_outputs(x, out, indices, g, r, od, oh, lines, oks, ID, IH, IW, OD, OH, OW, PD, PH, PW, DD, DH, DW,
                        divisor, KD, KH, KW, SD, SH, SW, MAX, ADAPTIVE, INCLUDE_PAD, INDICES, PLANES, BX, False)
    else:
        row_outputs(x, out, indices, g, r, od, oh, lines, oks, ID, IH, IW, OD, OH, OW, PD, PH, PW, DD, DH, DW,
                    divisor, KD, KH, KW, SD, SH, SW, MAX, ADAPTIVE, INCLUDE_PAD, INDICES, PLANES, BX, True)


@kd.kernel
def pool_plane_lanes(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1],
                     ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                     PD: kd.i32, PH: kd.i32, PW: kd.i32, divisor: kd.i32,
                     KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int],
                     SD: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
                     DD: kd.Const[int], DH: kd.Const[int], DW: kd.Const[int],
                     MAX: kd.Const[bool], ADAPTIVE: kd.Const[bool], INCLUDE_PAD: kd.Const[bool],
                     INDICES: kd.Const[bool], PLANES: kd.Const[int], BX: kd.Const[int]):
    """pool_lanes for output rows too narrow to fill a vector (fewer than NARROW_ROW columns):
    a cube takes every output of PLANES planes, a unit an output of the plane (o, positions
    divided through f64), so the lanes are full and the stores plain; its taps are gathers,
    as they are across a narrow row. The host guarantees that BX divides the plane's outputs
    and PLANES the plane count. Same taps, order and divisions as pool_lanes."""
    g = kd.cube_pos_x()
    o = kd.cube_pos_y() * BX + kd.unit_pos_x()
    at = kd.i64(kd.cube_pos_y() * BX) + kd.unit_pos_x()   # o in 64 bits: stores affine in the unit
    r = quotient(o, OW, True)
    ow = o - r * OW
    od = quotient(r, OH, True)
    oh = r - od * OH
    zd, cd, zh, ch, zw, cw, plane_in, plane_out = window_spans(od, oh, ow, ID, IH, IW, OD, OH, OW, KD, KH, KW,
                                                               SD, SH, SW, PD, PH, PW, DD, DH, DW)
    for q in kd.unroll(PLANES):
        p = kd.i64(g * PLANES + q)
        r0, where = taps_window(x, p * plane_in, od, oh, ow, kd.i64((zd * IH + zh) * IW + zw), ID, IH, IW, PD, PH,
                                PW, DD, DH, DW, KD, KH, KW, SD, SH, SW, MAX)
        result = r0 if MAX else average(r0, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH,
                                        PW, divisor, ADAPTIVE, INCLUDE_PAD)
        out[p * plane_out + at] = result
        if MAX and INDICES:
            indices[p * plane_out + at] = where
