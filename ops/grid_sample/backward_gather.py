"""The grid_sample input gradient as a gather (issue 19): no atomics on the gradient's values.

backward_last.py scatters every contribution w·out_grad with a native 64-bit atomic add (one
a tap, channel and grid point: ~537M atomics for [32, 64, 256²]); atomics bound it. Here the
grid points are first bucketed by the cell their taps start from, and then one unit a pixel
(and a range of K channels) walks the lists of the cells whose taps can reach it, recomputes
each listed point's tap weights (flat_point_taps: the same function, so the same bits) and
adds w·out_grad as the SAME fixed-point integers as fixed_point.add_fixed / backward_last.
add_wide (same scale, same rounding of each contribution) in i64 registers. An integer sum
does not depend on order, so the list order (an atomic cursor's) does not matter and dx is
bit for bit the scatter's; it is written [N, C, *S] once, in order over pixels.

Cells (modes whose taps are an anchor plus {0, 1} offsets: bilinear, nearest): along an axis
of `size` pixels with T taps a point (2 bilinear, 1 nearest or a 2-D call's depth), a point's
cell is its first tap's index before clamping plus T − 1, in [0, size + T − 2]; a point none
of whose taps on some axis is inside the input gives nothing to dx and is in no list. The
padding mode is applied to the coordinate before the taps are taken (coords.axis_taps), so
the cell is read off the taps: bilinear, the first tap inside -> its index + 1, else the
second's index (the first tap was −1); nearest, the tap's index. Pixel p along the axis is
then tap k of cell p + T − 1 − k.

Bucketing, per call (all on the device): `count_cells` (one unit a point, a u32 atomic
increment of its cell's count), `block_scan` (exclusive sums within blocks of a cube's units,
and the block totals) followed by moe's one-cube `exclusive_scan` of the block totals, and
`fill_cells` (one unit a point: its slot is the cell's start plus an atomic cursor). A cell's
list starts at local[cell] + offsets[cell // block]. `gather_input_grad` then walks the lists.
A list entry is the point's index alone (RECORD 0: the walk reloads the point's grid
coordinates and recomputes its taps), or a record of RECORD words (`record_words`): for
bilinear the index and the bits of the second weight along x, y and z (the first is
1 − that, as coords.axis_taps computes it), for nearest the index alone (every weight is
1). Records take the walk's dependent grid load and tap arithmetic off every contribution:
each point is walked by 4 (2-D) or 8 (3-D) pixels and C / K channel ranges. `count_rough`
(at the end) measures the grid for gate.py's choice between this backward's two forms.
The grid gradient stays backward_last.backward_channels_last's per-point sum (SCATTER off), or
sample.sample_backward's (SCATTER off) under tuning.BACKWARD_GATHER_GRID_DIRECT."""
from __future__ import annotations

import kerneldsl as kd

from .channels_last import flat_point_taps
from .fixed_point import NAN_BIT, NEG_INF_BIT, POS_INF_BIT, fixed_of, fixed_scale, scale_exponent
from .gate import IF_SMOOTH, ROUGH_STEP, gate_open
from .sample import tap_layout


def flag_words(k: int, per_word: int) -> int:
    """u32 words holding K channels' flag bits, per_word channels (≤ 10) a word (plain Python,
    at compile time)."""
    return -(-k // per_word)


def flags_in_word(k: int, i: int, per_word: int) -> int:
    """Channels whose flags word i holds (plain Python, at compile time)."""
    return min(per_word, k - i * per_word)


def record_words(mode: str, records: bool) -> int:
    """Words (i32) a list entry holds (plain Python): 0, the point's index and no record; with
    records, 4 for bilinear (index, then x, y, z weight bits) and 1 for nearest (index)."""
    if not records:
        return 0
    return 4 if mode == "Bilinear" else 1


def taps_layout(mode: str, dims: int) -> tuple:
    """sample.tap_layout of flat_point_taps' tuple for `mode` ("Bilinear" or "Nearest"); plain
    Python, run at compile time."""
    t = 2 if mode == "Bilinear" else 1
    tz = t if dims == 3 else 1
    return tap_layout(4 * tz + 1 + 8 * t + 2, dims)


@kd.func
def axis_cell(t, at, T):
    """(whether some tap along this axis is inside, the axis's cell index) from the part of a
    point's taps starting at `at` (coords.axis_taps: T indices, T weights, T slopes, T inside)."""
    if T == 2:
        inside = t[at + 6] or t[at + 7]
        cell = kd.select(t[at + 6], t[at] + 1, t[at + 1])
    else:
        inside = t[at + 3]
        cell = t[at]
    return (inside, cell)


@kd.func
def record_weight(bits, T, i):
    """Tap i's weight along an axis of T taps, from a record's bits of the second weight
    (coords.axis_taps: bilinear 1 − f and f; one tap: 1)."""
    if T == 1:
        w = kd.f32(1.0)
    else:
        f = kd.bitcast(bits, kd.f32)
        if i == 0:
            w = 1.0 - f
        else:
            w = f
    return w


@kd.func
def point_cell(t, size_h, size_w, DIMS):
    """(whether the point gives dx anything, its cell in its batch item's cell grid [Dc, Hc, Wc],
    Hc = size_h + TX − 1, Wc = size_w + TX − 1) from its taps t (flat_point_taps)."""
    TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
    iz, cz = axis_cell(t, Z, TZ)
    iy, cy = axis_cell(t, Y, TX)
    ix, cx = axis_cell(t, X, TX)
    return (iz and iy and ix, (cz * (size_h + TX - 1) + cy) * (size_w + TX - 1) + cx)


@kd.kernel
def count_cells(grid: kd.Tensor, counts: kd.Tensor[kd.u32, 1], total: kd.i32, locations: kd.i32, cells: kd.i32,
                size_d: kd.i32, size_h: kd.i32, size_w: kd.i32, pad_mode: kd.i32, align: kd.i32,
                MODE: kd.Const[str], DIMS: kd.Const[int]):
    """counts[n·cells + cell] += 1 for each grid point (of grid [N·locations, DIMS], flat) that
    gives dx something; counts starts at zero."""
    e = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if e < total:
        t = flat_point_taps(grid, e, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
        inside, cell = point_cell(t, size_h, size_w, DIMS)
        if inside:
            kd.atomic_add(counts, (e // locations) * cells + cell, kd.u32(1))


@kd.kernel
def block_scan(counts: kd.Tensor[kd.u32, 1], local: kd.Tensor[kd.u32, 1], sums: kd.Tensor[kd.u32, 1], n: kd.i32):
    """local[i] = the sum of counts before i within its block (a cube's units, one element
    each), sums[block] = the block's total: planes' inclusive sums, then the planes' totals
    through shared memory."""
    u = kd.unit_pos_x()
    i = kd.cube_pos_x() * kd.cube_dim_x() + u
    part = kd.shared(kd.u32, kd.plane_count())
    v = kd.u32(0)
    if i < n:
        v = counts[i]
    incl = kd.plane_inclusive_sum(v)
    if kd.lane_pos() == kd.PLANE_DIM - 1:
        part[kd.plane_pos()] = incl
    kd.sync_cube()
    before = kd.u32(0)
    whole = kd.u32(0)
    for p in range(kd.plane_count()):
        s = part[p]
        whole += s
        if p < kd.plane_pos():
            before += s
    if i < n:
        local[i] = before + incl - v
    if u == 0:
        sums[kd.cube_pos_x()] = whole


@kd.func
def cell_start(local, offsets, g, BLOCK):
    """Where cell g's list starts in the point lists."""
    return kd.i32(local[g]) + kd.i32(offsets[g // BLOCK])


@kd.kernel
def fill_cells(grid: kd.Tensor, cursor: kd.Tensor[kd.u32, 1], local: kd.Tensor[kd.u32, 1],
               offsets: kd.Tensor[kd.u32, 1], lists: kd.Tensor[kd.i32, 1], total: kd.i32, locations: kd.i32,
               cells: kd.i32, size_d: kd.i32, size_h: kd.i32, size_w: kd.i32, pad_mode: kd.i32, align: kd.i32,
               MODE: kd.Const[str], DIMS: kd.Const[int], BLOCK: kd.Const[int], RECORD: kd.Const[int]):
    """Writes each counted grid point's index e into its cell's list (an atomic cursor a cell,
    starting at zero: the order within a list is arbitrary; after the pass cursor = counts);
    RECORD 4: entries of 4 words, e and the bits of its taps' second weights along x, y, z
    (z: 0 in 2-D)."""
    e = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if e < total:
        t = flat_point_taps(grid, e, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
        inside, cell = point_cell(t, size_h, size_w, DIMS)
        if inside:
            g = (e // locations) * cells + cell
            slot = cell_start(local, offsets, g, BLOCK) + kd.i32(kd.atomic_add(cursor, g, kd.u32(1)))
            if RECORD == 4:
                TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
                wz = 0
                if TZ == 2:
                    wz = kd.bitcast(t[Z + TZ + 1], kd.i32)
                entry = kd.make_vec(e, kd.bitcast(t[X + TX + 1], kd.i32), kd.bitcast(t[Y + TX + 1], kd.i32), wz)
                kd.store_vec(lists, kd.i64(slot) * 4, entry)
            else:
                lists[slot] = e


@kd.func
def pick(t, at, T, i):
    """t[at + i] for a run-time i in [0, T) (T ≤ 2: a select)."""
    if T == 1:
        v = t[at]
    else:
        v = kd.select(i == 0, t[at], t[at + 1])
    return v


@kd.func
def entry_weight(lists, grid, slot, a, b, k, size_d, size_h, size_w, MODE, pad_mode, align, DIMS, RECORD):
    """(the grid point of list entry `slot`, its weight on the pixel it reaches as tap (a, b, k)
    along (z, y, x)): the weight from the record's bits (RECORD 4), 1 (RECORD 1, nearest), or
    from the point's taps recomputed off the grid (RECORD 0). The same F32 values either way, so
    the same product (z · y · x, in that order)."""
    TZ, TX, Z, Y, X = taps_layout(MODE, DIMS)
    if RECORD == 4:   # the index and the weights' bits: no grid load, no taps
        entry = kd.load_vec(lists, kd.i64(slot) * 4, 4)
        e = entry[0]
        w = record_weight(entry[3], TZ, a) * record_weight(entry[2], TX, b) * record_weight(entry[1], TX, k)
    elif RECORD == 1:   # nearest: every weight 1
        e = lists[slot]
        w = kd.f32(1.0)
    else:
        e = lists[slot]
        t = flat_point_taps(grid, e, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
        w = pick(t, Z + TZ, TZ, a) * pick(t, Y + TX, TX, b) * pick(t, X + TX, TX, k)
    return (e, w)


@kd.func
def point_values(go, at, channel_stride, K, V):
    """out_grad's K channels of one grid point as F32, from element `at` on: channel_stride
    apart, or as vectors of V consecutive channels (V > 1, channel_stride 1)."""
    vals = ()
    if V == 1:
        for j in kd.unroll(K):
            vals = vals + (kd.f32(go[at + j * channel_stride]),)
    else:
        for h in kd.unroll(K // V):
            vec = kd.cast(kd.load_vec(go, at + h * V, V), kd.f32)
            for j in kd.unroll(V):
                vals = vals + (vec[j],)
    return vals


@kd.func
def add_point(acc, bad, vals, w, scale, checked, K, FLAGS):
    """(acc, bad) with one grid point's K contributions w·vals (point_values) added:
    fixed_point.fixed_of each into acc; where `checked`, non-finite ones as flag bits into bad
    instead."""
    summed = acc      # (both tuples keep their lengths through the run-time `if`)
    flagged = bad
    if checked:
        sums = ()
        marks = ()
        for j in kd.unroll(K):
            v = w * vals[j]
            finite = kd.abs(v) < kd.inf
            q = fixed_of(kd.select(finite, v, 0.0), scale)
            bit = kd.select(v != v, NAN_BIT, kd.select(v > 0.0, POS_INF_BIT, NEG_INF_BIT))
            sums = sums + (acc[j] + q,)
            marks = marks + (kd.select(finite, kd.u32(0), kd.u32(bit)),)
        words = ()
        for i in kd.unroll(flag_words(K, FLAGS)):
            word = bad[i]
            for j in kd.unroll(flags_in_word(K, i, FLAGS)):
                word = word | (marks[i * FLAGS + j] << (3 * j))
            words = words + (word,)
        summed = sums
        flagged = words
    else:   # every contribution finite: no flags to keep
        plain = ()
        for j in kd.unroll(K):
            plain = plain + (acc[j] + fixed_of(w * vals[j], scale),)
        summed = plain
    return (summed, flagged)


@kd.func
def pixel_input_grad(grid, go, counts, local, offsets, lists, max_bits, dx, C, locations, cells, size_d, size_h, size_w,
                     point_stride, channel_stride, pad_mode, align, MODE, DIMS, HEADROOM, K, V, FLAGS, BLOCK,
                     FINITE_PATH, RECORD, FLAT):
    """gather_input_grad's work for this unit's pixel and channels, out_grad read from go at
    point_stride / channel_stride (V channels a load)."""
    S = size_d * size_h * size_w
    s = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    n = kd.cube_pos_z()
    c0 = kd.cube_pos_y() * K
    if s < S:
        px = s % size_w
        r = s // size_w
        py = r % size_h
        pz = r // size_h
        TZ, TX, Z, Y, X = taps_layout(MODE, DIMS)
        scale = fixed_scale(max_bits[0], HEADROOM)
        # out_grad with no non-finite or huge value (abs_max_bits' flag, the same for every
        # unit) gives finite contributions only: the walk then keeps no flags (FINITE_PATH)
        checked = max_bits[1] != 0 or not FINITE_PATH
        acc = ()
        bad = ()   # the channels' flag bits, FLAGS channels of 3 bits a u32 (fewer registers)
        for j in kd.unroll(K):
            acc = acc + (kd.i64(0),)
        for i in kd.unroll(flag_words(K, FLAGS)):
            bad = bad + (kd.u32(0),)
        item = kd.i64(n) * C * locations
        firsts = ()   # every cell's list first (independent loads, in flight together), then the walks
        ends = ()
        for a in kd.unroll(TZ):
            for b in kd.unroll(TX):
                for k in kd.unroll(TX):
                    cell = ((pz + TZ - 1 - a) * (size_h + TX - 1) + py + TX - 1 - b) * (size_w + TX - 1) + px + TX - 1 - k
                    g = n * cells + cell
                    first = cell_start(local, offsets, g, BLOCK)
                    firsts = firsts + (first,)
                    ends = ends + (first + kd.i32(counts[g]),)
        cell_at = item - kd.i64(n * locations) * point_stride + kd.i64(c0) * channel_stride
        if FLAT > 0:
            NCELLS = TZ * TX * TX
            before = ()   # entries in the cells before each (a running total)
            total = 0
            for q in kd.unroll(NCELLS):
                before = before + (total,)
                total = total + ends[q] - firsts[q]
            for i0 in range(0, total, FLAT):
                points = ()   # FLAT entries' (weight, out_grad values): all loads issued first
                for h in kd.unroll(FLAT):
                    i = kd.min(i0 + h, total - 1)   # (past the end: the last entry again, not added)
                    q = 0    # the cell holding entry i: the count of cells that end at or before it
                    first = firsts[0]
                    skipped = 0
                    for m in kd.unroll(NCELLS - 1):
                        past = i >= before[m + 1]
                        q = q + kd.select(past, 1, 0)
                        first = kd.select(past, firsts[m + 1], first)
                        skipped = kd.select(past, before[m + 1], skipped)
                    e, w = entry_weight(lists, grid, first + i - skipped, q // (TX * TX), (q // TX) % TX, q % TX,
                                        size_d, size_h, size_w, MODE, pad_mode, align, DIMS, RECORD)
                    points = points + ((w, point_values(go, cell_at + kd.i64(e) * point_stride, channel_stride,
                                                        K, V)),)
                acc, bad = add_point(acc, bad, points[0][1], points[0][0], scale, checked, K, FLAGS)
                for h in kd.unroll(FLAT - 1):
                    if i0 + h + 1 < total:
                        acc, bad = add_point(acc, bad, points[h + 1][1], points[h + 1][0], scale, checked, K,
                                             FLAGS)
        else:
            for a in kd.unroll(TZ):
                for b in kd.unroll(TX):
                    for k in kd.unroll(TX):
                        at_cell = (a * TX + b) * TX + k
                        for slot in range(firsts[at_cell], ends[at_cell]):
                            e, w = entry_weight(lists, grid, slot, a, b, k, size_d, size_h, size_w, MODE, pad_mode,
                                                align, DIMS, RECORD)
                            vals = point_values(go, cell_at + kd.i64(e) * point_stride, channel_stride, K, V)
                            acc, bad = add_point(acc, bad, vals, w, scale, checked, K, FLAGS)
        unit = kd.exp2(kd.f64(-scale_exponent(max_bits[0], HEADROOM)))
        for j in kd.unroll(K):
            v = kd.f32(kd.f64(acc[j]) * unit)
            f = (bad[j // FLAGS] >> (3 * (j % FLAGS))) & 7
            if f != 0:
                pos = (f & POS_INF_BIT) != 0
                neg = (f & NEG_INF_BIT) != 0
                v = kd.select((f & NAN_BIT) != 0 or (pos and neg), kd.nan, kd.select(pos, kd.inf, -kd.inf))
            dx[(kd.i64(n) * C + c0 + j) * S + s] = v


@kd.kernel
def gather_input_grad(grid: kd.Tensor, go: kd.Tensor, counts: kd.Tensor[kd.u32, 1], local: kd.Tensor[kd.u32, 1],
                      offsets: kd.Tensor[kd.u32, 1], lists: kd.Tensor[kd.i32, 1], max_bits: kd.Tensor[kd.u32, 1],
                      dx: kd.Tensor, C: kd.i32, locations: kd.i32, cells: kd.i32, size_d: kd.i32, size_h: kd.i32,
                      size_w: kd.i32, point_stride: kd.i32, channel_stride: kd.i32, pad_mode: kd.i32, align: kd.i32,
                      MODE: kd.Const[str], DIMS: kd.Const[int], HEADROOM: kd.Const[int], K: kd.Const[int],
                      V: kd.Const[int], FLAGS: kd.Const[int], BLOCK: kd.Const[int], FINITE_PATH: kd.Const[bool],
                      RECORD: kd.Const[int], FLAT: kd.Const[int], gate: kd.Tensor[kd.u32, 1], limit: kd.i32,
                      WHEN: kd.Const[int], go_b: kd.Tensor, point_stride_b: kd.i32, channel_stride_b: kd.i32,
                      V_B: kd.Const[int], TWO: kd.Const[bool]):
    """dx [N, C, S] (flat, S = D·H·W): unit u of cube (x, y, z) takes pixel s = x·units + u of
    batch item z, channels y·K .. y·K + K − 1; it walks the lists of the cells whose taps reach
    s and sums fixed_point.fixed_of(w·out_grad) over them in i64, flags
    for non-finite contributions, then stores the sums as floats (NaN / ±inf where flagged, as
    fixed_point.finish). out_grad go: element (n, c, point l) at n·C·locations + l·point_stride
    + c·channel_stride (point_stride 1, channel_stride locations: [N, C, locations]; C and 1: a
    channels-last copy, read as vectors of V channels where V > 1, V dividing K). The channels'
    NaN/±inf flag bits are kept FLAGS channels (≤ 10) to a u32 register. lists' entries:
    RECORD words (fill_cells), 0 for the index alone. FLAT > 0: the cells' lists walked as one
    list (one loop over their total, FLAT entries an iteration with their loads issued
    together: a warp's units then wait for the longest sum of lists, not for the longest list
    of each cell in turn); 0: a loop a cell. gate, limit, WHEN: gate.py. TWO: both forms of a call in
    one launch (gate.py's choice made here, not by two launches of which one returns at once:
    each launch's cubes cost their scheduling): the walk over go as above where the grid is
    smooth, over go_b (point_stride_b, channel_stride_b, V_B) where it is not; WHEN unused."""
    if TWO and not gate_open(gate, limit, IF_SMOOTH):   # (both forms: the grid is not smooth)
        pixel_input_grad(grid, go_b, counts, local, offsets, lists, max_bits, dx, C, locations, cells, size_d, size_h,
                         size_w, point_stride_b, channel_stride_b, pad_mode, align, MODE, DIMS, HEADROOM, K, V_B, FLAGS,
                         BLOCK, FINITE_PATH, RECORD, FLAT)
    elif TWO or gate_open(gate, limit, WHEN):   # (gate.py: the other form of the call was chosen)
        pixel_input_grad(grid, go, counts, local, offsets, lists, max_bits, dx, C, locations, cells, size_d, size_h,
                         size_w, point_stride, channel_stride, pad_mode, align, MODE, DIMS, HEADROOM, K, V, FLAGS,
                         BLOCK, FINITE_PATH, RECORD, FLAT)


@kd.kernel
def count_rough(grid: kd.Tensor, gate: kd.Tensor[kd.u32, 1], total: kd.i32, size_d: kd.i32, size_h: kd.i32,
                size_w: kd.i32, pad_mode: kd.i32, align: kd.i32, MODE: kd.Const[str], DIMS: kd.Const[int],
                BX: kd.Const[int]):
    """gate[0] (zero first) += the number of points e ≥ 1 of grid [points, DIMS] (flat) whose
    first taps lie more than ROUGH_STEP pixels from point e − 1's: each cube strides over the
    points, sums its count and adds it with one atomic (launch at most MAX_CUBES cubes)."""
    rough = 0
    step = kd.cube_count_x() * BX
    for e in range(kd.cube_pos_x() * BX + kd.unit_pos_x() + 1, total, step):
        t = flat_point_taps(grid, e, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
        p = flat_point_taps(grid, e - 1, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
        TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
        apart = kd.abs(t[X] - p[X]) + kd.abs(t[Y] - p[Y]) + kd.abs(t[Z] - p[Z])
        rough += kd.select(apart > ROUGH_STEP, 1, 0)
    # (an F32 sum is exact: a cube counts at most points / its MAX_CUBES ≤ 2^21 steps)
    whole = kd.cube_sum(kd.f32(rough))
    if kd.unit_pos() == 0 and whole > 0.0:
        kd.atomic_add(gate, 0, kd.u32(whole))
