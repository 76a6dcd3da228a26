"""rudnn.attention: scaled dot-product attention (SPEC §5).

    out = rudnn.attention.attention(q, k, v, mask=None, attn_bias=None,
                                    options=AttentionModuleOptions(), strategy=AttentionStrategy.Autotune)

q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv] -> [B, Hq, Sq, Dv] in q's dtype.
Scores are scale·q·kᵀ, optionally soft-capped, masked (bool, True = hidden), causal
(bottom-right aligned) and biased, then softmaxed over keys in F32; a row with no visible
key gives zeros. Every strategy accepts every option and gives the same results up to
rounding; `Autotune` times the valid ones once per shape bucket and remembers the winner.
"""
from __future__ import annotations

from kerneldsl.replay import replayable

from . import fallback, flash_mma, flash_unit, tuning
from .options import AttentionModuleOptions, AttentionStrategy, BlackboxAcceleratedStrategy
from .problem import AttentionSetupError, Problem, resolve_strategy, validate

_DEFAULT_OPTIONS = AttentionModuleOptions()


_DUMMIES: dict = {}


def _dummies(rt):
    """Stand-ins passed for an absent mask / bias (the kernels never read them)."""
    d = _DUMMIES.get(id(rt))
    if d is None or d[0] is not rt:
        d = _DUMMIES[id(rt)] = (rt, rt.zeros((1, 1, 1, 1), "bool"), rt.zeros((1, 1, 1, 1), "f32"))
    return d[1], d[2]


def run_strategy(p: Problem, strategy: AttentionStrategy, tiling, out) -> None:
    """Run one concrete strategy (already checked) into `out`."""
    dummy_mask, dummy_bias = _dummies(p.runtime)
    if strategy is AttentionStrategy.FlashUnit:
        flash_unit.run(p, out, dummy_mask, dummy_bias)
    elif strategy is AttentionStrategy.Fallback:
        fallback.run(p, out, dummy_mask, dummy_bias)
    else:
        flash_mma.run(p, out, dummy_mask, dummy_bias, tiling)


@replayable
def attention(query, key, value, mask=None, attn_bias=None, options: AttentionModuleOptions = _DEFAULT_OPTIONS,
              strategy=AttentionStrategy.Autotune):
    """Scaled dot-product attention; see the module docstring and SPEC §5."""
    p = validate(query, key, value, mask, attn_bias, options)
    strategy, tiling = resolve_strategy(strategy)
    if strategy is AttentionStrategy.FlashBlackboxAccelerated:
        tiling = tiling or flash_mma.default_tiling(p)
        flash_mma.check(p, tiling)
    rt = p.runtime
    if 0 in p.out_shape:
        return rt.empty(p.out_shape, p.dtype)
    if p.Skv == 0:  # no keys at all: every row is fully hidden
        return rt.zeros(p.out_shape, p.dtype)
    out = rt.empty(p.out_shape, p.dtype)
    if strategy is AttentionStrategy.Autotune:
        strategy, tiling = tuning.choose(p, lambda s, til: run_strategy(p, s, til, out))
    run_strategy(p, strategy, tiling, out)
    return out


__all__ = ["attention", "AttentionModuleOptions", "AttentionStrategy", "BlackboxAcceleratedStrategy",
           "AttentionSetupError"]
