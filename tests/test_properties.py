"""Property tests on the cpu runtime (hypothesis): each family's entry points, fed shapes,
strided views, dtypes and special values (NaN, ±inf, ±0, huge, tiny, empty batches), either
return what the float64 numpy reference in tests/reference/ says (NaN where it has NaN, the
same infinities, close elsewhere) or raise the family's error when SPEC.md calls the call
invalid; never a crash, a hang or a wrong answer. Examples are derandomised, so a run is
reproducible; `max_examples` keeps the file within a couple of minutes on two cores."""
from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis (the test extra) is not installed")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import kerneldsl as kd  # noqa: E402
from rudnn import moe  # noqa: E402
from rudnn import normalization as N  # noqa: E402
from rudnn.attention import (AttentionModuleOptions, AttentionSetupError, AttentionStrategy,  # noqa: E402
                             attention)

from reference import attention as ref_attention  # noqa: E402
from reference import moe as ref_moe  # noqa: E402
from reference import normalization as ref_norm  # noqa: E402

pytestmark = pytest.mark.feature("properties")

RT = kd.runtime("cpu")
FLOATS = ["f32", "f16", "bf16"]
TOL = {"f32": 2e-4, "f16": 4e-3, "bf16": 3e-2}
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e18, -1e18, 1e-30, 3e-39]  # 3e-39: an f32 subnormal


def _settings(n):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _values(data, shape, dtype, special=True, scale_exp=(-20, 18)):
    """Host values of `dtype`: each row standard normal times 10^e, with special values
    sprinkled in when `special`."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    scales = 10.0 ** rng.integers(scale_exp[0], scale_exp[1] + 1, size=(rows, 1))
    x = (rng.standard_normal((rows, shape[-1] if shape else 1)) * scales).reshape(shape)
    if special and x.size and data.draw(st.booleans(), label="specials"):
        n = data.draw(st.integers(1, min(4, x.size)), label="how many specials")
        flat = x.reshape(-1)
        for _ in range(n):
            flat[rng.integers(0, x.size)] = SPECIAL[rng.integers(0, len(SPECIAL))]
    with np.errstate(over="ignore"):
        return x.astype(kd.as_dtype(dtype).np)


def _tensor(data, host):
    """`host` on the cpu runtime, as a packed tensor or as a strided view of a larger one
    (every other column, or an offset window)."""
    kind = data.draw(st.sampled_from(["packed", "every other column", "window"]), label="layout")
    if host.ndim == 0 or kind == "packed":
        return RT.tensor(host)
    if kind == "every other column":
        big = np.zeros(host.shape[:-1] + (2 * host.shape[-1],), host.dtype)
        big[..., ::2] = host
        return RT.tensor(big)[..., ::2]
    big = np.zeros(host.shape[:-1] + (host.shape[-1] + 3,), host.dtype)
    big[..., 2:2 + host.shape[-1]] = host
    return RT.tensor(big)[..., 2:2 + host.shape[-1]]


def _same(got, want, dtype, scale=1.0, magnitude=None):
    """NaN exactly where the reference has NaN, the same infinities, close elsewhere:
    relative to the row's magnitude (results are computed in f32 and cast), or to
    `magnitude`, the size of the terms a result cancels down from."""
    got = np.asarray(got).astype(np.float64)
    with np.errstate(over="ignore"):  # the reference as the output dtype holds it (f16 overflows to inf)
        want = np.asarray(want, np.float64).astype(kd.as_dtype(dtype).np).astype(np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    ok = np.isfinite(want)
    assert np.isfinite(got[ok]).all()
    tol = TOL[dtype] * scale
    mag = np.max(np.abs(np.where(ok, want, 0)), axis=-1, keepdims=True) if want.size else 0
    if magnitude is not None:
        mag = np.maximum(mag, magnitude)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf (checked above)
        diff = np.abs(got - want)
    bound = tol * (np.abs(want) + np.maximum(mag, 1e-30)) + 1e-35
    assert (diff[ok] <= np.broadcast_to(bound, want.shape)[ok]).all(), (got, want)


def _unchanged(t, host):
    np.testing.assert_array_equal(t.numpy().view(np.uint8), host.view(np.uint8))


# ------------------------------------------------------------------ normalization
@st.composite
def norm_case(draw):
    dtype = draw(st.sampled_from(FLOATS))
    lead = draw(st.sampled_from([(), (0,), (1,), (3,), (2, 3), (0, 4)]))
    width = draw(st.sampled_from([1, 2, 3, 7, 32, 33, 70, 129]))
    eps = draw(st.sampled_from([1e-5, 1e-6, 0.5, 0.0, -1.0, float("nan"), float("inf")]))
    gamma_shape = draw(st.sampled_from([(width,)] * 4 + [(width + 1,), (1, width)]))
    gamma_dtype = draw(st.sampled_from(["f32"] * 4 + ["f16"]))
    return dtype, lead + (width,), eps, gamma_shape, gamma_dtype


def _norm_valid(shape, eps, gamma_shape, gamma_dtype):
    return (len(shape) >= 1 and shape[-1] > 0 and np.isfinite(eps) and eps > 0 and gamma_shape == shape[-1:]
            and gamma_dtype == "f32")


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "layer_norm_beta"])
@_settings(30)
@given(case=norm_case(), data=st.data())
def test_layer_and_rms_norm(op, case, data):
    dtype, shape, eps, gamma_shape, gamma_dtype = case
    host = _values(data, shape, dtype)
    gamma = (np.random.default_rng(0).standard_normal(gamma_shape) + 1).astype(kd.as_dtype(gamma_dtype).np)
    beta = np.linspace(-1, 1, shape[-1]).astype(np.float32)
    x = _tensor(data, host)
    g = RT.tensor(gamma)
    valid = _norm_valid(shape, eps, gamma_shape, gamma_dtype)
    if not valid:
        with pytest.raises(N.NormalizationError):
            if op == "rms_norm":
                N.rms_norm(x, g, eps)
            else:
                N.layer_norm(x, g, RT.tensor(beta) if op == "layer_norm_beta" else None, eps)
        return
    if op == "rms_norm":
        got = N.rms_norm(x, g, eps)
        want = ref_norm.rms_norm(host, gamma, eps)[0]
    else:
        b = beta if op == "layer_norm_beta" else None
        got = N.layer_norm(x, g, None if b is None else RT.tensor(b), eps)
        want = ref_norm.layer_norm(host, gamma, b, eps)[0]
    assert got.dtype is kd.as_dtype(dtype) and got.shape == shape
    _same(got.numpy(), want, dtype, 2)
    _unchanged(x, host)


@_settings(35)
@given(dtype=st.sampled_from(FLOATS), lead=st.sampled_from([(), (0,), (1,), (4,), (2, 3)]),
       width=st.sampled_from([1, 2, 5, 31, 64, 65, 300]), data=st.data())
def test_softmax_last_axis(dtype, lead, width, data):
    host = _values(data, lead + (width,), dtype)
    x = _tensor(data, host)
    got = N.softmax_last_axis(x)
    want = ref_norm.softmax(host)
    _same(got.numpy(), want, dtype, 2)
    _unchanged(x, host)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@_settings(25)
@given(dtype=st.sampled_from(FLOATS), rows=st.sampled_from([1, 2, 5, 9]), width=st.sampled_from([1, 3, 32, 70]),
       data=st.data())
def test_norm_backward(op, dtype, rows, width, data):
    host = _values(data, (rows, width), dtype, special=False, scale_exp=(-3, 3))
    grad = _values(data, (rows, width), dtype, special=False, scale_exp=(-2, 2))
    gamma = (np.random.default_rng(1).standard_normal(width) + 1).astype(np.float32)
    x, gr, g = _tensor(data, host), _tensor(data, grad), RT.tensor(gamma)
    if op == "layer_norm":
        _, mean, rstd = N.layer_norm_with_stats(x, g)
        dx, dgamma, dbeta = N.layer_norm_backward(x, g, gr, mean, rstd)
        want = ref_norm.layer_norm_backward(host, gamma, grad, mean.numpy(), rstd.numpy())
        got = (dx, dgamma, dbeta)
    else:
        _, rstd = N.rms_norm_with_stats(x, g)
        got = N.rms_norm_backward(x, g, gr, rstd)
        want = ref_norm.rms_norm_backward(host, gamma, grad, rstd.numpy())
    # terms the results cancel down from: rstd·|grad·gamma|·(1 + x̂²) per row for dx, Σ|grad|·(1 + |x̂|)
    # per column for dgamma / dbeta
    xh = np.abs(host.astype(np.float64) * rstd.numpy()[:, None])
    gg = np.abs(grad.astype(np.float64) * gamma)
    terms = [(rstd.numpy()[:, None] * gg.max(-1, keepdims=True) * (1 + (xh ** 2).max(-1, keepdims=True))),
             (np.abs(grad) * (1 + xh)).sum(0), np.abs(grad).astype(np.float64).sum(0)]
    for i, (a, b) in enumerate(zip(got, want)):
        _same(a.numpy(), b, dtype if i == 0 else "f32", 8 * width ** 0.5, terms[i])
    _unchanged(x, host)
    _unchanged(gr, grad)


# ------------------------------------------------------------------ moe
@_settings(35)
@given(dtype=st.sampled_from(FLOATS), tokens=st.sampled_from([0, 1, 3, 8]), experts=st.integers(1, 40),
       k_frac=st.floats(0, 1), renormalize=st.booleans(), bad_k=st.sampled_from([None] * 5 + [0, "E+1"]),
       data=st.data())
def test_route_softmax(dtype, tokens, experts, k_frac, renormalize, bad_k, data):
    top_k = max(1, round(k_frac * experts))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    # logits on a grid of 1/8: exact in every dtype, and distinct values never round into ties
    logits = (rng.integers(-64, 65, size=(tokens, experts)) / 8).astype(np.float64)
    if tokens and data.draw(st.booleans(), label="special row"):
        row = rng.integers(0, tokens)
        logits[row, rng.integers(0, experts)] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        if data.draw(st.booleans(), label="all -inf"):
            logits[row] = -np.inf
    host = logits.astype(kd.as_dtype(dtype).np)
    t = _tensor(data, host)
    if bad_k is not None:
        with pytest.raises(moe.MoeError):
            moe.route(t, moe.RoutingOptions(0 if bad_k == 0 else experts + 1, renormalize))
        return
    plan = moe.route(t, moe.RoutingOptions(top_k, renormalize))
    ids, w = ref_moe.softmax_route(host, top_k, renormalize)
    assert plan.expert_indices().shape == (tokens, top_k)
    np.testing.assert_array_equal(plan.expert_indices().numpy().astype(np.int64), ids)
    _same(plan.weights().numpy(), w, dtype, 2)
    _unchanged(t, host)


@_settings(25)
@given(dtype=st.sampled_from(FLOATS), tokens=st.sampled_from([0, 1, 2, 5]), experts=st.integers(1, 5),
       hidden=st.sampled_from([1, 3, 8, 17]), inner=st.sampled_from([1, 4, 9]), k=st.integers(1, 3),
       data=st.data())
def test_swiglu_experts_forward(dtype, tokens, experts, hidden, inner, k, data):
    top_k = min(k, experts)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    npd = kd.as_dtype(dtype).np
    ws = [(rng.standard_normal(s) * 0.3).astype(npd) for s in ((experts, inner, hidden), (experts, inner, hidden),
                                                               (experts, hidden, inner))]
    x = _values(data, (tokens, hidden), dtype, special=False, scale_exp=(-1, 0))
    logits = (rng.integers(-32, 33, size=(tokens, experts)) / 8).astype(npd)
    layer = moe.SwiGluExperts(*(RT.tensor(w) for w in ws))
    xt = _tensor(data, x)
    out = layer.forward(xt, RT.tensor(logits), moe.RoutingOptions(top_k, True))
    ids, w = ref_moe.softmax_route(logits, top_k, True)
    want = ref_moe.moe_forward(x, ids, w.astype(npd), *ws)
    assert out.shape == (tokens, hidden) and out.dtype is kd.as_dtype(dtype)
    _same(out.numpy(), want, dtype, 8 * (1 + inner ** 0.5))
    _unchanged(xt, x)


# ------------------------------------------------------------------ attention
@st.composite
def attention_case(draw):
    strategy = draw(st.sampled_from([AttentionStrategy.Fallback, AttentionStrategy.FlashUnit,
                                     AttentionStrategy.FlashBlackboxAccelerated]))
    floats = ["f16", "bf16"] if strategy is AttentionStrategy.FlashBlackboxAccelerated else FLOATS
    dtype = draw(st.sampled_from(floats))
    hkv = draw(st.integers(1, 2))
    dims = dict(B=draw(st.integers(1, 2)), Hkv=hkv, Hq=hkv * draw(st.integers(1, 2)), Sq=draw(st.integers(0, 9)),
                Skv=draw(st.integers(1, 17)), D=draw(st.sampled_from([1, 8, 16, 33])),
                Dv=draw(st.sampled_from([1, 8, 24])))
    opts = dict(is_causal=draw(st.booleans()), scale=draw(st.sampled_from([None, 0.3, -0.5])),
                softcap=draw(st.sampled_from([None, None, 5.0, 0.0, -1.0])))
    mask = draw(st.sampled_from([None, "full", "broadcast"]))
    bias = draw(st.sampled_from([None, "full", "broadcast"]))
    return strategy, dtype, dims, opts, mask, bias


@_settings(40)
@given(case=attention_case(), data=st.data())
def test_attention_strategies(case, data):
    strategy, dtype, d, opts, mask_kind, bias_kind = case
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    npd = kd.as_dtype(dtype).np
    q = rng.standard_normal((d["B"], d["Hq"], d["Sq"], d["D"])).astype(npd)
    k = rng.standard_normal((d["B"], d["Hkv"], d["Skv"], d["D"])).astype(npd)
    v = rng.standard_normal((d["B"], d["Hkv"], d["Skv"], d["Dv"])).astype(npd)
    full = (d["B"], d["Hq"], d["Sq"], d["Skv"])
    shapes = {"full": full, "broadcast": (1, 1, d["Sq"], d["Skv"])}
    mask = None if mask_kind is None else rng.random(shapes[mask_kind]) < 0.3
    bias = None if bias_kind is None else rng.standard_normal(shapes[bias_kind]).astype(npd)
    qt, kt, vt = (_tensor(data, a) for a in (q, k, v))
    args = (qt, kt, vt, None if mask is None else RT.tensor(mask), None if bias is None else RT.tensor(bias),
            AttentionModuleOptions(**opts), strategy)
    if opts["softcap"] is not None and opts["softcap"] <= 0:
        with pytest.raises(AttentionSetupError):
            attention(*args)
        return
    out = attention(*args)
    want = ref_attention.attention(q, k, v, mask, bias, opts["scale"], opts["softcap"], opts["is_causal"])
    assert out.shape == want.shape and out.dtype is kd.as_dtype(dtype)
    _same(out.numpy(), want, dtype, 8)
    for t, a in ((qt, q), (kt, k), (vt, v)):
        _unchanged(t, a)
