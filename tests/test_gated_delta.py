"""rudnn.gated_delta (SPEC §3) on every runtime: both entry points against the float64
recurrence, chunked == recurrent over chunk sizes and ragged T, continuation through
final_state, untouched initial_state, K ≠ V, extreme decays, strided views, and every
error rule (raised before any launch). PyTorch has no gated delta op, so the float64
numpy recurrence (tests/reference/gated_delta.py) is the only reference."""
import dataclasses

import numpy as np
import pytest

import kerneldsl as kd
import rudnn
from rudnn.gated_delta import (GatedDeltaError, GatedDeltaInput, GatedDeltaOutput, chunk_gated_delta_rule,
                               gated_delta_rule)

from reference.gated_delta import gated_delta as reference
from family_checks import OtherRuntime as _OtherRuntime, on_launch

pytestmark = pytest.mark.feature("gated_delta")

TOL = {"f32": 2e-4, "f16": 2e-2, "bf16": 8e-2}  # relative to the reference's largest magnitude
SCALE = 0.35


def arrays(rng, B=2, H=3, T=13, K=20, V=24, dtype="f32", g_low=-1.0, g_high=0.0):
    """q, k (rows of unit length, as Gated DeltaNet normalises them), v, beta in (0, 1), g, s0."""
    npd = kd.as_dtype(dtype).np
    q = rng.standard_normal((B, H, T, K))
    k = rng.standard_normal((B, H, T, K))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, H, T, V))
    beta = rng.uniform(0.05, 1.0, (B, H, T))
    g = rng.uniform(g_low, g_high, (B, H, T)).astype(np.float32)
    s0 = rng.standard_normal((B, H, K, V)).astype(np.float32)
    return q.astype(npd), k.astype(npd), v.astype(npd), beta.astype(npd), g, s0


def make_input(rt, a, scale=SCALE) -> GatedDeltaInput:
    return GatedDeltaInput(*(rt.tensor(x) for x in a), scale)


def run(rt, a, chunk=None, scale=SCALE) -> tuple:
    inp = make_input(rt, a, scale)
    res = gated_delta_rule(inp) if chunk is None else chunk_gated_delta_rule(inp, chunk)
    assert isinstance(res, GatedDeltaOutput)
    return res.output.numpy(), res.final_state.numpy()


def check(got, a, scale=SCALE, dtype="f32"):
    out, state = got
    ro, rs = reference(*a, scale)
    assert out.dtype == a[0].dtype and state.dtype == np.float32
    assert out.shape == ro.shape and state.shape == rs.shape
    tol = TOL[dtype]
    np.testing.assert_allclose(out.astype(np.float64), ro, rtol=0, atol=tol * max(1.0, np.abs(ro).max()))
    np.testing.assert_allclose(state, rs, rtol=0, atol=tol * max(1.0, np.abs(rs).max()))


# ---------------------------------------------------------------------------- against the reference
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("chunk", [None, 16], ids=["recurrent", "chunked"])
def test_matches_reference(runtime, rng, dtype, chunk):
    a = arrays(rng, dtype=dtype, T=21)
    check(run(runtime, a, chunk), a, dtype=dtype)


@pytest.mark.feature("gated_delta: chunked")
@pytest.mark.parametrize("T", [1, 63, 65, 200])
def test_chunked_equals_recurrent(runtime, rng, T):
    """Every chunk size (1, 16, 64), T not a multiple of it; each against the recurrence."""
    a = arrays(rng, B=1, H=2, T=T, K=16, V=8)
    rec = run(runtime, a)
    check(rec, a)
    for chunk in (1, 16, 64):
        out, state = run(runtime, a, chunk)
        np.testing.assert_allclose(out, rec[0], rtol=0, atol=2e-4 * max(1.0, np.abs(rec[0]).max()))
        np.testing.assert_allclose(state, rec[1], rtol=0, atol=2e-4 * max(1.0, np.abs(rec[1]).max()))


@pytest.mark.parametrize("chunk", [None, 16], ids=["recurrent", "chunked"])
def test_zero_tokens(runtime, rng, launches, chunk):
    """T = 0: an empty output and final_state equal to (a copy of) initial_state; no family kernel runs."""
    a = arrays(rng, T=0)
    inp = make_input(runtime, a)
    res = gated_delta_rule(inp) if chunk is None else chunk_gated_delta_rule(inp, chunk)
    assert res.output.shape == (2, 3, 0, 24) and res.output.dtype is kd.f32
    assert np.array_equal(res.final_state.numpy(), a[5])
    assert res.final_state.buffer is not inp.initial_state.buffer
    assert [n for n in launches if n != "_strided_copy"] == []


@pytest.mark.parametrize("chunk", [None, 16], ids=["recurrent", "chunked"])
def test_continuation_and_untouched_initial_state(runtime, rng, chunk):
    """Two calls chained through final_state equal one call; initial_state is never written."""
    a = arrays(rng, T=40, K=12, V=20)
    whole = run(runtime, a, chunk)
    cut = 23
    first = make_input(runtime, tuple(x[:, :, :cut] for x in a[:5]) + (a[5],))
    before = first.initial_state.numpy()
    r1 = gated_delta_rule(first) if chunk is None else chunk_gated_delta_rule(first, chunk)
    assert np.array_equal(first.initial_state.numpy(), before)
    second = GatedDeltaInput(*(runtime.tensor(x[:, :, cut:]) for x in a[:5]), r1.final_state, SCALE)
    r2 = gated_delta_rule(second) if chunk is None else chunk_gated_delta_rule(second, chunk)
    out = np.concatenate([r1.output.numpy(), r2.output.numpy()], axis=2)
    np.testing.assert_allclose(out, whole[0], rtol=0, atol=1e-4 * np.abs(whole[0]).max())
    np.testing.assert_allclose(r2.final_state.numpy(), whole[1], rtol=0, atol=1e-4 * np.abs(whole[1]).max())


@pytest.mark.parametrize("g_range", [(-60.0, -30.0), (0.0, 0.0)], ids=["very-negative", "zero"])
def test_extreme_decays(runtime, rng, g_range):
    """g very negative (the state forgotten every step) and g = 0 (no decay), both entry points."""
    a = arrays(rng, T=37, K=9, V=33, g_low=g_range[0], g_high=g_range[1])
    check(run(runtime, a), a)
    check(run(runtime, a, 16), a)


def test_wide_state_and_strided_views(runtime, rng):
    """K = 40 > V = 5 (several register rows per unit, a narrow tile), inputs as [B, T, H, K]
    tensors viewed as [B, H, T, K]."""
    a = arrays(rng, B=1, H=2, T=19, K=40, V=5)
    t = [runtime.tensor(np.ascontiguousarray(np.swapaxes(x, 1, 2))).transpose(1, 2) for x in a[:5]]
    inp = GatedDeltaInput(*t, runtime.tensor(a[5]), SCALE)
    assert not inp.query.is_contiguous()
    for res in (gated_delta_rule(inp), chunk_gated_delta_rule(inp, 8)):
        check((res.output.numpy(), res.final_state.numpy()), a)


@pytest.mark.feature("gated_delta: matrix sweep")
@pytest.mark.parametrize("dtype,T,chunk,g_low,V,bv", [("bf16", 45, 32, -1.0, 64, 64), ("bf16", 64, 32, -1.0, 96, 32),
                                                       ("f16", 40, 32, -60.0, 64, 64)])
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_matrix_sweep(runtime, rng, monkeypatch, launches, dtype, T, chunk, g_low, V, bv):
    """The fragment kernels (chunk_prepare_mma.py, chunk_sweep_mma.py), which the entry point
    takes only where the primitive is on hardware, forced here so every runtime checks them
    on the exact emulation; operands are rounded to the inputs' dtype, so the tolerance is
    that dtype's. T = 64 needs no padding, 45 and 40 do; cubes of 64 and 32 columns. (Chunks
    of 32 keep the emulated compile short; 64 is the same code with more unrolled tiles.)"""
    from rudnn import gated_delta as package
    monkeypatch.setattr(package, "matrix_sweep", lambda caps, dt, K, V, C: True)
    monkeypatch.setattr(package, "matrix_columns", lambda caps, heads, K, V, C: bv)
    a = arrays(rng, B=1, H=2, T=T, K=32, V=V, dtype=dtype, g_low=g_low, g_high=g_low / 2 if g_low < -1 else 0.0)
    check(run(runtime, a, chunk), a, dtype=dtype)
    assert {"chunk_prepare_mma", "chunk_sweep_mma"} <= set(launches)
    assert "chunk_sweep" not in launches and ("pad_tokens" in launches) == (T % chunk != 0)


@pytest.mark.feature("gated_delta: group sweep")
@pytest.mark.parametrize("dtype,T,K,V,g_low", [("bf16", 150, 32, 64, -1.0), ("f16", 64, 64, 128, -60.0)])
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_group_sweep(runtime, rng, monkeypatch, launches, dtype, T, K, V, g_low):
    """The group-product kernels (chunk_prepare_group.py, chunk_state_group.py,
    chunk_output_group.py), which the entry point takes only where wgmma is on hardware, forced
    here so every runtime checks them on the exact emulation (bulk copies, arrival barriers and
    group products emulated): chunks of 64; T = 150 pads its third chunk and refills the ring
    (32-byte layout, one tile of columns); T = 64 with K = 64 and two column tiles takes the
    128-byte layout, with decays that forget the state every step."""
    from rudnn import gated_delta as package
    monkeypatch.setattr(package, "group_sweep", lambda caps, dt, K, V, C: True)
    a = arrays(rng, B=1, H=2, T=T, K=K, V=V, dtype=dtype, g_low=g_low, g_high=g_low / 2 if g_low < -1 else 0.0)
    check(run(runtime, a, 64), a, dtype=dtype)
    assert {"chunk_prepare_group", "chunk_state_group", "chunk_output_group"} <= set(launches)
    assert not {"chunk_prepare_mma", "chunk_sweep_mma"} & set(launches) and ("pad_tokens" in launches) == (T % 64 != 0)


@pytest.mark.feature("gated_delta: group sweep")
def test_group_sweep_unaligned_inputs(runtime, rng, monkeypatch, launches):
    """A query starting one element past a 16-byte boundary (T a whole chunk): the bulk copies
    could not read it, so the group path copies it (pad_tokens) and gives the same result."""
    from rudnn import gated_delta as package
    monkeypatch.setattr(package, "group_sweep", lambda caps, dt, K, V, C: True)
    a = arrays(rng, B=1, H=1, T=64, K=16, V=64, dtype="bf16")
    flat = runtime.tensor(np.concatenate([np.zeros(1, a[0].dtype), a[0].reshape(-1)]))
    q = flat[1:].reshape(a[0].shape)
    res = chunk_gated_delta_rule(GatedDeltaInput(q, *(runtime.tensor(x) for x in a[1:5]), runtime.tensor(a[5]),
                                                 SCALE), 64)
    check((res.output.numpy(), res.final_state.numpy()), a, dtype="bf16")
    assert launches.count("pad_tokens") == 1 and "chunk_state_group" in launches


@pytest.mark.feature("gated_delta: group sweep")
def test_group_prepare_every_block_of_the_inverse(runtime, rng):
    """chunk_prepare_group's wn, u, kd and gc against float64 numpy with weak decays and
    correlated keys, so the blocks of (I + A)⁻¹ far below the diagonal are large (the entry
    point's tests decay them to nothing); T = 100 pads its second chunk."""
    from rudnn.gated_delta.chunk_prepare_group import chunk_prepare_group
    from rudnn.gated_delta.tuning import group_swizzle
    T, K, V, C = 100, 32, 64, 64
    Tp = 128
    bf = kd.as_dtype("bf16").np
    k = rng.standard_normal((Tp, K))
    k = k / np.linalg.norm(k, axis=-1, keepdims=True) + 0.3
    k[T:] = 0
    v = rng.standard_normal((Tp, V))
    v[T:] = 0
    k, v = k.astype(bf), v.astype(bf)
    beta = rng.uniform(0.3, 1.0, (1, T)).astype(bf)
    g = rng.uniform(-0.03, 0.0, (1, T)).astype(np.float32)
    gc = runtime.empty((1, Tp), kd.f32)
    wn, kdk, u = runtime.empty((Tp, K), kd.bf16), runtime.empty((Tp, K), kd.bf16), runtime.empty((Tp, V), kd.bf16)
    chunk_prepare_group[2, 4 * runtime.plane_dim](runtime.tensor(k), runtime.tensor(v), runtime.tensor(beta),
                                                  runtime.tensor(g), gc, wn, u, kdk, T, K, V, C,
                                                  group_swizzle(K, C), group_swizzle(V, C))
    got = [x.numpy().astype(np.float64) for x in (wn, u, kdk)] + [gc.numpy()[0].astype(np.float64)]
    kk, vv = k.astype(np.float64), v.astype(np.float64)
    b, gg = np.zeros(Tp), np.zeros(Tp)
    b[:T], gg[:T] = beta[0], g[0]
    for n in range(2):
        s = slice(n * C, n * C + C)
        G = np.cumsum(gg[s])
        A = np.tril(b[s, None] * np.exp(G[:, None] - G[None, :]) * (kk[s] @ kk[s].T), -1)
        tm = np.linalg.inv(np.eye(C) + A)
        assert n == 1 or np.abs(tm[48:, :16]).max() > 1.0  # the far block matters (chunk 0: whole)
        want = [-(tm * (b[s] * np.exp(G))) @ kk[s], (tm * b[s]) @ vv[s], np.exp(G[-1] - G)[:, None] * kk[s], G]
        for x, w in zip(got, want):
            np.testing.assert_allclose(x[s], w, atol=2e-2 * np.abs(w).max())


def test_group_sweep_only_where_native(runtime):
    """Auto's choice reads capabilities only: wgmma on hardware, chunks of 64, whole tiles; an
    sm_90 record takes it, an sm_80 one (mma.sync only) does not."""
    from kerneldsl.backends.cuda.capabilities import for_arch
    from rudnn.gated_delta.tuning import group_sweep
    caps = runtime.capabilities
    assert group_sweep(caps, kd.bf16, 128, 128, 64) is (caps.group_mma_native and "mma" in caps.matrix_kinds)
    h200 = for_arch("sm_90")
    assert group_sweep(h200, kd.bf16, 128, 128, 64) and group_sweep(h200, kd.f16, 256, 64, 64)
    assert not group_sweep(h200, kd.f32, 128, 128, 64) and not group_sweep(h200, kd.bf16, 128, 128, 32)
    assert not group_sweep(h200, kd.bf16, 120, 128, 64) and not group_sweep(h200, kd.bf16, 128, 96, 64)
    assert not group_sweep(for_arch("sm_80"), kd.bf16, 128, 128, 64)


def test_matrix_sweep_only_where_native(runtime):
    """Auto's choice reads capabilities only: the primitive on hardware, whole tiles."""
    from rudnn.gated_delta.tuning import matrix_sweep
    caps = runtime.capabilities
    native = "mma" in caps.matrix_kinds
    assert matrix_sweep(caps, kd.bf16, 128, 128, 64) is native
    assert not matrix_sweep(caps, kd.f32, 128, 128, 64)
    assert not matrix_sweep(caps, kd.bf16, 120, 128, 64) and not matrix_sweep(caps, kd.bf16, 128, 80, 64)
    assert not matrix_sweep(caps, kd.bf16, 128, 128, 48)


@pytest.mark.feature("gated_delta: planes kernel")
@pytest.mark.parametrize("prefetch", [False, True], ids=["in-step", "prefetch"])
@pytest.mark.parametrize("B,H,T,K,V,dtype", [(2, 3, 0, 20, 24, "f32"), (2, 3, 1, 20, 24, "bf16"), (1, 2, 3, 9, 33, "f32"),
                                             (3, 1, 3, 40, 6, "f16"), (1, 2, 3, 33, 7, "f32"), (1, 1, 2, 300, 4, "f32"),
                                             (1, 2, 4, 128, 64, "bf16")])
def test_planes_kernel(runtime, rng, monkeypatch, launches, prefetch, B, H, T, K, V, dtype):
    """The K-rows-across-lanes kernel (recurrent_planes.py), which the entry point takes only
    on GPUs (hardware shuffles, shared memory on chip), forced here on every runtime, with the
    next token read early and in its step: T 0/1/3/4, K ≠ V, K not a multiple of the rows a
    plane covers, K beyond a lane's registers at full width (fewer lanes a row, narrower
    accesses), V narrower than a plane's columns, 1-, 2-, 4- and 8-wide column accesses,
    several lanes a row and one."""
    from rudnn import gated_delta as package
    real = package.plane_tiling
    monkeypatch.setattr(package, "prefer_planes", lambda caps: True)
    monkeypatch.setattr(package, "plane_tiling", lambda *args: dataclasses.replace(real(*args), prefetch=prefetch))
    a = arrays(rng, B=B, H=H, T=T, K=K, V=V, dtype=dtype)
    out, state = run(runtime, a)
    if T:
        check((out, state), a, dtype=dtype)
    else:
        assert out.shape == (B, H, 0, V) and np.array_equal(state, a[5])
    assert set(launches) - {"_strided_copy"} == ({"gated_delta_recurrent_planes"} if T else set())


@pytest.mark.feature("gated_delta: planes kernel")
def test_planes_kernel_unaligned_state(runtime, rng, monkeypatch):
    """An initial_state starting one element past a vector boundary: the planes kernel reads
    and writes its columns one at a time, with the same result."""
    from rudnn import gated_delta as package
    from rudnn.gated_delta.tuning import plane_tiling
    monkeypatch.setattr(package, "prefer_planes", lambda caps: True)
    a = arrays(rng, B=1, H=2, T=5, K=12, V=16)
    flat = runtime.tensor(np.concatenate([[0.0], a[5].reshape(-1)]).astype(np.float32))
    s0 = flat[1:].reshape(a[5].shape)
    assert s0.offset == 1
    assert plane_tiling(runtime.capabilities, 12, 16, 5, 2, lambda w: s0.offset % w == 0).width == 1
    res = gated_delta_rule(GatedDeltaInput(*(runtime.tensor(x) for x in a[:5]), s0, SCALE))
    check((res.output.numpy(), res.final_state.numpy()), a)


def test_plane_tiling_fits_registers(runtime):
    """A lane of the planes kernel holds at most PLANE_STATE_FLOATS state values; its accesses
    are as wide as V and the alignment allow, with up to a line of a row an access; a K too
    tall for one column a lane gives None (the row-group kernel runs it); the choice reads
    capabilities only."""
    from rudnn.gated_delta.tuning import LINE_BYTES, PLANE_STATE_FLOATS, plane_tiling, prefer_planes
    caps = runtime.capabilities
    pd = caps.plane_dim
    for K, V in ((128, 128), (256, 128), (20, 24), (9, 33), (40, 6), (500, 64)):
        til = plane_tiling(caps, K, V, 3, 4, lambda w: True)
        assert pd % til.lanes == 0 and -(-K // (pd // til.lanes)) * til.width <= PLANE_STATE_FLOATS
        assert V % til.width == 0 and til.width <= 8 and til.lanes * til.width * 4 <= LINE_BYTES
        assert til.columns == til.planes * til.lanes * til.width
    narrow = plane_tiling(caps, 128, 128, 1, 4, lambda w: w <= 2)
    assert narrow.width == min(2, plane_tiling(caps, 128, 128, 1, 4, lambda w: True).width)
    assert plane_tiling(caps, PLANE_STATE_FLOATS * pd + 1, 8, 1, 4, lambda w: True) is None
    assert prefer_planes(caps) == (caps.native_plane_ops and not caps.units_are_simd_lanes
                                   and not caps.shared_memory_emulated)


def test_plane_tiling_on_a_gpu_record():
    """The shapes an H200 runs (an sm_90 record with its 132 multiprocessors, no device needed):
    4 lanes of 16-byte accesses a row (64 bytes of a row an access, 16 rows a lane), 2 planes a
    cube; the next token read early for one token and where the grid's planes run at once."""
    from kerneldsl.backends.cuda.capabilities import for_arch
    from rudnn.gated_delta.tuning import RESIDENT_PLANES, PlaneTiling, plane_tiling, prefer_planes
    caps = dataclasses.replace(for_arch("sm_90"), compute_units=132)
    assert prefer_planes(caps)
    assert plane_tiling(caps, 128, 128, 1, 4096, lambda w: True) == PlaneTiling(2, 4, 4, True)
    assert plane_tiling(caps, 128, 128, 4, 1024, lambda w: True) == PlaneTiling(2, 4, 4, False)
    assert plane_tiling(caps, 128, 128, 1024, 64, lambda w: True) == PlaneTiling(2, 4, 4, True)
    fits = 132 * RESIDENT_PLANES // 8  # (b, h) pairs whose 8 planes all run at once
    assert plane_tiling(caps, 128, 128, 2, fits, lambda w: True).prefetch
    assert not plane_tiling(caps, 128, 128, 2, fits + 1, lambda w: True).prefetch


# ---------------------------------------------------------------------------- errors
@pytest.fixture
def launches(monkeypatch):
    """Names of the kernels launched (validation must fail before any)."""
    names = []
    on_launch(monkeypatch, lambda kernel: names.append(kernel.__name__))
    return names


def _bad_calls(rt):
    a = arrays(np.random.default_rng(0), B=1, H=2, T=5, K=4, V=3)
    good = make_input(rt, a)

    def with_(**kw):
        d = dict(good.__dict__)
        d.update(kw)
        return GatedDeltaInput(**d)

    def t(shape, dtype=np.float32):
        return rt.tensor(np.zeros(shape, dtype))

    foreign = kd.Tensor(_OtherRuntime(), good.beta.buffer, good.beta.shape, good.beta.dtype)
    # the same query strided ([B, T, H, K] in memory): packed by a launch, after every check
    strided = with_(query=rt.tensor(np.ascontiguousarray(a[0].transpose(0, 2, 1, 3))).permute(0, 2, 1, 3))
    assert not strided.query.is_contiguous()
    limit = rt.capabilities.max_shared_bytes
    too_big = 1
    while 4 * (too_big * too_big + too_big) <= limit:
        too_big *= 2
    return [
        ("input must be a GatedDeltaInput", lambda f: f(dict(query=1))),
        ("input.query must be a kerneldsl tensor", lambda f: f(with_(query=np.zeros((1, 2, 5, 4))))),
        ("input.query must be F32, F16 or BF16", lambda f: f(with_(query=t((1, 2, 5, 4), np.int32)))),
        ("input.query must have rank 4", lambda f: f(with_(query=t((2, 5, 4))))),
        ("B > 0", lambda f: f(with_(query=t((0, 2, 5, 4))))),
        ("H > 0", lambda f: f(with_(query=t((1, 0, 5, 4))))),
        ("K > 0", lambda f: f(with_(query=t((1, 2, 5, 0))))),
        ("input.key must have the dtype of input.query", lambda f: f(with_(key=t((1, 2, 5, 4), np.float16)))),
        ("input.key must have shape [1, 2, 5, 4]", lambda f: f(with_(key=t((1, 2, 5, 5))))),
        ("input.value must have rank 4", lambda f: f(with_(value=t((1, 2, 5))))),
        ("V > 0", lambda f: f(with_(value=t((1, 2, 5, 0))))),
        ("input.value must have shape [1, 2, 5, 6]", lambda f: f(with_(value=t((1, 2, 4, 6))))),
        ("input.value must have the dtype of input.query", lambda f: f(with_(value=t((1, 2, 5, 3), np.float16)))),
        ("input.beta must have shape [1, 2, 5]", lambda f: f(with_(beta=t((1, 2, 5, 1))))),
        ("input.beta must have the dtype of input.query", lambda f: f(with_(beta=t((1, 2, 5), np.float16)))),
        ("input.log_decay must be F32", lambda f: f(with_(log_decay=t((1, 2, 5), np.float16)))),
        ("input.log_decay must have shape [1, 2, 5]", lambda f: f(with_(log_decay=t((1, 2, 6))))),
        ("input.initial_state must be F32", lambda f: f(with_(initial_state=t((1, 2, 4, 3), np.float16)))),
        ("input.initial_state must have shape [1, 2, 4, 3]", lambda f: f(with_(initial_state=t((1, 2, 3, 4))))),
        ("input.initial_state must be a kerneldsl tensor", lambda f: f(with_(initial_state=None))),
        ("input.query_scale must be a finite number", lambda f: f(with_(query_scale=float("nan")))),
        ("input.query_scale must be a finite number", lambda f: f(with_(query_scale=float("inf")))),
        ("input.query_scale must be a number", lambda f: f(with_(query_scale="0.5"))),
        ("'other'", lambda f: f(with_(beta=foreign))),
    ], [
        ("chunk_size must be an int", 16.0),
        ("chunk_size must be >= 1", 0),
        ("chunk_size must be >= 1", -4),
        ("chunk_size must be an int", True),
        (f"chunk_size {too_big} needs a triangular workspace", too_big),
    ], (good, strided)


@pytest.mark.feature("gated_delta: errors")
@pytest.mark.parametrize("layout", ["packed", "strided"])
def test_sizes_past_what_a_cube_holds_are_unavailable_before_launch(runtime, launches, layout):
    """K past what a recurrent cube holds (16 state rows a unit), and K with a chunk whose one
    state column passes the shared memory, raise "unavailable" with nothing launched, a
    strided query (packed by a launch once checked) included."""
    caps = runtime.capabilities

    def call(K):
        z = lambda *s: runtime.tensor(np.zeros(s, np.float32))  # noqa: E731
        q = z(1, 1, 1, K) if layout == "packed" else runtime.tensor(np.zeros((1, 1, 1, 2 * K), np.float32))[..., ::2]
        return GatedDeltaInput(q, z(1, 1, 1, K), z(1, 1, 1, 1), z(1, 1, 1), z(1, 1, 1), z(1, 1, K, 1), 1.0)

    K = 16 * (caps.max_cube_units + 1)
    with pytest.raises(GatedDeltaError, match=f"gated_delta_rule: K = {K} needs .* units a cube.*unavailable"):
        gated_delta_rule(call(K))
    K = caps.max_shared_bytes // 4
    with pytest.raises(GatedDeltaError, match=f"chunk_gated_delta_rule: K = {K} with chunk_size 1 .*unavailable"):
        chunk_gated_delta_rule(call(K), 1)
    assert launches == []


@pytest.mark.feature("gated_delta: errors")
def test_every_error_rule_before_launch(runtime, launches):
    common, chunk_rules, inputs = _bad_calls(runtime)
    entries = {"gated_delta_rule": gated_delta_rule,
               "chunk_gated_delta_rule": lambda inp: chunk_gated_delta_rule(inp, 16)}
    for fn, entry in entries.items():
        for needle, call in common:
            with pytest.raises(GatedDeltaError) as info:
                call(entry)
            msg = str(info.value)
            assert msg.startswith(fn + ": ") and needle in msg, msg
            assert isinstance(info.value, rudnn.RudnnError) and isinstance(info.value, ValueError)
    for needle, chunk in chunk_rules:
        for good in inputs:
            with pytest.raises(GatedDeltaError, match="chunk_gated_delta_rule: ") as info:
                chunk_gated_delta_rule(good, chunk)
            assert needle in str(info.value), str(info.value)
    assert launches == []
    assert rudnn.GatedDeltaError is GatedDeltaError


@pytest.mark.feature("gated_delta: errors")
def test_mixed_runtimes_name_both(runtime, rng):
    others = [n for n in kd.available_runtimes() if kd.runtime(n).device_key != runtime.device_key]
    if not others:
        pytest.skip("this machine has a single runtime device; the stand-in runtime test covers the message")
    other = kd.runtime(others[0])
    a = arrays(rng, T=3)
    inp = GatedDeltaInput(*(runtime.tensor(x) for x in a[:5]), other.tensor(a[5]), SCALE)
    with pytest.raises(GatedDeltaError, match=f"{other.name}.*{runtime.name}"):
        gated_delta_rule(inp)
