"""LayerNorm / RMSNorm forward for bf16 rows held in registers as packed pairs (GPU
runtimes): the register-cached form of forward.py, for rows whose 16-byte chunks tile
the row exactly.

The row is read through a u32 view of the input (two bf16 values a word), and each
unit keeps its words, not f32 values, between the passes: half the registers for the
same bytes in flight, so twice the units fit on a GPU core (a bf16 row held as f32
needs two registers per input word and left too few loads in flight to reach
bandwidth). A bf16 value is the high half of its f32, so widening a word is one shift
(low element) or one mask (high element). Each pass widens again from the words with
its own shift and mask, taken from kernel arguments (16 and 0xFFFF0000 at every
launch): the compiler cannot tell the passes' conversions are equal, so it cannot merge
them into f32 values held across the reductions, which would undo the saving.
Same [rows, width] view, outputs and statistics as forward.norm_cached. (bf16 LayerNorm
rows of 8-32 KiB with a cube of their own run paired.py instead: tuning.short_row_plan.)
"""
from __future__ import annotations

import kerneldsl as kd

from .device import lanes_sum, row_mean_m2, row_offsets, row_sum, store, sum_sq, sum_sq_dev, vec_of
from .forward import affine

SHIFT, HIGH = 16, 0xFFFF0000  # the widening arguments every launch passes


@kd.func
def widen(w, sh, hi):
    """The 8 bf16 values of a 4-word chunk as an f32 vector, in memory order (little-endian:
    a word's low half is the earlier element)."""
    t = ()
    for k in kd.unroll(4):
        t = t + (kd.bitcast(w[k] << sh, kd.f32), kd.bitcast(w[k] & hi, kd.f32))
    return vec_of(t, 8)


@kd.func
def write_half(w, gamma, beta, col, mean, rstd, sh, hi, RMS, HAS_BETA, H):
    """Outputs of half H (4 elements) of a chunk, rounded to bf16 (gamma and beta read 4 at a
    time: fewer registers live than a whole chunk's)."""
    t = ()
    for k in kd.unroll(2):
        t = t + (kd.bitcast(w[2 * H + k] << sh, kd.f32), kd.bitcast(w[2 * H + k] & hi, kd.f32))
    g = kd.load_vec(gamma, col + 4 * H, 4)
    b = kd.load_vec(beta, col + 4 * H, 4) if HAS_BETA else g
    o = kd.cast(affine(vec_of(t, 4), mean, rstd, g, b, RMS, HAS_BETA, 4), kd.bf16)
    return (o[0], o[1], o[2], o[3])


@kd.kernel
def norm_packed(x: kd.Tensor[kd.u32, 2], gamma: kd.Tensor[kd.f32, 1], beta: kd.Tensor[kd.f32, 1],
                y: kd.Tensor[kd.bf16, 2], mean_out: kd.Tensor[kd.f32, 1], rstd_out: kd.Tensor[kd.f32, 1],
                rows: kd.i32, width: kd.i32, x_stride: kd.i64, eps: kd.f32,
                sh1: kd.u32, hi1: kd.u32, sh2: kd.u32, hi2: kd.u32, sh3: kd.u32, hi3: kd.u32,
                RMS: kd.Const[bool], HAS_BETA: kd.Const[bool], BX: kd.Const[int], RY: kd.Const[int],
                CH: kd.Const[int]):
    """x: the input's words ([rows, width/2], `x_stride` words between rows); chunk c of
    unit t is words (c*BX + t)*4 .. +4, elements (c*BX + t)*8 .. +8."""
    t = kd.unit_pos_x()
    row, live, xb, yb = row_offsets(rows, width, x_stride, RY)
    words = ()
    for c in kd.unroll(CH):
        words = words + (kd.load_vec(x, xb + (c * BX + t) * 4, 4),)
    acc = kd.f32(0)
    for c in kd.unroll(CH):
        if RMS:
            acc += sum_sq(widen(words[c], sh1, hi1), 8)
        else:
            acc += lanes_sum(widen(words[c], sh1, hi1), 8)
    inv_w = 1.0 / kd.f32(width)
    mean = kd.f32(0)
    if RMS:
        ms = row_sum(acc, BX, RY) * inv_w
    else:
        mu = acc * (1.0 / (CH * 8))
        q = kd.f32(0)
        for c in kd.unroll(CH):
            q += sum_sq_dev(widen(words[c], sh2, hi2), mu, 8)
        mean, ms = row_mean_m2(mu, q, CH * 8, BX, RY)
        ms = ms * inv_w
    rstd = kd.rsqrt(ms + eps)
    for c in kd.unroll(CH):
        col = (c * BX + t) * 8
        lo = write_half(words[c], gamma, beta, col, mean, rstd, sh3, hi3, RMS, HAS_BETA, 0)
        hi = write_half(words[c], gamma, beta, col, mean, rstd, sh3, hi3, RMS, HAS_BETA, 1)
        if live:
            store(y, yb + col, kd.make_vec(lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]), 8)
    if live and t == 0:
        if not RMS:
            mean_out[row] = mean
        rstd_out[row] = rstd
