"""The DSL kernels benchmarks/dsl_gpu.py times on the H200 (streaming copies, a row
reduction, the pipelined GEMM) give the right answers on this machine's runtimes too, so a
change that breaks them fails CI, not the next GPU session."""
import ml_dtypes
import numpy as np
import pytest

from benchmarks import dsl_gpu

pytestmark = pytest.mark.feature("benchmark kernels")


@pytest.mark.parametrize("style,block,unroll", [("loop", 64, 4), ("batched", 32, 8)])
def test_copies(runtime, rng, style, block, unroll):
    n = 64 * 4 * 4 * 3 + 7  # a ragged end
    x = rng.standard_normal(n).astype(np.float32)
    y = runtime.tensor(np.full(n, np.nan, np.float32))
    kern = dsl_gpu.copy_loop if style == "loop" else dsl_gpu.copy_vec
    cubes = -(-n // (block * unroll * dsl_gpu.VEC))
    kern[cubes, block](runtime.tensor(x), y, n, block, unroll)
    np.testing.assert_array_equal(y.numpy(), x)


@pytest.mark.parametrize("block,unroll", [(64, 1), (32, 4)])
def test_row_sum(runtime, rng, block, unroll):
    x = rng.standard_normal((5, 1000)).astype(np.float32)
    out = runtime.tensor(np.full(5, np.nan, np.float32))
    dsl_gpu.row_sum[5, block](runtime.tensor(x), out, block, unroll)
    np.testing.assert_allclose(out.numpy(), x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("config,k", [("64x128x64/w32x64/s4/g8", 64), ("64x128x64/w32x64/s4/g8", 320),
                                      ("128x128x64/w64x64/s3/g8", 192)])
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_pipelined_gemm(runtime, rng, config, k):
    if runtime.name.startswith("opencl") and "Portable Computing Language" in runtime.capabilities.device_name:
        pytest.skip("PoCL takes minutes to build the emulated 128-unit GEMM; the cpu runtime checks the "
                    "ring schedule (at plane sizes 32 and 8), the GPU run checks the tensor cores")
    m, n = 128, 256
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = runtime.tensor(np.full((m, n), np.nan, np.float32))
    dsl_gpu.gemm(runtime.tensor(a), runtime.tensor(b), c, config)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.numpy(), ref, rtol=1e-4, atol=1e-3)


def _inner_work(n):
    return sum(range(n))


def _outer_call():
    return _inner_work(3000) + len(str(_inner_work(10)))


def test_host_overhead_profile_names_the_costliest_functions():
    """benchmarks/host_overhead.py --profile: at most N lines, most own time first, the first
    naming the function where the calls spend their time (here a loop two calls down)."""
    from benchmarks import host_overhead
    lines = host_overhead.profile(_outer_call, 200, 3).splitlines()
    assert 1 <= len(lines) <= 3
    assert "_inner_work" in lines[0] or "sum" in lines[0], lines
    assert any("_outer_call" in line for line in host_overhead.profile(_outer_call, 200, 8).splitlines())
