"""rudnn.moe: mixture-of-experts routing, dispatch, SwiGLU experts and combine (SPEC §2).

    plan = moe.route(logits, moe.RoutingOptions(top_k=2, renormalize=True))
    dispatched = plan.dispatch(x)                         # rows grouped by expert
    y = dispatched.combine(experts.forward_dispatched(dispatched))

Modules: `problem` (MoeError and every argument check), `options` (options and
strategy), `routing` (+ kernels), `dispatch` (+ kernels), `tiles` (offsets and row
tiles), `gemm_scalar` and `gemm_tensorcore` (the grouped GEMMs), `experts`
(SwiGluExperts), `tuning` (strategy resolution and cube sizes).
"""
from __future__ import annotations

from .dispatch import DispatchedTokens
from .experts import SwiGluExperts
from .options import GroupedStrategy, GroupRoutingOptions, RoutingOptions
from .problem import MoeError
from .routing import RoutingPlan, route, route_sigmoid_grouped

__all__ = ["RoutingOptions", "route", "GroupRoutingOptions", "route_sigmoid_grouped", "RoutingPlan",
           "DispatchedTokens", "SwiGluExperts", "GroupedStrategy", "MoeError"]
