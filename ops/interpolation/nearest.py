"""The backward pass of Nearest and NearestExact upsampling by whole factors (tuning.nearest_factors:
any dtype where units are SIMD lanes, 4-byte dtypes on GPUs): each input element's gradient is
the sum of its SD×SH×SW block of output gradients, taken in torch's order (depth, then height,
then width, starting from 0), so f32 results equal torch's bit for bit, on the CPU and on CUDA.
A unit an input column, a cube ROWS input rows in turn: on the cpu runtime loads and stores are
whole vectors (a stride-SW load is a vector load and a shuffle), on a GPU a warp's loads are
whole sectors; a cube's rows amortise its start.

lanes.backward_lanes serves these calls too, but it weighs each output line and adds a
line's SW taps before the running sum (another order), and walks its lines from tables.
2-core Emerald Rapids, ×2 of [32, 64, 256²] (2 GiB of f32 out_grad), in turn: f32 104.6-106.6
ms against 109.9-115.7 by lanes.backward_lanes, bf16 60.9-65.5 against 70.7-72.3 (torch CPU
264-330); H100: f32 0.855 ms against 0.858 by the gather kernel (RESULTS.md, session 43).
On a 2-core Zen 4 box LLVM made the f32 stride-2 loads gathers: 161-163 ms for that call,
107-109 with kd.avoid_gathers() (loads and shuffles; bf16 60-69 either way, as 16-bit loads
have no gather instruction), [4, 16, 128²] 1.76 -> 1.04 ms (RESULTS.md, session 50).

Where units are SIMD lanes, nearest_backward_rows takes the calls instead: it reads a block's
output rows one after another (a row's taps added to partial sums kept in shared memory), not
the SH·SD rows side by side. On a 2-core Zen 4 two rows read side by side stream at a third
of the speed of one row at a time (11 against 31 GB/s a thread, RESULTS.md, session 54): ×2
of [32, 64, 256²] f32 took 94-99 ms by block sums, 61-65 by rows, the same bits."""
import kerneldsl as kd


@kd.func
def taps_sum(g, at, s, SW):
    """s + g[at] + g[at + 1] + ... + g[at + SW − 1], added in that order, in F32."""
    for b in kd.unroll(SW):
        s += kd.f32(g[at + b])
    return s


@kd.func
def block_sum(g, base, col, W, HS, SD, SH, SW):
    """Σ g[base + (e·HS + a)·W + col·SW + b] over e < SD, a < SH, b < SW, in that order from 0
    (HS: output rows a depth slice; W: output width)."""
    acc = kd.f32(0)
    for e in kd.unroll(SD):
        for a in kd.unroll(SH):
            acc = taps_sum(g, base + (e * HS + a) * W + col * SW, acc, SW)
    return acc


@kd.kernel
def nearest_backward_sums(g: kd.Tensor, dx: kd.Tensor, rows: kd.i32, H_in: kd.i32, W_in: kd.i32,
                          SD: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int], ROWS: kd.Const[int],
                          BX: kd.Const[int], STREAM: kd.Const[bool]):
    """dx [rows = planes·D·H, W_in] from g [planes·D·SD, H·SH, W_in·SW] (both contiguous):
    dx[r, i] = block_sum of r's block. Cube x takes rows x·ROWS .. x·ROWS + ROWS − 1 (the
    last cube repeats the last row); BX units across a row, whole vectors then one masked.
    STREAM: dx is large and written in whole lines (ops/streaming.py). Its stride-SW loads are
    vector loads and shuffles, not gathers (kd.avoid_gathers: the module docstring)."""
    kd.avoid_gathers()
    if STREAM:
        kd.streaming_stores()
    W = W_in * SW
    HS = H_in * SH
    full = W_in - W_in % BX
    for k in range(ROWS):
        r = kd.min(kd.cube_pos_x() * ROWS + k, rows - 1)
        slab = r // H_in  # (plane, depth) of the row
        base = (kd.i64(slab) * (SD * HS) + (r - slab * H_in) * SH) * W
        out = kd.i64(r) * W_in
        for i0 in range(0, full, BX):
            dx[out + i0 + kd.unit_pos_x()] = block_sum(g, base, i0 + kd.unit_pos_x(), W, HS, SD, SH, SW)
        if full + kd.unit_pos_x() < W_in:
            dx[out + full + kd.unit_pos_x()] = block_sum(g, base, full + kd.unit_pos_x(), W, HS, SD, SH, SW)


@kd.func
def row_taps(g, dx, part, at, to, i, SW, FIRST, LAST):
    """One output row's SW taps for input column i (at: its first tap) added to its partial
    sum part[i] (0 for the FIRST row), kept in part or, after the LAST row, stored at dx[to]."""
    if FIRST:
        s = taps_sum(g, at, kd.f32(0), SW)
    else:
        s = taps_sum(g, at, part[i], SW)
    if LAST:
        dx[to] = s
    else:
        part[i] = s


@kd.kernel
def nearest_backward_rows(g: kd.Tensor, dx: kd.Tensor, rows: kd.i32, H_in: kd.i32, W_in: kd.i32,
                          SD: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int], ROWS: kd.Const[int],
                          BX: kd.Const[int], CHUNK: kd.Const[int], STREAM: kd.Const[bool]):
    """nearest_backward_sums' dx, the same bits, for units that are SIMD lanes: for each input
    row and each CHUNK columns of it, the SD·SH output rows of its blocks are read one after
    another (e, then a), each adding its SW taps a column to the column's partial sum in
    shared memory; the last row's sums go to dx. A unit only ever reads the partial sums it
    wrote, so no barrier is needed."""
    kd.avoid_gathers()
    if STREAM:
        kd.streaming_stores()
    part = kd.shared(kd.f32, CHUNK)
    W = W_in * SW
    HS = H_in * SH
    for k in range(ROWS):
        r = kd.min(kd.cube_pos_x() * ROWS + k, rows - 1)
        slab = r // H_in  # (plane, depth) of the row
        base = (kd.i64(slab) * (SD * HS) + (r - slab * H_in) * SH) * W
        for c0 in range(0, W_in, CHUNK):
            n = kd.min(CHUNK, W_in - c0)
            full = n - n % BX
            out = kd.i64(r) * W_in + c0
            for e in kd.unroll(SD):
                for a in kd.unroll(SH):
                    first, last = e == 0 and a == 0, e == SD - 1 and a == SH - 1
                    for i0 in range(0, full, BX):
                        i = i0 + kd.unit_pos_x()
                        row_taps(g, dx, part, base + (e * HS + a) * W + (c0 + i) * SW, out + i, i, SW, first, last)
                    if full + kd.unit_pos_x() < n:
                        i = full + kd.unit_pos_x()
                        row_taps(g, dx, part, base + (e * HS + a) * W + (c0 + i) * SW, out + i, i, SW, first, last)
