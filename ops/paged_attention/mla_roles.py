"""Paged MLA decode on roles and bulk copies (Hopper: `Capabilities.bulk_copy`,
`group_mma_native`), 64 query heads a cube, N tokens (64) a step.

A cube owns one query row, 64 query heads (rows of a group fragment; rows past the heads are
other rows' or zeros, never stored) and one split of the row's tokens; the split's bounds are
whole steps, so a step's tokens lie in one page (page size a multiple of N) or fill whole
pages (N a multiple of the page size). Three groups of 4 planes:

- group 2, the producer, only issues bulk copies (`kd.bulk_copy`, the 128-byte layout): Q =
  [q | qp] once, and per step the [latent | kp] rows of its N tokens, a box of 64 columns per
  band and page, read through the 2-D views [pages · page_size, R] and [.., P] (a page's rows
  are contiguous), into a ring of S stages announced on `full` barriers; it refills a stage
  once both consumers handed it back on its `empty` barrier.
- groups 0 and 1, the consumers, each compute the whole score tile S = [q | qp]·[latent | kp]ᵀ
  (64 x N, the full 576-wide contraction: both get bit-identical scores and running (max,
  sum), so they never exchange partials or wait for each other) and O += P·V on their half of
  the latent columns (group g holds O[64, R/2] in registers, at most 256 columns).
  Pipelined as flash_group.py: the softmax of S_j runs while P_{j-1}·V_{j-1} does; then S_{j+1}
  and P_j·V_j are issued together; a stage goes back once the P·V reading it is done.

Tokens past the split's end in its last step are read from the page (whatever it holds, maybe
NaN): their scores are masked, and before that step's products the consumers zero their latent
rows (0 · NaN would poison P·V). Unsplit, each consumer writes its columns of O / l; split,
its unnormalised columns and (group 0) the (max, sum) to the F32 workspace (merge_kernel.py).
Elsewhere the roles, copies and barriers are emulated in program order, giving the same results.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.errors import LaunchError
from kerneldsl.launch_checks import check_bulk_source

from ..stage_ring import next_stage, ring_start, stage_barriers
from .online_softmax import exp_rows, fresh_state, lazy_max, scale_rows, store_group_output

HEADS = 64                # query heads a cube: the rows of a group fragment
CONSUMERS = 2             # consumer groups (each half of the latent columns)
BAND = 64                 # columns of a band of the 128-byte layout (one box a band)
SWIZZLE = 128
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
UNITS_PLANES = (CONSUMERS + 1) * 4  # planes a cube
# O (256 registers' worth a lane pair) is rescaled only in steps whose running max moved (a
# plane-uniform branch): most steps keep the max, and their 128 multiplications a lane sit
# between a product's wait and the next issue
RESCALE_ONLY_MOVED = True


@kd.func
def step_range(seq_ids, lengths, positions, r, causal, sp, splits, N):
    """(sequence, first token, end token, steps) of query row r's share `sp` of `splits`: its
    visible tokens [0, L) or, causal, [0, min(L, position + 1)), cut into near-equal runs of
    whole N-token steps (so every step starts on a multiple of N)."""
    s = seq_ids[r]
    vis = lengths[s]
    if causal != 0:
        vis = kd.min(vis, positions[r] + 1)
    total = (vis + N - 1) // N
    sb = total * sp // splits
    se = total * (sp + 1) // splits
    return s, sb * N, kd.min(vis, se * N), se - sb


@kd.func
def issue_step(ring, at, lat, kp, tables, full, slot, s, j0, je, PS, N, BOX, RB, PB):
    """(The producer's issuing unit) announce stage `slot`'s bytes and copy the [latent | kp]
    rows of tokens j0 .. j0 + N - 1 of sequence s into the ring's tile at `at` (an N-row
    matrix of RB + PB bands): a box of BOX = min(PS, N) rows a band and page. Pages of tokens past
    je are looked up at je - 1 (a valid entry); their rows are masked and cleared."""
    kd.barrier_expect(full, slot, N * (RB + PB) * BAND * 2)
    for i in kd.unroll(N // BOX):
        jc = kd.min(j0 + i * BOX, je - 1)
        row = tables[s, jc // PS] * PS + (j0 + i * BOX) % PS
        for b in kd.unroll(RB):
            kd.bulk_copy(ring, at + b * N * BAND + i * BOX * BAND, lat, row, b * BAND, BOX, BAND, full, slot,
                         swizzle=SWIZZLE)
        for b in kd.unroll(PB):
            kd.bulk_copy(ring, at + (RB + b) * N * BAND + i * BOX * BAND, kp, row, b * BAND, BOX, BAND, full, slot,
                         swizzle=SWIZZLE)


@kd.func
def clear_tail(ring, at, j0, je, N, RB):
    """(The consumers) zero the latent rows of the tokens from je on in the tile at `at`, then
    a barrier of the consumers (which also orders the writes before their group products)."""
    if j0 + N > je:
        W = RB * BAND
        first = je - j0
        for e in range(kd.unit_pos(), (N - first) * W, CONSUMERS * 4 * kd.PLANE_DIM):
            ring[at + kd.tile_offset(first + e // W, e % W, N, swizzle=SWIZZLE)] = kd.cast(0.0, ring.dtype)
        kd.sync_role()


@kd.kernel
def mla_roles_kernel(q: kd.Tensor[None, 2], qp: kd.Tensor[None, 2], lat: kd.Tensor[None, 2],
                     kp: kd.Tensor[None, 2], tables: kd.Tensor, lengths: kd.Tensor, seq_ids: kd.Tensor,
                     positions: kd.Tensor, out: kd.Tensor, work: kd.Tensor, qscale: kd.f32, causal: kd.i32,
                     splits: kd.i32, H: kd.i32, R: kd.Const[int], P: kd.Const[int], N: kd.Const[int],
                     PS: kd.Const[int], BOX: kd.Const[int], S: kd.Const[int], SPLIT: kd.Const[bool]):
    """q, qp: [queries · H, R | P] views; lat, kp: [pages · PS, R | P] views of the caches."""
    kd.static_assert(kd.cube_units() == UNITS_PLANES * kd.PLANE_DIM,
                     "launch three groups (12 planes) a cube: two consumers and a producer")
    DT = lat.dtype
    RB = (R + BAND - 1) // BAND            # latent bands (the values: RB / 2 a consumer)
    PB = (P + BAND - 1) // BAND            # rotary bands
    KB = RB + PB
    DVG = RB // CONSUMERS * BAND           # output columns a consumer
    SLOT = N * KB * BAND
    chunks = (H + HEADS - 1) // HEADS
    r = kd.cube_pos_x() // chunks
    h0 = kd.cube_pos_x() % chunks * HEADS
    sp = kd.cube_pos_z()
    g = kd.plane_pos() // 4

    q_sh = kd.shared(DT, HEADS * KB * BAND)
    ring = kd.shared(DT, S * SLOT)          # stage i: the [latent | kp] rows of a step's N tokens
    qbar = kd.arrival_barriers(1)
    if kd.unit_pos_x() == 0:
        kd.barrier_init(qbar, 0, 1)
    full, empty = stage_barriers(S, CONSUMERS * 4)
    s, jb, je, steps = step_range(seq_ids, lengths, positions, r, causal, sp, splits, N)
    issuer = kd.unit_pos_x() == CONSUMERS * 4 * kd.PLANE_DIM  # the producer group's first unit

    sacc = kd.group_fragment_acc(HEADS, N)
    pa = kd.group_fragment_a(DT, HEADS, N)
    o = kd.group_fragment_acc(HEADS, DVG)
    NE = kd.fragment_len(sacc)
    q_tile = kd.shared_tile(q_sh, 0, HEADS, KB * BAND, swizzle=SWIZZLE)
    refill, rphase, cur, phase, last = ring_start()
    nxt, nphase = 1, 0  # the stage and phase of step 1 (S >= 2)

    # ---- Q and the first S stages; S_0
    with kd.role(CONSUMERS, 1, registers=PRODUCER_REGISTERS):
        if issuer and steps > 0:
            kd.barrier_expect(qbar, 0, HEADS * KB * BAND * 2)
            qrow = r * H + h0
            for b in kd.unroll(RB):
                kd.bulk_copy(q_sh, b * HEADS * BAND, q, qrow, b * BAND, HEADS, BAND, qbar, 0, swizzle=SWIZZLE)
            for b in kd.unroll(PB):
                kd.bulk_copy(q_sh, (RB + b) * HEADS * BAND, qp, qrow, b * BAND, HEADS, BAND, qbar, 0,
                             swizzle=SWIZZLE)
            for st in kd.unroll(S):
                if st < steps:
                    issue_step(ring, st * SLOT, lat, kp, tables, full, st, s, jb + st * N, je, PS, N, BOX, RB, PB)
    with kd.role(0, CONSUMERS, registers=CONSUMER_REGISTERS):
        kd.fill_fragment(o, 0.0)
        m, l = fresh_state(sacc)
        if steps > 0:
            kd.barrier_wait(qbar, 0, 0)
            kd.barrier_wait(full, 0, 0)
            clear_tail(ring, 0, jb, je, N, RB)
            kd.group_mma(sacc, q_tile, kd.shared_tile(ring, 0, KB * BAND, N, transposed=True, swizzle=SWIZZLE),
                         accumulate=False)
            kd.group_wait(0)

    for jt in range(steps):
        j0 = jb + jt * N  # (set outside the roles: uniform over the cube)
        with kd.role(0, CONSUMERS):
            # ---- S_jt: logits in log2 units, tokens past the split masked; P = exp2(S - m)
            for e in kd.unroll(NE):
                x = kd.fragment_get(sacc, e)
                kd.fragment_set(sacc, e, kd.select(j0 + kd.fragment_col(sacc, e) < je, x * qscale, -kd.inf))
            moved, alpha, m, l = lazy_max((sacc,), sacc, m, l)
            l = exp_rows((sacc,), sacc, m, l)
            # ---- P_jt-1·V_jt-1 is done: its stage goes back; O rescaled (alpha = 1 unless moved)
            kd.group_wait(0)
            if jt >= 1 and kd.lane_pos() == 0:
                kd.barrier_arrive(empty, last)
            if RESCALE_ONLY_MOVED:
                if moved:
                    scale_rows((o,), alpha)
            else:
                scale_rows((o,), alpha)
            kd.fragment_convert(pa, sacc)
        with kd.role(CONSUMERS, 1):
            # ---- refill the stage step jt - 1 read with step jt - 1 + S, once both consumers are through
            if issuer and jt >= 1 and jt - 1 + S < steps:
                kd.barrier_wait(empty, refill, rphase)
                issue_step(ring, refill * SLOT, lat, kp, tables, full, refill, s, jb + (jt - 1 + S) * N, je, PS, N,
                           BOX, RB, PB)
                refill, rphase = next_stage(refill, rphase, S)
        with kd.role(0, CONSUMERS):
            # ---- S_jt+1 and P_jt·V_jt issued together
            if jt + 1 < steps:
                kd.barrier_wait(full, nxt, nphase)
                clear_tail(ring, nxt * SLOT, j0 + N, je, N, RB)
                kd.group_mma(sacc, q_tile, kd.shared_tile(ring, nxt * SLOT, KB * BAND, N, transposed=True,
                                                          swizzle=SWIZZLE), accumulate=False)
            kd.group_mma(o, pa, kd.shared_tile(ring, cur * SLOT + g * (DVG * N), N, DVG, swizzle=SWIZZLE))
            kd.group_wait(1)  # S_jt+1 is done (products finish in order); P_jt·V_jt may still run
            last = cur
            cur = nxt
            nxt, nphase = next_stage(nxt, nphase, S)

    # ---- this consumer's columns of the output (split: unnormalised, and the (max, sum) once)
    with kd.role(0, CONSUMERS):
        kd.group_wait(0)
        store_group_output(o, sacc, m, l, out, work, r, h0, sp, g, DVG, H, R, SPLIT)


def views(q, qp, lat, kp) -> tuple:
    """The 2-D views the kernel copies from: [queries · H, R], [.., P], [pages · PS, R], [.., P]."""
    return tuple(t.reshape(t.size // t.shape[-1], t.shape[-1]) for t in (q, qp, lat, kp))


def usable(q, qp, lat, kp) -> bool:
    """Whether the copy engine reads these operands (the launch's own rules on the 2-D views:
    contiguous rows, 16-byte aligned, rows a multiple of 16 bytes apart)."""
    try:
        for t in views(q, qp, lat, kp):
            check_bulk_source(t, "mla_roles_kernel", "operand")
    except LaunchError:
        return False
    return True
