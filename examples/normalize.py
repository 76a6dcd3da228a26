"""Normalise a batch of activations with rudnn on the runtime you pick, and check the
result against numpy.

Run:  python examples/normalize.py [--runtime cpu|opencl|cuda] [--dtype bf16] [--rows 64 --width 4096]
"""
import argparse

import numpy as np

import kerneldsl as kd
import rudnn.normalization as norm


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", default=None, help="cpu, opencl or cuda (default: $KERNELDSL_RUNTIME or cpu)")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--width", type=int, default=4096)
    args = p.parse_args()

    rt = kd.runtime(args.runtime)
    print("runtime:", rt.name, "-", rt.capabilities.device_name)
    rng = np.random.default_rng(0)
    batch = rng.standard_normal((args.rows, args.width)).astype(np.float32) * 3 + 1
    gamma = rng.uniform(0.5, 1.5, args.width).astype(np.float32)   # gamma and beta are always F32
    beta = rng.standard_normal(args.width).astype(np.float32) * 0.1

    x = rt.tensor(batch, dtype=args.dtype)                     # activations in the chosen dtype
    g, b = rt.tensor(gamma), rt.tensor(beta)
    y, mean, rstd = norm.layer_norm_with_stats(x, g, b)        # y has x's dtype; mean, rstd are F32
    r = norm.rms_norm(x, g)
    s = norm.softmax_last_axis(x)

    xs = x.numpy().astype(np.float64)                          # what the kernels saw (rounded to dtype)
    mu, sd = xs.mean(1, keepdims=True), xs.std(1, keepdims=True)
    want = {
        "layer_norm": (xs - mu) / np.sqrt(sd ** 2 + 1e-5) * gamma + beta,
        "rms_norm": xs / np.sqrt((xs ** 2).mean(1, keepdims=True) + 1e-6) * gamma,
        "softmax": np.exp(xs - xs.max(1, keepdims=True)) / np.exp(xs - xs.max(1, keepdims=True)).sum(1, keepdims=True),
    }
    got = {"layer_norm": y, "rms_norm": r, "softmax": s}
    tol = {"f32": 1e-4, "f16": 4e-3, "bf16": 3e-2}[args.dtype]
    for name, t in got.items():
        err = np.abs(t.numpy().astype(np.float64) - want[name]).max() / np.abs(want[name]).max()
        print(f"{name:10s} {t.dtype.name} {t.shape}: max error {err:.1e} (relative to the largest value)")
        assert err < tol, name
    print(f"row 0: mean {mean.numpy()[0]:.4f}, rstd {rstd.numpy()[0]:.4f}; softmax rows sum to "
          f"{s.numpy().astype(np.float64).sum(1).min():.4f}..{s.numpy().astype(np.float64).sum(1).max():.4f}")
    print("ok")


if __name__ == "__main__":
    main()
