"""The forward pass for runtimes whose units are SIMD lanes (the CPU): a cube is one vector of
consecutive output pixels along an output row, and each unit keeps a register block of KB
output channels.

The input is first copied, as f32 and channel-major ([B, C, D', H', W'] whatever the
caller's layout), into a zero-padded buffer large enough that every tap of every unit of
every cube reads inside it: the kernel then needs no bounds test, clamp or select, and a
tap's read at stride 1 is affine in the unit index (one vector load). Each loaded input
vector feeds KB fused multiply-adds against weights that are uniform over the cube (one
broadcast each). Kernel size, stride and dilation are compile-time, so the taps unroll; the
accumulators stay in vector registers because the cube is exactly one vector wide.
"""
from __future__ import annotations

import kerneldsl as kd

KB = 16    # output channels per unit (the register block)


@kd.kernel
def pad_input(x: kd.Tensor, xp: kd.Tensor, P: kd.Const[tuple]):
    """xp[b, c, z, y, i] = x[b, c, z − PD, y − PH, i − PW] as f32, 0 outside x; one cube per
    (row of xp, channel, batch), units along the row."""
    Dp, Hp, Wp = xp.shape[2], xp.shape[3], xp.shape[4]
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    z = kd.cube_pos_x() // Hp
    yy = kd.cube_pos_x() % Hp
    c = kd.cube_pos_y()
    b = kd.cube_pos_z()
    iz = z - P[0]
    iy = yy - P[1]
    row_in = iz >= 0 and iz < D and iy >= 0 and iy < H
    for i in range(kd.unit_pos_x(), Wp, kd.cube_dim_x()):
        ix = i - P[2]
        inside = row_in and ix >= 0 and ix < W
        v = kd.select(inside, kd.f32(x[b, c, kd.clamp(iz, 0, D - 1), kd.clamp(iy, 0, H - 1),
                                       kd.clamp(ix, 0, W - 1)]), 0.0)
        xp[b, c, z, yy, i] = v


@kd.kernel
def forward_rows(xp: kd.Tensor, w: kd.Tensor, bias: kd.Tensor, y: kd.Tensor, HAS_BIAS: kd.Const[bool],
                 G: kd.Const[tuple]):
    """y[b, co, o] = bias[co] + sum_{c, k} xp[b, g·Cg + c, o·S + k·Dil]·w[co, c, k] over the
    padded input; grid (output rows x vectors a row, groups x KB-channel blocks, batch)."""
    OH, OW = y.shape[3], y.shape[4]
    Cg = w.shape[1]
    Kg = y.shape[1] // (xp.shape[1] // Cg)
    per_row = (OW + kd.cube_dim_x() - 1) // kd.cube_dim_x()
    nb = (Kg + KB - 1) // KB
    g = kd.cube_pos_y() // nb
    k0 = kd.cube_pos_y() % nb * KB
    b = kd.cube_pos_z()
    row = kd.cube_pos_x() // per_row
    od = row // OH
    oh = row % OH
    ow = kd.cube_pos_x() % per_row * kd.cube_dim_x() + kd.unit_pos_x()
    cos = ()
    for i in kd.unroll(KB):
        cos = cos + (g * Kg + kd.min(k0 + i, Kg - 1),)
    acc = (kd.f32(0),) * KB
    for c in range(Cg):
        ci = g * Cg + c
        for kz in kd.unroll(G[9]):
            for ky in kd.unroll(G[10]):
                for kx in kd.unroll(G[11]):
                    v = xp[b, ci, od * G[0] + kz * G[6], oh * G[1] + ky * G[7], ow * G[2] + kx * G[8]]
                    nxt = ()
                    for i in kd.unroll(KB):
                        nxt = nxt + (acc[i] + v * kd.f32(w[cos[i], c, kz, ky, kx]),)
                    acc = nxt
    if ow < OW:
        for i in kd.unroll(KB):
            if k0 + i < Kg:
                r = acc[i]
                if HAS_BIAS:
                    r = r + kd.f32(bias[cos[i]])
                y[b, cos[i], od, oh, ow] = r


def lanes(rt) -> int:
    """Units per cube: one vector of f32."""
    return max(1, rt.capabilities.vector_bytes // 4)


def padded_shape(g, units: int) -> tuple:
    """[B, C, D', H', W'] of the padded copy: every window of every output position (the
    last row's vector rounded up to `units`) lies inside it."""
    OW = (g.O[2] + units - 1) // units * units
    O = (g.O[0], g.O[1], OW)
    return (g.B, g.C, *((o - 1) * s + (r - 1) * d + 1 for o, s, r, d in zip(O, g.stride, g.R, g.dil)))


def run_forward(p, y5, dummy) -> None:
    """y5 (a [B, K, OD, OH, OW] view) = the forward convolution of p, through a padded copy."""
    g = p.geo
    rt = p.runtime
    units = lanes(rt)
    shape = padded_shape(g, units)
    xp = rt.empty(shape, "f32")
    pad_input[(shape[2] * shape[3], g.C, g.B), units](p.x, xp, g.pad)
    per_row = (g.O[2] + units - 1) // units
    grid = (g.O[0] * g.O[1] * per_row, g.groups * ((g.Kg + KB - 1) // KB), g.B)
    bias = p.bias if p.bias is not None else dummy
    forward_rows[grid, units](xp, p.w, bias, y5, p.bias is not None, g.consts())
