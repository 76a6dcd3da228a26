"""rudnn.torch: every custom op against torch.nn.functional (forward values, and gradients
against torch's autograd of the F op), the fake impls (torch.library.opcheck on a sample of
every registered op, and torch.compile(fullgraph=True) through forward and backward),
zero-copy conversion, strided inputs, torch's CUDA stream, and import without torch.

The ops run on torch's CPU tensors (the cpu runtime), and also on CUDA tensors where torch
sees a GPU. Small shapes, one sweep per feature."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch (the oracle extra) is not installed")
F = torch.nn.functional

import rudnn.torch as R  # noqa: E402
from rudnn.torch import bridge  # noqa: E402

pytestmark = pytest.mark.feature("torch_ops")

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.fixture(params=DEVICES)
def device(request):
    """Each device torch has; on CUDA, torch's references in full F32 (cuDNN's TF32 off)."""
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield request.param
    torch.backends.cudnn.allow_tf32 = tf32


def _rand(*shape, device="cpu", grad=False, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(hash(shape) % 1000)
    t = (torch.randn(shape, generator=g) * scale).to(device=device, dtype=dtype)
    return t.requires_grad_(grad)


def _grads(out, inputs, seed_grad):
    """The gradients of <out, seed_grad> for the inputs that require grad."""
    return torch.autograd.grad(out, [t for t in inputs if t.requires_grad], seed_grad)


def _agree(ours, theirs, inputs, atol=1e-4, rtol=1e-4):
    """Forward values and the gradients of a random cotangent agree with torch's."""
    torch.testing.assert_close(ours, theirs, atol=atol, rtol=rtol)
    seed = _rand(*ours.shape, device=ours.device, dtype=ours.dtype)
    for a, b in zip(_grads(ours, inputs, seed), _grads(theirs, inputs, seed)):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


# ---------------------------------------------------------------------------- normalization
def test_layer_norm_rms_norm_softmax_values_and_grads(device):
    x = _rand(6, 32, device=device, grad=True)
    w, b = _rand(32, device=device, grad=True), _rand(32, device=device, grad=True)
    _agree(R.layer_norm(x, w, b, 1e-5), F.layer_norm(x, (32,), w, b, 1e-5), (x, w, b))
    _agree(R.layer_norm(x, w), F.layer_norm(x, (32,), w), (x, w))
    _agree(R.rms_norm(x, w, 1e-6), F.rms_norm(x, (32,), w, 1e-6), (x, w))
    _agree(R.softmax_last_axis(x), torch.softmax(x, -1), (x,))


def test_plain_ops_differentiate_by_recomputing(device):
    """torch.ops.rudnn.layer_norm / rms_norm / max_pool (no stats or indices kept) still
    have gradients: their backward recomputes what the kernels need."""
    x = _rand(3, 2, 6, 16, device=device, grad=True)
    w, b = _rand(16, device=device, grad=True), _rand(16, device=device, grad=True)
    ops = torch.ops.rudnn
    _agree(ops.layer_norm(x, w, b, 1e-5), F.layer_norm(x, (16,), w, b, 1e-5), (x, w, b))
    _agree(ops.rms_norm(x, w, 1e-6), F.rms_norm(x, (16,), w, 1e-6), (x, w))
    _agree(ops.max_pool(x, 2, [2, 3], None, [1, 1], [1, 1], False), F.max_pool2d(x, (2, 3), None, 1), (x,))


def test_layer_norm_strided_input_and_bf16(device):
    base = _rand(32, 6, device=device)
    x = base.t().requires_grad_()  # a transposed view: stride (1, 6)
    w = _rand(32, device=device, grad=True)
    _agree(R.layer_norm(x, w), F.layer_norm(x, (32,), w), (x, w))
    xb = _rand(4, 64, device=device, dtype=torch.bfloat16)
    yb = R.rms_norm(xb, torch.ones(64, device=device))
    assert yb.dtype == torch.bfloat16
    torch.testing.assert_close(yb.float(), F.rms_norm(xb.float(), (64,), eps=1e-6), atol=3e-2, rtol=3e-2)


def test_norm_stats_and_backward_ops(device):
    x, w, b, g = _rand(5, 16, device=device), _rand(16, device=device), _rand(16, device=device), \
        _rand(5, 16, device=device)
    out, mean, rstd = R.layer_norm_with_stats(x, w, b, 1e-5)
    torch.testing.assert_close(mean, x.mean(-1))
    torch.testing.assert_close(rstd, torch.rsqrt(x.var(-1, unbiased=False) + 1e-5))
    dx, dw, db = R.layer_norm_backward(x, w, g, mean, rstd)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    want = torch.autograd.grad(F.layer_norm(xr, (16,), wr, br), (xr, wr, br), g)
    for a, e in zip((dx, dw, db), want):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)
    _, rstd = R.rms_norm_with_stats(x, w, 1e-6)
    dx, dw = R.rms_norm_backward(x, w, g, rstd)
    want = torch.autograd.grad(F.rms_norm(xr, (16,), wr, 1e-6), (xr, wr), g)
    torch.testing.assert_close(dx, want[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dw, want[1], atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------- convolution
@pytest.mark.parametrize("case", [
    dict(x=(2, 4, 9), w=(6, 2, 3), stride=2, padding=1, dilation=1, groups=2),
    dict(x=(2, 3, 7, 6), w=(4, 3, 3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1), groups=1),
    dict(x=(1, 2, 4, 5, 4), w=(2, 2, 2, 3, 2), stride=1, padding=1, dilation=1, groups=1),
])
def test_conv_values_and_grads(device, case):
    x = _rand(*case["x"], device=device, grad=True)
    w = _rand(*case["w"], device=device, grad=True, scale=0.5)
    b = _rand(case["w"][0], device=device, grad=True)
    geo = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"], groups=case["groups"])
    fn = (F.conv1d, F.conv2d, F.conv3d)[x.ndim - 3]
    _agree(R.conv_forward(x, w, b, **geo, strategy="Direct"), fn(x, w, b, **geo), (x, w, b))


def test_conv_channels_last_and_backward_ops(device):
    x, w = _rand(2, 3, 6, 5, device=device), _rand(4, 3, 3, 3, device=device)
    xn = x.permute(0, 2, 3, 1).contiguous().requires_grad_()
    wn = w.permute(0, 2, 3, 1).contiguous().requires_grad_()
    ours = R.conv_forward_nhwc(xn, wn, None, stride=1, padding=1, strategy="Direct")
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    theirs = F.conv2d(xr, wr, None, 1, 1)
    torch.testing.assert_close(ours.permute(0, 3, 1, 2), theirs, atol=1e-4, rtol=1e-4)
    g = _rand(*theirs.shape, device=device)
    dxn, dwn = torch.autograd.grad(ours, (xn, wn), g.permute(0, 2, 3, 1))
    dx, dw = torch.autograd.grad(theirs, (xr, wr), g)
    torch.testing.assert_close(dxn.permute(0, 3, 1, 2), dx, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dwn.permute(0, 3, 1, 2), dw, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(R.conv_data_backward(g, w, x.shape, 1, 1, strategy="Direct"),
                               torch.nn.grad.conv2d_input(x.shape, w, g, 1, 1), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(R.conv_weight_backward(x, g, w.shape, 1, 1, strategy="Direct"),
                               torch.nn.grad.conv2d_weight(x, w.shape, g, 1, 1), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------- pooling
def test_pooling_values_and_grads(device):
    x = _rand(2, 3, 9, 8, device=device, grad=True)
    _agree(R.max_pool2d(x, 3, 2, 1, ceil_mode=True), F.max_pool2d(x, 3, 2, 1, ceil_mode=True), (x,))
    _agree(R.avg_pool2d(x, (3, 2), 2, (1, 0), count_include_pad=False),
           F.avg_pool2d(x, (3, 2), 2, (1, 0), count_include_pad=False), (x,))
    _agree(R.adaptive_avg_pool2d(x, (4, 3)), F.adaptive_avg_pool2d(x, (4, 3)), (x,))
    out, idx = R.adaptive_max_pool2d(x, (4, 3))
    want, want_idx = F.adaptive_max_pool2d(x, (4, 3), return_indices=True)
    assert torch.equal(idx, want_idx)
    _agree(out, want, (x,))
    x1, x3 = _rand(2, 3, 11, device=device, grad=True), _rand(1, 2, 5, 6, 4, device=device, grad=True)
    _agree(R.max_pool1d(x1, 3, dilation=2), F.max_pool1d(x1, 3, dilation=2), (x1,))
    _agree(R.avg_pool3d(x3, 2, divisor_override=3), F.avg_pool3d(x3, 2, divisor_override=3), (x3,))
    y, i = R.max_pool3d_with_indices(x3, 2, 1)
    assert torch.equal(i, F.max_pool3d(x3, 2, 1, return_indices=True)[1])


def test_pooling_backward_functions(device):
    x = _rand(2, 6, 8, device=device)
    out, idx = R.max_pool1d_with_indices(x, 2)
    g = torch.ones_like(out)
    xr = x.clone().requires_grad_()
    torch.testing.assert_close(R.max_pool1d_backward(x, g, idx, 2), torch.autograd.grad(F.max_pool1d(xr, 2), xr, g)[0])
    torch.testing.assert_close(R.avg_pool1d_backward(x, g, 2), torch.autograd.grad(F.avg_pool1d(xr, 2), xr, g)[0])
    ga = torch.ones(2, 6, 3, device=device)
    torch.testing.assert_close(R.adaptive_avg_pool1d_backward(x, ga),
                               torch.autograd.grad(F.adaptive_avg_pool1d(xr, 3), xr, ga)[0])
    _, ia = R.adaptive_max_pool1d(x, 3)
    torch.testing.assert_close(R.adaptive_max_pool1d_backward(x, ga, ia),
                               torch.autograd.grad(F.adaptive_max_pool1d(xr, 3), xr, ga)[0])


# ---------------------------------------------------------------------------- interpolation, grid sample
@pytest.mark.parametrize("mode,torch_mode,align", [("Nearest", "nearest", False), ("Linear", "bilinear", True),
                                                   ("Bicubic", "bicubic", False)])
def test_interpolate_values_and_grads(device, mode, torch_mode, align):
    x = _rand(2, 3, 5, 6, device=device, grad=True)
    kw = {} if torch_mode == "nearest" else {"align_corners": align}
    _agree(R.interpolate(x, (7, 4), mode, align), F.interpolate(x, (7, 4), mode=torch_mode, **kw), (x,))


def test_interpolate_lanczos_backward_is_the_adjoint(device):
    """Lanczos3 has no torch twin: its autograd gradient must be the adjoint of the forward
    map, <A x, g> = <x, Aᵀ g>, and the forward a linear map (checked on two inputs)."""
    x = _rand(1, 2, 6, device=device, grad=True)
    y = R.interpolate(x, 11, "Lanczos3")
    g = _rand(*y.shape, device=device)
    (gx,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close((y * g).sum(), (x * gx).sum(), atol=1e-4, rtol=1e-4)
    z = _rand(1, 2, 6, device=device)
    torch.testing.assert_close(R.interpolate(x.detach() + 2 * z, 11, "Lanczos3"),
                               y.detach() + 2 * R.interpolate(z, 11, "Lanczos3"), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(R.interpolate_backward(x.detach(), g, 11, "Lanczos3"), gx)


@pytest.mark.parametrize("mode,padding_mode", [("Bilinear", "Zeros"), ("Bicubic", "Border"),
                                               ("Nearest", "Reflection")])
def test_grid_sample_values_and_grads(device, mode, padding_mode):
    x = _rand(2, 3, 5, 6, device=device, grad=True)
    grid = (torch.rand(2, 4, 3, 2, generator=torch.Generator().manual_seed(1)) * 2.4 - 1.2).to(device)
    grid.requires_grad_(mode != "Nearest")
    ours = R.grid_sample(x, grid, mode, padding_mode, align_corners=True)
    theirs = F.grid_sample(x, grid, mode.lower(), padding_mode.lower(), align_corners=True)
    _agree(ours, theirs, (x, grid), atol=2e-4, rtol=2e-4)
    dx, dgrid = R.grid_sample_backward(x.detach(), grid.detach(), torch.ones_like(ours), mode, padding_mode, True)
    assert dx.shape == x.shape and dgrid.shape == grid.shape


def test_strided_inputs_and_empty_batches(device):
    """Views with permuted or stepped strides go in as they are (no torch-side copy) and give
    torch's results; an empty batch gives an empty result of the right shape."""
    base = _rand(2, 7, 6, 3, device=device)
    x = base.permute(0, 3, 1, 2).requires_grad_()  # channels-last memory, NCHW view
    w = _rand(4, 3, 3, 3, device=device, scale=0.5)
    _agree(R.conv_forward(x, w, None, padding=1, strategy="Direct"), F.conv2d(x, w, None, padding=1), (x,))
    _agree(R.avg_pool2d(x, 2, 1), F.avg_pool2d(x, 2, 1), (x,))
    _agree(R.interpolate(x, (5, 9), "Linear"), F.interpolate(x, (5, 9), mode="bilinear"), (x,))
    grid = (torch.rand(2, 2, 3, 2, generator=torch.Generator().manual_seed(7)) * 2 - 1).to(device)
    _agree(R.grid_sample(x[:, :, ::2], grid), F.grid_sample(x[:, :, ::2], grid, align_corners=False), (x,))
    empty = torch.zeros(0, 3, 5, 5, device=device)
    assert R.max_pool2d(empty, 2).shape == (0, 3, 2, 2)
    assert R.conv_forward(empty, w, None, padding=1, strategy="Direct").shape == (0, 4, 5, 5)
    assert R.layer_norm(torch.zeros(0, 8, device=device), torch.ones(8, device=device)).shape == (0, 8)


# ---------------------------------------------------------------------------- ctc
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_values_and_grads(device, reduction):
    lp = torch.randn(12, 3, 5, generator=torch.Generator().manual_seed(2)).log_softmax(-1).to(device)
    lp.requires_grad_()
    targets = torch.tensor([[1, 2, 2, 4], [3, 1, 0, 0], [4, 4, 4, 0]], device=device)
    il, tl = [12, 10, 9], [4, 2, 3]
    _agree(R.ctc_loss(lp, targets, il, tl, reduction=reduction), F.ctc_loss(lp, targets, il, tl, reduction=reduction),
           (lp,))


def test_ctc_alpha_beta_and_backward(device):
    lp = torch.randn(8, 2, 4, generator=torch.Generator().manual_seed(3)).log_softmax(-1).to(device)
    targets = torch.tensor([[1, 2, 3], [2, 2, 0]], device=device)
    alpha, beta, nll = R.ctc_alpha_beta(lp, targets, [8, 7], [3, 2])
    assert alpha.shape == beta.shape == (8, 2, 7) and alpha.dtype == torch.float32
    torch.testing.assert_close(nll, F.ctc_loss(lp, targets, [8, 7], [3, 2], reduction="none"))
    lr = lp.clone().requires_grad_()
    want = torch.autograd.grad(F.ctc_loss(lr, targets, [8, 7], [3, 2]), lr)[0]
    torch.testing.assert_close(R.ctc_loss_backward(lp, targets, [8, 7], [3, 2], 1.0), want, atol=1e-5, rtol=1e-4)


def test_ctc_concatenated_targets_and_their_data_dependent_shape():
    """1-D concatenated targets: values as torch's, and alpha's last axis (2·max target length
    + 1, known only from the data) traces as an unbacked size."""
    lp = torch.randn(7, 2, 5, generator=torch.Generator().manual_seed(8)).log_softmax(-1).requires_grad_()
    targets, il, tl = torch.tensor([1, 2, 3, 4, 4]), torch.tensor([7, 6]), torch.tensor([3, 2])
    _agree(R.ctc_loss(lp, targets, il, tl, reduction="sum"), F.ctc_loss(lp, targets, il, tl, reduction="sum"), (lp,))
    alpha, _, _ = R.ctc_alpha_beta(lp.detach(), targets, il, tl)
    assert alpha.shape == (7, 2, 7)
    torch.library.opcheck(torch.ops.rudnn.ctc_alpha_beta.default, (lp.detach(), targets, il, tl, 0))


# ---------------------------------------------------------------------------- forward-only families
def test_attention_matches_sdpa(device):
    q, k, v = _rand(1, 4, 5, 8, device=device), _rand(1, 2, 7, 8, device=device), _rand(1, 2, 7, 8, device=device)
    mask = torch.rand(1, 1, 5, 7, generator=torch.Generator().manual_seed(4)).to(device) < 0.3
    ours = R.attention(q, k, v, mask=mask, is_causal=True, strategy="FlashUnit")
    keep = ~mask & torch.ones(5, 7, dtype=torch.bool, device=device).tril(2)
    theirs = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=keep)
    theirs = torch.where(keep.any(-1, keepdim=True), theirs, 0.0)  # fully hidden rows: zeros
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    q.requires_grad_()
    with pytest.raises(RuntimeError, match="autograd"):
        R.attention(q, k, v).sum().backward()  # no backward kernel: torch says so, no silent zeros


def _paged_reference(q, kc, vc, tables, lengths, sids, positions, scale, causal):
    ps, rows = kc.shape[1], []
    for r in range(q.shape[0]):
        s = int(sids[r])
        n = min(int(lengths[s]), int(positions[r]) + 1) if causal else int(lengths[s])
        idx = [(int(tables[s][t // ps]), t % ps) for t in range(n)]
        ks = torch.stack([kc[p, o] for p, o in idx]).repeat_interleave(q.shape[1] // kc.shape[2], 1)
        vs = torch.stack([vc[p, o] for p, o in idx]).repeat_interleave(q.shape[1] // vc.shape[2], 1)
        p = torch.softmax(scale * torch.einsum("hd,thd->ht", q[r], ks), -1)
        rows.append(torch.einsum("ht,thd->hd", p, vs))
    return torch.stack(rows)


def test_paged_attention_mla_and_append(device):
    kc, vc = _rand(6, 4, 1, 8, device=device), _rand(6, 4, 1, 8, device=device)
    tables = torch.tensor([[3, 1, -1], [0, 5, 2]], device=device)  # -1: unused padding
    lengths, sids, pos = (torch.tensor(v, device=device) for v in ([6, 9], [0, 1, 1], [5, 7, 8]))
    q = _rand(3, 2, 8, device=device)
    want = _paged_reference(q, kc, vc, tables, lengths, sids, pos, 0.3, True)
    for splits in (0, 3):
        torch.testing.assert_close(R.paged_attention(q, kc, vc, tables, lengths, sids, pos, 0.3, True, splits), want,
                                   atol=1e-5, rtol=1e-5)
    latent, kp = _rand(6, 4, 1, 8, device=device), _rand(6, 4, 1, 2, device=device)
    qp = _rand(3, 2, 2, device=device)
    mla = R.paged_mla(q, qp, latent, kp, tables, lengths, sids, pos, 0.3, False)
    both = _paged_reference(torch.cat([q, qp], -1), torch.cat([latent, kp], -1), latent, tables, lengths, sids, pos,
                            0.3, False)
    torch.testing.assert_close(mla, both, atol=1e-5, rtol=1e-5)
    new_k, new_v = _rand(3, 1, 8, device=device), _rand(3, 1, 8, device=device)
    k_cache, v_cache = R.paged_append(new_k, new_v, kc, vc, tables, lengths, sids, pos)
    assert k_cache is kc and torch.equal(kc[1, 1], new_k[0]) and torch.equal(vc[2, 0], new_v[2])


def test_moe_route_dispatch_experts_combine(device):
    T, E, H, I = 6, 4, 8, 16
    x, logits = _rand(T, H, device=device), _rand(T, E, device=device)
    gate, up, down = (_rand(*s, device=device, scale=0.3) for s in ((E, I, H), (E, I, H), (E, H, I)))
    ids, w = R.route(logits, 2, renormalize=True)
    top = torch.softmax(logits, -1).topk(2, -1)
    assert torch.equal(ids.long(), top.indices)
    torch.testing.assert_close(w, top.values / top.values.sum(-1, keepdim=True))
    d = R.dispatch(x, ids, w, E)
    assert torch.equal(d.expert_offsets.long(), F.pad(torch.bincount(ids.flatten().long(), minlength=E).cumsum(0),
                                                      (1, 0)))
    y = R.combine(R.experts_dispatched(gate, up, down, ids, w, d), ids, w, d)
    want = torch.zeros(T, H, device=device)
    for t in range(T):
        for j in range(2):
            e = int(ids[t, j])
            want[t] += w[t, j] * (down[e] @ (F.silu(gate[e] @ x[t]) * (up[e] @ x[t])))
    torch.testing.assert_close(y, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(R.swiglu_experts(x, logits, gate, up, down, 2, True), want, atol=1e-5, rtol=1e-5)
    gids, gw = R.route_sigmoid_grouped(logits, None, 2, 2, 1, scale=2.0)
    assert gids.shape == (T, 2) and torch.all(gids // 2 == gids[:, :1] // 2)  # both from the one chosen group
    grouped = R.swiglu_experts_sigmoid_grouped(x, logits, None, gate, up, down, 2, 2, 1, scale=2.0, strategy="Scalar")
    assert grouped.shape == (T, H) and torch.isfinite(grouped).all()


def test_moe_expert_ops_check_everything_before_launching(monkeypatch):
    """The expert ops make their SwiGluExperts each call: strided weights are packed by torch,
    so a bad call (top_k, hidden size, groups, strategy) raises before any kernel of ours."""
    from family_checks import refuse_launches
    from rudnn.moe import MoeError
    T, E, H, I = 3, 4, 8, 8
    x, logits = _rand(T, H), _rand(T, E)
    gate = _rand(E, H, I).transpose(1, 2)  # [E, I, H], strided
    up, down = _rand(E, I, H), _rand(E, H, I)
    ids, w = R.route(logits, 2)
    d = R.dispatch(_rand(T, H + 1), ids, w, E)
    # a good call with the strided weight gives the packed weight's result (that one is
    # checked against the experts' formula above)
    torch.testing.assert_close(R.swiglu_experts(x, logits, gate, up, down, 2),
                               R.swiglu_experts(x, logits, gate.contiguous(), up, down, 2), rtol=0, atol=0)
    refuse_launches(monkeypatch)
    with pytest.raises(MoeError, match="top_k"):
        R.swiglu_experts(x, logits, gate, up, down, 99)
    with pytest.raises(MoeError, match="hidden size"):
        R.swiglu_experts(_rand(T, H + 1), logits, gate, up, down, 2)
    with pytest.raises(MoeError, match="groups"):
        R.swiglu_experts_sigmoid_grouped(x, logits, None, gate, up, down, 2, 3, 1, strategy="Scalar")
    with pytest.raises(ValueError, match="strategy must be one of"):
        R.swiglu_experts_sigmoid_grouped(x, logits, None, gate, up, down, 2, 2, 1, strategy="Fast")
    with pytest.raises(MoeError, match="hidden size 9"):
        R.experts_dispatched(gate, up, down, ids, w, d, "Scalar")
    with pytest.raises(ValueError, match="strategy must be one of"):
        R.experts_dispatched(gate, up, down, ids, w, d, "Fast")


def test_gated_delta_matches_the_recurrence(device):
    B, H, T, K, V = 1, 2, 5, 4, 3
    q, k, v = _rand(B, H, T, K, device=device), _rand(B, H, T, K, device=device, scale=0.3), \
        _rand(B, H, T, V, device=device)
    beta = torch.rand(B, H, T, generator=torch.Generator().manual_seed(5)).to(device)
    g = -torch.rand(B, H, T, generator=torch.Generator().manual_seed(6)).to(device)
    s = _rand(B, H, K, V, device=device)
    out, final = R.gated_delta_rule(q, k, v, beta, g, s, 0.5)
    state, outs = s.clone(), []
    for t in range(T):
        state = state * g[..., t, None, None].exp()
        delta = beta[..., t, None] * (v[..., t, :] - torch.einsum("bhkv,bhk->bhv", state, k[..., t, :]))
        state = state + k[..., t, :, None] * delta[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, 0.5 * q[..., t, :]))
    torch.testing.assert_close(out, torch.stack(outs, 2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, state, atol=1e-5, rtol=1e-5)
    chunked = R.chunk_gated_delta_rule(q, k, v, beta, g, s, 0.5, chunk_size=2)
    torch.testing.assert_close(chunked[0], out, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- fake impls: opcheck on every op
def _op_samples() -> dict:
    """One sample call per registered op: {op name: (args, kwargs)}, small CPU tensors."""
    x4, w = _rand(2, 3, 6, 5, grad=True), _rand(16)
    xn = _rand(4, 16, grad=True)
    lp = torch.randn(6, 2, 4).log_softmax(-1).requires_grad_()
    targets, il, tl = torch.tensor([[1, 2], [3, 0]]), torch.tensor([6, 5]), torch.tensor([2, 1])
    stats = R.layer_norm_with_stats(xn.detach(), w, None)
    kc, tables = _rand(3, 4, 1, 8), torch.tensor([[2, 0]])
    plan = (tables, torch.tensor([6]), torch.tensor([0, 0]), torch.tensor([4, 5]))
    logits, xm = _rand(5, 4), _rand(5, 8)
    gate, down = _rand(4, 6, 8), _rand(4, 8, 6)
    ids, rw = R.route(logits, 2)
    d = R.dispatch(xm, ids, rw, 4)
    gd = (_rand(1, 1, 3, 4), _rand(1, 1, 3, 4), _rand(1, 1, 3, 2), torch.rand(1, 1, 3), -torch.rand(1, 1, 3),
          _rand(1, 1, 4, 2), 1.0)
    _, idx = R.max_pool2d_with_indices(x4.detach(), 2)
    _, aidx = R.adaptive_max_pool2d(x4.detach(), (2, 2))
    grid = torch.rand(2, 3, 4, 2, requires_grad=True) * 2 - 1
    return {
        "layer_norm": (xn, w, w, 1e-5), "layer_norm_with_stats": (xn, w, None, 1e-5),
        "rms_norm": (xn, w, 1e-6), "rms_norm_with_stats": (xn, w, 1e-6), "softmax_last_axis": (xn,),
        "layer_norm_backward": (xn.detach(), w, torch.ones(4, 16), stats[1], stats[2]),
        "rms_norm_backward": (xn.detach(), w, torch.ones(4, 16), stats[2]),
        "conv_forward": (x4, _rand(4, 3, 3, 3, grad=True), None, [2, 1], [1, 1], [1, 1], 1, "Direct"),
        "conv_forward_nhwc": (_rand(2, 6, 5, 3, grad=True), _rand(4, 3, 3, 3, grad=True), _rand(4), [1, 1],
                              [0, 1], [1, 1], 1, "Direct"),
        "conv_data_backward": (_rand(2, 4, 4, 3), _rand(4, 3, 3, 3), [2, 3, 6, 5], [1, 1], [0, 0], [1, 1], 1, "Direct"),
        "conv_weight_backward": (x4.detach(), _rand(2, 4, 4, 3), [4, 3, 3, 3], [1, 1], [0, 0], [1, 1], 1, "Direct"),
        "max_pool": (x4, 2, [3, 2], None, [1, 0], [1, 1], True),
        "max_pool_with_indices": (x4, 2, [2, 2], [1, 2], [0, 0], [1, 1], False),
        "avg_pool": (x4, 2, [2, 2], None, [1, 1], True, False, None),
        "adaptive_avg_pool": (x4, 2, [4, 3]), "adaptive_max_pool": (x4, 2, [2, 2]),
        "max_pool_backward": (x4.detach(), torch.ones(2, 3, 3, 2), idx, 2, [2, 2], None, [0, 0], [1, 1], False),
        "avg_pool_backward": (x4.detach(), torch.ones(2, 3, 3, 2), 2, [2, 2], None, [0, 0], False, True, None),
        "adaptive_avg_pool_backward": (x4.detach(), torch.ones(2, 3, 2, 2), 2),
        "adaptive_max_pool_backward": (x4.detach(), torch.ones(2, 3, 2, 2), aidx, 2),
        "interpolate": (x4, [4, 7], "Bicubic", False),
        "interpolate_backward": (x4.detach(), torch.ones(2, 3, 4, 7), [4, 7], "Linear", True),
        "grid_sample": (x4, grid, "Bilinear", "Border", False),
        "grid_sample_backward": (x4.detach(), grid.detach(), torch.ones(2, 3, 3, 4), "Bicubic", "Zeros", True),
        "ctc_loss": (lp, targets, il, tl, 0, "mean", False),
        "ctc_alpha_beta": (lp.detach(), targets, il, tl, 0),
        "ctc_loss_backward": (lp.detach(), targets, il, tl, torch.ones(2), 0, "none", False),
        "attention": (_rand(1, 2, 3, 8), _rand(1, 1, 5, 8), _rand(1, 1, 5, 4), None, None, None, 20.0, True, "Fallback",
                      []),
        "paged_attention": (_rand(2, 2, 8), kc, _rand(3, 4, 1, 8), *plan, 0.5, True, 0),
        "paged_mla": (_rand(2, 2, 8), _rand(2, 2, 2), kc, _rand(3, 4, 1, 2), *plan, 0.5, False, 2),
        "paged_append": (_rand(2, 1, 8), _rand(2, 1, 8), kc.clone(), kc.clone(), *plan),
        "moe_route": (logits, 2, True), "moe_route_sigmoid_grouped": (logits, _rand(4), 2, 2, 1, True, True, 1.5),
        "moe_dispatch": (xm, ids, rw, 4), "moe_combine": (_rand(10, 3), ids, rw, *d),
        "moe_experts_dispatched": (gate, gate, down, ids, rw, *d, "Scalar"),
        "moe_swiglu_experts": (xm, logits, gate, gate, down, 2, False),
        "moe_swiglu_experts_sigmoid_grouped": (xm, logits, None, gate, gate, down, 2, 2, 1, False, True, 1.0, "Auto"),
        "gated_delta_rule": gd, "chunk_gated_delta_rule": (*gd, 2),
    }


def _registered_ops() -> set:
    return {n for n in dir(torch.ops.rudnn) if isinstance(getattr(torch.ops.rudnn, n), torch._ops.OpOverloadPacket)}


def test_every_registered_op_has_a_sample():
    assert set(_op_samples()) == _registered_ops()


@pytest.mark.parametrize("name", sorted(_registered_ops()))
def test_opcheck(name):
    """Schema, autograd registration and the fake impl (exact shapes, dtypes, devices)."""
    samples = _op_samples()
    torch.library.opcheck(getattr(torch.ops.rudnn, name).default, samples[name],
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))


# ---------------------------------------------------------------------------- torch.compile
def test_compile_fullgraph_forward_and_backward():
    """A block of several ops traces with no graph break (fullgraph), and its gradients equal eager's."""
    x = _rand(2, 3, 8, 8, grad=True)
    w = _rand(4, 3, 3, 3, grad=True, scale=0.3)
    gamma = _rand(4, grad=True)

    def block(x):
        y = R.conv_forward(x, w, None, padding=1, strategy="Direct")
        y = R.max_pool2d(y, 2)
        y = R.interpolate(y, (6, 6), "Linear")
        y = R.layer_norm(y.permute(0, 2, 3, 1), gamma)
        y = R.softmax_last_axis(y)
        return R.adaptive_avg_pool2d(y.permute(0, 3, 1, 2), 1).sum()

    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    got = compiled(x)
    grads = torch.autograd.grad(got, (x, w, gamma))
    want = block(x)
    torch.testing.assert_close(got, want)
    for a, b in zip(grads, torch.autograd.grad(want, (x, w, gamma))):
        torch.testing.assert_close(a, b)


@pytest.mark.skipif(not os.environ.get("RUDNN_TORCH_INDUCTOR"),
                    reason="inductor's C++ compile takes ~30 s on a 2-core host; set RUDNN_TORCH_INDUCTOR=1")
def test_compile_with_inductor():
    x, w = _rand(4, 32, grad=True), _rand(32, grad=True)
    compiled = torch.compile(lambda x: (R.rms_norm(x, w) * 2).sum(), fullgraph=True)
    got = compiled(x)
    torch.testing.assert_close(got, (F.rms_norm(x, (32,), w, 1e-6) * 2).sum(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.autograd.grad(got, x)[0],
                               torch.autograd.grad((F.rms_norm(x, (32,), w, 1e-6) * 2).sum(), x)[0],
                               atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------- the bridge
def test_conversion_is_zero_copy_both_ways():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]  # a strided view
    rt = bridge.runtime_of(x)
    t = bridge.to_kd(rt, x)
    assert t.shape == (3, 3) and t.strides == (4, 1)
    x[0, 0] = -5.0
    assert t.numpy()[0, 0] == -5.0
    y = bridge.to_torch(t)
    y[1, 1] = 7.0
    assert x[1, 1] == 7.0
    out = R.softmax_last_axis(x)  # an op's result is the kd output's memory, returned as is
    assert out.is_contiguous() and out.shape == x.shape


def test_ops_name_bad_enum_arguments():
    x = _rand(1, 1, 4, 4)
    with pytest.raises(ValueError, match="mode must be one of Nearest, NearestExact, Linear"):
        R.interpolate(x, (2, 2), "bilinear")
    with pytest.raises(ValueError, match="padding_mode"):
        R.grid_sample(x, torch.zeros(1, 2, 2, 2), "Bilinear", "zeros")
    with pytest.raises(ValueError, match="kernel_size must be an int or 2 ints"):
        R.max_pool2d(x, (2, 2, 2))


def test_cuda_tensors_run_on_torchs_current_stream(monkeypatch):
    """The stream glue: a CUDA tensor's ops run inside rt.use_stream(rt.external_stream(handle))
    with torch's current stream handle (a recorded fake runtime: no GPU needed)."""
    calls = []

    class Stream:
        cuda_stream = 0xBEEF

        def synchronize(self):
            calls.append("torch sync")

    class Rt:
        def external_stream(self, handle):
            calls.append(("wrap", handle))
            return ("stream", handle)

        def use_stream(self, s):
            calls.append(("use", s))
            return _nullcontext()

    class CudaLike:
        is_cuda = True
        device = "cuda:0"

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    rt = Rt()
    for _ in range(2):
        with bridge.on_torch_stream(rt, CudaLike()):
            calls.append("body")
    assert calls == [("wrap", 0xBEEF), ("use", ("stream", 0xBEEF)), "body", ("use", ("stream", 0xBEEF)), "body"]
    calls.clear()
    with bridge.on_torch_stream(rt, torch.zeros(1)):  # a host tensor: no stream
        calls.append("body")
    assert calls == ["body"]

    class OldRt:  # a kerneldsl without external streams: torch's stream drained, then ours
        def synchronize(self):
            calls.append("kd sync")

    calls.clear()
    with bridge.on_torch_stream(OldRt(), CudaLike()):
        calls.append("body")
    assert calls == ["torch sync", "body", "kd sync"]


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_docs_list_every_op_and_their_example_runs():
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "torch.md").read_text()
    missing = sorted(n for n in _registered_ops() if f"`rudnn::{n}(" not in text)
    assert not missing, f"docs/torch.md lacks the ops {missing}"
    import re
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        exec(compile(block, "docs/torch.md", "exec"), {})


def test_rudnn_imports_without_torch_and_rudnn_torch_says_what_it_needs():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import rudnn, rudnn.normalization\n"
            "try:\n    import rudnn.torch\nexcept ImportError as e:\n    print('ImportError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ImportError: rudnn.torch needs PyTorch" in out.stdout and "oracle" in out.stdout
