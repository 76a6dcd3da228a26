"""Paged MLA decode on group products (`kd.group_mma`: wgmma on the H200), 64 query heads a cube.

As in mla_mma.py a cube owns one query row, a chunk of heads (here 64: the rows of a group
fragment; rows past the heads are zeros, never stored) and one split of the row's tokens,
and takes N tokens a step from a ring of STAGES slots (`kd.async_copy`, the whole cube, each
16-byte chunk found through the page table, STAGES - 1 steps ahead). Q = [q | qp] and the
ring's [latent | kp] rows sit in shared memory in the layout the group primitive reads
itself (`kd.tile_offset`), so one copy of a tile serves as Kᵀ for the scores and, its latent
columns, as V. The cube's NG groups split R (group g holds O[:, g·R/NG ..] in registers,
at most 256 columns) and the contraction over [latent | kp] of the scores: each writes its
partial S to shared memory, and after a barrier every group sums the NG partials in one
order, so all hold the same scores and running (max, sum). Step j (as flash_group.py):
softmax of S_j while O += P_{j-1}·V_{j-1} still runs; a barrier (tile j + 1 in, tile j - 1
free); then the partial S_{j+1} and O += P_j·V_j are issued, the free slot takes tile
j + STAGES - 1, and the partial S_{j+1} goes to shared memory once done. Unsplit, each group
writes its columns of O / l; split, its unnormalised columns and (group 0) the (max, sum)
to the F32 workspace (merge_kernel.py)."""
from __future__ import annotations

import kerneldsl as kd

from .mla_mma import fetch_query_band, fetch_tile
from .online_softmax import exp_rows, fresh_state, lazy_max, scale_rows, store_group_output
from .paged_kernel import split_range

GROUP_ROWS = 64  # query heads a cube: the rows of a group fragment
PART_STRIDE = GROUP_ROWS + 4  # partial scores are stored token-major, 68 floats a token: a plane's 8 rows x 4
#                               column pairs of an accumulator fall in 32 different banks (2·68 = 8 mod 32)


@kd.func
def store_partial(part, sacc, grp, N):
    """This group's partial scores (the group fragment sacc, 64 x N) to part[grp], token-major."""
    for e in kd.unroll(kd.fragment_len(sacc)):
        part[(grp * N + kd.fragment_col(sacc, e)) * PART_STRIDE + kd.fragment_row(sacc, e)] = kd.fragment_get(sacc, e)


@kd.kernel
def mla_group_kernel(q: kd.Tensor, qp: kd.Tensor, lat: kd.Tensor, kp: kd.Tensor, tables: kd.Tensor,
                     lengths: kd.Tensor, seq_ids: kd.Tensor, positions: kd.Tensor, out: kd.Tensor, work: kd.Tensor,
                     qscale: kd.f32, causal: kd.i32, splits: kd.i32,
                     R: kd.Const[int], P: kd.Const[int], N: kd.Const[int], PS: kd.Const[int],
                     STAGES: kd.Const[int], SPLIT: kd.Const[bool]):
    DT = lat.dtype
    NG = kd.plane_count() // 4
    RW = (R + 15) // 16 * 16                          # latent columns of a shared row (also the values)
    KCG = (RW // 16 + (P + 15) // 16 + NG - 1) // NG  # contraction bands of 16 per group
    KW = KCG * NG * 16                                # a shared row: [latent | kp | zeros]
    DVG = RW // NG                                    # output columns per group
    SLOT = N * KW
    grp = kd.plane_pos() // 4
    sp = kd.cube_pos_z()
    H = q.shape[1]
    chunks = (H + GROUP_ROWS - 1) // GROUP_ROWS
    r = kd.cube_pos_x() // chunks
    h0 = kd.cube_pos_x() % chunks * GROUP_ROWS

    q_sh = kd.shared(DT, GROUP_ROWS * KW)
    ring = kd.shared(DT, STAGES * SLOT)              # slot i % STAGES: the rows of step i's N tokens
    part = kd.shared(kd.f32, NG * N * PART_STRIDE)   # each group's partial scores of a step

    # ---- Q, then the first STAGES - 1 tiles; S_0's partial
    fetch_query_band(q_sh, -GROUP_ROWS, 0, RW, q, r, h0, GROUP_ROWS, R)
    fetch_query_band(q_sh, -GROUP_ROWS, RW, KW - RW, qp, r, h0, GROUP_ROWS, P)
    kd.async_commit()
    s, jb, je = split_range(seq_ids, lengths, positions, r, causal, sp, splits)
    for st in kd.unroll(STAGES - 1):
        fetch_tile(ring, st * SLOT, -N, RW, KW, lat, kp, tables, s, jb + st * N, je, PS, R, P, N)
        kd.async_commit()
    kd.async_wait(STAGES - 2)
    kd.sync_cube()

    sacc = kd.group_fragment_acc(GROUP_ROWS, N)
    pa = kd.group_fragment_a(DT, GROUP_ROWS, N)
    o = kd.group_fragment_acc(GROUP_ROWS, DVG)
    kd.fill_fragment(o, 0.0)
    NE = kd.fragment_len(sacc)
    q_tile = kd.shared_tile(q_sh, grp * KCG * 16 * GROUP_ROWS, GROUP_ROWS, KCG * 16)
    kd.group_mma(sacc, q_tile, kd.shared_tile(ring, grp * KCG * 16 * N, KCG * 16, N, transposed=True),
                 accumulate=False)
    kd.group_wait(0)
    store_partial(part, sacc, grp, N)

    m, l = fresh_state(sacc)

    steps = (je - jb + N - 1) // N
    for jt in range(0, steps):
        kd.sync_cube()  # every group's partial S_jt is in
        j0 = jb + jt * N
        # ---- S_jt: the partials summed in group order, logits in log2 units, tokens past the split masked
        for e in kd.unroll(NE):
            at = kd.fragment_col(sacc, e) * PART_STRIDE + kd.fragment_row(sacc, e)
            x = part[at]
            for g in kd.unroll(1, NG):
                x = x + part[g * N * PART_STRIDE + at]
            kd.fragment_set(sacc, e, kd.select(j0 + kd.fragment_col(sacc, e) < je, x * qscale, -kd.inf))
        # ---- the running max (moved lazily), P = exp2(S - m) in place, the lane's part of each row sum
        moved, alpha, m, l = lazy_max((sacc,), sacc, m, l)
        l = exp_rows((sacc,), sacc, m, l)
        # ---- the previous P·V is done: O rescaled, P rounded into the a fragment
        kd.group_wait(0)
        if moved:
            scale_rows((o,), alpha)
        kd.fragment_convert(pa, sacc)
        # ---- tile jt + 1 is in for every unit; every group is done with tile jt - 1 and the partials
        kd.async_wait(STAGES - 3)
        kd.sync_cube()
        cur = jt % STAGES * SLOT
        if jt + 1 < steps:
            kd.group_mma(sacc, q_tile,
                         kd.shared_tile(ring, (jt + 1) % STAGES * SLOT + grp * KCG * 16 * N, KCG * 16, N,
                                        transposed=True), accumulate=False)
        kd.group_mma(o, pa, kd.shared_tile(ring, cur + grp * DVG * N, N, DVG))
        nxt = jt + STAGES - 1
        fetch_tile(ring, nxt % STAGES * SLOT, -N, RW, KW, lat, kp, tables, s, jb + nxt * N, je, PS, R, P, N)
        kd.async_commit()
        kd.group_wait(1)  # the partial S_jt+1 is done (products finish in order)
        if jt + 1 < steps:
            store_partial(part, sacc, grp, N)
    kd.group_wait(0)
    kd.async_wait(0)

    # ---- this group's columns of the output (split: unnormalised, and the (max, sum) once)
    store_group_output(o, sacc, m, l, out, work, r, h0, sp, grp, DVG, H, R, SPLIT)
