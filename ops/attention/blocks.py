"""Device functions shared by the fused matrix-primitive kernels (flash_mma, flash_regs,
flash_group): which KV head and query rows a cube owns, and copying tiles of rows into
shared memory, row-major with a padded stride or in the layout of `kd.tile_offset`
(the operands of `kd.group_mma`)."""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def cube_block(q, k, BQ):
    """(b, hk, G, Sq, Skv, rows, r0) of this cube: batch b and KV head hk from the y
    position; G query heads per KV head; the cube's first row r0 of the flattened
    [G heads x Sq] query rows (rows of them in all). Cubes take the query blocks last to
    first, so under a causal mask the longest ones start first and the last wave is short."""
    Hkv = k.shape[1]
    G = q.shape[1] // Hkv
    Sq = q.shape[2]
    return (kd.cube_pos_y() // Hkv, kd.cube_pos_y() % Hkv, G, Sq, k.shape[2], G * Sq,
            (kd.cube_count_x() - 1 - kd.cube_pos_x()) * BQ)


@kd.func
def key_range(r0, NR, rows, Sq, Skv, causal):
    """(i_min, kv_end) for a cube owning flattened query rows r0 .. r0 + NR - 1 (of rows):
    every row of it sees at least keys 0 .. i_min + Skv - Sq (i_min: the first row's
    position when the block lies in one head, else 0), and none sees a key at or past
    kv_end (Skv, or under causal one past the last row's last visible key)."""
    r_last = kd.min(r0 + NR, rows) - 1
    one_head = r0 // Sq == r_last // Sq
    i_max = kd.select(one_head, r_last % Sq, Sq - 1)
    i_min = kd.select(one_head, r0 % Sq, 0)
    kv_end = Skv
    if causal != 0:
        kv_end = kd.max(kd.min(i_max + Skv - Sq + 1, Skv), 0)
    return (i_min, kv_end)


@kd.func
def row_base(src, b, h, rg, G, Sq, QROWS):
    """Element offset of row rg of the block: src[b, h, rg] (K/V rows), or for query rows
    (QROWS) src[b, h*G + rg // Sq, rg % Sq], rg counting the flattened [G x Sq] rows."""
    off = kd.i64(b) * src.stride(0) + kd.i64(h) * src.stride(1) + kd.i64(rg) * src.stride(2)
    if QROWS:
        off = (kd.i64(b) * src.stride(0) + kd.i64(h * G + rg // Sq) * src.stride(1)
               + kd.i64(rg % Sq) * src.stride(2))
    return off


@kd.func
def slot(at, r, c, DS, DIMP, SW):
    """Shared offset of element (r, c) of a staged tile at `at`: row-major with row stride
    DS (compile-time, > 0), or (DS = -TR) tiles of TR rows one after another, each TR x DIMP
    tile in the group primitive's layout of swizzle span SW (kd.tile_offset)."""
    if DS > 0:
        o = at + r * DS + c
    else:
        o = at + (r // -DS) * (-DS * DIMP) + kd.tile_offset(r % -DS, c, -DS, swizzle=SW)
    return o


@kd.func
def fetch_rows(dst, at, DS, src, b, h, r0, nvalid, G, Sq, NR, DIM, DIMP, VEC, QROWS, SW):
    """dst[slot(at, r, c, DS, DIMP, SW)] = row r0 + r of the block (see row_base), columns 0..DIMP, zero
    past nvalid rows and past DIM (rows are clamped into [0, nvalid) for the addresses, so
    nothing outside the tensor is read even when nvalid is 0). VEC: 16-byte `kd.async_copy`s (rows 8-aligned, unit inner
    stride; the caller commits and waits); else element by element, done on return."""
    U = kd.cube_units()
    if VEC:
        NV = DIMP // 8
        for e0 in range(0, NR * NV, U):
            e = e0 + kd.unit_pos_x()
            r = e // NV
            c = (e % NV) * 8
            if e < NR * NV:
                base = row_base(src, b, h, kd.max(kd.min(r0 + r, nvalid - 1), 0), G, Sq, QROWS)
                kd.async_copy(dst, slot(at, r, c, DS, DIMP, SW), src, base + kd.min(c, DIM - 8), 8,
                              (r0 + r < nvalid) & (c < DIM))
    else:
        for e0 in range(0, NR * DIMP, U):
            e = e0 + kd.unit_pos_x()
            r = e // DIMP
            d = e % DIMP
            base = row_base(src, b, h, kd.max(kd.min(r0 + r, nvalid - 1), 0), G, Sq, QROWS)
            x = kd.f32(src[base + kd.i64(kd.min(d, DIM - 1)) * src.stride(3)])
            if e < NR * DIMP:
                dst[slot(at, r, d, DS, DIMP, SW)] = kd.select((r0 + r < nvalid) & (d < DIM), x, kd.f32(0))


@kd.func
def fetch_kv(dst, at, DS, src, b, h, r0, nvalid, NR, DIM, DIMP, VEC, SW):
    """fetch_rows for K/V rows r0 .. r0+NR of head (b, h). When the cube's units split the
    tile evenly (VEC, NV = DIMP/8 chunks a row dividing the unit count, which divides the
    chunk count), each unit copies one column chunk of every (units/NV)-th row: one address
    and a fixed row stride, no per-chunk division, clamping or unit test (rows past nvalid
    copy nothing, which zero-fills; in kd.tile_offset's layout (DS < 0) the unit's rows are
    RS band widths apart when RS is a multiple of 8). Otherwise fetch_rows."""
    U = kd.cube_units()
    NV = DIMP // 8
    if VEC and U % NV == 0 and (NR * NV) % U == 0 and (DS > 0 or (DS == -NR and (U // NV) % 8 == 0)):
        RS = U // NV
        r = kd.unit_pos_x() // NV
        c = (kd.unit_pos_x() % NV) * 8
        step = kd.i64(RS) * src.stride(2)
        p = row_base(src, b, h, r0 + r, 1, 1, False) + kd.i64(kd.min(c, DIM - 8))
        d = slot(at, r, c, DS, DIMP, SW)
        ROWSTEP = RS * DS if DS > 0 else RS * (SW // 2)  # shared elements between this unit's rows
        left = nvalid - (r0 + r)  # rows of this unit's column left to copy, from its first
        for i in kd.unroll(NR // RS):
            kd.async_copy(dst, d + i * ROWSTEP, src, p, 8, (i * RS < left) & (c < DIM))
            p = p + step
    else:
        fetch_rows(dst, at, DS, src, b, h, r0, nvalid, 1, 1, NR, DIM, DIMP, VEC, False, SW)

