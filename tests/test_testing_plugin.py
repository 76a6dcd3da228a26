"""kd.testing, the harness users test their own kernels with: the pytest plugin (the
`runtime` fixture, KERNELDSL_RUNTIMES, the feature x runtime matrix, no reasonless skips),
assert_close, assert_runtimes_agree, the example test file of docs/testing.md, and the plugin
found by pytest after a plain (non-editable) install of the wheel."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.testing import RuntimeChoice, RuntimeSelectionError, runtime_choices

ROOT = Path(__file__).resolve().parent.parent
pytestmark = kd.testing.feature("kd.testing")
# pytester's in-process runs drop the modules first imported inside them; pyopencl (a nanobind
# extension) aborts the process when imported a second time, so it is imported here, once, before
# any of them (a run of this file alone, or first in a pytest-xdist worker, would crash otherwise)
kd.available_runtimes()

ONE_TEST_PER_RUNTIME = """
import kerneldsl as kd

def test_sees_its_runtime(runtime, request):
    choice = request.node.callspec.id
    assert runtime is kd.runtime(runtime.name, **({"plane_dim": 8} if choice == "cpu-p8" else {}))
    assert runtime.plane_dim == (8 if choice == "cpu-p8" else runtime.plane_dim)
"""


def _ids(result) -> list:
    return re.findall(r"test_sees_its_runtime\[(.+?)\] PASSED", result.stdout.str())


# ----------------------------------------------------------------------------- choices
def test_choices_cover_each_runtime_with_the_cpu_twice():
    ids = [c.id for c in runtime_choices("", available=["cpu", "opencl", "opencl:1", "cuda"])]
    assert ids == ["cpu", "cpu-p8", "opencl", "opencl:1", "cuda"]
    assert runtime_choices("", available=["cpu"])[1] == RuntimeChoice("cpu-p8", "cpu", {"plane_dim": 8})


def test_narrowing_keeps_the_callers_order_and_takes_test_ids():
    avail = ["cpu", "opencl", "opencl:1"]
    assert [c.id for c in runtime_choices("opencl:1, cpu", available=avail)] == ["opencl:1", "cpu", "cpu-p8"]
    assert [c.id for c in runtime_choices("cpu-p8", available=avail)] == ["cpu-p8"]
    assert [c.id for c in runtime_choices("OpenCL:0", available=avail)] == ["opencl"]
    with pytest.raises(RuntimeSelectionError, match=r"asks for cuda, opencl:2, but this machine has cpu, cpu-p8"):
        runtime_choices("cuda,opencl:2", available=avail)


# ----------------------------------------------------------------------------- the plugin
def test_fixture_runs_each_test_once_per_runtime(pytester, monkeypatch):
    monkeypatch.delenv("KERNELDSL_RUNTIMES", raising=False)
    pytester.makepyfile(ONE_TEST_PER_RUNTIME)
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    expected = [c.id for c in runtime_choices("")]
    result.assert_outcomes(passed=len(expected))
    assert _ids(result) == expected and expected[:2] == ["cpu", "cpu-p8"]


def test_kerneldsl_runtimes_narrows_the_fixture(pytester, monkeypatch):
    pytester.makepyfile(ONE_TEST_PER_RUNTIME)
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cpu-p8")
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1)
    assert _ids(result) == ["cpu-p8"]
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cuda:7")
    result = pytester.runpytest("-v")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # a runtime asked for and missing is never a skip
    result.stderr.fnmatch_lines(["*KERNELDSL_RUNTIMES asks for cuda:7, but this machine has cpu, cpu-p8*"])


def test_a_test_parametrizing_runtime_itself_keeps_its_own_values(pytester, monkeypatch):
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cpu")
    pytester.makepyfile("""
        import pytest
        @pytest.mark.parametrize("runtime", ["a", "b", "c"])
        def test_own(runtime):
            assert runtime in "abc"
    """)
    pytester.runpytest().assert_outcomes(passed=3)


def test_variants_sampled_runs_every_case_on_cpu_and_the_first_on_cpu_p8(pytester, monkeypatch):
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cpu")
    pytester.makepyfile("""
        import pytest, kerneldsl as kd
        @kd.testing.variants_sampled
        @pytest.mark.parametrize("case", [1, 2, 3])
        def test_sweep(runtime, case):
            assert case in (1, 2, 3)
        @pytest.mark.parametrize("case", [1, 2])
        def test_unmarked(runtime, case):
            pass
    """)
    result = pytester.runpytest("-v", "-rs")
    result.assert_outcomes(passed=3 + 1 + 4, skipped=2)
    result.stdout.fnmatch_lines(["*test_sweep?cpu-p8-1? PASSED*", "*test_sweep?cpu-p8-2? SKIPPED*",
                                 "*sampled: on cpu-p8 this test runs its first case only*"])


MATRIX_FILE = """
import pytest, kerneldsl as kd

@kd.testing.feature("vectors")
def test_vectors(runtime):
    pass

@kd.testing.feature("atomics")
def test_atomics(runtime):
    if runtime.plane_dim == 8:
        pytest.skip("not at plane size 8")

@kd.testing.feature("atomics")
def test_atomics_fails_on_the_cpu(runtime):
    assert runtime.name != "cpu" or runtime.plane_dim == 8

def test_plain(runtime):             # no marker: the module names the row
    pass

def test_unrelated():               # neither a runtime nor a marker: not in the matrix
    pass

@kd.testing.feature("host")
def test_on_the_host():             # a marker and no runtime: the "-" column
    pass
"""


def test_the_matrix_has_a_row_per_feature_and_a_column_per_runtime(pytester, monkeypatch):
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cpu")
    pytester.makepyfile(test_user=MATRIX_FILE)
    result = pytester.runpytest()
    result.assert_outcomes(passed=8, skipped=1, failed=1)
    text = result.stdout.str()
    table = text[text.index("feature x runtime matrix"):].splitlines()[1:6]
    assert [line.split() for line in table] == [
        ["feature", "cpu", "cpu-p8", "-"],
        ["atomics", "FAIL", "pass", "."],          # cpu-p8: one skip, one pass; the pass is kept
        ["host", ".", ".", "pass"],
        ["user", "pass", "pass", "."],
        ["vectors", "pass", "pass", "."],
    ]
    assert "unrelated" not in text[text.index("feature x runtime matrix"):]
    result.stdout.fnmatch_lines(["cpu: *"])  # the device behind each column, after the table


def test_a_run_without_kerneldsl_tests_prints_no_matrix(pytester):
    pytester.makepyfile("def test_other_project():\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "feature x runtime matrix" not in result.stdout.str()


def test_a_skip_without_a_reason_fails(pytester, monkeypatch):
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cpu-p8")
    pytester.makepyfile("""
        import pytest
        def test_silent(runtime):
            pytest.skip()
        @pytest.mark.skip
        def test_unmarked_skip(runtime):
            pass
        def test_said(runtime):
            pytest.skip("no fp64 here")
    """)
    result = pytester.runpytest("-ra")
    result.assert_outcomes(failed=1, skipped=1, errors=1)  # the marker's skip happens in setup
    result.stdout.fnmatch_lines(["*test_silent[[]cpu-p8[]]: skipped without a reason*",
                                 "*SKIPPED*no fp64 here*"])


# ----------------------------------------------------------------------------- assert_close
def test_assert_close_tolerances_follow_the_dtype():
    want = np.linspace(1, 2, 64)
    kd.testing.assert_close((want * (1 + 1e-3)).astype(np.float16), want)       # within f16's bound
    with pytest.raises(AssertionError, match=r"rtol=2e-05"):
        kd.testing.assert_close((want * (1 + 1e-3)).astype(np.float32), want)    # not within f32's
    bf16 = kd.runtime("cpu").tensor(want.astype(np.float32), dtype="bf16")
    kd.testing.assert_close(bf16, want)
    kd.testing.assert_close(want + 0.5, want, atol=0.6)                          # given tolerances win
    with pytest.raises(AssertionError, match=r"x: 1 of 3 elements differ .* got 4, expected 5"):
        kd.testing.assert_close(np.array([1, 2, 4], np.int32), np.array([1, 2, 5]), name="x")


def test_assert_close_matches_nan_and_inf_exactly():
    a = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    kd.testing.assert_close(a, a.copy())
    for bad, index in (([1.0, 0.0, np.inf, -np.inf], 1), ([1.0, np.nan, -np.inf, -np.inf], 2),
                       ([np.nan, np.nan, np.inf, -np.inf], 0), ([1.0, np.nan, np.inf, 1e38], 3)):
        with pytest.raises(AssertionError, match=rf"1 of 4 elements .* worst at index \({index},\)"):
            kd.testing.assert_close(a, np.array(bad, np.float32), atol=1e30)


def test_assert_close_names_the_worst_element_and_shape_mismatches():
    got = np.zeros((3, 4), np.float32)
    want = got.copy()
    want[1, 2], want[2, 0] = 0.5, 2.0
    with pytest.raises(AssertionError) as err:
        kd.testing.assert_close(got, want, name="out")
    assert str(err.value) == ("out: 2 of 12 elements differ beyond rtol=2e-05, atol=1e-06 (dtype float32); "
                              "worst at index (2, 0): got 0.0, expected 2.0 "
                              "(|diff| 2, relative 1)")
    with pytest.raises(AssertionError, match=r"shape \(3, 4\) where \(4, 3\) was expected"):
        kd.testing.assert_close(got, want.T)


# ----------------------------------------------------------------------------- assert_runtimes_agree
@kd.kernel
def write_plane_dim(out: kd.Tensor[kd.i32], x: kd.Tensor[kd.f32]):
    """Gives a different answer at each plane size: the harness must catch it."""
    t = kd.unit_pos_x()
    out[t] = kd.PLANE_DIM + kd.i32(x[t] * 0.0)


@kd.kernel
def double(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        out[i] = x[i] * 2.0


def test_a_mismatch_names_runtime_tensor_and_worst_element(monkeypatch):
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cpu")
    with pytest.raises(AssertionError) as err:
        kd.testing.assert_runtimes_agree(write_plane_dim, 1, 16, np.zeros(16, np.int32), np.ones(16, np.float32))
    assert str(err.value) == ("runtimes disagree:\n  runtime cpu-p8, out (against cpu): 16 of 16 elements differ "
                              "beyond rtol=0, atol=0 (dtype int32); worst at index (0,): got 8, expected 32 "
                              "(|diff| 24, relative 0.75)")


def test_agreeing_runtimes_return_every_output(monkeypatch):
    host = np.arange(100, dtype=np.float32)
    results = kd.testing.assert_runtimes_agree(double, 1, 128, host, np.zeros(100, np.float32), 100,
                                               reference={"out": host * 2})
    assert list(results) == [c.id for c in runtime_choices()]
    for outputs in results.values():  # every runtime chosen (KERNELDSL_RUNTIMES may narrow them)
        assert set(outputs) == {"x", "out"}
        np.testing.assert_array_equal(outputs["out"], host * 2)
    with pytest.raises(AssertionError, match=r"runtime cpu, out \(against the reference\): 1 of 100"):
        kd.testing.assert_runtimes_agree(double, 1, 128, host, np.zeros(100, np.float32), 100,
                                         reference={"out": np.where(host == 7, 0, host * 2)}, runtimes=["cpu"])


def test_a_function_of_tensors_is_compared_by_its_outputs():
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    results = kd.testing.assert_runtimes_agree(lambda x: (x.T.contiguous(), x[1:]), host,
                                               reference=[host.T, host[1:]], runtimes=["cpu"])
    assert set(results["cpu"]) == {"arg 0", "output[0]", "output[1]"}
    with pytest.raises(ValueError, match=r"reference names \['out'\], but the outputs are"):
        kd.testing.assert_runtimes_agree(lambda x: x, host, reference={"out": host}, runtimes=["cpu"])
    with pytest.raises(RuntimeSelectionError, match="needs two, or a reference"):
        kd.testing.assert_runtimes_agree(lambda x: x, host, runtimes=["cpu"])


def test_importing_kerneldsl_does_not_import_pytest():
    code = "import sys, kerneldsl as kd; assert 'pytest' not in sys.modules; kd.testing.assert_close; " \
           "assert 'pytest' not in sys.modules; kd.testing.feature('x'); assert 'pytest' in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


# ----------------------------------------------------------------------------- the user's view
def test_the_documented_example_file_passes(pytester):
    """examples/test_my_kernel.py, the file docs/testing.md tells users to copy, passes here."""
    pytester.makepyfile(test_my_kernel=(ROOT / "examples" / "test_my_kernel.py").read_text())
    result = pytester.runpytest()
    n_runtimes = len(runtime_choices())
    result.assert_outcomes(passed=4 * n_runtimes + 2)
    result.stdout.fnmatch_lines(["*feature x runtime matrix*", "row_scale *pass*"])
    assert "test_my_kernel.py" in (ROOT / "docs" / "testing.md").read_text()


USER_TEST_FILE = '''
import numpy as np
import kerneldsl as kd

@kd.kernel
def add_one(x: kd.Tensor[kd.f32], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        x[i] = x[i] + 1.0

@kd.testing.feature("add_one")
def test_add_one(runtime):
    x = runtime.tensor(np.arange(40, dtype=np.float32))
    add_one[1, 64](x, 40)
    kd.testing.assert_close(x, np.arange(40) + 1.0)

def test_installed_not_the_checkout():
    print("KERNELDSL_FROM", kd.__file__)
'''


def _setuptools_recent_enough() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


def test_a_user_file_outside_the_tree_gets_the_fixture_after_a_wheel_install(tmp_path):
    """Build the wheel, install it (not editable) into a fresh venv, and run pytest on a user's
    file in a folder outside the checkout: the entry point alone must bring the fixture.

    The venv is a plain one (no --system-site-packages): from inside our own venv that flag
    would expose the base interpreter's packages, not ours, so the deps would be missing or
    of other versions anyway. pip installs the wheel with its dependencies and pytest from the
    configured index, as a user's `pip install rudnn` would. The wheel is built without build
    isolation where this interpreter already has setuptools>=77 (saves a download), else with it.
    Skipped (with the reason) only where a venv cannot be created."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELDSL_", "PYTEST_", "PYTHON"))}
    env["KERNELDSL_CACHE"] = str(tmp_path / "cache")
    venv_dir = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv_dir)], capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        pytest.skip(f"cannot create a venv here: {made.stderr.strip()[-300:]}")
    py = str(venv_dir / "bin" / "python")

    def run(*cmd, cwd=tmp_path):
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
        assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return out.stdout

    isolation = ["--no-build-isolation"] if _setuptools_recent_enough() else []
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "dist", ".kdcache", "*.egg-info",
                                                                 "__pycache__", ".pytest_cache", ".whl"))
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp_path / "dist"), str(source))
    wheel, = (tmp_path / "dist").glob("rudnn-*.whl")
    installed = subprocess.run([py, "-m", "pip", "install", "-q", str(wheel), "pytest"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=400)
    if installed.returncode != 0 and re.search(r"Failed to establish a new connection|name resolution|"
                                               r"Could not find a version", installed.stderr):
        pytest.skip("no package index is reachable from this machine to install the wheel's dependencies")
    assert installed.returncode == 0, installed.stderr[-3000:]
    user = tmp_path / "user_project"
    user.mkdir()
    (user / "test_user_kernel.py").write_text(USER_TEST_FILE)
    out = run(py, "-m", "pytest", "-v", "-s", "-p", "no:cacheprovider", "test_user_kernel.py", cwd=user)
    assert re.findall(r"test_add_one\[(.+?)\] PASSED", out)[:2] == ["cpu", "cpu-p8"]
    assert re.search(r"KERNELDSL_FROM (\S+)", out).group(1).startswith(str(venv_dir))
    assert re.search(r"^add_one +pass +pass", out, re.M), out


def test_a_test_that_writes_past_a_buffer_fails_under_the_guard(pytester, monkeypatch):
    """With $KERNELDSL_GUARD on, the runtime fixture fails a test that left a write past the
    end of a buffer, naming it; the same test passes with the guard off."""
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cpu-p8")
    pytester.makepyfile("""
        import numpy as np

        def test_stray_write(runtime):
            t = runtime.empty((4,), "f32")
            runtime._upload(t.buffer, 16, np.zeros(1, np.uint8))
    """)
    monkeypatch.setenv("KERNELDSL_GUARD", "1")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)  # the test ran; its teardown failed it
    result.stdout.fnmatch_lines(["*(4,) f32 was written past its end*"])
    result.stdout.fnmatch_lines(["*writes_past_a_buffer_fails_under_the_guard*FAIL*"])  # the matrix's cell
    monkeypatch.delenv("KERNELDSL_GUARD")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
