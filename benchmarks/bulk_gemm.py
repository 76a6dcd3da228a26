"""A bf16 GEMM fed by bulk tensor copies through a ring of shared-memory stages handed over by
arrival barriers (issue 23's first step): no cube barrier in the main loop.

A cube is two groups (8 planes): group g computes rows 64g .. 64g + 63 of the cube's
128 x BN tile of C with kd.group_mma. Unit 0 issues the copies: per stage two 64 x BK tiles
of A (one a group) and a BK x BN tile of B, all landing on the stage's `full` barrier. Each
plane arrives at the stage's `empty` barrier once its group's product that read the stage
is done (kd.group_wait(1) one step later); the stage is refilled LAG steps after it was
read, when `empty` says both groups are through with it. A persistent launch (one cube a
compute unit) walks several tiles as one stream of k steps, so the next tile's copies are in
flight during this one's epilogue. On the H200 the copies are the
tensor memory accelerator and the barriers mbarriers; elsewhere both are emulated, so the
same kernel gives the same answers on every runtime (tests/test_dsl_bulk_copy.py).
"""
from __future__ import annotations

import kerneldsl as kd

from rudnn.stage_ring import next_stage, ring_start, stage_barriers

from .tile_order import grouped_tile

GROUPS = 2  # consumer groups a cube
BM = 64 * GROUPS


@kd.func
def issue_stage(sa, sb, a, b, full, slot, tile, m0, n0, BN, BK, SW):
    """Unit 0: announce stage `slot`'s bytes and start its copies (k tile `tile`)."""
    kd.barrier_expect(full, slot, (BM * BK + BK * BN) * 2)
    for g in kd.unroll(GROUPS):
        kd.bulk_copy(sa, slot * (BM * BK) + g * (64 * BK), a, m0 + 64 * g, tile * BK, 64, BK, full, slot, swizzle=SW)
    kd.bulk_copy(sb, slot * (BK * BN), b, tile * BK, n0, BK, BN, full, slot, swizzle=SW)


@kd.func
def issue_next(sa, sb, a, b, full, slot, pk, ptile, pm0, pn0, M, N, BN, BK, GROUP, SW):
    """Unit 0: copy the stream's next step (k tile pk of tile ptile, at (pm0, pn0)) into
    stage `slot`; returns the position after it."""
    issue_stage(sa, sb, a, b, full, slot, pk, pm0, pn0, BN, BK, SW)
    pk += 1
    if pk == a.shape[1] // BK:
        pk = 0
        ptile += 1
        pm0, pn0 = tile_origin(ptile, M, N, BN, GROUP)
    return pk, ptile, pm0, pn0


@kd.func
def tile_origin(i, M, N, BN, GROUP):
    """(first row, first column) of this cube's i-th tile: tiles pid, pid + cubes, ... in the
    grouped order."""
    return grouped_tile(kd.cube_pos_x() + i * kd.cube_count_x(), M, N, BM, BN, GROUP)


@kd.func
def stream_of(a, b, BN, BK):
    """(M, N, KT, tiles of this cube, k steps of its stream): a cube computes tiles pid,
    pid + cubes, ... as one stream of k steps."""
    M = a.shape[0]
    N = b.shape[1]
    KT = a.shape[1] // BK
    cubes = kd.cube_count_x()
    mine = ((M // BM) * (N // BN) - kd.cube_pos_x() + cubes - 1) // cubes
    return M, N, KT, mine, mine * KT


@kd.func
def ring(S, BN, BK):
    """The S stages of A and B tiles in shared memory and their barriers, set up: `full`
    completes when a stage's copies landed, `empty` when every consumer plane is through."""
    sa = kd.shared(kd.bf16, S * BM * BK)
    sb = kd.shared(kd.bf16, S * BK * BN)
    full, empty = stage_barriers(S, GROUPS * 4)
    return sa, sb, full, empty


@kd.func
def consume(acc, sa, sb, full, empty, slot, phase, last, j, g, BN, BK, S, SW):
    """Group g's step j: wait for stage `slot`, multiply it into the accumulator, and hand
    back the stage step j - 1 read (its product is done now); returns the next (slot, phase,
    last)."""
    kd.barrier_wait(full, slot, phase)
    kd.group_mma(acc, kd.shared_tile(sa, slot * (BM * BK) + g * (64 * BK), 64, BK, swizzle=SW),
                 kd.shared_tile(sb, slot * (BK * BN), BK, BN, swizzle=SW))
    kd.group_wait(1)
    if j >= 1 and kd.lane_pos() == 0:
        kd.barrier_arrive(empty, last)
    last = slot
    slot, phase = next_stage(slot, phase, S)
    return slot, phase, last


@kd.func
def write_tile(c, acc, t, g, M, N, BN, GROUP):
    """Group g's rows of this cube's t-th tile, from its accumulator; then the accumulator is
    cleared for the next tile."""
    m0, n0 = tile_origin(t, M, N, BN, GROUP)
    for i in kd.unroll(kd.fragment_len(acc)):
        c[m0 + g * 64 + kd.fragment_row(acc, i), n0 + kd.fragment_col(acc, i)] = kd.fragment_get(acc, i)
    kd.fill_fragment(acc, 0.0)


@kd.kernel
def gemm_bulk(a: kd.Tensor[kd.bf16, 2], b: kd.Tensor[kd.bf16, 2], c: kd.Tensor, BN: kd.Const[int],
              BK: kd.Const[int], S: kd.Const[int], LAG: kd.Const[int], GROUP: kd.Const[int], SW: kd.Const[int]):
    """c = a @ b for M % 128 == N % BN == K % BK == 0. A cube computes the tiles pid, pid +
    cubes, ... (one with a cube a tile, several when persistent) as one stream of k steps
    through the ring: the copies of the next tile start while this one's last products run,
    and its epilogue overlaps them."""
    kd.static_assert(kd.cube_units() == GROUPS * 4 * kd.PLANE_DIM, "launch two groups (8 planes) a cube")
    kd.static_assert(1 <= LAG < S, "a stage is refilled 1 .. S-1 steps after it was read")
    M, N, KT, mine, total = stream_of(a, b, BN, BK)
    sa, sb, full, empty = ring(S, BN, BK)
    u = kd.unit_pos_x()
    g = kd.plane_pos() // 4
    # unit 0's copy position in the stream: k tile pk of its tile ptile, at (pm0, pn0)
    pk = 0
    ptile = 0
    pm0, pn0 = tile_origin(0, M, N, BN, GROUP)
    if u == 0:
        for s in kd.unroll(S):
            if s < total:
                pk, ptile, pm0, pn0 = issue_next(sa, sb, a, b, full, s, pk, ptile, pm0, pn0, M, N, BN, BK, GROUP, SW)
    acc = kd.group_fragment_acc(64, BN)
    kd.fill_fragment(acc, 0.0)
    # ring positions kept as counters, never divided: a division or remainder of a possibly
    # negative value between a product's issue and its wait made ptxas serialise the products
    slot = 0       # the stage step j reads, and the parity of its `full` phase
    phase = 0
    last = 0       # the stage step j - 1 read
    refill = 0     # the next stage to refill, and the parity of its `empty` phase
    rphase = 0
    j = 0          # the step of the stream
    for t in range(mine):
        for kt in range(KT):
            slot, phase, last = consume(acc, sa, sb, full, empty, slot, phase, last, j, g, BN, BK, S, SW)
            # refill the stage read at step j - LAG with step j - LAG + S of the stream
            if j >= LAG and j - LAG + S < total:
                kd.barrier_wait(empty, refill, rphase)
                if u == 0:
                    pk, ptile, pm0, pn0 = issue_next(sa, sb, a, b, full, refill, pk, ptile, pm0, pn0, M, N, BN, BK,
                                                     GROUP, SW)
                refill, rphase = next_stage(refill, rphase, S)
            j += 1
        # the tile's products are done: write it out (the next tile's copies are in flight)
        kd.group_wait(0)
        write_tile(c, acc, t, g, M, N, BN, GROUP)


PRODUCER_REGISTERS = 40  # the copy-issuing group keeps few registers ...
CONSUMER_REGISTERS = 232  # ... so that the multiplying groups' accumulators fit (3 x 128 units a cube)


@kd.kernel
def gemm_roles(a: kd.Tensor[kd.bf16, 2], b: kd.Tensor[kd.bf16, 2], c: kd.Tensor, BN: kd.Const[int],
               BK: kd.Const[int], S: kd.Const[int], GROUP: kd.Const[int], STAGED: kd.Const[bool],
               SW: kd.Const[int]):
    """c = a @ b as gemm_bulk computes it, with the work split by role: group GROUPS (the
    producer) only issues bulk copies, refilling each stage as soon as both consumer groups
    are through with it; groups 0 .. GROUPS-1 only wait, multiply and write their tiles out.
    The stream of k steps is walked by both roles in the same loop: natively they run
    apart, ordered by the barriers alone; where roles are emulated they take turns in
    program order, which the producer's one-step lag makes a valid order. STAGED (bf16 c): the
    consumers stage each tile in shared memory and one unit writes it with bulk stores."""
    kd.static_assert(kd.cube_units() == (GROUPS + 1) * 4 * kd.PLANE_DIM,
                     "launch three groups (12 planes) a cube: two consumers and a producer")
    M, N, KT, mine, total = stream_of(a, b, BN, BK)
    sa, sb, full, empty = ring(S, BN, BK)
    u = kd.unit_pos_x()
    issuer = u == GROUPS * 4 * kd.PLANE_DIM  # the producer group's first unit
    g = kd.plane_pos() // 4
    acc = kd.group_fragment_acc(64, BN)
    if STAGED:
        kd.static_assert(c.dtype == kd.bf16, "the staged epilogue writes bf16 tiles")
        staged = kd.shared(kd.bf16, BM * BN)  # the consumers' tile on its way out
    # the producer's copy position in the stream: k tile pk of its tile ptile, at (pm0, pn0)
    pk = 0
    ptile = 0
    pm0, pn0 = tile_origin(0, M, N, BN, GROUP)
    refill, rphase, slot, phase, last = ring_start()
    with kd.role(GROUPS, 1, registers=PRODUCER_REGISTERS):
        if issuer:
            for s in kd.unroll(S):
                if s < total:
                    pk, ptile, pm0, pn0 = issue_next(sa, sb, a, b, full, s, pk, ptile, pm0, pn0, M, N, BN, BK, GROUP, SW)
    with kd.role(0, GROUPS, registers=CONSUMER_REGISTERS):
        kd.fill_fragment(acc, 0.0)
    j = 0  # the step of the stream
    for t in range(mine):
        for kt in range(KT):
            with kd.role(0, GROUPS):
                slot, phase, last = consume(acc, sa, sb, full, empty, slot, phase, last, j, g, BN, BK, S, SW)
            with kd.role(GROUPS, 1):
                # refill the stage step j - 1 read with step j - 1 + S, once both groups are through
                if issuer and j >= 1 and j - 1 + S < total:
                    kd.barrier_wait(empty, refill, rphase)
                    pk, ptile, pm0, pn0 = issue_next(sa, sb, a, b, full, refill, pk, ptile, pm0, pn0, M, N, BN, BK,
                                                     GROUP, SW)
                    refill, rphase = next_stage(refill, rphase, S)
            j += 1
        with kd.role(0, GROUPS):
            # the tile's products are done: write it out (the producer is copying the next one's);
            # after the k loop, not in it: an epilogue inside it made ptxas serialise the products
            kd.group_wait(0)
            if STAGED:
                store_tile(c, acc, staged, t, g, u, M, N, BN, GROUP, SW)
            else:
                write_tile(c, acc, t, g, M, N, BN, GROUP)
    if STAGED:
        with kd.role(0, GROUPS):
            if u == 0:
                kd.bulk_store_wait()  # the last tile's store


@kd.func
def store_tile(c, acc, staged, t, g, u, M, N, BN, GROUP, SW):
    """The consumers' t-th tile through shared memory: each group lays its 64 rows out in
    `staged` (once the previous tile's store has read it), then unit 0 writes the tile with
    bulk stores, which run on while the consumers go on to the next tile."""
    if u == 0:
        kd.bulk_store_wait()
    kd.sync_role()
    for i in kd.unroll(kd.fragment_len(acc)):
        staged[g * 64 * BN + kd.tile_offset(kd.fragment_row(acc, i), kd.fragment_col(acc, i), 64, swizzle=SW)] = \
            kd.fragment_get(acc, i)
    kd.fill_fragment(acc, 0.0)
    kd.sync_role()
    if u == 0:
        m0, n0 = tile_origin(t, M, N, BN, GROUP)
        for h in kd.unroll(GROUPS):
            kd.bulk_store(c, m0 + 64 * h, n0, staged, h * 64 * BN, 64, BN, swizzle=SW)


CONFIGS = {  # name -> (BN, BK, stages, lag, group, persistent: one cube per compute unit, swizzle)
    "bulk 128x256x64/s4/l2/g8": (256, 64, 4, 2, 8, False, 32),
    "bulk 128x256x64/s4/l1/g8": (256, 64, 4, 1, 8, False, 32),
    "bulk 128x256x64/s4/l2/g8/persistent": (256, 64, 4, 2, 8, True, 32),
    "bulk 128x256x64/s4/l1/g8/persistent": (256, 64, 4, 1, 8, True, 32),
    "bulk 128x128x64/s6/l2/g8": (128, 64, 6, 2, 8, False, 32),
    "bulk 128x256x32/s6/l2/g8": (256, 32, 6, 2, 8, False, 32),
    "bulk 128x64x16/s3/l1/g8": (64, 16, 3, 1, 8, False, 32),  # small: fits the emulation's shared memory
    "bulk 128x64x16/s3/l1/g8/persistent": (64, 16, 3, 1, 8, True, 32),  # (tests)
    # roles: a producer group and two consumer groups (lag 1: the producer refills a stage as
    # soon as both consumers are through with it)
    "roles 128x256x64/s4/g8": (256, 64, 4, 1, 8, False, 32),
    "roles 128x256x64/s4/g8/persistent": (256, 64, 4, 1, 8, True, 32),
    "roles 128x64x16/s3/g8": (64, 16, 3, 1, 8, False, 32),  # small: fits the emulation's shared memory
    "roles 128x64x16/s3/g8/persistent": (64, 16, 3, 1, 8, True, 32),  # (tests)
    # ... and the tile leaving through shared memory by bulk stores (bf16 c only)
    "roles 128x256x64/s3/g8/staged": (256, 64, 3, 1, 8, False, 32),
    "roles 128x256x64/s3/g8/persistent/staged": (256, 64, 3, 1, 8, True, 32),
    "roles 128x64x16/s3/g8/persistent/staged": (64, 16, 3, 1, 8, True, 32),  # (tests)
    # 128-byte swizzle: a stage is 6 copies of 64-column (128-byte) boxes instead of 24 of 16
    "bulk 128x256x64/s4/l2/g8/sw128": (256, 64, 4, 2, 8, False, 128),
    "roles 128x256x64/s4/g8/sw128": (256, 64, 4, 1, 8, False, 128),
    "roles 128x256x64/s4/g8/persistent/sw128": (256, 64, 4, 1, 8, True, 128),
    "roles 128x256x64/s3/g8/staged/sw128": (256, 64, 3, 1, 8, False, 128),
    "roles 128x256x64/s3/g8/persistent/staged/sw128": (256, 64, 3, 1, 8, True, 128),
    "roles 128x64x64/s2/g8/persistent/staged/sw128": (64, 64, 2, 1, 8, True, 128),  # (tests)
}


def out_dtype(config: str):
    """The dtype of c a configuration writes: bf16 where its epilogue is staged, else any."""
    return kd.bf16 if "/staged" in config else None


def gemm(a, b, c, config="bulk 128x256x64/s4/l2/g8"):
    """Launch one configuration of CONFIGS."""
    M, K = a.shape
    N = b.shape[1]
    BN, BK, S, LAG, G, persistent, SW = CONFIGS[config]
    if M % BM or N % BN or K % BK:
        raise ValueError(f"gemm {config} needs M % {BM}, N % {BN}, K % {BK} == 0, got {M}x{K} @ {K}x{N}")
    cubes = (N // BN) * (M // BM)
    if persistent:
        cubes = min(cubes, max(a.runtime.capabilities.compute_units, 1))
    if config.startswith("roles"):
        staged = out_dtype(config) is not None
        if staged and c.dtype != kd.bf16:
            raise ValueError(f"gemm {config} writes bf16 tiles, got c of {c.dtype}")
        gemm_roles[cubes, (GROUPS + 1) * 4 * a.runtime.plane_dim](a, b, c, BN, BK, S, G, staged, SW)
        return
    gemm_bulk[cubes, GROUPS * 4 * a.runtime.plane_dim](a, b, c, BN, BK, S, LAG, G, SW)
