"""The data backward pass of a stride-1 convolution as a forward one, run by the group-product
kernel (implicit_gemm_group) where that kernel covers it.

With stride 1 on every axis the input gradient is itself a convolution of the output gradient:

    dx = conv(dy, w'),  w'[g·Cg + c, k, t] = w[g·Kg + k, c, K − 1 − t]   (per group: input and
    output channels swapped, taps reversed on every axis), dilation unchanged, padding
    (K − 1)·dilation − padding per axis (must be >= 0), groups unchanged,

so dx's pixels run the forward's M axis and Cin/groups its N axis. The group kernel reads
channels-last operands with 16-byte runs of channels, so two small kernels here write the
copies it needs: dy in NDHWC (a 32 x 32 tile transposed through shared memory: both the
NCDHW reads and the NDHWC writes run along contiguous memory) and w' in [C, KD, KH, KW, Kg];
its epilogue stores through dx's own 5-D NCDHW view, so the result needs no copy back.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.tensor import Tensor

from .gather import split_pixel, split_tap
from .problem import Geometry, Problem

TILE = 32          # the transpose's tile: 32 channels x 32 pixels
TILE_UNITS = 256   # units of a transpose cube (each moves TILE·TILE / 256 = 4 elements)
COPY_UNITS = 256


@kd.kernel
def to_channels_last(src: kd.Tensor, dst: kd.Tensor, DT: kd.Const[object], FLAT: kd.Const[bool]):
    """dst[b, c, p] = src[b, c, p]: cube (x, y, z) moves pixels 32x.., channels 32y.. of batch z
    through a shared tile. FLAT: [B, C, P] views whose pixels are one axis (src's of stride 1,
    dst's channels contiguous); else 5-D [B, C, D, H, W] views (src any strides, dst channels
    contiguous), each pixel split into (z, y, x)."""
    kd.static_assert(kd.cube_units() == TILE_UNITS, "launch with 256 units per cube")
    ROWS = TILE_UNITS // TILE
    C = src.shape[1]
    P = src.shape[2]
    H = 1
    W = 1
    if not FLAT:
        H, W = src.shape[3], src.shape[4]
        P = src.shape[2] * H * W
    b = kd.cube_pos_z()
    p0 = kd.cube_pos_x() * TILE
    c0 = kd.cube_pos_y() * TILE
    t = kd.unit_pos()
    row = t // TILE
    col = t % TILE
    tile = kd.shared(DT, TILE * (TILE + 1))
    p = p0 + col                       # reads: a row of units runs along the pixels of a channel
    if p < P:
        z, y, x = split_pixel(p, H, W)  # once a unit (FLAT: H = W = 1, folded away)
        for i in kd.unroll(TILE // ROWS):
            c = c0 + row + i * ROWS
            if c < C:
                if FLAT:
                    tile[(row + i * ROWS) * (TILE + 1) + col] = src[b, c, p]
                else:
                    tile[(row + i * ROWS) * (TILE + 1) + col] = src[b, c, z, y, x]
    kd.sync_cube()
    c = c0 + col                       # writes: a row of units runs along the channels of a pixel
    if c < C:
        for i in kd.unroll(TILE // ROWS):
            q = p0 + row + i * ROWS
            if q < P:
                if FLAT:
                    dst[b, c, q] = tile[col * (TILE + 1) + row + i * ROWS]
                else:
                    z, y, x = split_pixel(q, H, W)
                    dst[b, c, z, y, x] = tile[col * (TILE + 1) + row + i * ROWS]


def copy_to_channels_last(rt, src: Tensor, dst: Tensor, dtype) -> None:
    """dst (a packed channels-last [N, C, D, H, W] view, channels_last_view) = src (any 5-D view):
    as [N, C, P] views where src's pixels are one run of stride 1 (a contiguous NCDHW tensor: no
    per-element pixel split, no 5-D strides), else as 5-D views."""
    N, C, D, H, W = src.shape
    P = D * H * W
    grid = (-(-P // TILE), -(-C // TILE), N)
    if all(n == 1 or st == want for n, st, want in zip((D, H, W), src.strides[2:], (H * W, W, 1))):
        s3 = Tensor(rt, src.buffer, (N, C, P), dtype, (src.strides[0], src.strides[1], 1), src.offset)
        d3 = Tensor(rt, dst.buffer, (N, C, P), dtype, (P * C, 1, C), dst.offset)
        to_channels_last[grid, TILE_UNITS](s3, d3, dtype, True)
    else:
        to_channels_last[grid, TILE_UNITS](src, dst, dtype, False)


@kd.kernel
def flip_weights(w: kd.Tensor, wt: kd.Tensor, n: kd.i32, G: kd.Const[tuple]):
    """wt[g·Cg + c, k, t] = w[g·Kg + k, c, T − 1 − t] for the 5-D views w [K, Cg, *R] and
    wt [C, Kg, *R] (channels contiguous); a unit per element of wt, in its memory order."""
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        Kg = wt.shape[1]
        Cg = w.shape[1]
        T = G[9] * G[10] * G[11]
        k = i % Kg
        tap = i // Kg % T
        ci = i // (Kg * T)
        kz, ky, kx = split_tap(tap, G)
        fz, fy, fx = split_tap(T - 1 - tap, G)
        wt[ci, k, kz, ky, kx] = w[ci // Cg * Kg + k, ci % Cg, fz, fy, fx]


def flipped_padding(g: Geometry) -> tuple:
    """The forward padding of the equivalent convolution, per axis: (K − 1)·dilation − padding."""
    return tuple((r - 1) * d - q for r, d, q in zip(g.R, g.dil, g.pad))


def channels_last_view(rt, buffer, shape5: tuple, dtype, offset: int = 0) -> Tensor:
    """A 5-D [N, C, D, H, W] view of a packed N·D·H·W·C buffer (channels contiguous)."""
    N, C, D, H, W = shape5
    return Tensor(rt, buffer, shape5, dtype, (D * H * W * C, 1, H * W * C, W * C, C), offset)


def forward_problem(p: Problem, dy_cl: Tensor, w_cl: Tensor) -> Problem:
    """The forward Problem whose output is p's input gradient, over the channels-last copies."""
    g = p.geo
    geo = Geometry(g.rank, g.B, g.K, g.C, g.groups, g.O, g.R, g.S, (1, 1, 1), flipped_padding(g), g.dil)
    return Problem(geo, p.dtype, p.runtime, x=dy_cl, w=w_cl)


def _shapes(g: Geometry) -> tuple:
    return (g.B, g.K, *g.O), (g.C, g.Kg, *g.R)


def covers(p: Problem) -> bool:
    """p (a data backward) runs as a forward on group products: stride 1, padding at most
    (K − 1)·dilation on every axis, and implicit_gemm_group.covers on the equivalent forward
    (judged on the layouts of the copies, before any is made)."""
    from . import implicit_gemm_group
    g = p.geo
    if g.stride != (1, 1, 1) or min(flipped_padding(g)) < 0:
        return False
    dys, ws = _shapes(g)
    return implicit_gemm_group.covers(forward_problem(p, channels_last_view(p.runtime, None, dys, p.dtype),
                                                      channels_last_view(p.runtime, None, ws, p.dtype)))


def run_data_backward(p: Problem, dx5: Tensor, dummy) -> None:
    """dx5 = the data backward pass of p (covers(p) must hold): the two copies, then the
    group-product forward writing straight into dx5."""
    from . import implicit_gemm_group
    g = p.geo
    rt = p.runtime
    dys, ws = _shapes(g)
    dy_buf = rt.empty((g.B * g.O[0] * g.O[1] * g.O[2] * g.K,), p.dtype)
    w_buf = rt.empty((g.C * g.Kg * g.taps,), p.dtype)
    dy_cl = channels_last_view(rt, dy_buf.buffer, dys, p.dtype, dy_buf.offset)
    w_cl = channels_last_view(rt, w_buf.buffer, ws, p.dtype, w_buf.offset)
    copy_to_channels_last(rt, p.dy, dy_cl, p.dtype)
    n = g.C * g.Kg * g.taps
    flip_weights[-(-n // COPY_UNITS), COPY_UNITS](p.w, w_cl, n, g.consts())
    # 128-row tiles: the measured shape of this pass (tile_rows' 256-row tiles were timed on
    # the forward only)
    implicit_gemm_group.run_forward(forward_problem(p, dy_cl, w_cl), dx5, dummy, groups=2, mi=1)
