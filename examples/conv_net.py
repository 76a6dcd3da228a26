"""A small CNN on rudnn.convolution: the forward pass of three convolutions (a 3x3, a
strided depthwise 3x3 and a 1x1) with ReLUs, and one training step's backward pass (the data
and weight gradients of every layer), checked against PyTorch where it is installed and
against a numpy im2col product otherwise.

Run:  python examples/conv_net.py [--runtime cpu|opencl|cuda] [--dtype f32|f16|bf16] [--strategy Direct]
"""
import argparse

import numpy as np

import kerneldsl as kd
from rudnn.convolution import (ConvOptions, ConvStrategy, conv_data_backward, conv_forward,
                               conv_weight_backward)

LAYERS = [  # (weight shape [K, C/groups, kh, kw], options)
    ((16, 3, 3, 3), ConvOptions(padding=1)),
    ((16, 1, 3, 3), ConvOptions(stride=2, padding=1, groups=16)),   # depthwise, stride 2
    ((8, 16, 1, 1), ConvOptions()),                                  # pointwise
]


def relu(t, rt, dtype):
    """ReLU on the host (the example is about the convolutions); returns (tensor, mask)."""
    a = t.numpy().astype(np.float32)
    return rt.tensor(np.maximum(a, 0), dtype=dtype), a > 0


def im2col_conv2d(x, w, opts):
    """numpy reference of one layer (float64): unfold the padded input, one matmul per group."""
    B, C, H, W = x.shape
    K, Cg, kh, kw = w.shape
    s, p, g = opts.stride, opts.padding, opts.groups
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    OH, OW = (H + 2 * p - kh) // s + 1, (W + 2 * p - kw) // s + 1
    cols = np.stack([xp[:, :, i:i + s * OH:s, j:j + s * OW:s] for i in range(kh) for j in range(kw)], 2)
    cols = cols.reshape(B, g, Cg * kh * kw, OH * OW)
    wm = w.astype(np.float64).reshape(g, K // g, Cg * kh * kw)
    return np.einsum("gkr,bgrp->bgkp", wm, cols).reshape(B, K, OH, OW)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", default=None, help="cpu, opencl or cuda (default: $KERNELDSL_RUNTIME or cpu)")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    ap.add_argument("--strategy", default="Autotune", choices=[s.name for s in ConvStrategy])
    args = ap.parse_args()
    rt = kd.runtime(args.runtime)
    dt, strategy = args.dtype, ConvStrategy[args.strategy]
    print("runtime:", rt.name, "-", rt.capabilities.device_name, "| dtype", dt, "| strategy", strategy.name)
    rng = np.random.default_rng(0)
    x = rt.tensor(rng.standard_normal((4, 3, 16, 16)).astype(np.float32), dtype=dt)
    weights = [rt.tensor((rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32), dtype=dt)
               for s, _ in LAYERS]

    acts, masks, h = [x], [], x                        # forward
    for w, (_, opts) in zip(weights, LAYERS):
        y = conv_forward(h, w, None, opts, strategy)
        if len(masks) < len(LAYERS) - 1:
            h, m = relu(y, rt, dt)
            masks.append(m)
            acts.append(h)
        else:
            h = y
    out = h
    print("forward:", " -> ".join(str(list(a.shape)) for a in acts + [out]))

    grad = rt.tensor(out.numpy().astype(np.float32), dtype=dt)   # loss = 0.5 * sum(out^2): dL/dout = out
    grads = [None] * len(LAYERS)
    for i in reversed(range(len(LAYERS))):             # backward
        opts = LAYERS[i][1]
        grads[i] = conv_weight_backward(acts[i], grad, weights[i].shape, opts, strategy)
        if i:
            dx = conv_data_backward(grad, weights[i], acts[i].shape, opts, strategy)
            grad = rt.tensor(dx.numpy().astype(np.float32) * masks[i - 1], dtype=dt)
    print("weight gradients:", ", ".join(str(list(g.shape)) for g in grads))

    tol = {"f32": 1e-4, "f16": 2e-2, "bf16": 8e-2}[dt]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None:                                   # each layer's forward against im2col
        for i, (w, (_, opts)) in enumerate(zip(weights, LAYERS)):
            nxt = acts[i + 1] if i + 1 < len(acts) else out
            want = im2col_conv2d(acts[i].numpy().astype(np.float64), w.numpy().astype(np.float64), opts)
            if i + 1 < len(acts):
                want = np.maximum(want, 0)
            err = np.abs(nxt.numpy().astype(np.float64) - want).max() / np.abs(want).max()
            print(f"layer {i} forward vs numpy im2col: relative error {err:.1e}")
            assert err < tol
    else:
        F = torch.nn.functional
        h = torch.tensor(x.numpy().astype(np.float32), dtype=torch.float64)
        tw = [torch.tensor(w.numpy().astype(np.float32), dtype=torch.float64, requires_grad=True) for w in weights]
        for i, (w, (_, o)) in enumerate(zip(tw, LAYERS)):
            h = F.conv2d(h, w, None, o.stride, o.padding, o.dilation, o.groups)
            if i < len(LAYERS) - 1:
                h = torch.relu(h)
        (0.5 * (h ** 2).sum()).backward()
        checks = [("output", out, h.detach())] + [(f"dL/dw{i}", g, w.grad) for i, (g, w) in enumerate(zip(grads, tw))]
        for name, got, want in checks:
            want = want.numpy()
            err = np.abs(got.numpy().astype(np.float64) - want).max() / np.abs(want).max()
            print(f"{name:8s} vs PyTorch: relative error {err:.1e}")
            assert err < tol, name
    print("ok")


if __name__ == "__main__":
    main()
