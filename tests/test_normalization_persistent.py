"""rudnn.normalization's long-row kernels on every runtime, forced onto small rows:
persistent.py (cubes that loop over rows and prefetch the next one into shared memory;
fewer cubes than rows, so the prefetch turns over) and paired.py (several rows a cube,
one in registers or none, the rest in shared memory; row counts that leave the last cube
short); and tuning.long_row_plan, the policy that picks them (long rows, GPUs only)."""
import dataclasses

import numpy as np
import pytest

import kerneldsl as kd
import rudnn.normalization as N
from reference import normalization as ref
from kerneldsl.backends.cuda.capabilities import for_arch
from rudnn.normalization import tuning

pytestmark = pytest.mark.feature("normalization: persistent")
RTOL = {"f32": 1e-5, "bf16": 1.6e-2}


PLANS = [tuning.LongRowPlan("persistent"), tuning.LongRowPlan("paired", 2, 1), tuning.LongRowPlan("paired", 3, 0),
         tuning.LongRowPlan("paired", 4, 1)]


def force_plan(runtime, monkeypatch, plan, cubes=3) -> list:
    """Make the library run `plan` (persistent: with `cubes` cubes) wherever a GPU's
    register-cached shape (at this runtime's plane size) tiles the row; returns the shapes used."""
    caps = dataclasses.replace(runtime.capabilities, units_are_simd_lanes=False, shared_memory_emulated=False,
                               max_cube_units=min(1024, runtime.capabilities.max_cube_units))
    used = []

    def pick(_caps, w, lanes):
        return tuning.choose_shape(caps, w, lanes)

    def plan_for(_caps, shape, w, itemsize, rms):
        ok = shape.cached and shape.ry == 1 and not shape.ragged(w) and shape.lanes * itemsize == 16
        if ok:
            used.append(shape)
        return plan if ok else None

    monkeypatch.setattr(N, "choose_shape", pick)
    monkeypatch.setattr(N, "long_row_plan", plan_for)
    monkeypatch.setattr(N, "persistent_grid", lambda rt, rows: min(rows, cubes))
    return used


@pytest.mark.parametrize("dtype, width", [("f32", 2048), ("bf16", 4096)])
@pytest.mark.parametrize("rows, cubes", [(7, 3), (2, 5)])  # 7 rows: the last paired cube is short
@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"{p.kernel}{p.nr}{p.reg}")
def test_long_row_kernels_match_reference(runtime, rng, monkeypatch, plan, dtype, width, rows, cubes):
    used = force_plan(runtime, monkeypatch, plan, cubes)
    np_dt = kd.as_dtype(dtype).np
    x = (rng.standard_normal((rows, width)) * 2 + 0.5).astype(np.float32).astype(np_dt)
    gamma = rng.standard_normal(width).astype(np.float32)
    beta = rng.standard_normal(width).astype(np.float32)
    tx, tg, tb = runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(beta)
    r = RTOL[dtype]

    y, mean, rstd = N.layer_norm_with_stats(tx, tg, tb, 1e-5)
    ry, rmean, rrstd = ref.layer_norm(x, gamma, beta, 1e-5)
    np.testing.assert_allclose(y.numpy().astype(np.float64), ry, rtol=r, atol=r)
    np.testing.assert_allclose(mean.numpy(), rmean, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(rstd.numpy(), rrstd, rtol=2e-5)
    y, rstd = N.rms_norm_with_stats(tx, tg, 1e-6)
    ry, rrstd = ref.rms_norm(x, gamma, 1e-6)
    np.testing.assert_allclose(y.numpy().astype(np.float64), ry, rtol=r, atol=r)
    np.testing.assert_allclose(rstd.numpy(), rrstd, rtol=2e-5)
    assert len(used) == 2 and all(s.bx * s.chunks * s.lanes == width for s in used)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"{p.kernel}{p.nr}{p.reg}")
def test_long_row_kernels_strided_rows(runtime, rng, monkeypatch, plan, dtype):
    """Rows `width + 2*pad` elements apart, starting `pad` in (a column slice; 16 bytes):
    the copies follow the row stride (bf16 rows are copied as u32 pairs: stride and offset
    in words)."""
    used = force_plan(runtime, monkeypatch, plan, 2)
    width, pad = (2048, 4) if dtype == "f32" else (4096, 8)  # one row a cube (RowShape.ry == 1)
    big = rng.standard_normal((5, width + 2 * pad)).astype(np.float32).astype(kd.as_dtype(dtype).np)
    gamma = rng.standard_normal(width).astype(np.float32)
    beta = rng.standard_normal(width).astype(np.float32)
    tx = runtime.tensor(big)[:, pad:pad + width]
    part = big[:, pad:pad + width]
    r = RTOL[dtype]
    y = N.rms_norm(tx, runtime.tensor(gamma))
    np.testing.assert_allclose(y.numpy().astype(np.float64), ref.rms_norm(part, gamma)[0], rtol=r, atol=r)
    y = N.layer_norm(tx, runtime.tensor(gamma), runtime.tensor(beta))
    np.testing.assert_allclose(y.numpy().astype(np.float64), ref.layer_norm(part, gamma, beta, 1e-5)[0], rtol=r, atol=r)
    assert used


def test_plan_for_long_rows_on_gpus_only(runtime):
    """The policy on an H200-like device: the plain kernels up to W = 8192 and wherever a
    row and its parameters stay in L1; beyond, up to 3 16-bit rows a cube in shared memory
    (LayerNorm: and one more in registers), persistent cubes, or (f32) several rows a cube,
    one in registers;
    never on a runtime without hardware async copies."""
    gpu = for_arch("sm_90", max_shared_bytes=227 * 1024)
    P, R = tuning.LongRowPlan, None
    want = {(8192, 4, False): R, (16384, 4, True): R, (16384, 4, False): P("persistent"),
            (16384, 2, False): R, (32768, 4, True): P("paired", 2, 1), (32768, 4, False): P("paired", 2, 1),
            (32768, 2, True): P("paired", 3, 0), (32768, 2, False): P("paired", 4, 1), (65536, 2, False): R,
            (65536, 4, True): R}
    for (width, itemsize, rms), plan in want.items():
        shape = tuning.choose_shape(gpu, width, 16 // itemsize)
        assert tuning.long_row_plan(gpu, shape, width, itemsize, rms) == plan, (width, itemsize, rms)
    caps = runtime.capabilities
    shape = tuning.choose_shape(caps, 32768, 4)
    got = tuning.long_row_plan(caps, shape, 32768, 4, False)
    assert (got is not None) == (caps.async_copy and shape.cached and shape.bx * shape.chunks * 4 == 32768)


def test_short_bf16_layer_norm_rows_run_two_a_cube(runtime, rng):
    """bf16 LayerNorm rows of 8-32 KiB with a cube of their own: 2 rows a cube on an
    H200-like device (one in registers, one in shared memory), 3 past 16 KiB; not for
    RMSNorm, f16, f32, rows that share a cube or long rows (long_row_plan's), nor without
    async copies. The
    runtime's own choice gives the reference's result for 7 rows (a short last cube)."""
    gpu = for_arch("sm_90", max_shared_bytes=227 * 1024)
    P, R = tuning.LongRowPlan, None
    want = {(4096, kd.bf16, False): P("paired", 2, 1), (8192, kd.bf16, False): P("paired", 2, 1),
            (8192, kd.bf16, True): R, (8192, kd.f16, False): R, (4096, kd.f32, False): R,
            (16384, kd.bf16, False): P("paired", 3, 1), (2048, kd.bf16, False): R, (32768, kd.bf16, False): R}
    for (width, dtype, rms), plan in want.items():
        shape = tuning.choose_shape(gpu, width, 16 // dtype.itemsize)
        assert tuning.short_row_plan(gpu, shape, width, dtype, rms) == plan, (width, dtype, rms)
    caps = runtime.capabilities
    shape = tuning.choose_shape(caps, 4096, 8)
    if not caps.async_copy:
        assert tuning.short_row_plan(caps, shape, 4096, kd.bf16, False) is None
    x = (rng.standard_normal((7, 4096)) * 2 + 0.5).astype(np.float32).astype(kd.bf16.np)
    gamma = rng.standard_normal(4096).astype(np.float32)
    beta = rng.standard_normal(4096).astype(np.float32)
    y, mean, rstd = N.layer_norm_with_stats(runtime.tensor(x), runtime.tensor(gamma), runtime.tensor(beta), 1e-5)
    ry, rmean, rrstd = ref.layer_norm(x, gamma, beta, 1e-5)
    np.testing.assert_allclose(y.numpy().astype(np.float64), ry, rtol=RTOL["bf16"], atol=RTOL["bf16"])
    np.testing.assert_allclose(mean.numpy(), rmean, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(rstd.numpy(), rrstd, rtol=2e-5)
