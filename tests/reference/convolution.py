"""numpy (float64) models of rudnn.convolution: forward, data and weight gradients, any rank
(NCHW), written as explicit loops over the kernel taps (each tap one shifted, strided slice of
the zero-padded input), independent of the kernels' index arithmetic."""
from __future__ import annotations

import itertools

import numpy as np


def _geometry(S, R, stride, padding, dilation):
    n = len(S)
    as_t = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * n  # noqa: E731
    st, pd, dl = as_t(stride), as_t(padding), as_t(dilation)
    O = tuple((s + 2 * p - d * (r - 1) - 1) // t + 1 for s, r, t, p, d in zip(S, R, st, pd, dl))
    return st, pd, dl, O


def _tap_slices(k, st, pd, dl, O):
    """The slice of the padded input that tap k reads for every output position."""
    return tuple(slice(ki * d, ki * d + (o - 1) * t + 1, t) for ki, d, t, o in zip(k, dl, st, O))


def forward(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """y [B, K, *O] of x [B, C, *S] and w [K, C/groups, *R], float64."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    B, C, *S = x.shape
    K, Cg, *R = w.shape
    st, pd, dl, O = _geometry(S, R, stride, padding, dilation)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pd])
    Kg = K // groups
    y = np.zeros((B, K, *O))
    for g in range(groups):
        xg = xp[:, g * Cg:(g + 1) * Cg]
        wg = w[g * Kg:(g + 1) * Kg]
        for k in itertools.product(*[range(r) for r in R]):
            patch = xg[(slice(None), slice(None)) + _tap_slices(k, st, pd, dl, O)]   # [B, Cg, *O]
            y[:, g * Kg:(g + 1) * Kg] += np.einsum("bc...,kc->bk...", patch, wg[(slice(None), slice(None)) + k])
    if bias is not None:
        y += np.asarray(bias, np.float64).reshape((1, K) + (1,) * len(S))
    return y


def data_backward(dy, w, in_shape, stride=1, padding=0, dilation=1, groups=1):
    """dx [in_shape]: the adjoint of `forward` in x (each tap's products added back to the slice it read)."""
    dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    B, C, *S = in_shape
    K, Cg, *R = w.shape
    st, pd, dl, O = _geometry(S, R, stride, padding, dilation)
    Kg = K // groups
    dxp = np.zeros((B, C, *[s + 2 * p for s, p in zip(S, pd)]))
    for g in range(groups):
        for k in itertools.product(*[range(r) for r in R]):
            sl = (slice(None), slice(g * Cg, (g + 1) * Cg)) + _tap_slices(k, st, pd, dl, O)
            dxp[sl] += np.einsum("bk...,kc->bc...", dy[:, g * Kg:(g + 1) * Kg],
                                 w[(slice(g * Kg, (g + 1) * Kg), slice(None)) + k])
    return dxp[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(pd, S))]


def weight_backward(x, dy, weight_shape, stride=1, padding=0, dilation=1, groups=1):
    """dw [weight_shape]: the adjoint of `forward` in w."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    B, C, *S = x.shape
    K, Cg, *R = weight_shape
    st, pd, dl, O = _geometry(S, R, stride, padding, dilation)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pd])
    Kg = K // groups
    dw = np.zeros(weight_shape)
    for g in range(groups):
        for k in itertools.product(*[range(r) for r in R]):
            patch = xp[(slice(None), slice(g * Cg, (g + 1) * Cg)) + _tap_slices(k, st, pd, dl, O)]
            axes = [0, *range(2, 2 + len(S))]
            dw[(slice(g * Kg, (g + 1) * Kg), slice(None)) + k] = np.tensordot(dy[:, g * Kg:(g + 1) * Kg], patch,
                                                                              axes=(axes, axes))
    return dw
