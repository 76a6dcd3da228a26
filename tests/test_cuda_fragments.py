"""Paths the CUDA back end lowers specially, checked on every runtime against numpy: matrix
fragments from shared memory at aligned and unaligned offsets in both layouts (ldmatrix and
its gather fallback), accumulators loaded from and stored to f32/f16/bf16 memory, vectors
stored lane by lane into shared memory (one wide store on CUDA), and shared arrays over
the 48 KiB static limit (dynamic shared memory on CUDA)."""
import numpy as np
import pytest

import kerneldsl as kd

pytestmark = pytest.mark.feature("mma")


@kd.kernel
def mma_from_shared(a: kd.Tensor, b: kd.Tensor, c0: kd.Tensor[kd.f32], out: kd.Tensor, DT: kd.Const[object],
                    SKEW: kd.Const[int], LAYOUT_A: kd.Const[str], LAYOUT_B: kd.Const[str]):
    """One plane: a (16x16) and b (16x16) staged in shared memory at offset SKEW with row
    stride 16 + SKEW, c0 staged too; out = c0 + a @ b, stored as out's dtype."""
    LD = 16 + SKEW
    sa = kd.shared(DT, SKEW + 16 * LD)
    sb = kd.shared(DT, SKEW + 16 * LD)
    sc = kd.shared(kd.f32, SKEW + 16 * LD)
    for e in range(kd.lane_pos(), 256, kd.PLANE_DIM):
        r, c = e // 16, e % 16
        sa[SKEW + r * LD + c] = a[e]
        sb[SKEW + r * LD + c] = b[e]
        sc[SKEW + r * LD + c] = c0[e]
    kd.sync_cube()
    fa = kd.fragment_a(DT, 16, 16, 16, layout=LAYOUT_A)
    fb = kd.fragment_b(DT, 16, 16, 16, layout=LAYOUT_B)
    acc = kd.fragment_acc(16, 16, 16)
    kd.load_fragment(fa, sa, SKEW, LD)
    kd.load_fragment(fb, sb, SKEW, LD)
    kd.load_fragment(acc, sc, SKEW, LD)
    kd.mma(acc, fa, fb)
    kd.store_fragment(out, 0, acc, 16)


# skew 0 and 8: rows of aligned 16-byte runs (ldmatrix on CUDA); 3: the gather fallback.
# a row / b col pair adjacent elements; a col / b row need ldmatrix's transposing form.
CASES = [(0, "row", "row", "bf16", "f32"), (8, "row", "row", "f16", "f16"), (3, "row", "row", "bf16", "bf16"),
         (0, "col", "col", "f16", "f32"), (3, "col", "col", "bf16", "f32"), (0, "row", "col", "bf16", "bf16"),
         (8, "col", "row", "f16", "f32")]


@pytest.mark.parametrize("skew,layout_a,layout_b,dt,out_dt", CASES)
def test_fragments_from_shared(runtime, rng, skew, layout_a, layout_b, dt, out_dt):
    npd = kd.as_dtype(dt).np
    a = (rng.integers(-4, 5, (16, 16)) * 0.5).astype(npd)
    b = (rng.integers(-4, 5, (16, 16)) * 0.25).astype(npd)
    c0 = rng.integers(-8, 9, (16, 16)).astype(np.float32)
    # a col-layout tile is stored transposed; the kernel reads memory row by row either way
    am = a.T.copy() if layout_a == "col" else a
    bm = b.T.copy() if layout_b == "col" else b
    out = runtime.zeros((16, 16), out_dt)
    mma_from_shared[1, runtime.plane_dim](runtime.tensor(am.reshape(-1)), runtime.tensor(bm.reshape(-1)),
                                          runtime.tensor(c0.reshape(-1)), out, kd.as_dtype(dt), skew, layout_a,
                                          layout_b)
    ref = c0.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)  # exact: small dyadic values
    np.testing.assert_array_equal(out.numpy().astype(np.float64), ref.astype(kd.as_dtype(out_dt).np))


@kd.kernel
def vec_to_shared(x: kd.Tensor, out: kd.Tensor, SKEW: kd.Const[int]):
    """Each unit loads 8 elements as a vector and stores its lanes to shared memory one by
    one (at an offset that is unaligned when SKEW is odd); the cube then reverses them."""
    t = kd.unit_pos_x()
    n = kd.cube_dim_x() * 8
    buf = kd.shared(kd.f32, SKEW + kd.cube_dim_x() * 8)
    v = kd.load_vec(x, t * 8, 8)
    for e in kd.unroll(8):
        buf[SKEW + t * 8 + e] = v[e]
    kd.sync_cube()
    for e in kd.unroll(8):
        out[t * 8 + e] = buf[SKEW + n - 1 - (t * 8 + e)]


@pytest.mark.parametrize("skew", [0, 1, 4])
def test_vector_lanes_stored_to_shared(runtime, rng, skew):
    x = rng.standard_normal(8 * 40).astype(np.float32)
    out = runtime.zeros(8 * 40, "f32")
    vec_to_shared[1, 40](runtime.tensor(x), out, skew)
    np.testing.assert_array_equal(out.numpy(), x[::-1])


@kd.kernel
def big_shared_reverse(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], N: kd.Const[int]):
    buf = kd.shared(kd.f32, N)
    small = kd.shared(kd.i32, 5)
    t = kd.unit_pos_x()
    if t < 5:
        small[t] = t
    for i in range(t, N, kd.cube_dim_x()):
        buf[i] = x[i] * 2.0
    kd.sync_cube()
    for i in range(t, N, kd.cube_dim_x()):
        out[i] = buf[N - 1 - i] + kd.f32(small[i % 5])


def test_shared_memory_over_48k(runtime, rng):
    n = 15000  # 60 KB of f32
    if n * 4 + 20 > runtime.capabilities.max_shared_bytes:
        pytest.skip(f"{runtime.name} has {runtime.capabilities.max_shared_bytes} bytes of shared memory per cube")
    x = rng.standard_normal(n).astype(np.float32)
    out = runtime.zeros(n, "f32")
    big_shared_reverse[1, 256](runtime.tensor(x), out, n)
    np.testing.assert_array_equal(out.numpy(), x[::-1] * 2 + (np.arange(n) % 5).astype(np.float32))
