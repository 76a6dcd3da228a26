"""Run a Gated DeltaNet layer's recurrence with rudnn: a prompt through the chunked kernel,
then token-by-token decode through the recurrent one, continuing from the prompt's final
state; check both against a float64 numpy recurrence.

Run:  python examples/gated_delta.py [--runtime cpu|opencl|cuda] [--dtype bf16] [--tokens 100]
"""
import argparse

import numpy as np

import kerneldsl as kd
import rudnn.gated_delta as gd


def numpy_recurrence(q, k, v, beta, g, s, scale):
    """The SPEC §3 recurrence in float64, one step at a time; returns (outputs, final state)."""
    s = s.astype(np.float64).copy()
    out = np.zeros(v.shape)
    for t in range(q.shape[2]):
        s *= np.exp(g[:, :, t])[..., None, None]
        delta = beta[:, :, t, None] * (v[:, :, t] - np.einsum("bhkv,bhk->bhv", s, k[:, :, t]))
        s += k[:, :, t, :, None] * delta[:, :, None, :]
        out[:, :, t] = np.einsum("bhkv,bhk->bhv", s, scale * q[:, :, t])
    return out, s


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", default=None, help="cpu, opencl or cuda (default: $KERNELDSL_RUNTIME or cpu)")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--tokens", type=int, default=100, help="prompt length")
    args = p.parse_args()

    rt = kd.runtime(args.runtime)
    print("runtime:", rt.name, "-", rt.capabilities.device_name)
    rng = np.random.default_rng(0)
    B, H, T, K, V, steps = 2, 4, args.tokens, 32, 48, 4
    n = T + steps
    q = rng.standard_normal((B, H, n, K))
    k = rng.standard_normal((B, H, n, K))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)            # Gated DeltaNet normalises keys (caller's job)
    v = rng.standard_normal((B, H, n, V))
    beta = rng.uniform(0.1, 1.0, (B, H, n))                    # write strength, sigmoid of a projection
    g = -rng.uniform(0.01, 0.5, (B, H, n)).astype(np.float32)  # log decay, always F32
    scale = K ** -0.5

    def part(lo, hi, state):
        t = [rt.tensor(np.ascontiguousarray(a[:, :, lo:hi]), dtype=args.dtype) for a in (q, k, v, beta)]
        return gd.GatedDeltaInput(*t, rt.tensor(np.ascontiguousarray(g[:, :, lo:hi])), state, scale)

    zero = rt.zeros((B, H, K, V), kd.f32)
    prompt = gd.chunk_gated_delta_rule(part(0, T, zero), chunk_size=64)    # chunk-parallel prefill
    outs, state = [prompt.output.numpy()], prompt.final_state
    for t in range(T, n):                                                  # decode: one token a call
        step = gd.gated_delta_rule(part(t, t + 1, state))
        outs.append(step.output.numpy())
        state = step.final_state

    rounded = [rt.tensor(a, dtype=args.dtype).numpy().astype(np.float64) for a in (q, k, v, beta)]
    want, want_state = numpy_recurrence(*rounded, g, np.zeros((B, H, K, V)), scale)
    got = np.concatenate(outs, axis=2).astype(np.float64)
    tol = {"f32": 1e-4, "f16": 1e-2, "bf16": 5e-2}[args.dtype]
    err = np.abs(got - want).max() / np.abs(want).max()
    err_s = np.abs(state.numpy() - want_state).max() / np.abs(want_state).max()
    print(f"prefill T={T} chunked + {steps} decode steps, {args.dtype}: output {got.shape}, max error {err:.1e}; "
          f"final state {state.shape} F32, max error {err_s:.1e} (relative to the largest value)")
    assert err < tol and err_s < tol
    print("ok")


if __name__ == "__main__":
    main()
