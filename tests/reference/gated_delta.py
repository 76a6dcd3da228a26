"""Float64 numpy reference of the gated delta rule (SPEC §3): the recurrence, step by step."""
from __future__ import annotations

import numpy as np


def gated_delta(q, k, v, beta, g, s0, scale) -> tuple:
    """(output [B, H, T, V], final_state [B, H, K, V]) in float64, from the plain recurrence
    S ← e^g·S; δ = β·(v − Sᵀk); S ← S + k ⊗ δ; o = Sᵀ(scale·q)."""
    q, k, v, beta, g = (np.asarray(a, dtype=np.float64) for a in (q, k, v, beta, g))
    S = np.array(s0, dtype=np.float64, copy=True)
    B, H, T, _ = q.shape
    out = np.zeros((B, H, T, v.shape[3]))
    for t in range(T):
        S *= np.exp(g[:, :, t])[:, :, None, None]
        kt = k[:, :, t]
        delta = beta[:, :, t, None] * (v[:, :, t] - np.einsum("bhkv,bhk->bhv", S, kt))
        S += kt[:, :, :, None] * delta[:, :, None, :]
        out[:, :, t] = np.einsum("bhkv,bhk->bhv", S, scale * q[:, :, t])
    return out, S
