"""LayerNorm / RMSNorm forward, NR rows a cube: REG (0 or 1) of them held in registers,
the others in shared memory (each unit's own slots, filled by async copies), so every
gamma and beta chunk is read once for NR rows.

Why: the output of each row needs all of gamma (and beta for LayerNorm), f32, W elements,
read again for every row (from L2 once a long row crowds them out of L1); NR rows a cube
divide those reads, and the instructions that issue them, by NR. What the library picks
(tuning.long_row_plan, tuning.short_row_plan; H200 figures in RESULTS.md, sessions 10-11):
  - f32 rows of 32768: NR = 2, REG = 1 (+6% LayerNorm, +3% RMSNorm over one row a cube);
  - 16-bit rows past L1: 3 rows in shared memory, and for LayerNorm a 4th in registers
    (bf16 W = 32768: RMSNorm 4043 GB/s; LayerNorm 3834, 3 rows 3756, the packed kernel 3144);
  - bf16 LayerNorm rows of 8-32 KiB with a cube of their own: NR = 2 (3 past 16 KiB),
    REG = 1 (W = 4096 / 8192 / 16384: 4084 / 4094 / 4038 GB/s, the packed kernel 3713 /
    3730 / 3513).
bf16 rows are copied and held as u32 words, two elements a word (WORDS): a bf16 value is
the high half of its f32, so widening costs one shift or one mask, where reading 16-bit
elements from shared memory cost a byte permute and a shift; a register row takes 16
registers at 1024 units. Each shared row is its own copy group, so a row's statistics
start while later rows are still arriving; the NR rows' statistics are reduced together
(one barrier, their butterflies interleaved). Rows in shared memory are reduced chunk by
chunk (LayerNorm: per-chunk mean and M2 merged as they come, so each chunk is read once
per pass) and read again to be written; the register row takes two passes (mean, then
squared deviations). A unit only reads the shared slots it copied itself: the copies
need no barrier. The chunks must tile the row exactly (BX*CH*L == width), L*itemsize ==
16 bytes. Same [rows, width] view, outputs and statistics as forward.norm_cached.
"""
from __future__ import annotations

import kerneldsl as kd

from .device import chunks_total, lanes_sum, merge_m2, rows_mean_m2, rows_sums, sum_sq, sum_sq_dev, vec_of
from .forward import affine


@kd.func
def widen_words(w, LW):
    """The 2*LW bf16 values of LW words (each a pair, the low half first in memory) as an
    f32 vector: a bf16 value is the high half of its f32, so one shift or one mask each."""
    t = ()
    for e in kd.unroll(LW):
        t = t + (kd.bitcast(w[e] << 16, kd.f32), kd.bitcast(w[e] & 0xFFFF0000, kd.f32))
    return vec_of(t, 2 * LW)


@kd.func
def slot(buf, k, c, t, BX, CH, LW, WORDS):
    """Chunk c of this unit's share of shared row k, as f32 lanes (LW elements of buf a
    chunk: bf16 pairs when WORDS)."""
    col = k * (BX * CH * LW) + (c * BX + t) * LW
    lanes = ()
    for e in kd.unroll(LW):
        if WORDS:
            lanes = lanes + (buf[col + e],)
        else:
            lanes = lanes + (kd.f32(buf[col + e]),)
    if WORDS:
        v = widen_words(lanes, LW)
    else:
        v = vec_of(lanes, LW)
    return v


@kd.func
def shared_row_part(buf, k, t, RMS, BX, CH, LW, WORDS, L):
    """This unit's share of shared row k's statistics, one read of each chunk: Σ x² (RMS),
    else (mean, M2) of its CH*L values, per-chunk means and M2 merged as they come."""
    if RMS:
        acc = kd.f32(0)
        for c in kd.unroll(CH):
            acc += sum_sq(slot(buf, k, c, t, BX, CH, LW, WORDS), L)
        part = (acc, acc)
    else:
        r = (kd.f32(0), kd.f32(0), kd.f32(0))
        for c in kd.unroll(CH):
            v = slot(buf, k, c, t, BX, CH, LW, WORDS)
            cm = lanes_sum(v, L) * (1.0 / L)
            cq = sum_sq_dev(v, cm, L)
            if c == 0:
                r = (cm, cq, kd.f32(L))
            else:
                r = merge_m2(r[0], r[1], r[2], cm, cq, kd.f32(L))
        part = (r[0], r[1])
    return part


@kd.func
def reg_row_part(vals, RMS, CH, L):
    """This unit's share of the register row's statistics (as shared_row_part): two passes
    over the values it holds."""
    acc = chunks_total(vals, RMS, CH, L)
    if RMS:
        part = (acc, acc)
    else:
        mu = acc * (1.0 / (CH * L))
        q = kd.f32(0)
        for c in kd.unroll(CH):
            q += sum_sq_dev(vals[c], mu, L)
        part = (mu, q)
    return part


@kd.func
def as_f32(raw, LW, WORDS):
    """A chunk of the row held in registers (as loaded: LW words when WORDS), as f32 lanes."""
    if WORDS:
        v = widen_words(raw, LW)
    else:
        v = kd.cast(raw, kd.f32)
    return v


@kd.kernel
def norm_paired(x: kd.Tensor, gamma: kd.Tensor[kd.f32, 1], beta: kd.Tensor[kd.f32, 1], y: kd.Tensor,
                mean_out: kd.Tensor[kd.f32, 1], rstd_out: kd.Tensor[kd.f32, 1],
                rows: kd.i32, width: kd.i32, x_stride: kd.i64, eps: kd.f32,
                RMS: kd.Const[bool], HAS_BETA: kd.Const[bool],
                BX: kd.Const[int], CH: kd.Const[int], L: kd.Const[int], NR: kd.Const[int], REG: kd.Const[int],
                WORDS: kd.Const[bool]):
    """Rows first .. first + NR - 1 of this cube; the first REG (0 or 1) of them in registers.
    WORDS: x is a bf16 row's u32 view (two elements a word, `x_stride` in words), so a
    chunk of L elements is L/2 words, widened with a shift or a mask (see widen_words)."""
    t = kd.unit_pos_x()
    LW = L // 2 if WORDS else L  # elements of x a chunk
    SPAN = BX * CH * LW
    buf = kd.shared(x.dtype, (NR - REG) * SPAN)
    first = (kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()) * NR
    for k in kd.unroll(REG, NR):  # one copy group a row: row k's reduction waits for its own group only
        base = kd.i64(kd.min(first + k, rows - 1)) * x_stride  # rows past the end: read the last, store nothing
        for c in kd.unroll(CH):
            col = (c * BX + t) * LW
            kd.async_copy(buf, (k - REG) * SPAN + col, x, base + col, LW)
        kd.async_commit()
    inv_w = 1.0 / kd.f32(width)
    parts = ()
    va = ()
    xa = kd.i64(kd.min(first, rows - 1)) * x_stride  # past the end only in a wrapped grid's last cubes
    if REG == 1:
        for c in kd.unroll(CH):
            va = va + (kd.load_vec(x, xa + (c * BX + t) * LW, LW),)
        vf = ()
        for c in kd.unroll(CH):
            vf = vf + (as_f32(va[c], LW, WORDS),)
        parts = (reg_row_part(vf, RMS, CH, L),)
    for k in kd.unroll(REG, NR):
        kd.async_wait(NR - 1 - k)  # row k's copies are in; later rows' may still be in flight
        parts = parts + (shared_row_part(buf, k - REG, t, RMS, BX, CH, LW, WORDS, L),)
    means = ()
    rstds = ()
    if RMS:  # the NR rows' reductions together: one barrier, their steps interleaved
        sums = ()
        for k in kd.unroll(NR):
            sums = sums + (parts[k][0],)
        sums = rows_sums(sums, BX, NR)
        for k in kd.unroll(NR):
            means = means + (kd.f32(0),)
            rstds = rstds + (kd.rsqrt(sums[k] * inv_w + eps),)
    else:
        ms = ()
        qs = ()
        for k in kd.unroll(NR):
            ms = ms + (parts[k][0],)
            qs = qs + (parts[k][1],)
        mq = rows_mean_m2(ms, qs, CH * L, BX, NR)
        for k in kd.unroll(NR):
            means = means + (mq[k][0],)
            rstds = rstds + (kd.rsqrt(mq[k][1] * inv_w + eps),)
    yrows = ()
    for k in kd.unroll(NR):
        yrows = yrows + (kd.i64(first + k) * width + t * L,)
    for c in kd.unroll(CH):
        col = c * BX * L + t * L
        g = kd.load_vec(gamma, col, L)
        b = kd.load_vec(beta, col, L) if HAS_BETA else g
        for k in kd.unroll(NR):
            if k < REG:
                v = as_f32(va[c], LW, WORDS)
            else:
                v = slot(buf, k - REG, c, t, BX, CH, LW, WORDS)
            if first + k < rows:
                kd.store_vec(y, yrows[k] + c * BX * L, affine(v, means[k], rstds[k], g, b, RMS, HAS_BETA, L))
    if t == 0:
        for k in kd.unroll(NR):
            if first + k < rows:
                if not RMS:
                    mean_out[first + k] = means[k]
                rstd_out[first + k] = rstds[k]
