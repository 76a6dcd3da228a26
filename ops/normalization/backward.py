"""Backward kernels of LayerNorm and RMSNorm (`RMS` picks the form).

dx, one row at a time, with the same cached / looped forms and chunk layout as the
forward kernels (forward.py):
    x̂ = (x - mean)·rstd   (RMSNorm: x·rstd),   gγ = grad·gamma
    dx = rstd·(gγ - mean_W(gγ) - x̂·mean_W(gγ·x̂))   (RMSNorm: no mean_W(gγ) term)

dgamma = Σ_rows grad·x̂ and dbeta = Σ_rows grad, without float atomics: `col_partials`
sums a block of rows per column into a workspace [2, blocks, W], then `col_finish`
adds the blocks of each column in block order. The result depends only on the shape.
"""
from __future__ import annotations

import kerneldsl as kd

from .device import lanes_sum, load_f32, row_index, row_sum, store


@kd.func
def row_stat(src, row, live):
    """src[row] for a live row, else 0."""
    v = kd.f32(0)
    if live:
        v = src[row]
    return v


@kd.func
def normalized(v, mean, rstd, RMS):
    """x̂ of one chunk."""
    if RMS:
        h = v * rstd
    else:
        h = (v - mean) * rstd
    return h


@kd.func
def times_gamma(g, gamma, col, ok, L):
    """grad·gamma of one chunk (0 outside the row)."""
    gg = g * load_f32(gamma, col, ok, 0.0, L)
    return gg


@kd.func
def dx_chunk(gg, h, a, b, rstd, RMS):
    """rstd·(gγ - a - x̂·b), a = mean_W(gγ) (dropped for RMS), b = mean_W(gγ·x̂)."""
    if RMS:
        d = rstd * (gg - h * b)
    else:
        d = rstd * (gg - a - h * b)
    return d


@kd.kernel
def norm_bwd_cached(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], grad: kd.Tensor,
                    mean: kd.Tensor[kd.f32, 1], rstd: kd.Tensor[kd.f32, 1], dx: kd.Tensor,
                    rows: kd.i32, width: kd.i32, x_stride: kd.i64, g_stride: kd.i64, RMS: kd.Const[bool],
                    BX: kd.Const[int], RY: kd.Const[int], CH: kd.Const[int], L: kd.Const[int]):
    row = row_index(RY)
    t = kd.unit_pos_x()
    live = row < rows
    xb = kd.i64(row) * x_stride
    gb = kd.i64(row) * g_stride
    db = kd.i64(row) * width
    mu = kd.f32(0)
    if not RMS:
        mu = row_stat(mean, row, live)
    rs = row_stat(rstd, row, live)
    hs = ()
    ggs = ()
    a = kd.f32(0)
    b = kd.f32(0)
    for c in kd.unroll(CH):
        col = (c * BX + t) * L
        ok = live and col < width
        hs = hs + (normalized(load_f32(x, xb + col, ok, 0.0, L), mu, rs, RMS),)
        ggs = ggs + (times_gamma(load_f32(grad, gb + col, ok, 0.0, L), gamma, col, ok, L),)
        b += lanes_sum(ggs[c] * hs[c], L)
        if not RMS:
            a += lanes_sum(ggs[c], L)
    inv_w = 1.0 / kd.f32(width)
    b = row_sum(b, BX, RY) * inv_w
    if not RMS:
        a = row_sum(a, BX, RY) * inv_w
    for c in kd.unroll(CH):
        col = (c * BX + t) * L
        if live and col < width:
            store(dx, db + col, dx_chunk(ggs[c], hs[c], a, b, rs, RMS), L)


@kd.func
def dot_step(ab, x, grad, gamma, xoff, goff, col, mu, rs, ok, RMS, L):
    """(a, b) + (Σ gγ, Σ gγ·x̂) over one chunk."""
    h = normalized(load_f32(x, xoff, ok, 0.0, L), mu, rs, RMS)
    gg = times_gamma(load_f32(grad, goff, ok, 0.0, L), gamma, col, ok, L)
    r = (ab[0] + lanes_sum(gg, L), ab[1] + lanes_sum(gg * h, L))
    return r


@kd.func
def dx_step(x, grad, gamma, dx, xoff, goff, doff, col, mu, rs, a, b, ok, RMS, L):
    if ok:
        h = normalized(load_f32(x, xoff, True, 0.0, L), mu, rs, RMS)
        gg = times_gamma(load_f32(grad, goff, True, 0.0, L), gamma, col, True, L)
        store(dx, doff, dx_chunk(gg, h, a, b, rs, RMS), L)


@kd.kernel
def norm_bwd_looped(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], grad: kd.Tensor,
                    mean: kd.Tensor[kd.f32, 1], rstd: kd.Tensor[kd.f32, 1], dx: kd.Tensor,
                    rows: kd.i32, width: kd.i32, x_stride: kd.i64, g_stride: kd.i64, RMS: kd.Const[bool],
                    BX: kd.Const[int], RY: kd.Const[int], U: kd.Const[int], L: kd.Const[int]):
    """Two passes (the sums, then dx), each a main loop and a masked tail as in looped.py."""
    row = row_index(RY)
    t = kd.unit_pos_x()
    live = row < rows
    xb = kd.i64(row) * x_stride
    gb = kd.i64(row) * g_stride
    db = kd.i64(row) * width
    mu = kd.f32(0)
    if not RMS:
        mu = row_stat(mean, row, live)
    rs = row_stat(rstd, row, live)
    STEP = BX * L * U
    full = width - width % STEP
    a = kd.f32(0)
    b = kd.f32(0)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            c = i + (u * BX + t) * L
            a, b = dot_step((a, b), x, grad, gamma, xb + c, gb + c, c, mu, rs, live, RMS, L)
    if full < width:
        for u in kd.unroll(U):
            col = full + (u * BX + t) * L
            a, b = dot_step((a, b), x, grad, gamma, xb + col, gb + col, col, mu, rs, live and col < width, RMS, L)
    inv_w = 1.0 / kd.f32(width)
    b = row_sum(b, BX, RY) * inv_w
    if not RMS:
        a = row_sum(a, BX, RY) * inv_w
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            c = i + (u * BX + t) * L
            dx_step(x, grad, gamma, dx, xb + c, gb + c, db + c, c, mu, rs, a, b, live, RMS, L)
    if full < width:
        for u in kd.unroll(U):
            col = full + (u * BX + t) * L
            dx_step(x, grad, gamma, dx, xb + col, gb + col, db + col, col, mu, rs, a, b, live and col < width, RMS,
                    L)


@kd.kernel
def col_partials(x: kd.Tensor, grad: kd.Tensor, mean: kd.Tensor[kd.f32, 1], rstd: kd.Tensor[kd.f32, 1],
                 part: kd.Tensor[kd.f32, 1], rows: kd.i32, width: kd.i32, x_stride: kd.i64, g_stride: kd.i64,
                 rows_per_block: kd.i32, RMS: kd.Const[bool], BETA: kd.Const[bool], BX: kd.Const[int]):
    """part[0, blk, col] = Σ grad·x̂ and part[1, blk, col] = Σ grad over the block's rows."""
    col = kd.cube_pos_x() * BX + kd.unit_pos_x()
    blk = kd.cube_pos_y()
    blocks = kd.cube_count_y()
    r0 = blk * rows_per_block
    r1 = kd.min(r0 + rows_per_block, rows)
    sg = kd.f32(0)
    sb = kd.f32(0)
    for r in range(r0, r1):
        if col < width:
            g = kd.f32(grad[kd.i64(r) * g_stride + col])
            h = normalized(kd.f32(x[kd.i64(r) * x_stride + col]), mean[r] if not RMS else 0.0, rstd[r], RMS)
            sg += g * h
            sb += g
    if col < width:
        part[kd.i64(blk) * width + col] = sg
        if BETA:
            part[(kd.i64(blocks) + blk) * width + col] = sb


@kd.kernel
def col_finish(part: kd.Tensor[kd.f32, 1], dgamma: kd.Tensor[kd.f32, 1], dbeta: kd.Tensor[kd.f32, 1],
               blocks: kd.i32, width: kd.i32, BETA: kd.Const[bool], BX: kd.Const[int]):
    """dgamma[col] (and dbeta[col]) = the blocks' partial sums, added in block order."""
    col = kd.cube_pos_x() * BX + kd.unit_pos_x()
    sg = kd.f32(0)
    sb = kd.f32(0)
    for k in range(blocks):
        if col < width:
            sg += part[kd.i64(k) * width + col]
            if BETA:
                sb += part[(kd.i64(blocks) + k) * width + col]
    if col < width:
        dgamma[col] = sg
        if BETA:
            dbeta[col] = sb
