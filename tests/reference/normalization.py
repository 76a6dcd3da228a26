"""float64 numpy models of rudnn.normalization (SPEC §1), written from the formulas.
Inputs are host arrays (any float dtype); everything is computed in float64."""
from __future__ import annotations

import numpy as np


def _f64(a):
    return np.asarray(a).astype(np.float64)


def layer_norm(x, gamma, beta=None, eps=1e-5):
    """(y, mean, rstd) with the population variance."""
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        mean = x.mean(-1)
        var = ((x - mean[..., None]) ** 2).mean(-1)
        rstd = 1.0 / np.sqrt(var + eps)
        y = (x - mean[..., None]) * rstd[..., None] * _f64(gamma)
        if beta is not None:
            y = y + _f64(beta)
    return y, mean, rstd


def rms_norm(x, gamma, eps=1e-6):
    """(y, rstd) with rstd = 1/sqrt(mean(x²) + eps)."""
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        rstd = 1.0 / np.sqrt((x * x).mean(-1) + eps)
        y = x * rstd[..., None] * _f64(gamma)
    return y, rstd


def softmax(x):
    """exp(x - max) / Σ exp(x - max); NaN/inf follow from the arithmetic itself."""
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def layer_norm_backward(x, gamma, grad, mean, rstd):
    """(dx, dgamma, dbeta) from the forward statistics."""
    x, g = _f64(x), _f64(grad)
    rstd = _f64(rstd)[..., None]
    xhat = (x - _f64(mean)[..., None]) * rstd
    gg = g * _f64(gamma)
    dx = rstd * (gg - gg.mean(-1, keepdims=True) - xhat * (gg * xhat).mean(-1, keepdims=True))
    lead = tuple(range(x.ndim - 1))
    return dx, (g * xhat).sum(lead), g.sum(lead)


def rms_norm_backward(x, gamma, grad, rstd):
    """(dx, dgamma) from the forward rstd."""
    x, g = _f64(x), _f64(grad)
    rstd = _f64(rstd)[..., None]
    xhat = x * rstd
    gg = g * _f64(gamma)
    dx = rstd * (gg - xhat * (gg * xhat).mean(-1, keepdims=True))
    return dx, (g * xhat).sum(tuple(range(x.ndim - 1)))
