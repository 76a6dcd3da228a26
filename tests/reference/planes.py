"""numpy models of plane operations: units are grouped in flat order into planes of
`plane` lanes; the last plane of a cube may be partial."""
from __future__ import annotations

import numpy as np


def planes_of(values: np.ndarray, plane: int):
    """Yield (start, stop) of each plane within one cube of len(values) units."""
    n = len(values)
    for s in range(0, n, plane):
        yield s, min(n, s + plane)


def plane_reduce(values, plane, fn):
    out = np.empty_like(values)
    for s, e in planes_of(values, plane):
        out[s:e] = fn(values[s:e])
    return out


def plane_scan(values, plane, inclusive):
    out = np.empty_like(values)
    for s, e in planes_of(values, plane):
        c = np.cumsum(values[s:e], dtype=values.dtype)
        out[s:e] = c if inclusive else np.concatenate([[0], c[:-1]]).astype(values.dtype)
    return out


def plane_shuffle(values, src_lanes, plane):
    out = np.empty_like(values)
    for s, e in planes_of(values, plane):
        for u in range(s, e):
            src = int(src_lanes[u]) % plane
            out[u] = values[s + src] if s + src < e else values[u]
    return out


def plane_shuffle_xor(values, mask, plane):
    out = np.empty_like(values)
    for s, e in planes_of(values, plane):
        for u in range(s, e):
            src = (u - s) ^ mask
            out[u] = values[s + src] if s + src < e else values[u]
    return out


def plane_ballot(pred, plane):
    out = np.zeros(len(pred), np.uint32)
    for s, e in planes_of(pred, plane):
        bits = sum(int(bool(p)) << i for i, p in enumerate(pred[s:e]))
        out[s:e] = bits
    return out
