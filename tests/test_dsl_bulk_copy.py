"""Bulk tensor copies and arrival barriers (`kd.bulk_copy`, `kd.bulk_store`, `kd.arrival_barriers`,
`kd.barrier_init/arrive/expect/wait`): boxes at and past a tensor's edges, both ways, a GEMM whose stages
are handed over only by barriers over several phases (benchmarks/bulk_gemm.py), the launch
checks of a copy's source and every compile-time error rule. Native on sm_90 (TMA and
mbarrier); an emulation elsewhere, which must give the same answers."""
import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import CompileError, LaunchError

pytestmark = [pytest.mark.feature("bulk_copy"), pytest.mark.interpreter]


@kd.kernel
def copy_box(src: kd.Tensor[kd.bf16, 2], out: kd.Tensor[kd.bf16, 2], row: kd.i32, col: kd.i32,
             R: kd.Const[int], C: kd.Const[int], SW: kd.Const[int]):
    """Unit 0 copies the R x C box at (row, col) into shared memory (the layout of swizzle
    span SW, 8 band rows in); every unit waits for its bytes, then the cube writes the tile
    out row-major (reading kd.tile_offset's layout)."""
    OFF = 4 * SW  # 8 rows of a band: the layout's alignment
    sh = kd.shared(kd.bf16, OFF + R * C)
    bars = kd.arrival_barriers(2)
    u = kd.unit_pos()
    if u == 0:
        kd.barrier_init(bars, 1, 1)
    kd.sync_cube()
    if u == 0:
        kd.barrier_expect(bars, 1, R * C * 2)
        kd.bulk_copy(sh, OFF, src, row, col, R, C, bars, 1, swizzle=SW)
    kd.barrier_wait(bars, 1, 0)
    for e in range(u, R * C, kd.cube_units()):
        out[e // C, e % C] = sh[OFF + kd.tile_offset(e // C, e % C, R, swizzle=SW)]


def _box(a, row, col, R, C):
    want = np.zeros((R, C), a.dtype)
    for r in range(R):
        for c in range(C):
            if 0 <= row + r < a.shape[0] and 0 <= col + c < a.shape[1]:
                want[r, c] = a[row + r, col + c]
    return want


BOXES = [(16, 32, 32), (8, 16, 32), (16, 64, 128), (8, 128, 128)]  # rows, cols, swizzle


@pytest.mark.parametrize("R,C,sw", BOXES)
def test_box_copies_zero_fill_outside_the_tensor(runtime, rng, R, C, sw):
    a = rng.standard_normal((37, 56)).astype(kd.bf16.np)
    src = runtime.tensor(a)
    for row, col in [(0, 0), (-3, 8), (30, 40), (9, -16), (40, 0)]:
        out = runtime.zeros((R, C), kd.bf16)
        copy_box[1, 64](src, out, row, col, R, C, sw)
        np.testing.assert_array_equal(out.numpy(), _box(a, row, col, R, C), err_msg=f"box at ({row}, {col})")


@kd.kernel
def store_box(tile: kd.Tensor[kd.bf16, 2], out: kd.Tensor[kd.bf16, 2], row: kd.i32, col: kd.i32,
              R: kd.Const[int], C: kd.Const[int], SW: kd.Const[int]):
    """The cube lays tile (R x C) out in shared memory in kd.tile_offset's layout of swizzle
    span SW; unit 0 writes the box at (row, col) of out by a bulk store and waits for it."""
    OFF = 4 * SW
    sh = kd.shared(kd.bf16, OFF + R * C)
    u = kd.unit_pos()
    for e in range(u, R * C, kd.cube_units()):
        sh[OFF + kd.tile_offset(e // C, e % C, R, swizzle=SW)] = tile[e // C, e % C]
    kd.sync_cube()
    if u == 0:
        kd.bulk_store(out, row, col, sh, OFF, R, C, swizzle=SW)
        kd.bulk_store_wait()


@pytest.mark.parametrize("R,C,sw", BOXES)
def test_box_stores_leave_out_what_falls_outside_the_tensor(runtime, rng, R, C, sw):
    """Boxes partly or wholly outside the tensor, also before its first row or column (which
    the copy engine refuses: those bands are written by the issuing unit)."""
    tile = rng.standard_normal((R, C)).astype(kd.bf16.np)
    for row, col in [(0, 0), (-3, 8), (30, 40), (9, -16), (40, 0)]:
        base = np.full((37, 56), 7.0, kd.bf16.np)
        out = runtime.tensor(base)
        store_box[1, 64](runtime.tensor(tile), out, row, col, R, C, sw)
        want = base.copy()
        for r in range(R):
            for c in range(C):
                if 0 <= row + r < 37 and 0 <= col + c < 56:
                    want[row + r, col + c] = tile[r, c]
        np.testing.assert_array_equal(out.numpy(), want, err_msg=f"box at ({row}, {col})")


def test_a_strided_view_is_copied_by_its_rows(runtime, rng):
    """A column slice of a wider tensor: rows 80 elements (160 bytes) apart, start 8 in."""
    a = rng.standard_normal((24, 80)).astype(kd.bf16.np)
    view = runtime.tensor(a)[:, 8:56]
    out = runtime.zeros((16, 32), kd.bf16)
    copy_box[1, 64](view, out, 4, 16, 16, 32, 32)
    np.testing.assert_array_equal(out.numpy(), a[4:20, 24:56])


def test_a_gemm_fed_by_a_ring_of_bulk_copies(runtime, rng):
    """Stages handed over only by full/empty barriers through several phases (7 k steps a tile
    over rings of 3, 4 and 6 stages; persistent cubes carry the ring from tile to tile), two
    groups reading each stage: equal to numpy's product."""
    configs = ["bulk 128x64x16/s3/l1/g8", "bulk 128x64x16/s3/l1/g8/persistent"]  # what emulations hold
    if runtime.capabilities.bulk_copy:
        configs += ["bulk 128x256x32/s6/l2/g8", "bulk 128x256x64/s4/l2/g8", "bulk 128x256x64/s4/l1/g8/persistent",
                    "bulk 128x256x64/s4/l2/g8/sw128"]
    check_gemm_configs(runtime, rng, configs)


def check_gemm_configs(runtime, rng, configs):
    """benchmarks/bulk_gemm.py's configurations against numpy: 256 x 2BN x 7BK, so 4 tiles
    (a persistent cube walks several) of 7 k steps (several phases of every barrier)."""
    from benchmarks.bulk_gemm import CONFIGS, gemm, out_dtype
    for config in configs:
        BN, BK = CONFIGS[config][:2]
        M, N, K = 256, 2 * BN, 7 * BK  # 4 tiles: a persistent cube walks several
        a = rng.standard_normal((M, K)).astype(kd.bf16.np)
        b = rng.standard_normal((K, N)).astype(kd.bf16.np)
        dt = out_dtype(config) or kd.f32
        c = runtime.tensor(np.full((M, N), np.nan, dt.np))  # poisoned: every element must be written
        gemm(runtime.tensor(a), runtime.tensor(b), c, config)
        want = a.astype(np.float64) @ b.astype(np.float64)
        if dt == kd.f32:
            np.testing.assert_allclose(c.numpy(), want, rtol=1e-4, atol=1e-3, err_msg=config)
        else:  # each element rounded once to bf16 (8 bits of mantissa)
            np.testing.assert_allclose(c.numpy().astype(np.float64), want, rtol=2 ** -8, atol=1e-2, err_msg=config)


def test_launch_refuses_sources_the_copy_engine_cannot_read(runtime):
    out = runtime.zeros((16, 32), kd.bf16)
    with pytest.raises(LaunchError, match="rows of tensor src a multiple of 16 bytes apart.*100 bytes"):
        copy_box[1, 64](runtime.zeros((20, 50), kd.bf16), out, 0, 0, 16, 32, 32)
    shifted = runtime.zeros((20, 64), kd.bf16).reshape(-1)[3:3 + 19 * 64].reshape(19, 64)
    with pytest.raises(LaunchError, match="16-byte boundary"):
        copy_box[1, 64](shifted, out, 0, 0, 16, 32, 32)


def _compile(rt, fn, *args):
    return kd.kernel(fn).specialize(rt, *args, block=64).ir()


def test_errors_name_the_rule_and_the_line(runtime):
    x2 = runtime.zeros((32, 64), kd.bf16)

    def wait_alone(x: kd.Tensor[kd.bf16, 2]):
        bars = kd.arrival_barriers(1)
        kd.barrier_wait(bars, 0, 0)

    def box(x: kd.Tensor, R: kd.Const[int], C: kd.Const[int], OFF: kd.Const[int], COL: kd.Const[int],
            SW: kd.Const[int]):
        sh = kd.shared(x.dtype, 4096)
        bars = kd.arrival_barriers(1)
        if kd.unit_pos() == 0:
            kd.bulk_copy(sh, OFF, x, 0, COL, R, C, bars, 0, swizzle=SW)
        kd.barrier_wait(bars, 0, 0)

    def wait_in_branch(x: kd.Tensor[kd.bf16, 2]):
        sh = kd.shared(kd.bf16, 4096)
        bars = kd.arrival_barriers(1)
        if kd.unit_pos() == 0:
            kd.bulk_copy(sh, 0, x, 0, 0, 8, 16, bars, 0)
            kd.barrier_wait(bars, 0, 0)

    def bad_index(x: kd.Tensor[kd.bf16, 2]):
        bars = kd.arrival_barriers(2)
        kd.barrier_arrive(bars, 2)

    def store_unwaited(x: kd.Tensor[kd.bf16, 2]):
        sh = kd.shared(kd.bf16, 4096)
        if kd.unit_pos() == 0:
            kd.bulk_store(x, 0, 0, sh, 0, 8, 16)

    def store_f32(x: kd.Tensor[kd.bf16, 2]):
        sh = kd.shared(kd.f32, 4096)
        kd.bulk_store(x, 0, 0, sh, 0, 8, 16)
        kd.bulk_store_wait()

    def not_barriers(x: kd.Tensor[kd.bf16, 2]):
        sh = kd.shared(kd.i32, 8)
        kd.barrier_arrive(sh, 0)

    with pytest.raises(CompileError, match="nothing arrives at") as e:
        _compile(runtime, wait_alone, x2)
    assert e.value.loc is not None and e.value.loc.line > 0
    for args, match in [((x2, 12, 16, 0, 0), "rows must be a multiple of 8"),
                        ((x2, 8, 24, 0, 0), "cols must be a multiple of 16"),
                        ((x2, 8, 16, 64, 0), "multiple of 128 elements"),
                        ((x2, 8, 16, 0, 4), "16-byte boundary"),
                        ((runtime.zeros((8, 16), kd.f32), 8, 16, 0, 0), "f16 or bf16"),
                        ((runtime.zeros((2, 8, 16), kd.bf16), 8, 16, 0, 0), "2-D tensor"),
                        ((runtime.zeros((16, 32), kd.bf16)[:, ::2], 8, 16, 0, 0), "contiguous last axis")]:
        with pytest.raises(CompileError, match=match):
            _compile(runtime, box, *args, 32)
    for args, match in [((x2, 8, 32, 0, 0, 128), r"cols must be a multiple of 64 .*128-byte group-tile layout"),
                        ((x2, 8, 64, 128, 0, 128), "multiple of 512 elements"),
                        ((x2, 8, 64, 0, 0, 64), r"swizzle must be one of \(32, 128\)")]:
        with pytest.raises(CompileError, match=match):
            _compile(runtime, box, *args)
    with pytest.raises(CompileError, match=r"kd.barrier_wait\(\) must be reached by every unit"):
        _compile(runtime, wait_in_branch, x2)
    with pytest.raises(CompileError, match="barrier 2 is outside the 2 barriers"):
        _compile(runtime, bad_index, x2)
    with pytest.raises(CompileError, match="takes the array kd.arrival_barriers made"):
        _compile(runtime, not_barriers, x2)
    with pytest.raises(CompileError, match=r"kd.bulk_store without kd.bulk_store_wait\(\)"):
        _compile(runtime, store_unwaited, x2)
    with pytest.raises(CompileError, match="kd.bulk_store copies from a shared array of bf16"):
        _compile(runtime, store_f32, x2)
