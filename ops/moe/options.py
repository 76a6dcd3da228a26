"""The options, strategy enum and error type of `rudnn.moe`, and the argument checks
every entry point runs before it launches anything."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import kerneldsl as kd

from ..errors import RudnnError

FLOAT_DTYPES = (kd.f32, kd.f16, kd.bf16)


class MoeError(RudnnError):
    """Bad input to a `rudnn.moe` entry point (shapes, dtypes, runtimes, options, strategy)."""


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


# ---------------------------------------------------------------------- checks
def _int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MoeError(f"{name} must be an int, got {value!r}")
    return value


def _bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise MoeError(f"{name} must be a bool, got {value!r}")
    return value


def check_routing_options(options, experts: int) -> None:
    if not isinstance(options, RoutingOptions):
        raise MoeError(f"options must be a RoutingOptions, got {type(options).__name__}")
    k = _int("options.top_k", options.top_k)
    _bool("options.renormalize", options.renormalize)
    if not 1 <= k <= experts:
        raise MoeError(f"options.top_k must be between 1 and the number of experts ({experts}), got {k}")


def check_group_options(options, experts: int) -> None:
    if not isinstance(options, GroupRoutingOptions):
        raise MoeError(f"options must be a GroupRoutingOptions, got {type(options).__name__}")
    k = _int("options.top_k", options.top_k)
    g = _int("options.groups", options.groups)
    sg = _int("options.selected_groups", options.selected_groups)
    two = _bool("options.group_top_two", options.group_top_two)
    _bool("options.renormalize", options.renormalize)
    scale = options.scale
    if not 1 <= experts <= 1024:
        raise MoeError(f"grouped sigmoid routing needs 1 to 1024 experts, logits have {experts}")
    if not 1 <= g <= 128:
        raise MoeError(f"options.groups must be between 1 and 128, got {g}")
    if experts % g:
        raise MoeError(f"options.groups ({g}) must divide the number of experts ({experts})")
    if not 1 <= sg <= g:
        raise MoeError(f"options.selected_groups must be between 1 and options.groups ({g}), got {sg}")
    if not 1 <= k <= 64:
        raise MoeError(f"options.top_k must be between 1 and 64, got {k}")
    per_group = experts // g
    if k > sg * per_group:
        raise MoeError(f"options.top_k ({k}) exceeds the experts in the selected groups "
                       f"({sg} groups x {per_group} experts = {sg * per_group})")
    if two and per_group < 2:
        raise MoeError(f"options.group_top_two needs at least 2 experts per group, got {per_group} "
                       f"({experts} experts in {g} groups)")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise MoeError(f"options.scale must be a finite number > 0, got {scale!r}")


def check_tensor(name: str, t, ndim: int | None = None, dtypes=FLOAT_DTYPES, runtime=None) -> None:
    """A kd tensor of one of `dtypes`, of rank `ndim`, on `runtime` (if given)."""
    if not isinstance(t, kd.Tensor):
        raise MoeError(f"{name} must be a kerneldsl tensor, got {type(t).__name__}")
    if ndim is not None and t.ndim != ndim:
        raise MoeError(f"{name} must have {ndim} dimensions, got shape {t.shape}")
    if t.dtype not in dtypes:
        want = ", ".join(d.name.upper() for d in dtypes)
        raise MoeError(f"{name} must be {want}, got {t.dtype.name.upper()}")
    if runtime is not None:
        check_same_runtime(name, t, runtime)


def check_same_runtime(name: str, t, runtime) -> None:
    if t.runtime.device_key != runtime.device_key:
        raise MoeError(f"{name} is on runtime {t.runtime.name!r} but the other tensors are on "
                       f"{runtime.name!r}; move it with .to({runtime.name!r})")


def check_strategy(strategy) -> GroupedStrategy:
    if not isinstance(strategy, GroupedStrategy):
        raise MoeError(f"strategy must be a GroupedStrategy (Scalar, Auto or TensorCore), got {strategy!r}")
    return strategy
