"""Compile errors point at the user's line with a caret; bad launches fail before compiling;
bounds checks name the tensor and index; nothing passed in is modified."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("errors"), pytest.mark.interpreter]
THIS = os.path.abspath(__file__)


def _line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line and not line.lstrip().startswith("def "):
            return start + i
    raise AssertionError(text)


@kd.kernel
def barrier_in_divergent_if(x: kd.Tensor[kd.f32]):
    if kd.unit_pos_x() < 3:
        kd.sync_cube()


@kd.kernel
def plane_op_in_divergent_loop(x: kd.Tensor[kd.f32]):
    for i in range(kd.unit_pos_x()):
        x[i] = kd.plane_sum(x[i])


@kd.kernel
def type_error(x: kd.Tensor[kd.f32]):
    acc = 0
    acc = x[0]


@kd.kernel
def undefined_name(x: kd.Tensor[kd.f32]):
    x[0] = not_defined_anywhere + 1  # noqa: F821


@kd.kernel
def unsupported(x: kd.Tensor[kd.f32]):
    x[0] = [i for i in range(3)][0]


@kd.kernel
def divergent_break(x: kd.Tensor[kd.f32]):
    for i in range(4):
        if kd.unit_pos_x() == i:
            break
        kd.sync_cube()


CASES = [
    (barrier_in_divergent_if, "kd.sync_cube()", "non-uniform control flow"),
    (plane_op_in_divergent_loop, "kd.plane_sum(x[i])", "non-uniform control flow"),
    (type_error, "acc = x[0]", "cannot assign a f32 value to acc"),
    (undefined_name, "not_defined_anywhere", "'not_defined_anywhere' is not defined"),
    (unsupported, "[i for i in range(3)]", "unsupported expression"),
    (divergent_break, "break", "break/continue under non-uniform control flow"),
]


@pytest.mark.parametrize("kernel,line_text,message", CASES, ids=[c[0].__name__ for c in CASES])
def test_compile_errors_point_at_user_line(runtime, kernel, line_text, message):
    x = runtime.zeros(8, "f32")
    with pytest.raises(kd.CompileError) as info:
        kernel[1, 8](x)
    err = info.value
    text = str(err)
    assert message in text
    assert err.loc.filename == THIS
    assert err.loc.line == _line_of(kernel.fn, line_text)
    assert line_text.split("(")[0] in text and "^" in text  # the source line and a caret


@kd.kernel
def typed(x: kd.Tensor[kd.f32, 1], n: kd.i32, mode: kd.Const[int]):
    i = kd.unit_pos_x()
    if i < n:
        x[i] = x[i] + mode


def test_bad_launch_arguments(runtime):
    x = runtime.zeros(4, "f32")
    with pytest.raises(TypeError, match=r"typed\(\) takes 3 arguments \(x, n, mode\), got 2"):
        typed[1, 4](x, 4)
    with pytest.raises(TypeError, match="argument x must be f32, got i32"):
        typed[1, 4](runtime.zeros(4, "i32"), 4, 0)
    with pytest.raises(ValueError, match="argument x must have 1 dims, got 2"):
        typed[1, 4](runtime.zeros((2, 2), "f32"), 4, 0)
    with pytest.raises(TypeError, match="argument x must be a kd tensor"):
        typed[1, 4](np.zeros(4, np.float32), 4, 0)
    with pytest.raises(TypeError, match="argument n must be an integer"):
        typed[1, 4](x, 4.5, 0)
    with pytest.raises(ValueError, match="does not fit in i32"):
        typed[1, 4](x, 2 ** 40, 0)
    with pytest.raises(ValueError, match="block"):
        typed[1, 0](x, 4, 0)
    with pytest.raises(ValueError, match="units"):
        typed[1, 10 ** 6](x, 4, 0)


def test_mixed_runtimes_name_both():
    a = kd.runtime("cpu").zeros(4, "f32")

    class FakeRuntime:
        name = "opencl:7"
        device_key = "opencl:7"
    b = kd.runtime("cpu").zeros(4, "f32")
    b.runtime = FakeRuntime()
    with pytest.raises(ValueError, match="'opencl:7'.*'cpu'"):
        typed.launch(1, 4, b, 4, 0, runtime=a.runtime)


@kd.kernel
def reads_past_end(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], n: kd.i32):
    i = kd.unit_pos_x()
    out[i] = x[i + n]


def test_bounds_check_names_tensor_and_index(runtime, monkeypatch):
    x = runtime.tensor(np.arange(8, dtype=np.float32))
    out = runtime.zeros(8, "f32")
    monkeypatch.setenv("KERNELDSL_BOUNDS_CHECK", "1")
    with pytest.raises(kd.OutOfBoundsError, match=r"index (8|9|1[0-1]) is out of bounds for tensor 'x'"):
        reads_past_end[1, 8](x, out, 4)
    reads_past_end[1, 4](x, out, 4)          # in bounds: fine with checks on
    np.testing.assert_array_equal(out.numpy()[:4], [4, 5, 6, 7])


@kd.kernel
def reads_only(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    i = kd.unit_pos_x()
    out[i] = x[i] * 2.0


def test_inputs_are_not_modified(runtime, rng):
    a = rng.standard_normal(16).astype(np.float32)
    keep = a.copy()
    x = runtime.tensor(a)
    out = runtime.zeros(16, "f32")
    reads_only[1, 16](x, out)
    np.testing.assert_array_equal(x.numpy(), keep)
    np.testing.assert_array_equal(a, keep)


def test_kernel_print(runtime, capfd):
    if runtime.capabilities.backend not in ("cpu", "interpreter"):
        pytest.skip("captured printf output is checked on the cpu and interpreter runtimes (GPU printf goes to the "
                    "driver's stdout buffer, flushed at synchronisation)")

    @kd.kernel
    def hello(x: kd.Tensor[kd.f32]):
        i = kd.unit_pos_x()
        kd.print("unit {} sees {} (100%)", i, x[i])

    hello[1, 2](runtime.tensor(np.array([1.5, -2.0], np.float32)))
    runtime.synchronize()
    out = capfd.readouterr().out
    assert "unit 0 sees 1.5 (100%)" in out and "unit 1 sees -2 (100%)" in out


def test_dump_writes_generated_source(tmp_path):
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.dirname(THIS)!r})
        import numpy as np, kerneldsl as kd
        from test_dsl_errors import reads_only
        rt = kd.runtime("cpu")
        reads_only[1, 4](rt.tensor(np.ones(4, np.float32)), rt.zeros(4, "f32"))
    """)
    env = dict(os.environ, KERNELDSL_DUMP=str(tmp_path), KERNELDSL_CACHE=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    dumped = list(tmp_path.glob("reads_only.*.ll"))
    assert dumped and "define void @\"kd_main\"" in dumped[0].read_text()


@kd.kernel
def reused_loop_variable(out: kd.Tensor[kd.i32], n: kd.i32):
    s = 0
    for j in range(n):
        for j in range(2):  # Python keeps the outer loop going; a counter would not
            s += j
    out[0] = s


@kd.kernel
def assigned_loop_variable(out: kd.Tensor[kd.i32], n: kd.i32):
    s = 0
    for j in range(n):
        j += 1
        s += j
    out[0] = s


def test_loop_variable_reused_or_assigned_inside_its_loop_is_refused(runtime):
    """A run-time loop counts with its variable: rebinding it inside the loop would change the
    iteration (an inner loop reusing the name never ended), so both are compile errors."""
    out = runtime.zeros(1, "i32")
    with pytest.raises(kd.CompileError, match=r"reuses the variable of the enclosing loop at line \d+"):
        reused_loop_variable[1, 1](out, 3)
    with pytest.raises(kd.CompileError, match=r"j is the variable of the loop at line \d+"):
        assigned_loop_variable[1, 1](out, 3)
