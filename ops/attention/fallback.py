"""`Fallback`: attention as three separate kernels, the reference-shaped path.

1. `scores_kernel`: S = q·kᵀ (raw f32 dot products), a plain matmul;
2. `softmax_kernel`: scale, softcap, mask, causal and bias (the shared `logit2` rule),
   then a numerically safe softmax over keys, in place (fully hidden rows become zeros);
3. `pv_kernel`: out = P·v, cast to the output dtype.

S is stored key-major, [rows, Skv, Sq padded to whole cubes] for a chunk of (batch, head)
rows, so every kernel gives one query per unit and reads S contiguously across units
(vector loads on the CPU, coalesced loads on GPUs); padding columns hold clamped rows'
values and are never written out. Heads are processed in chunks so S stays within a
memory budget.
"""
from __future__ import annotations

import kerneldsl as kd

from .problem import Problem
from .scores import LOG2E, logit2
from .unit_blocks import dot8, fma8, key_rows, load_query

S_BUDGET_BYTES = 256 << 20  # f32 score scratch per chunk of heads


@kd.func
def chunk_rows(o, kv, bh0):
    """(b, h, Sq, G, first query i0, this unit's query i clamped) of a cube of the chunk
    row c = cube_pos_y: (b, h) = divmod(bh0 + c, Hq) with o [B, Hq, Sq, ...] and kv's heads."""
    Hq = o.shape[1]
    Sq = o.shape[2]
    c = kd.cube_pos_y()
    i0 = kd.cube_pos_x() * kd.cube_units()
    return (bh0 + c) // Hq, (bh0 + c) % Hq, Sq, Hq // kv.shape[1], i0, kd.min(i0 + kd.unit_pos_x(), Sq - 1)


@kd.kernel
def scores_kernel(q: kd.Tensor, k: kd.Tensor, s: kd.Tensor[kd.f32, 3], bh0: kd.i32, D: kd.Const[int]):
    """s[c, j, i] = q[b, h, i] · k[b, h // group, j] for the chunk row c = (b, h) - bh0."""
    U = kd.cube_units()
    t = kd.unit_pos_x()
    b, h, Sq, G, i0, i = chunk_rows(q, k, bh0)
    Skv = k.shape[2]
    c = kd.cube_pos_y()
    qs = kd.shared(kd.f32, D * U)
    load_query(qs, q, kd.i64(b) * q.stride(0) + kd.i64(h) * q.stride(1) + kd.i64(i) * q.stride(2),
               kd.i64(q.stride(3)), 1.0, D)
    kb = kd.i64(b) * k.stride(0) + kd.i64(h // G) * k.stride(1)
    kst = kd.i64(k.stride(2))
    for j0 in range(0, Skv, 8):
        sv = dot8(qs, k, key_rows(kb, j0, Skv - 1, kst), kd.i64(k.stride(3)), D)
        for n in kd.unroll(8):
            if j0 + n < Skv:
                s[c, j0 + n, i0 + t] = sv[n]


@kd.kernel
def softmax_kernel(s: kd.Tensor[kd.f32, 3], mask: kd.Tensor, bias: kd.Tensor, bh0: kd.i32, Hq: kd.i32,
                   Sq: kd.i32, scale: kd.f32, softcap: kd.f32, causal: kd.i32, HAS_MASK: kd.Const[bool],
                   HAS_BIAS: kd.Const[bool], SOFTCAP: kd.Const[bool]):
    """Row i of chunk row c: logits in log2 units, max, exp2, sum, normalise, in place."""
    U = kd.cube_units()
    t = kd.unit_pos_x()
    Skv = s.shape[1]
    c = kd.cube_pos_y()
    b = (bh0 + c) // Hq
    h = (bh0 + c) % Hq
    iu = kd.cube_pos_x() * U + t  # column of S (padded)
    i = kd.min(iu, Sq - 1)
    lim = Skv
    if causal != 0:
        lim = i + (Skv - Sq)
    ctx = (mask, bias, b, h, i, lim, Skv, softcap, LOG2E)
    m = -kd.inf
    for j in range(Skv):
        m = kd.max(m, logit2(s[c, j, iu] * scale, j, ctx, HAS_MASK, HAS_BIAS, SOFTCAP))
    mu = kd.select(m == -kd.inf, kd.f32(0), m)  # fully hidden row: every p is 0
    total = kd.f32(0)
    for j in range(Skv):
        p = kd.exp2(logit2(s[c, j, iu] * scale, j, ctx, HAS_MASK, HAS_BIAS, SOFTCAP) - mu)
        total += p
        s[c, j, iu] = p
    inv = kd.select(total > 0.0, 1.0 / total, kd.f32(0))
    for j in range(Skv):
        s[c, j, iu] = s[c, j, iu] * inv


@kd.kernel
def pv_kernel(s: kd.Tensor[kd.f32, 3], v: kd.Tensor, out: kd.Tensor, bh0: kd.i32, DV: kd.Const[int]):
    """out[b, h, i, e] = sum_j P[c, j, i] · v[b, h // group, j, e], 8 output columns at a time."""
    t = kd.unit_pos_x()
    b, h, Sq, G, i0, i = chunk_rows(out, v, bh0)
    Skv = s.shape[1]
    c = kd.cube_pos_y()
    vb = kd.i64(b) * v.stride(0) + kd.i64(h // G) * v.stride(1)
    vst = kd.i64(v.stride(2))
    vd3 = kd.i64(v.stride(3))
    for e0 in range(0, DV, 8):
        cols = ()
        for n in kd.unroll(8):
            cols = cols + (vd3 * kd.min(e0 + n, DV - 1),)
        acc = (kd.f32(0),) * 8
        for j in range(Skv):
            acc = fma8(acc, v, cols, vb + kd.i64(j) * vst, s[c, j, i0 + t])
        if i0 + t < Sq:
            for n in kd.unroll(8):
                if e0 + n < DV:
                    out[b, h, i, e0 + n] = acc[n]


def _units(n: int) -> int:
    """Units per cube for n queries: 32 or 128 (few sizes, few compilations)."""
    return 32 if n <= 32 else 128


def run(p: Problem, out, dummy_mask, dummy_bias) -> None:
    """Launch the three kernels over chunks of (batch, head) rows into `out`."""
    rt = p.runtime
    rows = p.B * p.Hq
    per_row = 4 * (p.Sq + 127) * p.Skv
    chunk = max(1, min(rows, S_BUDGET_BYTES // max(per_row, 1)))
    U = _units(p.Sq)
    while U > 1 and U * 4 * p.D > rt.capabilities.max_shared_bytes:
        U //= 2
    cubes = (p.Sq + U - 1) // U
    s = rt.empty((chunk, p.Skv, cubes * U), "f32")
    mask = p.mask if p.mask is not None else dummy_mask
    bias = p.bias if p.bias is not None else dummy_bias
    flags = (p.mask is not None, p.bias is not None, p.softcap is not None)
    for bh0 in range(0, rows, chunk):
        n = min(chunk, rows - bh0)
        view = s[:n]
        scores_kernel[(cubes, n), U](p.q, p.k, view, bh0, p.D)
        softmax_kernel[(cubes, n), U](view, mask, bias, bh0, p.Hq, p.Sq, p.scale, p.softcap or 1.0, int(p.causal),
                                      *flags)
        pv_kernel[(cubes, n), U](view, p.v, out, bh0, p.Dv)
