"""Launch plans (kerneldsl/launch_plan.py): a repeated launch with one argument signature skips
the checks its signature already proved, so a change of dtype, rank, inner stride, runtime or
`kd.Const` value must give another specialisation, and every check a plan leaves to each call
(grid, scalar values, read-only tensors) must fail exactly as on a first launch. Also the
scalar packers that replace numpy in launches, the cpu runtime's handoff of small launches
to its polling worker, and the OpenCL runtime's reuse of unchanged kernel arguments."""
from __future__ import annotations

import math
import struct
import threading
import time

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.pipeline import scalar_bits, scalar_packer, scalar_value, scalar_value_packer


@kd.kernel
def add_rows(x: kd.Tensor, out: kd.Tensor, k: kd.f32, rows: kd.i32, cols: kd.i32, SHIFT: kd.Const[int]):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < rows * cols:
        r = i // cols
        c = i % cols
        out[r, c] = x[r, c] * k + SHIFT


@kd.kernel
def fill(out: kd.Tensor[kd.f32], value: kd.f32, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        out[i] = value


@kd.kernel
def spin_then_fill(out: kd.Tensor[kd.f32], iters: kd.i32, n: kd.i32):
    i = kd.unit_pos_x()
    acc = kd.f32(0)
    for _ in range(iters):
        acc = acc * 0.5 + 1.0
    if i < n:
        out[i] = acc


def _run_add(rt, x_np, k=2.0, shift=1, view=None):
    x = rt.tensor(x_np)
    if view is not None:
        x = view(x)
    rows, cols = x.shape
    out = rt.zeros((rows, cols), x.dtype)
    add_rows[math.ceil(rows * cols / 32), 32](x, out, k, rows, cols, shift)
    return out.numpy()


def test_a_changed_dtype_rank_stride_or_const_specialises_again(runtime):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    for _ in range(3):  # a plan for [3, 4] f32, contiguous, SHIFT=1
        np.testing.assert_array_equal(_run_add(runtime, a), a * 2 + 1)
    np.testing.assert_array_equal(_run_add(runtime, a.astype(np.int32), k=2.0), a * 2 + 1)  # dtype
    np.testing.assert_array_equal(_run_add(runtime, a, shift=5), a * 2 + 5)  # kd.Const value
    wide = np.arange(24, dtype=np.float32).reshape(3, 8)
    got = _run_add(runtime, wide, view=lambda t: t[:, ::2])  # inner stride 2: another specialisation
    np.testing.assert_array_equal(got, wide[:, ::2] * 2 + 1)
    np.testing.assert_array_equal(_run_add(runtime, a), a * 2 + 1)  # and back to the first plan


def test_a_const_of_another_type_is_another_specialisation(runtime):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(_run_add(runtime, a, shift=1), a * 2 + 1)
    with pytest.raises(TypeError, match="SHIFT"):  # 1 == True == 1.0, but only the int is a Const[int]
        _run_add(runtime, a, shift=True)
    with pytest.raises(TypeError, match="SHIFT"):
        _run_add(runtime, a, shift=1.0)
    with pytest.raises(TypeError, match="hashable"):
        _run_add(runtime, a, shift=[1])


def _message(fn) -> tuple:
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


BAD_CALLS = {  # what a plan leaves to each call, done wrong
    "grid too large": lambda rt, x: fill[rt.capabilities.max_grid[0] + 1, 32](x, 1.0, 64),
    "float grid": lambda rt, x: fill[2.0, 32](x, 1.0, 64),
    "grid of four axes": lambda rt, x: fill[(1, 1, 1, 1), 32](x, 1.0, 64),
    "int out of range": lambda rt, x: fill[2, 32](x, 1.0, 1 << 40),
    "bool for an int": lambda rt, x: fill[2, 32](x, 1.0, True),
    "string for a float": lambda rt, x: fill[2, 32](x, "1", 64),
    "array for a float": lambda rt, x: fill[2, 32](x, np.ones(2), 64),
    "read-only tensor": lambda rt, x: fill[2, 32](_readonly(rt), 1.0, 64),
    "tensor of another runtime": lambda rt, x: fill[2, 32](x, 1.0, 64, runtime=_other(rt)),
    "missing argument": lambda rt, x: fill[2, 32](x, 1.0),
}


def _readonly(rt):
    """A tensor of the signature of the good launches whose memory may not be written."""
    t = rt.zeros(64)
    t.buffer.readonly = True
    return t


def _other(rt):
    return kd.runtime("opencl") if rt.kind == "cpu" and "opencl" in kd.available_runtimes() else \
        (kd.runtime("cpu") if rt.kind != "cpu" else None)


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_what_a_plan_leaves_open_fails_as_on_a_first_launch(runtime, case):
    if case == "tensor of another runtime" and _other(runtime) is None:
        pytest.skip("needs a second runtime with other memory (opencl beside cpu)")
    x = runtime.zeros(64)
    fill.forget_binaries()
    first = _message(lambda: BAD_CALLS[case](runtime, x))  # no plan yet: every check runs
    for _ in range(3):
        fill[2, 32](x, 1.0, 64)
    assert fill._plans, "the good launches made a plan"
    assert _message(lambda: BAD_CALLS[case](runtime, x)) == first
    np.testing.assert_array_equal(x.numpy(), 1.0)


def test_a_plan_is_per_runtime(runtime):
    cpu8 = kd.runtime("cpu", plane_dim=8)
    for rt in (runtime, cpu8, runtime):
        x = rt.zeros(40)
        fill[2, 32](x, 3.0, 40)
        np.testing.assert_array_equal(x.numpy(), 3.0)
    tensor_runtimes = {part for key in fill._plans for part in key if isinstance(part, kd.Runtime)}
    assert {runtime, cpu8} <= tensor_runtimes


def test_cache_clear_drops_plans_and_binaries(runtime):
    x = runtime.zeros(64)
    fill[2, 32](x, 1.0, 64)
    assert fill._plans and fill._binaries
    kd.cache_clear(disk=False)
    assert not fill._plans and not fill._binaries
    before = kd.cache_stats()
    fill[2, 32](x, 2.0, 64)
    after = kd.cache_stats()
    assert after["compiled"] + after["disk_hits"] == before["compiled"] + before["disk_hits"] + 1
    np.testing.assert_array_equal(x.numpy(), 2.0)


def test_plan_hits_count_as_memory_hits(runtime):
    x = runtime.zeros(64)
    fill[2, 32](x, 1.0, 64)
    before = kd.cache_stats()["memory_hits"]
    for _ in range(5):
        fill[2, 32](x, 1.0, 64)
    assert kd.cache_stats()["memory_hits"] == before + 5


def test_empty_grid_launches_nothing_but_checks(runtime):
    x = runtime.zeros(64)
    for _ in range(2):
        fill[0, 32](x, 1.0, 64)
    with pytest.raises(ValueError, match="does not fit in i32"):
        fill[0, 32](x, 1.0, 1 << 40)
    np.testing.assert_array_equal(x.numpy(), 0.0)


# ---------------------------------------------------------------------------- scalar packing
FLOATS = [0.0, -0.0, 1.0, -2.5, 1e-3, 3.4028235e38, 3.5e38, 1e39, -1e39, 65504.0, 65520.0, 7e4, 6e-8, 1e-8, 5.96e-8,
          1e-45, 1.4e-45, 2.0 ** -149, 2.0 ** -150, 1e-310, 1e308, math.inf, -math.inf, math.nan, -math.nan,
          struct.unpack("<d", struct.pack("<Q", 0x7FF4000000000001))[0], 0.1, 1 / 3, 2 ** 53, 2 ** 53 + 1,
          2 ** 60, -(2 ** 53), 3, -7, 0, np.float32(0.1), np.float16(0.5), np.int32(7), np.float64(1e39)]


@pytest.mark.parametrize("dtype", [kd.f32, kd.f64, kd.f16, kd.bf16, kd.boolean, kd.i32, kd.u32, kd.i64, kd.u8])
def test_scalar_packers_match_scalar_bits(dtype):
    pack, value = scalar_packer(dtype), scalar_value_packer(dtype)
    rng = np.random.default_rng(0)  # and doubles across every exponent the narrow types round at
    randoms = [float(m) * 2.0 ** int(e) for m, e in zip(rng.standard_normal(3000), rng.integers(-160, 140, 3000))]
    ints = [0, 1, -1, 255, 256, 2 ** 31 - 1, -(2 ** 31), 2 ** 40, np.int64(-5)]
    values = FLOATS + randoms if dtype.is_float else ints
    if dtype is kd.boolean:
        values = [True, False, np.bool_(True)]
    with np.errstate(over="ignore", invalid="ignore"):
        for v in values:
            assert pack(v) == scalar_bits(dtype, v), v
            got, want = value(v), scalar_value(dtype, v)
            assert type(got) is type(want) and got == want, v


# ---------------------------------------------------------------------------- the cpu handoff
def test_many_small_cpu_launches_from_two_threads():
    rt = kd.runtime("cpu")
    outs = [rt.zeros(40) for _ in range(2)]
    errors = []

    def work(j):
        try:
            for i in range(rt.FAST_WORKER_AFTER + 200):
                fill[2, 32](outs[j], float(i), 40)
                assert outs[j].numpy()[39] == float(i)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    th = threading.Thread(target=work, args=(1,))
    th.start()
    work(0)
    th.join()
    assert not errors, errors


def test_cpu_launches_after_the_worker_parked_and_longer_than_its_polling():
    from kerneldsl.backends.cpu import handoff
    rt = kd.runtime("cpu")
    out = rt.zeros(32)
    for _ in range(rt.FAST_WORKER_AFTER + 1):
        fill[1, 32](out, 1.0, 32)
    assert rt._fast is not None, "small launches of the main thread go to the fast worker by now"
    time.sleep(max(0.05, 20 * handoff.SERVE_SPIN_S))  # the worker has parked by now
    fill[1, 32](out, 2.0, 32)
    np.testing.assert_array_equal(out.numpy(), 2.0)
    t0 = time.perf_counter()
    spin_then_fill[1, 32](out, 20_000_000, 32)  # long enough that the main thread sleeps
    assert time.perf_counter() - t0 > handoff.WAIT_SPIN_S
    np.testing.assert_allclose(out.numpy(), 2.0)


# ---------------------------------------------------------------------------- OpenCL argument reuse
def test_opencl_arguments_are_reset_when_they_change():
    if "opencl" not in kd.available_runtimes():
        pytest.skip("no working OpenCL device on this machine")
    rt = kd.runtime("opencl")
    a, b = rt.zeros(40), rt.zeros(40)
    for target, value, n in ((a, 1.0, 40), (a, 1.0, 40), (b, 2.0, 40), (a, 3.0, 20), (a, 3.0, 20), (b, 4.0, 40)):
        fill[2, 32](target, value, n)
    want_a = np.full(40, 1.0, np.float32)
    want_a[:20] = 3.0
    np.testing.assert_array_equal(a.numpy(), want_a)
    np.testing.assert_array_equal(b.numpy(), 4.0)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="os.fork is POSIX-only")
def test_cpu_launches_in_a_forked_child():
    import os
    rt = kd.runtime("cpu")
    out = rt.zeros(32)
    fill[1, 32](out, 1.0, 32)  # the parent's worker threads exist now; a child has none of them
    pid = os.fork()
    if pid == 0:
        try:
            fill[1, 32](out, 2.0, 32)
            os._exit(0 if (out.numpy() == 2.0).all() else 1)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    np.testing.assert_array_equal(out.numpy(), 1.0)
