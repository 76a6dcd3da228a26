"""The interpolation kernels. `axis_table` writes each axis's taps once ([O, T] indices and
F32 weights, from taps.py); the forward kernel (one unit per output element) and the
backward kernel (one unit per input element) then only read tables, so no element repeats
the source-coordinate arithmetic (divisions, sines).

Both work on 4-D contiguous views [planes, D, H, W] (an input with fewer spatial axes has
leading axes of size 1, mode "Off"); a cube covers part of one row (plane, d, h), so the
row's index arithmetic and its depth/height taps are uniform over the cube. The backward
kernel visits, along each axis, only the outputs [lo, hi] that tuning.touch_ranges lists
for the input index and weighs each with the table entries that land on it: a fixed-order
sum per input element, so the result never depends on launch order (no atomics)."""
from __future__ import annotations

import kerneldsl as kd

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
def row_and_column(t, BX):
    """(plane, d, h, w) of this unit in the 4-D tensor t: cube x is one row (plane, d, h),
    uniform over the cube, so the index arithmetic runs once a cube; cube y and the unit
    pick the column w."""
    r = kd.cube_pos_x()
    h = r % t.shape[2]
    r = r // t.shape[2]
    return (r // t.shape[1], r % t.shape[1], h, kd.cube_pos_y() * BX + kd.unit_pos_x())


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
                     ww: kd.Tensor[kd.f32, 2], TD: kd.Const[int], TH: kd.Const[int], TW: kd.Const[int],
                     BX: kd.Const[int]):
    p, od, oh, ow = row_and_column(y, BX)
    if ow < y.shape[3]:
        acc = kd.f32(0)
        for a in kd.unroll(TD):
            for b in kd.unroll(TH):
                row = kd.f32(0)
                for c in kd.unroll(TW):
                    row += ww[ow, c] * kd.f32(x[p, id_[od, a], ih[oh, b], iw[ow, c]])
                acc += wd[od, a] * wh[oh, b] * row
        y[p, od, oh, ow] = acc


@kd.kernel
def resample_backward(g: kd.Tensor, dx: kd.Tensor, rd: kd.Tensor[kd.i32, 1], rh: kd.Tensor[kd.i32, 1],
                      rw: kd.Tensor[kd.i32, 1], id_: kd.Tensor[kd.i32, 2], wd: kd.Tensor[kd.f32, 2],
                      ih: kd.Tensor[kd.i32, 2], wh: kd.Tensor[kd.f32, 2], iw: kd.Tensor[kd.i32, 2],
                      ww: kd.Tensor[kd.f32, 2], TD: kd.Const[int], TH: kd.Const[int], TW: kd.Const[int],
                      BX: kd.Const[int]):
    p, i_d, i_h, i_w = row_and_column(dx, BX)
    if i_w < dx.shape[3]:
        acc = kd.f32(0)
        for jd in range(rd[2 * i_d], rd[2 * i_d + 1] + 1):
            a = weight_on(id_, wd, jd, i_d, TD)
            if a != 0.0:
                for jh in range(rh[2 * i_h], rh[2 * i_h + 1] + 1):
                    b = weight_on(ih, wh, jh, i_h, TH)
                    if b != 0.0:
                        row = kd.f32(0)
                        for jw in range(rw[2 * i_w], rw[2 * i_w + 1] + 1):
                            row += weight_on(iw, ww, jw, i_w, TW) * kd.f32(g[p, jd, jh, jw])
                        acc += a * b * row
        dx[p, i_d, i_h, i_w] = acc
