"""The options and strategy enum of `rudnn.moe` (SPEC §2); problem.py checks them."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class GroupedStrategy(enum.Enum):
    """How the expert projections run: `Scalar` (plain f32 arithmetic, everywhere),
    `TensorCore` (F16/BF16 on the matrix primitive) or `Auto` (TensorCore where the
    runtime has matrix hardware for the dtype, Scalar otherwise)."""

    Scalar = "scalar"
    Auto = "auto"
    TensorCore = "tensor_core"


@dataclass(frozen=True)
class RoutingOptions:
    """Softmax routing: keep the `top_k` most probable experts of each token;
    `renormalize` divides their weights by the sum of the kept probabilities."""

    top_k: int
    renormalize: bool


@dataclass(frozen=True)
class GroupRoutingOptions:
    """Grouped sigmoid routing (DeepSeek-V3 style): `groups` equal expert groups, the
    `selected_groups` best of them (by their best score, or the sum of their two best
    when `group_top_two`), then the `top_k` best experts inside; weights are the
    uncorrected sigmoids, renormalised if asked, times `scale`."""

    top_k: int
    groups: int
    selected_groups: int
    group_top_two: bool
    renormalize: bool
    scale: float
