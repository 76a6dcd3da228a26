"""Validation for `rudnn.attention`: every rule of SPEC §5 checked before any launch,
turning the call into one `Problem` that every strategy reads the same way."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from kerneldsl.tensor import Tensor

from .options import AttentionModuleOptions, AttentionSetupError

FLOAT_DTYPES = ("f32", "f16", "bf16")
MAX_HEAD_DIM = 1024


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


def _tensor(name: str, x, rank: int = 4) -> Tensor:
    if not isinstance(x, Tensor):
        raise AttentionSetupError(f"{name} must be a kerneldsl tensor, got {type(x).__name__}")
    if x.ndim != rank:
        raise AttentionSetupError(f"{name} must have rank {rank}, got rank {x.ndim} (shape {x.shape})")
    return x


def _broadcast(name: str, x: Tensor, target: tuple) -> Tensor:
    """A view of x with the shape `target`, stride 0 where x has size 1 (SPEC broadcasting)."""
    strides = []
    for axis, (n, want, st) in enumerate(zip(x.shape, target, x.strides)):
        if n == want:
            strides.append(st if want != 1 else 0)
        elif n == 1:
            strides.append(0)
        else:
            raise AttentionSetupError(
                f"{name} of shape {x.shape} does not broadcast to [B, Hq, Sq, Skv] = {list(target)}: axis {axis} "
                f"is {n}, needs {want} or 1")
    return Tensor(x.runtime, x.buffer, target, x.dtype, strides, x.offset)


def _number(name: str, value, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise AttentionSetupError(f"options.{name} must be a number or None, got {value!r}")
    f = float(value)
    if not math.isfinite(f) or (positive and f <= 0):
        need = "a finite number > 0" if positive else "a finite number"
        raise AttentionSetupError(f"options.{name} must be {need}, got {value!r}")
    return f


def validate(query, key, value, mask, attn_bias, options) -> Problem:
    """Check a call against SPEC §5 and §0; raise AttentionSetupError naming the argument."""
    q = _tensor("query", query)
    k = _tensor("key", key)
    v = _tensor("value", value)
    if not isinstance(options, AttentionModuleOptions):
        raise AttentionSetupError(f"options must be an AttentionModuleOptions, got {type(options).__name__}")

    named = [("query", q), ("key", k), ("value", v)]
    if mask is not None:
        named.append(("mask", _tensor("mask", mask)))
    if attn_bias is not None:
        named.append(("attn_bias", _tensor("attn_bias", attn_bias)))
    for name, t in named[1:]:
        if t.runtime.device_key != q.runtime.device_key:
            raise AttentionSetupError(f"{name} is on runtime {t.runtime.name!r} but query is on "
                                      f"{q.runtime.name!r}: every tensor of one call must share a runtime")

    if q.dtype.name not in FLOAT_DTYPES:
        raise AttentionSetupError(f"query must be F32, F16 or BF16, got {q.dtype.name}")
    for name, t in (("key", k), ("value", v)):
        if t.dtype is not q.dtype:
            raise AttentionSetupError(f"{name} is {t.dtype.name} but query is {q.dtype.name}: "
                                      f"query, key and value need one dtype")

    B, Hq, Sq, D = q.shape
    _, Hkv, Skv, _ = k.shape
    if k.shape[0] != B or k.shape[3] != D:
        raise AttentionSetupError(f"key must be [B, Hkv, Skv, D] = [{B}, Hkv, Skv, {D}] to match query "
                                  f"{q.shape}, got {k.shape}")
    if v.shape[:3] != (B, Hkv, Skv):
        raise AttentionSetupError(f"value must be [B, Hkv, Skv, Dv] = [{B}, {Hkv}, {Skv}, Dv] to match key "
                                  f"{k.shape}, got {v.shape}")
    if Hkv == 0 or Hq % Hkv:
        raise AttentionSetupError(f"query heads Hq={Hq} must be a multiple of key/value heads Hkv={Hkv} (>= 1)")
    if not 1 <= D <= MAX_HEAD_DIM:
        raise AttentionSetupError(f"head dimension D must be in [1, {MAX_HEAD_DIM}], got {D}")
    if v.shape[3] > MAX_HEAD_DIM:
        raise AttentionSetupError(f"value head dimension Dv must be at most {MAX_HEAD_DIM}, got {v.shape[3]}")

    target = (B, Hq, Sq, Skv)
    mask_view = bias_view = None
    if mask is not None:
        if mask.dtype.name != "bool":
            raise AttentionSetupError(f"mask must be bool (True = masked out), got {mask.dtype.name}")
        mask_view = _broadcast("mask", mask, target)
    if attn_bias is not None:
        if attn_bias.dtype.name not in FLOAT_DTYPES:
            raise AttentionSetupError(f"attn_bias must be F32, F16 or BF16, got {attn_bias.dtype.name}")
        bias_view = _broadcast("attn_bias", attn_bias, target)

    scale = 1.0 / math.sqrt(D) if options.scale is None else _number("scale", options.scale, positive=False)
    softcap = None if options.softcap is None else _number("softcap", options.softcap, positive=True)
    if not isinstance(options.is_causal, (bool, np.bool_)):
        raise AttentionSetupError(f"options.is_causal must be a bool, got {options.is_causal!r}")
    return Problem(q, k, v, mask_view, bias_view, scale, softcap, bool(options.is_causal))


__all__ = ["Problem", "validate", "FLOAT_DTYPES", "MAX_HEAD_DIM"]
