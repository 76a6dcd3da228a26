"""Attention with rudnn: grouped-query heads, a padding mask, causal decoding, a bias, and
a choice of strategy — checked against a few lines of numpy.

Run:  python examples/attention.py            (KERNELDSL_RUNTIME=opencl|cuda to switch)
"""
import numpy as np

import kerneldsl as kd
import rudnn
from rudnn.attention import AttentionModuleOptions, AttentionStrategy, attention


def numpy_attention(q, k, v, hidden, scale):
    """softmax(scale·q·kᵀ with hidden keys at -inf)·v, per head; KV heads shared by groups."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.where(hidden, -np.inf, scale * q @ k.transpose(0, 1, 3, 2))
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def main():
    rt = kd.runtime()  # $KERNELDSL_RUNTIME or "cpu"
    rng = np.random.default_rng(0)
    B, Hq, Hkv, Sq, Skv, D = 2, 8, 2, 5, 37, 64  # 4 query heads share each KV head (GQA)
    q = rng.standard_normal((B, Hq, Sq, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    lengths = [37, 30]                                              # the second sequence is padded
    pad = np.arange(Skv)[None, None, None, :] >= np.array(lengths)[:, None, None, None]   # [B, 1, 1, Skv]

    # the last Sq queries of each sequence, causal: bottom-right aligned, so query i sees keys
    # up to i + (Skv - Sq); the mask is bool, True = hidden, broadcast over heads and queries
    opts = AttentionModuleOptions(is_causal=True)
    out = attention(rt.tensor(q), rt.tensor(k), rt.tensor(v), mask=rt.tensor(pad), options=opts)
    causal = np.arange(Skv)[None, :] > np.arange(Sq)[:, None] + (Skv - Sq)
    want = numpy_attention(q, k, v, pad | causal, 1 / np.sqrt(D))
    err = np.abs(out.numpy() - want).max()
    print(f"causal GQA attention {out.shape} on {rt.name} (Autotune): max abs error {err:.1e}")
    assert err < 1e-4

    # every strategy takes every option; a float bias is added to the scores after masking
    bias = rt.tensor(rng.standard_normal((1, Hq, Sq, Skv)).astype(np.float32))
    for strategy in (AttentionStrategy.FlashUnit, AttentionStrategy.Fallback):
        o = attention(rt.tensor(q), rt.tensor(k), rt.tensor(v), attn_bias=bias,
                      options=AttentionModuleOptions(scale=0.1, softcap=30.0), strategy=strategy)
        print(f"  {strategy.name:9s} with bias, scale 0.1, softcap 30: mean |out| {np.abs(o.numpy()).mean():.4f}")

    # half precision: the matrix-primitive strategy (tensor cores on CUDA) takes F16/BF16
    qb, kb, vb = (rt.tensor(x, "bf16") for x in (q, k, v))
    ob = attention(qb, kb, vb, options=opts, strategy=AttentionStrategy.FlashBlackboxAccelerated)
    want_b = numpy_attention(*(x.numpy().astype(np.float64) for x in (qb, kb, vb)), causal, 1 / np.sqrt(D))
    print(f"bf16 FlashBlackboxAccelerated: max abs error {np.abs(ob.numpy().astype(np.float64) - want_b).max():.1e}")

    try:  # F32 input has no matrix-primitive path: a clear error, never a silent fallback
        attention(rt.tensor(q), rt.tensor(k), rt.tensor(v), strategy=AttentionStrategy.FlashBlackboxAccelerated)
    except rudnn.AttentionSetupError as e:
        print("as expected:", e)
    print("ok")


if __name__ == "__main__":
    main()
