"""grid_sample on devices whose units are SIMD lanes (the cpu runtime), channels last:
chosen by tuning.lane_last_plan (new in session 21; lanes.py stays for channels that are
not whole vectors and, by default, for the backward).

lanes.py gives a unit a grid point and reads each tap channel by channel with a gather,
which caps the forward at torch's speed. Here the input is first copied to channels-last
F32 rows (to_rows: [N·S + 1, C], S the spatial size, the last row zeros; a one-unit cube
transposes blocks of 8 × 8 in vectors), and a cube's V units are CHANNELS (lanes along C;
V = 16: with 8, LLVM unrolled the unit loop into scalar code): a point's tap reads
xl[row·C + c0 + h·V + unit] are contiguous vector loads, whatever the grid. Values that are
the same for every unit (a point's rows and weights) are read from cube-shared arrays inside
uniform loops: scalar loads.

forward_last: a cube takes P consecutive grid points (cube_pos_x; a multiple of V) of batch
item cube_pos_z and H·V channels (cube_pos_y), in phases split by cube barriers (EXACT: P
divides the item's points, else its last cube's stores are masked):
1. taps: the units take the P points V at a time (a unit a point, vectorised over points as
   in lanes.py) and write each tap's input row (the zero row where the tap is outside the
   input: no select later, and NaN/inf pixels under an outside tap stay out) and weight to
   cube-shared arrays;
2. samples: a uniform loop over the P points; each unit adds w × xl[row, c] over the taps in
   tap order (sample.channel_sample's sum and order: lanes.py's bits) into a [H, P, V] stage
   (vector stores);
3. stores: units over points write each channel's P samples to y [N, C, points] (contiguous
   stores, strided reads of the stage).
The backward (tuning.LANE_LAST_BACKWARD): out_grad copied to rows as well; grid_grad_last
sums each point's grid gradient over channel vectors (the V partial sums added in unit order
through shared memory) and writes every point's taps; scatter_last adds the input gradient
point by point, in order, into an F32 channels-last scratch (a cube a batch item and channel
block: vector read-modify-writes that never collide, one fixed sum per element), then copies
it to dx.

Tensors are flat views of contiguous ones: xl [(N·S + 1)·C], grid [N, points, DIMS],
y [N, C, points]."""
from __future__ import annotations

import kerneldsl as kd

from .lanes import grid_taps, tap_terms
from .sample import tap_layout
from .vector_blocks import transpose8


@kd.func
def write_taps(grid, rows, ws, n, j0, points, size_d, size_h, size_w, zero_row, PAD, align, MODE, DIMS, P, T, EXACT):
    """Phase 1: rows[k·P + q] = the input row (n·S + the tap's offset, or zero_row where the
    tap is outside) and ws[k·P + q] = the weight of tap k of point j0 + q, for q < P (points
    past the item's last compute a copy of it)."""
    CB = kd.cube_dim_x()
    plane = size_d * size_h * size_w
    for q0 in range(0, P, CB):   # (CB divides P)
        q = q0 + kd.unit_pos_x()
        j = j0 + q
        if not EXACT:
            j = kd.min(j, points - 1)
        t = grid_taps(grid, (kd.i64(n) * points + j) * DIMS, size_d, size_h, size_w, MODE, PAD, align, DIMS)
        offs, w, oks = tap_terms(t, size_h, size_w, DIMS)
        for k in kd.unroll(T):
            rows[k * P + q] = kd.select(oks[k] != 0, n * plane + offs[k], zero_row)
            ws[k * P + q] = w[k]


@kd.kernel
def forward_last(xl: kd.Tensor, grid: kd.Tensor, y: kd.Tensor, channels: kd.i32, points: kd.i32, size_d: kd.i32,
                 size_h: kd.i32, size_w: kd.i32, zero_row: kd.i32, PAD: kd.Const[int], align: kd.i32,
                 MODE: kd.Const[str], DIMS: kd.Const[int], T: kd.Const[int], P: kd.Const[int], H: kd.Const[int],
                 EXACT: kd.Const[bool]):
    """y = x sampled at grid, from xl (channels last, zero row at zero_row): P points and
    H·V channels a cube (V = the cube's units), in the three phases of the module docstring."""
    V = kd.cube_dim_x()
    u = kd.unit_pos_x()
    rows = kd.shared(kd.i32, T * P)
    ws = kd.shared(kd.f32, T * P)
    stage = kd.shared(kd.f32, H * P * V)   # [H, P, V]: vector h of point q at (h·P + q)·V
    n = kd.cube_pos_z()
    j0 = kd.cube_pos_x() * P
    c0 = kd.cube_pos_y() * (H * V)
    write_taps(grid, rows, ws, n, j0, points, size_d, size_h, size_w, zero_row, PAD, align, MODE, DIMS, P, T, EXACT)
    kd.sync_cube()
    c = c0 + u
    for q in range(P):                 # uniform: a point's rows and weights are scalars
        accs = ()
        for h in kd.unroll(H):
            accs = accs + (kd.f32(0),)
        for k in kd.unroll(T):
            w = ws[k * P + q]
            summed = ()
            for h in kd.unroll(H):
                summed = summed + (accs[h] + w * kd.f32(xl[kd.i64(rows[k * P + q]) * channels + c + h * V]),)
            accs = summed
        for h in kd.unroll(H):
            stage[(h * P + q) * V + u] = accs[h]
    kd.sync_cube()
    count = kd.min(P, points - j0)
    for h in range(H):   # uniform; units over points, V channels a step (an interleaved group of V loads)
        base = (kd.i64(n) * channels + c0 + h * V) * points + j0
        for q0 in range(0, P, V):
            q = q0 + u
            for b in kd.unroll(V):
                if EXACT:
                    y[base + kd.i64(b) * points + q] = stage[(h * P + q) * V + b]
                elif q < count:
                    y[base + kd.i64(b) * points + q] = stage[(h * P + q) * V + b]


@kd.kernel
def to_rows(x: kd.Tensor, xl: kd.Tensor, channels: kd.i32, spatial: kd.i32, SB: kd.Const[int], CB: kd.Const[int],
            VEC: kd.Const[bool]):
    """xl[(n·S + s)·C + c] = x[(n·C + c)·S + s] and the zero row xl[N·S·C + c] = 0: a one-unit
    cube (x, 0, z) copies positions x·SB .. + SB (the last cube of an item fewer) of batch item
    z, CB channels × 8 positions a step. VEC (the host checked that rows and planes start at
    multiples of 8 elements: CB 8, S and x's offset multiples of 8): a step is 8 vector loads
    along the channel planes, transposed by kd.make_vec into 8 vector stores along the rows
    (LLVM shuffles). Else element by element (the rest of a cube's positions too). A unit a
    channel across the lanes read 8 or 16 planes at one position (a gather a position; the
    planes of a power-of-two size also fell into one cache set) and a tile in shared memory
    gathered from it instead: [4, 16, 128²] f32 0.29-0.31 ms through the tile, 0.15 here."""
    n = kd.cube_pos_z()
    s0 = kd.cube_pos_x() * SB
    end = kd.min(s0 + SB, spatial)
    whole = s0 + (end - s0) // 8 * 8 if VEC else s0
    for cb in range(0, channels, CB):
        if VEC:
            for s in range(s0, whole, 8):
                vs = ()
                for c in kd.unroll(8):
                    vs = vs + (kd.cast(kd.load_vec(x, (kd.i64(n) * channels + cb + c) * spatial + s, 8), kd.f32),)
                rows = transpose8(vs)
                for j in kd.unroll(8):
                    kd.store_vec(xl, (kd.i64(n) * spatial + s + j) * channels + cb, rows[j])
        for s in range(whole, end):
            for c in kd.unroll(CB):
                xl[(kd.i64(n) * spatial + s) * channels + cb + c] = \
                    kd.f32(x[(kd.i64(n) * channels + cb + c) * spatial + s])
    if kd.cube_pos_x() == 0 and n == 0:
        for c in range(channels):
            xl[kd.i64(kd.cube_count_z()) * spatial * channels + c] = kd.f32(0)


@kd.func
def write_grad_taps(grid, rows, slopes, dpix, tap_at, tap_w, n, j0, points, size_d, size_h, size_w, PAD, align, MODE,
                    DIMS, P, T, EXACT):
    """The backward's phase 1 (grid_grad_last): for each point q < P of the cube (j0 + q,
    clamped), rows[k·P + q] = tap k's channels-last row (n·S + offset; the zero row N·S
    where outside, as write_taps), slopes[(a·T + k)·P + q] = d weight_k / d pixel coordinate
    a (a = x, y, z), dpix[a·P + q] = d pixel coordinate a / d grid coordinate a; and for the
    input gradient's scatter, tap_at[point·T + k] = the offset in the plane (S where outside)
    and tap_w = the weight, for points that exist."""
    CB = kd.cube_dim_x()
    plane = size_d * size_h * size_w
    for q0 in range(0, P, CB):   # (CB divides P)
        q = q0 + kd.unit_pos_x()
        j = j0 + q
        if not EXACT:   # (a clamp makes the grid's loads gathers)
            j = kd.min(j, points - 1)
        point = kd.i64(n) * points + j
        t = grid_taps(grid, point * DIMS, size_d, size_h, size_w, MODE, PAD, align, DIMS)
        TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
        offs, w, oks = tap_terms(t, size_h, size_w, DIMS)
        for a in kd.unroll(TZ):
            for b in kd.unroll(TX):
                for i in kd.unroll(TX):
                    k = (a * TX + b) * TX + i   # (tap_terms' order)
                    wz = t[Z + TZ + a]
                    wy = t[Y + TX + b]
                    wx = t[X + TX + i]
                    rows[k * P + q] = kd.select(oks[k] != 0, n * plane + offs[k], kd.cube_count_z() * plane)
                    slopes[k * P + q] = t[X + 2 * TX + i] * wy * wz
                    slopes[(T + k) * P + q] = t[Y + 2 * TX + b] * wx * wz
                    slopes[(2 * T + k) * P + q] = t[Z + 2 * TZ + a] * wx * wy
                    if EXACT:   # (a condition per unit would make the whole phase scalar)
                        tap_at[point * T + k] = kd.select(oks[k] != 0, offs[k], plane)
                        tap_w[point * T + k] = w[k]
                    elif j0 + q < points:
                        tap_at[point * T + k] = kd.select(oks[k] != 0, offs[k], plane)
                        tap_w[point * T + k] = w[k]
        dpix[q] = t[X + 4 * TX]
        dpix[P + q] = t[Y + 4 * TX]
        dpix[2 * P + q] = t[Z + 4 * TZ]


@kd.kernel
def grid_grad_last(xl: kd.Tensor, gl: kd.Tensor, grid: kd.Tensor, grad_grid: kd.Tensor,
                   tap_at: kd.Tensor[kd.i32, 1], tap_w: kd.Tensor[kd.f32, 1], channels: kd.i32, points: kd.i32,
                   size_d: kd.i32, size_h: kd.i32, size_w: kd.i32, PAD: kd.Const[int], align: kd.i32,
                   MODE: kd.Const[str], DIMS: kd.Const[int], T: kd.Const[int], P: kd.Const[int],
                   EXACT: kd.Const[bool]):
    """grad_grid = d(Σ g·y)/d grid from xl (the input's channels-last rows, a zero row at N·S)
    and gl (out_grad's, [N·points, C]): cube (x, 0, n) takes P points of batch item n and
    every channel, V (its units) a vector. Per point (a uniform loop, its taps scalars), each
    unit sums over its channels c ≡ unit (mod V) g[c]·(Σ_k x[tap k, c]·slope_k) per axis; the
    V partial sums leave through shared memory and are added in unit order per point. Also
    writes tap_at / tap_w for scatter_last (write_grad_taps)."""
    V = kd.cube_dim_x()
    u = kd.unit_pos_x()
    rows = kd.shared(kd.i32, T * P)
    slopes = kd.shared(kd.f32, 3 * T * P)
    dpix = kd.shared(kd.f32, 3 * P)
    parts = kd.shared(kd.f32, 3 * P * V)   # [axis, point, unit]
    n = kd.cube_pos_z()
    j0 = kd.cube_pos_x() * P
    write_grad_taps(grid, rows, slopes, dpix, tap_at, tap_w, n, j0, points, size_d, size_h, size_w, PAD, align, MODE,
                    DIMS, P, T, EXACT)
    kd.sync_cube()
    for q in range(P):   # uniform
        gx = kd.f32(0)
        gy = kd.f32(0)
        gz = kd.f32(0)
        grow = (kd.i64(n) * points + kd.min(j0 + q, points - 1)) * channels
        for c0 in range(0, channels, V):   # uniform
            tx = kd.f32(0)
            ty = kd.f32(0)
            tz = kd.f32(0)
            for k in kd.unroll(T):
                v = kd.f32(xl[kd.i64(rows[k * P + q]) * channels + c0 + u])
                tx += v * slopes[k * P + q]
                ty += v * slopes[(T + k) * P + q]
                if DIMS == 3:
                    tz += v * slopes[(2 * T + k) * P + q]
            go = kd.f32(gl[grow + c0 + u])
            gx += go * tx
            gy += go * ty
            if DIMS == 3:
                gz += go * tz
        parts[q * V + u] = gx
        parts[(P + q) * V + u] = gy
        parts[(2 * P + q) * V + u] = gz
    kd.sync_cube()
    count = kd.min(P, points - j0)
    for q0 in range(0, P, V):   # units over points: each point's V partial sums in unit order
        q = q0 + u
        at = (kd.i64(n) * points + j0 + q) * DIMS
        for a in kd.unroll(DIMS):
            s = kd.f32(0)
            for i in kd.unroll(V):
                s += parts[(a * P + q) * V + i]
            if EXACT:
                grad_grid[at + a] = s * dpix[a * P + q]
            elif q < count:
                grad_grid[at + a] = s * dpix[a * P + q]


@kd.kernel
def scatter_last(gl: kd.Tensor, tap_at: kd.Tensor[kd.i32, 1], tap_w: kd.Tensor[kd.f32, 1],
                 acc: kd.Tensor[kd.f32, 1], dx: kd.Tensor, channels: kd.i32, points: kd.i32, spatial: kd.i32,
                 T: kd.Const[int], H: kd.Const[int]):
    """dx = the input gradient: cube (0, y, n) takes batch item n and channels y·H·V .. + H·V
    (V its units, a channel each). It zeroes its part of the F32 accumulator acc [N, S + 1,
    C] (row S of an item: the slot of outside taps, never read), then adds every grid point's
    g[point, c]·w_k to its taps' rows, the points and taps IN ORDER (one fixed sum per
    element whatever the threads do; a unit's channels are its own, so the read-modify-writes
    are vectors and never collide), then copies its rows to dx [N, C, S] cast once."""
    V = kd.cube_dim_x()
    u = kd.unit_pos_x()
    n = kd.cube_pos_z()
    c0 = kd.cube_pos_y() * (H * V)
    first = kd.i64(n) * (spatial + 1)
    for s in range(spatial + 1):   # uniform
        for h in kd.unroll(H):
            acc[(first + s) * channels + c0 + h * V + u] = kd.f32(0)
    for j in range(points):        # uniform, in order
        e = (kd.i64(n) * points + j) * T
        for k in kd.unroll(T):
            w = tap_w[e + k]
            row = first + tap_at[e + k]
            for h in kd.unroll(H):
                acc[row * channels + c0 + h * V + u] = (acc[row * channels + c0 + h * V + u] +
                                                        w * kd.f32(gl[(kd.i64(n) * points + j) * channels + c0 + h * V + u]))
    for s in range(spatial):       # uniform: each unit writes its channels' planes in order
        for h in kd.unroll(H):
            dx[(kd.i64(n) * channels + c0 + h * V + u) * spatial + s] = acc[(first + s) * channels + c0 + h * V + u]
