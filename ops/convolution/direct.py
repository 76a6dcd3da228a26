"""The `Direct` strategy: direct convolution kernels for every configuration (any rank,
stride, padding, dilation, groups, layout, dtype), F32 accumulation.

All tensors arrive as 5-D strided views ([B, C, D, H, W]; weights [K, C/g, KD, KH, KW]), so
NCHW, NHWC and non-contiguous inputs take the same kernels. The geometry (stride, padding,
dilation, kernel size) is compile-time, so the tap loops unroll.
- forward: a unit owns one output pixel and a register block of KB output channels of one
  group; each input value it loads feeds KB products (the weights are uniform over the cube).
- data backward: the same over the output gradient (the transposed convolution as a
  gather: an input position takes the output positions whose window covers it, no scatter),
  a unit owning one input pixel and KB input channels.
- weight backward: a cube owns (one output channel, one input channel); its units split the
  (batch x output pixel) reduction and hold one sum per tap; `kd.cube_sum` (a fixed-order
  reduction) finishes each, so the result is deterministic.
"""
from __future__ import annotations

import kerneldsl as kd

from .gather import reaching_value, split_pixel, window_value

UNITS = 128     # units per cube (every kernel here)
KB = 4          # output (forward) / input (data backward) channels per unit


@kd.func
def block_channels(first, count, base):
    """The KB channel indices base + min(first + i, count − 1) of a register block (clamped
    for loading; the store skips the clamped ones)."""
    out = ()
    for i in kd.unroll(KB):
        out = out + (base + kd.min(first + i, count - 1),)
    return out


@kd.func
def unit_work(count):
    """(group, first channel of the block in the group, batch, flat pixel) of this unit: the
    grid is (pixel blocks, groups x KB-channel blocks of `count` channels, batch)."""
    nb = (count + KB - 1) // KB
    return (kd.cube_pos_y() // nb, kd.cube_pos_y() % nb * KB, kd.cube_pos_z(),
            kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x())


@kd.kernel
def forward_direct(x: kd.Tensor, w: kd.Tensor, bias: kd.Tensor, y: kd.Tensor, HAS_BIAS: kd.Const[bool],
                   G: kd.Const[tuple]):
    """y[b, co, o] = bias[co] + sum_{c, k} x[b, g·Cg + c, o·S + k·Dil − P]·w[co, c, k]."""
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    Cg = w.shape[1]
    Kg = y.shape[1] // (x.shape[1] // Cg)
    g, k0, b, p = unit_work(Kg)
    if p < OD * OH * OW:
        od, oh, ow = split_pixel(p, OH, OW)
        cos = block_channels(k0, Kg, g * Kg)
        acc = (kd.f32(0),) * KB
        for c in range(Cg):
            ci = g * Cg + c
            for kz in kd.unroll(G[9]):
                for ky in kd.unroll(G[10]):
                    for kx in kd.unroll(G[11]):
                        v = window_value(x, b, ci, od, oh, ow, kz, ky, kx, G)
                        nxt = ()
                        for i in kd.unroll(KB):
                            nxt = nxt + (acc[i] + v * kd.f32(w[cos[i], c, kz, ky, kx]),)
                        acc = nxt
        for i in kd.unroll(KB):
            if k0 + i < Kg:
                r = acc[i]
                if HAS_BIAS:
                    r = r + kd.f32(bias[cos[i]])
                y[b, cos[i], od, oh, ow] = r


@kd.kernel
def data_backward_direct(dy: kd.Tensor, w: kd.Tensor, dx: kd.Tensor, G: kd.Const[tuple]):
    """dx[b, ci, i] = sum_{co in group, k} dy[b, co, (i + P − k·Dil) / S]·w[co, c, k], over the
    taps that land on a whole, in-range output position."""
    H, W = dx.shape[3], dx.shape[4]
    Cg = w.shape[1]
    Kg = dy.shape[1] // (dx.shape[1] // Cg)
    g, c0, b, p = unit_work(Cg)
    if p < dx.shape[2] * H * W:
        iz, iy, ix = split_pixel(p, H, W)
        cs = block_channels(c0, Cg, 0)
        acc = (kd.f32(0),) * KB
        for k in range(Kg):
            co = g * Kg + k
            for kz in kd.unroll(G[9]):
                for ky in kd.unroll(G[10]):
                    for kx in kd.unroll(G[11]):
                        v = reaching_value(dy, b, co, iz, iy, ix, kz, ky, kx, G)
                        nxt = ()
                        for i in kd.unroll(KB):
                            nxt = nxt + (acc[i] + v * kd.f32(w[co, cs[i], kz, ky, kx]),)
                        acc = nxt
        for i in kd.unroll(KB):
            if c0 + i < Cg:
                dx[b, g * Cg + cs[i], iz, iy, ix] = acc[i]


@kd.kernel
def weight_backward_direct(x: kd.Tensor, dy: kd.Tensor, dw: kd.Tensor, G: kd.Const[tuple]):
    """dw[co, c, k] = sum_{b, o} dy[b, co, o]·x[b, g·Cg + c, o·S + k·Dil − P]; a cube per (co, c)."""
    OH, OW = dy.shape[3], dy.shape[4]
    Cg = dw.shape[1]
    Kg = dy.shape[1] // (x.shape[1] // Cg)
    co = kd.cube_pos_x() // Cg
    c = kd.cube_pos_x() % Cg
    ci = co // Kg * Cg + c
    P = dy.shape[2] * OH * OW
    acc = (kd.f32(0),) * (G[9] * G[10] * G[11])
    for j in range(kd.unit_pos_x(), dy.shape[0] * P, kd.cube_dim_x()):
        b = j // P
        od, oh, ow = split_pixel(j % P, OH, OW)
        d = kd.f32(dy[b, co, od, oh, ow])
        nxt = ()
        for kz in kd.unroll(G[9]):
            for ky in kd.unroll(G[10]):
                for kx in kd.unroll(G[11]):
                    v = window_value(x, b, ci, od, oh, ow, kz, ky, kx, G)
                    nxt = nxt + (acc[(kz * G[10] + ky) * G[11] + kx] + d * v,)
        acc = nxt
    for kz in kd.unroll(G[9]):
        for ky in kd.unroll(G[10]):
            for kx in kd.unroll(G[11]):
                s = kd.cube_sum(acc[(kz * G[10] + ky) * G[11] + kx])
                if kd.unit_pos_x() == 0:
                    dw[co, c, kz, ky, kx] = s


def run_forward(p, y5, dummy) -> None:
    """y5 (a [B, K, OD, OH, OW] view) = the forward convolution of p."""
    g = p.geo
    grid = ((g.pixels + UNITS - 1) // UNITS, g.groups * ((g.Kg + KB - 1) // KB), g.B)
    bias = p.bias if p.bias is not None else dummy
    forward_direct[grid, UNITS](p.x, p.w, bias, y5, p.bias is not None, g.consts())


def run_data_backward(p, dx5) -> None:
    """dx5 (a [B, C, D, H, W] view) = the input gradient of p."""
    g = p.geo
    grid = ((g.in_pixels + UNITS - 1) // UNITS, g.groups * ((g.Cg + KB - 1) // KB), g.B)
    data_backward_direct[grid, UNITS](p.dy, p.w, dx5, g.consts())


def run_weight_backward(p, dw5) -> None:
    """dw5 (a [K, C/g, KD, KH, KW] view) = the weight gradient of p."""
    g = p.geo
    weight_backward_direct[g.K * g.Cg, UNITS](p.x, p.dy, dw5, g.consts())
