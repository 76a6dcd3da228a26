"""`FlashBlackboxAccelerated` by roles where the device has bulk tensor copies and native group
products (`Capabilities.bulk_copy`, `group_mma_native`: Hopper), after FlashAttention-3's design.

A cube is NG consumer groups and one producer group (tiling (4·(NG + 1), 1, seq_kv)). Consumer
group g owns 64 rows, 64g .. 64g + 63, of the cube's BQ = 64·NG rows of the flattened
[group heads x Sq] query block of one KV head (as in `flash_group`); each step takes
BN = 16·(num_planes - 4)·seq_kv keys (the producer's planes do not count).

The producer (few registers) only issues bulk copies, through 2-D views of the inputs:
Q [B·Hq·Sq, D] once, K [B·Hkv·Skv, D] and V [B·Hkv·Skv, Dv] a tile at a time into two
2-stage rings, K's and V's apart (S_{j+1} needs K tile j+1 a step before P_j·V_j needs V tile
j), each stage announced on its `full` barrier and handed back by the consumers on its
`empty` one. Q rows past the block belong to the next heads (or lie past the tensor: zeros):
their rows of S, P and O are garbage that is never stored, and rows do not mix. A KV tile's
box stays inside its head: the last tile of a head starts at Skv - BN rather than running
into the next head (that would let another head's values, possibly inf or NaN, into
P·V as 0·inf), and its keys that the previous tile already covered are masked to -inf; so
the kernel needs Skv >= BN (`fits`).

The consumers (many registers) only wait and compute, software-pipelined as `flash_group`:
while O += P_{j-1}·V_{j-1} runs, the softmax of S_j in registers (the shared logit rule on
edge, diagonal and masked tiles; raw scores with the scale folded into the exponent on the
others; the lazy running max); then S_{j+1} = Q·K_{j+1}ᵀ and O += P_j·V_j are issued
together and only S_{j+1} is waited for. With two consumer groups and PINGPONG they take
turns issuing those products (FlashAttention-3's ping-pong, through `turn` arrival barriers):
group 1 after group 0 has issued this step's, group 0 after group 1 has issued the last
step's, so that the tensor cores run one group's products while the other runs its softmax;
each group is then a role of its own in the loop (its own copy of the code). Causal: tiles past the block's last visible key are
never copied nor computed; the diagonal ones take the logit rule. The output leaves from the
accumulators element by element, rows past the block masked.

Natively the roles run concurrently, each with its register budget; elsewhere they are
emulated in program order (the producer refills a stage in the step after the consumers
handed it back), giving the same results.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.errors import LaunchError
from kerneldsl.launch_checks import check_bulk_source

from .flash_regs import query_row, slot_row
from .group_softmax import exp_in_place, store_normalised, tile_maxima
from .scores import LOG2E, logit2

GROUP_ROWS = 64           # query rows of a consumer group
SWIZZLE = 128             # tiles in the 128-byte layout: a tile is one bulk copy of whole 64-column bands
DIMS = (64, 128)          # head dims taken (whole bands; S, P and O of a group stay in registers)
PRODUCER_REGISTERS = 24   # the copy-issuing group keeps few registers ...
CONSUMER_REGISTERS = 240  # ... so that two consumer groups' S, P and O fit (256 units x 240 + 128 x 24)
MAX_KEYS = 128            # keys a step (registers: S and P of 128 keys and O of 128 dims at 240 a unit)
# two consumer groups take turns issuing their products (FlashAttention-3's ping-pong): off by
# default, as it lost on the H200 in every case measured (D 128 full 0.905 against 0.898 ms without,
# causal 0.542 / 0.538; D 64 0.716 / 0.661 and 0.427 / 0.402; session 19, benchmarks/RESULTS.md)
PINGPONG = False


@kd.func
def copy_kv(dst, src, full, slot, row, NR, DIMP):
    """Unit 0 of the producer: announce the tile's bytes on `full`[slot], copy rows row ..
    row + NR of the 2-D view src (DIMP columns, past the view's columns: zeros) into slot."""
    kd.barrier_expect(full, slot, NR * DIMP * 2)
    kd.bulk_copy(dst, slot * (NR * DIMP), src, row, 0, NR, DIMP, full, slot, swizzle=SWIZZLE)


@kd.func
def tile_start(t, BN, Skv):
    """First key of KV tile t: t·BN, the last tile of a head pulled back to end at Skv."""
    return kd.min(t * BN, Skv - BN)


@kd.func
def consume(s, pa, o, m, l, q_tile, k_sh, v_sh, kfull, kempty, vfull, vempty, turn, jt, nt, at, cctx, g, BN, DP, DVP,
            PINGPONG, HAS_MASK, HAS_BIAS, SOFTCAP):
    """Step jt of a consumer group (g: which one, for ping-pong): S_jt is in s, O += P_{jt-1}·V_{jt-1}
    may still run (it overlaps this softmax). Returns the running (max, sum) of its row slots.
    at = (r0 + the group's first row, rows, Sq, hk, G, causal, off, i_min); cctx = (mask, bias, b,
    Skv, scale, scale2, softcap)."""
    mask, bias, b, Skv, scale, scale2, softcap = cctx
    rfirst, rows, Sq, hk, G, causal, off, i_min = at
    NS = kd.fragment_row_slots(s)
    NE = kd.fragment_len(s)
    NO = kd.fragment_len(o)
    j0 = jt * BN
    ks = tile_start(jt, BN, Skv)  # first key of the tile held (< j0 for a head's pulled-back last tile)
    interior = False
    if not (HAS_MASK or HAS_BIAS or SOFTCAP):
        interior = (ks == j0) & ((causal == 0) | (j0 + BN - 1 <= i_min + off))
    fold = interior & (scale2 > 0.0)  # raw scores kept; the scale joins the max and the exponent
    sc = kd.select(fold, scale2, kd.f32(1))

    # ---- logits (log2 units) in place where the tile needs the rule
    if interior:
        if not fold:
            for i in kd.unroll(NE):
                kd.fragment_set(s, i, kd.fragment_get(s, i) * scale2)
    else:
        qrows = ()
        for sl in kd.unroll(NS):
            qrows = qrows + (query_row(rfirst + slot_row(s, sl), rows, Sq, hk, G, causal, off, Skv),)
        for i in kd.unroll(NE):
            h, iq, lim = qrows[kd.fragment_row_slot(s, i)]
            ctx = (mask, bias, b, h, iq, lim, Skv, softcap, LOG2E)
            j = ks + kd.fragment_col(s, i)
            x = logit2(kd.fragment_get(s, i) * scale, j, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
            kd.fragment_set(s, i, kd.select(j < j0, -kd.inf, x))  # keys of the previous tile

    # ---- row maxima; the running max moves only when a row's grows by more than TAU
    mts, rescale = tile_maxima(s, m, sc)
    alpha = ()  # O's rescale factors (1 unless rescaling), applied once the previous P·V is done
    m2 = ()
    l2 = ()
    for sl in kd.unroll(NS):  # selects, not a run-time `if`: m and l are the caller's tuples
        mn = kd.max(m[sl], mts[sl])
        a = kd.select(rescale, kd.exp2_fast(m[sl] - kd.select(mn == -kd.inf, kd.f32(0), mn)), kd.f32(1))
        alpha = alpha + (a,)
        m2 = m2 + (kd.select(rescale, mn, m[sl]),)
        l2 = l2 + (l[sl] * a,)
    m = m2
    l = l2

    # ---- P = exp2(logit - m) in place, the lane's part of each row sum
    l = exp_in_place(s, m, l, sc)

    # ---- the previous P·V is done: its V stage goes back; O rescaled, P rounded
    kd.group_wait(0)
    if jt >= 1 and kd.lane_pos() == 0:
        kd.barrier_arrive(vempty, (jt - 1) & 1)
    if rescale:
        for i in kd.unroll(NO):
            kd.fragment_set(o, i, kd.fragment_get(o, i) * alpha[kd.fragment_row_slot(o, i)])
    kd.fragment_convert(pa, s)

    # ---- S_{jt+1} = Q·K_{jt+1}ᵀ, then O += P_jt·V_jt left running into the next softmax; with
    # ping-pong, group 1 issues them after group 0 has (this step), group 0 after group 1 has (the
    # last step): the tensor cores take one group's products while the other runs its softmax
    if PINGPONG:
        if g == 0 and jt >= 1:
            kd.barrier_wait(turn, 0, (jt - 1) & 1)
        if g == 1:
            kd.barrier_wait(turn, 1, jt & 1)
    if jt + 1 < nt:
        kd.barrier_wait(kfull, (jt + 1) & 1, ((jt + 1) >> 1) & 1)
        kd.group_mma(s, q_tile, kd.shared_tile(k_sh, ((jt + 1) & 1) * (BN * DP), DP, BN, transposed=True,
                                               swizzle=SWIZZLE), accumulate=False)
    kd.barrier_wait(vfull, jt & 1, (jt >> 1) & 1)
    kd.group_mma(o, pa, kd.shared_tile(v_sh, (jt & 1) * (BN * DVP), BN, DVP, swizzle=SWIZZLE))
    if PINGPONG and kd.lane_pos() == 0:
        kd.barrier_arrive(turn, 1 - g)
    kd.group_wait(1)  # S_{jt+1} is in: its K stage goes back
    if jt + 1 < nt and kd.lane_pos() == 0:
        kd.barrier_arrive(kempty, (jt + 1) & 1)
    return m, l

@kd.kernel
def flash_roles_kernel(q2: kd.Tensor[None, 2], k2: kd.Tensor[None, 2], v2: kd.Tensor[None, 2], out: kd.Tensor,
                       mask: kd.Tensor, bias: kd.Tensor, scale: kd.f32, softcap: kd.f32, causal: kd.i32,
                       Hkv: kd.i32, Skv: kd.i32, D: kd.Const[int], DV: kd.Const[int], BN: kd.Const[int],
                       NG: kd.Const[int], HAS_MASK: kd.Const[bool], HAS_BIAS: kd.Const[bool],
                       SOFTCAP: kd.Const[bool], PINGPONG: kd.Const[bool]):
    """out[b, h, i] = softmax_j(logit(q[b, h, i]·k[b, h // G, j])) · v[b, h // G, j] for the
    block of query rows of this cube; q2, k2, v2 are the [rows, dims] views of q, k, v."""
    kd.static_assert(kd.cube_units() == (NG + 1) * 4 * kd.PLANE_DIM,
                     "launch NG + 1 groups a cube: NG consumers and a producer")
    kd.static_assert(NG == 2 or not PINGPONG, "ping-pong takes two consumer groups")
    DT = q2.dtype
    BQ = GROUP_ROWS * NG
    DP = (D + 63) // 64 * 64
    DVP = (DV + 63) // 64 * 64
    Hq = out.shape[1]
    Sq = out.shape[2]
    G = Hq // Hkv
    b = kd.cube_pos_y() // Hkv
    hk = kd.cube_pos_y() % Hkv
    rows = G * Sq
    r0 = (kd.cube_count_x() - 1 - kd.cube_pos_x()) * BQ  # longest causal blocks first
    off = Skv - Sq
    qrow = (b * Hq + hk * G) * Sq + r0  # the block's first row in q2
    krow = (b * Hkv + hk) * Skv         # the head's first row in k2, v2

    # keys any row of the block sees: i_min, kv_end as in blocks.key_range
    r_last = kd.min(r0 + BQ, rows) - 1
    one_head = r0 // Sq == r_last // Sq
    i_min = kd.select(one_head, r0 % Sq, 0)
    kv_end = Skv
    if causal != 0:
        kv_end = kd.max(kd.min(kd.select(one_head, r_last % Sq, Sq - 1) + off + 1, Skv), 0)
    nt = (kv_end + BN - 1) // BN  # KV tiles of this block
    scale2 = scale * LOG2E

    q_sh = kd.shared(DT, BQ * DP)
    k_sh = kd.shared(DT, 2 * BN * DP)    # K tile t in stage t % 2
    v_sh = kd.shared(DT, 2 * BN * DVP)   # V tile t in stage t % 2
    qfull = kd.arrival_barriers(1)
    kfull = kd.arrival_barriers(2)
    kempty = kd.arrival_barriers(2)
    vfull = kd.arrival_barriers(2)
    vempty = kd.arrival_barriers(2)
    turn = kd.arrival_barriers(2)  # ping-pong: group g may issue its products once turn[g] completes
    if kd.unit_pos_x() == 0:
        kd.barrier_init(qfull, 0, 1)
        for s in kd.unroll(2):
            kd.barrier_init(kfull, s, 1)
            kd.barrier_init(vfull, s, 1)
            kd.barrier_init(kempty, s, NG * 4)
            kd.barrier_init(vempty, s, NG * 4)
            kd.barrier_init(turn, s, 4)  # the other group's planes have issued theirs
    kd.sync_cube()
    issuer = kd.unit_pos_x() == NG * 4 * kd.PLANE_DIM  # the producer group's first unit
    grp = kd.plane_pos() // 4
    prow = grp * GROUP_ROWS

    s = kd.group_fragment_acc(GROUP_ROWS, BN)
    pa = kd.group_fragment_a(DT, GROUP_ROWS, BN)
    o = kd.group_fragment_acc(GROUP_ROWS, DVP)
    NS = kd.fragment_row_slots(s)
    q_tile = kd.shared_tile(q_sh, grp * (GROUP_ROWS * DP), GROUP_ROWS, DP, swizzle=SWIZZLE)
    at = (r0 + prow, rows, Sq, hk, G, causal, off, i_min)
    ctx = (mask, bias, b, Skv, scale, scale2, softcap)

    with kd.role(NG, 1, registers=PRODUCER_REGISTERS):
        if issuer and nt > 0:
            kd.barrier_expect(qfull, 0, BQ * DP * 2)
            for g in kd.unroll(NG):  # a group's 64 rows are one tile of their own (all its bands)
                kd.bulk_copy(q_sh, g * (GROUP_ROWS * DP), q2, qrow + g * GROUP_ROWS, 0, GROUP_ROWS, DP, qfull, 0,
                             swizzle=SWIZZLE)
            for t in kd.unroll(2):
                if t < nt:
                    copy_kv(k_sh, k2, kfull, t, krow + tile_start(t, BN, Skv), BN, DP)
                    copy_kv(v_sh, v2, vfull, t, krow + tile_start(t, BN, Skv), BN, DVP)
    m = ()  # per row slot: the running max and sum
    l = ()
    with kd.role(0, NG, registers=CONSUMER_REGISTERS):
        kd.fill_fragment(o, 0.0)
        for n in kd.unroll(NS):
            m = m + (-kd.inf,)
            l = l + (kd.f32(0),)
        if nt > 0:  # S of tile 0; its K stage goes back at once
            kd.barrier_wait(qfull, 0, 0)
            kd.barrier_wait(kfull, 0, 0)
            kd.group_mma(s, q_tile, kd.shared_tile(k_sh, 0, DP, BN, transposed=True, swizzle=SWIZZLE),
                         accumulate=False)
        kd.group_wait(0)
        if nt > 0 and kd.lane_pos() == 0:
            kd.barrier_arrive(kempty, 0)

    # Step jt: S_jt is in s; O += P_{jt-1}·V_{jt-1} may still run (it overlaps this softmax)
    for jt in range(nt):
        if PINGPONG:
            for g in kd.unroll(NG):
                with kd.role(g, 1):
                    m, l = consume(s, pa, o, m, l, q_tile, k_sh, v_sh, kfull, kempty, vfull, vempty, turn, jt, nt, at,
                                   ctx, g, BN, DP, DVP, True, HAS_MASK, HAS_BIAS, SOFTCAP)
        else:
            with kd.role(0, NG):
                m, l = consume(s, pa, o, m, l, q_tile, k_sh, v_sh, kfull, kempty, vfull, vempty, turn, jt, nt, at,
                               ctx, 0, BN, DP, DVP, False, HAS_MASK, HAS_BIAS, SOFTCAP)
        with kd.role(NG, 1):
            # K tile jt + 2 into tile jt's stage (handed back when S_jt was done, a step ago);
            # V tile jt + 1 into tile jt - 1's stage (handed back in this step)
            if issuer:
                if jt + 2 < nt:
                    kd.barrier_wait(kempty, jt & 1, (jt >> 1) & 1)
                    copy_kv(k_sh, k2, kfull, jt & 1, krow + tile_start(jt + 2, BN, Skv), BN, DP)
                if jt >= 1 and jt + 1 < nt:
                    kd.barrier_wait(vempty, (jt - 1) & 1, ((jt - 1) >> 1) & 1)
                    copy_kv(v_sh, v2, vfull, (jt + 1) & 1, krow + tile_start(jt + 1, BN, Skv), BN, DVP)

    with kd.role(0, NG):
        kd.group_wait(0)
        # ---- out = O / l (rows with no visible key: zeros)
        store_normalised(out, o, s, l, b, r0 + prow, rows, Sq, hk, G, causal, off, Skv, DV)


def consumer_groups(tiling) -> int:
    """Consumer groups a cube for a tiling of this kernel (num_planes counts the producer's 4)."""
    return tiling.num_planes // 4 - 1


def keys_per_step(tiling) -> int:
    """BN: 16 keys a consumer plane and seq_kv."""
    return 16 * (tiling.num_planes - 4) * tiling.seq_kv


def fits(p, tiling) -> bool:
    """Whether this kernel can run p with `tiling`: bulk copies and native group products
    (elsewhere `usable` is what decides; the tests force the kernel on every runtime), one or
    two consumer groups and a producer (8 or 12 planes), one query tile a plane, head dims of
    whole 64-column bands up to 128, BN keys a step (at most MAX_KEYS) and at least BN keys
    (a head's last tile is pulled back inside the head)."""
    bn = keys_per_step(tiling)
    return (tiling.num_planes in (8, 12) and tiling.seq_q == 1 and p.D in DIMS and p.Dv in DIMS
            and bn % 64 == 0 and bn <= MAX_KEYS and p.Skv >= bn)


def usable(p, tiling) -> bool:
    """Whether the roles kernel serves p with `tiling` on its runtime: bulk copies and native
    group products, f16/bf16, `fits`, and inputs the copy engine reads (contiguous, rows of
    16-byte multiples starting on 16-byte boundaries), else the group kernel (flash_group)."""
    caps = p.runtime.capabilities
    if not (caps.bulk_copy and caps.group_mma_native) or p.dtype.name not in ("f16", "bf16"):
        return False
    if not fits(p, tiling) or not all(t.is_contiguous() for t in (p.q, p.k, p.v)):
        return False
    try:  # the rules the launch would check, on the 2-D views the kernel copies from
        for t in views(p):
            check_bulk_source(t, "flash_roles_kernel", "operand")
    except LaunchError:
        return False
    return True


def views(p) -> tuple:
    """The [rows, dims] views of q, k and v the bulk copies read (contiguous inputs)."""
    return tuple(t.reshape(t.size // t.shape[-1], t.shape[-1]) for t in (p.q, p.k, p.v))


def shared_bytes(p, tiling) -> int:
    """Shared memory the kernel declares for problem p and this tiling (plus its barriers)."""
    bq = 64 * consumer_groups(tiling)
    bn = keys_per_step(tiling)
    dp, dvp = (p.D + 63) // 64 * 64, (p.Dv + 63) // 64 * 64
    return p.dtype.itemsize * (bq * dp + 2 * bn * (dp + dvp)) + 11 * 8


def run(p, out, dummy_mask, dummy_bias, tiling, pingpong: bool | None = None) -> None:
    """Launch for a validated problem with contiguous q, k, v (fits(p, tiling) true).
    `pingpong` (two consumer groups) overrides PINGPONG."""
    ng = consumer_groups(tiling)
    units = (ng + 1) * 4 * p.runtime.capabilities.plane_dim
    bq = 64 * ng
    rows = p.group * p.Sq
    grid = ((rows + bq - 1) // bq, p.B * p.Hkv)
    q2, k2, v2 = views(p)
    flash_roles_kernel[grid, units](
        q2, k2, v2, out, p.mask if p.mask is not None else dummy_mask,
        p.bias if p.bias is not None else dummy_bias, p.scale, p.softcap or 1.0, int(p.causal), p.Hkv, p.Skv,
        p.D, p.Dv, keys_per_step(tiling), ng, p.mask is not None, p.bias is not None, p.softcap is not None,
        ng == 2 and (PINGPONG if pingpong is None else bool(pingpong)))
