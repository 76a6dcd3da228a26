"""rudnn.gated_delta: the gated delta rule of Gated DeltaNet layers (SPEC §3), on every runtime.

    out = rudnn.gated_delta.gated_delta_rule(GatedDeltaInput(q, k, v, beta, g, s0, scale))
    out = rudnn.gated_delta.chunk_gated_delta_rule(GatedDeltaInput(...), chunk_size=64)

Per (b, h), an F32 K×V state S starts at initial_state and, for t = 0…T−1, is decayed by
e^g_t, corrected towards v_t along k_t (δ = β_t·(v_t − Sᵀk_t), S += k_t ⊗ δ) and read by
the scaled query. `gated_delta_rule` runs the recurrence (state in registers, one
pass over T, fast for decode: recurrent_planes.py, K rows across a plane's lanes, on
GPUs; recurrent.py, row groups and a shared-memory sum, elsewhere); `chunk_gated_delta_rule` gives the same
result chunk-parallel: chunk_prepare.py solves every chunk's triangular system (WY/UT
form) at once, chunk_sweep.py carries the state across chunks in order. Where group
products are on hardware (wgmma, the H200) for F16/BF16 inputs with chunks of 64
(tuning.group_sweep), chunk_prepare_group.py makes every chunk's operands, chunk_state_group.py
walks the chunks computing only the deltas and the state (storing each chunk's entering
state), and chunk_output_group.py computes every chunk's output at once, off the sequential
path; all three multiply on group products from shared memory filled by bulk copies. Where
only the matrix primitive is on hardware (and K, C, V fill whole tiles: tuning.matrix_sweep),
chunk_prepare_mma.py and chunk_sweep_mma.py do the products on 16×16 fragments. Operands
are rounded to the inputs' dtype there, accumulation and state stay F32. Outputs are in
the query's dtype, states F32; initial_state is never written.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.errors import LaunchError
from kerneldsl.launch_checks import check_bulk_source
from kerneldsl.replay import replayable

from .chunk_prepare import chunk_prepare
from .chunk_sweep import chunk_sweep
from .chunk_sweep_mma import PLANES, chunk_sweep_mma
from .chunk_prepare_mma import chunk_prepare_mma, pad_tokens
from .chunk_output_group import chunk_output_group
from .chunk_prepare_group import chunk_prepare_group
from .chunk_state_group import BV as GROUP_COLUMNS, chunk_state_group
from .problem import GatedDeltaError, GatedDeltaInput, GatedDeltaOutput, Problem, validate, validate_chunked
from ..validation import aligned
from .recurrent import gated_delta_recurrent
from .recurrent_planes import gated_delta_recurrent_planes
from .tuning import (group_sweep, group_swizzle, matrix_columns, matrix_sweep, plane_tiling, prefer_planes,
                     prepare_units, recurrent_tiling, sweep_tiling)

PAD_UNITS = 256  # units per cube of the padding copy

__all__ = ["GatedDeltaInput", "GatedDeltaOutput", "gated_delta_rule", "chunk_gated_delta_rule", "GatedDeltaError"]


@replayable
def gated_delta_rule(input: GatedDeltaInput) -> GatedDeltaOutput:  # noqa: A002
    """The recurrence of SPEC §3, one step after another."""
    p = validate("gated_delta_rule", input)
    out, final = _outputs(p)
    if p.T == 0:
        return GatedDeltaOutput(out, p.s0.clone())
    caps = p.runtime.capabilities
    heads = p.B * p.H
    planes = plane_tiling(caps, p.K, p.V, p.T, heads, lambda w: all(aligned(t, w) for t in (p.v, p.s0, out, final))
                          ) if prefer_planes(caps) else None
    if planes is not None:
        gated_delta_recurrent_planes[planes.grid(p.V, heads), planes.planes * p.runtime.plane_dim](
            p.q, p.k, p.v, p.beta, p.g, p.s0, out, final, p.T, p.scale, p.K, p.V, planes.width, planes.lanes,
            planes.planes, planes.prefetch)
        return GatedDeltaOutput(out, final)
    til = recurrent_tiling(caps, p.K, p.V)
    gated_delta_recurrent[til.grid(p.V, p.B * p.H), til.block](
        p.q, p.k, p.v, p.beta, p.g, p.s0, out, final, p.T, p.scale, p.K, p.V, til.rows, til.r, til.bv)
    return GatedDeltaOutput(out, final)


@replayable
def chunk_gated_delta_rule(input: GatedDeltaInput, chunk_size: int) -> GatedDeltaOutput:  # noqa: A002
    """The same result as gated_delta_rule, computed chunk by chunk (WY/UT form)."""
    fn = "chunk_gated_delta_rule"
    p, C = validate_chunked(fn, input, chunk_size)
    caps = p.runtime.capabilities
    til = sweep_tiling(caps, p.K, p.V, C)  # (validate_chunked checked that one exists)
    out, final = _outputs(p)
    if p.T == 0:
        return GatedDeltaOutput(out, p.s0.clone())
    rt, rows = p.runtime, p.B * p.H
    chunks = -(-p.T // C)
    Tp = chunks * C
    if group_sweep(caps, p.q.dtype, p.K, p.V, C):
        _chunked_group(p, C, out, final)
        return GatedDeltaOutput(out, final)
    if matrix_sweep(caps, p.q.dtype, p.K, p.V, C):
        _chunked_matrix(p, C, out, final)
        return GatedDeltaOutput(out, final)
    gc = rt.empty((rows, Tp), kd.f32)
    w = rt.empty((rows, Tp, p.K), kd.f32)
    u = rt.empty((rows, Tp, p.V), kd.f32)
    a = rt.empty((rows, Tp, C), kd.f32)
    chunk_prepare[chunks * rows, prepare_units(caps, p.K, p.V, C)](p.q, p.k, p.v, p.beta, p.g, gc, w, u, a, p.T, p.scale,
                                                       p.K, p.V, C)
    chunk_sweep[til.grid(p.V, rows), til.block](p.q, p.k, gc, w, u, a, p.s0, out, final, p.T, p.scale,
                                                p.K, p.V, C, til.bv)
    return GatedDeltaOutput(out, final)


def _chunked_matrix(p: Problem, C: int, out, final) -> None:
    """The chunked rule on fragments: q, k, v padded to whole chunks if T needs it, the
    operands of every chunk at once, then the sweep (F16/BF16 operands, F32 state)."""
    rt, rows, dt = p.runtime, p.B * p.H, p.q.dtype
    chunks = -(-p.T // C)
    Tp = chunks * C
    q, k, v = p.q, p.k, p.v
    if Tp != p.T:
        q, k, v = (_padded(rt, x, p.T, Tp) for x in (q, k, v))
    gc = rt.empty((rows, Tp), kd.f32)
    u = rt.empty((rows, Tp, p.V), kd.f32)
    a = rt.empty((rows, Tp, C), dt)
    wn, qg, kdk = (rt.empty((rows, Tp, p.K), dt) for _ in range(3))
    units = PLANES * rt.plane_dim
    chunk_prepare_mma[chunks * rows, units](q, k, v, p.beta, p.g, gc, wn, u, a, qg, kdk, p.T, p.scale, p.K, p.V,
                                             C, dt)
    bv = matrix_columns(rt.capabilities, rows, p.K, p.V, C)
    chunk_sweep_mma[p.V // bv * rows, units](wn, u, qg, kdk, a, gc, p.s0, out, final, p.T, p.K, p.V, C, bv, dt)


def _chunked_group(p: Problem, C: int, out, final) -> None:
    """The chunked rule on group products: the operands of every chunk at once
    (chunk_prepare_group), the sweep of deltas and states (chunk_state_group,
    storing each chunk's entering state and deltas, transposed), then every chunk's output
    at once (chunk_output_group, from q and k). Operands are 2-D [B·H·Tp, ·] views for the
    bulk copies."""
    rt, rows, dt = p.runtime, p.B * p.H, p.q.dtype
    chunks = -(-p.T // C)
    Tp = chunks * C
    # padded copies where T needs them, or where an input's memory breaks the bulk-copy rules
    q, k, v = (x if Tp == p.T and _bulk_readable(x, rows * Tp) else _padded(rt, x, p.T, Tp)
               for x in (p.q, p.k, p.v))
    gc = rt.empty((rows, Tp), kd.f32)
    u = rt.empty((rows * Tp, p.V), dt)
    wn, kdk = (rt.empty((rows * Tp, p.K), dt) for _ in range(2))
    units = PLANES * rt.plane_dim
    q2, k2 = (x.reshape((rows * Tp, p.K)) for x in (q, k))
    sw = group_swizzle(p.K, C)
    chunk_prepare_group[chunks * rows, units](k2, v.reshape((rows * Tp, p.V)), p.beta, p.g, gc, wn, u, kdk, p.T,
                                               p.K, p.V, C, sw, group_swizzle(p.V, C))
    hT = rt.empty((rows * chunks * p.V, p.K), dt)
    dT = rt.empty((rows * chunks * p.V, C), dt)
    tiles = p.V // GROUP_COLUMNS
    chunk_state_group[tiles * rows, units](wn, kdk, u, gc, p.s0, hT, dT, final, p.T, p.K, p.V, C, sw)
    chunk_output_group[rows * chunks, units](q2, k2, gc, hT, dT, out.reshape((rows * p.T, p.V)), p.T, p.scale,
                                             p.K, p.V, C, sw, group_swizzle(p.V, C))


def _bulk_readable(x, rows: int) -> bool:
    """Whether the contiguous x, viewed as [rows, D], may be a kd.bulk_copy source (16-byte
    aligned: the launch's own check, kerneldsl.launch_checks)."""
    try:
        check_bulk_source(x.reshape((rows, x.shape[-1])), "chunk_gated_delta_rule", "input")
    except LaunchError:
        return False
    return True


def _padded(rt, x, T: int, Tp: int):
    """x [B, H, T, D] (contiguous) as [B, H, Tp, D] in new memory, zeros past T."""
    B, H, _, D = x.shape
    dst = rt.empty((B, H, Tp, D), x.dtype)
    n = dst.size
    pad_tokens[-(-n // PAD_UNITS), PAD_UNITS](x, dst, T, Tp, D, n)
    return dst


def _outputs(p: Problem) -> tuple:
    """Empty output [B, H, T, V] (query dtype) and final state [B, H, K, V] (F32)."""
    rt = p.runtime
    return rt.empty((p.B, p.H, p.T, p.V), p.q.dtype), rt.empty((p.B, p.H, p.K, p.V), kd.f32)
