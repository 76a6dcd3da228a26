"""Backward kernels of LayerNorm and RMSNorm (`RMS` picks the form).

dx, one row at a time, with the cached / looped forms and chunk layout of the forward
kernels (forward.py, looped.py):
    x̂ = (x - mean)·rstd   (RMSNorm: x·rstd),   gγ = grad·gamma
    dx = rstd·(gγ - mean_W(gγ) - x̂·mean_W(gγ·x̂))   (RMSNorm: no mean_W(gγ) term)

dgamma = Σ_rows grad·x̂ and dbeta = Σ_rows grad, without float atomics: `col_partials`
sums a block of rows per column into workspaces [blocks, W] (with one block, into dgamma and
dbeta themselves), then `col_finish` adds the blocks of each column in block order. Small
problems take `norm_bwd_small`: dx and the column sums in one launch. The result depends
only on the shape.
"""
from __future__ import annotations

import kerneldsl as kd

from .device import chunk_in, lanes_sum, load_chunks, read_row, row_index, row_sum, store


@kd.func
def normalized(v, mean, rstd, RMS):
    """x̂ of one chunk."""
    if RMS:
        h = v * rstd
    else:
        h = (v - mean) * rstd
    return h


@kd.func
def dx_chunk(gg, h, a, b, rstd, RMS):
    """rstd·(gγ - a - x̂·b), a = mean_W(gγ) (dropped for RMS), b = mean_W(gγ·x̂)."""
    if RMS:
        d = rstd * (gg - h * b)
    else:
        d = rstd * (gg - a - h * b)
    return d


@kd.func
def chunk_terms(x, grad, gamma, xb, gb, first, t, width, mu, rs, MASK, RMS, BX, N, L):
    """(x̂, gγ) of N chunks, every load issued first; both are 0 outside the row."""
    xs = load_chunks(x, xb, first, t, width, 0.0, MASK, BX, N, L)
    gs = load_chunks(grad, gb, first, t, width, 0.0, MASK, BX, N, L)
    ws = load_chunks(gamma, 0, first, t, width, 0.0, MASK, BX, N, L)
    hs = ()
    ggs = ()
    for k in kd.unroll(N):
        hs = hs + (kd.select(chunk_in(first, k, t, width, MASK, BX, L), normalized(xs[k], mu, rs, RMS), 0.0),)
        ggs = ggs + (gs[k] * ws[k],)
    return hs, ggs


@kd.func
def add_dots(ab, hs, ggs, N, L):
    """(a, b) + (Σ gγ, Σ gγ·x̂) over N chunks."""
    a = ab[0]
    b = ab[1]
    for k in kd.unroll(N):
        a += lanes_sum(ggs[k], L)
        b += lanes_sum(ggs[k] * hs[k], L)
    return a, b


@kd.func
def write_dx(dx, db, hs, ggs, a, b, rs, first, t, width, live, MASK, RMS, BX, N, L):
    for k in kd.unroll(N):
        d = dx_chunk(ggs[k], hs[k], a, b, rs, RMS)
        if live and chunk_in(first, k, t, width, MASK, BX, L):
            store(dx, db + first + (k * BX + t) * L, d, L)


@kd.func
def row_setup(mean, rstd, rows, width, x_stride, g_stride, RMS, RY):
    """(live, x/grad row offsets, dx row offset, mean, rstd) of this unit's row (rows past
    the end read the last one and store nothing)."""
    row = row_index(RY)
    src = read_row(row, rows)
    mu = kd.f32(0) if RMS else mean[src]
    return row < rows, kd.i64(src) * x_stride, kd.i64(src) * g_stride, kd.i64(row) * width, mu, rstd[src]


@kd.func
def row_means(a, b, width, RMS, BX, RY):
    """The row means of the per-unit dot sums a (unused for RMSNorm) and b."""
    inv_w = 1.0 / kd.f32(width)
    b = row_sum(b, BX, RY) * inv_w
    if not RMS:
        a = row_sum(a, BX, RY) * inv_w
    return a, b


@kd.kernel
def norm_bwd_cached(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], grad: kd.Tensor,
                    mean: kd.Tensor[kd.f32, 1], rstd: kd.Tensor[kd.f32, 1], dx: kd.Tensor,
                    rows: kd.i32, width: kd.i32, x_stride: kd.i64, g_stride: kd.i64, RMS: kd.Const[bool],
                    MASK: kd.Const[bool], BX: kd.Const[int], RY: kd.Const[int], CH: kd.Const[int],
                    L: kd.Const[int]):
    t = kd.unit_pos_x()
    live, xb, gb, db, mu, rs = row_setup(mean, rstd, rows, width, x_stride, g_stride, RMS, RY)
    hs, ggs = chunk_terms(x, grad, gamma, xb, gb, 0, t, width, mu, rs, MASK, RMS, BX, CH, L)
    a, b = add_dots((kd.f32(0), kd.f32(0)), hs, ggs, CH, L)
    a, b = row_means(a, b, width, RMS, BX, RY)
    write_dx(dx, db, hs, ggs, a, b, rs, 0, t, width, live, MASK, RMS, BX, CH, L)


@kd.kernel
def norm_bwd_looped(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], grad: kd.Tensor,
                    mean: kd.Tensor[kd.f32, 1], rstd: kd.Tensor[kd.f32, 1], dx: kd.Tensor,
                    rows: kd.i32, width: kd.i32, x_stride: kd.i64, g_stride: kd.i64, RMS: kd.Const[bool],
                    BX: kd.Const[int], RY: kd.Const[int], U: kd.Const[int], L: kd.Const[int]):
    """Two passes (the sums, then dx), main loops chunk by chunk and a masked tail, as in looped.py."""
    t = kd.unit_pos_x()
    live, xb, gb, db, mu, rs = row_setup(mean, rstd, rows, width, x_stride, g_stride, RMS, RY)
    STEP = BX * L * U
    full = width - width % STEP
    a = kd.f32(0)
    b = kd.f32(0)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            hs, ggs = chunk_terms(x, grad, gamma, xb, gb, i + u * BX * L, t, width, mu, rs, False, RMS, BX, 1, L)
            a, b = add_dots((a, b), hs, ggs, 1, L)
    if full < width:
        hs, ggs = chunk_terms(x, grad, gamma, xb, gb, full, t, width, mu, rs, True, RMS, BX, U, L)
        a, b = add_dots((a, b), hs, ggs, U, L)
    a, b = row_means(a, b, width, RMS, BX, RY)
    for i in range(0, full, STEP):
        for u in kd.unroll(U):
            f = i + u * BX * L
            hs, ggs = chunk_terms(x, grad, gamma, xb, gb, f, t, width, mu, rs, False, RMS, BX, 1, L)
            write_dx(dx, db, hs, ggs, a, b, rs, f, t, width, live, False, RMS, BX, 1, L)
    if full < width:
        hs, ggs = chunk_terms(x, grad, gamma, xb, gb, full, t, width, mu, rs, True, RMS, BX, U, L)
        write_dx(dx, db, hs, ggs, a, b, rs, full, t, width, live, True, RMS, BX, U, L)


@kd.kernel
def col_partials(x: kd.Tensor, grad: kd.Tensor, mean: kd.Tensor[kd.f32, 1], rstd: kd.Tensor[kd.f32, 1],
                 part_g: kd.Tensor[kd.f32, 1], part_b: kd.Tensor[kd.f32, 1], rows: kd.i32, width: kd.i32,
                 x_stride: kd.i64, g_stride: kd.i64, rows_per_block: kd.i32, RMS: kd.Const[bool],
                 BETA: kd.Const[bool], BX: kd.Const[int]):
    """part_g[blk, col] = Σ grad·x̂ and (BETA) part_b[blk, col] = Σ grad over the block's rows,
    in row order (with one block: dgamma and dbeta themselves). Units past the last column
    read the last column and store nothing."""
    col = kd.cube_pos_x() * BX + kd.unit_pos_x()
    c = kd.min(col, width - 1)
    blk = kd.cube_pos_y()
    r0 = blk * rows_per_block
    r1 = kd.min(r0 + rows_per_block, rows)
    sg = kd.f32(0)
    sb = kd.f32(0)
    for r in range(r0, r1):
        g = kd.f32(grad[kd.i64(r) * g_stride + c])
        h = normalized(kd.f32(x[kd.i64(r) * x_stride + c]), mean[r] if not RMS else 0.0, rstd[r], RMS)
        sg += g * h
        sb += g
    if col < width:
        part_g[kd.i64(blk) * width + col] = sg
        if BETA:
            part_b[kd.i64(blk) * width + col] = sb


@kd.kernel
def col_finish(part_g: kd.Tensor[kd.f32, 1], part_b: kd.Tensor[kd.f32, 1], dgamma: kd.Tensor[kd.f32, 1],
               dbeta: kd.Tensor[kd.f32, 1], blocks: kd.i32, width: kd.i32, BETA: kd.Const[bool], BX: kd.Const[int]):
    """dgamma[col] (and dbeta[col]) = the blocks' partial sums, added in block order."""
    col = kd.cube_pos_x() * BX + kd.unit_pos_x()
    c = kd.min(col, width - 1)
    sg = kd.f32(0)
    sb = kd.f32(0)
    for k in range(blocks):
        sg += part_g[kd.i64(k) * width + c]
        if BETA:
            sb += part_b[kd.i64(k) * width + c]
    if col < width:
        dgamma[col] = sg
        if BETA:
            dbeta[col] = sb


@kd.kernel
def norm_bwd_small(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], grad: kd.Tensor, mean: kd.Tensor[kd.f32, 1],
                   rstd: kd.Tensor[kd.f32, 1], dx: kd.Tensor, dgamma: kd.Tensor[kd.f32, 1],
                   dbeta: kd.Tensor[kd.f32, 1], rows: kd.i32, width: kd.i32, x_stride: kd.i64, g_stride: kd.i64,
                   RMS: kd.Const[bool], BETA: kd.Const[bool], BX: kd.Const[int]):
    """dx [rows, width], dgamma and (BETA) dbeta of a small problem in one launch: cube k
    owns columns k·BX ..; every cube sums each row's two dots over the whole row itself
    (the rows are short), then writes dx of its columns and adds their dgamma / dbeta terms
    in row order (col_partials' sums with one block of rows)."""
    t = kd.unit_pos_x()
    col = kd.cube_pos_x() * BX + t
    c = kd.min(col, width - 1)
    inv_w = 1.0 / kd.f32(width)
    sg = kd.f32(0)
    sb = kd.f32(0)
    for r in range(rows):
        kd.sync_cube()   # (the last row's reductions are read before their shared arrays are written again)
        xb = kd.i64(r) * x_stride
        gb = kd.i64(r) * g_stride
        mu = kd.f32(0) if RMS else mean[r]
        rs = rstd[r]
        a = kd.f32(0)
        b = kd.f32(0)
        for j in range(t, width, BX):
            gg = kd.f32(grad[gb + j]) * gamma[j]
            a += gg
            b += gg * normalized(kd.f32(x[xb + j]), mu, rs, RMS)
        b = kd.cube_sum(b) * inv_w
        if not RMS:
            a = kd.cube_sum(a) * inv_w
        g = kd.f32(grad[gb + c])
        h = normalized(kd.f32(x[xb + c]), mu, rs, RMS)
        if col < width:
            dx[kd.i64(r) * width + col] = dx_chunk(g * gamma[c], h, a, b, rs, RMS)
        sg += g * h
        sb += g
    if col < width:
        dgamma[col] = sg
        if BETA:
            dbeta[col] = sb
