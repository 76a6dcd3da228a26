"""The grid_sample kernels: one unit per grid point computes its taps once (coords.py) and
loops over the channels. Forward: the weighted sum of the taps. Backward: the grid
gradient (per point, summed over channels in order: no scatter) and the input gradient,
scattered through fixed_point.add_fixed (deterministic).

Tensors are 5-D views: input [N, C, D, H, W], grid [N, Do, Ho, Wo, dims], output
[N, C, Do, Ho, Wo]; a 2-D call has D = Do = 1 and its depth axis is "Off"."""
from __future__ import annotations

import kerneldsl as kd

from .coords import axis_taps
from .fixed_point import add_fixed, fixed_scale, track_abs_max
from .gate import gate_open

UNROLL = 4  # channels the forward kernel samples per loop step


@kd.func
def point(e, y):
    """(n, do, ho, wo) of grid point e, for an output y [N, C, Do, Ho, Wo]."""
    w = e % y.shape[4]
    r = e // y.shape[4]
    h = r % y.shape[3]
    r = r // y.shape[3]
    return (r // y.shape[2], r % y.shape[2], h, w)


def tap_layout(length: int, dims: int) -> tuple:
    """(taps along z, taps along y and x, where the z, y and x parts of point_taps' tuple
    start); plain Python, run at compile time. Each part is 4T + 1 long (coords.axis_taps)."""
    tz = 1 if dims == 2 else (length - 3) // 12
    tx = (length - 3 - 4 * tz) // 8
    return tz, tx, 0, 4 * tz + 1, 4 * tz + 1 + 4 * tx + 1


@kd.func
def point_taps(grid, n, od, oh, ow, size_d, size_h, size_w, MODE, pad_mode, align, DIMS):
    """The (depth, height, width) taps of one grid point."""
    tx = axis_taps(kd.f32(grid[n, od, oh, ow, 0]), size_w, MODE, pad_mode, align)
    ty = axis_taps(kd.f32(grid[n, od, oh, ow, 1]), size_h, MODE, pad_mode, align)
    if DIMS == 3:
        tz = axis_taps(kd.f32(grid[n, od, oh, ow, 2]), size_d, MODE, pad_mode, align)
    else:
        tz = axis_taps(kd.f32(0.0), 1, "Off", pad_mode, align)
    return tz + ty + tx


@kd.func
def channel_sample(x, t, n, c, TZ, TX, Z, Y, X):
    """The sample of channel c at one grid point, from its taps t (point_taps)."""
    acc = kd.f32(0)
    for a in kd.unroll(TZ):
        for b in kd.unroll(TX):
            for k in kd.unroll(TX):
                ok = t[Z + 3 * TZ + a] and t[Y + 3 * TX + b] and t[X + 3 * TX + k]
                v = kd.select(ok, kd.f32(x[n, c, t[Z + a], t[Y + b], t[X + k]]), 0.0)
                acc += t[Z + TZ + a] * t[Y + TX + b] * t[X + TX + k] * v
    return acc


@kd.func
def tiled_point(y, BX, TW):
    """(inside, n, do, ho, wo) of this unit's grid point where a cube takes a tile of
    BX / TW rows of TW points of one output plane (tiles of a plane in row order)."""
    TH = BX // TW
    tiles_w = (y.shape[4] + TW - 1) // TW
    tiles_h = (y.shape[3] + TH - 1) // TH
    q = kd.cube_pos_x()
    tw = q % tiles_w
    q = q // tiles_w
    th = q % tiles_h
    q = q // tiles_h
    u = kd.unit_pos_x()
    oh = th * TH + u // TW
    ow = tw * TW + u % TW
    return (oh < y.shape[3] and ow < y.shape[4], q // y.shape[2], q % y.shape[2], oh, ow)


@kd.func
def unit_point(y, total, BX, TW):
    """(inside, n, do, ho, wo): flat grid points a cube (TW = 0), or tiles (tiled_point)."""
    if TW == 0:
        e = kd.cube_pos_x() * BX + kd.unit_pos_x()
        where = (e < total,) + point(kd.min(e, total - 1), y)
    else:
        where = tiled_point(y, BX, TW)
    return where


@kd.kernel
def sample_forward(x: kd.Tensor, grid: kd.Tensor, y: kd.Tensor, total: kd.i32, pad_mode: kd.i32, align: kd.i32,
                   MODE: kd.Const[str], DIMS: kd.Const[int], BX: kd.Const[int], TW: kd.Const[int]):
    """y = the samples of x at grid's points: a unit a point (BX a cube: flat points where
    TW = 0, else a tile of BX / TW rows of TW points, whose taps fall closer together on a
    smooth grid), all its channels."""
    inside, n, od, oh, ow = unit_point(y, total, BX, TW)
    if inside:
        t = point_taps(grid, n, od, oh, ow, x.shape[2], x.shape[3], x.shape[4], MODE, pad_mode, align, DIMS)
        TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
        channels = x.shape[1]
        whole = channels - channels % UNROLL
        for c0 in range(0, whole, UNROLL):  # UNROLL channels at once: their loads are independent
            for u in kd.unroll(UNROLL):
                y[n, c0 + u, od, oh, ow] = channel_sample(x, t, n, c0 + u, TZ, TX, Z, Y, X)
        for c in range(whole, channels):
            y[n, c, od, oh, ow] = channel_sample(x, t, n, c, TZ, TX, Z, Y, X)


@kd.func
def tap_gradient(t, v, go, a, b, k, gx, gy, gz, TZ, TX, Z, Y, X):
    """(gx, gy, gz) plus tap (a, b, k)'s grid-gradient terms (its weight slopes times value v
    and out_grad go), and the tap's weight wz·wy·wx (for its input-gradient contribution)."""
    wz = t[Z + TZ + a]
    wy = t[Y + TX + b]
    wx = t[X + TX + k]
    gx += v * t[X + 2 * TX + k] * wy * wz * go
    gy += v * t[Y + 2 * TX + b] * wx * wz * go
    gz += v * t[Z + 2 * TZ + a] * wx * wy * go
    return gx, gy, gz, wz * wy * wx


@kd.func
def tap_values(x, t, n, c, TZ, TX, Z, Y, X):
    """Channel c's values at every tap of a point (0 where the tap is outside), in tap order."""
    vs = ()
    for a in kd.unroll(TZ):
        for b in kd.unroll(TX):
            for k in kd.unroll(TX):
                ok = t[Z + 3 * TZ + a] and t[Y + 3 * TX + b] and t[X + 3 * TX + k]
                vs = vs + (kd.select(ok, kd.f32(x[n, c, t[Z + a], t[Y + b], t[X + k]]), 0.0),)
    return vs


@kd.func
def point_gradient(x, grid, g, grad_grid, lo, hi, flags, scale, e, pad_mode, align, MODE, DIMS, SCATTER, MAX=False,
                   CU=1):
    """Grid point e's grid gradient (its taps' slopes against out_grad, summed over the
    channels in order) and, with SCATTER, its input-gradient contributions added to lo / hi /
    flags at `scale` (fixed_point.add_fixed); without, lo / hi / flags / scale are not read.
    Returns fixed_point.track_abs_max's (m, bad) over the point's out_grad values with MAX,
    else (0, 0). CU > 1 (SCATTER off): CU channels a step, all their loads issued before
    their terms are added (in the same order: the same bits)."""
    m = kd.f32(0)
    bad = 0
    n, od, oh, ow = point(e, g)
    t = point_taps(grid, n, od, oh, ow, x.shape[2], x.shape[3], x.shape[4], MODE, pad_mode, align, DIMS)
    TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
    gx = kd.f32(0)
    gy = kd.f32(0)
    gz = kd.f32(0)
    size_d = x.shape[2]
    size_h = x.shape[3]
    size_w = x.shape[4]
    whole = 0
    if CU > 1 and not SCATTER:
        whole = x.shape[1] - x.shape[1] % CU
        for c0 in range(0, whole, CU):
            gos = ()
            vals = ()
            for u in kd.unroll(CU):
                gos = gos + (kd.f32(g[n, c0 + u, od, oh, ow]),)
                vals = vals + (tap_values(x, t, n, c0 + u, TZ, TX, Z, Y, X),)
            for u in kd.unroll(CU):
                if MAX:
                    m, bad = track_abs_max(m, bad, gos[u])
                for a in kd.unroll(TZ):
                    for b in kd.unroll(TX):
                        for k in kd.unroll(TX):
                            gx, gy, gz, w = tap_gradient(t, vals[u][(a * TX + b) * TX + k], gos[u], a, b, k, gx, gy,
                                                         gz, TZ, TX, Z, Y, X)
    for c in range(whole, x.shape[1]):
        go = kd.f32(g[n, c, od, oh, ow])
        if MAX:
            m, bad = track_abs_max(m, bad, go)
        plane = (kd.i64(n) * x.shape[1] + c) * size_d
        for a in kd.unroll(TZ):
            for b in kd.unroll(TX):
                for k in kd.unroll(TX):
                    ok = t[Z + 3 * TZ + a] and t[Y + 3 * TX + b] and t[X + 3 * TX + k]
                    v = kd.select(ok, kd.f32(x[n, c, t[Z + a], t[Y + b], t[X + k]]), 0.0)
                    gx, gy, gz, w = tap_gradient(t, v, go, a, b, k, gx, gy, gz, TZ, TX, Z, Y, X)
                    if SCATTER and ok:
                        at = ((plane + t[Z + a]) * size_h + t[Y + b]) * size_w + t[X + k]
                        add_fixed(lo, hi, flags, at, w * go, scale)
    grad_grid[n, od, oh, ow, 0] = gx * t[X + 4 * TX]
    grad_grid[n, od, oh, ow, 1] = gy * t[Y + 4 * TX]
    if DIMS == 3:
        grad_grid[n, od, oh, ow, 2] = gz * t[Z + 4 * TZ]
    return m, bad


@kd.kernel
def sample_backward(x: kd.Tensor, grid: kd.Tensor, g: kd.Tensor, grad_grid: kd.Tensor,
                    lo: kd.Tensor[kd.u32, 1], hi: kd.Tensor[kd.i32, 1], flags: kd.Tensor[kd.u32, 1],
                    max_bits: kd.Tensor[kd.u32, 1], total: kd.i32, pad_mode: kd.i32, align: kd.i32,
                    MODE: kd.Const[str], DIMS: kd.Const[int], HEADROOM: kd.Const[int], BX: kd.Const[int],
                    SCATTER: kd.Const[bool], gate: kd.Tensor[kd.u32, 1], limit: kd.i32,
                    WHEN: kd.Const[int], MAX: kd.Const[bool], CU: kd.Const[int]):
    """A unit a grid point: its grid gradient, and (SCATTER) its input-gradient contributions
    added to lo / hi / flags (SCATTER False: untouched; backward_gather.py sums them). With
    MAX (SCATTER off), also fixed_point.abs_max_bits' work on g into max_bits (zeroed first):
    the units read every out_grad value anyway, so the gather's scale costs no pass of its
    own. gate, limit, WHEN: gate.py. CU: channels a step (point_gradient; SCATTER off)."""
    if gate_open(gate, limit, WHEN):   # (gate.py: the other form of the call was chosen)
        e = kd.cube_pos_x() * BX + kd.unit_pos_x()
        m = kd.f32(0)
        bad = 0
        if e < total:
            if MAX:   # (it writes max_bits, and SCATTER is off: no scale is read)
                m, bad = point_gradient(x, grid, g, grad_grid, lo, hi, flags, kd.f64(0), e, pad_mode, align, MODE,
                                        DIMS, False, True, CU)
            else:
                point_gradient(x, grid, g, grad_grid, lo, hi, flags, fixed_scale(max_bits[0], HEADROOM), e, pad_mode,
                               align, MODE, DIMS, SCATTER, False, CU)
        if MAX:   # (the gate is the same for every unit of a cube: all of them reach the reduction)
            m = kd.cube_max(m)
            if kd.unit_pos() == 0:
                kd.atomic_max(max_bits, 0, kd.bitcast(m, kd.u32))
            if bad != 0:   # rare: one atomic a unit that saw one
                kd.atomic_or(max_bits, 1, kd.u32(1))
