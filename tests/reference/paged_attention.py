"""Float64 numpy model of SPEC §4 paged attention: each query row gathers its sequence's
visible tokens from the pages named by its table (token t at page tables[s][t // page_size],
slot t % page_size), then softmax(scale·q·kᵀ)·v per head; no visible token gives zeros.
MLA is the same with keys [latent | kp] and values the latent. Plans are plain dicts here
(page_size, tables, lengths, sequence_ids, positions), independent of rudnn's HostPlan."""
from __future__ import annotations

import numpy as np


def visible_rows(plan: dict, r: int, causal: bool) -> list:
    """Physical (page, slot) of every token query row r sees, in logical order."""
    s, p = plan["sequence_ids"][r], plan["positions"][r]
    n = plan["lengths"][s]
    if causal:
        n = min(n, p + 1)
    ps = plan["page_size"]
    return [(plan["tables"][s][t // ps], t % ps) for t in range(n)]


def paged_attention(plan: dict, q, k, v, scale: float, causal: bool) -> np.ndarray:
    """q [queries, Hq, D], k [pages, page_size, Hkv, D], v [pages, page_size, Hkv, Dv] -> [queries, Hq, Dv]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    Q, Hq, _ = q.shape
    Hkv, Dv = k.shape[2], v.shape[3]
    out = np.zeros((Q, Hq, Dv))
    for r in range(Q):
        toks = visible_rows(plan, r, causal)
        if not toks:
            continue
        pages = [t[0] for t in toks]
        slots = [t[1] for t in toks]
        for h in range(Hq):
            hk = h // (Hq // Hkv)
            keys = k[pages, slots, hk]
            a = scale * keys @ q[r, h]
            w = np.exp(a - a.max())
            out[r, h] = (w / w.sum()) @ v[pages, slots, hk]
    return out


def paged_mla(plan: dict, q, qp, latent, kp, scale: float, causal: bool) -> np.ndarray:
    """q [queries, H, R], qp [queries, H, P], latent [pages, ps, 1, R], kp [pages, ps, 1, P] -> [queries, H, R]."""
    qk = np.concatenate([np.asarray(q, np.float64), np.asarray(qp, np.float64)], axis=2)
    kk = np.concatenate([np.asarray(latent, np.float64), np.asarray(kp, np.float64)], axis=3)
    return paged_attention(plan, qk, kk, latent, scale, causal)


def append(plan: dict, new, cache) -> np.ndarray:
    """A copy of `cache` with row r of `new` at its slot (positions[r] % page_size of page
    tables[s][positions[r] // page_size])."""
    out = np.array(cache, copy=True)
    ps = plan["page_size"]
    for r, (s, p) in enumerate(zip(plan["sequence_ids"], plan["positions"])):
        out[plan["tables"][s][p // ps], p % ps] = new[r]
    return out
