"""The `TensorCore` experts where the device has bulk tensor copies and group products
(`Capabilities.bulk_copy`, `group_mma_native`: Hopper): a cube of three groups (12 planes)
per 128-row tile of one expert's rows and BN output columns.

Group 2, the producer, only issues bulk copies: per k step (64 columns of K: one 128-byte
band, kerneldsl/tile_layout.py) the 128 x 64 tile of dispatched rows and the BN x 64 tile
of each weight matrix (its rows are output columns, K contiguous: the group product's B
stored transposed) land in a stage of an S-stage ring, announced on the stage's `full`
barrier. Groups 0 and 1, the consumers, each multiply their 64 rows of the stage into
64 x BN accumulators (one a weight matrix) and hand the stage back on its `empty` barrier
when their product has read it. The weights are read through a 2-D view [E * N, K], so a
tile's rows start at expert e's row e * N + n0; rows of x past the expert's end and weight
rows past N belong to other experts or lie outside and are read but never stored, and K past
its end reads zeros. Natively the roles run concurrently with their own register budgets;
elsewhere they are emulated (in program order), giving the same results.

The fused projection keeps gate and up accumulators (BN = 128 each) and writes
h = silu(x·gateᵀ) * (x·upᵀ); the down projection one accumulator of BN = 256 columns.
Results leave from the accumulators element by element, rows and columns masked.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.errors import LaunchError
from kerneldsl.launch_checks import check_bulk_source

from ..stage_ring import next_stage, ring_start, stage_barriers
from .gemm_scalar import silu, swizzle
from .tiles import find_tile

GROUPS = 2            # consumer groups a cube
BM = 64 * GROUPS      # rows a cube
BK = 64               # K a stage: one 128-byte band
SWIZZLE = 128         # the tiles' layout (whole 128-byte rows: one bulk copy a tile)
BN_FUSED = 128        # output columns a cube, fused projection (gate and up accumulators each)
BN_DOWN = 256         # output columns a cube, down projection
STAGES = 4            # 48 KiB a stage either way
GM = 8                # row tiles sharing each column tile in the cube order (gemm_scalar.swizzle)
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
UNITS_PLANES = (GROUPS + 1) * 4  # planes a cube


@kd.func
def issue(sa, s0, s1, x, w0, w1, full, slot, kt, r0, wrow, BN, SWIGLU):
    """Unit 0 of the producer: announce stage `slot`'s bytes and copy k tile kt into it."""
    NW = 2 if SWIGLU else 1
    kd.barrier_expect(full, slot, (BM * BK + NW * BN * BK) * 2)
    kd.bulk_copy(sa, slot * (BM * BK), x, r0, kt * BK, BM, BK, full, slot, swizzle=SWIZZLE)
    kd.bulk_copy(s0, slot * (BN * BK), w0, wrow, kt * BK, BN, BK, full, slot, swizzle=SWIZZLE)
    if SWIGLU:
        kd.bulk_copy(s1, slot * (BN * BK), w1, wrow, kt * BK, BN, BK, full, slot, swizzle=SWIZZLE)


@kd.func
def store_staged(y, acc, sa, bias, r0, n0, g, u, N, BN, HAS_BIAS):
    """(The consumers, every product done) the 128 x BN tile laid out in the ring's A stages
    (the 128-byte layout, a group's 64 rows after the other's), then unit 0 writes it with bulk
    stores, which leave out rows and columns past y's end."""
    kd.sync_role()  # both groups' products have read the ring
    for i in kd.unroll(kd.fragment_len(acc)):
        v = kd.fragment_get(acc, i)
        if HAS_BIAS:
            v = v + kd.f32(bias[kd.min(n0 + kd.fragment_col(acc, i), N - 1)])
        sa[g * 64 * BN + kd.tile_offset(kd.fragment_row(acc, i), kd.fragment_col(acc, i), 64, swizzle=SWIZZLE)] = \
            kd.cast(v, sa.dtype)
    kd.sync_role()
    if u == 0:
        for h in kd.unroll(GROUPS):
            kd.bulk_store(y, r0 + 64 * h, n0, sa, h * 64 * BN, 64, BN, swizzle=SWIZZLE)
        kd.bulk_store_wait()


@kd.kernel
def grouped_gemm_roles(x: kd.Tensor[None, 2], w0: kd.Tensor[None, 2], w1: kd.Tensor[None, 2],
                       y: kd.Tensor, offsets: kd.Tensor[kd.u32, 1], tile_offsets: kd.Tensor[kd.u32, 1], E: kd.i32,
                       N: kd.i32, ROWS: kd.i32, COLS: kd.i32, SWIGLU: kd.Const[bool], BN: kd.Const[int],
                       S: kd.Const[int], GM: kd.Const[int], bias: kd.Tensor, HAS_BIAS: kd.Const[bool],
                       STAGED: kd.Const[bool]):
    """y[r, n] = silu(x[r]·w0[e·N + n]) * (x[r]·w1[e·N + n]) (SWIGLU), else x[r]·w0[e·N + n]
    (+ bias[n] with HAS_BIAS: the 1×1 convolution reuses this kernel), for the rows r of each
    expert e; w0, w1 are [E * N, K] views of the expert weights (w1 is not read unless SWIGLU).
    STAGED (one expert, not SWIGLU): the tile leaves through the drained ring and bulk stores
    (rows past the expert's end then lie outside y, which the stores leave out)."""
    kd.static_assert(kd.cube_units() == UNITS_PLANES * kd.PLANE_DIM,
                     "launch three groups (12 planes) a cube: two consumers and a producer")
    tile, col = swizzle(ROWS, COLS, GM)
    e, r0, rend = find_tile(offsets, tile_offsets, E, tile, BM)
    n0 = col * BN
    wrow = e * N + n0
    K = x.shape[1]
    KT = kd.select(r0 < rend, (K + BK - 1) // BK, 0)  # an empty tile copies and multiplies nothing
    sa = kd.shared(x.dtype, S * BM * BK)
    s0 = kd.shared(x.dtype, S * BN * BK)
    s1 = kd.shared(x.dtype, S * BN * BK if SWIGLU else 8)
    full, empty = stage_barriers(S, GROUPS * 4)
    u = kd.unit_pos_x()
    issuer = u == GROUPS * 4 * kd.PLANE_DIM  # the producer group's first unit
    g = kd.plane_pos() // 4
    acc0 = kd.group_fragment_acc(64, BN)
    acc1 = kd.group_fragment_acc(64, BN if SWIGLU else 8)
    refill, rphase, slot, phase, last = ring_start()
    with kd.role(GROUPS, 1, registers=PRODUCER_REGISTERS):
        if issuer:
            for s in kd.unroll(S):
                if s < KT:
                    issue(sa, s0, s1, x, w0, w1, full, s, s, r0, wrow, BN, SWIGLU)
    with kd.role(0, GROUPS, registers=CONSUMER_REGISTERS):
        kd.fill_fragment(acc0, 0.0)
        if SWIGLU:
            kd.fill_fragment(acc1, 0.0)
    for kt in range(KT):
        with kd.role(0, GROUPS):
            kd.barrier_wait(full, slot, phase)
            a = kd.shared_tile(sa, slot * (BM * BK) + g * (64 * BK), 64, BK, swizzle=SWIZZLE)
            kd.group_mma(acc0, a, kd.shared_tile(s0, slot * (BN * BK), BK, BN, transposed=True, swizzle=SWIZZLE))
            if SWIGLU:
                kd.group_mma(acc1, a, kd.shared_tile(s1, slot * (BN * BK), BK, BN, transposed=True,
                                                     swizzle=SWIZZLE))
            kd.group_wait(2 if SWIGLU else 1)  # last step's products are done: hand its stage back
            if kt >= 1 and kd.lane_pos() == 0:
                kd.barrier_arrive(empty, last)
            last = slot
            slot, phase = next_stage(slot, phase, S)
        with kd.role(GROUPS, 1):
            # refill the stage step kt - 1 read with k tile kt - 1 + S, once both groups are through
            if issuer and kt >= 1 and kt - 1 + S < KT:
                kd.barrier_wait(empty, refill, rphase)
                issue(sa, s0, s1, x, w0, w1, full, refill, kt - 1 + S, r0, wrow, BN, SWIGLU)
                refill, rphase = next_stage(refill, rphase, S)
    kd.static_assert(not STAGED or (not SWIGLU and S * BK >= BN), "STAGED: one projection, the ring holds the tile")
    with kd.role(0, GROUPS):
        kd.group_wait(0)
        if STAGED:
            if r0 < rend:
                store_staged(y, acc0, sa, bias, r0, n0, g, u, N, BN, HAS_BIAS)
        else:
            for i in kd.unroll(kd.fragment_len(acc0)):
                r = r0 + g * 64 + kd.fragment_row(acc0, i)
                n = n0 + kd.fragment_col(acc0, i)
                if r < rend and n < N:
                    if SWIGLU:
                        y[r, n] = silu(kd.fragment_get(acc0, i)) * kd.fragment_get(acc1, i)
                    elif HAS_BIAS:
                        y[r, n] = kd.fragment_get(acc0, i) + kd.f32(bias[n])
                    else:
                        y[r, n] = kd.fragment_get(acc0, i)


def usable(rt, tensors) -> bool:
    """Whether the roles kernels serve these experts on `rt`: bulk copies and native group
    products, and operands the copy engine reads (contiguous rows, 16-byte aligned, rows a
    multiple of 16 bytes apart)."""
    caps = rt.capabilities
    if not (caps.bulk_copy and caps.group_mma_native) or not all(t.is_contiguous() for t in tensors):
        return False
    try:  # the rules the launch would check, on the 2-D views the kernels copy from
        for t in tensors:
            check_bulk_source(t.reshape(t.size // t.shape[-1], t.shape[-1]), "grouped_gemm_roles", "operand")
    except LaunchError:
        return False
    return True


def tile_shape(caps) -> tuple:
    """(fused BN, down BN, stages): full tiles where group products are native; half-width
    tiles and two stages where they are emulated, since their accumulators then live in
    shared memory too (an OpenCL CPU device has 256 KiB)."""
    if caps.group_mma_native:
        return BN_FUSED, BN_DOWN, STAGES
    return BN_FUSED // 2, BN_DOWN // 2, 2


def run(x, gate, up, down, h, y, offsets, tiles_of, E: int, rows_bound) -> None:
    """The two projections: h = silu(x·gateᵀ) * (x·upᵀ), y = h·downᵀ per expert.
    `tiles_of(BM)` gives the row-tile offsets, `rows_bound(BM)` a bound on the row tiles."""
    rt = x.runtime
    bn_fused, bn_down, stages = tile_shape(rt.capabilities)
    I, H = gate.shape[1], down.shape[1]
    tiles = tiles_of(BM)
    rows = rows_bound(BM)
    units = UNITS_PLANES * rt.plane_dim
    g2, u2, d2 = (w.reshape(w.shape[0] * w.shape[1], w.shape[2]) for w in (gate, up, down))
    cols = -(-I // bn_fused)
    grouped_gemm_roles[rows * cols, units](x, g2, u2, h, offsets, tiles, E, I, rows, cols, True, bn_fused, stages, GM,
                                           h, False, False)
    cols = -(-H // bn_down)
    grouped_gemm_roles[rows * cols, units](h, d2, d2, y, offsets, tiles, E, H, rows, cols, False, bn_down, stages,
                                           GM, y, False, False)
