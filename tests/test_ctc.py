"""rudnn.ctc (SPEC §10) on every runtime: PyTorch CPU F.ctc_loss and its autograd gradient
as the oracle (float64) over random batches with empty targets, repeated labels, input
length 0 and too-short inputs (inf / zero_infinity), blanks anywhere; a float64 numpy
model for alpha and beta; unbatched input; concatenated targets; the global-workspace
recursion; one long target (S = 2000); every CtcError rule before any launch."""
import dataclasses

import numpy as np
import pytest

import kerneldsl as kd
import rudnn.ctc as R
from reference import ctc as ref
from rudnn.ctc import CtcError
from rudnn.ctc import tuning
from family_checks import OtherRuntime as _OtherRuntime, assert_each_rejected, refuse_launches

torch = pytest.importorskip("torch", reason="PyTorch CPU (the oracle extra) is the reference for F.ctc_loss")
F = torch.nn.functional

pytestmark = pytest.mark.feature("ctc")
DTYPES = ["f32", "f16", "bf16"]
REDUCTIONS = ["none", "sum", "mean"]
# results stored in the dtype of log_probs (computed in F32 from the same rounded inputs)
RTOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}


def host(a, dtype):
    """`a` rounded to `dtype` on the host (what the kernels see)."""
    return np.asarray(a, np.float32).astype(kd.as_dtype(dtype).np)


def batch(rng, T, C, target_lengths, input_lengths, blank, dtype="f32", S=None):
    """(log_probs [T, N, C] in dtype, padded targets [N, S] I64, lengths): labels avoid the
    blank; every third label repeats its predecessor (a blank is then forced between)."""
    N = len(target_lengths)
    x = rng.standard_normal((T, N, C)) * 2
    lp = host(x - np.log(np.exp(x).sum(-1, keepdims=True)), dtype)
    S = max(max(target_lengths), 1) if S is None else S
    labels = rng.integers(0, C - 1, (N, S))
    labels = labels + (labels >= blank)  # skip the blank
    labels[:, 2::3] = labels[:, 1:-1:3][:, :labels[:, 2::3].shape[1]]
    return lp, labels, np.asarray(input_lengths, np.int64), np.asarray(target_lengths, np.int64)


def torch_loss_and_grad(lp, targets, il, tl, blank, reduction, zero_infinity, grad_out):
    """F.ctc_loss in float64 on the rounded inputs, and log_probs.grad for grad_out."""
    x = torch.tensor(np.asarray(lp, np.float64), requires_grad=True)
    loss = F.ctc_loss(x, torch.tensor(targets), torch.tensor(il), torch.tensor(tl), blank=blank,
                      reduction=reduction, zero_infinity=zero_infinity)
    loss.backward(torch.tensor(grad_out, dtype=torch.float64))
    return loss.detach().numpy(), x.grad.numpy()


def close(got, want, dtype, scale=1.0):
    r = RTOL[dtype]
    got = np.asarray(got, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    assert np.array_equal(np.isposinf(got), np.isposinf(want)), (got, want)
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=r, atol=r * scale)


def on(rt, lp, targets, il, tl):
    return rt.tensor(lp), rt.tensor(targets.astype(np.int32)), rt.tensor(il.astype(np.int32)), rt.tensor(tl)


# a batch with every case: input length 0 with an empty and a non-empty target, an input too
# short for its (repeated-label) target, an empty target, a full-length one
CASE_TL = [4, 0, 3, 0, 7, 1, 6]
CASE_IL = [13, 9, 0, 0, 5, 17, 17]


@pytest.mark.parametrize("dtype", DTYPES)
def test_loss_and_gradient_match_torch(runtime, rng, dtype):
    T, C, blank = 17, 6, 2 if dtype == "f32" else 0
    lp, targets, il, tl = batch(rng, T, C, CASE_TL, CASE_IL, blank, dtype)
    args = on(runtime, lp, targets, il, tl)
    for reduction in REDUCTIONS:
        for zi in (False, True):
            grad_out = np.linspace(0.5, 2.0, len(tl)) if reduction == "none" else np.float64(1.5)
            want, want_grad = torch_loss_and_grad(lp, targets, il, tl, blank, reduction, zi, grad_out)
            got = R.ctc_loss(*args, blank=blank, reduction=reduction, zero_infinity=zi)
            assert got.dtype is kd.as_dtype(dtype) and got.shape == np.shape(want)
            close(got.numpy(), want, dtype, scale=float(np.abs(want[np.isfinite(want)]).max(initial=1.0)))
            g = runtime.tensor(host(grad_out, "f32"))
            grad = R.ctc_loss_backward(*args, g, blank=blank, reduction=reduction, zero_infinity=zi)
            assert grad.dtype is kd.as_dtype(dtype) and grad.shape == lp.shape
            close(grad.numpy(), want_grad, dtype, scale=2.0)


def test_alpha_beta_match_float64_model(runtime, rng):
    T, C, blank = 11, 5, 4
    lp, targets, il, tl = batch(rng, T, C, [3, 0, 5, 2], [11, 4, 10, 0], blank, S=6)
    alpha, beta, nll = R.ctc_alpha_beta(*on(runtime, lp, targets, il, tl), blank=blank)
    labels = [targets[n, :tl[n]] for n in range(len(tl))]
    ra, rb, rn = ref.alpha_beta(lp, labels, il, blank, 2 * 6 + 1)
    for got, want in ((alpha, ra), (beta, rb)):
        assert got.dtype is kd.f32 and got.shape == (T, 4, 13)
        got = got.numpy()
        assert np.array_equal(got == -np.inf, want == -np.inf)
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)
    close(nll.numpy(), rn, "f32")
    # the log occupancies of every step sum to one path probability: logsumexp_s(α + β − lp) = −nll
    lab = np.stack([np.resize(ref.extended(targets[n, :tl[n]], blank), 13) for n in range(4)])
    occ = alpha.numpy() + beta.numpy() - np.take_along_axis(lp, lab[None].repeat(T, 0), 2)
    with np.errstate(divide="ignore"):
        total = np.log(np.exp(occ.astype(np.float64)).sum(-1))
    np.testing.assert_allclose(total[:10, 2], -rn[2], rtol=1e-5)


def test_concatenated_targets_match_padded(runtime, rng):
    T, C, blank = 15, 7, 0
    lp, targets, il, tl = batch(rng, T, C, [2, 0, 5, 3], [15, 3, 12, 6], blank)
    flat = np.concatenate([targets[n, :tl[n]] for n in range(4)]).astype(np.int64)
    t_lp, _, t_il, t_tl = on(runtime, lp, targets, il, tl)
    t_flat = runtime.tensor(flat)  # I64 targets, lengths as Python ints
    want, want_grad = torch_loss_and_grad(lp, flat, il, tl, blank, "mean", False, np.float64(1.0))
    close(R.ctc_loss(t_lp, t_flat, il.tolist(), tl.tolist()).numpy(), want, "f32")
    close(R.ctc_loss_backward(t_lp, t_flat, t_il, t_tl, 1.0).numpy(), want_grad, "f32")
    alpha, _, nll = R.ctc_alpha_beta(t_lp, t_flat, t_il, t_tl)
    assert alpha.shape == (T, 4, 11)  # S = the longest target
    pa, _, pn = R.ctc_alpha_beta(t_lp, runtime.tensor(targets), t_il, t_tl)
    np.testing.assert_array_equal(nll.numpy(), pn.numpy())
    np.testing.assert_array_equal(alpha.numpy(), pa.numpy()[..., :11])


def test_unbatched(runtime, rng):
    T, C, blank = 9, 4, 1
    lp, targets, il, tl = batch(rng, T, C, [3], [8], blank, "f16")
    lp1, tg1 = lp[:, 0], targets[0]
    t_lp, t_tg = runtime.tensor(lp1), runtime.tensor(tg1)
    for reduction in REDUCTIONS:
        x = torch.tensor(lp1.astype(np.float64), requires_grad=True)
        loss = F.ctc_loss(x, torch.tensor(tg1), torch.tensor(8), torch.tensor(3), blank=blank, reduction=reduction)
        loss.backward(torch.tensor(0.75, dtype=torch.float64))
        got = R.ctc_loss(t_lp, t_tg, 8, runtime.tensor(np.array([3], np.int32)), blank=blank, reduction=reduction)
        assert got.shape == ()
        close(got.numpy(), loss.detach().numpy(), "f16", scale=10.0)
        grad = R.ctc_loss_backward(t_lp, t_tg, 8, 3, 0.75, blank=blank, reduction=reduction)
        assert grad.shape == (T, C)
        close(grad.numpy(), x.grad.numpy(), "f16", scale=2.0)
    alpha, beta, nll = R.ctc_alpha_beta(t_lp, t_tg, 8, 3, blank=blank)
    assert alpha.shape == beta.shape == (T, 7) and nll.shape == ()


def test_strided_log_probs(runtime, rng):
    T, C = 10, 5
    lp, targets, il, tl = batch(rng, T, C, [2, 4], [10, 9], 0)
    view = runtime.tensor(np.ascontiguousarray(lp.transpose(1, 0, 2))).permute(1, 0, 2)  # [T, N, C] with N outermost in memory
    assert not view.is_contiguous()
    want, want_grad = torch_loss_and_grad(lp, targets, il, tl, 0, "sum", False, np.float64(1.0))
    args = (view, runtime.tensor(targets), runtime.tensor(il), runtime.tensor(tl))
    close(R.ctc_loss(*args, reduction="sum").numpy(), want, "f32", scale=10.0)
    close(R.ctc_loss_backward(*args, 1.0, reduction="sum").numpy(), want_grad, "f32")
    # an unbatched sample of it: [T, C] rows N·C apart (copied by a launch after the checks)
    losses, grads = torch_loss_and_grad(lp, targets, il, tl, 0, "none", False, np.ones(2))
    one = runtime.tensor(lp)[:, 1]
    assert not one.is_contiguous()
    args = (one, runtime.tensor(targets[1]), int(il[1]), int(tl[1]))
    close(R.ctc_loss(*args, reduction="sum").numpy(), losses[1], "f32", scale=10.0)
    close(R.ctc_loss_backward(*args, 1.0, reduction="sum").numpy(), grads[:, 1], "f32")


def test_global_workspace_recursion(runtime, rng, monkeypatch):
    """States in a global workspace (what targets beyond the shared budget use) give the shared result."""
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")  # (a replay would run the first plan's launches again)
    lp, targets, il, tl = batch(rng, 14, 6, [5, 0, 3], [14, 6, 9], 3)
    args = on(runtime, lp, targets, il, tl)
    monkeypatch.setattr(R, "recursion_plan", lambda caps, states, planes: tuning.recursion_plan(
        caps, states, planes, on_planes=False))
    assert R.recursion_plan(runtime.capabilities, 11, 3).shared
    shared = [t.numpy() for t in R.ctc_alpha_beta(*args, blank=3)]
    shared_grad = R.ctc_loss_backward(*args, 1.0, blank=3).numpy()
    monkeypatch.setattr(R, "recursion_plan", lambda caps, states, planes: tuning.recursion_plan(
        caps, states, planes, shared_bytes=0, on_planes=False))
    plan = R.recursion_plan(runtime.capabilities, 11, 3)
    assert not plan.shared and not plan.per_lane
    for got, want in zip(R.ctc_alpha_beta(*args, blank=3), shared):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(R.ctc_loss_backward(*args, 1.0, blank=3).numpy(), shared_grad)


def test_recursion_with_labels_kept_or_not(runtime, rng, monkeypatch):
    """The cube recursion with each state's label and skip rule kept in shared memory (what SIMD
    units do) and worked out every step, in blocks of 16 states (S up to 20: three blocks),
    with repeated labels: alpha, beta and nll the same bits, the loss PyTorch's."""
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")  # (a replay would run the first form's launches again)
    monkeypatch.setattr(tuning, "cube_units", lambda caps, states: 16)
    lp, targets, il, tl = batch(rng, 30, 6, [20, 0, 13], [30, 4, 29], 0)
    targets[0, 4:8] = [3, 3, 5, 5]
    args = on(runtime, lp, targets, il, tl)
    want = torch_loss_and_grad(lp, targets, il, tl, 0, "none", False, np.ones(3))[0]
    original, got = tuning.recursion_plan, {}
    for labels in (True, False):
        def plan(caps, states, planes, labels=labels):
            p = original(caps, states, planes, on_planes=False)
            return dataclasses.replace(p, labels=labels)
        monkeypatch.setattr(R, "recursion_plan", plan)
        assert plan(runtime.capabilities, 41, 3).shared and plan(runtime.capabilities, 41, 3).units == 16
        close(R.ctc_loss(*args, reduction="none").numpy(), want, "f32", scale=10.0)
        got[labels] = [t.numpy() for t in R.ctc_alpha_beta(*args)]
    for a, b in zip(got[True], got[False]):
        np.testing.assert_array_equal(a, b)


def test_gradient_with_occupancies_staged_or_not(runtime, rng, monkeypatch):
    """The gradient with a step's occupancies staged in shared memory first (what SIMD units do)
    and scattered as they are computed (what GPUs do), two class passes each: PyTorch's gradient,
    and the same bits both ways where units are SIMD lanes (their atomics add in lane order;
    elsewhere the order of a class's adds is the device's, so within an F32 rounding). Repeated
    labels put two states on one class."""
    lp, targets, il, tl = batch(rng, 13, 9, [6, 0, 4], [13, 5, 11], 2)
    targets[0, :3] = [4, 4, 7]
    args = on(runtime, lp, targets, il, tl)
    want = torch_loss_and_grad(lp, targets, il, tl, 2, "mean", False, np.float64(1.0))[1]
    monkeypatch.setattr(tuning, "MAX_CLASS_CHUNK", 8)
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")  # (a replay would run the first form's launches again)
    original, got = tuning.grad_plan, {}
    for staged in (True, False):
        def plan(caps, T, N, C, states, staged=staged):
            p = original(caps, T, N, C, states)
            return dataclasses.replace(p, staged=tuning._pow2_at_least(states, 32) if staged else 0)
        monkeypatch.setattr(R, "grad_plan", plan)
        assert (plan(runtime.capabilities, 13, 3, 9, 13).staged > 0) == staged
        got[staged] = R.ctc_loss_backward(*args, 1.0, blank=2).numpy()
        close(got[staged], want, "f32")
    if runtime.capabilities.units_are_simd_lanes:
        np.testing.assert_array_equal(got[True], got[False])
    else:
        np.testing.assert_allclose(got[True], got[False], rtol=1e-6, atol=1e-7)


def test_gpu_cube_shapes_run_here(runtime, rng, monkeypatch):
    """The cube shapes a GPU picks (256 units: idle units past the states, one state a unit), and
    classes scattered in two passes of 32 (what C > 2048 does)."""
    monkeypatch.setattr(tuning, "cube_units", lambda caps, states: 256)
    monkeypatch.setattr(tuning, "MAX_CLASS_CHUNK", 32)
    monkeypatch.setattr(R, "recursion_plan", lambda caps, states, planes: tuning.recursion_plan(
        caps, states, planes, on_planes=False))
    lp, targets, il, tl = batch(rng, 16, 40, [9, 0, 30], [16, 5, 16], 7)
    assert R.recursion_plan(runtime.capabilities, 61, 6).units == 256
    assert tuning.grad_plan(runtime.capabilities, 16, 3, 40, 61).class_chunk == 32
    args = on(runtime, lp, targets, il, tl)
    want, want_grad = torch_loss_and_grad(lp, targets, il, tl, 7, "sum", True, np.float64(1.0))
    close(R.ctc_loss(*args, blank=7, reduction="sum", zero_infinity=True).numpy(), want, "f32", scale=10.0)
    close(R.ctc_loss_backward(*args, 1.0, blank=7, reduction="sum", zero_infinity=True).numpy(), want_grad, "f32")


def _plane_boundaries(rt):
    """Target widths S whose 2S + 1 states just fill, or just overflow, a plane of R = 2 states a
    lane (then R = 3) and a plane of the most states a lane (beyond it only the cube path runs)."""
    full = tuning.MAX_STATES_PER_LANE * rt.plane_dim
    return [(2 * rt.plane_dim - 2) // 2, 2 * rt.plane_dim // 2, (full - 2) // 2, full // 2]


@pytest.mark.parametrize("which", range(4), ids=["R2-fits", "R2-overflows", "plane-fits", "plane-overflows"])
def test_plane_and_cube_recursions_match_torch(runtime, rng, monkeypatch, which):
    """The plane path (states in one plane's registers) and the cube path on the same inputs, at
    the S where 2S + 1 just fits or just overflows a plane's R states a lane: PyTorch's loss and
    gradient on both, and the same alpha, beta and nll. Five samples (two cubes of planes on the
    cpu runtime, idle planes in the last) with an empty target, input length 0, repeated labels
    and inputs of different lengths stepping in one cube."""
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")  # (a replay would run the first path's launches again)
    S = _plane_boundaries(runtime)[which]
    T, C, blank = 2 * S + 2, 5, 1
    lp, targets, il, tl = batch(rng, T, C, [S, 0, S // 2, 0, S - 1], [T, 7, T - 3, 0, T - 1], blank)
    args = on(runtime, lp, targets, il, tl)
    want, want_grad = torch_loss_and_grad(lp, targets, il, tl, blank, "none", False, np.ones(5))
    fits = tuning.states_per_lane(runtime.capabilities, 2 * S + 1) > 0
    assert fits == (which != 3)
    by_default = fits and tuning.PLANE_PATH and not runtime.capabilities.units_are_simd_lanes
    assert R.recursion_plan(runtime.capabilities, 2 * S + 1, 5).per_lane == (tuning.states_per_lane(
        runtime.capabilities, 2 * S + 1) if by_default else 0)
    results = {}
    for on_planes in (True, False) if fits else (False,):
        monkeypatch.setattr(R, "recursion_plan", lambda caps, states, planes: tuning.recursion_plan(
            caps, states, planes, on_planes=on_planes))
        assert (R.recursion_plan(runtime.capabilities, 2 * S + 1, 5).per_lane > 0) == on_planes
        loss = R.ctc_loss(*args, blank=blank, reduction="none").numpy()
        close(loss, want, "f32", scale=float(want[np.isfinite(want)].max()))
        grad = R.ctc_loss_backward(*args, runtime.tensor(np.ones(5, np.float32)), blank=blank, reduction="none")
        # F32 log-space sums over hundreds of steps (losses up to ~700) leave ~1e-3 in the
        # occupancies, the same on both paths
        close(grad.numpy(), want_grad, "f32", scale=max(2.0, float(want[np.isfinite(want)].max()) / 10))
        results[on_planes] = [t.numpy() for t in R.ctc_alpha_beta(*args, blank=blank)]
    if fits:
        for plane, cube in zip(results[True], results[False]):
            assert np.array_equal(plane == -np.inf, cube == -np.inf)
            fin = np.isfinite(cube)
            np.testing.assert_allclose(plane[fin], cube[fin], rtol=1e-5, atol=1e-5)  # base 2 vs natural


def test_plane_path_needs_states_that_fit(runtime, monkeypatch):
    """R is the fewest states a lane that hold 2S + 1; the plane path runs by default only with
    tuning.PLANE_PATH on, where the states fit, and never by default on the cpu runtime."""
    caps = runtime.capabilities
    monkeypatch.setattr(tuning, "PLANE_PATH", True)
    plane_by_default = not caps.units_are_simd_lanes
    assert R.recursion_plan(caps, 2 * caps.plane_dim + 1, 64).per_lane == (3 if plane_by_default else 0)
    assert R.recursion_plan(caps, tuning.MAX_STATES_PER_LANE * caps.plane_dim + 1, 64).per_lane == 0
    full = tuning.MAX_STATES_PER_LANE * caps.plane_dim
    assert tuning.states_per_lane(caps, full) == tuning.MAX_STATES_PER_LANE
    assert tuning.states_per_lane(caps, 1) == 2
    assert tuning.states_per_lane(caps, 2 * caps.plane_dim + 1) == 3
    with pytest.raises(ValueError, match=f"{full + 1} states do not fit a plane of {caps.plane_dim} lanes"):
        tuning.recursion_plan(caps, full + 1, 4, on_planes=True)


@pytest.mark.feature("ctc: long targets")
def test_long_target(runtime, rng):
    """S = 2000 (4001 states: beyond the cpu's cube, on the global path where shared memory is small)."""
    S, T, C = 2000, 2300, 8
    lp, targets, il, tl = batch(rng, T, C, [S, 700], [T, 1900], 0)
    targets[:, 2::3] = (targets[:, 1:-1:3][:, :targets[:, 2::3].shape[1]] % (C - 1)) + 1  # no repeats: T suffices
    want, want_grad = torch_loss_and_grad(lp, targets, il, tl, 0, "none", False, np.ones(2))
    args = on(runtime, lp, targets, il, tl)
    loss = R.ctc_loss(*args, reduction="none").numpy()
    assert np.isfinite(loss).all()
    close(loss, want, "f32", scale=float(want.max()) * 0.1)
    # F32 log-space sums over 2300 steps of losses ~6000 leave ~5e-3 in the occupancies: torch's own
    # F32 gradient is 5.5e-3 from its float64 one here
    close(R.ctc_loss_backward(*args, runtime.tensor(np.ones(2, np.float32)), reduction="none").numpy(),
          want_grad, "f32", scale=500.0)


# ---------------------------------------------------------------------------- zero sizes, errors
@pytest.fixture
def no_launch(monkeypatch):
    """Any kernel launch fails the test (for zero-size batches and validation errors)."""
    refuse_launches(monkeypatch)


@pytest.mark.feature("ctc: errors")
def test_empty_batch_without_launching(runtime, no_launch):
    lp = runtime.tensor(np.zeros((5, 0, 3), np.float16))
    tg = runtime.tensor(np.zeros((0, 2), np.int32))
    none = runtime.tensor(np.zeros(0, np.int32))
    got = R.ctc_loss(lp, tg, none, none, reduction="none")
    assert got.shape == (0,) and got.dtype is kd.f16
    assert R.ctc_loss(lp, tg, none, none, reduction="sum").numpy() == 0
    assert np.isnan(R.ctc_loss(lp, tg, none, none).numpy())  # the mean of no losses, as torch's
    assert R.ctc_loss_backward(lp, tg, none, none, 1.0).shape == (5, 0, 3)
    alpha, beta, nll = R.ctc_alpha_beta(lp, tg, none, none)
    assert alpha.shape == beta.shape == (5, 0, 5) and nll.shape == (0,)
    concatenated = runtime.tensor(np.zeros(0, np.int32))  # (no samples, no offsets)
    assert R.ctc_loss(lp, concatenated, none, none, reduction="sum").numpy() == 0
    assert R.ctc_loss(lp, concatenated, [], [], reduction="none").shape == (0,)


def _bad_calls(rt):
    lp = rt.tensor(np.full((6, 2, 4), -np.log(4), np.float32))
    tg = rt.tensor(np.array([[1, 2, 3], [3, 3, 0]], np.int32))
    il = rt.tensor(np.array([6, 5], np.int32))
    tl = rt.tensor(np.array([3, 2], np.int32))
    foreign = kd.Tensor(_OtherRuntime(), tg.buffer, tg.shape, tg.dtype)
    i32 = lambda *v: rt.tensor(np.array(v, np.int32))  # noqa: E731
    return [
        ("log_probs must be", lambda: R.ctc_loss(np.zeros((6, 2, 4), np.float32), tg, il, tl)),
        ("log_probs must be F32, F16 or BF16", lambda: R.ctc_loss(rt.tensor(np.zeros((6, 2, 4), np.int32)), tg, il, tl)),
        ("log_probs must have rank 3", lambda: R.ctc_loss(rt.tensor(np.zeros((6, 2, 4, 1), np.float32)), tg, il, tl)),
        ("blank must be between 0 and C - 1 (3), got 4", lambda: R.ctc_loss(lp, tg, il, tl, blank=4)),
        ("blank must be", lambda: R.ctc_loss(lp, tg, il, tl, blank=-1)),
        ("blank must be an int", lambda: R.ctc_loss(lp, tg, il, tl, blank=0.0)),
        ("reduction must be one of", lambda: R.ctc_loss(lp, tg, il, tl, reduction="avg")),
        ("reduction must be one of", lambda: R.ctc_loss_backward(lp, tg, il, tl, 1.0, reduction=None)),
        ("zero_infinity must be a bool", lambda: R.ctc_loss(lp, tg, il, tl, zero_infinity=1)),
        ("targets must be an integer tensor", lambda: R.ctc_loss(lp, rt.tensor(np.ones((2, 3), np.float32)), il, tl)),
        ("targets must have rank 2", lambda: R.ctc_loss(lp, rt.tensor(np.ones((2, 3, 1), np.int32)), il, tl)),
        ("targets must have shape [N, S]", lambda: R.ctc_loss(lp, rt.tensor(np.ones((3, 3), np.int32)), il, tl)),
        ("targets must have rank 1", lambda: R.ctc_loss(lp[:, 0], tg, 6, 3)),
        ("labels not the blank (0)", lambda: R.ctc_loss(lp, rt.tensor(np.array([[1, 0, 3], [3, 3, 0]], np.int32)), il, tl)),
        ("labels in [0, C) = [0, 4) within each target length, got 4 in sample 1",
         lambda: R.ctc_loss(lp, rt.tensor(np.array([[1, 2, 3], [4, 3, 0]], np.int32)), il, tl)),
        ("got -1 in sample 0", lambda: R.ctc_loss(lp, rt.tensor(np.array([[1, -1, 3], [3, 3, 0]], np.int32)), il, tl)),
        ("got 4 in sample 1", lambda: R.ctc_loss(lp, rt.tensor(np.array([1, 2, 3, 4, 3], np.int64)), il, tl)),
        ("got -5 in sample 1", lambda: R.ctc_loss(lp, rt.tensor(np.array([[1, 2, 3], [-5, 3, 0]], np.int64)), il, tl)),
        ("got 9 in sample 0", lambda: R.ctc_loss(lp, rt.tensor(np.array([[9, 2, 3], [3, 3, 0]], np.uint8)), il, tl)),
        ("got 4000000000 in sample 1",
         lambda: R.ctc_loss(lp, rt.tensor(np.array([[1, 2, 3], [3, 4000000000, 0]], np.uint32)), il, tl)),
        ("input_lengths must be between 0 and T (6), got 7 at index 1", lambda: R.ctc_loss(lp, tg, i32(6, 7), tl)),
        ("input_lengths must be between 0 and T", lambda: R.ctc_loss(lp, tg, [-1, 2], tl)),
        ("target_lengths must be between 0 and S (3), got 4", lambda: R.ctc_loss(lp, tg, il, i32(4, 2))),
        ("target_lengths must be between 0 and S", lambda: R.ctc_loss(lp, tg, il, i32(3, -2))),
        ("must sum to at most the length of the concatenated targets (5), got 6",
         lambda: R.ctc_loss(lp, rt.tensor(np.array([1, 2, 3, 3, 2], np.int32)), il, i32(3, 3))),
        ("input_lengths must be an integer tensor", lambda: R.ctc_loss(lp, tg, rt.tensor(np.ones(2, np.float32)), tl)),
        ("target_lengths must be an integer tensor or int(s)", lambda: R.ctc_loss(lp, tg, il, [3.0, 2.0])),
        ("target_lengths must be an integer tensor or int(s)", lambda: R.ctc_loss(lp, tg, il, None)),
        ("input_lengths must have shape [2]", lambda: R.ctc_loss(lp, tg, i32(6, 5, 4), tl)),
        ("target_lengths must have shape [1] or be a scalar", lambda: R.ctc_loss(lp[:, 0], tg[0], 6, i32(3, 2))),
        ("'other' but log_probs is on", lambda: R.ctc_loss(lp, foreign, il, tl)),
        ("grad_out must be a float tensor of shape [2]", lambda: R.ctc_loss_backward(lp, tg, il, tl, 1.0, reduction="none")),
        ("grad_out must have shape [2]", lambda: R.ctc_loss_backward(lp, tg, il, tl, i32(1), reduction="none")),
        ("grad_out must have shape []", lambda: R.ctc_loss_backward(lp, tg, il, tl, i32(1, 1))),
        ("'other' but log_probs", lambda: R.ctc_loss_backward(lp, tg, il, tl, kd.Tensor(_OtherRuntime(), il.buffer, (), kd.f32))),
        ("grad_out must be F32, F16 or BF16",
         lambda: R.ctc_loss_backward(lp, tg, il, tl, rt.tensor(np.ones(2, np.int32)), reduction="none")),
        ("log_probs must have rank 3", lambda: R.ctc_alpha_beta(rt.tensor(np.zeros(4, np.float32)), tg, il, tl)),
        # unbatched log_probs that are strided (lp[:, 0]) are copied only after every check
        ("got 9 in sample 0", lambda: R.ctc_loss(lp[:, 0], i32(1, 9), 6, 2)),
        ("input_lengths must be between 0 and T (6), got 7", lambda: R.ctc_alpha_beta(lp[:, 1], i32(1, 2), 7, 2)),
        ("grad_out must have shape []", lambda: R.ctc_loss_backward(lp[:, 0], i32(1, 2), 6, 2, i32(1, 1))),
    ]


@pytest.mark.feature("ctc: errors")
def test_every_error_rule_before_launch(runtime, no_launch):
    assert_each_rejected(_bad_calls(runtime), CtcError)


@pytest.mark.feature("ctc: errors")
def test_checked_layouts_are_remembered_and_every_rule_still_holds(runtime, monkeypatch):
    """A layout checked once is not checked again (problem._form runs once for repeated
    calls), and remembering it lets nothing through: after good calls of the layouts the bad
    calls share (same shapes, other dtypes, runtimes or values), each is still rejected."""
    from rudnn.ctc import problem
    problem._FORMS.clear()
    forms = []
    monkeypatch.setattr(problem, "_form", lambda *a, _f=problem._form: forms.append(1) or _f(*a))
    lp = runtime.tensor(np.full((6, 2, 4), -np.log(4), np.float32))
    tg = runtime.tensor(np.array([[1, 2, 3], [3, 3, 0]], np.int32))
    il, tl = runtime.tensor(np.array([6, 5], np.int32)), runtime.tensor(np.array([3, 2], np.int32))
    first = R.ctc_loss(lp, tg, il, tl).numpy()
    assert len(forms) == 1
    for fn in (lambda: R.ctc_loss(lp, tg, il, tl), lambda: R.ctc_loss_backward(lp, tg, il, tl, 1.0),
               lambda: R.ctc_alpha_beta(lp, tg, il, tl)):
        fn()
    assert len(forms) == 1
    np.testing.assert_array_equal(R.ctc_loss(lp, tg, il, tl).numpy(), first)
    R.ctc_loss(lp, tg, il, tl, reduction="none")
    assert len(forms) == 2
    with monkeypatch.context() as m:  # (rejected before any launch)
        refuse_launches(m)
        assert_each_rejected(_bad_calls(runtime), CtcError)
        m.setattr(problem, "FORMS_KEPT", 2)  # a full cache is emptied: still every rule
        problem._FORMS.clear()
        assert_each_rejected(_bad_calls(runtime), CtcError)
        assert len(problem._FORMS) <= 2
    np.testing.assert_array_equal(R.ctc_loss(lp, tg, il, tl).numpy(), first)


@pytest.mark.feature("ctc: errors")
def test_error_rules_on_arrays_past_the_small_checks(runtime, no_launch):
    """Lengths and labels longer than problem.SMALL are checked by numpy reductions, shorter
    ones as Python lists: the same rules and messages either way (the offender the last one)."""
    from rudnn.ctc import problem
    N, S = problem.SMALL + 6, 3
    lp = runtime.tensor(np.full((6, N, 4), -np.log(4), np.float32))
    good = np.tile(np.array([1, 2, 3], np.int64), (N, 1))
    il, tl = np.full(N, 6, np.int32), np.full(N, S, np.int32)

    def with_last(a, value):
        a = a.copy()
        a.reshape(-1)[-1] = value
        return runtime.tensor(a)
    tg, il_t, tl_t = runtime.tensor(good), runtime.tensor(il), runtime.tensor(tl)
    assert_each_rejected([
        (f"got 4 in sample {N - 1}", lambda: R.ctc_loss(lp, with_last(good, 4), il_t, tl_t)),
        (f"got -1 in sample {N - 1}", lambda: R.ctc_loss(lp, with_last(good, -1), il_t, tl_t)),
        ("labels not the blank (0)", lambda: R.ctc_loss(lp, with_last(good, 0), il_t, tl_t)),
        (f"got 4000000000 in sample {N - 1}",
         lambda: R.ctc_loss(lp, with_last(good.astype(np.uint32), 4000000000), il_t, tl_t)),
        (f"input_lengths must be between 0 and T (6), got 7 at index {N - 1}",
         lambda: R.ctc_loss(lp, tg, with_last(il, 7), tl_t)),
        (f"target_lengths must be between 0 and S (3), got -1 at index {N - 1}",
         lambda: R.ctc_loss(lp, tg, il_t, with_last(tl, -1))),
    ], CtcError)


def test_padded_targets_of_width_zero(runtime, rng):
    """Targets [N, 0] (every target empty): each loss is the blank path's, -Σ_{t < length}
    lp[t, n, blank], and alpha and beta have one state."""
    lp = np.log(rng.dirichlet(np.ones(4), (6, 3))).astype(np.float32)
    il = np.array([6, 0, 3], np.int64)
    blank = 2
    want = -np.array([lp[:n, i, blank].astype(np.float64).sum() for i, n in enumerate(il)])
    args = (runtime.tensor(lp), runtime.tensor(np.zeros((3, 0), np.int64)), runtime.tensor(il), [0, 0, 0])
    got = R.ctc_loss(*args, blank=blank, reduction="none").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    alpha, beta, nll = R.ctc_alpha_beta(*args, blank=blank)
    assert alpha.shape == beta.shape == (6, 3, 1)
    np.testing.assert_allclose(nll.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.feature("ctc: errors")
def test_padding_past_each_target_length_is_not_checked(runtime):
    """Only labels within each sample's target length are checked (torch ignores the rest):
    padding outside [0, C), or the blank, changes nothing."""
    lp = runtime.tensor(np.log(np.random.default_rng(3).dirichlet(np.ones(4), (6, 2))).astype(np.float32))
    il, tl = [6, 5], runtime.tensor(np.array([2, 1], np.int64))
    clean = R.ctc_loss(lp, runtime.tensor(np.array([[1, 2, 1], [3, 1, 1]], np.int64)), il, tl, reduction="none")
    for pad in (-7, 99, 0, 2**40):
        got = R.ctc_loss(lp, runtime.tensor(np.array([[1, 2, pad], [3, pad, pad]], np.int64)), il, tl,
                         reduction="none")
        np.testing.assert_array_equal(got.numpy(), clean.numpy())


@pytest.mark.feature("ctc: errors")
def test_mixed_runtimes_name_both(runtime):
    others = [n for n in kd.available_runtimes() if kd.runtime(n).device_key != runtime.device_key]
    if not others:
        pytest.skip("this machine has a single runtime device; the stand-in runtime test covers the message")
    other = kd.runtime(others[0])
    lp = runtime.tensor(np.zeros((3, 1, 2), np.float32))
    with pytest.raises(CtcError, match=f"{other.name}.*{runtime.name}"):
        R.ctc_loss(lp, other.tensor(np.ones((1, 1), np.int32)), [3], [1])
