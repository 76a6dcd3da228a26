"""Resize a batch of images with rudnn.interpolation and warp it with rudnn.grid_sample on
the runtime you pick, then check: a 2× bilinear upsampling against a numpy formula, an
identity grid that must give the input back, and both backward passes against the
adjoint identity <f(x), g> = <x, f'(g)>.

Run:  python examples/resample.py [--runtime cpu|opencl|cuda] [--size 32]
"""
import argparse

import numpy as np

import kerneldsl as kd
import rudnn.grid_sample as gs
import rudnn.interpolation as interp


def bilinear_x2_reference(img):
    """2× bilinear upsampling (align_corners=False) along the last two axes, in numpy."""
    for axis in (2, 3):
        n = img.shape[axis]
        src = np.clip((np.arange(2 * n) + 0.5) / 2 - 0.5, 0, None)
        i0 = np.floor(src).astype(int)
        i1 = np.minimum(i0 + 1, n - 1)
        lam = (src - i0).reshape([-1 if a == axis else 1 for a in range(4)])
        img = np.take(img, i0, axis) * (1 - lam) + np.take(img, i1, axis) * lam
    return img


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", default=None, help="cpu, opencl or cuda (default: $KERNELDSL_RUNTIME or cpu)")
    p.add_argument("--size", type=int, default=32)
    args = p.parse_args()
    rt = kd.runtime(args.runtime)
    print("runtime:", rt.name, "-", rt.capabilities.device_name)
    rng = np.random.default_rng(0)
    s = args.size
    images = rng.standard_normal((2, 3, s, s)).astype(np.float32)
    x = rt.tensor(images)

    bilinear = interp.InterpolateOptions(interp.InterpolateMode.Linear)
    up = interp.interpolate(x, (2 * s, 2 * s), bilinear)
    err = np.abs(up.numpy() - bilinear_x2_reference(images.astype(np.float64))).max()
    print(f"bilinear x2 {list(up.shape)}: max error {err:.1e}")
    assert err < 1e-5

    # an identity grid with align_corners=True samples every pixel centre exactly
    lin = np.linspace(-1, 1, s, dtype=np.float32)
    grid = np.stack(np.meshgrid(lin, lin, indexing="xy"), axis=-1)[None].repeat(2, 0)
    opts = gs.GridSampleOptions(align_corners=True)
    same = gs.grid_sample(x, rt.tensor(grid), opts)
    err = np.abs(same.numpy() - images).max()
    print(f"grid_sample with an identity grid: max error {err:.1e}")
    assert err < 1e-5

    # backward passes: <f(x), g> == <x, df(g)> for the linear maps x -> f(x)
    g_up = rng.standard_normal(up.shape).astype(np.float32)
    dx = interp.interpolate_backward(x, rt.tensor(g_up), (2 * s, 2 * s), bilinear).numpy()
    lhs, rhs = float((up.numpy() * g_up).sum()), float((images * dx).sum())
    print(f"interpolate adjoint: {lhs:.4f} vs {rhs:.4f}")
    assert abs(lhs - rhs) < 1e-3 * max(1.0, abs(lhs))
    warp = rng.uniform(-1.1, 1.1, (2, s, s, 2)).astype(np.float32)
    warped = gs.grid_sample(x, rt.tensor(warp))
    g_w = rng.standard_normal(warped.shape).astype(np.float32)
    dx, dgrid = gs.grid_sample_backward(x, rt.tensor(warp), rt.tensor(g_w))
    lhs, rhs = float((warped.numpy() * g_w).sum()), float((images * dx.numpy()).sum())
    print(f"grid_sample adjoint: {lhs:.4f} vs {rhs:.4f}; grid gradient {list(dgrid.shape)}")
    assert abs(lhs - rhs) < 1e-3 * max(1.0, abs(lhs))
    print("ok")


if __name__ == "__main__":
    main()
