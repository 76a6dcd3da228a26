"""rudnn.attention (SPEC §5) on every runtime: each strategy against the float64 reference,
every option alone and combined, causal shapes, hidden rows, broadcasting, GQA, odd sizes,
strided views, PyTorch's scaled_dot_product_attention, and every error rule."""
import math

import numpy as np
import pytest

import kerneldsl as kd
import rudnn
from rudnn.attention import (AttentionModuleOptions, AttentionSetupError, AttentionStrategy,
                             BlackboxAcceleratedStrategy, attention)
from rudnn.attention import flash_group, flash_mma, flash_roles, problem

from reference.attention import attention as reference

pytestmark = pytest.mark.feature("attention")

Fallback = AttentionStrategy.Fallback
FlashUnit = AttentionStrategy.FlashUnit
Accelerated = AttentionStrategy.FlashBlackboxAccelerated
STRATEGIES = [Fallback, FlashUnit, Accelerated]
TOL = {"f32": (2e-5, 2e-5), "f16": (4e-3, 4e-3), "bf16": (3e-2, 3e-2)}


def dtype_for(strategy, dtype="f32"):
    """The matrix-primitive strategy takes F16/BF16 only: use bf16 where a test says f32."""
    return "bf16" if strategy is Accelerated and dtype == "f32" else dtype


def inputs(rng, B=2, Hq=4, Hkv=2, Sq=13, Skv=29, D=16, Dv=24, dtype="f32"):
    npd = kd.as_dtype(dtype).np
    q = rng.standard_normal((B, Hq, Sq, D)).astype(npd)
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(npd)
    v = rng.standard_normal((B, Hkv, Skv, Dv)).astype(npd)
    return q, k, v


def run(runtime, q, k, v, mask=None, bias=None, strategy=FlashUnit, **opts):
    t = runtime.tensor
    out = attention(t(q), t(k), t(v), None if mask is None else t(mask), None if bias is None else t(bias),
                    AttentionModuleOptions(**opts), strategy)
    return out.numpy()


def check(out, q, k, v, mask=None, bias=None, **opts):
    ref = reference(q, k, v, mask, bias, opts.get("scale"), opts.get("softcap"), opts.get("is_causal", False))
    dtype = kd.as_dtype(q.dtype).name
    rtol, atol = TOL[dtype]
    assert out.dtype == q.dtype
    assert out.shape == ref.shape
    assert not np.isnan(out.astype(np.float32)).any()
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=rtol, atol=atol)


# ------------------------------------------------------------------ every strategy, every dtype
@pytest.mark.parametrize("strategy,dtype", [(Fallback, "f32"), (Fallback, "f16"), (Fallback, "bf16"),
                                            (FlashUnit, "f32"), (FlashUnit, "f16"), (FlashUnit, "bf16"),
                                            (Accelerated, "f16"), (Accelerated, "bf16")],
                         ids=lambda x: getattr(x, "name", x))
def test_matches_reference(runtime, rng, strategy, dtype):
    q, k, v = inputs(rng, dtype=dtype)
    check(run(runtime, q, k, v, strategy=strategy), q, k, v)


OPTION_CASES = {
    "scale": dict(opts=dict(scale=0.37)),
    "softcap": dict(opts=dict(softcap=1.5)),
    "causal": dict(opts=dict(is_causal=True)),
    "mask": dict(mask=True),
    "bias": dict(bias=True),
    "all": dict(mask=True, bias=True, opts=dict(scale=0.6, softcap=2.5, is_causal=True)),
}


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_options(runtime, rng, strategy, case):
    spec = OPTION_CASES[case]
    q, k, v = inputs(rng, dtype=dtype_for(strategy))
    B, Hq, Sq, Skv = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    mask = rng.random((B, Hq, Sq, Skv)) < 0.3 if spec.get("mask") else None
    bias = (rng.standard_normal((B, Hq, Sq, Skv)) * 2).astype(np.float32) if spec.get("bias") else None
    opts = spec.get("opts", {})
    check(run(runtime, q, k, v, mask, bias, strategy, **opts), q, k, v, mask, bias, **opts)


# ------------------------------------------------------------------ causal alignment, hidden rows
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("sq,skv", [(5, 40), (40, 17), (1, 23), (19, 19)])
def test_causal_shapes(runtime, rng, strategy, sq, skv):
    q, k, v = inputs(rng, B=1, Hq=2, Hkv=1, Sq=sq, Skv=skv, dtype=dtype_for(strategy))
    out = run(runtime, q, k, v, strategy=strategy, is_causal=True)
    check(out, q, k, v, is_causal=True)
    if sq > skv:  # bottom-right aligned: the first sq - skv rows see no key at all
        assert np.all(out[:, :, :sq - skv] == 0)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_fully_hidden_rows_are_zero(runtime, rng, strategy):
    q, k, v = inputs(rng, B=1, Hq=2, Hkv=2, Sq=9, Skv=70, dtype=dtype_for(strategy))
    mask = rng.random((1, 2, 9, 70)) < 0.5
    mask[0, 0, 3] = True          # every key masked out
    bias = np.zeros((1, 2, 9, 70), np.float32)
    bias[0, 1, 5] = -np.inf       # every key biased to -inf
    out = run(runtime, q, k, v, mask, bias, strategy, softcap=3.0)
    assert np.all(out[0, 0, 3] == 0) and np.all(out[0, 1, 5] == 0)
    check(out, q, k, v, mask, bias, softcap=3.0)


# ------------------------------------------------------------------ broadcasting and GQA
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("mshape,bshape", [((1, 1, 13, 29), (2, 1, 13, 29)), ((2, 1, 13, 29), (1, 1, 13, 29)),
                                           ((1, 4, 1, 29), (2, 4, 13, 1)), ((1, 1, 1, 1), (1, 1, 1, 29))],
                         ids=["11SK-B1SK", "B1SK-11SK", "1H1K-BHS1", "1111-111K"])
def test_broadcast_mask_and_bias(runtime, rng, strategy, mshape, bshape):
    q, k, v = inputs(rng, dtype=dtype_for(strategy))
    mask = rng.random(mshape) < 0.25
    bias = rng.standard_normal(bshape).astype(np.float32)
    check(run(runtime, q, k, v, mask, bias, strategy, softcap=5.0), q, k, v, mask, bias, softcap=5.0)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("hq,hkv", [(6, 2), (5, 1), (3, 3)])
def test_gqa(runtime, rng, strategy, hq, hkv):
    q, k, v = inputs(rng, B=2, Hq=hq, Hkv=hkv, Sq=7, Skv=31, dtype=dtype_for(strategy))
    check(run(runtime, q, k, v, strategy=strategy, is_causal=True), q, k, v, is_causal=True)


def test_strategies_agree(runtime, rng):
    q, k, v = inputs(rng, B=2, Hq=4, Hkv=2, Sq=33, Skv=90, dtype="bf16")
    mask = rng.random((2, 1, 33, 90)) < 0.2
    bias = rng.standard_normal((1, 4, 33, 90)).astype(np.float32)
    opts = dict(scale=0.2, softcap=4.0, is_causal=True)
    outs = [run(runtime, q, k, v, mask, bias, s, **opts).astype(np.float32) for s in STRATEGIES]
    for other in outs[1:]:
        np.testing.assert_allclose(other, outs[0], rtol=3e-2, atol=3e-2)


# ------------------------------------------------------------------ odd sizes
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("d,dv", [(8, 5), (64, 64), (128, 40), (256, 136)])
def test_odd_sizes(runtime, rng, strategy, d, dv):
    q, k, v = inputs(rng, B=1, Hq=2, Hkv=1, Sq=11, Skv=100, D=d, Dv=dv, dtype=dtype_for(strategy))
    check(run(runtime, q, k, v, strategy=strategy, is_causal=True), q, k, v, is_causal=True)


@pytest.mark.parametrize("tiling", [BlackboxAcceleratedStrategy(1, 1, 1), BlackboxAcceleratedStrategy(2, 2, 1),
                                    BlackboxAcceleratedStrategy(1, 1, 3)], ids=str)
def test_accelerated_tilings(runtime, rng, tiling):
    q, k, v = inputs(rng, B=1, Hq=3, Hkv=1, Sq=45, Skv=77, D=24, Dv=16, dtype="f16")
    mask = rng.random((1, 3, 45, 77)) < 0.2
    check(run(runtime, q, k, v, mask, None, tiling, is_causal=True), q, k, v, mask, is_causal=True)


@pytest.mark.parametrize("kernel,hold,vec", [("registers", None, True), ("registers", None, False),
                                             ("shared", True, True), ("shared", True, False),
                                             ("shared", False, False)],
                         ids=["registers-vector", "registers-scalar", "fragments-vector", "fragments-scalar",
                              "shared-scalar"])
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_accelerated_variants(runtime, rng, kernel, hold, vec):
    """Both kernels (softmax on the accumulators: tensor-core devices; softmax in shared
    memory, Q and O in fragments or in shared memory: elsewhere) and both ways of staging
    tiles (16-byte async copies or elements) run everywhere. Keys rise steadily so the
    running max has to move many times."""
    B, H, Sq, Skv, D = 1, 2, 37, 300, 16
    q = np.ones((B, H, Sq, D), np.float16)
    k = (np.linspace(-3, 6, Skv)[None, None, :, None] * np.ones((B, H, Skv, D))).astype(np.float16)
    v = rng.standard_normal((B, H, Skv, 24)).astype(np.float16)
    p = problem.validate(runtime.tensor(q), runtime.tensor(k), runtime.tensor(v), None, None,
                         AttentionModuleOptions(scale=0.25))
    out = runtime.empty(p.out_shape, p.dtype)
    flash_mma.run(p, out, runtime.zeros((1, 1, 1, 1), "bool"), runtime.zeros((1, 1, 1, 1)),
                  BlackboxAcceleratedStrategy(2, 1, 1), hold=hold, vec=vec, kernel=kernel)
    check(out.numpy(), q, k, v, scale=0.25)


@pytest.mark.parametrize("tiling", [BlackboxAcceleratedStrategy(1, 2, 1), BlackboxAcceleratedStrategy(2, 1, 2)],
                         ids=str)
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_register_kernel_every_option(runtime, rng, tiling):
    """The register-softmax kernel (the CUDA path) with GQA, a broadcast mask, a bias,
    softcap, an explicit scale and causal with Sq < Skv, on every runtime."""
    q, k, v = inputs(rng, B=2, Hq=4, Hkv=2, Sq=19, Skv=41, D=16, Dv=8, dtype="bf16")
    mask = rng.random((2, 1, 19, 41)) < 0.2
    bias = rng.standard_normal((1, 4, 19, 41)).astype(np.float32)
    t = runtime.tensor
    opts = dict(scale=0.3, softcap=5.0, is_causal=True)
    p = problem.validate(t(q), t(k), t(v), t(mask), t(bias), AttentionModuleOptions(**opts))
    out = runtime.empty(p.out_shape, p.dtype)
    flash_mma.run(p, out, runtime.zeros((1, 1, 1, 1), "bool"), runtime.zeros((1, 1, 1, 1)), tiling,
                  kernel="registers")
    check(out.numpy(), q, k, v, mask, bias, **opts)


@pytest.mark.parametrize("scale", [0.5, -0.5])
@pytest.mark.parametrize("tiling", [BlackboxAcceleratedStrategy(2, 2, 1), BlackboxAcceleratedStrategy(4, 1, 1)],
                         ids=str)
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_register_kernel_scale_sign(runtime, rng, scale, tiling):
    """Unmasked tiles keep raw scores and fold the scale into the exponent only when it is
    positive (a negative scale turns the largest score into the smallest); two query tiles
    per plane take shorter key steps."""
    q, k, v = inputs(rng, B=1, Hq=2, Hkv=1, Sq=40, Skv=150, D=16, Dv=16, dtype="bf16")
    t = runtime.tensor
    p = problem.validate(t(q), t(k), t(v), None, None, AttentionModuleOptions(scale=scale))
    out = runtime.empty(p.out_shape, p.dtype)
    flash_mma.run(p, out, runtime.zeros((1, 1, 1, 1), "bool"), runtime.zeros((1, 1, 1, 1)), tiling,
                  kernel="registers")
    check(out.numpy(), q, k, v, scale=scale)


@pytest.mark.parametrize("tiling,vec", [(BlackboxAcceleratedStrategy(4, 1, 1), True),
                                         (BlackboxAcceleratedStrategy(8, 1, 1), False)], ids=str)
@pytest.mark.variants_sampled  # compile-bound: first case only on cpu-p8
def test_group_kernel_every_option(runtime, rng, tiling, vec):
    """The group-primitive kernel (the path on wgmma devices), forced on every runtime: GQA,
    a broadcast mask, a bias, softcap, an explicit scale, causal with Sq < Skv, rows past
    the end of the block, one and two groups a cube, vector and element copies."""
    q, k, v = inputs(rng, B=2, Hq=4, Hkv=2, Sq=37, Skv=90, D=16, Dv=32, dtype="bf16")
    mask = rng.random((2, 1, 37, 90)) < 0.2
    bias = rng.standard_normal((1, 4, 37, 90)).astype(np.float32)
    t = runtime.tensor
    opts = dict(scale=0.3, softcap=5.0, is_causal=True)
    p = problem.validate(t(q), t(k), t(v), t(mask), t(bias), AttentionModuleOptions(**opts))
    assert flash_group.fits(p, tiling)
    out = runtime.empty(p.out_shape, p.dtype)
    flash_mma.run(p, out, runtime.zeros((1, 1, 1, 1), "bool"), runtime.zeros((1, 1, 1, 1)), tiling,
                  vec=vec, kernel="group")
    check(out.numpy(), q, k, v, mask, bias, **opts)


def test_group_kernel_with_128_byte_tiles(runtime, rng, vec=True):
    """Head dims of whole 64-column bands: Q, K and V sit in the 128-byte layout (causal with
    Sq < Skv, rows past the block's end; element copies share the layout code with the 32-byte
    case tested above)."""
    q, k, v = inputs(rng, B=1, Hq=2, Hkv=1, Sq=45, Skv=150, D=64, Dv=64, dtype="bf16")
    t = runtime.tensor
    opts = dict(scale=0.2, is_causal=True)
    p = problem.validate(t(q), t(k), t(v), None, None, AttentionModuleOptions(**opts))
    tiling = BlackboxAcceleratedStrategy(4, 1, 1)
    assert flash_group.fits(p, tiling)
    out = runtime.empty(p.out_shape, p.dtype)
    flash_mma.run(p, out, runtime.zeros((1, 1, 1, 1), "bool"), runtime.zeros((1, 1, 1, 1)), tiling,
                  vec=vec, kernel="group")
    check(out.numpy(), q, k, v, **opts)


@pytest.mark.parametrize("scale", [0.5, -0.5])
def test_group_kernel_plain_and_rescaled(runtime, rng, scale):
    """No mask: interior tiles keep raw scores (positive scale) or scale first (negative);
    keys that rise steadily make the running max move on many steps."""
    B, H, Sq, Skv, D = 1, 2, 70, 300, 16
    q = np.ones((B, H, Sq, D), np.float16)
    k = (np.linspace(-3, 6, Skv)[None, None, :, None] * np.ones((B, H, Skv, D))).astype(np.float16)
    v = rng.standard_normal((B, H, Skv, 16)).astype(np.float16)
    p = problem.validate(runtime.tensor(q), runtime.tensor(k), runtime.tensor(v), None, None,
                         AttentionModuleOptions(scale=scale))
    out = runtime.empty(p.out_shape, p.dtype)
    flash_mma.run(p, out, runtime.zeros((1, 1, 1, 1), "bool"), runtime.zeros((1, 1, 1, 1)),
                  BlackboxAcceleratedStrategy(4, 1, 1), kernel="group")
    check(out.numpy(), q, k, v, scale=scale)


# the roles kernel (the path where bulk copies and native group products exist), forced on every
# runtime: one consumer group (8 planes, 64-key steps) with every option, GQA and rows past the
# block; two (12 planes, 128-key steps, in turn or not) causal at head dim 128 (two 64-column bands:
# each group's Q rows are a tile of their own), with Skv not a multiple of the step (a head's last
# tile pulled back inside the head) and the next batch holding inf everywhere: nothing of it may
# reach this batch's rows (its own rows are inf/NaN, as the reference's are)
@kd.testing.interpreted  # the interpreter checks that program order meets every barrier wait
@pytest.mark.parametrize("planes,pingpong", [(8, False), (12, False), (12, True)])
def test_roles_kernel(runtime, rng, planes, pingpong):
    tiling = BlackboxAcceleratedStrategy(planes, 1, 1)
    caps = runtime.capabilities
    if planes == 12 and not (caps.interpreted or caps.group_mma_native):
        pytest.skip("CI time: two consumer groups compile for minutes on the cpu runtime "
                    "(and need 320 KiB of shared memory on opencl); the interpreter runs them, checking that program "
                    "order meets every barrier wait, and the one-group case runs everywhere")
    if planes == 8:
        q, k, v = inputs(rng, B=1, Hq=4, Hkv=2, Sq=37, Skv=90, D=64, Dv=64, dtype="bf16")
        mask = rng.random((1, 1, 37, 90)) < 0.2
        bias = rng.standard_normal((1, 4, 37, 90)).astype(np.float32)
        opts = dict(scale=0.3, softcap=5.0, is_causal=True)
    else:
        q, k, v = inputs(rng, B=2, Hq=2, Hkv=1, Sq=64, Skv=200, D=128, Dv=128, dtype="bf16")
        for x in (q, k, v):
            x[1] = np.inf
        mask = bias = None
        opts = dict(scale=0.2, is_causal=True)
    t = runtime.tensor
    p = problem.validate(t(q), t(k), t(v), None if mask is None else t(mask), None if bias is None else t(bias),
                         AttentionModuleOptions(**opts))
    assert flash_roles.fits(p, tiling)
    assert flash_roles.usable(p, tiling) == bool(caps.bulk_copy and caps.group_mma_native)  # natively on the H200
    out = runtime.empty(p.out_shape, p.dtype)
    flash_roles.run(p, out, runtime.zeros((1, 1, 1, 1), "bool"), runtime.zeros((1, 1, 1, 1)), tiling, pingpong=pingpong)
    got = out.numpy()
    if planes == 8:
        check(got, q, k, v, mask, bias, **opts)
    else:
        check(got[:1], q[:1], k[:1], v[:1], **opts)


def test_roles_kernel_takes_what_the_copy_engine_reads():
    """flash_roles.usable: bulk copies and native group products, F16/BF16, whole 64-column head
    dims up to 128, at least one step of keys, contiguous inputs starting on 16-byte boundaries
    (else the group kernel); kernel_for picks it there."""
    import types
    cpu = kd.runtime("cpu")
    hopper = types.SimpleNamespace(capabilities=types.SimpleNamespace(
        bulk_copy=True, group_mma_native=True, mma_native=True, plane_dim=32, max_shared_bytes=232448))
    til = BlackboxAcceleratedStrategy(12, 1, 1)

    def prob(q, k, v, runtime=hopper):
        p = problem.validate(q, k, v, None, None, AttentionModuleOptions())
        return types.SimpleNamespace(q=p.q, k=p.k, v=p.v, runtime=runtime, dtype=p.dtype, D=p.D, Dv=p.Dv,
                                     Skv=p.Skv)

    def qkv(D=128, Skv=256, dtype="bf16"):
        return cpu.zeros((1, 2, 64, D), dtype), cpu.zeros((1, 1, Skv, D), dtype), cpu.zeros((1, 1, Skv, D), dtype)

    assert flash_roles.usable(prob(*qkv()), til) and not flash_roles.usable(prob(*qkv(), runtime=cpu), til)
    assert flash_roles.usable(prob(*qkv(D=64)), til) and flash_roles.usable(prob(*qkv(dtype="f16")), til)
    assert not flash_roles.usable(prob(*qkv(D=96)), til)                      # not whole 64-column bands
    assert not flash_roles.usable(prob(*qkv(Skv=100)), til)                   # fewer keys than a step
    assert not flash_roles.usable(prob(*qkv()), BlackboxAcceleratedStrategy(4, 1, 1))  # no producer group
    q, k, v = qkv()
    assert not flash_roles.usable(prob(q, k, cpu.zeros((1, 1, 128, 256), "bf16").transpose(2, 3)), til)
    shifted = cpu.zeros(1 + 2 * 64 * 128, "bf16")[1:].reshape(1, 2, 64, 128)  # 2 bytes in
    assert not flash_roles.usable(prob(shifted, k, v), til)
    assert flash_mma.kernel_for(prob(*qkv()), til) == "roles"
    assert flash_mma.kernel_for(prob(*qkv(D=96)), til) == "group"
    assert flash_mma.default_tiling(prob(*qkv())) == flash_mma.ROLES_TILING == til       # D 128
    assert flash_mma.default_tiling(prob(*qkv(D=64))) == BlackboxAcceleratedStrategy(4, 1, 1)  # not ROLES_DIMS
    assert flash_mma.default_tiling(prob(shifted, k, v)) == BlackboxAcceleratedStrategy(4, 1, 1)


# ------------------------------------------------------------------ views, inputs, empty sizes
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_strided_views_and_inputs_unchanged(runtime, rng, strategy):
    dt = kd.as_dtype(dtype_for(strategy)).np
    qh = rng.standard_normal((2, 13, 4, 16)).astype(dt)        # [B, S, H, D] layout
    kh = rng.standard_normal((2, 2, 40, 16)).astype(dt)
    vh = rng.standard_normal((2, 2, 24, 29)).astype(dt)        # stored [B, H, Dv, S], Dv = 24
    q = runtime.tensor(qh).permute(0, 2, 1, 3)
    k = runtime.tensor(kh)[:, :, 3:32]
    v = runtime.tensor(vh).permute(0, 1, 3, 2)
    bias_h = rng.standard_normal((1, 4, 29, 13)).astype(np.float32)
    bias = runtime.tensor(bias_h).transpose(2, 3)
    out = attention(q, k, v, None, bias, AttentionModuleOptions(is_causal=True), strategy).numpy()
    qn, kn, vn = qh.transpose(0, 2, 1, 3), kh[:, :, 3:32], vh.transpose(0, 1, 3, 2)
    check(out, qn, kn, vn, None, bias_h.transpose(0, 1, 3, 2), is_causal=True)
    np.testing.assert_array_equal(q.numpy(), qn)
    np.testing.assert_array_equal(k.numpy(), kn)
    np.testing.assert_array_equal(v.numpy(), vn)


@pytest.mark.parametrize("strategy", STRATEGIES + [AttentionStrategy.Autotune], ids=lambda s: s.name)
def test_empty_sizes(runtime, strategy):
    def go(qs, ks, vs):
        z = lambda s: runtime.zeros(s, "bf16")
        return attention(z(qs), z(ks), z(vs), strategy=strategy)
    assert go((2, 4, 0, 8), (2, 2, 5, 8), (2, 2, 5, 3)).shape == (2, 4, 0, 3)
    assert go((0, 4, 6, 8), (0, 2, 5, 8), (0, 2, 5, 3)).shape == (0, 4, 6, 3)
    assert go((2, 4, 6, 8), (2, 2, 5, 8), (2, 2, 5, 0)).shape == (2, 4, 6, 0)
    out = go((2, 4, 6, 8), (2, 2, 0, 8), (2, 2, 0, 3))   # no keys: every row hidden
    assert out.shape == (2, 4, 6, 3) and np.all(out.numpy() == 0)


# ------------------------------------------------------------------ PyTorch cross-check
@pytest.mark.parametrize("strategy", [Fallback, FlashUnit], ids=lambda s: s.name)
def test_matches_torch_sdpa(runtime, rng, strategy):
    torch = pytest.importorskip("torch", reason="PyTorch (the `oracle` extra) is not installed")
    F = torch.nn.functional
    B, Hq, Hkv, Sq, Skv = 2, 6, 2, 17, 45
    q, k, v = inputs(rng, B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Skv=Skv)
    mask = rng.random((B, 1, Sq, Skv)) < 0.2
    bias = rng.standard_normal((1, Hq, Sq, Skv)).astype(np.float32)
    hidden = mask | (np.arange(Skv)[None, :] > np.arange(Sq)[:, None] + (Skv - Sq))  # causal, bottom-right
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    float_mask = torch.from_numpy(np.where(hidden, -np.inf, bias).astype(np.float32))
    want = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=float_mask, scale=0.3, enable_gqa=True).numpy()
    got = run(runtime, q, k, v, mask, bias, strategy, scale=0.3, is_causal=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    plain = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(~mask), enable_gqa=True).numpy()
    np.testing.assert_allclose(run(runtime, q, k, v, mask, None, strategy), plain, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ errors
def _err(runtime, match, q=(2, 4, 5, 8), k=(2, 2, 7, 8), v=(2, 2, 7, 3), dtype="f32", mask=None, bias=None,
         options=AttentionModuleOptions(), strategy=FlashUnit, kdtype=None, vdtype=None):
    z = runtime.zeros
    args = [z(q, dtype), z(k, kdtype or dtype), z(v, vdtype or dtype), mask, bias, options, strategy]
    with pytest.raises(AttentionSetupError, match=match) as info:
        attention(*args)
    assert isinstance(info.value, rudnn.RudnnError) and isinstance(info.value, ValueError)


def test_errors_ranks_and_shapes(runtime):
    _err(runtime, "query must have rank 4", q=(4, 5, 8))
    _err(runtime, "key must have rank 4", k=(2, 2, 7, 8, 1))
    _err(runtime, "value must have rank 4", v=(2, 7, 3))
    _err(runtime, "key must be", k=(3, 2, 7, 8))
    _err(runtime, "key must be", k=(2, 2, 7, 9))
    _err(runtime, "value must be", v=(2, 1, 7, 3))
    _err(runtime, "value must be", v=(2, 2, 6, 3))
    _err(runtime, "multiple of key/value heads", q=(2, 3, 5, 8))
    _err(runtime, "head dimension D", q=(2, 4, 5, 0), k=(2, 2, 7, 0))
    _err(runtime, "value head dimension", v=(2, 2, 7, 1025))


def test_errors_dtypes_and_arguments(runtime):
    _err(runtime, "query must be F32, F16 or BF16", dtype="i32")
    _err(runtime, "key is f16 but query is f32", kdtype="f16")
    _err(runtime, "value is bf16 but query is f32", vdtype="bf16")
    with pytest.raises(AttentionSetupError, match="query must be a kerneldsl tensor"):
        attention(np.zeros((1, 1, 1, 1)), runtime.zeros((1, 1, 1, 1)), runtime.zeros((1, 1, 1, 1)))
    _err(runtime, "options must be an AttentionModuleOptions", options={"scale": 1.0})
    _err(runtime, "strategy must be", strategy="FlashUnit")


def test_errors_mask_and_bias(runtime):
    z = runtime.zeros
    _err(runtime, "mask must be bool", mask=z((2, 4, 5, 7), "f32"))
    _err(runtime, "mask must have rank 4", mask=z((5, 7), "bool"))
    _err(runtime, "mask of shape .* does not broadcast", mask=z((2, 3, 5, 7), "bool"))
    _err(runtime, "mask of shape .* does not broadcast", mask=z((1, 1, 5, 6), "bool"))
    _err(runtime, "attn_bias must be F32, F16 or BF16", bias=z((2, 4, 5, 7), "i32"))
    _err(runtime, "attn_bias must be F32, F16 or BF16", bias=z((2, 4, 5, 7), "bool"))
    _err(runtime, "attn_bias of shape .* does not broadcast", bias=z((2, 4, 2, 7), "f32"))
    _err(runtime, "attn_bias must have rank 4", bias=z((4, 5, 7), "f32"))


@pytest.mark.parametrize("opts,match", [(dict(softcap=0.0), "softcap must be a finite number > 0"),
                                        (dict(softcap=-1.0), "softcap must be a finite number > 0"),
                                        (dict(softcap=math.inf), "softcap must be a finite number > 0"),
                                        (dict(scale=math.nan), "scale must be a finite number"),
                                        (dict(scale="2"), "scale must be a number"),
                                        (dict(is_causal=1), "is_causal must be a bool")])
def test_errors_options(runtime, opts, match):
    _err(runtime, match, options=AttentionModuleOptions(**opts))


def test_errors_strategy_unavailable_or_bad_tiling(runtime):
    for strategy in (Accelerated, BlackboxAcceleratedStrategy()):
        _err(runtime, "FlashBlackboxAccelerated is unavailable for f32", strategy=strategy)
    _err(runtime, "num_planes must be an int >= 1", dtype="bf16", strategy=BlackboxAcceleratedStrategy(0, 1, 1))
    _err(runtime, "seq_kv must be an int >= 1", dtype="bf16", strategy=BlackboxAcceleratedStrategy(1, 1, 1.5))
    _err(runtime, "units per cube", dtype="bf16", strategy=BlackboxAcceleratedStrategy(4096, 1, 1))
    _err(runtime, "shared memory", dtype="bf16", q=(1, 1, 5, 1024), k=(1, 1, 7, 1024), v=(1, 1, 7, 1024),
         strategy=BlackboxAcceleratedStrategy(32, 8, 8))


def test_errors_mixed_runtimes(runtime):
    others = [n for n in kd.available_runtimes() if kd.runtime(n).device_key != runtime.device_key]
    if not others:
        pytest.skip(f"needs a second device next to {runtime.name}; this machine has {kd.available_runtimes()}")
    other = kd.runtime(others[0])
    with pytest.raises(AttentionSetupError, match=f"key is on runtime {other.name!r}"):
        attention(runtime.zeros((1, 1, 2, 4)), other.zeros((1, 1, 2, 4)), runtime.zeros((1, 1, 2, 4)))


def test_example_runs(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, KERNELDSL_RUNTIME="cpu")
    out = subprocess.run([sys.executable, str(root / "examples" / "attention.py")], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
