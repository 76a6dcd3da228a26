"""The score rule of SPEC §5, written once as a device function so every strategy forms
softmax logits identically: softcap, then mask and causal (-inf), then bias; logits are
returned in log2 units (the kernels use exp2) and keys past the end are hidden."""
from __future__ import annotations

import kerneldsl as kd

LOG2E = 1.4426950408889634


@kd.func
def logit2(s, j, ctx, HAS_MASK, HAS_BIAS, SOFTCAP):
    """s = scale·q·k (f32) of key j for the query described by
    ctx = (mask, bias, b, h, i, lim, skv, softcap, post): keys j > lim are hidden (causal),
    keys j >= skv do not exist (their loads are clamped into range). Returns the logit times
    `post` (log2(e), or 1 when the caller folded log2(e) into the scale: no softcap, no bias)."""
    mask, bias, b, h, i, lim, skv, softcap, post = ctx
    jc = kd.min(j, skv - 1)
    x = s
    if SOFTCAP:
        x = softcap * kd.tanh(x / softcap)
    hidden = j > lim
    if HAS_MASK:
        hidden = hidden | mask[b, h, i, jc]
    x = kd.select(hidden, -kd.inf, x)
    if HAS_BIAS:
        x = x + kd.f32(bias[b, h, i, jc])
    return kd.select(j < skv, x * post, -kd.inf)
