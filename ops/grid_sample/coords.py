"""Grid coordinates to pixel taps, per spatial axis (@kd.func, inlined into the kernels):
torch's unnormalisation, border clamping and reflection, each with its derivative, and
the taps of each mode as (index, weight, d weight / d coordinate, inside) tuples.

Indices are clamped into the input so every load is safe; `inside` says whether the tap
reads the input (zeros padding reads 0 outside). Coordinates that are not finite, or
beyond ±2^30, become −100 (outside), as torch's CUDA kernels do."""
from __future__ import annotations

import kerneldsl as kd

from ..interpolation.taps import cubic_weights

ZEROS, BORDER, REFLECTION = 0, 1, 2  # run-time padding mode codes (GridSamplePaddingMode order)
FAR = 1073741824.0  # 2^30: coordinates beyond it cannot address a pixel
CUBIC_A = -0.75


@kd.func
def unnormalize(c, size, align):
    """(pixel coordinate, its derivative) of grid coordinate c in [−1, 1]."""
    span = kd.f32(size - align)
    x = kd.select(align != 0, (c + 1.0) * 0.5 * span, ((c + 1.0) * span - 1.0) * 0.5)
    return (x, span * 0.5)


@kd.func
def clip(x, size):
    """(x clamped to [0, size − 1], derivative 1 inside and 0 where clamped)."""
    lim = kd.f32(size - 1)
    inside = x > 0.0 and x < lim
    return (kd.min(kd.max(x, 0.0), lim), kd.select(inside, 1.0, 0.0))


@kd.func
def reflect(x, twice_low, twice_high):
    """(x reflected into [low, high], derivative ±1), the span given as twice its ends."""
    low = kd.f32(twice_low) * 0.5
    span = kd.f32(twice_high - twice_low) * 0.5
    t = x - low
    sign = kd.select(t < 0.0, -1.0, 1.0)
    t = kd.abs(t)
    extra = t % kd.select(span > 0.0, span, 1.0)
    flips = kd.floor(t / kd.select(span > 0.0, span, 1.0))
    even = flips % 2.0 == 0.0
    r = kd.select(even, extra + low, span - extra + low)
    g = kd.select(even, sign, -sign)
    return (kd.select(span > 0.0, r, 0.0), kd.select(span > 0.0, g, 0.0))


@kd.func
def pad(x, size, pad_mode, align):
    """(x after the padding mode, derivative), then made safe (−100 if not finite or far).
    pad_mode and align are run-time values (one kernel serves every padding mode)."""
    g = kd.f32(1.0)
    if pad_mode == REFLECTION:
        x, g = reflect(x, align - 1, 2 * size - 1 - align)
    if pad_mode != ZEROS:
        x, g2 = clip(x, size)
        g = g * g2
    safe = kd.abs(x) < FAR
    return (kd.select(safe, x, -100.0), g)


@kd.func
def tap(i, size):
    """(i clamped into the input, whether i is inside)."""
    return (kd.clamp(i, 0, size - 1), i >= 0 and i < size)


@kd.func
def cubic_slopes(t):
    """d/dt of the four cubic weights of fraction t (taps floor − 1 … floor + 2)."""
    a = CUBIC_A
    s0 = t + 1.0
    s3 = 2.0 - t
    u = 1.0 - t
    return ((3.0 * a * s0 - 10.0 * a) * s0 + 8.0 * a,
            (3.0 * (a + 2.0) * t - 2.0 * (a + 3.0)) * t,
            -(3.0 * (a + 2.0) * u - 2.0 * (a + 3.0)) * u,
            -((3.0 * a * s3 - 10.0 * a) * s3 + 8.0 * a))


@kd.func
def round_half_even(x):
    """torch's nearbyint: the nearest integer, ties to even."""
    f = kd.floor(x)
    d = x - f
    odd = f % 2.0 != 0.0
    return f + kd.select(d > 0.5 or (d == 0.5 and odd), 1.0, 0.0)


@kd.func
def axis_taps(c, size, MODE, pad_mode, align):
    """The taps of grid coordinate c along an axis of `size` pixels: T indices, T weights,
    T weight slopes, T inside flags, then d(pixel coordinate)/dc: a tuple of 4T + 1."""
    if MODE == "Off":
        taps = (0, kd.f32(1.0), kd.f32(0.0), True, kd.f32(0.0))
    elif MODE == "Bilinear":
        u, du = unnormalize(c, size, align)
        x, dp = pad(u, size, pad_mode, align)
        f = kd.floor(x)
        i = kd.i32(f)
        fx = x - f
        i0, in0 = tap(i, size)
        i1, in1 = tap(i + 1, size)
        taps = (i0, i1, 1.0 - fx, fx, kd.f32(-1.0), kd.f32(1.0), in0, in1, du * dp)
    elif MODE == "Nearest":
        u, du = unnormalize(c, size, align)
        x, dp = pad(u, size, pad_mode, align)
        i0, in0 = tap(kd.i32(round_half_even(x)), size)
        taps = (i0, kd.f32(1.0), kd.f32(0.0), in0, kd.f32(0.0))
    else:  # Bicubic: each tap's coordinate goes through the padding mode on its own
        u, du = unnormalize(c, size, align)
        u = kd.select(kd.abs(u) < FAR, u, -100.0)
        f = kd.floor(u)
        t = u - f
        idx = ()
        ins = ()
        for k in kd.unroll(4):
            p, dp = pad(f + (k - 1), size, pad_mode, align)
            i, inside = tap(kd.i32(p), size)
            idx = idx + (i,)
            ins = ins + (inside,)
        taps = idx + cubic_weights(t) + cubic_slopes(t) + ins + (du,)
    return taps
