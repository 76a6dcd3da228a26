"""Float64 numpy model of SPEC §5 attention: scale, softcap, mask (True = hidden), causal
(bottom-right aligned), bias, softmax over keys; a fully hidden row gives zeros."""
from __future__ import annotations

import numpy as np


def attention(q, k, v, mask=None, bias=None, scale=None, softcap=None, causal=False) -> np.ndarray:
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    k = np.repeat(k, group, axis=1)  # query head h reads KV head h // group
    v = np.repeat(v, group, axis=1)
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    a = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap is not None:
        a = softcap * np.tanh(a / softcap)
    hidden = np.zeros((Sq, Skv), bool)
    if causal:
        i = np.arange(Sq)[:, None]
        j = np.arange(Skv)[None, :]
        hidden = j > i + (Skv - Sq)
    hidden = np.broadcast_to(hidden, a.shape)
    if mask is not None:
        hidden = hidden | np.broadcast_to(np.asarray(mask, bool), a.shape)
    a = np.where(hidden, -np.inf, a)
    if bias is not None:
        a = a + np.asarray(bias, np.float64)
    m = a.max(axis=-1, keepdims=True) if Skv else np.zeros(a.shape[:-1] + (1,))
    m = np.where(np.isneginf(m), 0.0, m)
    with np.errstate(invalid="ignore"):
        p = np.exp(a - m)
    s = p.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(s > 0, p / np.where(s > 0, s, 1.0), 0.0)
    return np.einsum("bhij,bhjd->bhid", p, v)
