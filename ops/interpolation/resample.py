"""The interpolation kernels. `axis_table` writes each axis's taps once ([O, T] indices and
F32 weights, from taps.py); the forward kernel (outputs) and the backward kernel (input
elements) then only read tables, so no element repeats the source-coordinate arithmetic
(divisions, sines).

Both work on 4-D contiguous views [planes, D, H, W] (an input with fewer spatial axes has
leading axes of size 1, mode "Off"). A cube covers part of one row (d, h) of a group of
planes, so the row's index arithmetic and its depth/height taps are uniform over the cube,
and a unit reuses its taps in each plane of the group, as torch's kernels loop over planes
with the same weights and offsets. The backward kernel visits, along each axis, only the
outputs [lo, hi] that tuning.touch_ranges lists for the input index and weighs each with
the table entries that land on it: a fixed-order sum per input element, so the result
never depends on launch order (no atomics)."""
from __future__ import annotations

import kerneldsl as kd

from ..normalization.device import vec_of
from .taps import axis_taps


@kd.kernel
def axis_table(idx: kd.Tensor[kd.i32, 2], w: kd.Tensor[kd.f32, 2], size_in: kd.i32, scale: kd.f32,
               MODE: kd.Const[str], ALIGN: kd.Const[bool], BX: kd.Const[int]):
    """idx[j, :], w[j, :] = the taps of output index j along one axis."""
    j = kd.cube_pos_x() * BX + kd.unit_pos_x()
    if j < idx.shape[0]:
        taps = axis_taps(j, size_in, idx.shape[0], scale, MODE, ALIGN)
        T = len(taps) // 2
        for k in kd.unroll(T):
            idx[j, k] = taps[k]
            w[j, k] = taps[T + k]


@kd.func
def weight_on(idx, w, j, i, T):
    """The weight output j gives input i along an axis (sum over its taps that land on i)."""
    s = kd.f32(0)
    for k in kd.unroll(T):
        s += kd.select(idx[j, k] == i, w[j, k], 0.0)
    return s


@kd.kernel
def resample_forward(x: kd.Tensor, y: kd.Tensor, id_: kd.Tensor[kd.i32, 2], wd: kd.Tensor[kd.f32, 2],
                     ih: kd.Tensor[kd.i32, 2], wh: kd.Tensor[kd.f32, 2], iw: kd.Tensor[kd.i32, 2],
                     ww: kd.Tensor[kd.f32, 2], rows: kd.i32, TD: kd.Const[int], TH: kd.Const[int],
                     TW: kd.Const[int], OUTS: kd.Const[int], PLANES: kd.Const[int], VEC: kd.Const[bool],
                     WIDE: kd.Const[bool], BX: kd.Const[int]):
    """y = x resampled, both contiguous [planes, D, H, W]. Cube x is output row r (of the
    `rows` = D·H a plane) of plane group g (planes g·PLANES ..); cube y and the unit pick
    OUTS neighbouring columns. A unit reads its row's and its columns' taps once and reuses
    them in each of its PLANES planes (torch's kernel loops over planes the same way);
    VEC (the host checked the width is a multiple of OUTS): its OUTS outputs are stored as
    one vector. Every plane's values are computed before any is stored, so the loads of all
    planes can be in flight together (a store between them would order them: x and y are
    not known apart). WIDE: element offsets need 64 bits (else 32-bit index arithmetic)."""
    g = kd.cube_pos_x() // rows
    r = kd.cube_pos_x() - g * rows
    od = r // y.shape[2]
    oh = r - od * y.shape[2]
    W = y.shape[3]
    ow0 = (kd.cube_pos_y() * BX + kd.unit_pos_x()) * OUTS
    line_offsets = ()   # in-plane offset of each (depth, height) tap's input row, and its weight
    line_weights = ()
    for a in kd.unroll(TD):
        for b in kd.unroll(TH):
            line_offsets = line_offsets + ((id_[od, a] * x.shape[2] + ih[oh, b]) * x.shape[3],)
            line_weights = line_weights + (wd[od, a] * wh[oh, b],)
    columns = ()        # each output's width taps: input column and weight (the last column for units past W)
    column_weights = ()
    for j in kd.unroll(OUTS):
        ow = kd.min(ow0 + j, W - 1)
        for c in kd.unroll(TW):
            columns = columns + (iw[ow, c],)
            column_weights = column_weights + (ww[ow, c],)
    plane_in = x.shape[1] * x.shape[2] * x.shape[3]
    plane_out = y.shape[1] * y.shape[2] * W
    at_out = r * W + ow0
    values = ()         # every plane's outputs, all loads first: no store comes between them
    for q in kd.unroll(PLANES):
        p = kd.min(g * PLANES + q, x.shape[0] - 1)   # (a group's planes past the last read the last)
        base = kd.i64(p) * plane_in if WIDE else p * plane_in
        for j in kd.unroll(OUTS):
            acc = kd.f32(0)
            for t in kd.unroll(TD * TH):
                row = kd.f32(0)
                for c in kd.unroll(TW):
                    k = j * TW + c
                    row += column_weights[k] * kd.f32(x[base + (line_offsets[t] + columns[k])])
                acc += line_weights[t] * row
            values = values + (acc,)
    for q in kd.unroll(PLANES):
        p = g * PLANES + q
        if p < x.shape[0]:
            first = (kd.i64(p) * plane_out if WIDE else p * plane_out) + at_out
            if VEC:
                mine = ()
                for j in kd.unroll(OUTS):
                    mine = mine + (values[q * OUTS + j],)
                if ow0 < W:
                    kd.store_vec(y, first, vec_of(mine, OUTS))
            else:
                for j in kd.unroll(OUTS):
                    if ow0 + j < W:
                        y[first + j] = values[q * OUTS + j]


@kd.func
def line_sums(g, bases, line, rw, iw, ww, col, TW, SPAN, PLANES):
    """Each plane's weighted sum of the outputs lo..hi (in order; rw's range for input column
    `col`) of one output line of g for that column. SPAN > 0 (the host's bound on hi - lo + 1): unrolled, a column
    past hi reading column hi and leaving the sums as they were, so every load can be in
    flight at once; SPAN 0: a loop."""
    row = ()
    for q in kd.unroll(PLANES):
        row = row + (kd.f32(0),)
    lo = rw[2 * col]
    hi = rw[2 * col + 1]
    if SPAN > 0:
        for k in kd.unroll(SPAN):
            jw = kd.max(kd.min(lo + k, hi), 0)   # (hi < lo, even -1, where no output touches the input)
            w = weight_on(iw, ww, jw, col, TW)
            summed = ()
            for q in kd.unroll(PLANES):
                summed = summed + (kd.select(lo + k <= hi, row[q] + w * kd.f32(g[bases[q] + (line + jw)]), row[q]),)
            row = summed
    else:
        for jw in range(lo, hi + 1):
            w = weight_on(iw, ww, jw, col, TW)
            summed = ()
            for q in kd.unroll(PLANES):
                summed = summed + (row[q] + w * kd.f32(g[bases[q] + (line + jw)]),)
            row = summed
    return row


@kd.func
def add_line(acc, live, a, g, bases, jd, jh, i_h, ih, wh, TH, rw, iw, ww, col, TW, SPAN_W, PLANES):
    """acc (each plane's sum) plus output line (jd, jh)'s share, weighted a · b (b: that line's
    weight on input row i_h), where `live` and b is not 0 (else acc as it was; the line is
    read either way, so an unrolled walk has no branch)."""
    b = weight_on(ih, wh, jh, i_h, TH)
    row = line_sums(g, bases, (jd * g.shape[2] + jh) * g.shape[3], rw, iw, ww, col, TW, SPAN_W, PLANES)
    summed = ()
    for q in kd.unroll(PLANES):
        summed = summed + (kd.select(live and b != 0.0, acc[q] + a * b * row[q], acc[q]),)
    return summed


@kd.kernel
def resample_backward(g: kd.Tensor, dx: kd.Tensor, rd: kd.Tensor[kd.i32, 1], rh: kd.Tensor[kd.i32, 1],
                      rw: kd.Tensor[kd.i32, 1], id_: kd.Tensor[kd.i32, 2], wd: kd.Tensor[kd.f32, 2],
                      ih: kd.Tensor[kd.i32, 2], wh: kd.Tensor[kd.f32, 2], iw: kd.Tensor[kd.i32, 2],
                      ww: kd.Tensor[kd.f32, 2], rows: kd.i32, TD: kd.Const[int], TH: kd.Const[int],
                      TW: kd.Const[int], SPAN_H: kd.Const[int], SPAN_W: kd.Const[int], PLANES: kd.Const[int],
                      WIDE: kd.Const[bool], BX: kd.Const[int]):
    """dx = the adjoint of the forward map applied to g, both contiguous [planes, D, H, W]
    (dx the input's shape). Cube x is input row r (of the `rows` = D·H a plane) of plane group
    c (planes c·PLANES ..); cube y and the unit pick the column. A unit walks the outputs
    whose taps can touch its element once, weighing each as the tables say, and sums each of
    its PLANES planes in that fixed order; all stores come after all loads. SPAN_H, SPAN_W:
    the host's bound on the outputs a height / width index touches (unrolled), 0 for a loop.
    WIDE: element offsets need 64 bits."""
    c = kd.cube_pos_x() // rows
    r = kd.cube_pos_x() - c * rows
    i_d = r // dx.shape[2]
    i_h = r - i_d * dx.shape[2]
    W = dx.shape[3]
    i_w = kd.cube_pos_y() * BX + kd.unit_pos_x()
    col = kd.min(i_w, W - 1)   # units past the row compute the last column's sums and store nothing
    plane_g = g.shape[1] * g.shape[2] * g.shape[3]
    bases = ()
    acc = ()
    for q in kd.unroll(PLANES):
        p = kd.min(c * PLANES + q, g.shape[0] - 1)   # (a group's planes past the last read the last)
        bases = bases + ((kd.i64(p) * plane_g if WIDE else p * plane_g),)
        acc = acc + (kd.f32(0),)
    for jd in range(rd[2 * i_d], rd[2 * i_d + 1] + 1):
        a = weight_on(id_, wd, jd, i_d, TD)
        if a != 0.0:
            lo_h = rh[2 * i_h]
            hi_h = rh[2 * i_h + 1]
            if SPAN_H > 0:   # (a line past hi_h reads line hi_h and adds nothing)
                for k in kd.unroll(SPAN_H):
                    acc = add_line(acc, lo_h + k <= hi_h, a, g, bases, jd, kd.max(kd.min(lo_h + k, hi_h), 0), i_h, ih,
                                   wh, TH, rw, iw, ww, col, TW, SPAN_W, PLANES)
            else:              # a line of weight 0 (the ranges' margin) is skipped, not read
                for jh in range(lo_h, hi_h + 1):
                    b = weight_on(ih, wh, jh, i_h, TH)
                    if b != 0.0:
                        row = line_sums(g, bases, (jd * g.shape[2] + jh) * g.shape[3], rw, iw, ww, col, TW, SPAN_W,
                                        PLANES)
                        summed = ()
                        for q in kd.unroll(PLANES):
                            summed = summed + (acc[q] + a * b * row[q],)
                        acc = summed
    plane_dx = dx.shape[1] * dx.shape[2] * W
    for q in kd.unroll(PLANES):
        p = c * PLANES + q
        if p < dx.shape[0] and i_w < W:
            dx[(kd.i64(p) * plane_dx if WIDE else p * plane_dx) + (r * W + i_w)] = acc[q]
