"""Per-chunk preparation of the chunked gated delta rule on group products (`kd.group_mma`),
the operands of chunk_state_group.py; one cube (one group of 4 planes) per (chunk,
batch·head), all chunks at once. The chunk's k and v come by bulk copies into shared memory
(in the group layout, zeros past the padded inputs' end never needed: q, k, v are padded to
whole chunks), and with G the chunk's cumulative decay (G_L its last):

    A = strictly lower part of β_i·e^(G_i − G_j)·(k·kᵀ)     (one 64×64 group product, F32)
    Tm = (I + A)⁻¹                                         (invert_unit_lower: blocks of 16)
    wn = −(Tm·diag(β·e^G))·k,  u = (Tm·diag(β))·v          (two group products, one after
                                                            the other from one shared operand)
    kd = e^(G_L − G)·k

It is chunk_prepare_mma.py without q (the output kernel makes the intra-chunk attention
itself) and with every product a single group product from shared memory instead of
16×16 fragments loaded from global memory by each plane; wn and u are staged in the
places of k and v and written by bulk stores (a group accumulator's elements stored one by
one would be 2-byte stores eight rows wide). Its shared arrays (73 KB for
K = V = 128) let three cubes share an H200 multiprocessor.
"""
from __future__ import annotations

import kerneldsl as kd

from .chunk_prepare_mma import chunk_decays, invert_unit_lower


@kd.func
def scaled_inverse(TM, Tf, scale, C):
    """TM (16-bit, group layout) = the lower part of Tf times diag(scale); ends with a cube barrier."""
    for e in range(kd.unit_pos_x(), C * C, kd.cube_units()):
        i = e // C
        c = e % C
        TM[kd.tile_offset(i, c, C)] = kd.select(c <= i, Tf[e], kd.f32(0)) * scale[c]
    kd.sync_cube()


@kd.kernel
def chunk_prepare_group(k: kd.Tensor[None, 2], v: kd.Tensor[None, 2], beta: kd.Tensor, g: kd.Tensor[kd.f32],
                        gc: kd.Tensor[kd.f32], wn: kd.Tensor[None, 2], u: kd.Tensor[None, 2],
                        kdk: kd.Tensor[None, 2], T: kd.i32, K: kd.Const[int], V: kd.Const[int], C: kd.Const[int],
                        SW: kd.Const[int], SWV: kd.Const[int]):
    """gc, wn, u, kdk of one chunk of one row bh; k, v [B·H·Tp, K | V] padded, beta and g
    [B·H, T] (a one-dimensional grid of (bh, chunk))."""
    kd.static_assert(kd.cube_units() == 4 * kd.PLANE_DIM, "launch one group (4 planes) a cube")
    kd.static_assert(C == 64, "the chunk is one 64-row group accumulator")
    NU = kd.cube_units()
    me = kd.unit_pos_x()
    chunks = (T + C - 1) // C
    bh = kd.cube_pos_x() // chunks
    t0 = kd.cube_pos_x() % chunks * C
    Tp = chunks * C
    row_t = kd.i64(bh) * T
    row_p = bh * Tp + t0
    Ks = kd.shared(k.dtype, C * K)
    Vs = kd.shared(k.dtype, C * V)
    G = kd.shared(kd.f32, C)
    Bt = kd.shared(kd.f32, C)
    BE = kd.shared(kd.f32, C)
    EG = kd.shared(kd.f32, C)
    EL = kd.shared(kd.f32, C)
    A = kd.shared(kd.f32, C * C)
    Tf = kd.shared(kd.f32, C * C)
    TM = kd.shared(k.dtype, C * C)  # Tm·diag(β·e^G), then Tm·diag(β): group layout
    full = kd.arrival_barriers(1)
    if me == 0:
        kd.barrier_init(full, 0, 1)
    chunk_decays(G, Bt, BE, EG, EL, gc, g, beta, row_t, kd.i64(row_p), t0, T, C)  # its barriers order the init
    if me == 0:
        kd.barrier_expect(full, 0, (C * K + C * V) * 2)
        kd.bulk_copy(Ks, 0, k, row_p, 0, C, K, full, 0, swizzle=SW)
        kd.bulk_copy(Vs, 0, v, row_p, 0, C, V, full, 0, swizzle=SWV)
    kd.barrier_wait(full, 0, 0)
    s = kd.group_fragment_acc(C, C)
    kt = kd.shared_tile(Ks, 0, C, K, swizzle=SW)
    kd.group_mma(s, kt, kd.shared_tile(Ks, 0, K, C, transposed=True, swizzle=SW), accumulate=False)
    for e in range(me, C * K, NU):
        i = e // K
        col = e % K
        kdk[row_p + i, col] = EL[i] * kd.f32(Ks[kd.tile_offset(i, col, C, swizzle=SW)])
    kd.group_wait(0)
    for e in kd.unroll(kd.fragment_len(s)):
        i = kd.fragment_row(s, e)
        c = kd.fragment_col(s, e)
        A[i * C + c] = kd.select(c < i, Bt[i] * kd.exp(G[i] - G[kd.min(c, i)]) * kd.fragment_get(s, e), 0.0)
    kd.sync_cube()
    invert_unit_lower(A, Tf, None, C)
    scaled_inverse(TM, Tf, BE, C)
    w = kd.group_fragment_acc(C, K)
    kd.group_mma(w, kd.shared_tile(TM, 0, C, C), kt, accumulate=False)
    kd.group_wait(0)
    kd.sync_cube()  # every plane's product read TM and k: both free
    for e in kd.unroll(kd.fragment_len(w)):  # −w staged in k's place, stored whole below
        Ks[kd.tile_offset(kd.fragment_row(w, e), kd.fragment_col(w, e), C, swizzle=SW)] = -kd.fragment_get(w, e)
    scaled_inverse(TM, Tf, Bt, C)  # (its barrier also orders the staged −w)
    if me == 0:
        kd.bulk_store(wn, row_p, 0, Ks, 0, C, K, swizzle=SW)
    ua = kd.group_fragment_acc(C, V)
    kd.group_mma(ua, kd.shared_tile(TM, 0, C, C), kd.shared_tile(Vs, 0, C, V, swizzle=SWV), accumulate=False)
    kd.group_wait(0)
    kd.sync_cube()  # every plane's product read v
    for e in kd.unroll(kd.fragment_len(ua)):
        Vs[kd.tile_offset(kd.fragment_row(ua, e), kd.fragment_col(ua, e), C, swizzle=SWV)] = kd.fragment_get(ua, e)
    kd.sync_cube()
    if me == 0:
        kd.bulk_store(u, row_p, 0, Vs, 0, C, V, swizzle=SWV)
        kd.bulk_store_wait()
