"""A bf16 matrix product on group fragments (`kd.group_mma`: wgmma on an H100/H200).

Each cube is one group of 4 planes and computes a 64 x 64 tile of C = A · B. Per 32-wide
step of the inner dimension it stages a 64 x 32 tile of A and a 32 x 64 tile of B in shared
memory, in the layout `kd.group_mma` reads itself (`kd.tile_offset`), and multiplies them
into the group's f32 accumulator; the accumulator's elements are then written where
`kd.fragment_row/col` say they sit. The same source runs on every runtime: wgmma on
Hopper, mma.sync on other NVIDIA GPUs, an exact emulation on the CPU and OpenCL.

Run:  python examples/group_gemm.py        (KERNELDSL_RUNTIME=cuda for the GPU)
"""
import numpy as np

import kerneldsl as kd

TM, TN, TK = 64, 64, 32  # the cube's tile of C, and the inner step


@kd.func
def stage(dst, src, row0, col0, ROWS: kd.Const[int], COLS: kd.Const[int]):
    """dst <- src[row0 : row0 + ROWS, col0 : col0 + COLS] in the group layout (zeros outside src)."""
    t = kd.unit_pos_x()
    for e0 in range(0, ROWS * COLS, kd.cube_units()):
        e = e0 + t
        r = e // COLS
        c = e % COLS
        inside = (row0 + r < src.shape[0]) & (col0 + c < src.shape[1])
        x = kd.f32(src[kd.min(row0 + r, src.shape[0] - 1), kd.min(col0 + c, src.shape[1] - 1)])
        if e < ROWS * COLS:
            dst[kd.tile_offset(r, c, ROWS)] = kd.select(inside, x, kd.f32(0))


@kd.kernel
def gemm(a: kd.Tensor[kd.bf16, 2], b: kd.Tensor[kd.bf16, 2], c: kd.Tensor[kd.f32, 2]):
    row0 = kd.cube_pos_y() * TM
    col0 = kd.cube_pos_x() * TN
    a_sh = kd.shared(kd.bf16, TM * TK)
    b_sh = kd.shared(kd.bf16, TK * TN)
    acc = kd.group_fragment_acc(TM, TN)
    kd.fill_fragment(acc, 0.0)
    for k0 in range(0, a.shape[1], TK):
        stage(a_sh, a, row0, k0, TM, TK)
        stage(b_sh, b, k0, col0, TK, TN)
        kd.sync_cube()                          # the tiles are in
        kd.group_mma(acc, kd.shared_tile(a_sh, 0, TM, TK), kd.shared_tile(b_sh, 0, TK, TN))
        kd.group_wait(0)                        # the product has read them
        kd.sync_cube()                          # before the next step overwrites them
    for i in kd.unroll(kd.fragment_len(acc)):
        r = row0 + kd.fragment_row(acc, i)
        col = col0 + kd.fragment_col(acc, i)
        if (r < c.shape[0]) & (col < c.shape[1]):
            c[r, col] = kd.fragment_get(acc, i)


def main():
    rt = kd.runtime()
    rng = np.random.default_rng(0)
    M, K, N = 100, 72, 90
    a = rng.standard_normal((M, K)).astype(kd.bf16.np)
    b = rng.standard_normal((K, N)).astype(kd.bf16.np)
    c = rt.zeros((M, N), "f32")
    grid = (-(-N // TN), -(-M // TM))
    gemm[grid, 4 * rt.plane_dim](rt.tensor(a), rt.tensor(b), c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    err = np.abs(c.numpy() - want).max()
    print(f"{rt.name}: C = A·B, {M}x{K} times {K}x{N} in bf16 on group fragments; max error {err:.1e}")
    assert err < 1e-3, err
    print("ok")


if __name__ == "__main__":
    main()
