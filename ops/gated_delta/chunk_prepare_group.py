"""Per-chunk preparation of the chunked gated delta rule on group products (`kd.group_mma`),
the operands of chunk_state_group.py; one cube (one group of 4 planes) per (chunk,
batch·head), all chunks at once. The chunk's k and v come by bulk copies into shared memory
(in the group layout, zeros past the padded inputs' end never needed: q, k, v are padded to
whole chunks), and with G the chunk's cumulative decay (G_L its last):

    A = strictly lower part of β_i·e^(G_i − G_j)·(k·kᵀ)     (one 64×64 group product, F32)
    Tm = (I + A)⁻¹                                         (blocks of 16: invert_diagonal_blocks,
                                                            invert_block_rows; in A's storage)
    wn = −(Tm·diag(β·e^G))·k,  u = (Tm·diag(β))·v          (two group products whose left
                                                            operand is in registers)
    kd = e^(G_L − G)·k

It is chunk_prepare_mma.py without q (the output kernel makes the intra-chunk attention
itself) and with every product a single group product instead of 16×16 fragments loaded
from global memory by each plane; wn and u are staged in the places of k and v and written
by bulk stores (a group accumulator's elements stored one by one would be 2-byte stores
eight rows wide). The kernel is latency-bound (little work, every phase waits on the one
before), so its shared memory decides how many cubes overlap: k, v and one F32 C×C matrix
(55 KB for K = V = 128, 1 KB-aligned arrays included) let four cubes share an H200
multiprocessor; with A and its inverse apart and the scaled inverse staged as a 16-bit
shared operand it was 78 KB, two cubes.
"""
from __future__ import annotations

import kerneldsl as kd

from .chunk_prepare_mma import chunk_decays


def stride(C: int) -> int:
    """Row stride of the shared F32 matrix M: C + 4 words, so that a group fragment's
    elements (eight rows, four column pairs a warp instruction) fall on at most two
    elements a bank either way round (row-major or transposed), where a stride of C put
    eight rows on one bank; the column-per-unit substitution stays conflict-free."""
    return C + 4


@kd.func
def invert_diagonal_blocks(M, C):
    """The first half of the in-place inversion (invert_block_rows has the layout): each
    16×16 diagonal block of (I + A)⁻¹ by forward substitution, one column a unit, units
    0..C−1, with the column in registers (the loops unrolled: the loads of A do not wait on
    the chain, which is 120 fused multiply-adds, and no value goes through shared memory
    between rows), written transposed into the block's upper half. No barrier."""
    S = stride(C)
    for c in range(kd.unit_pos(), C, kd.cube_units()):
        b0 = c // 16 * 16
        lc = c - b0
        t = ()
        for i in kd.unroll(16):
            x = kd.select(i == lc, kd.f32(1), kd.f32(0))
            for j in kd.unroll(i):
                x -= M[(b0 + i) * S + b0 + j] * t[j]
            t = t + (x,)
            if i > lc:
                M[c * S + b0 + i] = x


@kd.func
def invert_block_rows(M, C):
    """(I + A)⁻¹ in A's own storage, after invert_diagonal_blocks and a cube barrier: M (F32,
    C rows of stride(C), shared) held A strictly lower (zeros above); on exit the inverse Tm
    (unit lower) is there as Tm_ic at M[i, c] for blocks below the diagonal and as Tm_ic at
    M[c, i] (transposed, in the upper half of the block) inside each 16×16 diagonal block.
    Block row by block row: X = A_(row, <r0)·Tm in the unused blocks above the diagonal of
    rows 0..15 (columns 16..C), then Tm_(row, <r0) = −Tm_ii·X over A's consumed entries,
    every element of a block row at once with its sums unrolled 16 terms at a time. One
    matrix instead of A and Tf: 16 KB of shared memory less. Ends with a cube barrier."""
    S = stride(C)
    me = kd.unit_pos()
    NU = kd.cube_units()
    for bi in kd.unroll(1, C // 16):
        r0 = bi * 16
        for e in range(me, 16 * r0, NU):
            r = e // r0
            c = e % r0
            cb = c // 16 * 16
            lc = c - cb
            row = (r0 + r) * S
            x = kd.f32(0)
            for m in kd.unroll(16):  # c's own diagonal block: Tm stored transposed, 0 above c
                tm = kd.select(m == lc, kd.f32(1), kd.select(m > lc, M[c * S + cb + m], kd.f32(0)))
                x += M[row + cb + m] * tm
            for mb in range(cb + 16, r0, 16):  # the blocks below it: Tm stored as is
                for m in kd.unroll(16):
                    x += M[row + mb + m] * M[(mb + m) * S + c]
            M[r * S + 16 + c] = x
        kd.sync_cube()
        for e in range(me, 16 * r0, NU):
            r = e // r0
            c = e % r0
            x = -M[r * S + 16 + c]
            for m in kd.unroll(15):
                x -= kd.select(m < r, M[(r0 + m) * S + r0 + r], kd.f32(0)) * M[m * S + 16 + c]
            M[(r0 + r) * S + c] = x
        kd.sync_cube()


@kd.func
def store_kd(kdk, Ks, EL, row_p, first, step, C, K, SW):
    """kd = e^(G_L − G)·k from the staged k, rows row_p.., elements first, first + step, ..
    (element by element: coalesced rows of two-byte stores)."""
    for e in range(first, C * K, step):
        i = e // K
        col = e % K
        kdk[row_p + i, col] = EL[i] * kd.f32(Ks[kd.tile_offset(i, col, C, swizzle=SW)])


@kd.func
def scaled_inverse(pa, ts, M, scale, C):
    """pa (the group's A operand in registers, rounded) = Tm·diag(scale), Tm as
    invert_block_rows leaves it in M; ts is a C×C group accumulator used for the F32 values."""
    S = stride(C)
    for e in kd.unroll(kd.fragment_len(ts)):
        i = kd.fragment_row(ts, e)
        c = kd.fragment_col(ts, e)
        t = kd.select(c // 16 < i // 16, M[i * S + c],
                      kd.select(c < i, M[c * S + i], kd.select(c == i, kd.f32(1), kd.f32(0))))
        kd.fragment_set(ts, e, t * scale[c])
    kd.fragment_convert(pa, ts)


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
    M = kd.shared(kd.f32, C * stride(C))  # A, then (I + A)⁻¹ (invert_block_rows)
    full = kd.arrival_barriers(1)
    if me == 0:  # k and v on their way while the decays are made (one unit sets up and arms the barrier)
        kd.barrier_init(full, 0, 1)
        kd.barrier_expect(full, 0, (C * K + C * V) * 2)
        kd.bulk_copy(Ks, 0, k, row_p, 0, C, K, full, 0, swizzle=SW)
        kd.bulk_copy(Vs, 0, v, row_p, 0, C, V, full, 0, swizzle=SWV)
    chunk_decays(G, Bt, BE, EG, EL, M, gc, g, beta, row_t, kd.i64(row_p), t0, T, C)  # orders the init; M after
    kd.barrier_wait(full, 0, 0)
    s = kd.group_fragment_acc(C, C)
    kt = kd.shared_tile(Ks, 0, C, K, swizzle=SW)
    kd.group_mma(s, kt, kd.shared_tile(Ks, 0, K, C, transposed=True, swizzle=SW), accumulate=False)
    kd.group_wait(0)
    S = stride(C)
    for e in kd.unroll(kd.fragment_len(s)):
        i = kd.fragment_row(s, e)
        c = kd.fragment_col(s, e)
        M[i * S + c] = kd.select(c < i, Bt[i] * kd.exp(G[i] - G[kd.min(c, i)]) * kd.fragment_get(s, e), 0.0)
    kd.sync_cube()
    if NU >= 2 * C:  # the units past the diagonal blocks' columns store kd meanwhile
        if me < C:
            invert_diagonal_blocks(M, C)
        else:
            store_kd(kdk, Ks, EL, row_p, me - C, NU - C, C, K, SW)
    else:
        store_kd(kdk, Ks, EL, row_p, me, NU, C, K, SW)
        invert_diagonal_blocks(M, C)
    kd.sync_cube()
    invert_block_rows(M, C)
    pa = kd.group_fragment_a(k.dtype, C, C)
    scaled_inverse(pa, s, M, BE, C)
    w = kd.group_fragment_acc(C, K)
    kd.group_mma(w, pa, kt, accumulate=False)
    kd.group_wait(0)
    kd.sync_cube()  # every plane's product read k: free
    for e in kd.unroll(kd.fragment_len(w)):  # −w staged in k's place, stored whole below
        Ks[kd.tile_offset(kd.fragment_row(w, e), kd.fragment_col(w, e), C, swizzle=SW)] = -kd.fragment_get(w, e)
    scaled_inverse(pa, s, M, Bt, C)
    ua = kd.group_fragment_acc(C, V)
    kd.group_mma(ua, pa, kd.shared_tile(Vs, 0, C, V, swizzle=SWV), accumulate=False)
    kd.sync_cube()  # orders the staged −w
    if me == 0:
        kd.bulk_store(wn, row_p, 0, Ks, 0, C, K, swizzle=SW)
    kd.group_wait(0)
    kd.sync_cube()  # every plane's product read v
    for e in kd.unroll(kd.fragment_len(ua)):
        Vs[kd.tile_offset(kd.fragment_row(ua, e), kd.fragment_col(ua, e), C, swizzle=SWV)] = kd.fragment_get(ua, e)
    kd.sync_cube()
    if me == 0:
        kd.bulk_store(u, row_p, 0, Vs, 0, C, V, swizzle=SWV)
        kd.bulk_store_wait()
