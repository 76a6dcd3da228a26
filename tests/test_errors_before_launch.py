"""SPEC §0 across the families: inputs may be strided views, an op makes contiguous what it
needs itself, and validation happens before any launch. Each family's own error tests use
packed inputs; here every tensor is a strided view (a copy would be a launch) and one
argument checked late in the call is bad: the family error is raised and nothing launched."""
from __future__ import annotations

import numpy as np
import pytest

from rudnn import attention as A
from rudnn import convolution as C
from rudnn import ctc as CT
from rudnn import gated_delta as GD
from rudnn import grid_sample as G
from rudnn import interpolation as I
from rudnn import moe as M
from rudnn import normalization as N
from rudnn import pooling as P

from family_checks import refuse_launches

pytestmark = pytest.mark.feature("errors")


def _views(rt):
    """strided(*shape): a view of that shape whose last axis has stride 2; packed(*shape, dtype)."""
    rng = np.random.default_rng(0)

    def strided(*shape):
        full = rt.tensor(rng.standard_normal((*shape[:-1], 2 * shape[-1])).astype(np.float32))
        view = full[(slice(None),) * (len(shape) - 1) + (slice(None, None, 2),)]
        assert view.shape == shape and not view.is_contiguous()
        return view

    def packed(*shape, dtype=np.float32):
        return rt.tensor(np.zeros(shape, dtype))
    return strided, packed


def _calls(rt) -> list:
    """(family error, message fragment, bad call) with strided inputs; what a call needs made
    beforehand (routing plans, experts) is made here, where launches are allowed."""
    strided, packed = _views(rt)
    x = strided(2, 3, 8, 8)
    xn, gamma = strided(3, 4), strided(4)
    q, k, v = strided(1, 2, 3, 8), strided(1, 2, 5, 8), strided(1, 2, 5, 8)
    E, H, T = 4, 8, 3
    experts = M.SwiGluExperts(strided(E, 8, H), strided(E, 8, H), strided(E, H, 8))
    xm, logits = strided(T, H), strided(T, E)
    groups = M.GroupRoutingOptions(2, 2, 1, False, True, 1.0)
    plan = M.route(logits, M.RoutingOptions(2, True))
    dispatched = plan.dispatch(xm)
    lp = rt.tensor(np.full((6, 2, 5), -np.log(5), np.float32))
    i32 = lambda *values: rt.tensor(np.array(values, np.int32))  # noqa: E731
    gd = GD.GatedDeltaInput(strided(1, 2, 5, 4), strided(1, 2, 5, 4), strided(1, 2, 5, 3), strided(1, 2, 5),
                            strided(1, 2, 5), strided(1, 2, 4, 3), 0.5)
    return [
        (P.PoolingError, "grad", lambda: P.max_pool2d_backward(x, strided(2, 3, 4, 5),
                                                               packed(2, 3, 4, 4, dtype=np.int64), 2)),
        (P.PoolingError, "indices", lambda: P.max_pool2d_backward(x, strided(2, 3, 4, 4),
                                                                  packed(2, 3, 4, 4, dtype=np.int32), 2)),
        (P.PoolingError, "divisor_override", lambda: P.avg_pool2d(x, 2, divisor_override=0)),
        (N.NormalizationError, "epsilon", lambda: N.layer_norm(xn, gamma, None, 0.0)),
        (N.NormalizationError, "rstd", lambda: N.rms_norm_backward(xn, gamma, strided(3, 4), packed(4))),
        (I.InterpolationError, "options", lambda: I.interpolate(strided(1, 2, 4, 4), 8, I.InterpolateOptions("x"))),
        (I.InterpolationError, "out_grad", lambda: I.interpolate_backward(
            strided(1, 2, 4, 4), strided(1, 2, 8, 7), 8, I.InterpolateOptions(I.InterpolateMode.Linear))),
        (G.GridSampleError, "align_corners", lambda: G.grid_sample(strided(2, 3, 4, 5), strided(2, 6, 7, 2),
                                                                   G.GridSampleOptions(align_corners=0))),
        (G.GridSampleError, "out_grad", lambda: G.grid_sample_backward(strided(2, 3, 4, 5), strided(2, 6, 7, 2),
                                                                       strided(2, 3, 7, 6))),
        (C.ConvSetupError, "strategy", lambda: C.conv_forward(strided(1, 4, 6, 6), strided(2, 4, 3, 3), None,
                                                              C.ConvOptions(), "Direct")),
        (C.ConvSetupError, "bias", lambda: C.conv_forward(strided(1, 4, 6, 6), strided(2, 4, 3, 3), strided(3))),
        (C.ConvSetupError, "strategy", lambda: C.conv_weight_backward(strided(1, 4, 6, 6), strided(1, 2, 4, 4),
                                                                      (2, 4, 3, 3), C.ConvOptions(), "x")),
        (A.AttentionSetupError, "strategy", lambda: A.attention(q, k, v, strategy="FlashUnit")),
        (A.AttentionSetupError, "softcap", lambda: A.attention(q, k, v,
                                                               options=A.AttentionModuleOptions(softcap=-1.0))),
        (M.MoeError, "top_k", lambda: experts.forward(xm, logits, M.RoutingOptions(9, True))),
        (M.MoeError, "bias", lambda: experts.forward_sigmoid_grouped(xm, logits, strided(E + 1), groups,
                                                                     M.GroupedStrategy.Scalar)),
        (M.MoeError, "rows", lambda: dispatched.combine(strided(2 * T + 1, H))),
        (M.MoeError, "strategy", lambda: experts.forward_dispatched_with_strategy(dispatched, "Scalar")),
        (CT.CtcError, "got 9 in sample 0", lambda: CT.ctc_loss(lp[:, 0], i32(1, 9), 6, 2)),
        (CT.CtcError, "grad_out", lambda: CT.ctc_loss_backward(lp[:, 1], i32(1, 2), 6, 2, i32(1, 1))),
        (GD.GatedDeltaError, "chunk_size", lambda: GD.chunk_gated_delta_rule(gd, 0)),
    ]


def test_strided_inputs_and_a_late_bad_argument_raise_before_any_launch(runtime, monkeypatch):
    calls = _calls(runtime)
    refuse_launches(monkeypatch)
    for error, needle, call in calls:
        with pytest.raises(error) as info:
            call()
        assert needle in str(info.value), (needle, str(info.value))
