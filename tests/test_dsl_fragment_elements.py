"""Element access on matrix fragments (`kd.fragment_get/set/row/col/row_slot/row_slots/
row_lanes/len/convert`): the layout rules every back end reports must describe where the
values really are, row reductions built from them must give numpy's answers, and an acc
fragment converted to an a fragment must feed the next product (FlashAttention's P·V)."""
import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import CompileError

pytestmark = [pytest.mark.feature("fragment elements"), pytest.mark.interpreter]

DTYPES = ["f16", "bf16"]


@kd.func
def row_reduce_max(acc, s):
    """Max over the tile row of this lane's row slot s (every lane holding the row gets it)."""
    m = -kd.inf
    for i in kd.unroll(kd.fragment_len(acc)):
        if kd.fragment_row_slot(acc, i) == s:
            m = kd.max(m, kd.fragment_get(acc, i))
    masks = kd.fragment_row_lanes(acc)
    for j in kd.unroll(len(masks)):
        m = kd.max(m, kd.plane_shuffle_xor(m, masks[j]))
    return m


@kd.kernel
def elements(a: kd.Tensor, b: kd.Tensor, prod: kd.Tensor[kd.f32], rmax: kd.Tensor[kd.f32],
             scaled: kd.Tensor[kd.f32], pv: kd.Tensor[kd.f32]):
    """One 16x16 product per plane (plane p uses tile p of a and b):
    prod   <- the acc elements written at the positions fragment_row/col name,
    rmax   <- row maxima from the row slots and row lanes,
    scaled <- acc * (row + 1) through fragment_set, stored with store_fragment,
    pv     <- convert(scaled acc) · b, the next product fed from the converted fragment."""
    DT = a.dtype
    p = kd.plane_pos()
    base = p * 256
    fa = kd.fragment_a(DT, 16, 16, 16)
    fb = kd.fragment_b(DT, 16, 16, 16)
    acc = kd.fragment_acc(16, 16, 16)
    kd.fill_fragment(acc, 0.0)
    kd.load_fragment(fa, a, base, 16)
    kd.load_fragment(fb, b, base, 16)
    kd.mma(acc, fa, fb)
    n = kd.fragment_len(acc)
    for i in kd.unroll(n):
        prod[base + kd.fragment_row(acc, i) * 16 + kd.fragment_col(acc, i)] = kd.fragment_get(acc, i)
    for s in kd.unroll(kd.fragment_row_slots(acc)):
        m = row_reduce_max(acc, s)
        for i in kd.unroll(n):
            if kd.fragment_row_slot(acc, i) == s:
                rmax[p * 16 + kd.fragment_row(acc, i)] = m
    for i in kd.unroll(n):
        kd.fragment_set(acc, i, kd.fragment_get(acc, i) * kd.f32(kd.fragment_row(acc, i) + 1))
    kd.store_fragment(scaled, base, acc, 16)
    pa = kd.fragment_a(DT, 16, 16, 16)
    kd.fragment_convert(pa, acc)
    out = kd.fragment_acc(16, 16, 16)
    kd.fill_fragment(out, 0.0)
    kd.mma(out, pa, fb)
    kd.store_fragment(pv, base, out, 16)


def _round(x, dtype):
    return x.astype(kd.as_dtype(dtype).np).astype(np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("planes", [1, 3])
def test_elements_layout_reductions_convert(runtime, rng, dtype, planes):
    if dtype not in [d.name for d in runtime.capabilities.mma_dtypes]:
        pytest.skip(f"{runtime.name} has no {dtype} matrix primitive")
    np_dt = kd.as_dtype(dtype).np
    A = rng.standard_normal((planes, 16, 16)).astype(np_dt)
    B = rng.standard_normal((planes, 16, 16)).astype(np_dt)
    n = planes * 256
    prod, scaled, pv = (runtime.tensor(np.full(n, np.nan, np.float32)) for _ in range(3))
    rmax = runtime.tensor(np.full(planes * 16, np.nan, np.float32))
    elements[1, planes * runtime.plane_dim](runtime.tensor(A.reshape(-1)), runtime.tensor(B.reshape(-1)),
                                            prod, rmax, scaled, pv)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(prod.numpy().reshape(planes, 16, 16), ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(rmax.numpy().reshape(planes, 16), ref.max(2), rtol=1e-5, atol=1e-4)
    want_scaled = prod.numpy().reshape(planes, 16, 16).astype(np.float64) * np.arange(1, 17)[None, :, None]
    np.testing.assert_allclose(scaled.numpy().reshape(planes, 16, 16), want_scaled, rtol=1e-6, atol=1e-5)
    want_pv = _round(scaled.numpy().reshape(planes, 16, 16), dtype) @ B.astype(np.float64)
    np.testing.assert_allclose(pv.numpy().reshape(planes, 16, 16), want_pv, rtol=1e-4, atol=1e-3)


@kd.kernel
def bad_element(out: kd.Tensor[kd.f32], I: kd.Const[int]):
    acc = kd.fragment_acc(16, 16, 16)
    kd.fill_fragment(acc, 1.0)
    out[0] = kd.fragment_get(acc, I)


@kd.kernel
def runtime_element(out: kd.Tensor[kd.f32], i: kd.i32):
    acc = kd.fragment_acc(16, 16, 16)
    kd.fill_fragment(acc, 1.0)
    out[0] = kd.fragment_get(acc, i)


@kd.kernel
def get_from_a(out: kd.Tensor[kd.f32]):
    fa = kd.fragment_a(kd.f16, 16, 16, 16)
    kd.fill_fragment(fa, 1.0)
    out[0] = kd.fragment_get(fa, 0)


def test_errors(runtime):
    out = runtime.zeros(1, "f32")
    P = runtime.plane_dim
    n = 256 // P if not runtime.capabilities.mma_native else 8
    with pytest.raises(CompileError, match=f"element must be a compile-time int in 0..{n - 1}"):
        bad_element.source(P, out, n, runtime=runtime)
    with pytest.raises(CompileError, match="compile-time"):
        runtime_element.source(P, out, 0, runtime=runtime)
    with pytest.raises(CompileError, match="needs a acc fragment"):
        get_from_a.source(P, out, runtime=runtime)
    if not runtime.capabilities.mma_native:
        with pytest.raises(CompileError, match="whole planes"):
            bad_element.source(P + 1, out, 0, runtime=runtime)
