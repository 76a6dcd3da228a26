"""Depthwise convolution (groups == Cin, one input channel a group) for devices whose units
are not SIMD lanes (GPUs): `Direct`'s plan there when covers() accepts the pass, in place of
direct.py, whose register block of output channels a group is wasted at one channel a group
and whose channels-last tap loads are 2-byte reads a channel stride apart.

- forward, channels last (multiplier Cout/Cin = 1): a unit owns a vector of V channels
  (16 bytes) of PX consecutive output pixels of a row, for ROWS rows in turn. It loads its
  channels' weights once (T·V packed elements: T vector loads, regrouped per tap in
  registers), then per output row and tap row the SPAN input columns the PX pixels reach as
  V-lane vectors; consecutive units take consecutive channel vectors (coalesced).
- forward, any layout (any multiplier): a cube owns a TH x TW tile of one output plane
  (b, co, od); it stages the input tile and its halo (per kernel depth tap) in shared
  memory, F32, zeros outside the input, then every unit sums its outputs' taps from there.
- data backward (any stride, dilation, multiplier): the same tiling over dx, the transposed
  convolution as a gather: per (multiplier m, depth tap) a cube stages the dy rows and
  columns its tile reaches, and a unit takes, per tap, the value whose position is a whole
  multiple of the stride (no scatter, no atomics).
- weight backward: a cube owns (output channel co, a fixed range of batch items); its units
  split the range's pixels (a unit: fixed output columns, rows in turn), hold one sum per
  tap and finish with `kd.cube_sum` into F32 partials [splits, Cout, taps]; a second kernel
  sums the partials in split order, so the result is deterministic (the same order every
  run).
"""
from __future__ import annotations

import kerneldsl as kd

from .implicit_gemm import sum_partials


UNITS = 128          # units per cube of every kernel here
# channels-last forward: output pixels along a row and rows a unit. H200, N 64, bf16
# (`python -m benchmarks.conv_depthwise`, best rounds): 2 x 4 gave 0.094 / 0.125 / 0.062 ms at
# 256@28 / 128@56 / 512@14, within 3 % of the best shape on each (4 x 2: 0.104 / - / 0.066)
PX = 2
ROWS = 4
TILE_UNITS_Q = 4     # plane-tile forward: at most this many output rows a unit
WGRAD_UNITS = 128
SUM_UNITS = 256


# ------------------------------------------------------------------------ channels last
@kd.func
def vector_of(t, V):
    """The vector of the V (4 or 8) scalars of tuple t."""
    if V == 4:
        v = kd.make_vec(t[0], t[1], t[2], t[3])
    else:
        v = kd.make_vec(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7])
    return v


@kd.kernel
def forward_channels_last(x: kd.Tensor, w: kd.Tensor, bias: kd.Tensor, y: kd.Tensor, HAS_BIAS: kd.Const[bool],
                          V: kd.Const[int], PXU: kd.Const[int], RU: kd.Const[int], G: kd.Const[tuple]):
    """y[b, c, o] = bias[c] + sum_k x[b, c, o·S + k·Dil − P]·w[c, 0, k], x and y channels-last
    (channel stride 1, every other stride and both offsets multiples of V, C a multiple of V),
    w packed [C, taps]; a unit: V channels x PXU pixels of a row x RU rows."""
    C = x.shape[1]
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    KD, KH, KW = G[9], G[10], G[11]
    T = KD * KH * KW
    SPAN = (PXU - 1) * G[2] + (KW - 1) * G[8] + 1
    nv = C // V
    ncol = (OW + PXU - 1) // PXU
    nrow = (OH + RU - 1) // RU
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < y.shape[0] * OD * nrow * ncol * nv:
        c0 = i % nv * V
        r = i // nv
        ow0 = r % ncol * PXU
        r = r // ncol
        oh0 = r % nrow * RU
        r = r // nrow
        od = r % OD
        b = r // OD
        packed = ()                          # w[c0 .. c0 + V, taps]: T·V elements, in order
        for q in kd.unroll(T):
            wv = kd.cast(kd.load_vec(w, c0 * T + q * V, V), kd.f32)
            for e in kd.unroll(V):
                packed = packed + (wv[e],)
        bv = kd.splat(kd.f32(0), V)
        if HAS_BIAS:
            bv = kd.cast(kd.load_vec(bias, c0, V), kd.f32)
        xb = b * x.stride(0) + c0
        yb = b * y.stride(0) + od * y.stride(2) + c0
        for rr in range(RU):
            oh = oh0 + rr
            if oh < OH:
                acc = ()
                for j in kd.unroll(PXU):
                    acc = acc + (bv,)
                for kz in kd.unroll(KD):
                    iz = od * G[0] + kz * G[6] - G[3]
                    for ky in kd.unroll(KH):
                        iy = oh * G[1] + ky * G[7] - G[4]
                        row_ok = iz >= 0 and iz < D and iy >= 0 and iy < H
                        line = xb + iz * x.stride(2) + iy * x.stride(3)
                        cols = ()
                        for m in kd.unroll(SPAN):
                            ix = ow0 * G[2] - G[5] + m
                            ok = row_ok and ix >= 0 and ix < W
                            cols = cols + (kd.cast(kd.load_vec(x, line + ix * x.stride(4), V), kd.f32)
                                           if ok else kd.splat(kd.f32(0), V),)
                        for kx in kd.unroll(KW):
                            t = (kz * KH + ky) * KW + kx
                            lanes = ()
                            for e in kd.unroll(V):
                                lanes = lanes + (packed[e * T + t],)
                            wt = vector_of(lanes, V)
                            nxt = ()
                            for j in kd.unroll(PXU):
                                nxt = nxt + (acc[j] + cols[j * G[2] + kx * G[8]] * wt,)
                            acc = nxt
                for j in kd.unroll(PXU):
                    if ow0 + j < OW:
                        kd.store_vec(y, yb + oh * y.stride(3) + (ow0 + j) * y.stride(4), kd.cast(acc[j], y.dtype))


# ------------------------------------------------------------------------ plane tiles
@kd.kernel
def forward_planes(x: kd.Tensor, w: kd.Tensor, bias: kd.Tensor, y: kd.Tensor, HAS_BIAS: kd.Const[bool],
                   TW: kd.Const[int], Q: kd.Const[int], G: kd.Const[tuple]):
    """y[b, co, o] = bias[co] + sum_k x[b, co // M, o·S + k·Dil − P]·w[co, 0, k] (M = Cout/Cin);
    any strides. Cube (x, y) = plane (b, co, od), output tile y: TH = (units / TW)·Q rows x TW
    columns."""
    RS = kd.cube_units() // TW
    TH = RS * Q
    KD, KH, KW = G[9], G[10], G[11]
    IH = (TH - 1) * G[1] + (KH - 1) * G[7] + 1
    IW = (TW - 1) * G[2] + (KW - 1) * G[8] + 1
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    K = y.shape[1]
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    M = K // x.shape[1]
    plane = kd.cube_pos_x()
    od = plane % OD
    co = plane // OD % K
    b = plane // OD // K
    ci = co // M
    ntw = (OW + TW - 1) // TW
    oh0 = kd.cube_pos_y() // ntw * TH
    ow0 = kd.cube_pos_y() % ntw * TW
    ih0 = oh0 * G[1] - G[4]
    iw0 = ow0 * G[2] - G[5]
    t = kd.unit_pos()
    tx = t % TW
    ty = t // TW
    tile = kd.shared(kd.f32, IH * IW)
    acc = (kd.f32(0),) * Q
    for kz in kd.unroll(KD):
        iz = od * G[0] + kz * G[6] - G[3]
        if kz > 0:
            kd.sync_cube()                  # every unit is done reading the previous slice
        z_ok = iz >= 0 and iz < D
        for e in range(t, IH * IW, kd.cube_units()):
            iy = ih0 + e // IW
            ix = iw0 + e % IW
            ok = z_ok and iy >= 0 and iy < H and ix >= 0 and ix < W
            tile[e] = kd.f32(x[b, ci, iz, iy, ix]) if ok else kd.f32(0)
        kd.sync_cube()
        for ky in kd.unroll(KH):
            for kx in kd.unroll(KW):
                wk = kd.f32(w[co, 0, kz, ky, kx])
                nxt = ()
                for q in kd.unroll(Q):
                    at = ((ty + q * RS) * G[1] + ky * G[7]) * IW + tx * G[2] + kx * G[8]
                    nxt = nxt + (acc[q] + tile[at] * wk,)
                acc = nxt
    ow = ow0 + tx
    if ow < OW:
        for q in kd.unroll(Q):
            oh = oh0 + ty + q * RS
            if oh < OH:
                r = acc[q]
                if HAS_BIAS:
                    r = r + kd.f32(bias[co])
                y[b, co, od, oh, ow] = r


@kd.func
def first_reaching(i0, P, K, Dil, S):
    """The first output index o with o·S >= i0 + P − (K − 1)·Dil, for i0 >= 0 (a ceiling
    division whose numerator a compile-time shift keeps non-negative)."""
    M = (P + (K - 1) * Dil) // S + 2
    return (i0 + P - (K - 1) * Dil + S - 1 + S * M) // S - M


@kd.kernel
def data_planes(dy: kd.Tensor, w: kd.Tensor, dx: kd.Tensor, TW: kd.Const[int], Q: kd.Const[int],
                G: kd.Const[tuple]):
    """dx[b, c, i] = sum over m < M and taps k of dy[b, c·M + m, o]·w[c·M + m, 0, k] for the o
    with o·S + k·Dil − P = i (whole, in range): the transposed convolution as a gather. Cube
    (x, y) = input plane (b, c, iz), a TH x TW tile of dx; per (m, depth tap) it stages the dy
    rows and columns the tile reaches (zeros outside dy), then each unit adds its taps."""
    RS = kd.cube_units() // TW
    TH = RS * Q
    KD, KH, KW = G[9], G[10], G[11]
    NH = ((TH - 1) + (KH - 1) * G[7]) // G[1] + 2
    NW = ((TW - 1) + (KW - 1) * G[8]) // G[2] + 2
    C, D, H, W = dx.shape[1], dx.shape[2], dx.shape[3], dx.shape[4]
    OD, OH, OW = dy.shape[2], dy.shape[3], dy.shape[4]
    M = dy.shape[1] // C
    plane = kd.cube_pos_x()
    iz = plane % D
    c = plane // D % C
    b = plane // D // C
    ntw = (W + TW - 1) // TW
    ih0 = kd.cube_pos_y() // ntw * TH
    iw0 = kd.cube_pos_y() % ntw * TW
    oh_lo = first_reaching(ih0, G[4], KH, G[7], G[1])
    ow_lo = first_reaching(iw0, G[5], KW, G[8], G[2])
    t = kd.unit_pos()
    tx = t % TW
    ty = t // TW
    tile = kd.shared(kd.f32, NH * NW)
    acc = (kd.f32(0),) * Q
    for m in range(M):
        co = c * M + m
        for kz in kd.unroll(KD):
            tz = iz + G[3] - kz * G[6]
            oz = kd.max(tz, 0) // G[0]
            z_hit = tz >= 0 and oz * G[0] == tz and oz < OD     # the same for the whole cube
            for e in range(t, NH * NW, kd.cube_units()):
                oy = oh_lo + e // NW
                ox = ow_lo + e % NW
                ok = z_hit and oy >= 0 and oy < OH and ox >= 0 and ox < OW
                tile[e] = kd.f32(dy[b, co, oz, oy, ox]) if ok else kd.f32(0)
            kd.sync_cube()
            for ky in kd.unroll(KH):
                for kx in kd.unroll(KW):
                    wk = kd.f32(w[co, 0, kz, ky, kx])
                    ux = iw0 + tx + G[5] - kx * G[8] - ow_lo * G[2] + G[2]     # > 0
                    nxt = ()
                    for q in kd.unroll(Q):
                        uy = ih0 + ty + q * RS + G[4] - ky * G[7] - oh_lo * G[1] + G[1]
                        hit = uy % G[1] == 0 and ux % G[2] == 0
                        v = tile[(uy // G[1] - 1) * NW + ux // G[2] - 1] if hit else kd.f32(0)
                        nxt = nxt + (acc[q] + v * wk,)
                    acc = nxt
            kd.sync_cube()                  # every unit is done reading before the next stage
    ix = iw0 + tx
    if ix < W:
        for q in kd.unroll(Q):
            iy = ih0 + ty + q * RS
            if iy < H:
                dx[b, c, iz, iy, ix] = acc[q]


# ------------------------------------------------------------------------ weight gradient
@kd.kernel
def weight_partials(x: kd.Tensor, dy: kd.Tensor, part: kd.Tensor[kd.f32, 3], PER: kd.i32, CW: kd.Const[int],
                    G: kd.Const[tuple]):
    """part[s, co, k] = sum over b in [s·PER, (s + 1)·PER) and output pixels o of
    dy[b, co, o]·x[b, co // M, o·S + k·Dil − P]; cube (co, s). A unit keeps output columns
    tx, tx + CW, ... (its taps' column tests fixed) and walks rows ty, ty + units/CW, ...
    of the range's (b, od, oh), so consecutive units read consecutive columns."""
    OD, OH, OW = dy.shape[2], dy.shape[3], dy.shape[4]
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    T = G[9] * G[10] * G[11]
    RS = kd.cube_units() // CW
    co = kd.cube_pos_x()
    s = kd.cube_pos_y()
    ci = co // (dy.shape[1] // x.shape[1])
    b0 = s * PER
    rows = kd.min(dy.shape[0] - b0, PER) * OD * OH
    tx = kd.unit_pos() % CW
    ty = kd.unit_pos() // CW
    acc = (kd.f32(0),) * T
    for ow in range(tx, OW, CW):
        for r in range(ty, rows, RS):
            oh = r % OH
            q = r // OH
            od = q % OD
            b = b0 + q // OD
            d = kd.f32(dy[b, co, od, oh, ow])
            nxt = ()
            for kz in kd.unroll(G[9]):
                iz = od * G[0] + kz * G[6] - G[3]
                for ky in kd.unroll(G[10]):
                    iy = oh * G[1] + ky * G[7] - G[4]
                    row_ok = iz >= 0 and iz < D and iy >= 0 and iy < H
                    for kx in kd.unroll(G[11]):
                        ix = ow * G[2] + kx * G[8] - G[5]
                        ok = row_ok and ix >= 0 and ix < W
                        v = kd.f32(x[b, ci, iz, iy, ix]) if ok else kd.f32(0)
                        nxt = nxt + (acc[(kz * G[10] + ky) * G[11] + kx] + d * v,)
            acc = nxt
    for k in kd.unroll(T):
        total = kd.cube_sum(acc[k])
        if kd.unit_pos() == 0:
            part[s, co, k] = total


# ------------------------------------------------------------------------ host side
def is_depthwise(p) -> bool:
    """groups == Cin (one input channel a group), any channel multiplier Cout/Cin."""
    g = p.geo
    return g.groups == g.C and g.Cg == 1


def vector_lanes(p) -> int:
    """Lanes of a 16-byte vector of the dtype (F32: 4, F16/BF16: 8)."""
    return 16 // p.dtype.itemsize


def _base_aligned(t, lanes: int) -> bool:
    """t's first element at a multiple of `lanes` elements from its memory's start, and that
    memory 16-byte aligned where its address is a number (imported device memory, e.g. a
    DLPack view with a storage offset, need not be; the runtimes' own allocations are)."""
    raw = getattr(t.buffer, "raw", None)
    return t.offset % lanes == 0 and not (isinstance(raw, int) and raw % 16)


def _aligned(t, lanes: int, skip: int) -> bool:
    """_base_aligned, and every stride of t but axis `skip`'s a multiple of `lanes`."""
    return _base_aligned(t, lanes) and all(s % lanes == 0 for a, s in enumerate(t.strides) if a != skip)


def _packed_weights(w) -> bool:
    """w ([K, 1, KD, KH, KW]) packed: each channel's taps one contiguous run of `taps`."""
    K, _, KD, KH, KW = w.shape
    want = (KH * KW, KW, 1)
    return all(s == e for s, e, n in zip(w.strides[2:], want, (KD, KH, KW)) if n > 1) and \
        (K == 1 or w.strides[0] == KD * KH * KW)


def channels_last_covers(p, y5) -> bool:
    """Whether forward_channels_last runs p: multiplier 1, x and y channels-last with aligned
    strides and offsets, C a multiple of the vector, packed weights (and bias) aligned."""
    V = vector_lanes(p)
    g = p.geo
    return (g.K == g.C and g.C % V == 0 and p.x.strides[1] == 1 and y5.strides[1] == 1
            and _aligned(p.x, V, 1) and _aligned(y5, V, 1) and _packed_weights(p.w) and _base_aligned(p.w, V)
            and (p.bias is None or (p.bias.strides[0] == 1 and _base_aligned(p.bias, V))))


def tile_bytes(p, pass_name: str) -> int:
    """Shared memory of the plane-tile kernel of a 'forward' or 'data' pass of p: the F32 tile
    of x (forward: the output tile's windows) or of dy (data: the outputs reaching dx's tile)."""
    g = p.geo
    O = g.S if pass_name == "data" else g.O
    TW, Q = plane_tile(O[2], O[1])
    TH = UNITS // TW * Q
    if pass_name == "data":
        return 4 * ((TH - 1 + (g.R[1] - 1) * g.dil[1]) // g.stride[1] + 2) * \
            ((TW - 1 + (g.R[2] - 1) * g.dil[2]) // g.stride[2] + 2)
    return 4 * ((TH - 1) * g.stride[1] + (g.R[1] - 1) * g.dil[1] + 1) * \
        ((TW - 1) * g.stride[2] + (g.R[2] - 1) * g.dil[2] + 1)


def covers(p, pass_name: str) -> bool:
    """Whether this module runs pass `pass_name` ('forward', 'data', 'weight') of p (the
    forward and data passes only where their plane tile fits the device's shared memory and
    their grid the device's limits: planes on x, tiles of a plane on y)."""
    if not is_depthwise(p):
        return False
    if pass_name == "weight":
        return True
    g = p.geo
    caps = p.runtime.capabilities
    grid = _tile_grid((g.B, g.C, *g.S) if pass_name == "data" else (g.B, g.K, *g.O))[0]
    return (tile_bytes(p, pass_name) <= caps.max_shared_bytes and grid[0] <= caps.max_grid[0]
            and grid[1] <= caps.max_grid[1])


def plane_tile(OW: int, OH: int, units: int = UNITS) -> tuple:
    """(TW, Q) of the plane-tile kernel: TW the power of two from 8 to 32 that covers the row
    best, Q the rows a unit so that the tile covers OH (at most TILE_UNITS_Q)."""
    TW = 8 if OW <= 8 else 16 if OW <= 16 else 32
    RS = units // TW
    return TW, max(1, min(TILE_UNITS_Q, -(-OH // RS)))


def _tile_grid(shape5: tuple) -> tuple:
    """(grid, TW, Q) of a plane-tile kernel writing a [B, C, D, H, W] result."""
    B, C, D, H, W = shape5
    TW, Q = plane_tile(W, H)
    TH = UNITS // TW * Q
    return (B * C * D, -(-H // TH) * -(-W // TW)), TW, Q


def run_forward(p, y5, dummy, px: int = PX, rows: int = ROWS) -> None:
    """y5 = the depthwise forward pass of p: the channels-last vector kernel where it covers p,
    else the plane-tile kernel."""
    g = p.geo
    bias = p.bias if p.bias is not None else dummy
    if channels_last_covers(p, y5):
        V = vector_lanes(p)
        OD, OH, OW = g.O
        n = g.B * OD * -(-OH // rows) * -(-OW // px) * (g.C // V)
        forward_channels_last[-(-n // UNITS), UNITS](p.x, p.w, bias, y5, p.bias is not None, V, px, rows,
                                                     g.consts())
    else:
        run_forward_tiles(p, y5, dummy)


def run_forward_tiles(p, y5, dummy) -> None:
    """y5 = the depthwise forward pass of p on the plane-tile kernel."""
    grid, TW, Q = _tile_grid(y5.shape)
    bias = p.bias if p.bias is not None else dummy
    forward_planes[grid, UNITS](p.x, p.w, bias, y5, p.bias is not None, TW, Q, p.geo.consts())


def run_data_backward(p, dx5, dummy) -> None:
    """dx5 = the depthwise data backward of p (any stride, dilation, multiplier): the gather on
    plane tiles."""
    del dummy
    grid, TW, Q = _tile_grid(dx5.shape)
    data_planes[grid, UNITS](p.dy, p.w, dx5, TW, Q, p.geo.consts())


def weight_splits(p) -> int:
    """Batch ranges of the weight gradient: about 16 cubes (2048 units) a compute unit, so
    that each walks few rows and enough are in flight to hide the loads' latency."""
    g = p.geo
    want = -(-16 * max(p.runtime.capabilities.compute_units, 1) // g.K)
    return max(1, min(g.B, want))


def run_weight_backward(p, dw5) -> None:
    """dw5 (a [Cout, 1, KD, KH, KW] view) = the depthwise weight gradient: partials per
    (split of the batch, output channel), summed in split order."""
    g = p.geo
    splits = weight_splits(p)
    per = -(-g.B // splits)
    splits = -(-g.B // per)
    part = p.runtime.empty((splits, g.K, g.taps), "f32")
    CW = plane_tile(g.O[2], g.O[1], WGRAD_UNITS)[0]
    weight_partials[(g.K, splits), WGRAD_UNITS](p.x, p.dy, part, per, CW, g.consts())
    dw = dw5._view((g.K, g.taps), (g.taps, 1))     # the fresh packed result of conv_weight_backward
    sum_partials[-(-g.K * g.taps // SUM_UNITS), SUM_UNITS](part, dw)  # in split order
