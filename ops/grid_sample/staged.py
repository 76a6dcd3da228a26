"""The 2-D grid_sample forward with the input staged in shared memory, for smooth grids
(affine warps, resizes) on GPUs.

sample.sample_forward gathers each tap of each channel from global memory: on a rotated
grid a warp's taps lie along slanted lines crossing several input rows, so every load
touches several memory sectors, and the loads' sectors, not the bytes, bound it (the
H200 moved about 1 TB/s). Here a cube takes a tile of grid points (BX / TW rows of TW),
finds the box of input pixels its taps read (a cube-wide min / max of the tap indices),
and, where that box holds at most AREA pixels, copies it for CH channels at a time into
shared memory with consecutive units reading consecutive pixels of a row, then samples
from there. Where the box is larger (a random grid, a strong downsampling) the cube
gathers from global memory as the direct kernel does: the choice is made per cube, on
the device, from the grid it reads. Same taps (coords.py) and the same sums in the same
order as sample.channel_sample, so the samples are the direct kernel's bit for bit."""
from __future__ import annotations

import kerneldsl as kd

from .sample import channel_sample, point_taps, tap_layout, tiled_point


@kd.kernel
def sample_staged(x: kd.Tensor, grid: kd.Tensor, y: kd.Tensor, pad_mode: kd.i32, align: kd.i32,
                  MODE: kd.Const[str], BX: kd.Const[int], TW: kd.Const[int], CH: kd.Const[int],
                  AREA: kd.Const[int]):
    """x [N, C, 1, H, W], grid [N, 1, Ho, Wo, 2], y [N, C, 1, Ho, Wo]: a cube a tile of
    BX / TW rows of TW grid points (tiled_point), CH channels staged at a time."""
    inside, n, od, oh, ow = tiled_point(y, BX, TW)
    size_h = x.shape[3]
    size_w = x.shape[4]
    # units past the plane's edge take its last point: their taps stay inside the box
    t = point_taps(grid, n, 0, kd.min(oh, y.shape[3] - 1), kd.min(ow, y.shape[4] - 1), 1, size_h, size_w, MODE,
                   pad_mode, align, 2)
    TZ, TX, Z, Y, X = tap_layout(len(t), 2)
    ylo = t[Y]
    yhi = t[Y]
    xlo = t[X]
    xhi = t[X]
    for b in kd.unroll(TX):
        ylo = kd.min(ylo, t[Y + b])
        yhi = kd.max(yhi, t[Y + b])
        xlo = kd.min(xlo, t[X + b])
        xhi = kd.max(xhi, t[X + b])
    # the cube's box (indices below 2^24: exact as F32)
    y0 = kd.i32(-kd.cube_max(-kd.f32(ylo)))
    x0 = kd.i32(-kd.cube_max(-kd.f32(xlo)))
    fh = kd.i32(kd.cube_max(kd.f32(yhi))) - y0 + 1
    fw = kd.i32(kd.cube_max(kd.f32(xhi))) - x0 + 1
    box = fh * fw
    stage = kd.shared(x.dtype, CH * AREA)
    channels = x.shape[1]
    u = kd.unit_pos_x()
    if box <= AREA:   # the same for every unit of the cube
        # the box's pixels u, u + BX, ... (consecutive units: consecutive pixels of a row),
        # found once: the same for every channel
        rows = ()
        cols = ()
        for m in kd.unroll(-(-AREA // BX)):
            r = kd.min(u + m * BX, box - 1)
            rows = rows + (y0 + r // fw,)
            cols = cols + (x0 + r % fw,)
        for c0 in range(0, channels, CH):
            for ch in kd.unroll(CH):
                for m in kd.unroll(-(-AREA // BX)):
                    if u + m * BX < box and c0 + ch < channels:
                        stage[ch * AREA + u + m * BX] = x[n, c0 + ch, 0, rows[m], cols[m]]
            kd.sync_cube()
            for ch in kd.unroll(CH):
                acc = kd.f32(0)
                for b in kd.unroll(TX):
                    for k in kd.unroll(TX):
                        ok = t[Y + 3 * TX + b] and t[X + 3 * TX + k]
                        at = ch * AREA + (t[Y + b] - y0) * fw + t[X + k] - x0
                        v = kd.select(ok, kd.f32(stage[at]), 0.0)
                        acc += t[Z + TZ] * t[Y + TX + b] * t[X + TX + k] * v
                if inside and c0 + ch < channels:
                    y[n, c0 + ch, 0, oh, ow] = acc
            kd.sync_cube()
    else:
        if inside:
            for c in range(channels):
                y[n, c, 0, oh, ow] = channel_sample(x, t, n, c, TZ, TX, Z, Y, X)
