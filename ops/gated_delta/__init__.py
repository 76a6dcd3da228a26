"""rudnn.gated_delta: the gated delta rule of Gated DeltaNet layers (SPEC §3), on every runtime.

    out = rudnn.gated_delta.gated_delta_rule(GatedDeltaInput(q, k, v, beta, g, s0, scale))
    out = rudnn.gated_delta.chunk_gated_delta_rule(GatedDeltaInput(...), chunk_size=64)

Per (b, h), an F32 K×V state S starts at initial_state and, for t = 0…T−1, is decayed by
e^g_t, corrected towards v_t along k_t (δ = β_t·(v_t − Sᵀk_t), S += k_t ⊗ δ) and read by
the scaled query. `gated_delta_rule` runs the recurrence (recurrent.py: state in
registers, one pass over T, fast for decode); `chunk_gated_delta_rule` gives the same
result chunk-parallel: chunk_prepare.py solves every chunk's triangular system (WY/UT
form) at once, chunk_sweep.py carries the state across chunks in order. Outputs are in
the query's dtype, states F32; initial_state is never written.
"""
from __future__ import annotations

import kerneldsl as kd

from .chunk_prepare import chunk_prepare
from .chunk_sweep import chunk_sweep
from .chunk_sweep_mma import BV as MMA_COLUMNS
from .chunk_sweep_mma import PLANES, chunk_sweep_mma
from .problem import CHECKS, GatedDeltaError, GatedDeltaInput, GatedDeltaOutput, Problem, validate, validate_chunked
from .recurrent import gated_delta_recurrent
from .tuning import matrix_sweep, prepare_units, recurrent_tiling, sweep_shared_bytes, sweep_tiling

__all__ = ["GatedDeltaInput", "GatedDeltaOutput", "gated_delta_rule", "chunk_gated_delta_rule", "GatedDeltaError"]


def gated_delta_rule(input: GatedDeltaInput) -> GatedDeltaOutput:  # noqa: A002
    """The recurrence of SPEC §3, one step after another."""
    p = validate("gated_delta_rule", input)
    out, final = _outputs(p)
    if p.T == 0:
        return GatedDeltaOutput(out, p.s0.clone())
    til = recurrent_tiling(p.runtime.capabilities, p.K, p.V)
    gated_delta_recurrent[til.grid(p.V, p.B * p.H), til.block](
        p.q, p.k, p.v, p.beta, p.g, p.s0, out, final, p.T, p.scale, p.K, p.V, til.rows, til.r, til.bv)
    return GatedDeltaOutput(out, final)


def chunk_gated_delta_rule(input: GatedDeltaInput, chunk_size: int) -> GatedDeltaOutput:  # noqa: A002
    """The same result as gated_delta_rule, computed chunk by chunk (WY/UT form)."""
    fn = "chunk_gated_delta_rule"
    p, C = validate_chunked(fn, input, chunk_size)
    caps = p.runtime.capabilities
    til = sweep_tiling(caps, p.K, p.V, C)
    if til is None:
        CHECKS.at(fn).fail(f"K = {p.K} with chunk_size {C} needs {sweep_shared_bytes(p.K, C, 1)} bytes of shared "
                           f"memory per cube for one state column, more than this runtime has "
                           f"({caps.max_shared_bytes}): unavailable")
    out, final = _outputs(p)
    if p.T == 0:
        return GatedDeltaOutput(out, p.s0.clone())
    rt, rows = p.runtime, p.B * p.H
    chunks = -(-p.T // C)
    Tp = chunks * C
    matrix = matrix_sweep(caps, p.q.dtype, p.K, p.V, C)
    op = p.q.dtype if matrix else kd.f32  # dtype of the sweep's operands
    gc = rt.empty((rows, Tp), kd.f32)
    w = rt.empty((rows, Tp, p.K), kd.f32)
    u = rt.empty((rows, Tp, p.V), kd.f32)
    a = rt.empty((rows, Tp, C), op)
    wn, qg, kdk = (rt.empty((rows, Tp, p.K), op) for _ in range(3)) if matrix else (w, w, w)
    chunk_prepare[(chunks, rows), prepare_units(caps)](p.q, p.k, p.v, p.beta, p.g, gc, w, u, a, wn, qg, kdk, p.T,
                                                       p.scale, p.K, p.V, C, matrix)
    if matrix:
        chunk_sweep_mma[(p.V // MMA_COLUMNS, rows), PLANES * rt.plane_dim](
            wn, u, qg, kdk, a, gc, p.s0, out, final, p.T, p.K, p.V, C, op)
    else:
        chunk_sweep[til.grid(p.V, rows), til.block](p.q, p.k, gc, w, u, a, p.s0, out, final, p.T, p.scale,
                                                    p.K, p.V, C, til.bv)
    return GatedDeltaOutput(out, final)


def _outputs(p: Problem) -> tuple:
    """Empty output [B, H, T, V] (query dtype) and final state [B, H, K, V] (F32)."""
    rt = p.runtime
    return rt.empty((p.B, p.H, p.T, p.V), p.q.dtype), rt.empty((p.B, p.H, p.K, p.V), kd.f32)
