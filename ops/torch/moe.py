"""rudnn.torch's mixture-of-experts ops (SPEC §2), forward only (the family has no backward).

The family's objects become tensors: a RoutingPlan is (expert_indices int32 [T, top_k],
weights [T, top_k]); DispatchedTokens is the five tensors of `Dispatched` (values, and
int32 row_experts, expert_offsets and pair_rows, F32 pair_weights: the row and weight of
each (token, slot) pair, which combine reads). U32 ids of the family come back as int32
views of the same memory. SwiGluExperts is its three weights; GroupedStrategy and the
routing options are plain arguments."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

import rudnn.moe as M
from rudnn.moe.dispatch import DispatchedTokens

from .bridge import enum_member, session, to_kd, to_kd_u32, to_torch


class Dispatched(NamedTuple):
    """The tensors of the family's DispatchedTokens."""

    values: Tensor         # [T·top_k, H], rows grouped by expert
    row_experts: Tensor    # int32 [T·top_k]: the expert of each row
    expert_offsets: Tensor  # int32 [E + 1]: exclusive prefix sum of the per-expert counts
    pair_rows: Tensor      # int32 [T·top_k]: the row of each (token, slot) pair
    pair_weights: Tensor   # F32 [T·top_k]: the routing weight of each pair


def _plan(rt, expert_indices: Tensor, weights: Tensor, experts: int) -> M.RoutingPlan:
    return M.RoutingPlan(to_kd_u32(rt, expert_indices), to_kd(rt, weights), experts)


def _dispatched(rt, expert_indices, weights, values, row_experts, expert_offsets, pair_rows,
                pair_weights) -> DispatchedTokens:
    plan = _plan(rt, expert_indices, weights, expert_offsets.shape[0] - 1)
    return DispatchedTokens(plan, to_kd(rt, values), to_kd_u32(rt, row_experts), to_kd_u32(rt, expert_offsets),
                            to_kd_u32(rt, pair_rows), to_kd(rt, pair_weights))


def _experts(rt, gate, up, down) -> M.SwiGluExperts:
    """The experts of torch weights, packed by torch where strided: SwiGluExperts would pack
    them with a launch of ours, before the forward's checks of the other arguments (SPEC §0),
    as the experts are made anew each call here."""
    return M.SwiGluExperts(*(to_kd(rt, w.contiguous()) for w in (gate, up, down)))


def _group_options(top_k, groups, selected_groups, group_top_two, renormalize, scale) -> M.GroupRoutingOptions:
    return M.GroupRoutingOptions(top_k, groups, selected_groups, group_top_two, renormalize, scale)


# ---------------------------------------------------------------------------- ops
@torch.library.custom_op("rudnn::moe_route", mutates_args=())
def route_op(logits: Tensor, top_k: int, renormalize: bool) -> tuple[Tensor, Tensor]:
    """Softmax routing: (expert_indices int32 [T, top_k], weights [T, top_k])."""
    with session(logits) as rt:
        plan = M.route(to_kd(rt, logits), M.RoutingOptions(top_k, renormalize))
        return to_torch(plan.expert_indices()), to_torch(plan.weights())


@torch.library.custom_op("rudnn::moe_route_sigmoid_grouped", mutates_args=())
def route_sigmoid_grouped_op(logits: Tensor, bias: Optional[Tensor], top_k: int, groups: int, selected_groups: int,
                             group_top_two: bool, renormalize: bool, scale: float) -> tuple[Tensor, Tensor]:
    """Grouped sigmoid routing (DeepSeek-V3 style): (expert_indices int32, weights)."""
    with session(logits) as rt:
        options = _group_options(top_k, groups, selected_groups, group_top_two, renormalize, scale)
        plan = M.route_sigmoid_grouped(to_kd(rt, logits), to_kd(rt, bias), options)
        return to_torch(plan.expert_indices()), to_torch(plan.weights())


@torch.library.custom_op("rudnn::moe_dispatch", mutates_args=())
def dispatch_op(input: Tensor, expert_indices: Tensor, weights: Tensor,  # noqa: A002
                experts: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """RoutingPlan.dispatch: the five tensors of Dispatched."""
    with session(input) as rt:
        d = _plan(rt, expert_indices, weights, experts).dispatch(to_kd(rt, input))
        return tuple(to_torch(x) for x in (d.values(), d.row_experts(), d.expert_offsets(), d._pair_rows,
                                           d._pair_weights))


@torch.library.custom_op("rudnn::moe_combine", mutates_args=())
def combine_op(expert_output: Tensor, expert_indices: Tensor, weights: Tensor, values: Tensor, row_experts: Tensor,
               expert_offsets: Tensor, pair_rows: Tensor, pair_weights: Tensor) -> Tensor:
    """DispatchedTokens.combine: out[t] = Σ_j weight[t, j]·expert_output[row(t, j)] -> [T, W]."""
    with session(expert_output) as rt:
        d = _dispatched(rt, expert_indices, weights, values, row_experts, expert_offsets, pair_rows, pair_weights)
        return to_torch(d.combine(to_kd(rt, expert_output)))


@torch.library.custom_op("rudnn::moe_experts_dispatched", mutates_args=())
def experts_dispatched_op(gate: Tensor, up: Tensor, down: Tensor, expert_indices: Tensor, weights: Tensor,
                          values: Tensor, row_experts: Tensor, expert_offsets: Tensor, pair_rows: Tensor,
                          pair_weights: Tensor, strategy: str) -> Tensor:
    """SwiGluExperts.forward_dispatched_with_strategy: [T·top_k, H]."""
    chosen = enum_member(M.GroupedStrategy, strategy, "strategy")
    with session(values) as rt:
        d = _dispatched(rt, expert_indices, weights, values, row_experts, expert_offsets, pair_rows, pair_weights)
        return to_torch(_experts(rt, gate, up, down).forward_dispatched_with_strategy(d, chosen))


@torch.library.custom_op("rudnn::moe_swiglu_experts", mutates_args=())
def swiglu_experts_op(input: Tensor, logits: Tensor, gate: Tensor, up: Tensor, down: Tensor, top_k: int,  # noqa: A002
                      renormalize: bool) -> Tensor:
    """SwiGluExperts.forward: softmax-route, dispatch, experts (Scalar), combine -> [T, H]."""
    with session(input) as rt:
        return to_torch(_experts(rt, gate, up, down).forward(to_kd(rt, input), to_kd(rt, logits),
                                                             M.RoutingOptions(top_k, renormalize)))


@torch.library.custom_op("rudnn::moe_swiglu_experts_sigmoid_grouped", mutates_args=())
def swiglu_experts_sigmoid_grouped_op(input: Tensor, logits: Tensor, bias: Optional[Tensor], gate: Tensor,  # noqa: A002
                                      up: Tensor, down: Tensor, top_k: int, groups: int, selected_groups: int,
                                      group_top_two: bool, renormalize: bool, scale: float, strategy: str) -> Tensor:
    """SwiGluExperts.forward_sigmoid_grouped -> [T, H]."""
    chosen = enum_member(M.GroupedStrategy, strategy, "strategy")
    with session(input) as rt:
        options = _group_options(top_k, groups, selected_groups, group_top_two, renormalize, scale)
        return to_torch(_experts(rt, gate, up, down).forward_sigmoid_grouped(
            to_kd(rt, input), to_kd(rt, logits), to_kd(rt, bias), options, chosen))


# ---------------------------------------------------------------------------- fake impls
def _routed(logits: Tensor, top_k: int) -> tuple:
    T = logits.shape[0]
    return logits.new_empty((T, top_k), dtype=torch.int32), logits.new_empty((T, top_k))


route_op.register_fake(lambda logits, top_k, renormalize: _routed(logits, top_k))
route_sigmoid_grouped_op.register_fake(lambda logits, bias, top_k, *rest: _routed(logits, top_k))


@dispatch_op.register_fake
def _(input, expert_indices, weights, experts):  # noqa: A002
    rows = expert_indices.shape[0] * expert_indices.shape[1]
    ids = input.new_empty((rows,), dtype=torch.int32)
    return (input.new_empty((rows, input.shape[1])), ids, input.new_empty((experts + 1,), dtype=torch.int32),
            torch.empty_like(ids), input.new_empty((rows,), dtype=torch.float32))


combine_op.register_fake(lambda out, ids, *rest: out.new_empty((ids.shape[0], out.shape[1])))
experts_dispatched_op.register_fake(lambda gate, up, down, ids, w, values, *rest: torch.empty_like(values))
swiglu_experts_op.register_fake(lambda input, *rest: torch.empty_like(input))
swiglu_experts_sigmoid_grouped_op.register_fake(lambda input, *rest: torch.empty_like(input))


# ---------------------------------------------------------------------------- user-facing functions
def route(logits: Tensor, top_k: int, renormalize: bool = False) -> tuple:
    """(expert_indices int32 [T, top_k], weights [T, top_k]) of softmax routing."""
    return route_op(logits, top_k, renormalize)


def route_sigmoid_grouped(logits: Tensor, bias: Optional[Tensor], top_k: int, groups: int, selected_groups: int,
                          group_top_two: bool = False, renormalize: bool = True, scale: float = 1.0) -> tuple:
    """(expert_indices int32 [T, top_k], weights [T, top_k]) of grouped sigmoid routing."""
    return route_sigmoid_grouped_op(logits, bias, top_k, groups, selected_groups, group_top_two, renormalize, scale)


def dispatch(input: Tensor, expert_indices: Tensor, weights: Tensor, experts: int) -> Dispatched:  # noqa: A002
    """The rows of `input` [T, H] grouped by expert, one per (token, slot) pair."""
    return Dispatched(*dispatch_op(input, expert_indices, weights, experts))


def combine(expert_output: Tensor, expert_indices: Tensor, weights: Tensor, dispatched: Dispatched) -> Tensor:
    """Each token's rows of `expert_output` [T·top_k, W] summed back, weighted: [T, W]."""
    return combine_op(expert_output, expert_indices, weights, *dispatched)


def experts_dispatched(gate: Tensor, up: Tensor, down: Tensor, expert_indices: Tensor, weights: Tensor,
                       dispatched: Dispatched, strategy: str = "Scalar") -> Tensor:
    """The SwiGLU experts (gate, up [E, I, H], down [E, H, I]) on every dispatched row: [T·top_k, H]."""
    return experts_dispatched_op(gate, up, down, expert_indices, weights, *dispatched, strategy)


def swiglu_experts(input: Tensor, logits: Tensor, gate: Tensor, up: Tensor, down: Tensor, top_k: int,  # noqa: A002
                   renormalize: bool = False) -> Tensor:
    """route -> dispatch -> experts -> combine in one op: [T, H]."""
    return swiglu_experts_op(input, logits, gate, up, down, top_k, renormalize)


def swiglu_experts_sigmoid_grouped(input: Tensor, logits: Tensor, bias: Optional[Tensor], gate: Tensor,  # noqa: A002
                                   up: Tensor, down: Tensor, top_k: int, groups: int, selected_groups: int,
                                   group_top_two: bool = False, renormalize: bool = True, scale: float = 1.0,
                                   strategy: str = "Auto") -> Tensor:
    """Grouped-sigmoid-routed SwiGLU experts in one op: [T, H]."""
    return swiglu_experts_sigmoid_grouped_op(input, logits, bias, gate, up, down, top_k, groups, selected_groups,
                                             group_top_two, renormalize, scale, strategy)


__all__ = ["Dispatched", "route", "route_sigmoid_grouped", "dispatch", "combine", "experts_dispatched",
           "swiglu_experts", "swiglu_experts_sigmoid_grouped"]
