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
def dot8(qs, k, rows, kd3, D):
    """The 8 dot products q·k[row] for this unit's query, held in shared memory as
    qs[d * U + t] (f32); k elements are read at rows[n] + d * kd3 and widened to f32."""
    U = kd.cube_units()
    k0, k1, k2, k3, k4, k5, k6, k7 = rows
    s0 = kd.f32(0)
    s1 = kd.f32(0)
    s2 = kd.f32(0)
    s3 = kd.f32(0)
    s4 = kd.f32(0)
    s5 = kd.f32(0)
    s6 = kd.f32(0)
    s7 = kd.f32(0)
    DT = D - D % DC
    for dc in range(0, DT, DC):
        for dd in kd.unroll(DC):
            qd = qs[(dc + dd) * U + kd.unit_pos_x()]
            e = (dc + dd) * kd3
            s0 = kd.fma(kd.f32(k[k0 + e]), qd, s0)
            s1 = kd.fma(kd.f32(k[k1 + e]), qd, s1)
            s2 = kd.fma(kd.f32(k[k2 + e]), qd, s2)
            s3 = kd.fma(kd.f32(k[k3 + e]), qd, s3)
            s4 = kd.fma(kd.f32(k[k4 + e]), qd, s4)
            s5 = kd.fma(kd.f32(k[k5 + e]), qd, s5)
            s6 = kd.fma(kd.f32(k[k6 + e]), qd, s6)
            s7 = kd.fma(kd.f32(k[k7 + e]), qd, s7)
    for dd in kd.unroll(D % DC):
        qd = qs[(DT + dd) * U + kd.unit_pos_x()]
        e = (DT + dd) * kd3
        s0 = kd.fma(kd.f32(k[k0 + e]), qd, s0)
        s1 = kd.fma(kd.f32(k[k1 + e]), qd, s1)
        s2 = kd.fma(kd.f32(k[k2 + e]), qd, s2)
        s3 = kd.fma(kd.f32(k[k3 + e]), qd, s3)
        s4 = kd.fma(kd.f32(k[k4 + e]), qd, s4)
        s5 = kd.fma(kd.f32(k[k5 + e]), qd, s5)
        s6 = kd.fma(kd.f32(k[k6 + e]), qd, s6)
        s7 = kd.fma(kd.f32(k[k7 + e]), qd, s7)
    return (s0, s1, s2, s3, s4, s5, s6, s7)


@kd.func
def load_query(qs, q, row, qst, scale, D):
    """Copy this unit's query row (elements at row + d * qst) into qs[d * U + t], scaled, in f32."""
    U = kd.cube_units()
    for d in range(D):
        qs[d * U + kd.unit_pos_x()] = kd.f32(q[row + d * qst]) * scale
