"""float64 numpy models of rudnn.pooling (SPEC §7), written from the definitions: each
output's window listed position by position, vectorised over planes. Arrays are
[planes, *S] (any float dtype; computed in float64); geometry is per spatial axis."""
from __future__ import annotations

import itertools

import numpy as np


def out_size(size, k, s, p, d, ceil):
    """torch's output size, with the ceil-mode rule (a last window starts inside input or left padding)."""
    span = size + 2 * p - d * (k - 1) - 1
    n = -(-span // s) + 1 if ceil else span // s + 1
    if ceil and (n - 1) * s >= size + p:
        n -= 1
    return n


def _windows(sizes, k, s, p, d, ceil):
    """For each output position (scan order): its in-input taps and its padded size."""
    outs = [out_size(sizes[i], k[i], s[i], p[i], d[i], ceil) for i in range(len(sizes))]
    for o in itertools.product(*[range(n) for n in outs]):
        axes, padded = [], 1
        for i, oi in enumerate(o):
            start = oi * s[i] - p[i]
            axes.append([start + t * d[i] for t in range(k[i]) if 0 <= start + t * d[i] < sizes[i]])
            padded *= min(start + k[i], sizes[i] + p[i]) - start
        yield o, list(itertools.product(*axes)), padded


def _adaptive_windows(sizes, outs):
    for o in itertools.product(*[range(n) for n in outs]):
        axes = [range(oi * sizes[i] // outs[i], -(-(oi + 1) * sizes[i] // outs[i])) for i, oi in enumerate(o)]
        yield o, list(itertools.product(*axes)), None


def _outs(sizes, k, s, p, d, ceil):
    return [out_size(sizes[i], k[i], s[i], p[i], d[i], ceil) for i in range(len(sizes))]


def _flat(pos, sizes):
    return int(np.ravel_multi_index(pos, sizes))


def _max(x, windows, outs):
    x = np.asarray(x, np.float64)
    planes, sizes = x.shape[0], x.shape[1:]
    out = np.empty((planes, *outs))
    idx = np.empty((planes, *outs), np.int64)
    for o, taps, _ in windows:
        vals = np.stack([x[(slice(None), *t)] for t in taps], 1)          # [planes, taps]
        nan = np.isnan(vals)
        last_nan = vals.shape[1] - 1 - np.argmax(nan[:, ::-1], 1)
        pick = np.where(nan.any(1), last_nan, np.argmax(np.where(nan, -np.inf, vals), 1))
        out[(slice(None), *o)] = vals[np.arange(planes), pick]
        idx[(slice(None), *o)] = [_flat(taps[j], sizes) for j in pick]
    return out, idx


def max_pool(x, k, s, p, d, ceil):
    """(out, indices): NaN wins (the last NaN's index), else the first maximum in scan order."""
    sizes = x.shape[1:]
    return _max(x, _windows(sizes, k, s, p, d, ceil), _outs(sizes, k, s, p, d, ceil))


def adaptive_max_pool(x, outs):
    return _max(x, _adaptive_windows(x.shape[1:], outs), outs)


def _divisor(taps, padded, include_pad, divisor):
    return divisor if divisor else padded if include_pad and padded is not None else len(taps)


def avg_pool(x, k, s, p, ceil, include_pad=True, divisor=None):
    x = np.asarray(x, np.float64)
    sizes = x.shape[1:]
    ones = (1,) * len(sizes)
    outs = _outs(sizes, k, s, p, ones, ceil)
    out = np.empty((x.shape[0], *outs))
    for o, taps, padded in _windows(sizes, k, s, p, ones, ceil):
        total = sum(x[(slice(None), *t)] for t in taps)
        out[(slice(None), *o)] = total / _divisor(taps, padded, include_pad, divisor)
    return out


def adaptive_avg_pool(x, outs):
    x = np.asarray(x, np.float64)
    out = np.empty((x.shape[0], *outs))
    for o, taps, _ in _adaptive_windows(x.shape[1:], outs):
        out[(slice(None), *o)] = sum(x[(slice(None), *t)] for t in taps) / len(taps)
    return out


def max_backward(x_shape, grad, indices):
    """Scatter each output's gradient onto the input element its index names."""
    grad = np.asarray(grad, np.float64).reshape(x_shape[0], -1)
    dx = np.zeros((x_shape[0], int(np.prod(x_shape[1:]))))
    for pl in range(x_shape[0]):
        np.add.at(dx[pl], np.asarray(indices).reshape(x_shape[0], -1)[pl], grad[pl])
    return dx.reshape(x_shape)


def avg_backward(x_shape, grad, windows_of):
    """Scatter each output's gradient, divided by its divisor, over its window's taps."""
    grad = np.asarray(grad, np.float64)
    dx = np.zeros(x_shape)
    for o, taps, div in windows_of:
        for t in taps:
            dx[(slice(None), *t)] += grad[(slice(None), *o)] / div
    return dx


def avg_pool_backward(x_shape, grad, k, s, p, ceil, include_pad=True, divisor=None):
    ones = (1,) * (len(x_shape) - 1)
    wins = [(o, taps, _divisor(taps, padded, include_pad, divisor))
            for o, taps, padded in _windows(x_shape[1:], k, s, p, ones, ceil)]
    return avg_backward(x_shape, grad, wins)


def adaptive_avg_pool_backward(x_shape, grad, outs):
    wins = [(o, taps, len(taps)) for o, taps, _ in _adaptive_windows(x_shape[1:], outs)]
    return avg_backward(x_shape, grad, wins)
