"""Argument checks of rudnn.normalization (SPEC §0, §1), all run before any launch.
Each failure raises NormalizationError naming the argument, what it got and what is needed."""
from __future__ import annotations

import math
import numbers

import kerneldsl as kd

from ..errors import RudnnError

FLOAT_DTYPES = (kd.f32, kd.f16, kd.bf16)


class NormalizationError(RudnnError):
    """Bad arguments to a rudnn.normalization function."""


def _describe(t) -> str:
    if isinstance(t, kd.Tensor):
        return f"a {t.dtype.name} tensor of shape {list(t.shape)}"
    return f"a {type(t).__name__}"


def check_input(fn: str, name: str, t) -> int:
    """An F32/F16/BF16 tensor with a last axis W > 0; returns W."""
    if not isinstance(t, kd.Tensor):
        raise NormalizationError(f"{fn}: {name} must be a kerneldsl tensor, got {_describe(t)}")
    if t.dtype not in FLOAT_DTYPES:
        raise NormalizationError(f"{fn}: {name} must be F32, F16 or BF16, got {t.dtype.name}")
    if t.ndim == 0 or t.shape[-1] == 0:
        raise NormalizationError(f"{fn}: {name} needs a last axis of length W > 0, got shape {list(t.shape)}")
    return t.shape[-1]


def check_f32(fn: str, name: str, t, shape: tuple, what: str):
    """An F32 tensor of exactly `shape` (gamma/beta: [W]; mean/rstd: input shape without W)."""
    if not isinstance(t, kd.Tensor):
        raise NormalizationError(f"{fn}: {name} must be an F32 tensor of shape {list(shape)} ({what}), "
                                 f"got {_describe(t)}")
    if t.dtype is not kd.f32 or tuple(t.shape) != tuple(shape):
        raise NormalizationError(f"{fn}: {name} must be an F32 tensor of shape {list(shape)} ({what}), "
                                 f"got {_describe(t)}")


def check_like(fn: str, name: str, t, ref: kd.Tensor, ref_name: str):
    """An F32/F16/BF16 tensor with the shape of `ref` (grad vs input)."""
    if not isinstance(t, kd.Tensor) or t.dtype not in FLOAT_DTYPES or tuple(t.shape) != tuple(ref.shape):
        raise NormalizationError(f"{fn}: {name} must be an F32, F16 or BF16 tensor of {ref_name}'s shape "
                                 f"{list(ref.shape)}, got {_describe(t)}")


def check_epsilon(fn: str, eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps <= 0:
        raise NormalizationError(f"{fn}: epsilon must be a finite number > 0, got {eps!r}")
    return float(eps)


def check_runtimes(fn: str, named: dict):
    """Every tensor on the runtime of the first one; the message names both runtimes."""
    items = [(n, t) for n, t in named.items() if t is not None]
    first_name, first = items[0]
    for n, t in items[1:]:
        if t.runtime.device_key != first.runtime.device_key:
            raise NormalizationError(f"{fn}: {n} is on runtime {t.runtime.name!r} but {first_name} is on "
                                     f"{first.runtime.name!r}; all tensors of one call must share a runtime")
