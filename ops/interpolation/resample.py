"""The interpolation kernels: one unit per output element gathers its taps (forward), and
one unit per input element gathers the output gradients whose taps touch it (backward).

Both work on 4-D contiguous views [planes, D, H, W] (an input with fewer spatial axes has
leading axes of size 1, mode "Off"). The backward kernel visits, along each axis, only
the outputs [lo, hi] that tuning.touch_ranges lists for the input index, and weighs each
with taps.axis_weight: a fixed-order sum per input element, so the result never depends
on launch order (no atomics)."""
from __future__ import annotations

import kerneldsl as kd

from .taps import axis_taps, axis_weight


@kd.func
def split4(e, t):
    """(plane, d, h, w) of flat element e of the 4-D tensor t."""
    w = e % t.shape[3]
    r = e // t.shape[3]
    h = r % t.shape[2]
    r = r // t.shape[2]
    return (r // t.shape[1], r % t.shape[1], h, w)


@kd.kernel
def resample_forward(x: kd.Tensor, y: kd.Tensor, total: kd.i32, sd: kd.f32, sh: kd.f32, sw: kd.f32,
                     MD: kd.Const[str], MH: kd.Const[str], MW: kd.Const[str], ALIGN: kd.Const[bool],
                     BX: kd.Const[int]):
    e = kd.cube_pos_x() * BX + kd.unit_pos_x()
    if e < total:
        p, od, oh, ow = split4(e, y)
        td = axis_taps(od, x.shape[1], y.shape[1], sd, MD, ALIGN)
        th = axis_taps(oh, x.shape[2], y.shape[2], sh, MH, ALIGN)
        tw = axis_taps(ow, x.shape[3], y.shape[3], sw, MW, ALIGN)
        TD = len(td) // 2
        TH = len(th) // 2
        TW = len(tw) // 2
        acc = kd.f32(0)
        for a in kd.unroll(TD):
            for b in kd.unroll(TH):
                row = kd.f32(0)
                for c in kd.unroll(TW):
                    row += tw[TW + c] * kd.f32(x[p, td[a], th[b], tw[c]])
                acc += td[TD + a] * th[TH + b] * row
        y[p, od, oh, ow] = acc


@kd.kernel
def resample_backward(g: kd.Tensor, dx: kd.Tensor, rd: kd.Tensor[kd.i32, 1], rh: kd.Tensor[kd.i32, 1],
                      rw: kd.Tensor[kd.i32, 1], total: kd.i32, sd: kd.f32, sh: kd.f32, sw: kd.f32,
                      MD: kd.Const[str], MH: kd.Const[str], MW: kd.Const[str], ALIGN: kd.Const[bool],
                      BX: kd.Const[int]):
    e = kd.cube_pos_x() * BX + kd.unit_pos_x()
    if e < total:
        p, i_d, i_h, i_w = split4(e, dx)
        acc = kd.f32(0)
        for jd in range(rd[2 * i_d], rd[2 * i_d + 1] + 1):
            wd = axis_weight(jd, i_d, dx.shape[1], g.shape[1], sd, MD, ALIGN)
            if wd != 0.0:
                for jh in range(rh[2 * i_h], rh[2 * i_h + 1] + 1):
                    wh = axis_weight(jh, i_h, dx.shape[2], g.shape[2], sh, MH, ALIGN)
                    if wh != 0.0:
                        row = kd.f32(0)
                        for jw in range(rw[2 * i_w], rw[2 * i_w + 1] + 1):
                            ww = axis_weight(jw, i_w, dx.shape[3], g.shape[3], sw, MW, ALIGN)
                            row += ww * kd.f32(g[p, jd, jh, jw])
                        acc += wd * wh * row
        dx[p, i_d, i_h, i_w] = acc
