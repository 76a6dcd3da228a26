"""Per-axis sample taps of every interpolation mode (@kd.func, inlined into
resample.axis_table): where output index j of an axis reads the input, and with which weights.

A mode's taps along one axis are T (input index, weight) pairs; indices are always inside
the input (Bicubic replicates edges by clamping; Lanczos3 gives taps outside the input
weight 0 and normalises by the weights it keeps). resample.axis_table writes them to
per-axis tables that the forward kernel and its adjoint both read, so the backward pass is
the exact adjoint of the forward map."""
from __future__ import annotations

import math

import kerneldsl as kd

CUBIC_A = -0.75
TAPS = {"Off": 1, "Nearest": 1, "NearestExact": 1, "Linear": 2, "Bicubic": 4, "Lanczos3": 6}


@kd.func
def source_coordinate(j, scale, ALIGN, CLAMP):
    """torch's area_pixel_compute_source_index in F32: j·scale with aligned corners, else
    scale·(j + 0.5) − 0.5 (clamped at 0 for Linear)."""
    if ALIGN:
        x = scale * kd.f32(j)
    else:
        x = scale * (kd.f32(j) + 0.5) - 0.5
        if CLAMP:
            x = kd.max(x, 0.0)
    return x


@kd.func
def cubic_near(t):
    """Keys' cubic (a = −0.75) at distance t ≤ 1."""
    return ((CUBIC_A + 2.0) * t - (CUBIC_A + 3.0)) * t * t + 1.0


@kd.func
def cubic_far(t):
    """Keys' cubic at distance 1 < t < 2."""
    return ((CUBIC_A * t - 5.0 * CUBIC_A) * t + 8.0 * CUBIC_A) * t - 4.0 * CUBIC_A


@kd.func
def cubic_weights(t):
    """The four tap weights of fraction t (taps floor − 1 … floor + 2), as torch."""
    return (cubic_far(t + 1.0), cubic_near(t), cubic_near(1.0 - t), cubic_far(2.0 - t))


@kd.func
def sinc(d):
    """sin(πd)/(πd), 1 at 0."""
    a = d * math.pi
    return kd.select(d == 0.0, 1.0, kd.sin(a) / kd.select(d == 0.0, 1.0, a))


@kd.func
def axis_taps(j, size_in, size_out, scale, MODE, ALIGN):
    """The taps of output index j along one axis: a tuple of T input indices followed by
    their T F32 weights (T = TAPS[MODE]). "Off" is an axis the input lacks (size 1)."""
    if MODE == "Off":
        taps = (0, kd.f32(1.0))
    elif MODE == "Nearest":
        taps = (kd.i32(kd.i64(j) * size_in // size_out), kd.f32(1.0))
    elif MODE == "NearestExact":
        s = kd.i32((kd.i64(j) * 2 + 1) * size_in // (kd.i64(size_out) * 2))
        taps = (kd.min(s, size_in - 1), kd.f32(1.0))
    elif MODE == "Linear":
        # an axis of unchanged size is a copy, as torch's: both taps on input j, weights 1 and
        # 0, so a NaN or inf beside it stays out of output j
        same = size_out == size_in
        x = source_coordinate(j, scale, ALIGN, True)
        i0 = kd.select(same, kd.i32(j), kd.i32(x))
        lam = kd.select(same, kd.f32(0.0), kd.min(kd.max(x - kd.f32(i0), 0.0), 1.0))
        i1 = kd.select(same, i0, kd.select(i0 < size_in - 1, i0 + 1, i0))
        taps = (i0, i1, 1.0 - lam, lam)
    elif MODE == "Bicubic":
        x = source_coordinate(j, scale, ALIGN, False)
        f = kd.floor(x)
        w = cubic_weights(x - f)
        i = kd.i32(f)
        taps = ()
        for k in kd.unroll(4):
            taps = taps + (kd.clamp(i - 1 + k, 0, size_in - 1),)
        taps = taps + w
    else:  # Lanczos3
        x = source_coordinate(j, scale, ALIGN, False)
        f = kd.floor(x)
        i = kd.i32(f)
        idx = ()
        ws = ()
        total = kd.f32(0)
        for k in kd.unroll(6):
            d = x - (f + (k - 2))
            inside = i - 2 + k >= 0 and i - 2 + k < size_in and kd.abs(d) < 3.0
            w = kd.select(inside, sinc(d) * sinc(d * (1.0 / 3.0)), 0.0)
            total += w
            idx = idx + (kd.clamp(i - 2 + k, 0, size_in - 1),)
            ws = ws + (w,)
        inv = 1.0 / total
        taps = idx
        for k in kd.unroll(6):
            taps = taps + (ws[k] * inv,)
    return taps

