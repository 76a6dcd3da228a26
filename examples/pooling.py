"""The pooling of a small CNN stem and head with rudnn on the runtime you pick: a 3x3
stride-2 max pool with its indices, the backward pass through it, and global average
pooling; each checked against a plain numpy computation.

Run:  python examples/pooling.py [--runtime cpu|opencl|cuda] [--dtype bf16]
"""
import argparse

import numpy as np

import kerneldsl as kd
import rudnn.pooling as pool


def numpy_max_pool(x, k, s, p):
    """[N, C, H, W] -> (max, flat index) over k×k windows, stride s, padding p (-inf pad)."""
    n, c, h, w = x.shape
    padded = np.full((n, c, h + 2 * p, w + 2 * p), -np.inf)
    padded[:, :, p:p + h, p:p + w] = x
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.empty((n, c, oh, ow))
    idx = np.empty((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            win = padded[:, :, i * s:i * s + k, j * s:j * s + k].reshape(n, c, -1)
            a = win.argmax(-1)                                  # the first maximum wins
            out[:, :, i, j] = win.max(-1)
            r, q = a // k + i * s - p, a % k + j * s - p        # back to input coordinates
            idx[:, :, i, j] = r * w + q
    return out, idx


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", default=None, help="cpu, opencl or cuda (default: $KERNELDSL_RUNTIME or cpu)")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    args = p.parse_args()

    rt = kd.runtime(args.runtime)
    print("runtime:", rt.name, "-", rt.capabilities.device_name)
    rng = np.random.default_rng(0)
    x = rt.tensor(rng.standard_normal((2, 8, 15, 15)).astype(np.float32), dtype=args.dtype)
    xs = x.numpy().astype(np.float64)                            # what the kernels see

    out, idx = pool.max_pool2d_with_indices(x, kernel_size=3, stride=2, padding=1)
    want, want_idx = numpy_max_pool(xs, 3, 2, 1)
    assert out.shape == (2, 8, 8, 8) and idx.dtype is kd.i64
    assert np.array_equal(out.numpy().astype(np.float64), want) and np.array_equal(idx.numpy(), want_idx)
    print("max_pool2d 3x3/2:", list(x.shape), "->", list(out.shape))

    grad = rt.tensor(np.ones(out.shape, np.float32), dtype=args.dtype)
    dx = pool.max_pool2d_backward(x, grad, idx, kernel_size=3, stride=2, padding=1)
    counts = np.zeros(xs.size)                                  # how often each element was a maximum
    flat = (np.arange(16)[:, None] * 225 + want_idx.reshape(16, -1)).ravel()
    np.add.at(counts, flat, 1.0)
    assert np.array_equal(dx.numpy().astype(np.float64).ravel(), counts)
    print("max_pool2d_backward: gradient routed to", int((counts > 0).sum()), "maxima")

    gap = pool.adaptive_avg_pool2d(out, 1)                       # global average pooling: [N, C, 1, 1]
    tol = 1e-5 if args.dtype == "f32" else 1e-2
    assert np.allclose(gap.numpy().astype(np.float64), out.numpy().astype(np.float64).mean((2, 3), keepdims=True),
                       rtol=tol, atol=tol)
    print("adaptive_avg_pool2d to 1:", list(gap.shape))
    print("ok")


if __name__ == "__main__":
    main()
