"""`Autotune` for attention: time the valid strategies once per (device, dtype, shape
bucket, options) key through the shared `kerneldsl.autotune` tuner, which persists the
choice beside the kernel cache and prints progress while tuning."""
from __future__ import annotations

from kerneldsl import autotune

from . import flash_mma
from .options import AttentionStrategy
from .problem import AttentionSetupError, Problem

FAMILY = "attention"


def candidates(p: Problem) -> dict:
    """name -> (strategy, tiling) of the strategies worth timing for p. The matrix-primitive
    strategy joins only where the primitive is native: an emulation is there for
    correctness and never beats FlashUnit on the same hardware."""
    out = {"FlashUnit": (AttentionStrategy.FlashUnit, None), "Fallback": (AttentionStrategy.Fallback, None)}
    if p.runtime.capabilities.mma_native:
        tiling = flash_mma.default_tiling(p)
        try:
            flash_mma.check(p, tiling)
        except AttentionSetupError:
            pass  # unavailable here (F32 input, no primitive for the dtype, tiles too large)
        else:
            out = {"FlashBlackboxAccelerated": (AttentionStrategy.FlashBlackboxAccelerated, tiling), **out}
    return out


def key(p: Problem) -> tuple:
    """What decides which strategy is fastest: device, dtype, power-of-two buckets of the
    sizes, the exact head dimensions (kernels specialise on them) and the options."""
    return (autotune.device_key(p.runtime), p.dtype.name, autotune.bucket(p.B * p.Hq), autotune.bucket(p.group),
            autotune.bucket(p.Sq), autotune.bucket(p.Skv), p.D, p.Dv, p.mask is not None, p.bias is not None,
            p.softcap is not None, p.causal)


def label(p: Problem) -> str:
    """The short description shown while tuning, e.g. 'bf16, Sq~4096, Skv~4096, D=128'."""
    extras = [name for name, on in (("mask", p.mask is not None), ("bias", p.bias is not None),
                                    ("softcap", p.softcap is not None), ("causal", p.causal)) if on]
    dv = f", Dv={p.Dv}" if p.Dv != p.D else ""
    return (f"{p.dtype.name}, B*H~{autotune.bucket(p.B * p.Hq)}, Sq~{autotune.bucket(p.Sq)}, "
            f"Skv~{autotune.bucket(p.Skv)}, D={p.D}{dv}" + "".join(f", {e}" for e in extras))


def choose(p: Problem, run) -> tuple:
    """(strategy, tiling) for p: remembered, or timed now with `run(strategy, tiling)`."""
    table = candidates(p)
    rt = p.runtime
    name = autotune.tuner(FAMILY).choose(
        key(p), {n: autotune.waited(rt, lambda st=st: run(*st)) for n, st in table.items()}, label(p))
    return table[name]
