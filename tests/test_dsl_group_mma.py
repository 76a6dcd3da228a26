"""The group matrix primitive (`kd.group_fragment_acc/a`, `kd.shared_tile`, `kd.tile_offset`,
`kd.group_mma`, `kd.group_wait`): products of tiles in the core-matrix layout against numpy,
every operand orientation, an acc converted to the next product's A (attention's P·V), the
element rules (row/col, row slots, row lanes) on group fragments, and every error rule."""
import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import CompileError

pytestmark = [pytest.mark.feature("group mma"), pytest.mark.interpreter]

DTYPES = ["f16", "bf16"]


@kd.func
def stage(dst, at, src, base, rows: kd.Const[int], cols: kd.Const[int], transposed: kd.Const[bool],
          SW: kd.Const[int]):
    """Copy the row-major rows x cols matrix at src[base:] into dst[at:] in the core-matrix
    layout of swizzle span SW (of the matrix itself, or of its transpose)."""
    U = kd.cube_units()
    t = kd.unit_pos_x()
    for e0 in range(0, rows * cols, U):
        e = e0 + t
        if e < rows * cols:
            r = e // cols
            c = e % cols
            if transposed:
                dst[at + kd.tile_offset(c, r, cols, swizzle=SW)] = src[base + e]
            else:
                dst[at + kd.tile_offset(r, c, rows, swizzle=SW)] = src[base + e]


@kd.func
def write_acc(out, base, acc, cols: kd.Const[int]):
    """Every element of this lane's share of a group acc at its (row, col)."""
    for i in kd.unroll(kd.fragment_len(acc)):
        out[base + kd.fragment_row(acc, i) * cols + kd.fragment_col(acc, i)] = kd.fragment_get(acc, i)


@kd.kernel
def chained(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, s_out: kd.Tensor[kd.f32], o_out: kd.Tensor[kd.f32],
            D: kd.Const[int], N: kd.Const[int], DV: kd.Const[int], A_T: kd.Const[bool], SW: kd.Const[int]):
    """Per group g (64 rows of q): S = q_g · kᵀ (both operands from shared memory, q stored
    transposed when A_T; S's old value discarded), then O = 1 + round(S) · v with round(S)
    in registers (accumulated onto O's old value). Tiles in the layout of swizzle span SW."""
    DT = q.dtype
    G = kd.cube_units() // (4 * kd.PLANE_DIM)
    g = kd.plane_pos() // 4
    q_sh = kd.shared(DT, G * 64 * D)
    k_sh = kd.shared(DT, N * D)
    v_sh = kd.shared(DT, N * DV)
    for j in kd.unroll(G):
        stage(q_sh, j * 64 * D, q, j * 64 * D, 64, D, A_T, SW)
    stage(k_sh, 0, k, 0, N, D, False, SW)
    stage(v_sh, 0, v, 0, N, DV, False, SW)
    kd.sync_cube()
    s = kd.group_fragment_acc(64, N)
    kd.fill_fragment(s, 7.0)  # overwritten: accumulate=False
    kd.group_mma(s, kd.shared_tile(q_sh, g * 64 * D, 64, D, transposed=A_T, swizzle=SW),
                 kd.shared_tile(k_sh, 0, D, N, transposed=True, swizzle=SW), accumulate=False)
    kd.group_wait(0)
    write_acc(s_out, g * 64 * N, s, N)
    p = kd.group_fragment_a(DT, 64, N)
    kd.fragment_convert(p, s)
    o = kd.group_fragment_acc(64, DV)
    kd.fill_fragment(o, 1.0)
    kd.group_mma(o, p, kd.shared_tile(v_sh, 0, N, DV, swizzle=SW))
    kd.group_wait(0)
    write_acc(o_out, g * 64 * DV, o, DV)


def _round(x, dtype):
    return x.astype(kd.as_dtype(dtype).np).astype(np.float64)


def _skip_without(runtime, dtype):
    if kd.as_dtype(dtype) not in runtime.capabilities.mma_dtypes:
        pytest.skip(f"{runtime.name} has no {dtype} matrix primitive")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups,D,N,DV,a_t,sw", [(1, 16, 16, 16, False, 32), (2, 32, 48, 32, False, 32),
                                                  (1, 48, 32, 48, True, 32), (1, 128, 64, 64, False, 128),
                                                  (1, 64, 128, 64, True, 128)])
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_chained_products(runtime, rng, dtype, groups, D, N, DV, a_t, sw):
    """S = Q·Kᵀ from two shared tiles, then O = 1 + round(S)·V with round(S) converted in
    registers: the shapes of attention's two products, for one and two groups a cube, in
    the 32- and the 128-byte layouts (K of 128 crosses a 128-byte band)."""
    _skip_without(runtime, dtype)
    np_dt = kd.as_dtype(dtype).np
    q = rng.standard_normal((groups * 64, D)).astype(np_dt)
    k = rng.standard_normal((N, D)).astype(np_dt)
    v = rng.standard_normal((N, DV)).astype(np_dt)
    s_out = runtime.tensor(np.full(groups * 64 * N, np.nan, np.float32))
    o_out = runtime.tensor(np.full(groups * 64 * DV, np.nan, np.float32))
    chained[1, groups * 4 * runtime.plane_dim](runtime.tensor(q), runtime.tensor(k), runtime.tensor(v), s_out, o_out, D, N, DV,
                                               a_t, sw)
    s_ref = q.astype(np.float64) @ k.astype(np.float64).T
    np.testing.assert_allclose(s_out.numpy().reshape(groups * 64, N), s_ref, rtol=1e-5, atol=1e-4)
    o_ref = 1.0 + _round(s_out.numpy().reshape(groups * 64, N), dtype) @ v.astype(np.float64)
    np.testing.assert_allclose(o_out.numpy().reshape(groups * 64, DV), o_ref, rtol=1e-4, atol=1e-3)


@kd.kernel
def row_stats(a: kd.Tensor, b: kd.Tensor, rmax: kd.Tensor[kd.f32], slots: kd.Tensor[kd.i32], N: kd.Const[int]):
    """Row maxima of a·b (64 x 16 times 16 x N) from the group acc's row slots and row lanes;
    slots[row] counts the lanes x slots that claimed the row (each row exactly once a lane group)."""
    DT = a.dtype
    a_sh = kd.shared(DT, 64 * 16)
    b_sh = kd.shared(DT, 16 * N)
    stage(a_sh, 0, a, 0, 64, 16, False, 32)
    stage(b_sh, 0, b, 0, 16, N, True, 32)  # stored N x 16: N may be any multiple of 8
    kd.sync_cube()
    acc = kd.group_fragment_acc(64, N)
    kd.fill_fragment(acc, 0.0)
    kd.group_mma(acc, kd.shared_tile(a_sh, 0, 64, 16), kd.shared_tile(b_sh, 0, 16, N, transposed=True))
    kd.group_wait(0)
    masks = kd.fragment_row_lanes(acc)
    for s in kd.unroll(kd.fragment_row_slots(acc)):
        m = -kd.inf
        row = -1
        for i in kd.unroll(kd.fragment_len(acc)):
            if kd.fragment_row_slot(acc, i) == s:
                m = kd.max(m, kd.fragment_get(acc, i))
                row = kd.fragment_row(acc, i)
        for j in kd.unroll(len(masks)):
            m = kd.max(m, kd.plane_shuffle_xor(m, masks[j]))
        rmax[row] = m
        first = kd.lane_pos() == kd.lane_pos() & ~(sum_masks(masks))
        if first:
            kd.atomic_add(slots, row, 1)


@kd.func
def sum_masks(masks):
    """The lanes joined by the masks differ only in these bits."""
    t = 0
    for j in kd.unroll(len(masks)):
        t = t | masks[j]
    return t


@pytest.mark.parametrize("N", [8, 32, 64])
def test_group_element_rules(runtime, rng, N):
    """fragment_row_slot/row_slots/row_lanes on a group acc give numpy's row maxima, and the
    lanes a row spans claim it exactly once (every row of the 64 covered)."""
    _skip_without(runtime, "bf16")
    a = rng.standard_normal((64, 16)).astype(kd.bf16.np)
    b = rng.standard_normal((16, N)).astype(kd.bf16.np)
    rmax = runtime.tensor(np.full(64, np.nan, np.float32))
    slots = runtime.zeros(64, "i32")
    row_stats[1, 4 * runtime.plane_dim](runtime.tensor(a), runtime.tensor(b), rmax, slots, N)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).max(axis=1)
    np.testing.assert_allclose(rmax.numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(slots.numpy(), np.ones(64, np.int32))


@kd.kernel
def offsets(out: kd.Tensor[kd.i32], R: kd.Const[int], C: kd.Const[int], SW: kd.Const[int]):
    t = kd.unit_pos_x()
    for e0 in range(0, R * C, kd.cube_units()):
        e = e0 + t
        if e < R * C:
            out[e] = kd.tile_offset(e // C, e % C, R, swizzle=SW)


@pytest.mark.parametrize("sw,R,C", [(32, 24, 48), (128, 24, 128)])
def test_tile_offset_is_the_core_matrix_layout(runtime, sw, R, C):
    """32-byte swizzle: bands of 16 columns, the 16-byte halves swapped in rows 4-7 of every
    8; 128-byte swizzle: bands of 64 columns, chunk j of row r stored at j xor (r mod 8)."""
    out = runtime.zeros(R * C, "i32")
    offsets[1, 64](out, R, C, sw)
    r, c = np.divmod(np.arange(R * C), C)
    if sw == 32:
        ref = (c // 16) * R * 16 + r * 16 + (((c // 8) % 2) ^ ((r // 4) % 2)) * 8 + c % 8
    else:
        ref = (c // 64) * R * 64 + r * 64 + (((c % 64) // 8) ^ (r % 8)) * 8 + c % 8
    np.testing.assert_array_equal(out.numpy(), ref)
    assert sorted(ref) == list(range(R * C))  # a permutation: every element has its own slot


@kd.kernel
def misuse(a: kd.Tensor, o: kd.Tensor[kd.f32], CASE: kd.Const[int]):
    DT = a.dtype
    sh = kd.shared(DT, 64 * 16)
    f32sh = kd.shared(kd.f32, 64)
    acc = kd.group_fragment_acc(64, 16) if CASE != 0 else kd.group_fragment_acc(32, 16)
    if CASE == 1:
        kd.group_mma(acc, kd.shared_tile(sh, 0, 64, 16), kd.fragment_b(DT, 16, 16, 16))
    if CASE == 2:
        kd.group_mma(acc, kd.shared_tile(sh, 0, 64, 16), kd.shared_tile(sh, 0, 16, 32))
    if CASE == 3:
        kd.load_fragment(acc, a, 0, 16)
    if CASE == 4:
        kd.shared_tile(f32sh, 0, 8, 8)
    if CASE == 5:
        kd.group_mma(kd.fragment_acc(16, 16, 16), kd.shared_tile(sh, 0, 64, 16), kd.shared_tile(sh, 0, 16, 16))
    if CASE == 6:
        kd.shared_tile(sh, 0, 64, 24)
    if CASE == 9:
        kd.shared_tile(sh, 0, 64, 32)
    if CASE == 10:
        kd.shared_tile(sh, 64, 32, 16)
    if CASE == 11:
        kd.shared_tile(sh, 0, 16, 32, swizzle=64)
    if CASE == 12:
        kd.shared_tile(sh, 0, 16, 32, swizzle=128)
    if CASE == 13:
        kd.tile_offset(0, 0, 8, swizzle=16)
    if CASE == 7:
        p = kd.group_fragment_a(DT, 64, 16)
        kd.fragment_convert(p, kd.group_fragment_acc(64, 32))
    kd.group_wait(0)


@pytest.mark.parametrize("case,units,match", [
    (0, 128, "group fragments have 64 rows, got 32"),
    (1, 128, "b must be a kd.shared_tile, got fragment"),
    (2, 128, r"shapes do not chain: acc 64 x 16, a 64 x 16, b 16 x 32"),
    (3, 128, "kd.load_fragment takes plane fragments, got a group fragment"),
    (4, 128, "kd.shared_tile needs an f16 or bf16 shared array"),
    (5, 128, r"kd.group_mma \(first argument\) takes group fragments, got a plane fragment"),
    (6, 128, "the cols of a tile are its stored columns and must be a multiple of 16 "),
    (7, 128, "kd.fragment_convert needs a row-layout a fragment of the acc fragment's m x n shape"),
    (8, 96, "need whole groups of 4 planes"),
    (9, 128, "a 64 x 32 tile needs 2048 elements; shared array"),
    (10, 128, "offset 64 must be a multiple of 128"),
    (11, 128, r"kd.shared_tile: swizzle must be one of \(32, 128\) \(bytes\), got 64"),
    (12, 128, "must be a multiple of 64 \\(whole bands of the 128-byte swizzle\\), got 32"),
    (13, 128, r"kd.tile_offset: swizzle must be one of \(32, 128\)"),
])
def test_group_errors(case, units, match):
    cpu = kd.runtime("cpu")  # the front end's checks: the same on every runtime
    if case == 8 and units % (4 * cpu.plane_dim) == 0:
        units = 4 * cpu.plane_dim + cpu.plane_dim
    with pytest.raises(CompileError, match=match):
        misuse[1, units](cpu.zeros(64 * 16, "bf16"), cpu.zeros(16, "f32"), case)


def test_emulated_row_slots_need_columns_that_fit_the_plane():
    cpu = kd.runtime("cpu")
    a, b = cpu.zeros((64, 16), "bf16"), cpu.zeros((16, 24), "bf16")
    with pytest.raises(CompileError, match=r"row slots need the tile's columns \(24\) to divide PLANE_DIM"):
        row_stats[1, 4 * cpu.plane_dim](a, b, cpu.zeros(64, "f32"), cpu.zeros(64, "i32"), 24)
