"""rudnn.normalization's persistent kernel (persistent.py: cubes that loop over rows and
prefetch the next one into shared memory) on every runtime: forced onto small rows and
fewer cubes than rows, so each cube handles several rows and the prefetch ring turns over;
and the policy that picks it (long rows, hardware async copies only)."""
import dataclasses

import numpy as np
import pytest

import kerneldsl as kd
import rudnn.normalization as N
from reference import normalization as ref
from rudnn.normalization import layout

pytestmark = pytest.mark.feature("normalization: persistent")
RTOL = {"f32": 1e-5, "bf16": 1.6e-2}


def force_persistent(runtime, monkeypatch, cubes) -> list:
    """Make the library run the persistent kernel with `cubes` cubes wherever a GPU's
    register-cached shape (at this runtime's plane size) tiles the row; returns the shapes used."""
    caps = dataclasses.replace(runtime.capabilities, backend="cuda",
                               max_cube_units=min(1024, runtime.capabilities.max_cube_units))
    used = []

    def pick(_caps, w, lanes):
        return layout.choose_shape(caps, w, lanes)

    def persistent(_caps, shape, w, itemsize):
        ok = shape.cached and shape.ry == 1 and not shape.ragged(w) and shape.lanes * itemsize == 16
        if ok:
            used.append(shape)
        return ok

    monkeypatch.setattr(N, "choose_shape", pick)
    monkeypatch.setattr(N, "persistent", persistent)
    monkeypatch.setattr(N, "persistent_grid", lambda rt, rows: min(rows, cubes))
    return used


@pytest.mark.parametrize("dtype, width", [("f32", 2048), ("bf16", 4096), ("f32", 4096)])
@pytest.mark.parametrize("rows, cubes", [(7, 3), (2, 5)])
def test_persistent_matches_reference(runtime, rng, monkeypatch, dtype, width, rows, cubes):
    used = force_persistent(runtime, monkeypatch, cubes)
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


def test_persistent_strided_rows(runtime, rng, monkeypatch):
    """Rows `width + 8` elements apart (a column slice): the prefetch follows the row stride."""
    used = force_persistent(runtime, monkeypatch, 2)
    width = 2048
    big = rng.standard_normal((5, width + 8)).astype(np.float32)
    gamma = rng.standard_normal(width).astype(np.float32)
    tx = runtime.tensor(big)[:, 4:4 + width]
    y = N.rms_norm(tx, runtime.tensor(gamma))
    np.testing.assert_allclose(y.numpy().astype(np.float64), ref.rms_norm(big[:, 4:4 + width], gamma)[0],
                               rtol=1e-5, atol=1e-5)
    assert used


def test_picked_for_long_rows_on_gpus_only(runtime):
    """The policy: CUDA (hardware async copies) and rows of 64 KiB or more that fit in shared
    memory; never the cpu runtime or rows of the widths that already reach bandwidth."""
    from kerneldsl.backends.cuda.capabilities import for_arch
    gpu = for_arch("sm_90", max_shared_bytes=227 * 1024)
    for width, itemsize, want in [(32768, 4, True), (16384, 4, True), (32768, 2, True), (8192, 4, False),
                                  (16384, 2, False), (4096, 4, False), (65536, 4, False)]:
        lanes = 16 // itemsize
        got = layout.persistent(gpu, layout.choose_shape(gpu, width, lanes), width, itemsize)
        assert got is want, (width, itemsize)
    caps = runtime.capabilities
    shape = layout.choose_shape(caps, 32768, 4)
    assert layout.persistent(caps, shape, 32768, 4) is (caps.async_copy and shape.cached)
