"""float64 numpy model of rudnn.grid_sample's forward pass (SPEC §9), written from the
formulas of torch.nn.functional.grid_sample for 2-D inputs: unnormalisation, padding
modes (border clamping, reflection), bilinear, nearest (ties to even) and bicubic taps."""
from __future__ import annotations

import math

import numpy as np

A = -0.75


def _unnormalize(c, size, align):
    return (c + 1) / 2 * (size - 1) if align else ((c + 1) * size - 1) / 2


def _reflect(x, twice_low, twice_high):
    if twice_low == twice_high:
        return 0.0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    x = abs(x - low)
    extra, flips = math.fmod(x, span), math.floor(x / span)
    return extra + low if flips % 2 == 0 else span - extra + low


def _pad(x, size, pad, align):
    if pad == "Reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align else _reflect(x, -1, 2 * size - 1)
    if pad != "Zeros":
        x = min(max(x, 0.0), size - 1.0)
    return x


def _cubic(t):
    t = abs(t)
    if t <= 1:
        return ((A + 2) * t - (A + 3)) * t * t + 1
    return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A if t < 2 else 0.0


def _taps(c, size, mode, pad, align):
    """[(index, weight)] along one axis; indices outside the input are dropped (read 0)."""
    u = _unnormalize(c, size, align)
    if mode == "Bicubic":
        f = math.floor(u)
        out = [(int(_pad(f + k, size, pad, align)), _cubic(u - (f + k))) for k in range(-1, 3)]
    elif mode == "Nearest":
        out = [(int(np.rint(_pad(u, size, pad, align))), 1.0)]
    else:
        x = _pad(u, size, pad, align)
        f = math.floor(x)
        out = [(f, 1 - (x - f)), (f + 1, x - f)]
    return [(i, w) for i, w in out if 0 <= i < size]


def grid_sample(x, grid, mode="Bilinear", pad="Zeros", align=False):
    """x [N, C, H, W] sampled at grid [N, Ho, Wo, 2] -> [N, C, Ho, Wo]."""
    x = np.asarray(x, np.float64)
    n_, c_, h, w = x.shape
    out = np.zeros((n_, c_, *grid.shape[1:3]))
    for n in range(n_):
        for i in range(grid.shape[1]):
            for j in range(grid.shape[2]):
                gx, gy = (float(v) for v in grid[n, i, j])
                for iy, wy in _taps(gy, h, mode, pad, align):
                    for ix, wx in _taps(gx, w, mode, pad, align):
                        out[n, :, i, j] += wy * wx * x[n, :, iy, ix]
    return out
