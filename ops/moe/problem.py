"""Validation of rudnn.moe calls (SPEC §0, §2): every entry point's arguments, options and
strategy checked before anything launches, raising MoeError naming the argument, what it
got and what is needed."""
from __future__ import annotations

import kerneldsl as kd

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks
from .options import GroupedStrategy, GroupRoutingOptions, RoutingOptions


class MoeError(RudnnError):
    """Bad input to a `rudnn.moe` entry point (shapes, dtypes, runtimes, options, strategy)."""


CHECKS = Checks(MoeError)
MAX_GROUPED_EXPERTS, MAX_GROUPS, MAX_GROUPED_TOP_K = 1024, 128, 64


def check_tensor(name: str, t, ndim: int | None = None, dtypes=FLOAT_DTYPES, runtime=None,
                 runtime_of: str = "the other tensors") -> kd.Tensor:
    """A kd tensor of one of `dtypes`, of rank `ndim`, on `runtime` (that of `runtime_of`) if given."""
    return CHECKS.tensor(name, t, rank=ndim, dtypes=dtypes, runtime=runtime, runtime_of=runtime_of)


def check_logits(logits) -> None:
    """Router logits [T, E], float, E >= 1."""
    check_tensor("logits", logits, ndim=2)
    if logits.shape[1] < 1:
        CHECKS.fail(f"logits must have at least one expert (shape [T, E] with E >= 1), got shape {logits.shape}")


def check_routing_options(options, experts: int) -> None:
    CHECKS.instance("options", options, RoutingOptions)
    k = CHECKS.integer("options.top_k", options.top_k)
    CHECKS.boolean("options.renormalize", options.renormalize)
    CHECKS.integer("options.top_k", k, low=1, high=experts, high_is="the number of experts")


def check_group_options(options, experts: int) -> None:
    """SPEC §2's validity rules of grouped sigmoid routing over `experts` experts."""
    CHECKS.instance("options", options, GroupRoutingOptions)
    k = CHECKS.integer("options.top_k", options.top_k)
    g = CHECKS.integer("options.groups", options.groups)
    sg = CHECKS.integer("options.selected_groups", options.selected_groups)
    two = CHECKS.boolean("options.group_top_two", options.group_top_two)
    CHECKS.boolean("options.renormalize", options.renormalize)
    if not 1 <= experts <= MAX_GROUPED_EXPERTS:
        CHECKS.fail(f"grouped sigmoid routing needs 1 to {MAX_GROUPED_EXPERTS} experts, logits have {experts}")
    CHECKS.integer("options.groups", g, low=1, high=MAX_GROUPS)
    if experts % g:
        CHECKS.fail(f"options.groups ({g}) must divide the number of experts ({experts})")
    CHECKS.integer("options.selected_groups", sg, low=1, high=g, high_is="options.groups")
    CHECKS.integer("options.top_k", k, low=1, high=MAX_GROUPED_TOP_K)
    per_group = experts // g
    if k > sg * per_group:
        CHECKS.fail(f"options.top_k ({k}) exceeds the experts in the selected groups "
                    f"({sg} groups x {per_group} experts = {sg * per_group})")
    if two and per_group < 2:
        CHECKS.fail(f"options.group_top_two needs at least 2 experts per group, got {per_group} "
                    f"({experts} experts in {g} groups)")
    CHECKS.number("options.scale", options.scale, positive=True)


def check_bias(bias, experts: int, runtime) -> None:
    """The grouped-routing bias: F32 [E] on the logits' runtime."""
    check_tensor("bias", bias, ndim=1, dtypes=(kd.f32,), runtime=runtime, runtime_of="logits")
    CHECKS.shape("bias", bias, (experts,), "one per expert of logits")


def check_strategy(strategy) -> GroupedStrategy:
    return CHECKS.instance("strategy", strategy, GroupedStrategy, "GroupedStrategy (Scalar, Auto or TensorCore)")


def check_dispatch_input(input, plan) -> None:  # noqa: A002
    """The tokens a plan dispatches: [T, H] with T the plan's tokens and H > 0."""
    check_tensor("input", input, ndim=2, runtime=plan.runtime, runtime_of="the routing plan")
    T, H = input.shape
    if T != plan.tokens():
        CHECKS.fail(f"input must have one row per routed token ({plan.tokens()}), got shape {input.shape}")
    if H < 1:
        CHECKS.fail(f"input must have a hidden size H > 0, got shape {input.shape}")


def check_expert_weights(gate, up, down) -> tuple:
    """SwiGLU weights gate, up [E, I, H] and down [E, H, I] of one float dtype and runtime,
    E, I, H > 0; returns (E, I, H)."""
    check_tensor("gate", gate, ndim=3)
    rt = gate.runtime
    check_tensor("up", up, ndim=3, runtime=rt, runtime_of="gate")
    check_tensor("down", down, ndim=3, runtime=rt, runtime_of="gate")
    CHECKS.same_dtype("up", up, "gate", gate)
    CHECKS.same_dtype("down", down, "gate", gate)
    E, I, H = gate.shape
    if min(E, I, H) < 1:
        CHECKS.fail(f"gate must have shape [E, I, H] with E, I, H > 0, got {gate.shape}")
    if up.shape != gate.shape:
        CHECKS.fail(f"up must have the shape of gate {gate.shape} ([E, I, H]), got {up.shape}")
    if down.shape != (E, H, I):
        CHECKS.fail(f"down must have shape [E, H, I] = {[E, H, I]}, got {list(down.shape)}")
    return E, I, H


def check_dispatched(experts, dispatched) -> None:
    """Dispatched rows that `experts` (a SwiGluExperts) can run: its dtype, hidden size and expert count."""
    from .dispatch import DispatchedTokens  # dispatch.py validates through this module
    CHECKS.instance("dispatched", dispatched, DispatchedTokens, "DispatchedTokens (from RoutingPlan.dispatch)")
    v = dispatched.values()
    check_tensor("dispatched.values()", v, ndim=2, runtime=experts.runtime, runtime_of="the expert weights")
    if v.dtype is not experts.dtype:
        CHECKS.fail(f"dispatched values are {v.dtype.name.upper()} but the expert weights are "
                    f"{experts.dtype.name.upper()}; dispatch an input of the weights' dtype")
    if v.shape[1] != experts.hidden:
        CHECKS.fail(f"dispatched values have hidden size {v.shape[1]}, the experts need H = {experts.hidden}")
    if dispatched.plan.experts() != experts.experts:
        CHECKS.fail(f"the routing plan has {dispatched.plan.experts()} experts, these experts are {experts.experts}")


def check_forward_args(experts, input, logits) -> None:  # noqa: A002
    """Tokens [T, H] and their router logits [T, E] for `experts` (a SwiGluExperts)."""
    check_tensor("input", input, ndim=2, runtime=experts.runtime, runtime_of="the expert weights")
    check_logits(logits)
    check_tensor("logits", logits, ndim=2, runtime=experts.runtime, runtime_of="the expert weights")
    if input.dtype is not experts.dtype:
        CHECKS.fail(f"input is {input.dtype.name.upper()} but the expert weights are {experts.dtype.name.upper()}")
    if input.shape[1] != experts.hidden:
        CHECKS.fail(f"input must have hidden size H = {experts.hidden}, got shape {input.shape}")
    if logits.shape[0] != input.shape[0]:
        CHECKS.fail(f"logits must have one row per input token ({input.shape[0]}), got shape {logits.shape}")
    if logits.shape[1] != experts.experts:
        CHECKS.fail(f"logits must have one column per expert ({experts.experts}), got shape {logits.shape}")
