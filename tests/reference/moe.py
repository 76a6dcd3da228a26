"""numpy (float64) models of rudnn.moe: routing, dispatch, SwiGLU experts, combine."""
from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def softmax_route(logits, top_k: int, renormalize: bool):
    """(ids [T, k] int64, weights [T, k] f64): softmax top-k, ties to the lower id; rows with
    NaN, +inf or only -inf give ids 0..k-1 and NaN weights."""
    x = _f64(logits)
    T, E = x.shape
    ids = np.zeros((T, top_k), np.int64)
    w = np.zeros((T, top_k))
    for t in range(T):
        row = x[t]
        if np.isnan(row).any() or np.isposinf(row).any() or np.isneginf(row).all():
            ids[t] = np.arange(top_k)
            w[t] = np.nan
            continue
        p = np.exp(row - row.max())
        p /= p.sum()
        order = sorted(range(E), key=lambda e: (-p[e], e))[:top_k]
        ids[t] = order
        w[t] = p[order]
        if renormalize:
            w[t] /= w[t].sum()
    return ids, w


def sigmoid(x):
    x = _f64(x)
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))


def sigmoid_grouped_route(logits, bias, top_k, groups, selected_groups, group_top_two, renormalize, scale):
    """(ids, weights) of DeepSeek-V3 grouped routing: c = sigmoid + bias picks groups (best c,
    or the two best summed) then experts; weights are the sigmoids, renormalised, times scale.
    Ties go to the lower group / expert id; a NaN in c gives ids 0..k-1 and NaN weights."""
    p = sigmoid(logits)
    c = p + (_f64(bias)[None, :] if bias is not None else 0.0)
    T, E = p.shape
    size = E // groups
    ids = np.zeros((T, top_k), np.int64)
    w = np.zeros((T, top_k))
    for t in range(T):
        if np.isnan(c[t]).any():
            ids[t] = np.arange(top_k)
            w[t] = np.nan
            continue
        cg = c[t].reshape(groups, size)
        if group_top_two:
            top2 = np.sort(cg, axis=1)[:, -2:]
            score = top2.sum(1)
        else:
            score = cg.max(1)
        kept = sorted(range(groups), key=lambda g: (-score[g], g))[:selected_groups]
        cand = [e for e in range(E) if e // size in kept]
        order = sorted(cand, key=lambda e: (-c[t, e], e))[:top_k]
        ids[t] = order
        w[t] = p[t, order]
        if renormalize:
            w[t] /= w[t].sum()
        w[t] *= scale
    return ids, w


def expert_offsets(ids, experts: int) -> np.ndarray:
    counts = np.bincount(np.asarray(ids).reshape(-1), minlength=experts)
    return np.concatenate([[0], np.cumsum(counts)])


def dispatch(ids, x, experts: int):
    """(values, row_experts, offsets) with rows grouped by expert, tokens in order inside each."""
    ids = np.asarray(ids)
    T, k = ids.shape
    pairs = sorted(((int(ids[t, j]), t, j) for t in range(T) for j in range(k)))
    values = np.stack([np.asarray(x)[t] for _, t, _ in pairs]) if pairs else np.zeros((0, np.asarray(x).shape[1]))
    row_experts = np.array([e for e, _, _ in pairs], np.int64)
    return values, row_experts, expert_offsets(ids, experts)


def swiglu_expert(x, gate, up, down):
    """y = (silu(x·gateᵀ) * (x·upᵀ))·downᵀ for rows x [R, H] of one expert, float64."""
    g = _f64(x) @ _f64(gate).T
    u = _f64(x) @ _f64(up).T
    with np.errstate(over="ignore"):
        h = g / (1.0 + np.exp(-g)) * u
    return h @ _f64(down).T


def swiglu_rows(values, row_experts, gate, up, down):
    """The experts applied to dispatched rows."""
    out = np.zeros((len(values), np.asarray(down).shape[1]))
    for r, e in enumerate(row_experts):
        out[r] = swiglu_expert(np.asarray(values)[r:r + 1], gate[e], up[e], down[e])[0]
    return out


def moe_forward(x, ids, weights, gate, up, down):
    """out[t] = sum_j w[t, j] * expert_{ids[t, j]}(x[t]), float64."""
    x = _f64(x)
    ids = np.asarray(ids)
    w = _f64(weights)
    out = np.zeros((x.shape[0], np.asarray(down).shape[1]))
    for t in range(x.shape[0]):
        for j in np.argsort(ids[t], kind="stable"):
            e = ids[t, j]
            out[t] += w[t, j] * swiglu_expert(x[t:t + 1], gate[e], up[e], down[e])[0]
    return out
