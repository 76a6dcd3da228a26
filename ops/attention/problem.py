"""Validation for `rudnn.attention`: every rule of SPEC §5 checked before any launch,
turning the call into one `Problem` that every strategy reads the same way, or raising
AttentionSetupError naming the argument."""
from __future__ import annotations

import math
from dataclasses import dataclass

import kerneldsl as kd
from kerneldsl.tensor import Tensor

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks
from .options import AttentionModuleOptions, AttentionStrategy, BlackboxAcceleratedStrategy

MAX_HEAD_DIM = 1024


class AttentionSetupError(RudnnError):
    """Bad input to `rudnn.attention.attention`, or a strategy this runtime cannot run."""


CHECKS = Checks(AttentionSetupError)


@dataclass(frozen=True)
class Problem:
    """A validated call. `mask`/`bias` are views broadcast to [B, Hq, Sq, Skv] (stride 0 on
    broadcast axes) or None; `scale` is resolved; shapes are named as in SPEC §5."""

    q: Tensor
    k: Tensor
    v: Tensor
    mask: Tensor | None
    bias: Tensor | None
    scale: float
    softcap: float | None
    causal: bool

    @property
    def runtime(self):
        return self.q.runtime

    @property
    def dtype(self):
        return self.q.dtype

    @property
    def B(self) -> int:
        return self.q.shape[0]

    @property
    def Hq(self) -> int:
        return self.q.shape[1]

    @property
    def Hkv(self) -> int:
        return self.k.shape[1]

    @property
    def Sq(self) -> int:
        return self.q.shape[2]

    @property
    def Skv(self) -> int:
        return self.k.shape[2]

    @property
    def D(self) -> int:
        return self.q.shape[3]

    @property
    def Dv(self) -> int:
        return self.v.shape[3]

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA): query head h reads KV head h // group."""
        return self.Hq // self.Hkv

    @property
    def out_shape(self) -> tuple:
        return (self.B, self.Hq, self.Sq, self.Dv)


def _broadcast(name: str, x: Tensor, target: tuple) -> Tensor:
    """A view of x with the shape `target`, stride 0 where x has size 1 (SPEC broadcasting)."""
    strides = []
    for axis, (n, want, st) in enumerate(zip(x.shape, target, x.strides)):
        if n == want:
            strides.append(st if want != 1 else 0)
        elif n == 1:
            strides.append(0)
        else:
            CHECKS.fail(
                f"{name} of shape {x.shape} does not broadcast to [B, Hq, Sq, Skv] = {list(target)}: axis {axis} "
                f"is {n}, needs {want} or 1")
    return Tensor(x.runtime, x.buffer, target, x.dtype, strides, x.offset)


def validate(query, key, value, mask, attn_bias, options) -> Problem:
    """Check a call against SPEC §5 and §0; raise AttentionSetupError naming the argument."""
    q = CHECKS.tensor("query", query, rank=4)
    k = CHECKS.tensor("key", key, rank=4)
    v = CHECKS.tensor("value", value, rank=4)
    CHECKS.instance("options", options, AttentionModuleOptions)
    if mask is not None:
        CHECKS.tensor("mask", mask, rank=4)
    if attn_bias is not None:
        CHECKS.tensor("attn_bias", attn_bias, rank=4)
    CHECKS.same_runtime({"query": q, "key": k, "value": v, "mask": mask, "attn_bias": attn_bias})

    CHECKS.dtype("query", q, FLOAT_DTYPES)
    for name, t in (("key", k), ("value", v)):
        if t.dtype is not q.dtype:
            CHECKS.fail(f"{name} is {t.dtype.name} but query is {q.dtype.name}: query, key and value need one dtype")

    B, Hq, Sq, D = q.shape
    _, Hkv, Skv, _ = k.shape
    if k.shape[0] != B or k.shape[3] != D:
        CHECKS.fail(f"key must be [B, Hkv, Skv, D] = [{B}, Hkv, Skv, {D}] to match query {q.shape}, got {k.shape}")
    if v.shape[:3] != (B, Hkv, Skv):
        CHECKS.fail(f"value must be [B, Hkv, Skv, Dv] = [{B}, {Hkv}, {Skv}, Dv] to match key {k.shape}, "
                    f"got {v.shape}")
    if Hkv == 0 or Hq % Hkv:
        CHECKS.fail(f"query heads Hq={Hq} must be a multiple of key/value heads Hkv={Hkv} (>= 1)")
    if not 1 <= D <= MAX_HEAD_DIM:
        CHECKS.fail(f"head dimension D must be in [1, {MAX_HEAD_DIM}], got {D}")
    if v.shape[3] > MAX_HEAD_DIM:
        CHECKS.fail(f"value head dimension Dv must be at most {MAX_HEAD_DIM}, got {v.shape[3]}")

    target = (B, Hq, Sq, Skv)
    mask_view = bias_view = None
    if mask is not None:
        CHECKS.dtype("mask", mask, (kd.bool,), "bool (True = masked out)")
        mask_view = _broadcast("mask", mask, target)
    if attn_bias is not None:
        CHECKS.dtype("attn_bias", attn_bias, FLOAT_DTYPES)
        bias_view = _broadcast("attn_bias", attn_bias, target)

    scale = 1.0 / math.sqrt(D) if options.scale is None else CHECKS.number("options.scale", options.scale)
    softcap = None if options.softcap is None else CHECKS.number("options.softcap", options.softcap, positive=True)
    causal = CHECKS.boolean("options.is_causal", options.is_causal)
    return Problem(q, k, v, mask_view, bias_view, scale, softcap, causal)


def resolve_strategy(strategy) -> tuple:
    """(AttentionStrategy member, tiling or None) for the `strategy` argument."""
    CHECKS.instance("strategy", strategy, (AttentionStrategy, BlackboxAcceleratedStrategy),
                    "an AttentionStrategy member or a BlackboxAcceleratedStrategy")
    if isinstance(strategy, BlackboxAcceleratedStrategy):
        return AttentionStrategy.FlashBlackboxAccelerated, strategy
    return strategy, None


__all__ = ["AttentionSetupError", "Problem", "validate", "resolve_strategy", "FLOAT_DTYPES", "MAX_HEAD_DIM"]
