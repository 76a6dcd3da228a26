"""float64 numpy models of rudnn.interpolation (SPEC §8), written from the formulas: each
mode is a per-axis [O, I] weight matrix; the forward map applies them axis by axis and the
backward map (the adjoint) applies their transposes."""
from __future__ import annotations

import math

import numpy as np

A = -0.75


def _cubic(t):
    t = abs(t)
    if t <= 1:
        return ((A + 2) * t - (A + 3)) * t * t + 1
    if t < 2:
        return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A
    return 0.0


def _sinc(d):
    return 1.0 if d == 0 else math.sin(math.pi * d) / (math.pi * d)


def _source(j, size_in, size_out, align):
    if align:
        return j * ((size_in - 1) / (size_out - 1) if size_out > 1 else 0.0)
    return (j + 0.5) * size_in / size_out - 0.5


def axis_matrix(mode: str, size_in: int, size_out: int, align: bool = False) -> np.ndarray:
    """The [size_out, size_in] weights of one axis for a mode named as InterpolateMode."""
    m = np.zeros((size_out, size_in))
    for j in range(size_out):
        if mode == "Nearest":
            m[j, j * size_in // size_out] = 1
        elif mode == "NearestExact":
            m[j, min((2 * j + 1) * size_in // (2 * size_out), size_in - 1)] = 1
        elif mode == "Linear":
            x = max(_source(j, size_in, size_out, align), 0.0)
            i0 = int(x)
            i1 = min(i0 + 1, size_in - 1)
            lam = x - i0
            m[j, i0] += 1 - lam
            m[j, i1] += lam
        elif mode == "Bicubic":
            x = _source(j, size_in, size_out, align)
            f = math.floor(x)
            for k in range(-1, 3):
                m[j, min(max(f + k, 0), size_in - 1)] += _cubic(x - (f + k))
        elif mode == "Lanczos3":
            x = _source(j, size_in, size_out, align)
            f = math.floor(x)
            taps = [(f + k, x - (f + k)) for k in range(-2, 4) if 0 <= f + k < size_in and abs(x - (f + k)) < 3]
            w = np.array([_sinc(d) * _sinc(d / 3) for _, d in taps])
            for (i, _), wi in zip(taps, w / w.sum()):
                m[j, i] += wi
        else:
            raise ValueError(mode)
    return m


def _apply(x, mats):
    y = np.asarray(x, np.float64)
    for k, m in enumerate(mats):
        y = np.moveaxis(np.tensordot(m, np.moveaxis(y, 2 + k, 0), axes=(1, 0)), 0, 2 + k)
    return y


def interpolate(x, out_size, mode: str, align: bool = False):
    """x [N, C, *S] resampled to [N, C, *out_size]."""
    mats = [axis_matrix(mode, i, o, align) for i, o in zip(x.shape[2:], out_size)]
    return _apply(x, mats)


def interpolate_backward(x_shape, g, mode: str, align: bool = False):
    """The adjoint: the gradient w.r.t. an input of shape x_shape given the output's g."""
    mats = [axis_matrix(mode, i, o, align).T for i, o in zip(x_shape[2:], g.shape[2:])]
    return _apply(g, mats)
