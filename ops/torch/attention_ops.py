"""rudnn.torch's attention ops: attention (SPEC §5) and paged attention (SPEC §4). Neither
family has a backward kernel, so these ops have no autograd (a backward raises).

attention: AttentionModuleOptions becomes scale / softcap / is_causal; the strategy is its
member name, and `tiling` [num_planes, seq_q, seq_kv] (empty: the default) picks a
BlackboxAcceleratedStrategy for "FlashBlackboxAccelerated".

Paged attention: the HostPlan becomes four int tensors: `tables` [sequences, width] (row
s lists sequence s's pages; entries past ceil(lengths[s] / page_size) are ignored, any
value), `lengths` [sequences], `sequence_ids` and `positions` [queries]; page_size and
pages are read from the cache's shape. Their values are read on the host (a sync for
CUDA tensors) and the uploaded DevicePlan is cached by content. `splits` 0 lets the
family choose; 2-32 runs the split path on a SplitWorkspace of that many splits."""
from __future__ import annotations

import collections
from typing import Optional, Sequence

import torch
from torch import Tensor

import rudnn.attention as A
import rudnn.paged_attention as PA

from .bridge import enum_member, session, to_kd, to_torch


def _strategy(name: str, tiling: Sequence[int]):
    strategy = enum_member(A.AttentionStrategy, name, "strategy")
    if tiling:
        if strategy is not A.AttentionStrategy.FlashBlackboxAccelerated or len(tiling) != 3:
            raise ValueError(f"tiling [num_planes, seq_q, seq_kv] goes with strategy FlashBlackboxAccelerated, "
                             f"got tiling {list(tiling)} with strategy {name}")
        return A.BlackboxAcceleratedStrategy(*tiling)
    return strategy


@torch.library.custom_op("rudnn::attention", mutates_args=())
def attention_op(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor], attn_bias: Optional[Tensor],
                 scale: Optional[float], softcap: Optional[float], is_causal: bool, strategy: str,
                 tiling: list[int]) -> Tensor:
    """Scaled dot-product attention: q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv]
    -> [B, Hq, Sq, Dv]; mask True = hidden."""
    with session(query) as rt:
        options = A.AttentionModuleOptions(scale, softcap, is_causal)
        return to_torch(A.attention(to_kd(rt, query), to_kd(rt, key), to_kd(rt, value), to_kd(rt, mask),
                                    to_kd(rt, attn_bias), options, _strategy(strategy, tiling)))


@attention_op.register_fake
def _(query, key, value, mask, attn_bias, scale, softcap, is_causal, strategy, tiling):
    return query.new_empty((*query.shape[:3], value.shape[-1]))


def attention(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor] = None,
              attn_bias: Optional[Tensor] = None, scale: Optional[float] = None, softcap: Optional[float] = None,
              is_causal: bool = False, strategy: str = "Autotune", tiling: Sequence[int] = ()) -> Tensor:
    """rudnn.attention.attention on torch tensors (forward only)."""
    return attention_op(query, key, value, mask, attn_bias, scale, softcap, is_causal, strategy, list(tiling))


# ---------------------------------------------------------------------------- paged attention
_PLANS: collections.OrderedDict = collections.OrderedDict()
PLAN_CACHE = 32  # uploaded plans kept, least recently used dropped first


def _plan(rt, like, page_size: int, pages: int, tables: Tensor, lengths: Tensor, sequence_ids: Tensor,
          positions: Tensor) -> PA.DevicePlan:
    """The DevicePlan of these plan tensors on `rt`, from the cache or uploaded once."""
    host = [t.detach().cpu().tolist()
            for t in (tables, lengths, sequence_ids, positions)]
    rows, lens = host[0], host[1]
    if len(rows) != len(lens):
        raise ValueError(f"tables must have one row per entry of lengths ({len(lens)}), got {len(rows)} rows")
    used = [row[:-(-n // page_size)] if n > 0 else [] for row, n in zip(rows, lens)]
    key = (id(rt), page_size, pages, repr((used, lens, host[2], host[3])))
    plan = _PLANS.get(key)
    if plan is None:
        plan = PA.DevicePlan.upload(PA.HostPlan(page_size, pages, used, lens, host[2], host[3]), like)
        _PLANS[key] = plan
        if len(_PLANS) > PLAN_CACHE:
            _PLANS.popitem(last=False)
    _PLANS.move_to_end(key)
    return plan


def _workspace(q, heads: int, value_dim: int, splits: int):
    return PA.SplitWorkspace(q, q.shape[0], heads, value_dim, splits) if splits else None


@torch.library.custom_op("rudnn::paged_attention", mutates_args=())
def paged_attention_op(query: Tensor, k_cache: Tensor, v_cache: Tensor, tables: Tensor, lengths: Tensor,
                       sequence_ids: Tensor, positions: Tensor, scale: float, causal: bool, splits: int) -> Tensor:
    """q [queries, Hq, D] over k [pages, page_size, Hkv, D], v [pages, page_size, Hkv, Dv] -> [queries, Hq, Dv]."""
    with session(query) as rt:
        q, k, v = (to_kd(rt, t.contiguous()) for t in (query, k_cache, v_cache))
        plan = _plan(rt, q, k.shape[1], k.shape[0], tables, lengths, sequence_ids, positions)
        ws = _workspace(q, q.shape[1], v.shape[-1], splits)
        out = plan.attention(q, k, v, scale, causal) if ws is None else plan.attention_with_workspace(
            q, k, v, scale, causal, ws)
        return to_torch(out)


@torch.library.custom_op("rudnn::paged_mla", mutates_args=())
def paged_mla_op(query: Tensor, query_rope: Tensor, latent_cache: Tensor, rope_cache: Tensor, tables: Tensor,
                 lengths: Tensor, sequence_ids: Tensor, positions: Tensor, scale: float, causal: bool,
                 splits: int) -> Tensor:
    """Multi-head latent attention: q [queries, H, R], qp [queries, H, P], latent [pages, page_size, 1, R],
    kp [pages, page_size, 1, P] -> [queries, H, R]."""
    with session(query) as rt:
        q, qp, latent, kp = (to_kd(rt, t.contiguous()) for t in (query, query_rope, latent_cache, rope_cache))
        plan = _plan(rt, q, latent.shape[1], latent.shape[0], tables, lengths, sequence_ids, positions)
        ws = _workspace(q, q.shape[1], q.shape[2], splits)
        out = plan.mla(q, qp, latent, kp, scale, causal) if ws is None else plan.mla_with_workspace(
            q, qp, latent, kp, scale, causal, ws)
        return to_torch(out)


@torch.library.custom_op("rudnn::paged_append", mutates_args=("k_cache", "v_cache"))
def paged_append_op(new_k: Tensor, new_v: Tensor, k_cache: Tensor, v_cache: Tensor, tables: Tensor,
                    lengths: Tensor, sequence_ids: Tensor, positions: Tensor) -> None:
    """Writes row r of new_k/new_v into its slot of the (contiguous) caches, in place."""
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("paged_append writes the caches in place: k_cache and v_cache must be contiguous")
    with session(new_k) as rt:
        k, v = to_kd(rt, k_cache), to_kd(rt, v_cache)
        plan = _plan(rt, k, k.shape[1], k.shape[0], tables, lengths, sequence_ids, positions)
        plan.host().validate_writes()
        plan.append(to_kd(rt, new_k.contiguous()), to_kd(rt, new_v.contiguous()), k, v)


paged_attention_op.register_fake(lambda q, k, v, *rest: q.new_empty((*q.shape[:2], v.shape[-1])))
paged_mla_op.register_fake(lambda q, qp, latent, kp, *rest: torch.empty_like(q))
paged_append_op.register_fake(lambda *args: None)


def paged_attention(query: Tensor, k_cache: Tensor, v_cache: Tensor, tables: Tensor, lengths: Tensor,
                    sequence_ids: Tensor, positions: Tensor, scale: float, causal: bool = False,
                    splits: int = 0) -> Tensor:
    """DevicePlan.attention (splits 0) or attention_with_workspace (splits 2-32) on torch tensors."""
    return paged_attention_op(query, k_cache, v_cache, tables, lengths, sequence_ids, positions, scale, causal,
                              splits)


def paged_mla(query: Tensor, query_rope: Tensor, latent_cache: Tensor, rope_cache: Tensor, tables: Tensor,
              lengths: Tensor, sequence_ids: Tensor, positions: Tensor, scale: float, causal: bool = False,
              splits: int = 0) -> Tensor:
    """DevicePlan.mla (splits 0) or mla_with_workspace (splits 2-32) on torch tensors."""
    return paged_mla_op(query, query_rope, latent_cache, rope_cache, tables, lengths, sequence_ids, positions, scale,
                        causal, splits)


def paged_append(new_k: Tensor, new_v: Tensor, k_cache: Tensor, v_cache: Tensor, tables: Tensor, lengths: Tensor,
                 sequence_ids: Tensor, positions: Tensor) -> tuple:
    """DevicePlan.append: writes the caches in place and returns them."""
    paged_append_op(new_k, new_v, k_cache, v_cache, tables, lengths, sequence_ids, positions)
    return k_cache, v_cache


__all__ = ["attention", "paged_attention", "paged_mla", "paged_append"]
