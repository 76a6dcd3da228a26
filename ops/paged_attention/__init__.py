"""rudnn.paged_attention: attention over a KV cache kept in fixed-size pages (SPEC §4).

    host = HostPlan(page_size, pages, tables, lengths, sequence_ids, positions)
    plan = DevicePlan.upload(host, like=q)
    out = plan.attention(q, k, v, scale, causal)                 # [queries, Hq, Dv]
    out = plan.mla(q, qp, latent, kp, scale, causal)             # [queries, H, R]
    k, v = plan.append(new_k, new_v, k_cache, v_cache)           # in place

Query rows of prefill and decode mix in one call: row r attends to the tokens of sequence
sequence_ids[r] (all of them, or causally those up to its absolute position), read straight
from the physical pages in one online-softmax pass in F32 (on the matrix primitive,
decode_mma.py, mla_roles.py, mla_group.py and mla_mma.py, the probabilities are rounded to the input
dtype for P·V, as in FlashAttention; products accumulate in F32). Long rows split over a
`SplitWorkspace` (flash-decoding) and merge in F32.
"""
from __future__ import annotations

from .device_plan import DevicePlan
from .host_plan import HostPlan
from .problem import PagedAttentionError
from .workspace import SplitWorkspace

__all__ = ["HostPlan", "DevicePlan", "SplitWorkspace", "PagedAttentionError"]
