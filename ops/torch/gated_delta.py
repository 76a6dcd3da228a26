"""rudnn.torch's gated delta rule ops (SPEC §3), forward only (the family has no backward).
GatedDeltaInput becomes its fields as arguments; GatedDeltaOutput the pair (output, final_state)."""
from __future__ import annotations

import torch
from torch import Tensor

import rudnn.gated_delta as GD

from .bridge import session, to_kd, to_torch


def _input(rt, query, key, value, beta, log_decay, initial_state, query_scale) -> GD.GatedDeltaInput:
    return GD.GatedDeltaInput(*(to_kd(rt, t) for t in (query, key, value, beta, log_decay, initial_state)),
                              query_scale)


@torch.library.custom_op("rudnn::gated_delta_rule", mutates_args=())
def gated_delta_rule_op(query: Tensor, key: Tensor, value: Tensor, beta: Tensor, log_decay: Tensor,
                        initial_state: Tensor, query_scale: float) -> tuple[Tensor, Tensor]:
    """The recurrent form: (output [B, H, T, V] in the query dtype, final_state F32 [B, H, K, V])."""
    with session(query) as rt:
        out = GD.gated_delta_rule(_input(rt, query, key, value, beta, log_decay, initial_state, query_scale))
        return to_torch(out.output), to_torch(out.final_state)


@torch.library.custom_op("rudnn::chunk_gated_delta_rule", mutates_args=())
def chunk_gated_delta_rule_op(query: Tensor, key: Tensor, value: Tensor, beta: Tensor, log_decay: Tensor,
                              initial_state: Tensor, query_scale: float, chunk_size: int) -> tuple[Tensor, Tensor]:
    """The chunk-parallel form of gated_delta_rule (same results up to rounding)."""
    with session(query) as rt:
        out = GD.chunk_gated_delta_rule(_input(rt, query, key, value, beta, log_decay, initial_state, query_scale),
                                        chunk_size)
        return to_torch(out.output), to_torch(out.final_state)


def _fake(query, key, value, beta, log_decay, initial_state, *rest):
    return query.new_empty(value.shape), torch.empty_like(initial_state, dtype=torch.float32)


gated_delta_rule_op.register_fake(_fake)
chunk_gated_delta_rule_op.register_fake(_fake)


def gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, beta: Tensor, log_decay: Tensor,
                     initial_state: Tensor, query_scale: float) -> tuple:
    """(output, final_state) of the gated delta rule, token by token."""
    return gated_delta_rule_op(query, key, value, beta, log_decay, initial_state, query_scale)


def chunk_gated_delta_rule(query: Tensor, key: Tensor, value: Tensor, beta: Tensor, log_decay: Tensor,
                           initial_state: Tensor, query_scale: float, chunk_size: int = 64) -> tuple:
    """(output, final_state) of the gated delta rule, chunk-parallel."""
    return chunk_gated_delta_rule_op(query, key, value, beta, log_decay, initial_state, query_scale, chunk_size)


__all__ = ["gated_delta_rule", "chunk_gated_delta_rule"]
