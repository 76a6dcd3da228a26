"""rudnn.convolution (SPEC §6) on every runtime: a float64 numpy reference over a sweep of
ranks, strides, paddings, dilations, groups (depthwise, 1x1, odd sizes), both layouts and
strided inputs; PyTorch CPU cross-checks; the implicit GEMM on F16/BF16 (the matrix
primitive's exact emulation off CUDA); determinism of the weight gradient; every error rule."""
import numpy as np
import pytest

import kerneldsl as kd
import rudnn
from family_checks import refuse_launches
from reference import convolution as ref
from rudnn.convolution import (ConvOptions, ConvSetupError, ConvStrategy, conv_data_backward, conv_forward,
                               conv_forward_nhwc, conv_weight_backward)

pytestmark = pytest.mark.feature("convolution")
Direct, ImplicitGemm, Autotune = ConvStrategy.Direct, ConvStrategy.ImplicitGemm, ConvStrategy.Autotune
TOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 1.6e-2}

# (x shape [B, C, *S], weight shape [K, C/g, *R], stride, padding, dilation, groups)
CASES = {
    "1d-basic": ((2, 3, 11), (5, 3, 3), 1, 1, 1, 1),
    "1d-stride-dil-groups": ((1, 4, 13), (6, 2, 3), 2, 2, 2, 2),
    "2d-3x3": ((2, 5, 7, 9), (7, 5, 3, 3), 1, 1, 1, 1),
    "2d-stride2-odd": ((1, 3, 10, 7), (4, 3, 3, 2), (2, 3), (1, 0), 1, 1),
    "2d-1x1": ((2, 8, 5, 3), (9, 8, 1, 1), 1, 0, 1, 1),
    "2d-depthwise": ((2, 6, 8, 7), (6, 1, 3, 3), 1, 1, 1, 6),
    "2d-groups-dil": ((1, 12, 9, 9), (12, 4, 3, 3), (1, 2), (2, 1), (2, 1), 3),
    "2d-big-pad": ((1, 2, 4, 3), (3, 2, 2, 2), 3, 2, 1, 1),
    "3d": ((1, 3, 5, 6, 4), (4, 3, 3, 2, 3), (1, 2, 1), 1, (1, 1, 2), 1),
}


def host(a, dtype):
    """`a` rounded to `dtype` and back to f32 (what the kernels see)."""
    return np.asarray(a, np.float32).astype(kd.as_dtype(dtype).np).astype(np.float32)


def close(got, want, dtype):
    """Within the dtype's rounding of the result's magnitude (F32 accumulation everywhere)."""
    got = np.asarray(got).astype(np.float64)
    assert got.shape == want.shape
    mag = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype] * mag)


def make(rng, case, dtype="f32", bias=True, cases=CASES):
    xs, ws, st, pd, dl, g = cases[case]
    x = host(rng.standard_normal(xs), dtype)
    w = host(rng.standard_normal(ws), dtype)
    b = host(rng.standard_normal(ws[0]), dtype) if bias else None
    opts = ConvOptions(stride=st, padding=pd, dilation=dl, groups=g)
    y = ref.forward(x, w, b, st, pd, dl, g)
    dy = host(rng.standard_normal(y.shape), dtype)
    return x, w, b, opts, y, dy, (st, pd, dl, g)


def channels_last(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def run_all(runtime, x, w, b, opts, dy, dtype, strategy):
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    tb = None if b is None else t(b)
    y = conv_forward(t(x), t(w), tb, opts, strategy)
    yl = conv_forward_nhwc(t(channels_last(x)), t(channels_last(w)), tb, opts, strategy)
    dx = conv_data_backward(t(dy), t(w), x.shape, opts, strategy)
    dw = conv_weight_backward(t(x), t(dy), w.shape, opts, strategy)
    for r in (y, yl, dx, dw):
        assert r.dtype is kd.as_dtype(dtype)
    return y.numpy(), np.moveaxis(yl.numpy(), -1, 1), dx.numpy(), dw.numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_direct_f32_sweep(runtime, rng, case):
    """Every pass and both layouts against the float64 reference."""
    x, w, b, opts, y_ref, dy, geo = make(rng, case)
    y, yl, dx, dw = run_all(runtime, x, w, b, opts, dy, "f32", Direct)
    close(y, y_ref, "f32")
    close(yl, y_ref, "f32")
    close(dx, ref.data_backward(dy, w, x.shape, *geo), "f32")
    close(dw, ref.weight_backward(x, dy, w.shape, *geo), "f32")


@pytest.mark.parametrize("strategy,case,dtype", [(Direct, "2d-3x3", "bf16"), (Direct, "3d", "f16"),
                                                 (ImplicitGemm, "2d-groups-dil", "bf16")],
                         ids=lambda v: getattr(v, "name", v))
def test_half_precision(runtime, rng, strategy, case, dtype):
    """F16/BF16 in and out, F32 accumulation; ImplicitGemm runs the fragment GEMM here."""
    x, w, b, opts, y_ref, dy, geo = make(rng, case, dtype)
    y, yl, dx, dw = run_all(runtime, x, w, b, opts, dy, dtype, strategy)
    close(y, y_ref, dtype)
    close(yl, y_ref, dtype)
    close(dx, ref.data_backward(dy, w, x.shape, *geo), dtype)
    close(dw, ref.weight_backward(x, dy, w.shape, *geo), dtype)


def test_implicit_gemm_multiple_tiles(runtime, rng, monkeypatch):
    """More than one 64 x 64 tile and BK step in every pass (row, column and reduction edges),
    with the geometry of the "2d-groups-dil" case (one compiled specialisation for both);
    the GEMM kernels run, not the Direct fallback."""
    from rudnn.convolution import direct
    for name in ("run_forward", "run_data_backward", "run_weight_backward"):
        monkeypatch.setattr(direct, name, lambda *a: pytest.fail("ImplicitGemm fell back to Direct"))
    _, _, st, pd, dl, g = CASES["2d-groups-dil"]
    x = host(rng.standard_normal((3, 30, 9, 11)), "bf16")
    w = host(rng.standard_normal((210, 10, 3, 3)), "bf16")
    opts = ConvOptions(stride=st, padding=pd, dilation=dl, groups=g)
    y_ref = ref.forward(x, w, None, st, pd, dl, g)
    dy = host(rng.standard_normal(y_ref.shape), "bf16")
    y, yl, dx, dw = run_all(runtime, x, w, None, opts, dy, "bf16", ImplicitGemm)
    close(y, y_ref, "bf16")
    close(yl, y_ref, "bf16")
    close(dx, ref.data_backward(dy, w, x.shape, st, pd, dl, g), "bf16")
    close(dw, ref.weight_backward(x, dy, w.shape, st, pd, dl, g), "bf16")


def test_implicit_gemm_channels_last_ring(runtime, rng, dtype="bf16"):
    """The async-copy ring of the NHWC forward (Cin/groups a multiple of 8): padding, stride,
    dilation, groups, partial row and column tiles, bias."""
    x = host(rng.standard_normal((3, 32, 9, 7)), dtype)
    w = host(rng.standard_normal((70, 16, 3, 3)), dtype)
    b = host(rng.standard_normal(70), dtype)
    opts = ConvOptions(stride=(2, 1), padding=(2, 1), dilation=(2, 1), groups=2)
    t = lambda a: runtime.tensor(channels_last(a), dtype=dtype)  # noqa: E731
    y = conv_forward_nhwc(t(x), t(w), runtime.tensor(b, dtype=dtype), opts, ImplicitGemm)
    close(np.moveaxis(y.numpy(), -1, 1), ref.forward(x, w, b, (2, 1), (2, 1), (2, 1), 2), dtype)


def forced_group_forward(runtime, x, w, b, opts, dtype, **shape):
    """conv_forward_nhwc through the group-product kernel (implicit_gemm_group), forced: it is
    chosen by default only where group products are native."""
    from rudnn.convolution import implicit_gemm_group, implicit_gemm_nhwc
    from rudnn.convolution.problem import as_5d, user_shape, validate_forward
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    p = validate_forward("conv_forward_nhwc", t(channels_last(x)), t(channels_last(w)),
                         None if b is None else t(b), opts, True)
    assert implicit_gemm_nhwc.covers(p)
    g = p.geo
    out = runtime.empty(user_shape((g.B, g.K, *g.O), g.rank, True), dtype)
    implicit_gemm_group.run_forward(p, as_5d(out, g.rank, True), runtime.zeros((1,), "f32"), **shape)
    return np.moveaxis(out.numpy(), -1, 1)


@pytest.mark.interpreter
def test_implicit_gemm_group_products(runtime, rng, dtype="bf16"):
    """The channels-last forward on group products (kd.group_mma, emulated off the H200), in
    the emulated devices' tile shape (BN 64, 3 slots, one product in flight): stride,
    padding, dilation, 2 groups, bias; M = 105 and Kg = 35 partial tiles, R = 144 (3 steps
    of 64, the last partial: the ring wraps)."""
    x = host(rng.standard_normal((3, 32, 9, 7)), dtype)
    w = host(rng.standard_normal((70, 16, 3, 3)), dtype)
    b = host(rng.standard_normal(70), dtype)
    opts = ConvOptions(stride=(2, 1), padding=(2, 1), dilation=(2, 1), groups=2)
    y = forced_group_forward(runtime, x, w, b, opts, dtype)
    close(y, ref.forward(x, w, b, (2, 1), (2, 1), (2, 1), 2), dtype)


@pytest.mark.interpreter
@pytest.mark.parametrize("groups,mi", [(4, 1), (2, 2)])
def test_implicit_gemm_group_products_256_row_tiles(runtime, rng, groups, mi, dtype="bf16"):
    """BM = 256 (issue 17): 4 groups of one 64-row fragment, or 2 groups of two sharing each
    B tile; one product step in flight (the wait covers MI products). Stride, padding,
    dilation, 2 groups, bias; M = 315 (a full and a partial tile, rows past M), Kg = 35, R = 144
    (3 steps of 64 in 3 slots: the ring wraps)."""
    if runtime.name == "interpreter" and groups != 2:
        pytest.skip("the interpreter runs the two-fragment case (slow); 4 groups run on cpu and opencl")
    x = host(rng.standard_normal((3, 32, 9, 21)), dtype)
    w = host(rng.standard_normal((70, 16, 3, 3)), dtype)
    b = host(rng.standard_normal(70), dtype)
    opts = ConvOptions(stride=(2, 1), padding=(2, 1), dilation=(2, 1), groups=2)
    y = forced_group_forward(runtime, x, w, b, opts, dtype, bn=64, stages=3, inflight=1, groups=groups, mi=mi)
    close(y, ref.forward(x, w, b, (2, 1), (2, 1), (2, 1), 2), dtype)


@pytest.mark.interpreter
@pytest.mark.parametrize("groups,mi,cubes,stationary", [(2, 1, 2, False), (2, 2, 1, False), (2, 1, 2, True)])
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_implicit_gemm_group_products_persistent(runtime, rng, groups, mi, cubes, stationary, dtype="bf16"):
    """The persistent form (implicit_gemm_group_persistent, issue 17): `cubes` cubes a (Cout
    tile, group) loop over the row tiles with one pipeline across them (3 slots, 2 steps
    ahead: the last steps of a tile fetch the next one's, the last tile's fetch zeros). M =
    315 in 3 (BM 128) or 2 (BM 256) tiles, so a cube does 1 or 2 tiles; R = 144 (3 steps),
    stride, padding, dilation, 2 groups, Kg = 35, bias; `stationary`: the 3 steps' weights
    copied once a cube, A alone in the ring."""
    from rudnn.convolution import implicit_gemm_group_persistent as pers
    from rudnn.convolution.problem import as_5d, user_shape, validate_forward
    if runtime.name == "interpreter" and not stationary:
        pytest.skip("the interpreter runs the stationary case (slow); the others run on cpu and opencl")
    x = host(rng.standard_normal((3, 32, 9, 21)), dtype)
    w = host(rng.standard_normal((70, 16, 3, 3)), dtype)
    b = host(rng.standard_normal(70), dtype)
    opts = ConvOptions(stride=(2, 1), padding=(2, 1), dilation=(2, 1), groups=2)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    p = validate_forward("conv_forward_nhwc", t(channels_last(x)), t(channels_last(w)), t(b), opts, True)
    assert pers.fits(p, 64, 3, 0, groups, mi, stationary)
    g = p.geo
    out = runtime.empty(user_shape((g.B, g.K, *g.O), g.rank, True), dtype)
    pers.launch(p, as_5d(out, g.rank, True), runtime.zeros((1,), "f32"), 64, 3, 0, groups, mi, cubes, stationary)
    close(np.moveaxis(out.numpy(), -1, 1), ref.forward(x, w, b, (2, 1), (2, 1), (2, 1), 2), dtype)


def test_implicit_gemm_group_products_native_shape(runtime, rng, dtype="f16"):
    """The H200's tile shape (BN 128, 4 slots), every product waited for in its step: 2 x 2
    partial tiles of 128 x 128 (M = 144, Kg = 136), R = 216 (4 steps: the ring wraps), bias;
    pairs=True (issue 17; Kg even): the emulations' layouts never put a lane's elements q, q + 1
    in adjacent columns, so they take the per-element fallback here; the paired stores run
    only where the layout is native (CUDA: compile-checked in test_cuda_codegen)."""
    x = host(rng.standard_normal((1, 24, 12, 12)), dtype)
    w = host(rng.standard_normal((136, 24, 3, 3)), dtype)
    b = host(rng.standard_normal(136), dtype)
    y = forced_group_forward(runtime, x, w, b, ConvOptions(padding=1), dtype, bn=128, stages=4, inflight=0, pairs=True)
    close(y, ref.forward(x, w, b, 1, 1, 1, 1), dtype)


def test_group_products_are_chosen_from_capabilities(runtime):
    """The group-product forward is the default exactly where group products are native and
    the ring path's operand rules hold (Cin/groups a multiple of 8)."""
    import dataclasses
    from types import SimpleNamespace

    from rudnn.convolution import implicit_gemm_group
    from rudnn.convolution.problem import validate_forward

    def problem(cg, native, w=None):
        x = runtime.zeros((1, 6, 6, 2 * cg), "bf16")
        w = runtime.zeros((16, 3, 3, cg), "bf16") if w is None else w
        p = validate_forward("conv_forward_nhwc", x, w, None, ConvOptions(padding=w.shape[1] // 2, groups=2), True)
        caps = dataclasses.replace(runtime.capabilities, group_mma_native=native, plane_dim=32,
                                   max_cube_units=1024, max_shared_bytes=227 * 1024)
        return SimpleNamespace(runtime=SimpleNamespace(capabilities=caps, plane_dim=32), dtype=p.dtype, geo=p.geo,
                               x=p.x, w=p.w, bias=None)

    assert implicit_gemm_group.covers(problem(16, True))
    assert not implicit_gemm_group.covers(problem(16, False))
    assert not implicit_gemm_group.covers(problem(12, True))
    # a 1x1 kernel whose size-1 axes have stride 1 (torch's `.permute(0, 2, 3, 1).contiguous()
    # .to(torch.bfloat16)` gives these): those strides never move an address
    w11 = runtime.zeros((16, 16, 1, 1), "bf16").permute(0, 2, 3, 1)
    assert w11.strides == (16, 1, 1, 1)
    assert implicit_gemm_group.covers(problem(16, True, w11))
    assert implicit_gemm_group.tile_shape(problem(16, True).runtime.capabilities, 256) == (128, 3, 0)
    # 256-row tiles (2 groups of 2 fragments) for long reductions, where products are native
    native, emulated = problem(16, True).runtime.capabilities, problem(16, False).runtime.capabilities
    assert implicit_gemm_group.tile_rows(native, 256 * 9) == (2, 2)
    assert implicit_gemm_group.tile_rows(native, 128 * 9) == (2, 1)
    assert implicit_gemm_group.tile_rows(emulated, 256 * 9) == (2, 1)


def test_implicit_gemm_routes_to_group_products(runtime, rng, monkeypatch, dtype="bf16"):
    """Where implicit_gemm_group.covers holds, the public forward runs that kernel (covers
    forced true here: the emulated device has no native group products)."""
    from rudnn.convolution import implicit_gemm_group
    calls = []
    run = implicit_gemm_group.run_forward
    monkeypatch.setattr(implicit_gemm_group, "covers", lambda p: True)
    monkeypatch.setattr(implicit_gemm_group, "run_forward", lambda *a: (calls.append(1), run(*a)))
    x = host(rng.standard_normal((1, 16, 6, 5)), dtype)
    w = host(rng.standard_normal((24, 8, 3, 3)), dtype)
    opts = ConvOptions(stride=(2, 1), padding=(2, 1), dilation=(2, 1), groups=2)
    t = lambda a: runtime.tensor(channels_last(a), dtype=dtype)  # noqa: E731
    y = conv_forward_nhwc(t(x), t(w), None, opts, ImplicitGemm)
    assert calls == [1]
    close(np.moveaxis(y.numpy(), -1, 1), ref.forward(x, w, None, (2, 1), (2, 1), (2, 1), 2), dtype)


POINTWISE_CASES = {  # x shape [B, C, *S], K, bias, dtype, tile stored through shared memory
    "2d-bias-partial-tiles": ((2, 24, 5, 7), 40, True, "bf16", True),
    "2d-bias-element-stores": ((2, 24, 5, 7), 40, True, "bf16", False),
    "1d-no-bias": ((3, 16, 50), 8, False, "f16", True),
    "3d-bias": ((1, 8, 3, 4, 5), 24, True, "bf16", True),
}


@pytest.mark.parametrize("case", list(POINTWISE_CASES))
def test_pointwise_forward_on_the_roles_gemm(runtime, rng, monkeypatch, case):
    """A 1×1, stride-1, unpadded, ungrouped channels-last forward is y = x·wᵀ (+ bias) on the
    MoE roles GEMM (pointwise.py; its bulk copies, roles and group products emulated off
    Hopper, so gemm_roles.usable is forced here): partial row and column tiles, 1/2/3-D, the
    tile leaving by bulk stores (staged) or element by element."""
    from rudnn.convolution import pointwise
    from rudnn.moe import gemm_roles
    xs, K, with_bias, dtype, staged = POINTWISE_CASES[case]
    monkeypatch.setattr(pointwise, "STAGED", staged)
    calls = []
    run = pointwise.run_forward
    monkeypatch.setattr(gemm_roles, "usable", lambda rt, ts: True)
    monkeypatch.setattr(pointwise, "run_forward", lambda *a: (calls.append(1), run(*a)))
    x = host(rng.standard_normal(xs), dtype)
    w = host(rng.standard_normal((K, xs[1]) + (1,) * (len(xs) - 2)), dtype)
    b = host(rng.standard_normal(K), dtype) if with_bias else None
    t = lambda a: runtime.tensor(channels_last(a), dtype=dtype)  # noqa: E731
    y = conv_forward_nhwc(t(x), t(w), None if b is None else runtime.tensor(b, dtype=dtype), ConvOptions(),
                          ImplicitGemm)
    assert calls == [1]
    close(np.moveaxis(y.numpy(), -1, 1), ref.forward(x, w, b, 1, 0, 1, 1), dtype)


def test_pointwise_forward_only_where_it_is_a_matrix_product(runtime, rng, monkeypatch, dtype="bf16"):
    """Stride 2, padding, groups or NCHW input keep the implicit GEMM kernels (and still agree
    with the reference)."""
    from rudnn.convolution import pointwise
    from rudnn.moe import gemm_roles
    calls = []
    run = pointwise.run_forward
    monkeypatch.setattr(gemm_roles, "usable", lambda rt, ts: True)
    monkeypatch.setattr(pointwise, "run_forward", lambda *a: (calls.append(1), run(*a)))
    x = host(rng.standard_normal((1, 16, 6, 5)), dtype)
    w = host(rng.standard_normal((8, 16, 1, 1)), dtype)
    t = lambda a: runtime.tensor(channels_last(a), dtype=dtype)  # noqa: E731
    for opts in (ConvOptions(stride=2), ConvOptions(padding=1)):
        y = conv_forward_nhwc(t(x), t(w), None, opts, ImplicitGemm)
        close(np.moveaxis(y.numpy(), -1, 1), ref.forward(x, w, None, opts.stride, opts.padding, 1, 1), dtype)
    y = conv_forward(runtime.tensor(x, dtype=dtype), runtime.tensor(w, dtype=dtype), None, ConvOptions(),
                     ImplicitGemm)
    close(y.numpy(), ref.forward(x, w, None, 1, 0, 1, 1), dtype)
    assert calls == []


def force_group_data_backward(monkeypatch):
    """implicit_gemm_group.covers without its native-group-products rule (the emulated devices
    lack them), so the stride-1 data backward takes implicit_gemm_dgrad; returns its calls."""
    from rudnn.convolution import implicit_gemm_dgrad, implicit_gemm_group, implicit_gemm_nhwc
    calls = []
    run = implicit_gemm_dgrad.run_data_backward
    monkeypatch.setattr(implicit_gemm_group, "covers", lambda p: implicit_gemm_nhwc.covers(p) and (
        implicit_gemm_group.fits(p, *implicit_gemm_group.tile_shape(p.runtime.capabilities, p.geo.Kg)[:2])))
    monkeypatch.setattr(implicit_gemm_dgrad, "run_data_backward", lambda *a: (calls.append(1), run(*a)))
    return calls


DGRAD_CASES = {   # x shape, weight shape, padding, dilation, groups, dtype
    "2d-pad1-dil2-groups2": ((2, 16, 9, 7), (32, 8, 3, 3), 1, 2, 2, "bf16"),
    "2d-pad0-odd-kernel": ((1, 12, 7, 10), (16, 12, 3, 2), 0, 1, 1, "f16"),
    "3d": ((1, 8, 4, 5, 6), (8, 8, 3, 1, 3), (1, 0, 1), 1, 1, "bf16"),
}


@pytest.mark.parametrize("case", list(DGRAD_CASES))
def test_data_backward_on_group_products(runtime, rng, monkeypatch, case):
    """Stride 1: the data backward runs as the forward of dy over flipped, channel-swapped
    weights on the group-product kernel (implicit_gemm_dgrad; forced off the H200): odd
    sizes, padding 0/1, dilation 2, 2 groups, a 3-D case; partial tiles (Cin/groups < 64)."""
    calls = force_group_data_backward(monkeypatch)
    xs, ws, pd, dl, g, dtype = DGRAD_CASES[case]
    w = host(rng.standard_normal(ws), dtype)
    y = ref.forward(np.zeros(xs), w, None, 1, pd, dl, g)
    dy = host(rng.standard_normal(y.shape), dtype)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    dx = conv_data_backward(t(dy), t(w), xs, ConvOptions(padding=pd, dilation=dl, groups=g), ImplicitGemm)
    assert calls == [1]
    close(dx.numpy(), ref.data_backward(dy, w, xs, 1, pd, dl, g), dtype)


def test_data_backward_group_products_only_where_the_identity_holds(runtime, rng, monkeypatch, dtype="bf16"):
    """Stride 2, and padding beyond (K − 1)·dilation, keep the gather GEMM (still correct)."""
    calls = force_group_data_backward(monkeypatch)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    for xs, ws, st, pd in (((1, 16, 9, 8), (16, 16, 3, 3), 2, 1), ((1, 16, 5, 4), (16, 16, 1, 1), 1, 1)):
        w = host(rng.standard_normal(ws), dtype)
        dy = host(rng.standard_normal(ref.forward(np.zeros(xs), w, None, st, pd, 1, 1).shape), dtype)
        dx = conv_data_backward(t(dy), t(w), xs, ConvOptions(stride=st, padding=pd), ImplicitGemm)
        close(dx.numpy(), ref.data_backward(dy, w, xs, st, pd, 1, 1), dtype)
    assert calls == []


def test_data_backward_group_products_are_chosen_from_capabilities(runtime):
    """implicit_gemm_dgrad.covers: native group products, stride 1, padding at most
    (K − 1)·dilation, and Cout/groups (the equivalent forward's Cin/groups) a multiple of 8."""
    import dataclasses
    from types import SimpleNamespace

    from rudnn.convolution import implicit_gemm_dgrad
    from rudnn.convolution.problem import validate_data_backward

    def problem(kg, native, stride=1, pad=1):
        w = runtime.zeros((2 * kg, 8, 3, 3), "bf16")
        opts = ConvOptions(stride=stride, padding=pad, groups=2)
        o = (12 + 2 * pad - 3) // stride + 1
        p = validate_data_backward(runtime.zeros((1, 2 * kg, o, o), "bf16"), w, (1, 16, 12, 12), opts)
        caps = dataclasses.replace(runtime.capabilities, group_mma_native=native, plane_dim=32,
                                   max_cube_units=1024, max_shared_bytes=227 * 1024)
        return dataclasses.replace(p, runtime=SimpleNamespace(capabilities=caps, plane_dim=32))

    assert implicit_gemm_dgrad.covers(problem(16, True))
    assert not implicit_gemm_dgrad.covers(problem(16, False))
    assert not implicit_gemm_dgrad.covers(problem(12, True))
    assert not implicit_gemm_dgrad.covers(problem(16, True, stride=2))
    assert not implicit_gemm_dgrad.covers(problem(16, True, pad=3))


def force_group_weight_backward(monkeypatch, splits=None):
    """implicit_gemm_wgrad.covers without its native-group-products rule (the emulated devices
    lack them), and `splits` reduction ranges if given; returns the kernel's calls."""
    from rudnn.convolution import implicit_gemm_wgrad as wg
    calls = []
    run = wg.run_weight_backward
    monkeypatch.setattr(wg, "covers", lambda p: p.geo.Cg % 8 == 0 and p.geo.Kg % 8 == 0 and wg.fits(
        p.runtime.capabilities, *wg.tile_shape(p.runtime.capabilities)[:2]))
    if splits:
        monkeypatch.setattr(wg, "weight_splits", lambda *a: splits)
    monkeypatch.setattr(wg, "run_weight_backward", lambda *a: (calls.append(1), run(*a)))
    return calls


WGRAD_CASES = {   # x shape, weight shape, stride, padding, dilation, groups, splits forced, dtype
    "2d-pad1-3-splits": ((2, 16, 9, 7), (24, 16, 3, 3), 1, 1, 1, 1, 3, "bf16"),
    "2d-stride2-dil-groups2": ((3, 16, 17, 15), (80, 8, 3, 2), 2, (1, 2), (2, 1), 2, 3, "f16"),
    "3d": ((1, 8, 4, 5, 6), (8, 8, 3, 1, 3), (1, 2, 1), (1, 0, 1), 1, 1, None, "bf16"),
}


@pytest.mark.interpreter
@pytest.mark.parametrize("case", list(WGRAD_CASES))
def test_weight_backward_on_group_products(runtime, rng, monkeypatch, case):
    """The weight gradient on group products (implicit_gemm_wgrad; forced off the H200) over
    channels-last copies: Cout/groups 24 and 40 (partial 64-row tiles), (tap, channel)
    columns 144 and 48 (partial tiles), B·O pixels 126 and 216 (not whole 64-pixel steps),
    padding, stride 2, dilation, 2 groups, a 3-D case; split reductions (2 ranges, summed in
    order), deterministic."""
    xs, ws, st, pd, dl, g, splits, dtype = WGRAD_CASES[case]
    if runtime.name == "interpreter" and case != "2d-pad1-3-splits":
        pytest.skip("the interpreter runs one case (slow); the others run on cpu and opencl")
    calls = force_group_weight_backward(monkeypatch, splits)
    x = host(rng.standard_normal(xs), dtype)
    dy = host(rng.standard_normal(ref.forward(x, np.zeros(ws), None, st, pd, dl, g).shape), dtype)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    opts = ConvOptions(stride=st, padding=pd, dilation=dl, groups=g)
    runs = [conv_weight_backward(t(x), t(dy), ws, opts, ImplicitGemm).numpy() for _ in range(2)]
    assert calls[:1] == [1]   # (the second call may replay the first one's recorded launches)
    np.testing.assert_array_equal(runs[0].view(np.uint16), runs[1].view(np.uint16))
    close(runs[0], ref.weight_backward(x, dy, ws, st, pd, dl, g), dtype)


def test_weight_backward_group_products_are_chosen_from_capabilities(runtime):
    """implicit_gemm_wgrad.covers: native group products and Cin/groups, Cout/groups multiples
    of 8; the H200 shape (128 columns, 3 slots) and splits that make one full wave of cubes."""
    import dataclasses
    from types import SimpleNamespace

    from rudnn.convolution import implicit_gemm_wgrad as wg
    from rudnn.convolution.problem import validate_weight_backward

    def problem(cg, kg, native, b=1, hw=12):
        x, dy = runtime.zeros((b, 2 * cg, hw, hw), "bf16"), runtime.zeros((b, 2 * kg, hw, hw), "bf16")
        p = validate_weight_backward(x, dy, (2 * kg, cg, 3, 3), ConvOptions(padding=1, groups=2))
        caps = dataclasses.replace(runtime.capabilities, group_mma_native=native, plane_dim=32, compute_units=132,
                                   max_cube_units=1024, max_shared_bytes=227 * 1024)
        return dataclasses.replace(p, runtime=SimpleNamespace(capabilities=caps, plane_dim=32))

    assert wg.covers(problem(16, 8, True))
    assert not wg.covers(problem(16, 8, False))
    assert not wg.covers(problem(12, 8, True))
    assert not wg.covers(problem(16, 12, True))
    p = problem(64, 64, True, b=64, hw=56)      # per group 64 x 576, 200704 pixels
    assert wg.tile_shape(p.runtime.capabilities) == (128, 3, 0)
    splits = wg.weight_splits(p, 128, 3)
    assert splits * 2 * 5 <= 3 * 132 < (splits + 1) * 2 * 5   # three 72 KiB rings an SM
    assert wg.weight_splits(problem(64, 64, True), 128, 3) == 1    # 3 steps: under MIN_STEPS, one range


# ---- 1×1 backward passes as batched products on NCDHW operands (pointwise_backward, issue 17)

def force_pointwise_backward(monkeypatch, native_shape=False):
    """pointwise_backward without its native-device rule (the emulated devices lack native
    group products); native_shape: the H200's tile shapes (two groups, 128 columns; the data
    backward with two fragments a group) instead of the emulated ones. Returns the calls."""
    from rudnn.convolution import pointwise_backward as pb
    calls = []
    monkeypatch.setattr(pb, "native", lambda caps: True)
    if native_shape:   # (two 64-row fragments a group and 128 columns need 1 MiB of emulated shared memory)
        monkeypatch.setattr(pb, "weight_shape", lambda caps, columns=256: (128, 3, 0, 2))
        monkeypatch.setattr(pb, "data_shape", lambda caps: (128 if caps.max_shared_bytes >= 1 << 19 else 64, 3, 1, 2, 2))
    for name in ("run_data_backward", "run_weight_backward"):
        run = getattr(pb, name)
        monkeypatch.setattr(pb, name, lambda *a, run=run, name=name, **k: (calls.append(name), run(*a, **k)))
    return calls


PW_CASES = {   # x shape, Cout, dilation, dtype, weight splits forced: P = 72 (16-byte copies), K not a tile multiple
    "2d-p72": ((2, 16, 9, 8), 80, 1, "bf16", 3),
    "2d-p100-lanes4": ((2, 24, 10, 10), 16, 2, "f16", None),   # P % 8 = 4: 8-byte copies, pixel tail
    "2d-p30-lanes2": ((1, 8, 5, 6), 72, 1, "bf16", 2),         # P % 4 = 2: 4-byte copies
    "1d": ((3, 16, 20), 8, 3, "bf16", None),
    "3d-dil2": ((1, 8, 2, 3, 4), 24, 2, "f16", None),
}


@pytest.mark.interpreter
@pytest.mark.parametrize("native_shape", [False, True])
@pytest.mark.parametrize("case", list(PW_CASES))
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_pointwise_backward_on_group_products(runtime, rng, monkeypatch, case, native_shape):
    """1×1, stride 1, unpadded: both backward passes as batched products straight on the NCDHW
    tensors (pointwise_backward; forced off the H200) against numpy float64: P a multiple of 8,
    of 4 and of 2 only (narrower copies, zero-filled pixel tails), partial channel tiles, ranks
    1-3, dilation; the weight gradient deterministic over split reductions."""
    xs, k, dl, dtype, splits = PW_CASES[case]
    if runtime.name == "interpreter" and (native_shape or case not in ("2d-p100-lanes4", "1d")):
        pytest.skip("the interpreter runs two cases (slow); the others run on cpu and opencl")
    calls = force_pointwise_backward(monkeypatch, native_shape)
    if splits:
        from rudnn.convolution import pointwise_backward as pb
        monkeypatch.setattr(pb, "weight_splits", lambda *a: splits)
    ws = (k, xs[1]) + (1,) * (len(xs) - 2)
    x = host(rng.standard_normal(xs), dtype)
    w = host(rng.standard_normal(ws), dtype)
    dy = host(rng.standard_normal((xs[0], k, *xs[2:])), dtype)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    opts = ConvOptions(dilation=dl)
    dx = conv_data_backward(t(dy), t(w), xs, opts, ImplicitGemm)
    dws = [conv_weight_backward(t(x), t(dy), ws, opts, ImplicitGemm).numpy() for _ in range(2)]
    assert calls[:2] == ["run_data_backward", "run_weight_backward"]
    close(dx.numpy(), ref.data_backward(dy, w, xs, 1, 0, dl, 1), dtype)
    np.testing.assert_array_equal(dws[0].view(np.uint16), dws[1].view(np.uint16))
    close(dws[0], ref.weight_backward(x, dy, ws, 1, 0, dl, 1), dtype)


@pytest.mark.parametrize("case", ["2d-p72", "3d-dil2"])
def test_pointwise_weight_backward_on_the_roles_gemm(runtime, rng, monkeypatch, case):
    """WEIGHT_KERNEL = "roles": the weight gradient on MoE's roles GEMM (forced off the H200),
    one expert a sample (partial 128-row tiles past K), F32 partials summed in sample order:
    deterministic, against numpy float64; P not a multiple of 8 keeps the ring kernel."""
    from rudnn.moe import gemm_roles
    from rudnn.convolution import pointwise_backward as pb
    calls = force_pointwise_backward(monkeypatch)
    monkeypatch.setattr(pb, "WEIGHT_KERNEL", "roles")
    monkeypatch.setattr(gemm_roles, "usable", lambda rt, ts: True)
    run = pb.run_weight_backward_roles
    monkeypatch.setattr(pb, "run_weight_backward_roles", lambda *a: (calls.append("roles"), run(*a)))
    xs, k, dl, dtype, _ = PW_CASES[case]
    ws = (k, xs[1]) + (1,) * (len(xs) - 2)
    x = host(rng.standard_normal(xs), dtype)
    dy = host(rng.standard_normal((xs[0], k, *xs[2:])), dtype)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    opts = ConvOptions(dilation=dl)
    dws = [conv_weight_backward(t(x), t(dy), ws, opts, ImplicitGemm).numpy() for _ in range(2)]
    assert calls[:1] == ["roles"]
    np.testing.assert_array_equal(dws[0].view(np.uint16), dws[1].view(np.uint16))
    close(dws[0], ref.weight_backward(x, dy, ws, 1, 0, dl, 1), dtype)
    del calls[:]
    xs, dy_shape = (2, 16, 5, 6), (2, 8, 5, 6)   # P = 30: 4-byte copies, the ring kernel
    x, dy = host(rng.standard_normal(xs), dtype), host(rng.standard_normal(dy_shape), dtype)
    dw = conv_weight_backward(t(x), t(dy), (8, 16, 1, 1), ConvOptions(), ImplicitGemm).numpy()
    assert calls == ["run_weight_backward"]
    close(dw, ref.weight_backward(x, dy, (8, 16, 1, 1), 1, 0, 1, 1), dtype)


@pytest.mark.parametrize("xs,k,dtype", [((2, 128, 9, 8), 80, "bf16"), ((1, 64, 40), 16, "f16")])
def test_pointwise_data_backward_staged_epilogue(runtime, rng, monkeypatch, xs, k, dtype):
    """STAGED_DX: the data backward's tiles leave through shared memory and bulk stores into dx
    as [B·C, P] rows (Cin a multiple of the cube's channels; the stores leave out the pixels
    past P: 72 = 64 + 8, 40 < 64), against numpy float64."""
    from rudnn.convolution import pointwise_backward as pb
    from rudnn.convolution.problem import as_5d, validate_data_backward
    force_pointwise_backward(monkeypatch)
    monkeypatch.setattr(pb, "STAGED_DX", True)
    w = host(rng.standard_normal((k, xs[1]) + (1,) * (len(xs) - 2)), dtype)
    dy = host(rng.standard_normal((xs[0], k, *xs[2:])), dtype)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    want = ref.data_backward(dy, w, xs, 1, 0, 1, 1)
    close(conv_data_backward(t(dy), t(w), xs, ConvOptions(), ImplicitGemm).numpy(), want, dtype)
    p = validate_data_backward(t(dy), t(w), xs, ConvOptions())
    dx = runtime.tensor(np.full(xs, np.nan, np.float32), dtype=dtype)
    views = pb.data_operands(p, as_5d(dx, len(xs) - 2, False))
    assert views[3] is not None and views[3].shape == (xs[0] * xs[1], int(np.prod(xs[2:])))
    pb.run_data_backward(p, views, staged=True)
    close(dx.numpy(), want, dtype)


def test_pointwise_backward_matches_pytorch(runtime, rng, monkeypatch, dtype="bf16"):
    """The same passes against torch.nn.grad.conv2d_input / conv2d_weight (float64)."""
    torch = pytest.importorskip("torch", reason="PyTorch CPU is the cross-check (pip install .[oracle])")
    calls = force_pointwise_backward(monkeypatch)
    xs, ws = (2, 32, 6, 12), (48, 32, 1, 1)
    x, w = host(rng.standard_normal(xs), dtype), host(rng.standard_normal(ws), dtype)
    dy = host(rng.standard_normal((2, 48, 6, 12)), dtype)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    T = torch.from_numpy
    dx = conv_data_backward(t(dy), t(w), xs, ConvOptions(), ImplicitGemm).numpy()
    dw = conv_weight_backward(t(x), t(dy), ws, ConvOptions(), ImplicitGemm).numpy()
    assert calls == ["run_data_backward", "run_weight_backward"]
    close(dx, torch.nn.grad.conv2d_input(xs, T(w).double(), T(dy).double()).numpy(), dtype)
    close(dw, torch.nn.grad.conv2d_weight(T(x).double(), ws, T(dy).double()).numpy(), dtype)


def test_pointwise_backward_only_where_it_is_a_batched_product(runtime, rng, monkeypatch, dtype="bf16"):
    """Odd pixel counts, channels-last memory, pixels that are not one stride-1 run, padding,
    stride 2, groups and 3×3 kernels keep the other paths (still correct); a channel slice
    (pixels still one run, rows 16-byte aligned) is covered."""
    calls = force_pointwise_backward(monkeypatch)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    # (x shape, weight shape, stride, padding, groups, layout of x and dy, covered)
    cases = [((1, 16, 5, 3), (16, 16, 1, 1), 1, 0, 1, "nchw", False),     # P = 15: no aligned copy
             ((2, 16, 4, 6), (8, 16, 1, 1), 1, 0, 1, "channels_last", False),
             ((2, 16, 4, 6), (8, 16, 1, 1), 1, 0, 1, "pixel_step", False),
             ((2, 16, 4, 6), (8, 16, 1, 1), 1, 0, 1, "channel_slice", True),
             ((1, 16, 4, 4), (16, 16, 1, 1), 1, 1, 1, "nchw", False),
             ((1, 16, 4, 4), (16, 16, 1, 1), 2, 0, 1, "nchw", False),
             ((1, 16, 4, 4), (16, 8, 1, 1), 1, 0, 2, "nchw", False),
             ((1, 16, 4, 4), (16, 16, 3, 3), 1, 1, 1, "nchw", False)]
    for xs, ws, st, pd, g, layout, covered in cases:
        del calls[:]
        w = host(rng.standard_normal(ws), dtype)
        opts = ConvOptions(stride=st, padding=pd, groups=g)
        x = host(rng.standard_normal(xs), dtype)
        dy = host(rng.standard_normal(ref.forward(x, w, None, st, pd, 1, g).shape), dtype)

        def laid(a):
            if layout == "channels_last":
                return runtime.tensor(channels_last(a), dtype=dtype).permute(0, 3, 1, 2)
            if layout == "pixel_step":
                return t(np.repeat(a, 2, axis=3))[:, :, :, ::2]
            if layout == "channel_slice":
                return t(np.concatenate([a[:, :8], a], axis=1))[:, 8:]
            return t(a)
        dx = conv_data_backward(laid(dy), t(w), xs, opts, ImplicitGemm)
        dw = conv_weight_backward(laid(x), laid(dy), ws, opts, ImplicitGemm)
        assert calls == (["run_data_backward", "run_weight_backward"] if covered else []), (xs, ws, layout)
        close(dx.numpy(), ref.data_backward(dy, w, xs, st, pd, 1, g), dtype)
        close(dw.numpy(), ref.weight_backward(x, dy, ws, st, pd, 1, g), dtype)


def test_pointwise_backward_is_chosen_from_capabilities(runtime, monkeypatch):
    """Native group products and async copies (not the emulations), F16/BF16, ENABLED; the
    H200 shapes: 128 x 128 weight tiles split to one wave of two 96 KiB rings an SM."""
    import dataclasses
    from types import SimpleNamespace

    from rudnn.convolution import pointwise_backward as pb
    from rudnn.convolution.problem import as_5d, validate_data_backward, validate_weight_backward

    def problems(native, dtype="bf16", b=1, hw=8, c=256, k=1024):
        caps = dataclasses.replace(runtime.capabilities, group_mma_native=native, mma_native=native,
                                   async_copy=native, plane_dim=32, compute_units=132, max_cube_units=1024,
                                   max_shared_bytes=227 * 1024, mma_dtypes=(kd.f16, kd.bf16))
        rt = SimpleNamespace(capabilities=caps, plane_dim=32)
        x, dy, w = (runtime.zeros((b, c, hw, hw), dtype), runtime.zeros((b, k, hw, hw), dtype),
                    runtime.zeros((k, c, 1, 1), dtype))
        pd = dataclasses.replace(validate_data_backward(dy, w, (b, c, hw, hw), ConvOptions()), runtime=rt)
        pw = dataclasses.replace(validate_weight_backward(x, dy, (k, c, 1, 1), ConvOptions()), runtime=rt)
        return pd, pw, runtime.zeros((b, c, hw, hw), dtype)

    pd, pw, dx = problems(True)
    assert pb.data_operands(pd, as_5d(dx, 2, False)) is not None
    assert pb.weight_operands(pw) is not None
    assert pb.weight_shape(pw.runtime.capabilities, 64) == (128, 3, 0, 2)
    assert pb.weight_shape(pw.runtime.capabilities, 256) == (256, 3, 0, 2)
    assert pb.weight_splits(pw, 16, pb.weight_shared_bytes(128, 3, 2), 64 * 49) == 2 * 132 // 16
    pd, pw, dx = problems(False)
    assert pb.data_operands(pd, as_5d(dx, 2, False)) is None
    assert pb.weight_operands(pw) is None
    pd, pw, dx = problems(True, "f32")
    assert pb.weight_operands(pw) is None
    monkeypatch.setattr(pb, "ENABLED", False)
    pd, pw, dx = problems(True)
    assert pb.weight_operands(pw) is None


def test_strided_inputs(runtime, rng):
    """Non-contiguous views (a channel slice, a spatial step) give the results of their copies."""
    x_full = rng.standard_normal((2, 9, 14, 8)).astype(np.float32)
    w_full = rng.standard_normal((6, 6, 3, 3)).astype(np.float32)
    tx = runtime.tensor(x_full)[:, 1:7, ::2]
    tw = runtime.tensor(w_full)[:, ::2]
    x, w = x_full[:, 1:7, ::2], w_full[:, ::2]
    opts = ConvOptions(padding=1, groups=2)
    close(conv_forward(tx, tw, None, opts).numpy(), ref.forward(x, w, None, 1, 1, 1, 2), "f32")
    dy = rng.standard_normal((2, 6, 7, 8)).astype(np.float32)
    tdy = runtime.tensor(np.concatenate([dy, dy], axis=3))[:, :, :, ::2]
    dyv = np.concatenate([dy, dy], axis=3)[:, :, :, ::2]
    close(conv_data_backward(tdy, tw, x.shape, opts).numpy(), ref.data_backward(dyv, w, x.shape, 1, 1, 1, 2), "f32")
    close(conv_weight_backward(tx, tdy, w.shape, opts).numpy(), ref.weight_backward(x, dyv, w.shape, 1, 1, 1, 2),
          "f32")
    xl = runtime.tensor(channels_last(x_full))[:, 1:, :, 1:7]   # NHWC with a strided channel axis
    close(np.moveaxis(conv_forward_nhwc(xl, runtime.tensor(channels_last(w)), None, opts).numpy(), -1, 1),
          ref.forward(x_full[:, 1:7, 1:], w, None, 1, 1, 1, 2), "f32")


F32_GEMM_CASES = {**{k: CASES[k] for k in ("2d-3x3", "2d-1x1", "2d-groups-dil")},
                  "3d": ((1, 5, 5, 6, 4), (4, 5, 3, 2, 3), (1, 2, 1), 1, (1, 1, 2), 1),
                  "1d-stride-dil-groups": ((2, 8, 13), (8, 4, 3), 2, 2, 2, 2),
                  # several row, column and reduction tiles of the F32 GEMM in every pass
                  "2d-tiles": ((1, 20, 9, 15), (130, 20, 3, 3), 1, 1, 1, 1)}


@pytest.mark.parametrize("case", list(F32_GEMM_CASES))
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_implicit_gemm_f32_gemm(runtime, rng, monkeypatch, case):
    """ImplicitGemm on F32 runs the register-tiled GEMM (implicit_gemm_simt; chosen on devices
    whose units are not SIMD lanes, forced here on every runtime) in all three passes, both
    layouts and both tile widths, against the float64 reference; the data pass at stride > 1
    stays on Direct."""
    from rudnn.convolution import implicit_gemm_simt as simt
    monkeypatch.setattr(simt, "covers", lambda p: "")
    ran = []
    for name in ("run_forward", "run_data_backward", "run_weight_backward"):
        real = getattr(simt, name)
        monkeypatch.setattr(simt, name, lambda *a, _real=real, _name=name: (ran.append(_name), _real(*a))[1])
    x, w, b, opts, y_ref, dy, geo = make(rng, case, cases=F32_GEMM_CASES)
    y, yl, dx, dw = run_all(runtime, x, w, b, opts, dy, "f32", ImplicitGemm)
    close(y, y_ref, "f32")
    close(yl, y_ref, "f32")
    close(dx, ref.data_backward(dy, w, x.shape, *geo), "f32")
    close(dw, ref.weight_backward(x, dy, w.shape, *geo), "f32")
    stride_one = all(s == 1 for s in np.broadcast_to(geo[0], (x.ndim - 2,)))
    assert ran == ["run_forward", "run_forward"] + ["run_data_backward"] * stride_one + ["run_weight_backward"]


def test_weight_gradient_is_deterministic(runtime, rng):
    x, w, b, opts, y_ref, dy, geo = make(rng, "2d-groups-dil", "bf16")
    for strategy in (Direct, ImplicitGemm):
        runs = [conv_weight_backward(runtime.tensor(x, dtype="bf16"), runtime.tensor(dy, dtype="bf16"),
                                     w.shape, opts, strategy).numpy().view(np.uint16) for _ in range(2)]
        np.testing.assert_array_equal(runs[0], runs[1])


def test_autotune_and_fallbacks_agree(runtime, rng):
    """Autotune (the default) and ImplicitGemm on F32 (Direct on SIMD-lane devices, the F32
    GEMM elsewhere, Direct for its stride-2 data pass) agree with Direct; ImplicitGemm on
    depthwise F16 (fewer than 4 channels per group) is Direct's result exactly."""
    x, w, b, opts, y_ref, dy, geo = make(rng, "2d-stride2-odd")
    want = run_all(runtime, x, w, b, opts, dy, "f32", Direct)
    for strategy in (Autotune, ImplicitGemm):
        for got, exp in zip(run_all(runtime, x, w, b, opts, dy, "f32", strategy), want):
            close(got, exp.astype(np.float64), "f32")
    y = conv_forward(runtime.tensor(x), runtime.tensor(w), runtime.tensor(b), opts)   # defaults
    close(y.numpy(), want[0].astype(np.float64), "f32")
    x, w, b, opts, y_ref, dy, geo = make(rng, "2d-depthwise", "f16")
    t = lambda a: runtime.tensor(a, dtype="f16")  # noqa: E731
    np.testing.assert_array_equal(conv_forward(t(x), t(w), t(b), opts, ImplicitGemm).numpy(),
                                  conv_forward(t(x), t(w), t(b), opts, Direct).numpy())


def test_autotune_times_and_persists_per_bucket(runtime, rng, monkeypatch, tmp_path):
    """Where it tunes (the matrix primitive native; faked here), Autotune times Direct and
    ImplicitGemm once per key, stores the choice in the family's JSON file and reuses it."""
    import json

    from kerneldsl import autotune
    from rudnn.convolution import tuning
    monkeypatch.setattr(tuning, "tunes", lambda p: True)
    monkeypatch.setattr(autotune, "_TUNERS", {})
    monkeypatch.setattr(autotune, "path", lambda family: tmp_path / f"{family}.json")
    x, w, b, opts, y_ref, dy, geo = make(rng, "2d-groups-dil", "bf16")
    tx, tw = runtime.tensor(x, dtype="bf16"), runtime.tensor(w, dtype="bf16")
    close(conv_forward(tx, tw, None, opts).numpy(), ref.forward(x, w, None, *geo), "bf16")
    tuner = autotune.tuner("convolution")
    assert tuner.tuned == 1
    entry = next(iter(json.loads((tmp_path / "convolution.json").read_text())["choices"].values()))
    assert entry["choice"] in ("Direct", "ImplicitGemm") and set(entry["times_ms"]) == {"Direct", "ImplicitGemm"}
    tuner.forget()                      # a new process: the choice comes from the file
    conv_forward(tx, tw, None, opts)
    assert tuner.tuned == 1
    conv_data_backward(runtime.tensor(dy, dtype="bf16"), tw, x.shape, opts)   # another pass: its own key
    assert tuner.tuned == 2


# ---------------------------------------------------------------------------- the SIMD-lane plan
# rows.py, forced on every runtime (Direct takes it where units are SIMD lanes): rows with a
# partial last vector, channel blocks that do not fill the last block (K 35: 9 x 4; the
# data backward's Cin/groups 17: 5 x 4), units of 4 output rows with a partial last group
# (OH 9; data backward H 11), the data backward's spread (stride) and shifts (padding,
# dilation, kernel), 1x1 and depthwise
ROWS_CASES = {
    "2d-tail-blocks-pad-dil": ((2, 3, 7, 37), (35, 3, 3, 2), 1, (2, 0), (1, 2), 1),
    "2d-stride2-groups": ((1, 34, 11, 9), (6, 17, 3, 3), 2, 1, 1, 2),
    "2d-depthwise-dil-stride": ((1, 5, 9, 19), (5, 1, 3, 3), (1, 2), 2, 2, 5),
    "2d-1x1-stride2": ((2, 7, 5, 18), (9, 7, 1, 1), 2, 0, 1, 1),
    "3d-pad-stride": ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), (2, 1, 2), (0, 2, 1), 1, 1),
}


@pytest.fixture
def rows_plan(monkeypatch):
    """Direct's three passes run the SIMD-lane plan (fails if the other runs)."""
    from rudnn.convolution import direct, tuning
    monkeypatch.setattr(tuning, "direct_plan", lambda p, pass_name: "rows")
    for name in ("run_forward", "run_data_backward", "run_weight_backward"):
        monkeypatch.setattr(direct, name, lambda *a: pytest.fail("Direct did not take the rows plan"))


@pytest.mark.parametrize("case", list(ROWS_CASES))
def test_rows_plan(runtime, rng, rows_plan, case):
    """Forward in both layouts (with bias) and both backward passes against the float64 reference."""
    x, w, b, opts, y_ref, dy, geo = make(rng, case, cases=ROWS_CASES)
    t = runtime.tensor
    close(conv_forward(t(x), t(w), t(b), opts, Direct).numpy(), y_ref, "f32")
    yl = conv_forward_nhwc(t(channels_last(x)), t(channels_last(w)), t(b), opts, Direct)
    close(np.moveaxis(yl.numpy(), -1, 1), y_ref, "f32")
    close(conv_data_backward(t(dy), t(w), x.shape, opts, Direct).numpy(), ref.data_backward(dy, w, x.shape, *geo),
          "f32")
    close(conv_weight_backward(t(x), t(dy), w.shape, opts, Direct).numpy(),
          ref.weight_backward(x, dy, w.shape, *geo), "f32")


def test_rows_plan_half_precision_strided(runtime, rng, rows_plan, dtype="bf16"):
    """BF16 views (a channel slice and a spatial step, NHWC with a strided channel axis, a
    strided output gradient) through the f32 copies, with F32 accumulation (F16 and BF16
    inputs reach the plan through test_half_precision where Direct takes it)."""
    x_full = host(rng.standard_normal((2, 9, 14, 8)), dtype)
    w = host(rng.standard_normal((6, 3, 3, 3)), dtype)
    x = x_full[:, 1:7, ::2]
    opts = ConvOptions(padding=(1, 2), groups=2)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    y_ref = ref.forward(x, w, None, 1, (1, 2), 1, 2)
    close(conv_forward(t(x_full)[:, 1:7, ::2], t(w), None, opts).numpy(), y_ref, dtype)
    xl = t(channels_last(x_full))[:, ::2, :, 1:7]
    close(np.moveaxis(conv_forward_nhwc(xl, t(channels_last(w)), None, opts).numpy(), -1, 1), y_ref, dtype)
    dy2 = host(rng.standard_normal((*y_ref.shape[:3], 2 * y_ref.shape[3])), dtype)
    close(conv_data_backward(t(dy2)[..., ::2], t(w), x.shape, opts).numpy(),
          ref.data_backward(dy2[..., ::2], w, x.shape, 1, (1, 2), 1, 2), dtype)


def test_direct_plan_follows_capabilities(runtime, rng, monkeypatch):
    """Direct takes the rows plan exactly where a cube's units are SIMD lanes (never by name)."""
    from rudnn.convolution import direct, rows
    ran = []
    for module, plan in ((rows, "rows"), (direct, "units")):
        for name in ("run_forward", "run_data_backward", "run_weight_backward"):
            monkeypatch.setattr(module, name, lambda *a, plan=plan: ran.append(plan))
    x, w, b, opts, y_ref, dy, geo = make(rng, "2d-3x3")
    conv_forward(runtime.tensor(x), runtime.tensor(w), None, opts, Direct)
    conv_data_backward(runtime.tensor(dy), runtime.tensor(w), x.shape, opts, Direct)
    conv_weight_backward(runtime.tensor(x), runtime.tensor(dy), w.shape, opts, Direct)
    assert ran == ["rows" if runtime.capabilities.units_are_simd_lanes else "units"] * 3


# ---------------------------------------------------------------------------- the depthwise plan
# depthwise.py, forced on every runtime (Direct takes it for depthwise passes where units are
# not SIMD lanes): the channels-last vector forward (C a multiple of the 16-byte vector: F32
# C 4/8/16) with partial pixel and row blocks, the plane-tile forward (NCHW; two tiles a row
# and a column: W 37, OH 20) and data backward (the gather: stride 2 with uneven padding, 3x5
# dilated, multiplier 2, 3-D with a depth stride), the split-batch weight gradient; a
# multiplier of 2 forward in NHWC on tiles
DW_CASES = {
    "dw-vector-odd": ((3, 16, 9, 11), (16, 1, 3, 3), 1, 1, 1, 16),
    "dw-stride2-pad": ((1, 8, 10, 7), (8, 1, 3, 3), 2, (1, 2), 1, 8),
    "dw-3x5-dil": ((1, 8, 12, 10), (8, 1, 3, 5), 1, (2, 3), (2, 1), 8),
    "dw-tiles": ((1, 4, 20, 37), (4, 1, 3, 3), 1, 1, 1, 4),
    "dw-multiplier2": ((1, 4, 6, 7), (8, 1, 3, 3), 1, 0, 1, 4),
    "dw-3d": ((1, 4, 5, 5, 6), (4, 1, 3, 1, 3), (2, 1, 2), 1, 1, 4),
}


@pytest.fixture
def depthwise_plan(monkeypatch):
    """Direct runs depthwise.py wherever it covers the pass (direct.py otherwise); returns the
    list of depthwise kernels launched ('vector', 'tiles', 'data', 'weight')."""
    from rudnn.convolution import depthwise, tuning
    plan = tuning.direct_plan
    monkeypatch.setattr(tuning, "direct_plan",
                        lambda p, pass_name: "depthwise" if depthwise.covers(p, pass_name) else plan(p, pass_name))
    ran = []
    for name, tag in (("forward_channels_last", "vector"), ("forward_planes", "tiles"), ("data_planes", "data"),
                      ("weight_partials", "weight")):
        kernel = getattr(depthwise, name)

        class Spy:
            def __getitem__(self, launch, kernel=kernel, tag=tag):
                ran.append(tag)
                return kernel[launch]
        monkeypatch.setattr(depthwise, name, Spy())
    return ran


@pytest.mark.parametrize("case", list(DW_CASES))
def test_depthwise_plan(runtime, rng, depthwise_plan, case):
    """Forward in both layouts (with bias) and both backward passes against the float64 reference."""
    x, w, b, opts, y_ref, dy, geo = make(rng, case, cases=DW_CASES)
    t = runtime.tensor
    close(conv_forward(t(x), t(w), t(b), opts, Direct).numpy(), y_ref, "f32")
    assert depthwise_plan.pop() == "tiles"
    yl = conv_forward_nhwc(t(channels_last(x)), t(channels_last(w)), t(b), opts, Direct)
    close(np.moveaxis(yl.numpy(), -1, 1), y_ref, "f32")
    assert depthwise_plan.pop() == ("tiles" if case == "dw-multiplier2" else "vector")
    close(conv_data_backward(t(dy), t(w), x.shape, opts, Direct).numpy(), ref.data_backward(dy, w, x.shape, *geo),
          "f32")
    assert depthwise_plan == ["data"]
    close(conv_weight_backward(t(x), t(dy), w.shape, opts, Direct).numpy(),
          ref.weight_backward(x, dy, w.shape, *geo), "f32")
    assert depthwise_plan[-1] == "weight"


@kd.testing.interpreted
def test_depthwise_plan_half_precision_views(runtime, rng, depthwise_plan, dtype="bf16"):
    """BF16 (8-lane vectors) through views: NHWC with a channel slice at an aligned offset and a
    spatial step (the vector kernel), the same in NCHW and a 12-channel NHWC slice (not a
    multiple of the vector: tiles), a strided output gradient; on the interpreter too (its
    race and bounds checks)."""
    x_full = host(rng.standard_normal((2, 24, 14, 5)), dtype)
    w = host(rng.standard_normal((16, 1, 3, 3)), dtype)
    b = host(rng.standard_normal(16), dtype)
    x = x_full[:, 8:24, ::2]
    opts = ConvOptions(stride=(1, 2), padding=1, groups=16)
    t = lambda a: runtime.tensor(a, dtype=dtype)  # noqa: E731
    y_ref = ref.forward(x, w, b, (1, 2), 1, 1, 16)
    xl = t(channels_last(x_full))[:, ::2, :, 8:24]
    close(np.moveaxis(conv_forward_nhwc(xl, t(channels_last(w)), t(b), opts, Direct).numpy(), -1, 1), y_ref, dtype)
    close(conv_forward(t(x_full)[:, 8:24, ::2], t(w), t(b), opts, Direct).numpy(), y_ref, dtype)
    assert depthwise_plan == ["vector", "tiles"]
    xl12 = t(channels_last(x_full))[:, ::2, :, 4:16]
    o12 = ConvOptions(padding=1, groups=12)
    close(np.moveaxis(conv_forward_nhwc(xl12, t(channels_last(w[:12])), None, o12, Direct).numpy(), -1, 1),
          ref.forward(x_full[:, 4:16, ::2], w[:12], None, 1, 1, 1, 12), dtype)
    assert depthwise_plan[-1] == "tiles"
    o1 = ConvOptions(padding=1, groups=16)
    dy2 = host(rng.standard_normal((2, 16, 7, 10)), dtype)
    close(conv_data_backward(t(dy2)[..., ::2], t(w), x.shape, o1, Direct).numpy(),
          ref.data_backward(dy2[..., ::2], w, x.shape, 1, 1, 1, 16), dtype)
    close(conv_weight_backward(t(x_full)[:, 8:24, ::2], t(dy2)[..., ::2], w.shape, o1, Direct).numpy(),
          ref.weight_backward(x, dy2[..., ::2], w.shape, 1, 1, 1, 16), dtype)
    assert depthwise_plan[-2:] == ["data", "weight"]


def test_depthwise_plan_follows_capabilities(runtime, monkeypatch):
    """Direct takes depthwise.py for depthwise passes exactly where units are not SIMD lanes
    (the cpu runtime keeps its rows plan), and direct.py for what it does not cover (groups of
    2 channels; a plane tile beyond the device's shared memory, more tiles than a grid axis)."""
    from rudnn.convolution import tuning
    from rudnn.convolution.problem import validate_data_backward, validate_forward
    x, w = runtime.zeros((1, 8, 6, 6), "f32"), runtime.zeros((8, 1, 3, 3), "f32")
    p = validate_forward("conv_forward", x, w, None, ConvOptions(padding=1, groups=8), False)
    other = "rows" if runtime.capabilities.units_are_simd_lanes else "depthwise"
    assert tuning.direct_plan(p, "forward") == other
    dy = runtime.zeros((1, 8, 3, 3), "f32")
    p2 = validate_data_backward(dy, w, (1, 8, 6, 6), ConvOptions(stride=2, padding=1, groups=8))
    assert tuning.direct_plan(p2, "data") == other
    p3 = validate_forward("conv_forward", x, runtime.zeros((8, 2, 3, 3), "f32"), None, ConvOptions(groups=4), False)
    assert tuning.direct_plan(p3, "forward") == ("rows" if other == "rows" else "units")
    big = ConvOptions(padding=248, dilation=16, groups=8)    # 32x32 taps dilated by 16: a 1 MB tile
    p4 = validate_forward("conv_forward", x, runtime.zeros((8, 1, 32, 32), "f32"), None, big, False)
    assert tuning.direct_plan(p4, "forward") == ("rows" if other == "rows" else "units")
    assert tuning.direct_plan(p4, "weight") == other
    if other == "depthwise":    # more tiles a plane (of 32 columns) than the grid's y axis takes
        import dataclasses
        n = (runtime.capabilities.max_grid[1] + 1) * 32
        p5 = dataclasses.replace(p, geo=dataclasses.replace(p.geo, S=(1, 1, n), O=(1, 1, n)))
        assert tuning.direct_plan(p5, "forward") == "units" and tuning.direct_plan(p5, "data") == "units"


# ---------------------------------------------------------------------------- PyTorch
TORCH_CASES = ["1d-stride-dil-groups", "2d-groups-dil", "2d-depthwise", "3d"]


@pytest.mark.parametrize("case", TORCH_CASES)
def test_matches_pytorch(runtime, rng, case):
    torch = pytest.importorskip("torch", reason="PyTorch CPU is the cross-check (pip install .[oracle])")
    F = torch.nn.functional
    x, w, b, opts, _, dy, (st, pd, dl, g) = make(rng, case)
    n = x.ndim - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    grad_in = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input, 3: torch.nn.grad.conv3d_input}[n]
    grad_w = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight, 3: torch.nn.grad.conv3d_weight}[n]
    T = torch.from_numpy
    y, yl, dx, dw = run_all(runtime, x, w, b, opts, dy, "f32", Autotune)
    close(y, conv(T(x), T(w), T(b), st, pd, dl, g).double().numpy(), "f32")
    close(yl, conv(T(x), T(w), T(b), st, pd, dl, g).double().numpy(), "f32")
    close(dx, grad_in(x.shape, T(w), T(dy), st, pd, dl, g).double().numpy(), "f32")
    close(dw, grad_w(T(x), w.shape, T(dy), st, pd, dl, g).double().numpy(), "f32")


# ---------------------------------------------------------------------------- errors, empty
@pytest.fixture
def no_launch(monkeypatch):
    """Any kernel launch fails the test (for zero-size inputs and validation errors)."""
    refuse_launches(monkeypatch)


def test_zero_batch_gives_empty_results(runtime, no_launch):
    x = runtime.zeros((0, 4, 6, 6))
    w = runtime.zeros((3, 4, 3, 3))
    assert conv_forward(x, w).shape == (0, 3, 4, 4)
    assert conv_forward_nhwc(runtime.zeros((0, 6, 6, 4)), runtime.zeros((3, 3, 3, 4))).shape == (0, 4, 4, 3)
    assert conv_data_backward(runtime.zeros((0, 3, 4, 4)), w, (0, 4, 6, 6), ConvOptions()).shape == (0, 4, 6, 6)
    assert conv_forward(x, runtime.zeros((0, 4, 3, 3))).shape == (0, 0, 4, 4)


@pytest.mark.parametrize("strategy", [ConvStrategy.Direct, ConvStrategy.ImplicitGemm, ConvStrategy.Autotune])
def test_zero_output_channels_data_gradient_is_zero(runtime, no_launch, strategy):
    """Cout = 0 with samples: the input gradient is zero, made without a launch (the cpu
    kernels' channel blocks would be empty: a division by zero killed the process)."""
    dx = conv_data_backward(runtime.zeros((2, 0, 9)), runtime.zeros((0, 4, 3)), (2, 4, 11), ConvOptions(), strategy)
    np.testing.assert_array_equal(dx.numpy(), np.zeros((2, 4, 11), np.float32))
    dx = conv_data_backward(runtime.zeros((1, 0, 5, 5)), runtime.zeros((0, 2, 3, 3)), (1, 4, 7, 7),
                            ConvOptions(groups=2), strategy)
    np.testing.assert_array_equal(dx.numpy(), np.zeros((1, 4, 7, 7), np.float32))


def test_zero_batch_weight_gradient_is_zero(runtime):
    dw = conv_weight_backward(runtime.zeros((0, 2, 5)), runtime.zeros((0, 3, 3)), (3, 2, 3), ConvOptions())
    np.testing.assert_array_equal(dw.numpy(), np.zeros((3, 2, 3), np.float32))


def forward_error(runtime, x_shape=(1, 4, 6, 6), w_shape=(2, 4, 3, 3), opts=ConvOptions(), **kw):
    x = kw.pop("x", runtime.zeros(x_shape))
    w = kw.pop("w", runtime.zeros(w_shape))
    return lambda: conv_forward(x, w, kw.pop("bias", None), opts, kw.pop("strategy", Autotune))


ERRORS = {
    "rank": (dict(x_shape=(4, 6), w_shape=(2, 4)), "rank 3, 4 or 5"),
    "rank6": (dict(x_shape=(1, 1, 2, 2, 2, 2), w_shape=(1, 1, 1, 1, 1, 1)), "rank 3, 4 or 5"),
    "weight-rank": (dict(w_shape=(2, 4, 3)), "weight must have rank 4"),
    "cin-groups": (dict(x_shape=(1, 5, 6, 6), w_shape=(2, 1, 3, 3), opts=ConvOptions(groups=2)), "Cin = 5"),
    "cout-groups": (dict(x_shape=(1, 4, 6, 6), w_shape=(3, 2, 3, 3), opts=ConvOptions(groups=2)), "Cout = 3"),
    "weight-cin": (dict(w_shape=(2, 3, 3, 3)), "Cin/groups = 4"),
    "stride-0": (dict(opts=ConvOptions(stride=0)), "options.stride must be >= 1"),
    "stride-neg": (dict(opts=ConvOptions(stride=(1, -1))), "options.stride must be >= 1"),
    "dilation-0": (dict(opts=ConvOptions(dilation=(0, 1))), "options.dilation must be >= 1"),
    "padding-neg": (dict(opts=ConvOptions(padding=-1)), "options.padding must be >= 0"),
    "output-size": (dict(w_shape=(2, 4, 7, 3)), "below 1"),
    "output-size-dil": (dict(opts=ConvOptions(dilation=3)), "below 1"),
    "tuple-length": (dict(opts=ConvOptions(stride=(1, 1, 1))), "options.stride must have 2 entries"),
    "groups-0": (dict(opts=ConvOptions(groups=0)), "options.groups must be >= 1"),
    "groups-type": (dict(opts=ConvOptions(groups=1.0)), "options.groups must be an int"),
    "options-type": (dict(opts={"stride": 1}), "options must be a ConvOptions"),
    "strategy": (dict(strategy="Direct"), "strategy must be a ConvStrategy"),
    "dtype": (dict(x="int"), "input must be"),
    "bias-shape": (dict(bias="short"), "bias must have shape [2]"),
    "weight-type": (dict(w=np.zeros((2, 4, 3, 3), np.float32)), "weight must be a kerneldsl tensor"),
    "bias-type": (dict(bias=[0.0, 0.0]), "bias must be a kerneldsl tensor"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_forward_errors(runtime, no_launch, name):
    kw, needle = ERRORS[name]
    kw = dict(kw)
    if kw.get("x") == "int":
        kw["x"] = runtime.zeros((1, 4, 6, 6), "i32")
    if kw.get("bias") == "short":
        kw["bias"] = runtime.zeros((3,))
    with pytest.raises(ConvSetupError, match=needle.replace("[", r"\[").replace("(", r"\(")):
        forward_error(runtime, **kw)()


def test_mixed_dtypes_and_runtimes(runtime, no_launch):
    x, w = runtime.zeros((1, 2, 5)), runtime.zeros((2, 2, 3), "bf16")
    with pytest.raises(ConvSetupError, match="weight must have the dtype of input"):
        conv_forward(x, w)
    other = kd.get_runtime("cpu") if runtime.name != "cpu" else None
    if other is None:
        others = [n for n in kd.available_runtimes() if n != "cpu"]
        if not others:
            return   # only one runtime on this host: nothing to mix
        other = kd.get_runtime(others[0])
    with pytest.raises(ConvSetupError, match="all tensors of one call must share a runtime") as e:
        conv_forward(x, other.zeros((2, 2, 3)))
    assert runtime.name in str(e.value) and other.name in str(e.value)


def test_backward_errors(runtime, no_launch):
    w = runtime.zeros((4, 2, 3, 3))
    dy = runtime.zeros((1, 4, 6, 6))
    opts = ConvOptions(padding=1)
    with pytest.raises(ConvSetupError, match=r"out_grad must have shape \[1, 4, 5, 5\]"):
        conv_data_backward(dy, w, (1, 2, 5, 5), opts)
    with pytest.raises(ConvSetupError, match="in_shape must have 4 entries"):
        conv_data_backward(dy, w, (1, 2, 6), opts)
    with pytest.raises(ConvSetupError, match="in_shape must be a tuple of ints"):
        conv_data_backward(dy, w, "1,2,6,6", opts)
    with pytest.raises(ConvSetupError, match="Cin/groups = 1"):
        conv_data_backward(dy, w, (1, 2, 6, 6), ConvOptions(padding=1, groups=2))
    with pytest.raises(ConvSetupError, match="conv_data_backward: out_grad must have rank 3, 4 or 5"):
        conv_data_backward(runtime.zeros((4, 6)), w, (1, 2, 6, 6), opts)
    x = runtime.zeros((1, 2, 6, 6))
    with pytest.raises(ConvSetupError, match="weight_shape must have 4 entries"):
        conv_weight_backward(x, dy, (4, 2, 3), opts)
    with pytest.raises(ConvSetupError, match="Cout = 3"):
        conv_weight_backward(x, dy, (3, 1, 3, 3), ConvOptions(padding=1, groups=2))
    with pytest.raises(ConvSetupError, match="options.padding must be >= 0"):
        conv_weight_backward(x, dy, (4, 2, 3, 3), ConvOptions(padding=-1))
    with pytest.raises(ConvSetupError, match=r"out_grad must have shape \[1, 4, 2, 2\]"):
        conv_weight_backward(x, dy, (4, 2, 3, 3), ConvOptions(stride=2))
    with pytest.raises(ConvSetupError, match="below 1"):
        conv_weight_backward(x, dy, (4, 2, 9, 3), opts)
    with pytest.raises(ConvSetupError, match="out_grad must have the dtype of input"):
        conv_weight_backward(x, runtime.zeros((1, 4, 6, 6), "f16"), (4, 2, 3, 3), opts)
    with pytest.raises(ConvSetupError, match="conv_data_backward: weight must be a kerneldsl tensor, got None"):
        conv_data_backward(dy, None, (1, 2, 6, 6), opts)
    with pytest.raises(ConvSetupError, match="conv_weight_backward: out_grad must be a kerneldsl tensor"):
        conv_weight_backward(x, dy.numpy(), (4, 2, 3, 3), opts)


def test_error_class_is_exported():
    assert rudnn.ConvSetupError is ConvSetupError and issubclass(ConvSetupError, rudnn.RudnnError)
    assert issubclass(ConvSetupError, ValueError)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_copy_to_channels_last(runtime, rng, layout):
    """implicit_gemm_dgrad.copy_to_channels_last (the copies the group-product data and weight
    gradients make): the flat kernel for a contiguous NCHW input (its 2-D view has a size-1 depth
    axis), the general one for pixels that are not one run; partial 32 x 32 tiles both ways."""
    from rudnn.convolution.implicit_gemm_dgrad import channels_last_view, copy_to_channels_last
    from kerneldsl.tensor import Tensor
    from rudnn.convolution.problem import as_5d
    x = host(rng.standard_normal((2, 37, 9, 11)), "bf16")
    src = runtime.tensor(x, dtype="bf16")
    if layout == "strided":
        wide = runtime.tensor(np.concatenate([x, x], axis=3), dtype="bf16")
        src = Tensor(runtime, wide.buffer, (2, 37, 9, 11), wide.dtype, wide.strides, wide.offset)  # half of each row
    src5 = as_5d(src, 2, False)
    buf = runtime.empty((2 * 9 * 11 * 37,), "bf16")
    dst = channels_last_view(runtime, buf.buffer, (2, 37, 1, 9, 11), src5.dtype, buf.offset)
    copy_to_channels_last(runtime, src5, dst, src5.dtype)
    np.testing.assert_array_equal(buf.numpy().reshape(2, 9, 11, 37), np.moveaxis(x, 1, -1))
