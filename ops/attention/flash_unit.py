"""`FlashUnit`: one fused online-softmax kernel (FlashAttention-2 style) on plain arithmetic.

A cube owns U rows of the flattened [group heads x Sq] query block of one KV head, one
row per unit, so K and V rows are read once per cube for every query head sharing them
(GQA) and no unit ever waits for another: the kernel has no barrier at all. Each step
takes 8 keys: 8 scores per unit (one query element feeds 8 multiply-adds), an online
softmax update in log2 units, then O += P·V. The query (scaled) and the f32 output
accumulator live in cube-shared memory laid out [element][unit], so on the CPU every
access is a contiguous vector across units and K/V elements are uniform broadcasts;
on GPUs the same layout is bank-conflict free. Head dimensions run in chunks of DC
(compile time stays flat in D).
"""
from __future__ import annotations

import kerneldsl as kd

from .blocks import key_range
from .problem import Problem
from .scores import LOG2E, logit2
from .unit_blocks import DC, dot8, key_rows, load_query


@kd.kernel
def flash_unit_kernel(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, out: kd.Tensor, mask: kd.Tensor,
                      bias: kd.Tensor, qscale: kd.f32, softcap: kd.f32, post: kd.f32, causal: kd.i32,
                      D: kd.Const[int], DV: kd.Const[int], HAS_MASK: kd.Const[bool], HAS_BIAS: kd.Const[bool],
                      SOFTCAP: kd.Const[bool]):
    U = kd.cube_units()
    t = kd.unit_pos_x()
    Hq = q.shape[1]
    Hkv = k.shape[1]
    G = Hq // Hkv
    Sq = q.shape[2]
    Skv = k.shape[2]
    b = kd.cube_pos_y() // Hkv
    hk = kd.cube_pos_y() % Hkv
    rows = G * Sq
    r0 = kd.cube_pos_x() * U
    r = kd.min(r0 + t, rows - 1)
    h = hk * G + r // Sq
    i = r % Sq
    off = Skv - Sq
    last = Skv - 1

    qs = kd.shared(kd.f32, D * U)
    acc = kd.shared(kd.f32, DV * U)
    qrow = kd.i64(b) * q.stride(0) + kd.i64(h) * q.stride(1) + kd.i64(i) * q.stride(2)
    load_query(qs, q, qrow, kd.i64(q.stride(3)), qscale, D)
    for d in range(DV):
        acc[d * U + t] = 0.0

    # keys any row of this cube can see: all, or up to the last visible one (causal)
    kv_end = key_range(r0, U, rows, Sq, Skv, causal)[1]
    lim = Skv
    if causal != 0:
        lim = i + off
    kb = kd.i64(b) * k.stride(0) + kd.i64(hk) * k.stride(1)
    vb = kd.i64(b) * v.stride(0) + kd.i64(hk) * v.stride(1)
    kst = kd.i64(k.stride(2))
    vst = kd.i64(v.stride(2))
    kd3 = kd.i64(k.stride(3))
    vd3 = kd.i64(v.stride(3))
    DVT = DV - DV % DC

    m = -kd.inf  # running max of the logits (log2 units); -inf while nothing is visible
    l = kd.f32(0)
    for j0 in range(0, kv_end, 8):
        s0, s1, s2, s3, s4, s5, s6, s7 = dot8(qs, k, key_rows(kb, j0, last, kst), kd3, D)
        ctx = (mask, bias, b, h, i, lim, Skv, softcap, post)
        s0 = logit2(s0, j0, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
        s1 = logit2(s1, j0 + 1, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
        s2 = logit2(s2, j0 + 2, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
        s3 = logit2(s3, j0 + 3, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
        s4 = logit2(s4, j0 + 4, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
        s5 = logit2(s5, j0 + 5, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
        s6 = logit2(s6, j0 + 6, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
        s7 = logit2(s7, j0 + 7, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
        mn = kd.max(kd.max(kd.max(m, kd.max(s0, s1)), kd.max(s2, s3)), kd.max(kd.max(s4, s5), kd.max(s6, s7)))
        mu = kd.select(mn == -kd.inf, kd.f32(0), mn)  # fully hidden so far: p = 0, never NaN
        alpha = kd.exp2_fast(m - mu)
        p0 = kd.exp2_fast(s0 - mu)
        p1 = kd.exp2_fast(s1 - mu)
        p2 = kd.exp2_fast(s2 - mu)
        p3 = kd.exp2_fast(s3 - mu)
        p4 = kd.exp2_fast(s4 - mu)
        p5 = kd.exp2_fast(s5 - mu)
        p6 = kd.exp2_fast(s6 - mu)
        p7 = kd.exp2_fast(s7 - mu)
        l = l * alpha + (((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)))
        m = mn
        w0, w1, w2, w3, w4, w5, w6, w7 = key_rows(vb, j0, last, vst)
        for dc in range(0, DVT, DC):
            for dd in kd.unroll(DC):
                e = (dc + dd) * vd3
                a = acc[(dc + dd) * U + t] * alpha
                a = kd.fma(p0, kd.f32(v[w0 + e]), a)
                a = kd.fma(p1, kd.f32(v[w1 + e]), a)
                a = kd.fma(p2, kd.f32(v[w2 + e]), a)
                a = kd.fma(p3, kd.f32(v[w3 + e]), a)
                a = kd.fma(p4, kd.f32(v[w4 + e]), a)
                a = kd.fma(p5, kd.f32(v[w5 + e]), a)
                a = kd.fma(p6, kd.f32(v[w6 + e]), a)
                a = kd.fma(p7, kd.f32(v[w7 + e]), a)
                acc[(dc + dd) * U + t] = a
        for dd in kd.unroll(DV % DC):
            e = (DVT + dd) * vd3
            a = acc[(DVT + dd) * U + t] * alpha
            a += p0 * kd.f32(v[w0 + e]) + p1 * kd.f32(v[w1 + e])
            a += p2 * kd.f32(v[w2 + e]) + p3 * kd.f32(v[w3 + e])
            a += p4 * kd.f32(v[w4 + e]) + p5 * kd.f32(v[w5 + e])
            a += p6 * kd.f32(v[w6 + e]) + p7 * kd.f32(v[w7 + e])
            acc[(DVT + dd) * U + t] = a

    if r0 + t < rows:
        inv = kd.select(l > 0.0, 1.0 / l, kd.f32(0))  # no visible key: zeros
        for d in range(DV):
            out[b, h, i, d] = acc[d * U + t] * inv


def cube_units(p: Problem, rows: int) -> int:
    """Units per cube: 32 for short blocks (decode), else 128 (the CPU's sweet spot: long
    vector loops, few cubes), fewer where shared memory is short. Two sizes only, so a
    shape change rarely means a new compilation."""
    caps = p.runtime.capabilities
    u = 32 if rows <= 32 else 128
    per_unit = 4 * (p.D + p.Dv)
    while u > 1 and u * per_unit > caps.max_shared_bytes:
        u //= 2
    return max(1, min(u, caps.max_cube_units))


def run(p: Problem, out, dummy_mask, dummy_bias) -> None:
    """Launch the fused kernel for a validated problem into `out` ([B, Hq, Sq, Dv])."""
    rows = p.group * p.Sq
    U = cube_units(p, rows)
    softcap = p.softcap or 1.0
    folded = p.softcap is None and p.bias is None  # fold log2(e) into q: the logit is then q·k itself
    qscale = p.scale * (LOG2E if folded else 1.0)
    grid = ((rows + U - 1) // U, p.B * p.Hkv)
    flash_unit_kernel[grid, U](
        p.q, p.k, p.v, out, p.mask if p.mask is not None else dummy_mask,
        p.bias if p.bias is not None else dummy_bias, qscale, softcap, 1.0 if folded else LOG2E, int(p.causal),
        p.D, p.Dv, p.mask is not None, p.bias is not None, p.softcap is not None)
