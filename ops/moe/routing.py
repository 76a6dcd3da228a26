"""Routing: logits -> a `RoutingPlan` (expert ids and weights of every token).

`route` is softmax top-k; `route_sigmoid_grouped` is DeepSeek-V3's grouped
sigmoid routing with a bias that steers the choice but not the weights. Rows that
fit one plane (E <= 8 * PLANE_DIM, top_k <= PLANE_DIM, groups of a power-of-two count
of 8-expert lanes) run one plane per token with the row in registers; others run one
cube per token (see `routing_kernels.py`).
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.replay import replayable

from . import routing_kernels as rk
from .options import GroupRoutingOptions, RoutingOptions
from .problem import check_bias, check_group_options, check_logits, check_routing_options

ROUTING_UNITS = 32       # units per token: one plane on GPUs; each unit walks E / 32 experts
SOFTMAX_CACHE = 2048     # rows up to this many experts keep their keys in shared memory (24 KiB)
PLANES_PER_CUBE = 4      # tokens per cube in the one-plane-per-token kernels
# The plane kernels run where plane operations are hardware instructions. Where they are
# emulated (the cpu, PoCL) a token's eight top-k rounds of plane operations cost more than
# the cube kernels' shared-memory passes: E 256, 1024 tokens took 5.9 ms against 3.9 ms on
# PoCL. On the H200 the plane kernels take a third of the time of the cube kernels.
PLANE_KERNELS = "native"    # "native": where plane ops are native; "always"; "never" (tests)


def _pow2_at_least(n: int, lo: int) -> int:
    return max(lo, 1 << max(0, n - 1).bit_length())


def plane_launch(rt, tokens: int) -> tuple[int, int]:
    """(grid, block) of the one-plane-per-token kernels."""
    return -(-tokens // PLANES_PER_CUBE), rt.plane_dim * PLANES_PER_CUBE


def fits_plane(rt, logits: kd.Tensor, top_k: int) -> bool:
    """Whether to run one plane per token: a row of logits fits one plane's registers
    (rk.SLOTS experts per lane) and PLANE_KERNELS allows it on this runtime."""
    E = logits.shape[1]
    if PLANE_KERNELS == "never" or PLANE_KERNELS == "native" and not rt.capabilities.native_plane_ops:
        return False
    return E <= rk.SLOTS * rt.plane_dim and top_k <= rt.plane_dim and (logits.strides[1] == 1 or E == 1)


def group_lanes_log2(rt, logits: kd.Tensor, bias, options: GroupRoutingOptions) -> int | None:
    """log2 of the lanes per group when grouped routing fits one plane per token, else None."""
    E = logits.shape[1]
    size = E // options.groups
    lanes = size // rk.SLOTS
    if size % rk.SLOTS or lanes & (lanes - 1) or not fits_plane(rt, logits, options.top_k):
        return None
    if bias is not None and bias.strides[0] != 1:
        return None
    return lanes.bit_length() - 1


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


def route(logits: kd.Tensor, options: RoutingOptions) -> RoutingPlan:
    """Softmax over all experts in F32, then the top_k most probable (ties: lower id first)."""
    return RoutingPlan(*_route(logits, options), logits.shape[1])


def route_sigmoid_grouped(logits: kd.Tensor, bias: kd.Tensor | None, options: GroupRoutingOptions) -> RoutingPlan:
    """Grouped sigmoid routing: p = sigmoid(logits), c = p + bias chooses the groups and
    experts, p (renormalised if asked, times scale) weighs them. A row whose c holds a NaN
    gets ids 0, 1, 2, ... and NaN weights."""
    return RoutingPlan(*_route_sigmoid_grouped(logits, bias, options), logits.shape[1])


@replayable
def _route(logits: kd.Tensor, options: RoutingOptions) -> tuple:
    """(ids, weights) of `route` (validated here: the wrapper reads only the checked shape)."""
    check_logits(logits)
    T, E = logits.shape
    check_routing_options(options, E)
    rt = logits.runtime
    k = options.top_k
    ids = rt.empty((T, k), kd.u32)
    weights = rt.empty((T, k), logits.dtype)
    if T == 0:
        return ids, weights
    if fits_plane(rt, logits, k):
        grid, block = plane_launch(rt, T)
        rk.softmax_topk_plane[grid, block](logits, ids, weights, options.renormalize)
        return ids, weights
    probs = rt.empty((T, k), kd.f32)
    cache = _pow2_at_least(E, 32) if E <= SOFTMAX_CACHE else 0
    rk.softmax_topk[T, routing_units(E)](logits, ids, weights, probs, options.renormalize, cache)
    return ids, weights


@replayable
def _route_sigmoid_grouped(logits: kd.Tensor, bias: kd.Tensor | None, options: GroupRoutingOptions) -> tuple:
    """(ids, weights) of `route_sigmoid_grouped`."""
    check_logits(logits)
    T, E = logits.shape
    check_group_options(options, E)
    rt = logits.runtime
    if bias is not None:
        check_bias(bias, E, rt)
    k = options.top_k
    ids = rt.empty((T, k), kd.u32)
    weights = rt.empty((T, k), logits.dtype)
    if T == 0:
        return ids, weights
    bias_arg = bias if bias is not None else rt.empty((1,), kd.f32)
    log_lanes = group_lanes_log2(rt, logits, bias, options)
    if log_lanes is not None:
        grid, block = plane_launch(rt, T)
        rk.sigmoid_grouped_plane[grid, block](logits, bias_arg, ids, weights, options.groups, options.selected_groups,
                                              float(options.scale), bias is not None, options.group_top_two,
                                              options.renormalize, log_lanes)
        return ids, weights
    rk.sigmoid_grouped_topk[T, routing_units(E)](logits, bias_arg, ids, weights, options.groups,
                                                 options.selected_groups, float(options.scale), bias is not None,
                                                 options.group_top_two, options.renormalize, _pow2_at_least(E, 32))
    return ids, weights
