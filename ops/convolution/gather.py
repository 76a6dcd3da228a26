"""Index helpers shared by the convolution kernels: the input value under a kernel tap
(forward and weight backward) and the output-gradient value that reaches an input position
through a tap (data backward, the gather form of the transposed convolution). `G` is the
compile-time geometry tuple (SD, SH, SW, PD, PH, PW, DD, DH, DW, KD, KH, KW)."""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def split_pixel(p, OH, OW):
    """(d, h, w) of flat pixel p in a grid of rows OH x OW."""
    return p // (OH * OW), p // OW % OH, p % OW


@kd.func
def group_and_split(SPLIT, groups):
    """(group, reduction split) of this cube: z = split · groups + group where the pass
    splits its reduction over cubes (the weight gradient), else (z, 0)."""
    g = kd.cube_pos_z()
    split = 0
    if SPLIT:
        g = kd.cube_pos_z() % groups
        split = kd.cube_pos_z() // groups
    return g, split


@kd.func
def pixel_row(src, m, Mg, P, OH, OW, G):
    """Row m of a forward-like implicit GEMM (output pixel m of the batch, samples x pixels):
    (inside the matrix, the pixel's input corner iz0, iy0, ix0, and that corner's element
    offset in src at channel 0); a row outside reads as row 0."""
    live = m < Mg
    mm = kd.select(live, m, 0)
    od, oh, ow = split_pixel(mm % P, OH, OW)
    iz0, iy0, ix0 = od * G[0] - G[3], oh * G[1] - G[4], ow * G[2] - G[5]
    base = (kd.i64(mm // P) * src.stride(0) + kd.i64(iz0) * src.stride(2) + kd.i64(iy0) * src.stride(3)
            + kd.i64(ix0) * src.stride(4))
    return live, iz0, iy0, ix0, base


@kd.func
def forward_sizes(x, w, y, G):
    """(OH, OW, P, Mg, Cg, Kg, R) of a forward pass as an implicit GEMM over 5-D views: the
    output's rows and columns, its pixels a sample, the GEMM's rows (samples x pixels),
    channels a group in and out, and the reduction length (taps x Cg)."""
    OH, OW = y.shape[3], y.shape[4]
    P = y.shape[2] * OH * OW
    Cg = w.shape[1]
    return OH, OW, P, y.shape[0] * P, Cg, y.shape[1] // (x.shape[1] // Cg), Cg * G[9] * G[10] * G[11]


@kd.func
def split_tap(t, G):
    """(kz, ky, kx) of flat kernel tap t."""
    return t // (G[10] * G[11]), t // G[11] % G[10], t % G[11]


@kd.func
def window_value(x, b, ci, od, oh, ow, kz, ky, kx, G):
    """x[b, ci, o·stride + k·dilation − padding] as f32, 0 outside the input."""
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    iz = od * G[0] + kz * G[6] - G[3]
    iy = oh * G[1] + ky * G[7] - G[4]
    ix = ow * G[2] + kx * G[8] - G[5]
    inside = iz >= 0 and iz < D and iy >= 0 and iy < H and ix >= 0 and ix < W
    return kd.select(inside, kd.f32(x[b, ci, kd.clamp(iz, 0, D - 1), kd.clamp(iy, 0, H - 1),
                                      kd.clamp(ix, 0, W - 1)]), 0.0)


@kd.func
def reaching_value(dy, b, co, iz, iy, ix, kz, ky, kx, G):
    """dy[b, co, o] for the output position o with o·stride + k·dilation − padding = i, as
    f32; 0 where there is none (not a whole multiple of the stride, or out of range)."""
    OD, OH, OW = dy.shape[2], dy.shape[3], dy.shape[4]
    tz = iz + G[3] - kz * G[6]
    ty = iy + G[4] - ky * G[7]
    tx = ix + G[5] - kx * G[8]
    oz = tz // G[0]
    oy = ty // G[1]
    ox = tx // G[2]
    hit = (tz >= 0 and oz * G[0] == tz and oz < OD and ty >= 0 and oy * G[1] == ty and oy < OH
           and tx >= 0 and ox * G[2] == tx and ox < OW)
    return kd.select(hit, kd.f32(dy[b, co, kd.clamp(oz, 0, OD - 1), kd.clamp(oy, 0, OH - 1),
                                    kd.clamp(ox, 0, OW - 1)]), 0.0)
