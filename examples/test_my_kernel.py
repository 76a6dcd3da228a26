"""Testing your own kernels on every runtime: copy this file next to your code and run
`python -m pytest test_my_kernel.py`. Installing rudnn enabled the kerneldsl pytest plugin,
so `runtime` below is every runtime this machine has (the cpu at plane sizes 32 and 8, each
working OpenCL device, cuda); narrow it with KERNELDSL_RUNTIMES=cpu,opencl. The run ends with
a feature x runtime matrix. docs/testing.md walks through this file.
"""
import numpy as np
import pytest

import kerneldsl as kd
from rudnn import normalization

pytestmark = kd.testing.feature("row_scale")      # this file's row in the matrix


@kd.kernel
def row_scale(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2], BLOCK: kd.Const[int]):
    """Divides each row by its largest magnitude: a strided scan, a plane maximum, then the
    planes of the cube meet in shared memory."""
    row, t = kd.cube_pos_x(), kd.unit_pos_x()
    m = kd.f32(0)
    for i in range(t, x.shape[1], BLOCK):
        m = kd.max(m, kd.abs(x[row, i]))
    m = kd.plane_max(m)
    part = kd.shared(kd.f32, kd.plane_count())
    if kd.plane_elect():
        part[kd.plane_pos()] = m
    kd.sync_cube()
    m = part[0]
    for p in range(1, kd.plane_count()):
        m = kd.max(m, part[p])
    for i in range(t, x.shape[1], BLOCK):
        out[row, i] = x[row, i] / m


def numpy_row_scale(x):
    return x / np.abs(x).max(axis=1, keepdims=True)


@pytest.mark.parametrize("width", [1, 100, 1000])
def test_row_scale_matches_numpy(runtime, width):
    """Runs once per runtime (the test id says which: test_...[cpu-100], [opencl-100], ...)."""
    host = np.random.default_rng(0).standard_normal((5, width)).astype(np.float32)
    x, out = runtime.tensor(host), runtime.empty(host.shape, kd.f32)
    row_scale[host.shape[0], 128](x, out, 128)
    kd.testing.assert_close(out, numpy_row_scale(host))     # f32 tolerances, from out's dtype


def test_row_scale_agrees_on_every_runtime():
    """One call runs the kernel on every runtime from the same host arrays and compares every
    tensor argument afterwards with the first runtime's result and with numpy's."""
    host = np.random.default_rng(1).standard_normal((7, 300)).astype(np.float32)
    kd.testing.assert_runtimes_agree(row_scale, 7, 128, host, np.zeros_like(host), 128,
                                     reference={"out": numpy_row_scale(host)})


def test_an_operator_agrees_on_every_runtime():
    """Any function of tensors works too: here an operator of rudnn, with f16 input (the
    tolerances follow the output's dtype)."""
    host = np.random.default_rng(2).standard_normal((4, 1000)).astype(np.float16)
    wide = host.astype(np.float64)
    expected = np.exp(wide - wide.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    kd.testing.assert_runtimes_agree(normalization.softmax_last_axis, host, reference={"output": expected})


def test_an_infinite_element(runtime):
    """assert_close matches NaN with NaN and an infinity with the same infinity, exactly:
    a row holding -inf scales to [0, NaN, 0, 0] (-inf / inf is NaN)."""
    host = np.array([[1.0, -np.inf, 4.0, 2.0]], np.float32)
    x, out = runtime.tensor(host), runtime.empty(host.shape, kd.f32)
    row_scale[1, 32](x, out, 32)
    with np.errstate(invalid="ignore"):
        kd.testing.assert_close(out, numpy_row_scale(host))
