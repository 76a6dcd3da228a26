"""Device functions shared by the plain-arithmetic kernels (FlashUnit and Fallback), which
give each unit one query row: 8 keys at a time, head dimensions in unrolled chunks.

Unit positions are read inline (`kd.unit_pos_x()` inside the index), never passed in or
stored in a local inside a loop: only then does the CPU back end see the index as affine
in the unit and emit contiguous vector accesses instead of gathers."""
from __future__ import annotations

import kerneldsl as kd

DC = 16  # head-dimension chunk unrolled inside a (hoisted) chunk loop: compile time stays flat in D


@kd.func
def key_rows(base, j0, last, stride):
    """Element offsets of the 8 key rows j0..j0+7, clamped to the last row (those past the
    end are hidden by the caller)."""
    return (base + kd.i64(kd.min(j0, last)) * stride, base + kd.i64(kd.min(j0 + 1, last)) * stride,
            base + kd.i64(kd.min(j0 + 2, last)) * stride, base + kd.i64(kd.min(j0 + 3, last)) * stride,
            base + kd.i64(kd.min(j0 + 4, last)) * stride, base + kd.i64(kd.min(j0 + 5, last)) * stride,
            base + kd.i64(kd.min(j0 + 6, last)) * stride, base + kd.i64(kd.min(j0 + 7, last)) * stride)


@kd.func
def fma8(acc, k, rows, e, qd):
    """(acc[n] + k[rows[n] + e] · qd for the 8 key rows), k widened to f32."""
    out = ()
    for n in kd.unroll(8):
        out = out + (kd.fma(kd.f32(k[rows[n] + e]), qd, acc[n]),)
    return out


@kd.func
def dot8(qs, k, rows, kd3, D):
    """The 8 dot products q·k[row] for this unit's query, held in shared memory as
    qs[d * U + t] (f32); k elements are read at rows[n] + d * kd3 and widened to f32.
    D is walked in unrolled chunks of DC, then the remainder."""
    U = kd.cube_units()
    acc = (kd.f32(0),) * 8
    DT = D - D % DC
    for dc in range(0, DT, DC):
        for dd in kd.unroll(DC):
            acc = fma8(acc, k, rows, (dc + dd) * kd3, qs[(dc + dd) * U + kd.unit_pos_x()])
    for dd in kd.unroll(D % DC):
        acc = fma8(acc, k, rows, (DT + dd) * kd3, qs[(DT + dd) * U + kd.unit_pos_x()])
    return acc


@kd.func
def load_query(qs, q, row, qst, scale, D):
    """Copy this unit's query row (elements at row + d * qst) into qs[d * U + t], scaled, in f32."""
    U = kd.cube_units()
    for d in range(D):
        qs[d * U + kd.unit_pos_x()] = kd.f32(q[row + d * qst]) * scale
