"""`Direct`'s plan for runtimes whose units are SIMD lanes (the CPU; tuning.direct_plan): a
cube is one vector of consecutive output columns, and each unit keeps a register block of
KB output channels x PR output rows (`blocking`), for the forward and the data backward pass;
the weight gradient (`weight_rows`) walks the same vectors of output columns.

- The source is first copied, as f32 and channel-major ([B, C, D', H', W'] whatever the
  caller's layout and strides), into a zero-padded buffer that holds every window of every
  unit of every cube: the kernel needs no bounds test, clamp or select, and a tap's read at
  stride 1 is affine in the unit index (one vector load).
- The weights are packed as f32 [groups x channel blocks, reduction channel, tap, KB] (zeros
  past a group's channels), so a tap's KB weights are contiguous and uniform over the cube:
  each is one broadcast operand of PR fused multiply-adds, each loaded input vector feeds KB.
- Kernel size, stride and dilation are compile-time, so the taps unroll; the cube is exactly
  one vector wide, so the KB x PR sums live in vector registers for the whole reduction
  (the unit loop, lifted inside the channel loop, runs once per reduction channel).
- Measured on the 2-core AMD EPYC (Zen 5) dev box, 3x3 f32 at 56², C = K = 64: 16 sums a
  unit (4 channels x 4 rows) beat 16 x 1, 8 x 2 and 2 x 8 by 8-15%; 24 or 32 sums spill.
- The data backward pass is the same kernel run as a stride-1 convolution of the output
  gradient with the flipped, transposed weights (pack_weights' TRANSPOSED); for a stride
  above 1 the copy spreads the gradient out with zeros between its values (a stride apart),
  which costs stride^rank more products than the gather form but keeps every read a vector.
- The weight gradient copies the source as the forward pass does and the output gradient
  into a zero-padded f32 buffer (zero past the last column and row, so whole vectors add
  nothing wrong); a cube owns one reduction channel and KB output channels, each lane keeps
  KB x taps sums over its columns for the whole (batch x output) reduction, PR rows a step
  (each loaded source vector feeds KB products, each gradient vector `taps`), and
  `kd.cube_sum` adds the lanes at the end in a fixed order: deterministic.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.tensor import Tensor

from .gather import split_tap

ACCUMULATORS = 16         # f32 sums a unit keeps, with 32 vector registers (AVX-512)
ACCUMULATORS_NARROW = 8   # with 16 vector registers (AVX2; not measured here: no such host)
ROWS = 4                  # output rows a unit owns (kernels taller than one row)
WEIGHT_ACCUMULATORS = 24  # weight gradient: sums a lane keeps (AVX-512; 3x3: 2 channels x 9 taps)
WEIGHT_ACCUMULATORS_NARROW = 10  # with 16 vector registers (not measured: no such host)
WEIGHT_ROWS = 4           # weight gradient: output rows a loop step covers


@kd.kernel
def pad_source(src: kd.Tensor, xp: kd.Tensor, P: kd.Const[tuple], GATHER: kd.Const[bool], PH: kd.Const[int]):
    """xp[b, c, z, y, ph·Q + q] = src[b, c, (z − QD)/SD, (y − QH)/SH, (i − QW)/SW] for the
    padded column i = q·PH + ph, as f32 where each quotient is whole and inside src, else 0;
    P = (QD, QH, QW, SD, SH, SW). PH phases (the consumer's column stride; Q = row length /
    PH) put the columns a strided tap reads next to each other (`tap_column`). One cube per
    (row of xp, channel, batch), units along the row. GATHER where the read of a row is not
    unit-strided (NHWC source, or PH > 1): each unit then reads a clamped, always valid
    position and selects 0 outside, so the row is one vector gather; a masked read there
    would become a branch and a scalar load a unit (1.8 against 1.25 ms of CPU for the
    issue's NHWC case, 0.5-0.9 ms for its NCHW copy)."""
    Hp, Wp = xp.shape[3], xp.shape[4]
    D, H, W = src.shape[2], src.shape[3], src.shape[4]
    z = kd.cube_pos_x() // Hp
    yy = kd.cube_pos_x() % Hp
    c = kd.cube_pos_y()
    b = kd.cube_pos_z()
    tz = z - P[0]
    ty = yy - P[1]
    iz = tz // P[3]
    iy = ty // P[4]
    row_in = tz >= 0 and iz * P[3] == tz and iz < D and ty >= 0 and iy * P[4] == ty and iy < H
    iz = kd.clamp(iz, 0, D - 1)
    iy = kd.clamp(iy, 0, H - 1)
    Q = Wp // PH
    for j in range(PH * ((Q + kd.cube_dim_x() - 1) // kd.cube_dim_x())):   # uniform: the unit loop inside vectorises
        ph = j % PH
        q = kd.i64(j // PH * kd.cube_dim_x()) + kd.unit_pos_x()
        i = q * PH + ph
        tx = i - P[2]
        ix = tx // P[5]
        v = kd.f32(0)
        inside = row_in and tx >= 0 and ix * P[5] == tx and ix < W
        if GATHER:
            v = kd.select(inside, kd.f32(src[b, c, iz, iy, kd.clamp(ix, 0, W - 1)]), 0.0)
        elif inside:
            v = kd.f32(src[b, c, iz, iy, ix])    # a masked load, unit-affine at spread 1
        if q < Q:
            xp[b, c, z, yy, ph * Q + q] = v


@kd.func
def tap_column(ow, kx, G, Q):
    """The column of xp (split into G[2] phases of Q columns: pad_source) that output column
    ow's tap kx reads: ow·S + kx·Dil of the padded row, which is unit-strided in ow (at
    stride 1 the phase term is 0·Q)."""
    return kx * G[8] % G[2] * Q + ow + kx * G[8] // G[2]


@kd.kernel
def pack_weights(w: kd.Tensor, wp: kd.Tensor, outs: kd.i32, G: kd.Const[tuple], KB: kd.Const[int],
                 TRANSPOSED: kd.Const[bool]):
    """wp[g·nb + j, c, tap, i] = the f32 weight joining reduction channel c to output channel
    j·KB + i of group g (0 past the group's channels): w[co, c, k], or for the transposed pass
    w[c, co, K − 1 − k] (flipped taps). One cube per (block, c), units over (tap, i)."""
    red = wp.shape[1]
    nb = (outs + KB - 1) // KB
    g = kd.cube_pos_x() // nb
    co = kd.cube_pos_x() % nb * KB
    c = kd.cube_pos_y()
    for j in range(kd.unit_pos_x(), wp.shape[2] * KB, kd.cube_dim_x()):
        kz, ky, kx = split_tap(j // KB, G)
        o = co + j % KB
        live = o < outs
        o = kd.min(o, outs - 1)
        if TRANSPOSED:
            v = kd.f32(w[g * red + c, o, G[9] - 1 - kz, G[10] - 1 - ky, G[11] - 1 - kx])
        else:
            v = kd.f32(w[g * outs + o, c, kz, ky, kx])
        wp[kd.cube_pos_x(), c, j // KB, j % KB] = kd.select(live, v, 0.0)


@kd.func
def channel_taps(xp, wp, acc, b, gb, c0, c, od, oh, ow, G, KB, PR):
    """acc[r·KB + i] + sum over the taps of xp[b, c0 + c, (od, oh + r, ow)·S + k·Dil]·wp[gb, c, k, i]
    for PR output rows r and KB channels i."""
    for kz in kd.unroll(G[9]):
        for ky in kd.unroll(G[10]):
            for kx in kd.unroll(G[11]):
                tap = (kz * G[10] + ky) * G[11] + kx
                vs = ()
                for r in kd.unroll(PR):
                    vs = vs + (xp[b, c0 + c, od * G[0] + kz * G[6], (oh + r) * G[1] + ky * G[7],
                                  tap_column(ow, kx, G, xp.shape[4] // G[2])],)
                nxt = ()
                for r in kd.unroll(PR):
                    for i in kd.unroll(KB):
                        nxt = nxt + (kd.fma(vs[r], wp[gb, c, tap, i], acc[r * KB + i]),)
                acc = nxt
    return acc


@kd.func
def store_sum(y, bias, r, b, co, od, oh, ow, HAS_BIAS):
    """y[b, co, od, oh, ow] = r (+ bias[co])."""
    if HAS_BIAS:
        r = r + kd.f32(bias[co])
    y[b, co, od, oh, ow] = r


@kd.func
def store_channels_last(y, bias, r, b, co, od, oh, ow, HAS_BIAS):
    """y[b, od, oh, ow, co] = r (+ bias[co]): y channels-last, so a block's channels are adjacent."""
    if HAS_BIAS:
        r = r + kd.f32(bias[co])
    y[b, od, oh, ow, co] = r


@kd.kernel
def convolve_rows(xp: kd.Tensor, wp: kd.Tensor, bias: kd.Tensor, y: kd.Tensor, HAS_BIAS: kd.Const[bool],
                  G: kd.Const[tuple], KB: kd.Const[int], PR: kd.Const[int], CL: kd.Const[bool]):
    """y[b, g·outs + j·KB + i, o] = bias + sum_{c, k} xp[b, g·red + c, o·S + k·Dil]·wp[g·nb + j, c, k, i]
    over the padded source and packed weights; grid (output rows x vectors a row, groups x
    KB-channel blocks, batch). CL: y is the channels-last view [B, OD, OH, OW, K] (the
    caller's NHWC output), whose last axis is contiguous at compile time: a unit's KB
    channels of a full block are then KB adjacent stores that LLVM merges into one (the
    lanes are a channel count apart, so each lane stores on its own either way; 10.3 against
    10.8 ms of CPU for the issue's NHWC case, the NCHW kernel 10.1)."""
    OH, OW = (y.shape[2], y.shape[3]) if CL else (y.shape[3], y.shape[4])
    red = wp.shape[1]
    outs = (y.shape[4] if CL else y.shape[1]) // (xp.shape[1] // red)
    per_row = (OW + kd.cube_dim_x() - 1) // kd.cube_dim_x()
    nb = (outs + KB - 1) // KB
    gb = kd.cube_pos_y()
    # ch0, od and oh are assigned twice so that they are not rematerialised (recomputed, with
    # their divisions, at each use): a division under the store's condition would keep the
    # vectoriser from turning the guarded stores into masked vector stores
    ch0, od, oh = 0, 0, 0
    ch0 = gb // nb * outs + gb % nb * KB
    b = kd.cube_pos_z()
    row = kd.cube_pos_x() // per_row
    od = row // ((OH + PR - 1) // PR)
    oh = row % ((OH + PR - 1) // PR) * PR
    # i64: the vectoriser then needs no run-time check that a tap's i32 column does not wrap
    ow = kd.i64(kd.cube_pos_x() % per_row * kd.cube_dim_x()) + kd.unit_pos_x()
    c0 = gb // nb * red
    acc = (kd.f32(0),) * (KB * PR)
    for c in range(red):
        acc = channel_taps(xp, wp, acc, b, gb, c0, c, od, oh, ow, G, KB, PR)
    live = kd.min(outs - gb % nb * KB, KB)    # channels of the block inside the group
    for r in kd.unroll(PR):
        if CL:
            if ow < OW and oh + r < OH:
                if live == KB:
                    for i in kd.unroll(KB):
                        store_channels_last(y, bias, acc[r * KB + i], b, ch0 + i, od, oh + r, ow, HAS_BIAS)
                else:
                    for i in kd.unroll(KB):
                        if i < live:
                            store_channels_last(y, bias, acc[r * KB + i], b, ch0 + i, od, oh + r, ow, HAS_BIAS)
        else:
            for i in kd.unroll(KB):
                if i < live and ow < OW and oh + r < OH:
                    store_sum(y, bias, acc[r * KB + i], b, ch0 + i, od, oh + r, ow, HAS_BIAS)


@kd.func
def tap_products(xp, dyp, acc, b, ci, cos, od, oh, ow, G, KB, PR):
    """acc[tap·KB + i] + sum over PR output rows r of dyp[b, cos[i], od, oh + r, ow]·
    xp[b, ci, (od, oh + r, ow)·S + tap·Dil] for every tap and the KB channels cos."""
    for r in kd.unroll(PR):
        ds = ()
        for i in kd.unroll(KB):
            ds = ds + (dyp[b, cos[i], od, oh + r, ow],)
        nxt = ()
        for kz in kd.unroll(G[9]):
            for ky in kd.unroll(G[10]):
                for kx in kd.unroll(G[11]):
                    v = xp[b, ci, od * G[0] + kz * G[6], (oh + r) * G[1] + ky * G[7],
                           tap_column(ow, kx, G, xp.shape[4] // G[2])]
                    tap = (kz * G[10] + ky) * G[11] + kx
                    for i in kd.unroll(KB):
                        nxt = nxt + (kd.fma(ds[i], v, acc[tap * KB + i]),)
        acc = nxt
    return acc


@kd.kernel
def weight_rows(xp: kd.Tensor, dyp: kd.Tensor, dw: kd.Tensor, G: kd.Const[tuple], KB: kd.Const[int],
                PR: kd.Const[int], BLOCKS_FIRST: kd.Const[bool]):
    """dw[g·outs + j·KB + i, c, tap] = sum_{b, o} dyp[b, g·outs + j·KB + i, o]·xp[b, g·red + c,
    o·S + tap·Dil] over the padded source and the zero-padded output gradient (zero past the
    output, so whole vectors are summed); grid (reduction channels, groups x KB-channel
    blocks), or the other way round where BLOCKS_FIRST: cubes that follow each other share
    their source channel (or their gradient channels), which stays in cache, and stream the
    other. Each lane sums its columns; cube_sum (a fixed order) adds the lanes at the end."""
    red = dw.shape[1]
    outs = dw.shape[0] // (xp.shape[1] // red)
    nb = (outs + KB - 1) // KB
    c = kd.cube_pos_y() if BLOCKS_FIRST else kd.cube_pos_x()
    gb = kd.cube_pos_x() if BLOCKS_FIRST else kd.cube_pos_y()
    co0 = gb // nb * outs
    j0 = gb % nb * KB
    ci = gb // nb * red + c
    cos = ()
    for i in kd.unroll(KB):
        cos = cos + (co0 + kd.min(j0 + i, outs - 1),)   # clamped for loading; not stored
    acc = (kd.f32(0),) * (KB * G[9] * G[10] * G[11])
    for b in range(dyp.shape[0]):
        for od in range(dyp.shape[2]):
            for oh in range(0, dyp.shape[3], PR):
                for ow0 in range(0, dyp.shape[4], kd.cube_dim_x()):
                    ow = kd.i64(ow0) + kd.unit_pos_x()   # i64: see convolve_rows
                    acc = tap_products(xp, dyp, acc, b, ci, cos, od, oh, ow, G, KB, PR)
    for kz in kd.unroll(G[9]):
        for ky in kd.unroll(G[10]):
            for kx in kd.unroll(G[11]):
                for i in kd.unroll(KB):
                    s = kd.cube_sum(acc[((kz * G[10] + ky) * G[11] + kx) * KB + i])
                    if kd.unit_pos_x() == 0 and j0 + i < outs:
                        dw[co0 + j0 + i, c, kz, ky, kx] = s


def lanes(rt) -> int:
    """Units per cube: one vector of f32."""
    return max(1, rt.capabilities.vector_bytes // 4)


def blocking(rt, outs: int, OH: int, KH: int) -> tuple:
    """(KB, PR): a unit's register block of KB output channels x PR output rows, ACCUMULATORS
    sums at most, KB spread evenly over the channel blocks so that few padded (wasted)
    channels remain. ROWS rows where the kernel is more than one row tall (neighbouring
    output rows read the same input rows, so each loaded vector serves several taps and each
    loaded weight several rows) and the channels alone would fill the block: with fewer
    channels, rows would grow the unrolled body (and its compile time, 2-3x on the test
    shapes) past the one-row plan's."""
    budget = ACCUMULATORS if rt.capabilities.vector_bytes >= 64 else ACCUMULATORS_NARROW
    PR = max(1, min(ROWS, OH)) if KH > 1 and outs >= budget else 1
    most = max(1, budget // PR)
    blocks = (outs + most - 1) // most
    return (outs + blocks - 1) // blocks, PR


def weight_blocking(rt, outs: int, taps: int) -> int:
    """KB: output channels a cube of the weight gradient keeps sums for (KB x taps a lane),
    WEIGHT_ACCUMULATORS at most (each loaded source vector feeds KB products, each loaded
    gradient vector `taps`), spread evenly over the channel blocks."""
    budget = WEIGHT_ACCUMULATORS if rt.capabilities.vector_bytes >= 64 else WEIGHT_ACCUMULATORS_NARROW
    most = max(1, budget // taps)
    blocks = (outs + most - 1) // most
    return (outs + blocks - 1) // blocks


def padded_extent(out: tuple, stride: tuple, R: tuple, dil: tuple, units: int, PR: int = 1) -> tuple:
    """(D', H', W') of a padded source that holds every window of every output position (the
    rows rounded up to PR, the last vector of a row to `units`); W' = S·Q for the S phases
    of Q columns (tap_column), which at S = 1 is the window's extent."""
    out = (out[0], (out[1] + PR - 1) // PR * PR, (out[2] + units - 1) // units * units)
    D, H = ((o - 1) * s + (r - 1) * d + 1 for o, s, r, d in zip(out[:2], stride, R, dil))
    return D, H, stride[2] * (out[2] + (R[2] - 1) * dil[2] // stride[2])


def convolve(rt, src, w, out5, shift: tuple, spread: tuple, G: tuple, transposed: bool, bias=None) -> None:
    """out5 = the convolution of `src` (copied into a padded f32 buffer: source position t lands
    at t·spread + shift) with weights w under geometry G (stride, _, dilation, kernel), plus bias."""
    units = lanes(rt)
    B, C = src.shape[0], src.shape[1]
    O = tuple(out5.shape[2:])
    outs = w.shape[1] if transposed else out5.shape[1] // (C // w.shape[1])
    red = C // (out5.shape[1] // outs)
    KB, PR = blocking(rt, outs, O[1], G[10])
    shape = (B, C, *padded_extent(O, G[0:3], G[9:12], G[6:9], units, PR))
    xp = rt.empty(shape, "f32")
    pad_source[(shape[2] * shape[3], C, B), units](src, xp, (*shift, *spread), src.strides[4] != 1 or G[2] > 1,
                                                   G[2])
    blocks = out5.shape[1] // outs * ((outs + KB - 1) // KB)
    wp = rt.empty((blocks, red, G[9] * G[10] * G[11], KB), "f32")
    pack_weights[(blocks, red), units](w, wp, outs, G, KB, transposed)
    grid = (O[0] * ((O[1] + PR - 1) // PR) * ((O[2] + units - 1) // units), blocks, B)
    has_bias = bias is not None
    # without a bias, wp stands in for it (never read)
    # channels last with several channels a block: a view [B, D, H, W, K] whose channels are
    # the contiguous axis (with one channel a block there is nothing to merge, and the
    # depthwise kernel measured 7.0 against 2.4 ms of CPU through the view)
    cl = out5.strides[1] == 1 and out5.strides[4] != 1 and KB > 1
    y = out5
    if cl:
        y = Tensor(out5.runtime, out5.buffer, [out5.shape[a] for a in (0, 2, 3, 4, 1)], out5.dtype,
                   [out5.strides[a] for a in (0, 2, 3, 4, 1)], out5.offset)
    convolve_rows[grid, units](xp, wp, bias if has_bias else wp, y, has_bias, G, KB, PR, cl)


def run_forward(p, y5) -> None:
    """y5 (a [B, K, OD, OH, OW] view) = the forward convolution of p."""
    g = p.geo
    convolve(p.runtime, p.x, p.w, y5, g.pad, (1, 1, 1), g.consts(), False, p.bias)


def run_data_backward(p, dx5) -> None:
    """dx5 (a [B, C, D, H, W] view) = the input gradient of p: a stride-1 convolution of the
    gradient spread out by the stride, with the flipped, transposed weights."""
    g = p.geo
    shift = tuple((r - 1) * d - q for r, d, q in zip(g.R, g.dil, g.pad))
    G = (1, 1, 1, 0, 0, 0, *g.dil, *g.R)
    convolve(p.runtime, p.dy, p.w, dx5, shift, g.stride, G, True)


def run_weight_backward(p, dw5) -> None:
    """dw5 (a [K, C/g, KD, KH, KW] view) = the weight gradient of p: the source copied as for
    the forward pass, the output gradient into a zero-padded f32 buffer (rows rounded up to
    PR, columns to whole vectors), then weight_rows. Measured on the 2-core dev box (3x3,
    C = K = 64 at 56², N 8, CPU time under load 3): PR 4 with 2 channels x 9 taps a lane
    13.9-17.7 ms, PR 1 17.7-25.2, PR 2 13.8-22.7, PR 8 13.7-16.1, 3 channels (27 sums)
    13.4-16.8; the units plan took 1.8-2.5 s (torch 11.3-13.5 ms)."""
    g, rt = p.geo, p.runtime
    units = lanes(rt)
    PR = max(1, min(WEIGHT_ROWS, g.O[1]))
    O = (g.O[0], (g.O[1] + PR - 1) // PR * PR, (g.O[2] + units - 1) // units * units)
    dyp = rt.empty((g.B, g.K, *O), "f32")
    dy = p.dy
    pad_source[(O[0] * O[1], g.K, g.B), units](dy, dyp, (0, 0, 0, 1, 1, 1), dy.strides[4] != 1, 1)
    G = g.consts()
    shape = (g.B, g.C, *padded_extent(g.O, G[0:3], G[9:12], G[6:9], units, PR))
    xp = rt.empty(shape, "f32")
    pad_source[(shape[2] * shape[3], g.C, g.B), units](p.x, xp, (*g.pad, 1, 1, 1),
                                                       p.x.strides[4] != 1 or G[2] > 1, G[2])
    KB = weight_blocking(rt, g.Kg, g.taps)
    blocks = g.groups * ((g.Kg + KB - 1) // KB)
    # stream whichever is smaller a cube: its source channel (shape[2:]) or its KB gradient
    # channels (KB x O), the other is shared by the cubes that follow (strided: the source
    # is 2x the gradient at 3x3 stride 2: kernel 5.5-5.9 against 6.3-6.6 ms of CPU, dev box)
    first = shape[2] * shape[3] * shape[4] > KB * O[0] * O[1] * O[2]
    grid = (blocks, g.Cg) if first else (g.Cg, blocks)
    weight_rows[grid, units](xp, dyp, dw5, G, KB, PR, first)
