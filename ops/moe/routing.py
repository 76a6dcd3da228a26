"""Routing: logits -> a `RoutingPlan` (expert ids and weights of every token).

`route` is softmax top-k; `route_sigmoid_grouped` is DeepSeek-V3's grouped
sigmoid routing with a bias that steers the choice but not the weights. Both run
one cube per token (see `routing_kernels.py`).
"""
from __future__ import annotations

import kerneldsl as kd

from . import routing_kernels as rk
from .options import (GroupRoutingOptions, MoeError, RoutingOptions, check_group_options, check_routing_options,
                      check_tensor)

ROUTING_UNITS = 32       # units per token: one plane on GPUs; each unit walks E / 32 experts
SOFTMAX_CACHE = 2048     # rows up to this many experts keep their keys in shared memory (24 KiB)


def _pow2_at_least(n: int, lo: int) -> int:
    return max(lo, 1 << max(0, n - 1).bit_length())


def routing_units(experts: int) -> int:
    """Units per routing cube: one element per unit for small E, ROUTING_UNITS otherwise."""
    return min(_pow2_at_least(experts, 1), ROUTING_UNITS)


class RoutingPlan:
    """Which experts each token goes to, and with which weights.

    `expert_indices()` is U32 [T, top_k] (best first), `weights()` is [T, top_k] in the
    logits dtype. `dispatch(input)` groups the tokens' rows by expert."""

    def __init__(self, ids: kd.Tensor, weights: kd.Tensor, experts: int):
        self._ids = ids
        self._weights = weights
        self._experts = experts

    def expert_indices(self) -> kd.Tensor:
        return self._ids

    def weights(self) -> kd.Tensor:
        return self._weights

    def tokens(self) -> int:
        return self._ids.shape[0]

    def experts(self) -> int:
        return self._experts

    def top_k(self) -> int:
        return self._ids.shape[1]

    @property
    def runtime(self):
        return self._ids.runtime

    def dispatch(self, input: kd.Tensor):  # noqa: A002  (SPEC name)
        from .dispatch import dispatch
        return dispatch(self, input)

    def __repr__(self):
        return (f"RoutingPlan(tokens={self.tokens()}, experts={self.experts()}, top_k={self.top_k()}, "
                f"runtime={self.runtime.name!r})")


def check_logits(logits) -> None:
    check_tensor("logits", logits, ndim=2)
    if logits.shape[1] < 1:
        raise MoeError(f"logits must have at least one expert (shape [T, E] with E >= 1), got shape {logits.shape}")


def route(logits: kd.Tensor, options: RoutingOptions) -> RoutingPlan:
    """Softmax over all experts in F32, then the top_k most probable (ties: lower id first)."""
    check_logits(logits)
    T, E = logits.shape
    check_routing_options(options, E)
    rt = logits.runtime
    k = options.top_k
    ids = rt.empty((T, k), kd.u32)
    weights = rt.empty((T, k), logits.dtype)
    if T == 0:
        return RoutingPlan(ids, weights, E)
    probs = rt.empty((T, k), kd.f32)
    cache = _pow2_at_least(E, 32) if E <= SOFTMAX_CACHE else 0
    rk.softmax_topk[T, routing_units(E)](logits, ids, weights, probs, options.renormalize, cache)
    return RoutingPlan(ids, weights, E)


def route_sigmoid_grouped(logits: kd.Tensor, bias: kd.Tensor | None, options: GroupRoutingOptions) -> RoutingPlan:
    """Grouped sigmoid routing: p = sigmoid(logits), c = p + bias chooses the groups and
    experts, p (renormalised if asked, times scale) weighs them. A row whose c holds a NaN
    gets ids 0, 1, 2, ... and NaN weights."""
    check_logits(logits)
    T, E = logits.shape
    check_group_options(options, E)
    rt = logits.runtime
    if bias is not None:
        check_tensor("bias", bias, ndim=1, dtypes=(kd.f32,), runtime=rt)
        if bias.shape[0] != E:
            raise MoeError(f"bias must have shape [{E}] (one per expert of logits), got {bias.shape}")
    k = options.top_k
    ids = rt.empty((T, k), kd.u32)
    weights = rt.empty((T, k), logits.dtype)
    if T == 0:
        return RoutingPlan(ids, weights, E)
    bias_arg = bias if bias is not None else rt.empty((1,), kd.f32)
    rk.sigmoid_grouped_topk[T, routing_units(E)](logits, bias_arg, ids, weights, options.groups,
                                                 options.selected_groups, float(options.scale), bias is not None,
                                                 options.group_top_two, options.renormalize, _pow2_at_least(E, 32))
    return RoutingPlan(ids, weights, E)
