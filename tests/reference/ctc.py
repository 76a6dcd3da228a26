"""float64 numpy model of rudnn.ctc's recursions (SPEC §10), written from the CTC formulas:
the extended label sequence (blanks around and between the labels), the log-space alpha
and beta (both including the emission at t), -inf outside each sample's range."""
from __future__ import annotations

import numpy as np


def extended(labels, blank: int) -> np.ndarray:
    """l' = blank, l1, blank, l2, ..., blank (2S + 1 states)."""
    ext = np.full(2 * len(labels) + 1, blank, np.int64)
    ext[1::2] = labels
    return ext


def _shift(a, k):
    """a moved k places right (k > 0) or left (k < 0), -inf where nothing comes in."""
    out = np.full_like(a, -np.inf)
    if k > 0:
        out[k:] = a[:len(a) - k]
    else:
        out[:len(a) + k] = a[-k:]
    return out


def _lse(*xs):
    with np.errstate(invalid="ignore"):
        return np.logaddexp.reduce(np.stack(xs), axis=0)


def alpha_beta(log_probs, labels_per_sample, input_lengths, blank: int, states: int):
    """(alpha, beta, nll): float64 [T, N, states] and [N] for log_probs [T, N, C]."""
    lp = np.asarray(log_probs, np.float64)
    T, N, _ = lp.shape
    alpha = np.full((T, N, states), -np.inf)
    beta = np.full((T, N, states), -np.inf)
    nll = np.zeros(N)
    for n in range(N):
        ext = extended(labels_per_sample[n], blank)
        L, tn = len(ext), int(input_lengths[n])
        if tn == 0:
            nll[n] = 0.0 if L == 1 else np.inf
            continue
        e = lp[:tn, n, ext]                          # emissions [tn, L]
        skip = np.zeros(L, bool)                     # s may come from s - 2
        skip[2:] = (ext[2:] != blank) & (ext[2:] != ext[:-2])
        a = np.full(L, -np.inf)
        a[:2] = e[0, :2]
        alpha[0, n, :L] = a
        for t in range(1, tn):
            a = _lse(a, _shift(a, 1), np.where(skip, _shift(a, 2), -np.inf)) + e[t]
            alpha[t, n, :L] = a
        nll[n] = -_lse(a[-1], a[-2] if L > 1 else -np.inf)
        b = np.full(L, -np.inf)
        b[-2:] = e[tn - 1, -2:]
        if L == 1:
            b[0] = e[tn - 1, 0]
        beta[tn - 1, n, :L] = b
        skip_next = np.zeros(L, bool)                # s may go to s + 2
        skip_next[:-2] = skip[2:]
        for t in range(tn - 2, -1, -1):
            b = _lse(b, _shift(b, -1), np.where(skip_next, _shift(b, -2), -np.inf)) + e[t]
            beta[t, n, :L] = b
    return alpha, beta, nll
