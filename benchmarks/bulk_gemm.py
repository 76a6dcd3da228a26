"""A bf16 GEMM fed by bulk tensor copies through a ring of shared-memory stages handed over by
arrival barriers (issue 23's first step): no cube barrier in the main loop.

A cube is two groups (8 planes): group g computes rows 64g .. 64g + 63 of the cube's
128 x BN tile of C with kd.group_mma. Unit 0 issues the copies: per stage two 64 x BK tiles
of A (one a group) and a BK x BN tile of B, all landing on the stage's `full` barrier. Each
plane arrives at the stage's `empty` barrier once its group's product that read the stage
is done (kd.group_wait(1) one step later); the stage is refilled LAG steps after it was
read, when `empty` says both groups are through with it. On the H200 the copies are the
tensor memory accelerator and the barriers mbarriers; elsewhere both are emulated, so the
same kernel gives the same answers on every runtime (tests/test_dsl_bulk_copy.py).
"""
from __future__ import annotations

import kerneldsl as kd

from .tile_order import grouped_tile

GROUPS = 2  # consumer groups a cube
BM = 64 * GROUPS


@kd.func
def issue_stage(sa, sb, a, b, full, slot, tile, m0, n0, BN, BK):
    """Unit 0: announce stage `slot`'s bytes and start its copies (k tile `tile`)."""
    kd.barrier_expect(full, slot, (BM * BK + BK * BN) * 2)
    for g in kd.unroll(GROUPS):
        kd.bulk_copy(sa, slot * (BM * BK) + g * (64 * BK), a, m0 + 64 * g, tile * BK, 64, BK, full, slot)
    kd.bulk_copy(sb, slot * (BK * BN), b, tile * BK, n0, BK, BN, full, slot)


@kd.kernel
def gemm_bulk(a: kd.Tensor[kd.bf16, 2], b: kd.Tensor[kd.bf16, 2], c: kd.Tensor, BN: kd.Const[int],
              BK: kd.Const[int], S: kd.Const[int], LAG: kd.Const[int], GROUP: kd.Const[int]):
    """c = a @ b for M % 128 == N % BN == K % BK == 0 (grouped cube order as gemm_pipelined)."""
    kd.static_assert(kd.cube_units() == GROUPS * 4 * kd.PLANE_DIM, "launch two groups (8 planes) a cube")
    kd.static_assert(1 <= LAG < S, "a stage is refilled 1 .. S-1 steps after it was read")
    M = a.shape[0]
    N = b.shape[1]
    KT = a.shape[1] // BK
    sa = kd.shared(kd.bf16, S * BM * BK)
    sb = kd.shared(kd.bf16, S * BK * BN)
    full = kd.arrival_barriers(S)
    empty = kd.arrival_barriers(S)
    u = kd.unit_pos_x()
    g = kd.plane_pos() // 4
    m0, n0 = grouped_tile(kd.cube_pos_x(), M, N, BM, BN, GROUP)
    if u == 0:
        for s in kd.unroll(S):
            kd.barrier_init(full, s, 1)
            kd.barrier_init(empty, s, GROUPS * 4)  # one arrival a plane
    kd.sync_cube()
    if u == 0:
        for s in kd.unroll(S):
            if s < KT:
                issue_stage(sa, sb, a, b, full, s, s, m0, n0, BN, BK)
    acc = kd.group_fragment_acc(64, BN)
    kd.fill_fragment(acc, 0.0)
    # ring positions kept as counters, never divided: a division or remainder of a possibly
    # negative value between a product's issue and its wait made ptxas serialise the products
    slot = 0       # the stage step kt reads, and the parity of its `full` phase
    phase = 0
    last = 0       # the stage step kt - 1 read
    refill = 0     # the next stage to refill, and the parity of its `empty` phase
    rphase = 0
    for kt in range(KT):
        kd.barrier_wait(full, slot, phase)
        kd.group_mma(acc, kd.shared_tile(sa, slot * (BM * BK) + g * (64 * BK), 64, BK),
                     kd.shared_tile(sb, slot * (BK * BN), BK, BN))
        kd.group_wait(1)  # the product of step kt - 1 is done: its stage is free for this plane
        if kt >= 1 and kd.lane_pos() == 0:
            kd.barrier_arrive(empty, last)
        last = slot
        slot += 1
        if slot == S:
            slot = 0
            phase ^= 1
        # refill the stage read at step kt - LAG with tile kt - LAG + S
        if kt >= LAG and kt - LAG + S < KT:
            kd.barrier_wait(empty, refill, rphase)
            if u == 0:
                issue_stage(sa, sb, a, b, full, refill, kt - LAG + S, m0, n0, BN, BK)
            refill += 1
            if refill == S:
                refill = 0
                rphase ^= 1
    kd.group_wait(0)
    for i in kd.unroll(kd.fragment_len(acc)):
        r = m0 + g * 64 + kd.fragment_row(acc, i)
        col = n0 + kd.fragment_col(acc, i)
        c[r, col] = kd.fragment_get(acc, i)


CONFIGS = {  # name -> (BN, BK, stages, lag, group)
    "bulk 128x256x64/s4/l2/g8": (256, 64, 4, 2, 8),
    "bulk 128x256x64/s4/l1/g8": (256, 64, 4, 1, 8),
    "bulk 128x128x64/s6/l2/g8": (128, 64, 6, 2, 8),
    "bulk 128x256x32/s6/l2/g8": (256, 32, 6, 2, 8),
    "bulk 128x64x16/s3/l1/g8": (64, 16, 3, 1, 8),  # small: fits the emulation's shared memory (tests)
}


def gemm(a, b, c, config="bulk 128x256x64/s4/l2/g8"):
    """Launch one configuration of CONFIGS."""
    M, K = a.shape
    N = b.shape[1]
    BN, BK, S, LAG, G = CONFIGS[config]
    if M % BM or N % BN or K % BK:
        raise ValueError(f"gemm {config} needs M % {BM}, N % {BN}, K % {BK} == 0, got {M}x{K} @ {K}x{N}")
    gemm_bulk[(N // BN) * (M // BM), GROUPS * 4 * a.runtime.plane_dim](a, b, c, BN, BK, S, LAG, G)
