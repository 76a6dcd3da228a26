"""A persistent form of the channels-last forward on group products (issue 17, for the H200
sweep; not chosen by default): the grid is about one wave of cubes, each looping over the
BM-row tiles cube_pos_x, + cube_count_x, ... of its (Cout tile, group), with ONE pipeline of
reduction steps flattened across its tiles.

The ring, the copies and the products are implicit_gemm_group's (same helpers, same tile
layouts, same GROUPS / MI / BN / STAGES / INFLIGHT); only the step counter runs on across
tiles: the copies of the last AHEAD steps of a tile fetch the first AHEAD steps of the cube's
next tile (the per-row state of the next tile is worked out with the current one), so the
ring never drains between tiles, and the epilogue's stores run while the next tile's copies
are in flight. Why a refilled slot is free is the argument of implicit_gemm_group with global
step numbers (a tile's last step waits for every product, which only strengthens it).
This needs a tile's reduction to have at least AHEAD steps (`fits`): a fetch looks at most one
tile ahead. With `stationary` (WSTAT = the reduction's steps) the weights of the cube's
(Cout tile, group) are copied into shared memory once, before its first tile (64@56: 9 steps
of 64 x 64, 72 KiB), and the ring carries A only: no weight re-reads a tile.
"""
from __future__ import annotations

import kerneldsl as kd

from .gather import forward_sizes
from .implicit_gemm_group import BK, CHUNKS, SW, a_rows, b_rows, block_m, fetch_step, next_slot, store_tile, tile_shape
from . import implicit_gemm_group


@kd.kernel
def conv_gemm_group_persistent(x: kd.Tensor, w: kd.Tensor, y: kd.Tensor, bias: kd.Tensor,
                               HAS_BIAS: kd.Const[bool], DT: kd.Const[object], G: kd.Const[tuple],
                               BN: kd.Const[int], STAGES: kd.Const[int], INFLIGHT: kd.Const[int],
                               GROUPS: kd.Const[int], MI: kd.Const[int], WSTAT: kd.Const[int],
                               PAIRS: kd.Const[bool]):
    """implicit_gemm_group.conv_gemm_group's result, each cube looping over row tiles. WSTAT > 0:
    the weights stay: all WSTAT (= the reduction's steps) B tiles are copied once, before the
    first tile, and the ring streams A only; WSTAT 0: B streams with A."""
    kd.static_assert(kd.cube_units() == 4 * GROUPS * kd.PLANE_DIM, "launch with 4 planes per group")
    kd.static_assert(INFLIGHT == 0 or INFLIGHT == 1, "INFLIGHT: 0 or 1 steps of products left running")
    kd.static_assert(STAGES >= 2 + INFLIGHT, "the ring needs STAGES - 1 - INFLIGHT >= 1 steps ahead")
    BM = 64 * GROUPS * MI
    U = kd.cube_units()
    RS = U // CHUNKS
    kd.static_assert(RS % 8 == 0 and BM % RS == 0 and BN % RS == 0, "units must split the tiles by whole 8-row blocks")
    NR = BM // RS
    NRB = BN // RS
    AHEAD = STAGES - 1 - INFLIGHT
    A_STAGE = BM * BK
    B_STAGE = BN * BK

    OH, OW, P, Mg, Cg, Kg, R = forward_sizes(x, w, y, G)
    KT = (R + BK - 1) // BK           # at least AHEAD (fits)
    MT = (Mg + BM - 1) // BM
    g = kd.cube_pos_z()
    n0 = kd.cube_pos_y() * BN
    grp = kd.plane_pos() // 4
    t = kd.unit_pos()
    row = t // CHUNKS
    col = t % CHUNKS * 8
    brows = b_rows(n0, row, RS, NRB, Kg, g, w)
    adst = kd.tile_offset(row, col, BM, swizzle=SW)
    bdst = kd.tile_offset(row, col, BN, swizzle=SW)

    sa = kd.shared(DT, STAGES * A_STAGE)
    sb = kd.shared(DT, (WSTAT if WSTAT > 0 else STAGES) * B_STAGE)
    NRS = 0 if WSTAT > 0 else NRB          # B rows a unit copies with each step's A
    for s in kd.unroll(WSTAT):              # (their commit groups precede the ring's: waited for with step 0's)
        fetch_step(sa, sb, x, w, 0, s * B_STAGE + bdst, (), brows, s, col, R, g, Cg, RS, 0, NRB, G)
    accs = ()
    for f in kd.unroll(MI):
        acc = kd.group_fragment_acc(64, BN)
        kd.fill_fragment(acc, 0.0)
        accs = accs + (acc,)

    tile = kd.cube_pos_x()
    first = a_rows(x, tile * BM, row, RS, NR, Mg, P, OH, OW, G)
    for s in kd.unroll(AHEAD):
        fetch_step(sa, sb, x, w, s * A_STAGE + adst, s * B_STAGE + bdst, first, brows, s, col, R, g, Cg,
                   RS, NR, NRS, G)
    rs = 0
    ws = AHEAD
    while tile < MT:
        m0 = tile * BM
        nt = tile + kd.cube_count_x()
        cur = a_rows(x, m0, row, RS, NR, Mg, P, OH, OW, G)
        nxt = a_rows(x, nt * BM, row, RS, NR, Mg, P, OH, OW, G)   # past the matrix after the last tile: zeros
        for kt in range(KT):
            kd.async_wait(AHEAD - 1)
            kd.sync_cube()
            for f in kd.unroll(MI):
                kd.group_mma(accs[f], kd.shared_tile(sa, rs * A_STAGE + (grp * MI + f) * (64 * BK), 64, BK, swizzle=SW),
                             kd.shared_tile(sb, (kt if WSTAT > 0 else rs) * B_STAGE, BK, BN, transposed=True,
                                            swizzle=SW))
            ahead = kt + AHEAD
            wrap = ahead >= KT             # the step belongs to the cube's next tile
            rows = ()
            for i in kd.unroll(NR):
                cl, cb, cz, cy, cx = cur[i]
                nl, nb, nz, ny, nx = nxt[i]
                rows = rows + ((kd.select(wrap, nl, cl), kd.select(wrap, nb, cb), kd.select(wrap, nz, cz),
                                kd.select(wrap, ny, cy), kd.select(wrap, nx, cx)),)
            fetch_step(sa, sb, x, w, ws * A_STAGE + adst, ws * B_STAGE + bdst, rows, brows,
                       kd.select(wrap, ahead - KT, ahead), col, R, g, Cg, RS, NR, NRS, G)
            kd.group_wait(INFLIGHT * MI)
            rs = next_slot(rs, STAGES)
            ws = next_slot(ws, STAGES)
        kd.group_wait(0)
        for f in kd.unroll(MI):
            store_tile(y, bias, HAS_BIAS, PAIRS, accs[f], m0 + (grp * MI + f) * 64, n0, g, Mg, Kg, P, OH, OW)
            kd.fill_fragment(accs[f], 0.0)
        tile = nt
    kd.async_wait(0)


def steps(p) -> int:
    """Reduction steps of BK columns a tile."""
    return (p.geo.taps * p.geo.Cg + BK - 1) // BK


def fits(p, bn: int, stages: int, inflight: int, groups: int = 2, mi: int = 1, stationary: bool = False) -> bool:
    """implicit_gemm_group.fits (with a B ring, or all the reduction's B tiles where the
    weights stay), and a tile's reduction has at least AHEAD steps."""
    ahead = stages - 1 - inflight
    if not implicit_gemm_group.fits(p, bn, stages if not stationary else 2, groups, mi):
        return False
    if stationary:
        smem = (stages * block_m(groups, mi) + steps(p) * bn) * BK * 2
        if smem > p.runtime.capabilities.max_shared_bytes:
            return False
    return steps(p) >= ahead


def run_forward(p, y5, dummy, bn: int | None = None, stages: int | None = None, inflight: int | None = None,
                groups: int = 2, mi: int = 1, per_unit: int = 2, stationary: bool = False,
                pairs: bool = False) -> None:
    """y5 = the forward pass of p (fits(...) must hold), persistent: per_unit cubes a compute
    unit (an SM) in all, at most one a row tile (a device with no compute-unit count: one
    cube a row tile); `stationary`: the weights copied once a cube; `pairs`: as in
    implicit_gemm_group.run_forward."""
    g = p.geo
    BN, S, L = tile_shape(p.runtime.capabilities, g.Kg)
    BN, S, L = bn or BN, stages or S, L if inflight is None else inflight
    bm = block_m(groups, mi)
    mt = (g.B * g.pixels + bm - 1) // bm
    nt = (g.Kg + BN - 1) // BN
    cu = p.runtime.capabilities.compute_units
    gx = mt if cu <= 0 else max(1, min(mt, -(-per_unit * cu // (nt * g.groups))))
    launch(p, y5, dummy, BN, S, L, groups, mi, gx, stationary, pairs)


def launch(p, y5, dummy, bn: int, stages: int, inflight: int, groups: int, mi: int, cubes: int,
           stationary: bool = False, pairs: bool = False) -> None:
    """The persistent kernel with `cubes` cubes a (Cout tile, group) (tests force a few)."""
    g = p.geo
    bias = p.bias if p.bias is not None else dummy
    conv_gemm_group_persistent[(cubes, (g.Kg + bn - 1) // bn, g.groups), 4 * groups * p.runtime.plane_dim](
        p.x, p.w, y5, bias, p.bias is not None, p.dtype, g.consts(), bn, stages, inflight, groups, mi,
        steps(p) if stationary else 0, pairs and implicit_gemm_group.pairs_fit(p, y5))
