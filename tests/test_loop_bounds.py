"""kerneldsl/loop_bounds.py: a kernel is argument-bound when no loop's trip count, condition or
early exit depends on memory contents, directly or through variables, branches or values
exchanged between units; the cpu runtime runs only such launches on the calling thread."""
import pytest

import kerneldsl as kd
from kerneldsl import loop_bounds

pytestmark = pytest.mark.feature("launch_plan")


@kd.kernel
def straight(x: kd.Tensor[kd.f32], n: kd.i32):
    if kd.unit_pos_x() < n:
        x[kd.unit_pos_x()] = x[0] * 2.0


@kd.kernel
def scalar_loop(x: kd.Tensor[kd.f32], n: kd.i32):
    acc = x[0]
    for k in range(n * 2 + x.shape[0]):
        acc = acc * 0.5 + x[k % x.shape[0]]  # loads in the body: fine, the count is the arguments'
    x[0] = acc


@kd.kernel
def while_on_a_scalar(x: kd.Tensor[kd.f32], n: kd.i32):
    k = n
    while k > 0:
        k = k - 1
        x[0] = x[0] + 1.0


@kd.kernel
def loaded_bound(x: kd.Tensor[kd.f32], off: kd.Tensor[kd.i32]):
    m = off[1] - off[0]
    m2 = m * 2  # through two variables
    for k in range(m2):
        x[0] = x[0] + 1.0


@kd.kernel
def while_on_memory(x: kd.Tensor[kd.f32], n: kd.i32):
    while x[0] == 0.0:
        x[1] = x[1] + 1.0


@kd.kernel
def branch_sets_the_bound(x: kd.Tensor[kd.f32], n: kd.i32):
    m = n
    if x[0] > 0.0:
        m = 1000  # a constant, but chosen by memory
    for k in range(m):
        x[1] = x[1] + 1.0


@kd.kernel
def break_on_memory(x: kd.Tensor[kd.f32], n: kd.i32):
    for k in range(n):
        if x[k] > 0.0:
            break
        x[k] = 1.0


@kd.kernel
def bound_from_a_plane(x: kd.Tensor[kd.f32], n: kd.i32):
    m = kd.plane_max(kd.i32(kd.unit_pos_x()))
    for k in range(m):
        x[0] = x[0] + 1.0


@kd.kernel
def bound_set_later(x: kd.Tensor[kd.f32], n: kd.i32):
    m = n
    for k in range(3):
        for j in range(m):  # m holds data from the second round on
            x[0] = x[0] + 1.0
        m = kd.i32(x[0])


def _bound(kernel, *args) -> bool:
    rt = kd.runtime("cpu")
    return loop_bounds.argument_bound(kernel.specialize(rt, *args, block=32).ir()[0])


@pytest.mark.parametrize("kernel, want", [(straight, True), (scalar_loop, True), (while_on_a_scalar, True),
                                          (while_on_memory, False), (branch_sets_the_bound, False),
                                          (break_on_memory, False), (bound_from_a_plane, False),
                                          (bound_set_later, False)])
def test_argument_bound_kernels(kernel, want):
    x = kd.TensorType(kd.f32, 1)
    assert _bound(kernel, x, kd.i32) is want


def test_a_trip_count_read_from_memory_is_not_argument_bound():
    assert _bound(loaded_bound, kd.TensorType(kd.f32, 1), kd.TensorType(kd.i32, 1)) is False


def test_the_fact_reaches_the_binary_and_survives_the_disk_cache():
    from kerneldsl.pipeline import LaunchInfo
    rt = kd.runtime("cpu")
    x = rt.zeros(32)
    scalar_loop[1, 32](x, 2)
    while_on_memory[1, 1](rt.tensor([1.0, 0.0]), 0)
    for kernel, want in ((scalar_loop, True), (while_on_memory, False)):
        info = next(iter(kernel._plans.values())).binary.info
        assert info.argument_bound is want
        assert LaunchInfo.from_json(info.to_json()).argument_bound is want
