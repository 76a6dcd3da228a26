"""`FlashBlackboxAccelerated` on the group matrix primitive (`kd.group_mma`: wgmma on Hopper).

A cube of NP planes (a multiple of 4) is NP/4 groups; group g owns 64 rows, 64g .. 64g + 63,
of the cube's BQ = 16·NP rows of the flattened [group heads x Sq] query block of one KV head,
its plane p (of 4) rows 16p .. 16p + 15 of those in the accumulators. Each step takes
BK = 16·NP·seq_kv keys (`flash_regs.key_tiles` with seq_q = 1). Q, and K and V in a two-slot
ring filled by `kd.async_copy` (the next tile lands while this one is used), sit in shared
memory in the layout that `kd.group_mma` reads itself (`kd.tile_offset`), so no plane
loads a fragment of Q, K or V: on Hopper a product is a few wgmma instructions, where the
`flash_regs` kernel spends most of its shared-memory bandwidth on ldmatrix. Tile j:

1. the softmax on S_j = Q·K_jᵀ (64 x BK per group, in registers) element by element, as in
   `flash_regs`: the shared logit rule where a tile needs it (edges, masks, bias, softcap),
   raw scores with the scale folded into the exponent elsewhere, row maxima over the lanes
   holding a row, the lazy running max (O is rescaled only when a row's max grows by more
   than TAU), P = exp2(logit - m). Meanwhile O += P_{j-1}·V_{j-1} is still running
   (`kd.group_mma` is asynchronous): only the rescale of O and the rounding of P into the a
   fragment wait for it (`kd.group_wait(0)`);
2. one barrier: K tile j+1 and V tile j are in, every group is done with the slots of K
   tile j and V tile j-1;
3. S_{j+1} = Q·K_{j+1}ᵀ (overwriting S), then O += P_j·V_j; while they run, the free
   slots take K tile j+2 and V tile j+1 (`kd.async_copy`, landing during the next tile);
   then wait for S_{j+1} only (`kd.group_wait(1)`: products finish in order).
"""
from __future__ import annotations

import kerneldsl as kd

from .blocks import cube_block, fetch_kv, fetch_rows, key_range
from .flash_regs import key_tiles, query_row, slot_row
from .group_softmax import exp_in_place, store_normalised, tile_maxima
from .scores import LOG2E, logit2

GROUP_ROWS = 64  # rows of a group fragment
MAX_DIM = 128    # head dims this kernel takes (S, P and O of a group stay in registers)


@kd.kernel
def flash_group_kernel(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, out: kd.Tensor, mask: kd.Tensor, bias: kd.Tensor,
                       scale: kd.f32, softcap: kd.f32, causal: kd.i32, D: kd.Const[int], DV: kd.Const[int],
                       BK: kd.Const[int], HAS_MASK: kd.Const[bool], HAS_BIAS: kd.Const[bool],
                       SOFTCAP: kd.Const[bool], VEC: kd.Const[bool]):
    DT = q.dtype
    NG = kd.plane_count() // 4
    BQ = GROUP_ROWS * NG
    DP = (D + 15) // 16 * 16
    DVP = (DV + 15) // 16 * 16
    # the tiles' layout: 128-byte band rows where the head dims are whole 64-column bands (a
    # row's 16-byte async copies then land in 8 different bank groups, not 2)
    SW = 128 if DP % 64 == 0 and DVP % 64 == 0 else 32

    b, hk, G, Sq, Skv, rows, r0 = cube_block(q, k, BQ)
    grp = kd.plane_pos() // 4
    prow = grp * GROUP_ROWS  # first row of this group's tile
    off = Skv - Sq

    q_sh = kd.shared(DT, BQ * DP)       # one 64 x DP tile per group
    k_sh = kd.shared(DT, 2 * BK * DP)   # two slots of BK x DP: K tile j in slot j % 2
    v_sh = kd.shared(DT, 2 * BK * DVP)  # two slots of BK x DVP: V tile j in slot j % 2

    i_min, kv_end = key_range(r0, BQ, rows, Sq, Skv, causal)
    scale2 = scale * LOG2E
    fetch_rows(q_sh, 0, -GROUP_ROWS, q, b, hk, r0, rows, G, Sq, BQ, D, DP, VEC, True, SW)
    fetch_kv(k_sh, 0, -BK, k, b, hk, 0, kv_end, BK, D, DP, VEC, SW)
    kd.async_commit()
    fetch_kv(k_sh, BK * DP, -BK, k, b, hk, BK, kv_end, BK, D, DP, VEC, SW)
    fetch_kv(v_sh, 0, -BK, v, b, hk, 0, kv_end, BK, DV, DVP, VEC, SW)
    kd.async_commit()

    s = kd.group_fragment_acc(GROUP_ROWS, BK)
    pa = kd.group_fragment_a(DT, GROUP_ROWS, BK)
    o = kd.group_fragment_acc(GROUP_ROWS, DVP)
    kd.fill_fragment(o, 0.0)
    NS = kd.fragment_row_slots(s)
    NE = kd.fragment_len(s)
    NO = kd.fragment_len(o)
    q_tile = kd.shared_tile(q_sh, grp * (GROUP_ROWS * DP), GROUP_ROWS, DP, swizzle=SW)

    m = ()  # per row slot: the running max and sum
    l = ()
    for n in kd.unroll(NS):
        m = m + (-kd.inf,)
        l = l + (kd.f32(0),)

    # S of tile 0 (Q and K tile 0 are the first copy group)
    kd.async_wait(1)
    kd.sync_cube()
    kd.group_mma(s, q_tile, kd.shared_tile(k_sh, 0, DP, BK, transposed=True, swizzle=SW), accumulate=False)
    kd.group_wait(0)

    # Tile j: S_j is in s; O += P_{j-1}·V_{j-1} may still run (it overlaps this softmax)
    for j0 in range(0, kv_end, BK):
        jt = j0 // BK
        interior = False
        if not (HAS_MASK or HAS_BIAS or SOFTCAP):
            interior = (j0 + BK <= Skv) & ((causal == 0) | (j0 + BK - 1 <= i_min + off))
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
                qrows = qrows + (query_row(r0 + prow + slot_row(s, sl), rows, Sq, hk, G, causal, off, Skv),)
            for i in kd.unroll(NE):
                h, iq, lim = qrows[kd.fragment_row_slot(s, i)]
                ctx = (mask, bias, b, h, iq, lim, Skv, softcap, LOG2E)
                j = j0 + kd.fragment_col(s, i)
                kd.fragment_set(s, i, logit2(kd.fragment_get(s, i) * scale, j, ctx, HAS_MASK, HAS_BIAS, SOFTCAP))

        # ---- row maxima; the running max moves only when a row's grows by more than TAU
        mts, rescale = tile_maxima(s, m, sc)
        alpha = ()  # O's rescale factors, applied once the previous P·V is done
        for sl in kd.unroll(NS):
            alpha = alpha + (kd.f32(1),)
        if rescale:
            a2 = ()
            m2 = ()
            l2 = ()
            for sl in kd.unroll(NS):
                mn = kd.max(m[sl], mts[sl])
                a = kd.exp2_fast(m[sl] - kd.select(mn == -kd.inf, kd.f32(0), mn))
                a2 = a2 + (a,)
                m2 = m2 + (mn,)
                l2 = l2 + (l[sl] * a,)
            alpha = a2
            m = m2
            l = l2

        # ---- P = exp2(logit - m) in place, the lane's part of each row sum
        l = exp_in_place(s, m, l, sc)

        # ---- the previous P·V is done: O rescaled, P rounded into the a fragment
        kd.group_wait(0)
        if rescale:
            for i in kd.unroll(NO):
                kd.fragment_set(o, i, kd.fragment_get(o, i) * alpha[kd.fragment_row_slot(o, i)])
        kd.fragment_convert(pa, s)

        # ---- K tile j+1 and V tile j are in for every unit, and every group is done with
        # K tile j and V tile j-1
        kd.async_wait(0)
        kd.sync_cube()

        # ---- S_{j+1} = Q·K_{j+1}ᵀ, then O += P_j·V_j left running into the next softmax;
        # meanwhile the free slots take K tile j+2 and V tile j+1
        if j0 + BK < kv_end:
            k_tile = kd.shared_tile(k_sh, ((jt + 1) % 2) * (BK * DP), DP, BK, transposed=True, swizzle=SW)
            kd.group_mma(s, q_tile, k_tile, accumulate=False)
        kd.group_mma(o, pa, kd.shared_tile(v_sh, (jt % 2) * (BK * DVP), BK, DVP, swizzle=SW))
        fetch_kv(k_sh, (jt % 2) * (BK * DP), -BK, k, b, hk, j0 + 2 * BK, kv_end, BK, D, DP, VEC, SW)
        fetch_kv(v_sh, ((jt + 1) % 2) * (BK * DVP), -BK, v, b, hk, j0 + BK, kv_end, BK, DV, DVP, VEC, SW)
        kd.async_commit()
        kd.group_wait(1)
    kd.group_wait(0)
    kd.async_wait(0)

    # ---- out = O / l (rows with no visible key: zeros)
    store_normalised(out, o, s, l, b, r0 + prow, rows, Sq, hk, G, causal, off, Skv, DV)


def fits(p, tiling) -> bool:
    """Whether this kernel can run p with `tiling`: whole groups of 4 planes, one 16-row
    tile a plane (seq_q = 1), head dims within MAX_DIM, and (where the primitive is
    emulated) keys a step and padded Dv that the row rules can split over a plane's lanes."""
    caps = p.runtime.capabilities
    P = caps.plane_dim
    bk = 16 * key_tiles(tiling)
    dvp = (p.Dv + 15) // 16 * 16
    lanes_ok = caps.mma_native or all(n % P == 0 or P % n == 0 for n in (bk, dvp))
    return tiling.num_planes % 4 == 0 and tiling.seq_q == 1 and max(p.D, p.Dv) <= MAX_DIM and bk <= 256 and lanes_ok


def shared_bytes(p, tiling) -> int:
    """Shared memory the kernel declares for problem p and this tiling."""
    bq = 16 * tiling.num_planes
    bk = 16 * key_tiles(tiling)
    dp, dvp = (p.D + 15) // 16 * 16, (p.Dv + 15) // 16 * 16
    return p.dtype.itemsize * (bq * dp + 2 * bk * (dp + dvp))


def run(p, out, dummy_mask, dummy_bias, tiling, vec: bool) -> None:
    """Launch for a validated problem (flash_mma.check first, fits(p, tiling) true)."""
    units = tiling.num_planes * p.runtime.capabilities.plane_dim
    bq = 16 * tiling.num_planes
    rows = p.group * p.Sq
    grid = ((rows + bq - 1) // bq, p.B * p.Hkv)
    flash_group_kernel[grid, units](
        p.q, p.k, p.v, out, p.mask if p.mask is not None else dummy_mask,
        p.bias if p.bias is not None else dummy_bias, p.scale, p.softcap or 1.0, int(p.causal), p.D, p.Dv,
        16 * key_tiles(tiling), p.mask is not None, p.bias is not None, p.softcap is not None, vec)
