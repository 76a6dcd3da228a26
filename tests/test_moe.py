"""rudnn.moe (SPEC §2): routing, dispatch, combine and SwiGLU experts on every runtime,
against the float64 numpy models in tests/reference/moe.py and PyTorch where installed."""
import numpy as np
import pytest

import kerneldsl as kd
import rudnn
from rudnn import moe
from rudnn.moe import GroupedStrategy, GroupRoutingOptions, MoeError, RoutingOptions
from rudnn.moe import gemm_roles
from rudnn.moe.tiles import tile_count_bound

from conftest import tol
from family_checks import refuse_launches
from reference import moe as ref

pytestmark = pytest.mark.feature("moe")

DTYPES = ["f32", "f16", "bf16"]


def host(dt, a):
    return np.asarray(a).astype(kd.as_dtype(dt).np)


def f64(t):
    return t.numpy().astype(np.float64)


def make_experts(rt, rng, E, H, I, dt, scale=0.3):
    ws = [host(dt, rng.standard_normal(s) * scale) for s in ((E, I, H), (E, I, H), (E, H, I))]
    return ws, moe.SwiGluExperts(*(rt.tensor(w) for w in ws))


def close(got, want, dt, scale=1.0):
    """Relative to the output's magnitude: intermediates may be stored in the weight dtype."""
    rtol, atol = tol(dt)
    mag = max(1.0, float(np.nanmax(np.abs(want)))) if np.size(want) else 1.0
    np.testing.assert_allclose(got, want, rtol=rtol * 4 * scale, atol=atol * 4 * scale * mag)


@pytest.fixture
def no_launch(monkeypatch):
    """Any kernel launch fails the test (for zero-size inputs and validation errors)."""
    refuse_launches(monkeypatch)


@pytest.fixture(params=["cube", "plane"])
def kernel_path(request, monkeypatch):
    """Runs a routing test through the one-cube-per-token kernels and, where the row fits
    a plane, the one-plane-per-token kernels, on every runtime (each back end has a default)."""
    from rudnn.moe import routing
    monkeypatch.setattr(routing, "PLANE_KERNELS", "never" if request.param == "cube" else "always")
    return request.param


# ---------------------------------------------------------------------- softmax routing
SOFTMAX_CASES = [("f32", 7, 5, 2, True), ("f32", 13, 64, 6, False), ("f32", 3, 300, 4, True), ("f32", 2, 1, 1, False),
                 ("f32", 5, 7, 7, True), ("f32", 3, 2100, 3, False),   # E > 2048: keys recomputed per round
                 ("f16", 13, 64, 6, True), ("bf16", 3, 300, 4, False), ("bf16", 7, 5, 2, True)]


@pytest.mark.parametrize("dt,T,E,k,renorm", SOFTMAX_CASES)
def test_route_softmax(runtime, rng, kernel_path, dt, T, E, k, renorm):
    logits = host(dt, rng.standard_normal((T, E)) * 3)
    plan = moe.route(runtime.tensor(logits), RoutingOptions(k, renorm))
    ids, w = ref.softmax_route(logits, k, renorm)
    assert plan.tokens() == T and plan.experts() == E and plan.top_k() == k
    assert plan.expert_indices().dtype is kd.u32 and plan.weights().dtype is kd.as_dtype(dt)
    np.testing.assert_array_equal(plan.expert_indices().numpy(), ids)
    np.testing.assert_allclose(f64(plan.weights()), w, rtol=tol(dt)[0] * 2, atol=tol(dt)[1] * 2)


def test_route_softmax_ties_take_lower_id(runtime, kernel_path):
    logits = np.array([[1, 1, 1, 1, 1, 1],
                       [0, 3, 2, 3, 2, 0],
                       [-5, 4, -5, 4, 4, -5]], np.float32)
    plan = moe.route(runtime.tensor(logits), RoutingOptions(4, False))
    np.testing.assert_array_equal(plan.expert_indices().numpy(), [[0, 1, 2, 3], [1, 3, 2, 4], [1, 3, 4, 0]])
    np.testing.assert_allclose(plan.weights().numpy()[0], np.full(4, 1 / 6), rtol=1e-6)


@pytest.mark.parametrize("E", [6, 290])
def test_route_softmax_nan_and_inf_rows(runtime, kernel_path, E):
    inf, nan = np.inf, np.nan
    logits = np.zeros((6, E), np.float32)
    logits[0, 3] = nan
    logits[1, 2] = inf
    logits[2, :] = -inf
    logits[3, :] = np.arange(E)
    logits[3, E - 1] = -inf                       # -inf beside finite values: probability exactly 0
    logits[4, :] = -inf
    logits[4, 4] = 1.0                            # one finite entry: it takes all the mass
    logits[5, 1] = nan
    logits[5, 2] = inf
    plan = moe.route(runtime.tensor(logits), RoutingOptions(3, True))
    ids, w = plan.expert_indices().numpy(), plan.weights().numpy()
    for r in (0, 1, 2, 5):
        np.testing.assert_array_equal(ids[r], [0, 1, 2])
        assert np.isnan(w[r]).all()
    np.testing.assert_array_equal(ids[3], [E - 2, E - 3, E - 4])
    assert np.isfinite(w[3]).all()
    assert ids[4, 0] == 4 and w[4, 0] == 1.0
    np.testing.assert_array_equal(ids[4, 1:], [0, 1])         # zero-probability ties: lower id first
    np.testing.assert_array_equal(w[4, 1:], [0.0, 0.0])
    want_ids, want_w = ref.softmax_route(logits, 3, True)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(w, want_w, rtol=1e-6, atol=1e-7)


def test_route_softmax_against_torch(runtime, rng):
    torch = pytest.importorskip("torch", reason="PyTorch (the oracle extra) is not installed")
    logits = rng.standard_normal((33, 40)).astype(np.float32)
    plan = moe.route(runtime.tensor(logits), RoutingOptions(5, True))
    p = torch.softmax(torch.from_numpy(logits), dim=-1)
    w, i = torch.topk(p, 5, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    np.testing.assert_array_equal(plan.expert_indices().numpy(), i.numpy())
    np.testing.assert_allclose(plan.weights().numpy(), w.numpy(), rtol=1e-5, atol=1e-7)


def test_route_strided_logits(runtime, rng, kernel_path):
    full = rng.standard_normal((9, 20)).astype(np.float32)
    view = runtime.tensor(full)[::2, 3:17]              # strided rows, offset columns
    plan = moe.route(view, RoutingOptions(3, False))
    ids, w = ref.softmax_route(full[::2, 3:17], 3, False)
    np.testing.assert_array_equal(plan.expert_indices().numpy(), ids)
    np.testing.assert_allclose(plan.weights().numpy(), w, rtol=1e-5)


# ---------------------------------------------------------------------- grouped sigmoid routing
def test_route_sigmoid_grouped_worked_example(runtime, kernel_path):
    """Bias 10 on expert 0 wins it its group and its place, but its weight is its plain sigmoid."""
    logits = np.arange(8, dtype=np.float32)[None]
    bias = np.zeros(8, np.float32)
    bias[0] = 10
    opts = GroupRoutingOptions(top_k=2, groups=2, selected_groups=1, group_top_two=True, renormalize=True, scale=2.0)
    plan = moe.route_sigmoid_grouped(runtime.tensor(logits), runtime.tensor(bias), opts)
    np.testing.assert_array_equal(plan.expert_indices().numpy(), [[0, 3]])
    p = 1 / (1 + np.exp(-np.array([0.0, 3.0])))
    np.testing.assert_allclose(plan.weights().numpy()[0], p / p.sum() * 2, rtol=1e-6)
    unbiased = moe.route_sigmoid_grouped(runtime.tensor(logits), None, opts)   # without bias: group 1, [7, 6]
    np.testing.assert_array_equal(unbiased.expert_indices().numpy(), [[7, 6]])


GROUPED_CASES = [("f32", 16, 4, 2, 3, True, True), ("f32", 40, 8, 3, 5, False, False), ("f32", 7, 1, 1, 7, True, False),
                 ("f32", 256, 8, 4, 8, True, True), ("f32", 9, 9, 4, 2, False, True), ("f16", 40, 8, 3, 5, False, True),
                 ("bf16", 256, 8, 4, 8, True, False), ("bf16", 16, 4, 2, 3, True, True),
                 # groups of 8, 16 and 64 experts: one plane per token also at PLANE_DIM 8
                 ("f32", 32, 4, 3, 5, True, False), ("f16", 64, 4, 2, 6, False, True), ("f32", 64, 1, 1, 8, True, True)]


@pytest.mark.parametrize("dt,E,G,SG,k,two,renorm", GROUPED_CASES)
def test_route_sigmoid_grouped(runtime, rng, kernel_path, dt, E, G, SG, k, two, renorm):
    T = 11
    logits = host(dt, rng.standard_normal((T, E)) * 2)
    bias = (rng.standard_normal(E) * 0.5).astype(np.float32)
    opts = GroupRoutingOptions(k, G, SG, two, renorm, 1.5)
    plan = moe.route_sigmoid_grouped(runtime.tensor(logits), runtime.tensor(bias), opts)
    ids, w = ref.sigmoid_grouped_route(logits, bias, k, G, SG, two, renorm, 1.5)
    np.testing.assert_array_equal(plan.expert_indices().numpy(), ids)
    assert plan.weights().dtype is kd.as_dtype(dt)
    np.testing.assert_allclose(f64(plan.weights()), w, rtol=tol(dt)[0] * 2, atol=tol(dt)[1] * 2)


def test_route_sigmoid_grouped_ties_and_nan(runtime, kernel_path):
    logits = np.zeros((3, 8), np.float32)           # row 0: every score ties -> group 0, experts 0, 1
    logits[1] = [0, 2, 2, 0, 2, 2, 0, 0]            # row 1: groups 0 and 1 tie -> group 0, experts 1, 2
    logits[2, 5] = np.nan                           # row 2: NaN -> ids 0..k-1, NaN weights
    opts = GroupRoutingOptions(2, 2, 1, False, False, 1.0)
    plan = moe.route_sigmoid_grouped(runtime.tensor(logits), None, opts)
    ids, w = plan.expert_indices().numpy(), plan.weights().numpy()
    np.testing.assert_array_equal(ids, [[0, 1], [1, 2], [0, 1]])
    np.testing.assert_allclose(w[0], [0.5, 0.5])
    assert np.isnan(w[2]).all()
    bias = np.zeros(8, np.float32)
    bias[6] = np.nan                                # a NaN bias poisons every row
    plan = moe.route_sigmoid_grouped(runtime.tensor(logits[:1]), runtime.tensor(bias), opts)
    assert np.isnan(plan.weights().numpy()).all()


@pytest.mark.parametrize("bias_kind", ["none", "inf"])
def test_route_sigmoid_grouped_ties_and_special_bias_in_a_plane(runtime, rng, kernel_path, bias_kind):
    """Groups of 8 (one lane each): tied groups and experts, -inf/+inf bias, a NaN row."""
    T, E, G = 7, 32, 4
    logits = rng.standard_normal((T, E)).astype(np.float32)
    logits[0] = 0.0                                 # all tie: group 0, experts 0, 1, 2
    logits[1] = np.tile([0, 1, 2, 2, 0, 0, 0, 0], 4)  # every group ties: group 0, experts 2, 3, 1
    logits[2, 17] = np.nan
    bias = None
    if bias_kind == "inf":
        bias = np.zeros(E, np.float32)
        bias[[5, 9, 30]] = [-np.inf, np.inf, -np.inf]
    opts = GroupRoutingOptions(3, G, 1, True, True, 1.0)
    plan = moe.route_sigmoid_grouped(runtime.tensor(logits), None if bias is None else runtime.tensor(bias), opts)
    ids, w = ref.sigmoid_grouped_route(logits, bias, 3, G, 1, True, True, 1.0)
    np.testing.assert_array_equal(plan.expert_indices().numpy(), ids)
    np.testing.assert_allclose(plan.weights().numpy(), w, rtol=1e-6, atol=1e-7)
    if bias is None:
        np.testing.assert_array_equal(ids[:3], [[0, 1, 2], [2, 3, 1], [0, 1, 2]])


def test_route_sigmoid_grouped_against_torch(runtime, rng):
    torch = pytest.importorskip("torch", reason="PyTorch (the oracle extra) is not installed")
    T, E, G, SG, k = 17, 32, 4, 2, 4
    logits = rng.standard_normal((T, E)).astype(np.float32)
    bias = (rng.standard_normal(E) * 0.3).astype(np.float32)
    plan = moe.route_sigmoid_grouped(runtime.tensor(logits), runtime.tensor(bias),
                                     GroupRoutingOptions(k, G, SG, True, True, 2.5))
    s = torch.sigmoid(torch.from_numpy(logits))
    c = s + torch.from_numpy(bias)
    gscore = c.view(T, G, -1).topk(2, dim=-1)[0].sum(-1)
    gidx = gscore.topk(SG, dim=-1)[1]
    mask = torch.zeros(T, G).scatter_(1, gidx, 1.0).unsqueeze(-1).expand(T, G, E // G).reshape(T, E)
    idx = c.masked_fill(mask == 0, float("-inf")).topk(k, dim=-1)[1]
    w = s.gather(1, idx)
    w = w / w.sum(-1, keepdim=True) * 2.5
    np.testing.assert_array_equal(plan.expert_indices().numpy(), idx.numpy())
    np.testing.assert_allclose(plan.weights().numpy(), w.numpy(), rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------- dispatch and combine
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("T,E,k,H", [(9, 5, 2, 13), (2, 10, 3, 300), (31, 3, 3, 1)])
def test_dispatch_groups_rows_by_expert(runtime, rng, dt, T, E, k, H):
    x = host(dt, rng.standard_normal((T, H)))
    plan = moe.route(runtime.tensor(rng.standard_normal((T, E)).astype(np.float32)), RoutingOptions(k, True))
    d = plan.dispatch(runtime.tensor(x))
    want_v, want_e, want_off = ref.dispatch(plan.expert_indices().numpy(), x, E)
    offsets = d.expert_offsets().numpy()
    assert d.expert_offsets().dtype is kd.u32 and d.row_experts().dtype is kd.u32
    np.testing.assert_array_equal(offsets, want_off)
    np.testing.assert_array_equal(d.row_experts().numpy(), want_e)
    got = d.values().numpy()
    assert got.dtype == x.dtype and got.shape == (T * k, H)
    for e in range(E):                              # order inside an expert is unspecified
        a, b = got[offsets[e]:offsets[e + 1]], want_v[offsets[e]:offsets[e + 1]]
        np.testing.assert_array_equal(a[np.lexsort(a.T[::-1])], b[np.lexsort(b.T[::-1])])
    if T * k < E:
        assert (np.diff(offsets) == 0).any()        # some experts are empty


@pytest.mark.parametrize("small", [True, False])
def test_dispatch_counts_in_one_cube_or_across_cubes(runtime, rng, monkeypatch, small):
    """Few pairs count and scan in one launch (count_and_scan, shared-memory counts); others
    (forced here by SMALL_PAIRS = 0) count across cubes and scan after. Both group rows by
    expert as the reference does, with empty experts and experts past the first cube's units."""
    from family_checks import on_launch
    from rudnn.moe import dispatch as dispatch_module
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    if not small:
        monkeypatch.setattr(dispatch_module, "SMALL_PAIRS", 0)
    names = []
    on_launch(monkeypatch, lambda kernel: names.append(kernel.__name__))
    T, E, k, H = 300, 600, 2, 3
    x = rng.standard_normal((T, H)).astype(np.float32)
    plan = moe.route(runtime.tensor(rng.standard_normal((T, E)).astype(np.float32)), RoutingOptions(k, True))
    names.clear()
    d = plan.dispatch(runtime.tensor(x))
    want = ["count_and_scan"] if small else ["count_experts", "exclusive_scan"]
    assert names == want + ["place_rows"]
    want_v, want_e, want_off = ref.dispatch(plan.expert_indices().numpy(), x, E)
    offsets = d.expert_offsets().numpy()
    np.testing.assert_array_equal(offsets, want_off)
    np.testing.assert_array_equal(d.row_experts().numpy(), want_e)
    got = d.values().numpy()
    for e in range(E):
        a, b = got[offsets[e]:offsets[e + 1]], want_v[offsets[e]:offsets[e + 1]]
        np.testing.assert_array_equal(a[np.lexsort(a.T[::-1])], b[np.lexsort(b.T[::-1])])
    assert (np.diff(offsets) == 0).any() and offsets[-1] == T * k


@pytest.mark.parametrize("dt", DTYPES)
def test_combine_weighted_sum(runtime, rng, dt):
    T, E, k, H, W = 12, 6, 3, 5, 37
    x = host(dt, rng.standard_normal((T, H)))
    plan = moe.route(runtime.tensor(host(dt, rng.standard_normal((T, E)))), RoutingOptions(k, False))
    d = plan.dispatch(runtime.tensor(x))
    # expert output of a row: a fixed per-expert map of its values, so the mapping is checked
    proj = rng.standard_normal((E, H, W))
    vals, experts = d.values().numpy().astype(np.float64), d.row_experts().numpy()
    eo = host(dt, np.einsum("rh,rhw->rw", vals, proj[experts]))
    out = d.combine(runtime.tensor(eo))
    assert out.shape == (T, W) and out.dtype is kd.as_dtype(dt)
    ids, w = plan.expert_indices().numpy(), f64(plan.weights())
    want = np.zeros((T, W))
    for j in range(k):
        want += w[:, j:j + 1] * host(dt, np.einsum("th,thw->tw", x.astype(np.float64), proj[ids[:, j]]))
    close(f64(out), want, dt)


def test_combine_sums_in_ascending_expert_order(runtime):
    """2**27 + 1 rounds back to 2**27 in f32, so the order of the sum shows in the result."""
    ids = np.array([[2, 0, 1]], np.uint32)           # best-weight order differs from id order
    plan = moe.RoutingPlan(runtime.tensor(ids), runtime.tensor(np.ones((1, 3), np.float32)), 3)
    d = plan.dispatch(runtime.tensor(np.zeros((1, 4), np.float32)))
    per_expert = np.array([2.0 ** 27, 1.0, -(2.0 ** 27)], np.float32)
    eo = np.repeat(per_expert[d.row_experts().numpy()][:, None], 4, axis=1)
    out = d.combine(runtime.tensor(eo)).numpy()
    ascending = np.float32(np.float32(np.float32(0) + per_expert[0]) + per_expert[1]) + per_expert[2]
    slot_order = np.float32(np.float32(per_expert[2] + per_expert[0]) + per_expert[1])
    assert ascending != slot_order
    np.testing.assert_array_equal(out, np.full((1, 4), ascending))


def test_combine_rejects_bad_expert_output(runtime, rng):
    plan = moe.route(runtime.tensor(rng.standard_normal((4, 3)).astype(np.float32)), RoutingOptions(2, True))
    d = plan.dispatch(runtime.tensor(rng.standard_normal((4, 6)).astype(np.float32)))
    with pytest.raises(MoeError, match="rows"):
        d.combine(runtime.zeros((7, 6), "f32"))
    with pytest.raises(MoeError, match="dtype"):
        d.combine(runtime.zeros((8, 6), "bf16"))
    with pytest.raises(MoeError, match="rank"):
        d.combine(runtime.zeros((8,), "f32"))
    with pytest.raises(MoeError, match="F32"):
        d.combine(runtime.zeros((8, 6), "i32"))


# ---------------------------------------------------------------------- experts
@pytest.mark.parametrize("dt", DTYPES)     # 80 rows: several groups of row tiles in the cube order
@pytest.mark.parametrize("T,E,k,H,I", [(40, 3, 2, 37, 23), (3, 7, 2, 16, 40), (1, 1, 1, 5, 3)])
def test_experts_scalar_dispatched(runtime, rng, dt, T, E, k, H, I):
    (gate, up, down), ex = make_experts(runtime, rng, E, H, I, dt)
    x = host(dt, rng.standard_normal((T, H)))
    plan = moe.route(runtime.tensor(rng.standard_normal((T, E)).astype(np.float32)), RoutingOptions(k, True))
    d = plan.dispatch(runtime.tensor(x))
    y = ex.forward_dispatched(d)
    assert y.shape == (T * k, H) and y.dtype is kd.as_dtype(dt)
    want = ref.swiglu_rows(d.values().numpy(), d.row_experts().numpy(), gate, up, down)
    close(f64(y), want, dt)


def test_dispatched_experts_replay_reads_each_calls_routing(runtime, rng):
    """forward_dispatched is replayed per layout: dispatches of one layout but other routings
    (each expert's row count differs, so do the row tiles) each get their own rows' results,
    whichever experts ran on a dispatch before (two sets of experts take turns on each)."""
    sets = [make_experts(runtime, rng, 4, 16, inner, "f32") for inner in (8, 12)]
    x = runtime.tensor(rng.standard_normal((6, 16)).astype(np.float32))
    dispatches = []
    for favoured in (0, 3, 1):  # most rows to one expert, another each time
        logits = rng.standard_normal((6, 4)).astype(np.float32)
        logits[:, favoured] += 4.0
        dispatches.append(moe.route(runtime.tensor(logits), RoutingOptions(2, True)).dispatch(x))
    counts = {tuple(np.diff(d.expert_offsets().numpy())) for d in dispatches}
    assert len(counts) == 3
    for d in dispatches + dispatches[:1]:
        for (gate, up, down), ex in sets:
            want = ref.swiglu_rows(d.values().numpy(), d.row_experts().numpy(), gate, up, down)
            close(f64(ex.forward_dispatched(d)), want, "f32")


def test_scalar_experts_may_run_on_the_calling_thread(rng):
    """The scalar grouped GEMMs find their expert in steps set by E alone, not by the offsets,
    so their work is fixed by their arguments and the cpu runtime may run a small launch of
    them on the calling thread (kerneldsl/loop_bounds.py); with an empty expert, against the
    reference."""
    from rudnn.moe import gemm_scalar
    rt = kd.runtime("cpu")
    (gate, up, down), ex = make_experts(rt, rng, 6, 16, 8, "f32")
    x = rng.standard_normal((4, 16)).astype(np.float32)
    logits = np.full((4, 6), -9.0, np.float32)
    logits[:, :5] = rng.standard_normal((4, 5))        # expert 5 gets no row
    d = moe.route(rt.tensor(logits), RoutingOptions(2, True)).dispatch(rt.tensor(x))
    assert d.expert_offsets().numpy()[-2] == d.expert_offsets().numpy()[-1]
    want = ref.swiglu_rows(d.values().numpy(), d.row_experts().numpy(), gate, up, down)
    close(f64(ex.forward_dispatched(d)), want, "f32")
    for kernel in (gemm_scalar.grouped_gemm, gemm_scalar.grouped_gemm_swiglu):
        plans = list(kernel._plans.values())
        assert plans and all(p.binary.info.argument_bound for p in plans), kernel.__name__


@kd.kernel
def scale_in_place(x: kd.Tensor[kd.f32, 1], s: kd.f32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < x.shape[0]:
        x[i] = x[i] * s


def test_expert_weights_are_read_only_and_updates_in_place_are_seen(runtime, rng):
    """A replayed forward keys on the weights once (replay_fields_fixed): they cannot be
    reassigned, and a change of their values in place shows in the next (replayed) forward."""
    (gate, up, down), ex = make_experts(runtime, rng, 4, 16, 8, "f32")
    with pytest.raises(AttributeError):
        ex.gate = ex.up
    x = rng.standard_normal((6, 16)).astype(np.float32)
    logits = rng.standard_normal((6, 4)).astype(np.float32)
    opts = RoutingOptions(2, True)
    ids, w = ref.softmax_route(logits, 2, True)
    X, L = runtime.tensor(x), runtime.tensor(logits)
    for _ in range(2):  # recorded, then replayed
        close(f64(ex.forward(X, L, opts)), ref.moe_forward(x, ids, w, gate, up, down), "f32")
    flat = ex.down.reshape(ex.down.size)
    scale_in_place[-(-flat.size // 64), 64](flat, 2.0)
    close(f64(ex.forward(X, L, opts)), ref.moe_forward(x, ids, w, gate, up, 2 * down), "f32")


# 16-byte loads with K tails and one expert filling whole 128-row tiles (fragments stored straight
# to memory) beside partial tiles; 16-byte loads without K tails; element loads (H, I not multiples of 8)
@pytest.mark.parametrize("dt,T,E,k,H,I", [("f16", 140, 1, 1, 136, 40), ("bf16", 140, 2, 1, 128, 64),
                                          ("bf16", 20, 5, 3, 37, 21)])
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_experts_tensor_core(runtime, rng, dt, T, E, k, H, I):
    if kd.as_dtype(dt) not in runtime.capabilities.mma_dtypes:
        pytest.skip(f"{runtime.name} has no {dt} matrix fragments")
    (gate, up, down), ex = make_experts(runtime, rng, E, H, I, dt)
    x = host(dt, rng.standard_normal((T, H)))
    plan = moe.route(runtime.tensor(rng.standard_normal((T, E)).astype(np.float32)), RoutingOptions(k, True))
    d = plan.dispatch(runtime.tensor(x))
    y = ex.forward_dispatched_with_strategy(d, GroupedStrategy.TensorCore)
    want = ref.swiglu_rows(d.values().numpy(), d.row_experts().numpy(), gate, up, down)
    close(f64(y), want, dt)


# the roles kernels (the TensorCore path where bulk copies and native group products exist),
# forced on every runtime: several row tiles of one expert and partial ones, K tails (72, 40:
# not whole 64-column steps), N tails (40 < 128, 72 < 256), an expert with no rows
@pytest.mark.parametrize("dt,T,E,k,H,I", [("bf16", 140, 2, 1, 128, 64), ("f16", 20, 5, 3, 72, 40)])
def test_experts_on_roles(runtime, rng, dt, T, E, k, H, I):
    if kd.as_dtype(dt) not in runtime.capabilities.mma_dtypes:
        pytest.skip(f"{runtime.name} has no {dt} matrix fragments")
    if runtime.capabilities.interpreted:
        pytest.skip("one unit at a time: 384-unit cubes of emulated group products take minutes (the roles GEMM "
                    "tests cover roles and bulk copies on the interpreter)")
    (gate, up, down), ex = make_experts(runtime, rng, E, H, I, dt)
    x = host(dt, rng.standard_normal((T, H)))
    logits = rng.standard_normal((T, E)).astype(np.float32)
    logits[:, E - 1] = -30.0  # expert E - 1 gets no rows when E > k
    plan = moe.route(runtime.tensor(logits), RoutingOptions(k, True))
    d = plan.dispatch(runtime.tensor(x))
    R = d.rows()
    h = runtime.empty((R, I), dt)
    y = runtime.empty((R, H), dt)
    gemm_roles.run(d.values(), ex.gate, ex.up, ex.down, h, y, d.expert_offsets(), d.tile_offsets, E,
                   lambda tm: tile_count_bound(R, E, tm))
    want = ref.swiglu_rows(d.values().numpy(), d.row_experts().numpy(), gate, up, down)
    close(f64(y), want, dt)


def test_roles_kernels_take_only_what_the_copy_engine_reads():
    """gemm_roles.usable: devices with bulk copies and native group products, and operands
    whose rows are 16-byte multiples starting on 16-byte boundaries (else the older kernels)."""
    import types
    cpu = kd.runtime("cpu")
    hopper = types.SimpleNamespace(capabilities=types.SimpleNamespace(bulk_copy=True, group_mma_native=True))
    x, w = cpu.zeros((10, 64), "bf16"), cpu.zeros((2, 32, 64), "bf16")
    assert gemm_roles.usable(hopper, (x, w)) and not gemm_roles.usable(cpu, (x, w))
    assert not gemm_roles.usable(hopper, (cpu.zeros((10, 60), "bf16"), w))              # 120-byte rows
    shifted = cpu.zeros(11 * 64, "bf16")[3:3 + 10 * 64].reshape(10, 64)                  # 6 bytes in
    assert not gemm_roles.usable(hopper, (shifted, w))
    assert not gemm_roles.usable(hopper, (cpu.zeros((10, 128), "bf16")[:, :64], w))      # not contiguous


@pytest.mark.parametrize("dt", DTYPES)
def test_auto_strategy_picks_as_documented(runtime, rng, dt):
    _, ex = make_experts(runtime, rng, 3, 16, 16, dt)
    plan = moe.route(runtime.tensor(rng.standard_normal((6, 3)).astype(np.float32)), RoutingOptions(2, True))
    d = plan.dispatch(runtime.tensor(host(dt, rng.standard_normal((6, 16)))))
    caps = runtime.capabilities
    tensor_core = dt != "f32" and kd.as_dtype(dt) in caps.mma_dtypes and caps.mma_native
    expect = GroupedStrategy.TensorCore if tensor_core else GroupedStrategy.Scalar
    auto = ex.forward_dispatched_with_strategy(d, GroupedStrategy.Auto).numpy()
    np.testing.assert_array_equal(auto, ex.forward_dispatched_with_strategy(d, expect).numpy())


def test_tensor_core_f32_is_unavailable(runtime, rng, no_launch):
    _, ex = make_experts(runtime, rng, 2, 8, 8, "f32")
    plan = moe.RoutingPlan(runtime.tensor(np.zeros((2, 1), np.uint32)), runtime.tensor(np.ones((2, 1), np.float32)), 2)
    d = moe.DispatchedTokens(plan, runtime.zeros((2, 8), "f32"), runtime.zeros((2,), "u32"),
                             runtime.tensor(np.array([0, 2, 2], np.uint32)), runtime.zeros((2,), "u32"),
                             runtime.zeros((2,), "f32"))
    with pytest.raises(MoeError, match="unavailable"):
        ex.forward_dispatched_with_strategy(d, GroupedStrategy.TensorCore)
    with pytest.raises(MoeError, match="unavailable"):
        ex.forward_sigmoid_grouped(runtime.zeros((2, 8), "f32"), runtime.zeros((2, 2), "f32"), None,
                                   GroupRoutingOptions(1, 1, 1, False, True, 1.0), GroupedStrategy.TensorCore)


# ---------------------------------------------------------------------- whole layer
@pytest.mark.parametrize("dt", DTYPES)
def test_forward_softmax_layer(runtime, rng, dt):
    T, E, k, H, I = 14, 5, 2, 24, 19
    (gate, up, down), ex = make_experts(runtime, rng, E, H, I, dt)
    x = host(dt, rng.standard_normal((T, H)))
    logits = host(dt, rng.standard_normal((T, E)))
    xt, lt = runtime.tensor(x), runtime.tensor(logits)
    out = ex.forward(xt, lt, RoutingOptions(k, True))
    assert out.shape == (T, H) and out.dtype is kd.as_dtype(dt)
    ids, w = ref.softmax_route(logits, k, True)
    close(f64(out), ref.moe_forward(x, ids, host(dt, w), gate, up, down), dt)
    np.testing.assert_array_equal(xt.numpy(), x)             # inputs untouched
    np.testing.assert_array_equal(lt.numpy(), logits)
    again = ex.forward(xt, lt, RoutingOptions(k, True))        # reusable across batches
    np.testing.assert_array_equal(again.numpy(), out.numpy())


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("strategy", list(GroupedStrategy))
def test_forward_sigmoid_grouped_layer(runtime, rng, dt, strategy):
    T, E, H, I = 9, 8, 16, 24
    opts = GroupRoutingOptions(3, 4, 2, True, True, 2.0)
    (gate, up, down), ex = make_experts(runtime, rng, E, H, I, dt)
    x = host(dt, rng.standard_normal((T, H)))
    logits = host(dt, rng.standard_normal((T, E)))
    bias = (rng.standard_normal(E) * 0.2).astype(np.float32)
    args = (runtime.tensor(x), runtime.tensor(logits), runtime.tensor(bias), opts, strategy)
    if strategy is GroupedStrategy.TensorCore and kd.as_dtype(dt) not in (set(runtime.capabilities.mma_dtypes)
                                                                           - {kd.f32}):
        with pytest.raises(MoeError, match="unavailable"):     # F32, or no fragments of this dtype
            ex.forward_sigmoid_grouped(*args)
        return
    out = ex.forward_sigmoid_grouped(*args)
    ids, w = ref.sigmoid_grouped_route(logits, bias, 3, 4, 2, True, True, 2.0)
    close(f64(out), ref.moe_forward(x, ids, host(dt, w), gate, up, down), dt)


def test_forward_against_torch(runtime, rng):
    torch = pytest.importorskip("torch", reason="PyTorch (the oracle extra) is not installed")
    F = torch.nn.functional
    T, E, k, H, I = 11, 4, 2, 20, 28
    (gate, up, down), ex = make_experts(runtime, rng, E, H, I, "f32")
    x = rng.standard_normal((T, H)).astype(np.float32)
    logits = rng.standard_normal((T, E)).astype(np.float32)
    out = ex.forward(runtime.tensor(x), runtime.tensor(logits), RoutingOptions(k, True)).numpy()
    xt = torch.from_numpy(x)
    w, i = torch.topk(torch.softmax(torch.from_numpy(logits), -1), k, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    want = torch.zeros(T, H)
    for t in range(T):
        for j in range(k):
            e = int(i[t, j])
            g, u = xt[t] @ torch.from_numpy(gate[e]).T, xt[t] @ torch.from_numpy(up[e]).T
            want[t] += w[t, j] * (F.silu(g) * u) @ torch.from_numpy(down[e]).T
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-4, atol=1e-5)


def test_strided_inputs(runtime, rng):
    T, E, H, I = 6, 3, 10, 7
    (gate, up, down), _ = make_experts(runtime, rng, E, H, I, "f32")
    ex = moe.SwiGluExperts(runtime.tensor(gate.transpose(0, 2, 1).copy()).transpose(1, 2),
                           runtime.tensor(up), runtime.tensor(down))            # gate as a permuted view
    xbig = rng.standard_normal((2 * T, H + 3)).astype(np.float32)
    x = runtime.tensor(xbig)[::2, 1:H + 1]
    logits = rng.standard_normal((T, E)).astype(np.float32)
    out = ex.forward(x, runtime.tensor(logits), RoutingOptions(2, False))
    ids, w = ref.softmax_route(logits, 2, False)
    close(out.numpy(), ref.moe_forward(xbig[::2, 1:H + 1], ids, w, gate, up, down), "f32")


# ---------------------------------------------------------------------- zero sizes
def test_zero_tokens_launch_nothing(runtime, rng, no_launch):
    E, H, I = 4, 8, 6
    _, ex = make_experts(runtime, rng, E, H, I, "f32")
    logits = runtime.zeros((0, E), "f32")
    plan = moe.route(logits, RoutingOptions(2, True))
    assert plan.expert_indices().shape == (0, 2) and plan.weights().shape == (0, 2)
    grouped = moe.route_sigmoid_grouped(logits, None, GroupRoutingOptions(2, 2, 1, True, True, 1.0))
    assert grouped.expert_indices().shape == (0, 2)
    d = plan.dispatch(runtime.zeros((0, H), "f32"))
    assert d.values().shape == (0, H) and d.row_experts().shape == (0,)
    np.testing.assert_array_equal(d.expert_offsets().numpy(), np.zeros(E + 1))
    assert ex.forward_dispatched(d).shape == (0, H)
    assert d.combine(runtime.zeros((0, 5), "f32")).shape == (0, 5)
    assert ex.forward(runtime.zeros((0, H), "f32"), logits, RoutingOptions(2, True)).shape == (0, H)


# ---------------------------------------------------------------------- errors
def test_errors_are_rudnn_errors():
    assert issubclass(MoeError, rudnn.RudnnError) and issubclass(MoeError, ValueError)
    assert rudnn.MoeError is MoeError


def test_routing_errors(runtime, no_launch):
    lg = runtime.zeros((3, 8), "f32")
    cases = [
        (lambda: moe.route(runtime.zeros((3, 8, 1), "f32"), RoutingOptions(2, True)), "rank"),
        (lambda: moe.route(runtime.zeros((3, 0), "f32"), RoutingOptions(1, True)), "at least one expert"),
        (lambda: moe.route(runtime.zeros((3, 8), "i32"), RoutingOptions(2, True)), "F32, F16 or BF16"),
        (lambda: moe.route(runtime.zeros((3, 8), "u8"), RoutingOptions(2, True)), "got U8"),
        (lambda: moe.route(np.zeros((3, 8), np.float32), RoutingOptions(2, True)), "kerneldsl tensor"),
        (lambda: moe.route(lg, RoutingOptions(0, True)), "top_k"),
        (lambda: moe.route(lg, RoutingOptions(9, True)), "top_k"),
        (lambda: moe.route(lg, RoutingOptions(2.0, True)), "top_k must be an int"),
        (lambda: moe.route(lg, RoutingOptions(2, 1)), "renormalize must be a bool"),
        (lambda: moe.route(lg, GroupRoutingOptions(2, 2, 1, False, True, 1.0)), "RoutingOptions"),
    ]
    for call, msg in cases:
        with pytest.raises(MoeError, match=msg):
            call()


@pytest.mark.parametrize("E,opts,msg", [
    (1025, GroupRoutingOptions(1, 1, 1, False, True, 1.0), "1 to 1024 experts"),
    (8, GroupRoutingOptions(1, 0, 1, False, True, 1.0), "groups must be between 1 and 128"),
    (256, GroupRoutingOptions(1, 256, 1, False, True, 1.0), "groups must be between 1 and 128"),
    (8, GroupRoutingOptions(1, 3, 1, False, True, 1.0), "must divide"),
    (8, GroupRoutingOptions(1, 2, 0, False, True, 1.0), "selected_groups"),
    (8, GroupRoutingOptions(1, 2, 3, False, True, 1.0), "selected_groups"),
    (8, GroupRoutingOptions(0, 2, 1, False, True, 1.0), "top_k must be between 1 and 64"),
    (128, GroupRoutingOptions(65, 1, 1, False, True, 1.0), "top_k must be between 1 and 64"),
    (8, GroupRoutingOptions(5, 2, 1, False, True, 1.0), "exceeds the experts in the selected groups"),
    (8, GroupRoutingOptions(1, 8, 1, True, True, 1.0), "at least 2 experts per group"),
    (8, GroupRoutingOptions(1, 2, 1, False, True, 0.0), "scale"),
    (8, GroupRoutingOptions(1, 2, 1, False, True, float("inf")), "scale"),
    (8, GroupRoutingOptions(1, 2, 1, False, True, float("nan")), "scale"),
    (8, GroupRoutingOptions(1, 2, 1, "yes", True, 1.0), "group_top_two must be a bool"),
    (8, RoutingOptions(1, True), "GroupRoutingOptions"),
])
def test_grouped_routing_option_errors(runtime, no_launch, E, opts, msg):
    with pytest.raises(MoeError, match=msg):
        moe.route_sigmoid_grouped(runtime.zeros((2, E), "f32"), None, opts)


def test_bias_errors(runtime, no_launch):
    opts = GroupRoutingOptions(1, 2, 1, False, True, 1.0)
    lg = runtime.zeros((2, 8), "f32")
    with pytest.raises(MoeError, match=r"bias must have shape \[8\]"):
        moe.route_sigmoid_grouped(lg, runtime.zeros((7,), "f32"), opts)
    with pytest.raises(MoeError, match="bias must be F32"):
        moe.route_sigmoid_grouped(lg, runtime.zeros((8,), "bf16"), opts)
    with pytest.raises(MoeError, match="bias must have rank 1"):
        moe.route_sigmoid_grouped(lg, runtime.zeros((1, 8), "f32"), opts)


def test_dispatch_errors(runtime, rng):
    plan = moe.route(runtime.tensor(rng.standard_normal((4, 3)).astype(np.float32)), RoutingOptions(2, True))
    with pytest.raises(MoeError, match="one row per routed token"):
        plan.dispatch(runtime.zeros((5, 6), "f32"))
    with pytest.raises(MoeError, match="H > 0"):
        plan.dispatch(runtime.zeros((4, 0), "f32"))
    with pytest.raises(MoeError, match="input must be F32"):
        plan.dispatch(runtime.zeros((4, 6), "i32"))
    with pytest.raises(MoeError, match="rank"):
        plan.dispatch(runtime.zeros((4, 6, 1), "f32"))


def test_expert_construction_errors(runtime, no_launch):
    z = runtime.zeros
    cases = [
        ((z((2, 3, 4), "f32"), z((2, 3, 4), "f32"), z((2, 4), "f32")), "down must have rank 3"),
        ((z((2, 3, 4), "f32"), z((2, 3, 5), "f32"), z((2, 4, 3), "f32")), "up must have the shape of gate"),
        ((z((2, 3, 4), "f32"), z((2, 3, 4), "f32"), z((2, 3, 4), "f32")), r"down must have shape \[E, H, I\]"),
        ((z((2, 3, 4), "f32"), z((2, 3, 4), "f16"), z((2, 4, 3), "f32")), "up must have the dtype of gate"),
        ((z((2, 3, 4), "i32"), z((2, 3, 4), "i32"), z((2, 4, 3), "i32")), "gate must be F32, F16 or BF16"),
        ((z((0, 3, 4), "f32"), z((0, 3, 4), "f32"), z((0, 4, 3), "f32")), "E, I, H > 0"),
    ]
    for args, msg in cases:
        with pytest.raises(MoeError, match=msg):
            moe.SwiGluExperts(*args)


def test_expert_forward_errors(runtime, rng, no_launch):
    E, H, I, T = 4, 8, 6, 3
    _, ex = make_experts(runtime, rng, E, H, I, "f32")
    x, lg = runtime.zeros((T, H), "f32"), runtime.zeros((T, E), "f32")
    opts = RoutingOptions(2, True)
    gopts = GroupRoutingOptions(2, 2, 1, False, True, 1.0)
    cases = [
        (lambda: ex.forward(runtime.zeros((T, H + 1), "f32"), lg, opts), "hidden size H = 8"),
        (lambda: ex.forward(runtime.zeros((T, H), "bf16"), lg, opts), "input is BF16 but the expert weights are F32"),
        (lambda: ex.forward(x, runtime.zeros((T + 1, E), "f32"), opts), "one row per input token"),
        (lambda: ex.forward(x, runtime.zeros((T, E + 1), "f32"), opts), "one column per expert"),
        (lambda: ex.forward(x, lg, RoutingOptions(5, True)), "top_k"),
        (lambda: ex.forward(runtime.zeros((T,), "f32"), lg, opts), "input must have rank 2"),
        (lambda: ex.forward_sigmoid_grouped(x, lg, None, gopts, "Scalar"), "GroupedStrategy"),
        (lambda: ex.forward_sigmoid_grouped(x, lg, runtime.zeros((E + 1,), "f32"), gopts, GroupedStrategy.Scalar),
         "bias"),
        (lambda: ex.forward_dispatched("rows"), "DispatchedTokens"),
    ]
    for call, msg in cases:
        with pytest.raises(MoeError, match=msg):
            call()


def test_dispatched_mismatch_errors(runtime, rng):
    E, H, I = 4, 8, 6
    _, ex = make_experts(runtime, rng, E, H, I, "f32")
    lg = runtime.tensor(rng.standard_normal((3, E)).astype(np.float32))
    plan = moe.route(lg, RoutingOptions(2, True))
    with pytest.raises(MoeError, match="dispatched values are F16 but the expert weights are F32"):
        ex.forward_dispatched(plan.dispatch(runtime.zeros((3, H), "f16")))
    with pytest.raises(MoeError, match="hidden size 9"):
        ex.forward_dispatched(plan.dispatch(runtime.zeros((3, 9), "f32")))
    other = moe.route(runtime.tensor(rng.standard_normal((3, E + 1)).astype(np.float32)), RoutingOptions(2, True))
    with pytest.raises(MoeError, match="5 experts"):
        ex.forward_dispatched(other.dispatch(runtime.zeros((3, H), "f32")))
    with pytest.raises(MoeError, match="strategy"):
        ex.forward_dispatched_with_strategy(plan.dispatch(runtime.zeros((3, H), "f32")), "TensorCore")


def test_mixed_runtimes_are_rejected(runtime):
    others = [n for n in kd.available_runtimes() if kd.runtime(n).device_key != runtime.device_key]
    if not others:
        pytest.skip("needs a second runtime on another device to mix (only one device here)")
    other = kd.runtime(others[0])
    lg = runtime.zeros((2, 4), "f32")
    with pytest.raises(MoeError, match="runtime"):
        moe.route_sigmoid_grouped(lg, other.zeros((4,), "f32"), GroupRoutingOptions(1, 2, 1, False, True, 1.0))
    plan = moe.route(lg, RoutingOptions(1, True))
    with pytest.raises(MoeError, match="runtime"):
        plan.dispatch(other.zeros((2, 3), "f32"))


def test_example_runs():
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parent.parent / "examples" / "moe_layer.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
