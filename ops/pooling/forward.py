"""The pooling forward kernel: one unit per output element, for max, average, adaptive
average and adaptive max pooling over [planes, D, H, W] (1- and 2-D calls have leading
axes of 1), torch's semantics: NaN wins a max (the last NaN's index), the first maximum
in scan order otherwise; averages sum in F32 in scan order and divide as torch does."""
import kerneldsl as kd

from .window import padded_extent, quotient, span


@kd.func
def row_position():
    """(row, column) of this unit in a [rows, width] view: units along x take consecutive
    columns; rows run along the cube's y units and the grid's y, wrapping into z."""
    row = (kd.cube_pos_z() * kd.cube_count_y() + kd.cube_pos_y()) * kd.cube_dim_y() + kd.unit_pos_y()
    return row, kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()


@kd.func
def locate_row(rows, W, H, D, DIMS, F64=False):
    """This unit's place in a [planes, D, H, W] tensor seen as [rows, W]:
    (live, row, w, h, d, plane). Units past the end take the last element (and store
    nothing: `live` is false), so no branch surrounds a kernel's body and the cpu runtime
    keeps its values in registers; 1-/2-D calls (DIMS) divide by no depth; F64: divisions
    through f64 (window.quotient)."""
    first, col = row_position()
    live = first < rows and col < W
    row = kd.min(first, rows - 1)
    w = kd.min(col, W - 1)
    if F64:
        r = quotient(row, H, True)
        h = row - r * H
        plane = quotient(r, D, True) if DIMS == 3 else r
        d = r - plane * D if DIMS == 3 else 0
    else:
        h = row % H
        r = row // H
        d = r % D if DIMS == 3 else 0
        plane = r // D if DIMS == 3 else r
    return live, row, w, h, d, plane


@kd.func
def locate(rows, W, H, D, DIMS, F64=False):
    """locate_row with the flat index of the element instead of its row:
    (live, flat index, w, h, d, plane)."""
    live, row, w, h, d, plane = locate_row(rows, W, H, D, DIMS, F64)
    return live, kd.i64(row) * W + w, w, h, d, plane


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


@kd.func
def store(out, indices, e, live, result, where, INDICES):
    """out[e] = result (and indices[e] = where) for a live unit."""
    if live:
        out[e] = result
        if INDICES:
            indices[e] = where


@kd.kernel
def pool_forward(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], rows: kd.i32,
                 ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                 KD: kd.i32, KH: kd.i32, KW: kd.i32, SD: kd.i32, SH: kd.i32, SW: kd.i32,
                 PD: kd.i32, PH: kd.i32, PW: kd.i32, DD: kd.i32, DH: kd.i32, DW: kd.i32, divisor: kd.i32,
                 MAX: kd.Const[bool], ADAPTIVE: kd.Const[bool], WIDE: kd.Const[bool], DIMS: kd.Const[int],
                 INCLUDE_PAD: kd.Const[bool],
                 INDICES: kd.Const[bool]):
    """out[e] (and indices[e], the flat per-plane input position of a max) for output e,
    the output seen as [rows = planes·OD·OH, OW]."""
    live, e, ow, oh, od, plane = locate(rows, OW, OH, OD, DIMS)
    base = kd.i64(plane) * (kd.i64(ID) * IH * IW)
    zd, cd = span(od, ID, OD, KD, SD, PD, DD, ADAPTIVE, WIDE, DIMS == 3)
    zh, ch = span(oh, IH, OH, KH, SH, PH, DH, ADAPTIVE, WIDE, DIMS >= 2)
    zw, cw = span(ow, IW, OW, KW, SW, PW, DW, ADAPTIVE, WIDE)
    best = kd.f32(-kd.inf)
    where = kd.i64((zd * IH + zh) * IW + zw)
    acc = kd.f32(0)
    for a in range(cd):
        plane_row = (zd + a * DD) * IH
        for b in range(ch):
            line = kd.i64((plane_row + zh + b * DH) * IW)
            for c in range(cw):
                pos = line + zw + c * DW
                v = kd.f32(x[base + pos])
                if MAX:
                    if v > best or kd.isnan(v):
                        best = v
                        where = pos
                else:
                    acc += v
    result = best if MAX else average(acc, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH, PW,
                                      divisor, ADAPTIVE, INCLUDE_PAD)
    store(out, indices, e, live, result, where, MAX and INDICES)


@kd.func
def fold_tap(v, ok, pos, best, where, acc, MAX):
    """One tap (`ok`: inside the input) into a window's running max and its position (the
    first max, a NaN taking over, as torch's) or into its sum, with selects, not branches."""
    if MAX:
        take = ok and (v > best or kd.isnan(v))
        best = kd.select(take, v, best)
        where = kd.select(take, pos, where)
    else:
        acc += kd.select(ok, v, kd.f32(0))
    return best, where, acc


@kd.func
def taps_window(x, base, od, oh, ow, where, ID, IH, IW, PD, PH, PW, DD, DH, DW, KD, KH, KW, SD, SH, SW, MAX):
    """(max or sum, flat position of the max: `where` if no tap beats -inf) over output
    (od, oh, ow)'s window, every tap unrolled and taps outside the input masked instead of
    skipped: straight-line code (vectorised across units on the cpu runtime; on a GPU the
    windows of a unit's neighbouring outputs share loads). A branch for windows wholly inside
    the input was slower on the H200 (0.122 -> 0.146 ms, bf16 [64, 64, 112²] 3×3 s2): it
    keeps the two windows' shared loads apart."""
    best = kd.f32(-kd.inf)
    acc = kd.f32(0)
    for a in kd.unroll(KD):
        z = od * SD - PD + a * DD
        for b in kd.unroll(KH):
            y = oh * SH - PH + b * DH
            for c in kd.unroll(KW):
                w = ow * SW - PW + c * DW
                ok = z >= 0 and z < ID and y >= 0 and y < IH and w >= 0 and w < IW
                pos = kd.i64((kd.clamp(z, 0, ID - 1) * IH + kd.clamp(y, 0, IH - 1)) * IW + kd.clamp(w, 0, IW - 1))
                best, where, acc = fold_tap(kd.f32(x[base + pos]), ok, pos, best, where, acc, MAX)
    return (best if MAX else acc), where


@kd.kernel
def pool_forward_taps(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], rows: kd.i32,
                      ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                      PD: kd.i32, PH: kd.i32, PW: kd.i32, DD: kd.i32, DH: kd.i32, DW: kd.i32, divisor: kd.i32,
                      KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int],
                      SD: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
                      MAX: kd.Const[bool], DIMS: kd.Const[int], INCLUDE_PAD: kd.Const[bool], INDICES: kd.Const[bool],
                      OUTS: kd.Const[int], F64: kd.Const[bool] = False):
    """pool_forward for small pooling windows whose sizes and strides are compile-time:
    every tap unrolled, taps outside the input masked instead of skipped. Same scan order,
    same sums. A unit takes OUTS neighbouring outputs of a row (the launch's x extent covers
    ceil(OW / OUTS) units a row): on a GPU their windows share loads and the unit's position
    arithmetic, which bound this kernel there (it is instruction-bound, not memory-bound).
    F64: positions divided through f64 (window.quotient; devices whose units are SIMD lanes)."""
    live0, row, col, oh, od, plane = locate_row(rows, (OW + OUTS - 1) // OUTS, OH, OD, DIMS, F64)
    base = kd.i64(plane) * (kd.i64(ID) * IH * IW)
    zd, cd = span(od, ID, OD, KD, SD, PD, DD, False, False, DIMS == 3)
    zh, ch = span(oh, IH, OH, KH, SH, PH, DH, False, False, DIMS >= 2)
    for o in kd.unroll(OUTS):
        ow = kd.min(col * OUTS + o, OW - 1)
        live = live0 and col * OUTS + o < OW
        zw, cw = span(ow, IW, OW, KW, SW, PW, DW, False, False)
        r, where = taps_window(x, base, od, oh, ow, kd.i64((zd * IH + zh) * IW + zw), ID, IH, IW, PD, PH, PW,
                               DD, DH, DW, KD, KH, KW, SD, SH, SW, MAX)
        result = r if MAX else average(r, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH, PW,
                                       divisor, False, INCLUDE_PAD)
        store(out, indices, kd.i64(row) * OW + ow, live, result, where, MAX and INDICES)


@kd.kernel
def pool_forward_masked(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], rows: kd.i32,
                        ID: kd.i32, IH: kd.i32, IW: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32,
                        KD: kd.i32, KH: kd.i32, KW: kd.i32, SD: kd.i32, SH: kd.i32, SW: kd.i32,
                        PD: kd.i32, PH: kd.i32, PW: kd.i32, DD: kd.i32, DH: kd.i32, DW: kd.i32, divisor: kd.i32,
                        TD: kd.i32, TH: kd.i32, TW: kd.i32,
                        MAX: kd.Const[bool], ADAPTIVE: kd.Const[bool], WIDE: kd.Const[bool], DIMS: kd.Const[int],
                        INCLUDE_PAD: kd.Const[bool], INDICES: kd.Const[bool]):
    """pool_forward for devices whose units are SIMD lanes: the loops over a window run to the
    most taps any window has on each axis (TD, TH, TW: uniform bounds, so the cpu runtime
    hoists them and runs each tap as one vector step across the cube's units), taps past a
    window's own count masked (a read clamped into the input, a +0 to a sum, no max). Same
    taps in the same scan order, same sums, same maximum and index as pool_forward. Its
    positions and adaptive bins divide through f64 (window.quotient: vector divisions)."""
    live, e, ow, oh, od, plane = locate(rows, OW, OH, OD, DIMS, True)
    base = kd.i64(plane) * (kd.i64(ID) * IH * IW)
    zd, cd = span(od, ID, OD, KD, SD, PD, DD, ADAPTIVE, WIDE, DIMS == 3, True)
    zh, ch = span(oh, IH, OH, KH, SH, PH, DH, ADAPTIVE, WIDE, DIMS >= 2, True)
    zw, cw = span(ow, IW, OW, KW, SW, PW, DW, ADAPTIVE, WIDE, True, True)
    best = kd.f32(-kd.inf)
    where = kd.i64((zd * IH + zh) * IW + zw)
    acc = kd.f32(0)
    for a in range(TD):
        for b in range(TH):
            for c in range(TW):
                ok = a < cd and b < ch and c < cw
                z = kd.min(zd + a * DD, ID - 1)
                y = kd.min(zh + b * DH, IH - 1)
                w = kd.min(zw + c * DW, IW - 1)
                pos = kd.i64((z * IH + y) * IW + w)
                best, where, acc = fold_tap(kd.f32(x[base + pos]), ok, pos, best, where, acc, MAX)
    result = best if MAX else average(acc, od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW, SD, SH, SW, PD, PH, PW,
                                      divisor, ADAPTIVE, INCLUDE_PAD)
    store(out, indices, e, live, result, where, MAX and INDICES)


@kd.kernel
def widen(x: kd.Tensor, y: kd.Tensor, n: kd.i64):
    """y[i] = x[i] as f32 for i < n, a unit an element along x of a 1-D grid wrapping into y:
    2-byte inputs copied to f32 before the forward kernels on devices whose units are SIMD
    lanes (their taps are strided across units: gathers, which those devices do not have for
    2-byte elements; the copy is exact)."""
    i = (kd.i64(kd.cube_pos_y()) * kd.cube_count_x() + kd.cube_pos_x()) * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        y[i] = kd.f32(x[i])
