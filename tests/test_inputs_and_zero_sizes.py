"""Two more SPEC §0 rules across the families, where each family's own tests look at one or
two entry points:
- no op modifies its inputs: every input a strided view inside a larger tensor (values
  between and around the view's elements), some inputs passed twice; the whole underlying
  tensors keep their bytes;
- zero-size dimensions the math allows give empty (or zero) results and launch nothing."""
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
from rudnn import paged_attention as PA
from rudnn import pooling as P

from family_checks import refuse_launches

pytestmark = pytest.mark.feature("errors")


class Views:
    """Strided views of random values inside bases that hold other values around and between
    them (every axis starts one in, the last one steps by 2); `bases` keeps each base."""

    def __init__(self, rt):
        self.rt = rt
        self.rng = np.random.default_rng(0)
        self.bases = []

    def __call__(self, *shape, values=None):
        values = self.rng.uniform(-1, 1, shape).astype(np.float32) if values is None else values
        base = np.full([s + 2 for s in shape[:-1]] + [2 * shape[-1] + 2], 7.0, values.dtype)
        inner = tuple(slice(1, 1 + s) for s in shape[:-1]) + (slice(1, 1 + 2 * shape[-1], 2),)
        base[inner] = values
        t = self.rt.tensor(base)
        self.bases.append((t, base.copy()))
        view = t[inner]
        assert not view.is_contiguous()
        return view

    def unchanged(self):
        for t, before in self.bases:
            np.testing.assert_array_equal(t.numpy().view(np.uint8), before.view(np.uint8))


def test_no_op_modifies_its_inputs(runtime):
    v = Views(runtime)
    x = v(2, 3, 6, 6)
    N.layer_norm(x, v(6), v(6))
    xn, gamma, grad = v(3, 8), v(8), v(3, 8)
    mean, rstd = v(3, 1)[:, 0], v(3, values=np.full(3, 2.0, np.float32))
    N.layer_norm_backward(xn, gamma, grad, mean, rstd)
    N.rms_norm_backward(xn, gamma, xn, rstd)  # (grad is the input itself)
    _, idx = P.max_pool2d_with_indices(x, 2)
    P.max_pool2d_backward(x, v(2, 3, 3, 3), idx, 2)
    P.avg_pool2d_backward(x, x[:, :, :3, :3], 2)
    lin = I.InterpolateOptions(I.InterpolateMode.Linear)
    I.interpolate(x, 12, lin)
    I.interpolate_backward(x, v(2, 3, 12, 12), 12, lin)
    grid = v(2, 5, 4, 2)
    G.grid_sample(x, grid)
    G.grid_sample_backward(x, grid, v(2, 3, 5, 4))
    w = v(4, 3, 3, 3)
    C.conv_forward(x, w, v(4), C.ConvOptions(padding=1), C.ConvStrategy.Direct)
    C.conv_data_backward(v(2, 4, 6, 6), w, (2, 3, 6, 6), C.ConvOptions(padding=1), C.ConvStrategy.Direct)
    C.conv_weight_backward(x, v(2, 4, 6, 6), (4, 3, 3, 3), C.ConvOptions(padding=1), C.ConvStrategy.Direct)
    q = v(1, 2, 5, 8)
    A.attention(q, q, v(1, 2, 5, 4), strategy=A.AttentionStrategy.FlashUnit)  # (the key is the query)
    experts = M.SwiGluExperts(v(4, 8, 8), v(4, 8, 8), v(4, 8, 8))
    logits = v(3, 4)
    experts.forward(v(3, 8), logits, M.RoutingOptions(2, True))
    lp = v(6, 2, 5)
    tg = runtime.tensor(np.array([[1, 2], [3, 3]], np.int32))
    lengths = runtime.tensor(np.array([6, 5], np.int32))
    CT.ctc_loss_backward(lp, tg, lengths, runtime.tensor(np.array([2, 2], np.int32)), 1.0)
    gd = GD.GatedDeltaInput(v(1, 2, 4, 4), v(1, 2, 4, 4), v(1, 2, 4, 3), v(1, 2, 4), v(1, 2, 4), v(1, 2, 4, 3), 0.5)
    GD.gated_delta_rule(gd)
    GD.chunk_gated_delta_rule(gd, 2)
    v.unchanged()


def test_zero_sizes_give_empty_results_without_launching(runtime, monkeypatch):
    z = runtime.zeros
    lin = I.InterpolateOptions(I.InterpolateMode.Linear)
    plan = PA.DevicePlan.upload(PA.HostPlan(4, 2, [[0, 1]], [5], [0, 0], [3, 4]), z((1,)))
    experts = M.SwiGluExperts(z((4, 8, 8)), z((4, 8, 8)), z((4, 8, 8)))
    groups = M.GroupRoutingOptions(2, 2, 1, False, True, 1.0)
    refuse_launches(monkeypatch)
    shapes = [
        (N.layer_norm(z((0, 6)), z((6,))), (0, 6)),
        (P.max_pool2d(z((2, 0, 6, 6)), 2), (2, 0, 3, 3)),
        (P.adaptive_avg_pool2d(z((0, 3, 6, 6)), 2), (0, 3, 2, 2)),
        (I.interpolate(z((2, 0, 4, 4)), 8, lin), (2, 0, 8, 8)),
        (I.interpolate_backward(z((0, 3, 4, 4)), z((0, 3, 8, 8)), 8, lin), (0, 3, 4, 4)),
        (G.grid_sample(z((2, 0, 4, 4)), z((2, 5, 5, 2))), (2, 0, 5, 5)),
        (G.grid_sample_backward(z((0, 3, 4, 4)), z((0, 5, 5, 2)), z((0, 3, 5, 5)))[0], (0, 3, 4, 4)),
        (C.conv_forward(z((0, 3, 6, 6)), z((4, 3, 3, 3))), (0, 4, 4, 4)),
        (C.conv_data_backward(z((2, 0, 4, 4)), z((0, 3, 3, 3)), (2, 3, 6, 6), C.ConvOptions()), (2, 3, 6, 6)),
        (A.attention(z((1, 0, 5, 8)), z((1, 2, 5, 8)), z((1, 2, 5, 4))), (1, 0, 5, 4)),
        (plan.attention(z((2, 0, 8)), z((2, 4, 1, 8)), z((2, 4, 1, 8)), 1.0, True), (2, 0, 8)),
        (experts.forward(z((0, 8)), z((0, 4)), M.RoutingOptions(2, True)), (0, 8)),
        (experts.forward_sigmoid_grouped(z((0, 8)), z((0, 4)), None, groups, M.GroupedStrategy.Auto), (0, 8)),
    ]
    for got, want in shapes:
        assert got.shape == want
        assert not got.numpy().any()  # (the empty, or a gradient of nothing: zeros)
