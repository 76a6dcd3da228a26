"""A first tour of kerneldsl: tensors on a runtime, a custom kernel, reading results back.

Run:  python examples/quickstart.py            (KERNELDSL_RUNTIME=opencl|cuda to switch)
"""
import numpy as np

import kerneldsl as kd


@kd.kernel
def scaled_softplus(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], beta: kd.f32, n: kd.i32):
    """out = log(1 + exp(beta * x)) / beta, one element per unit."""
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        z = beta * x[i]
        out[i] = (kd.max(z, 0.0) + kd.log1p(kd.exp(-kd.abs(z)))) / beta


def main():
    print("available runtimes:", kd.available_runtimes())
    rt = kd.runtime()                       # $KERNELDSL_RUNTIME or "cpu"
    print("using", rt, "-", rt.capabilities.device_name, "- plane size", rt.plane_dim)

    host = np.linspace(-6, 6, 1_000_003, dtype=np.float32)
    x = rt.tensor(host)                     # upload
    out = rt.empty(x.shape, kd.f32)
    print("x:", x)

    block = 256
    grid = (x.shape[0] + block - 1) // block
    scaled_softplus[grid, block](x, out, 2.0, x.shape[0])

    got = out.numpy()                       # waits for the runtime, copies to the host
    ref = np.logaddexp(0.0, 2.0 * host.astype(np.float64)) / 2.0
    err = np.max(np.abs(got - ref))
    print(f"softplus of {x.shape[0]} values on {grid} cubes of {block} units: max abs error {err:.2e}")

    view = x.reshape(1000, -1) if x.shape[0] % 1000 == 0 else x[:1000]
    print("a view, no copy:", view[::100].shape, "first values", view[:3].numpy())
    assert err < 1e-5
    print("ok")


if __name__ == "__main__":
    main()
