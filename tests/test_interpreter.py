"""The interpreter runtime: results equal numpy's; shared-memory races, reads of unwritten shared
memory, per-axis out-of-bounds accesses and divergent barriers are reported with the kernel's
lines and units; tracebacks and breakpoint() land on the kernel's own lines;
KERNELDSL_INTERPRET=1 routes launches of other runtimes through it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import DivergenceError, SharedMemoryRaceError, UninitializedSharedReadError

pytestmark = pytest.mark.feature("interpreter")


@pytest.fixture
def interp():
    return kd.runtime("interpreter")


def line_of(fn, text: str) -> int:
    """The file line of the first line of kernel `fn`'s source containing `text`."""
    import inspect
    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ----------------------------------------------------------------------------- results
@kd.kernel
def tile_transpose(a: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2], T: kd.Const[int]):
    tx, ty = kd.unit_pos_x(), kd.unit_pos_y()
    r0, c0 = kd.cube_pos_y() * T, kd.cube_pos_x() * T
    tile = kd.shared(kd.f32, (T, T))
    tile[ty, tx] = a[r0 + ty, c0 + tx]
    kd.sync_cube()
    out[c0 + ty, r0 + tx] = tile[tx, ty]


@kd.kernel
def plane_sums(x: kd.Tensor[kd.i32], out: kd.Tensor[kd.i32], scan: kd.Tensor[kd.i32]):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    v = x[i]
    out[i] = kd.plane_sum(v)
    scan[i] = kd.plane_exclusive_sum(v)


def test_available_and_named():
    assert "interpreter" in kd.available_runtimes()
    rt = kd.runtime("interpreter", plane_dim=8)
    assert rt.plane_dim == 8 and rt.capabilities.interpreted and not rt.capabilities.mma_native
    assert repr(rt) == "kd.runtime('interpreter', plane_dim=8)"
    with pytest.raises(ValueError, match="plane_dim"):
        kd.runtime("interpreter", plane_dim=3)


def test_results_equal_numpy(interp, rng):
    a = rng.standard_normal((8, 12)).astype(np.float32)
    out = interp.zeros((12, 8))
    tile_transpose[(3, 2), (4, 4)](interp.tensor(a), out, 4)
    np.testing.assert_array_equal(out.numpy(), a.T)


@pytest.mark.parametrize("plane", [4, 32])
def test_plane_operations_at_the_runtime_plane_size(plane, rng):
    rt = kd.runtime("interpreter", plane_dim=plane)
    x = rng.integers(-100, 100, 64).astype(np.int32)
    out, scan = rt.zeros(64, "i32"), rt.zeros(64, "i32")
    plane_sums[2, 32](rt.tensor(x), out, scan)
    planes = x.reshape(-1, plane)
    np.testing.assert_array_equal(out.numpy(), np.repeat(planes.sum(1), plane))
    np.testing.assert_array_equal(scan.numpy(), (np.cumsum(planes, 1) - planes).reshape(-1))


def test_int32_wraps_and_division_truncates(interp):
    @kd.kernel
    def arith(x: kd.Tensor[kd.i32], out: kd.Tensor[kd.i32]):
        i = kd.unit_pos_x()
        out[i * 3] = x[i] * 65536
        out[i * 3 + 1] = x[i] // 7
        out[i * 3 + 2] = x[i] % 7
    x = np.array([40000, -40000, -15, 15], np.int32)
    out = interp.zeros(12, "i32")
    arith[1, 4](interp.tensor(x), out)
    got = out.numpy().reshape(4, 3)
    np.testing.assert_array_equal(got[:, 0], (x.astype(np.int64) * 65536).astype(np.int32))
    np.testing.assert_array_equal(got[:, 1], np.trunc(x / 7).astype(np.int32))
    np.testing.assert_array_equal(got[:, 2], np.fmod(x, 7))


# ----------------------------------------------------------------------------- races
@kd.kernel
def racy_reverse(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], SYNC: kd.Const[bool]):
    t = kd.unit_pos_x()
    n = kd.cube_dim_x()
    buf = kd.shared(kd.f32, 8)
    buf[t] = x[t]                        # the write
    if SYNC:
        kd.sync_cube()
    out[t] = buf[n - 1 - t]              # the read


def test_race_names_both_lines_and_units(interp):
    x = interp.tensor(np.arange(8, dtype=np.float32))
    out = interp.zeros(8)
    with pytest.raises(SharedMemoryRaceError) as e:
        racy_reverse[1, 8](x, out, False)
    msg = str(e.value)
    write, read = line_of(racy_reverse, "# the write"), line_of(racy_reverse, "# the read")
    assert f"{__file__}:{write}" in msg and f"{__file__}:{read}" in msg, msg
    # units run one after another up to a split point: unit 3 reads buf[4] before unit 4 writes it
    assert "unit 3 (unit_pos (3, 0, 0)) of cube (0, 0, 0) read it" in msg, msg
    assert "unit 4 (unit_pos (4, 0, 0)) of cube (0, 0, 0) wrote it" in msg, msg
    assert "racy_reverse" in msg and "buf[4]" in msg, msg


def test_a_barrier_between_removes_the_race(interp):
    x = interp.tensor(np.arange(8, dtype=np.float32))
    out = interp.zeros(8)
    racy_reverse[1, 8](x, out, True)
    np.testing.assert_array_equal(out.numpy(), np.arange(8)[::-1])


@kd.kernel
def write_write(out: kd.Tensor[kd.f32]):
    t = kd.unit_pos_x()
    acc = kd.shared(kd.f32, 1)
    acc[0] = 1.0 * t                     # every unit writes slot 0
    kd.sync_cube()
    out[t] = acc[0]


def test_two_writers_race(interp):
    with pytest.raises(SharedMemoryRaceError, match=r"unit 0 .* wrote it .* unit 1 .* wrote it"):
        write_write[1, 4](interp.zeros(4))


@kd.kernel
def reads_unwritten(out: kd.Tensor[kd.f32]):
    t = kd.unit_pos_x()
    buf = kd.shared(kd.f32, 16)
    buf[t] = 1.0
    kd.sync_cube()
    out[t] = buf[t + 8]                  # slots 8..15 were never written


def test_unwritten_shared_read_is_reported(interp):
    with pytest.raises(UninitializedSharedReadError) as e:
        reads_unwritten[1, 8](interp.zeros(8))
    line = line_of(reads_unwritten, "never written")
    assert f"{__file__}:{line}" in str(e.value) and "buf[8]" in str(e.value) and "unit 0" in str(e.value)


@kd.kernel
def atomic_count(out: kd.Tensor[kd.i32]):
    t = kd.unit_pos_x()
    c = kd.shared(kd.i32, 1)
    if t == 0:
        c[0] = 0
    kd.sync_cube()
    kd.atomic_add(c, 0, 1)               # atomics of many units on one slot are no race
    kd.sync_cube()
    if t == 0:
        out[0] = c[0]


def test_atomics_are_not_races(interp):
    out = interp.zeros(1, "i32")
    atomic_count[1, 16](out)
    assert out.numpy()[0] == 16


# ----------------------------------------------------------------------------- bounds and divergence
@kd.kernel
def read_row(a: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32], i: kd.i32):
    out[0] = a[0, i]                     # the access


def test_out_of_bounds_per_axis(interp):
    a = interp.tensor(np.zeros((4, 3), np.float32))
    with pytest.raises(kd.OutOfBoundsError) as e:
        read_row[1, 1](a, interp.zeros(1), 5)   # a[0, 5] would read a[1, 2] without per-axis checks
    msg = str(e.value)
    assert "index 5 is out of bounds for axis 1 of tensor 'a', whose extent is 3 (shape (4, 3))" in msg, msg
    assert f"{__file__}:{line_of(read_row, '# the access')}" in msg and "unit 0" in msg and "read_row" in msg


@kd.kernel
def shared_2d(out: kd.Tensor[kd.f32], j: kd.i32):
    t = kd.unit_pos_x()
    grid = kd.shared(kd.f32, (2, 4))
    grid[t % 2, j] = 1.0
    kd.sync_cube()
    out[t] = grid[t % 2, 0]


def test_out_of_bounds_per_axis_of_a_shared_array(interp):
    shared_2d[1, 2](interp.zeros(2), 0)
    with pytest.raises(kd.OutOfBoundsError, match=r"index 4 is out of bounds for axis 1 of shared array 'grid', "
                                                  r"whose extent is 4 \(shape \(2, 4\)\)"):
        shared_2d[1, 2](interp.zeros(2), 4)


def test_traceback_points_at_the_kernel_line(interp):
    a = interp.tensor(np.zeros((4, 3), np.float32))
    with pytest.raises(kd.OutOfBoundsError) as e:
        read_row[1, 1](a, interp.zeros(1), 5)
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(e.value.__traceback__)]
    assert (__file__, line_of(read_row, "# the access")) in frames, frames


@kd.kernel
def flag_barrier(flag: kd.Tensor[kd.i32]):
    t = kd.unit_pos_x()
    if t == 3:
        flag[0] = 1                      # a global-memory race the analysis cannot see:
    if flag[0] == 0:                     # a uniform load, so a uniform branch to it
        kd.sync_cube()                   # the barrier


def test_barrier_reached_by_some_units_is_an_error(interp):
    with pytest.raises(DivergenceError) as e:
        flag_barrier[1, 4](interp.zeros(1, "i32"))
    assert str(e.value).startswith("flag_barrier: cube (0, 0, 0) cannot continue: units 0-2 wait at "
                                   f"kd.sync_cube() at {__file__}:{line_of(flag_barrier, '# the barrier')}; "
                                   "unit 3 has finished"), str(e.value)


def test_tensors_of_another_runtime_are_refused(interp):
    with pytest.raises(ValueError, match="runtime 'cpu'.*'interpreter'"):
        read_row[1, 1](kd.runtime("cpu").zeros((4, 3)), interp.zeros(1), 0, runtime=interp)


# ----------------------------------------------------------------------------- debugging
@kd.kernel
def with_breakpoint(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    i = kd.unit_pos_x()
    doubled = x[i] * 2.0
    breakpoint()                         # stop here
    out[i] = doubled


def test_breakpoint_stops_in_the_kernel_frame(interp, monkeypatch):
    seen = []

    def hook(*args, **kwargs):
        frame = sys._getframe(1)
        seen.append((frame.f_code.co_filename, frame.f_lineno, int(frame.f_locals["i"]),
                     float(frame.f_locals["doubled"])))
    monkeypatch.setattr(sys, "breakpointhook", hook)
    out = interp.zeros(3)
    with_breakpoint[1, 3](interp.tensor(np.array([1, 2, 3], np.float32)), out)
    line = line_of(with_breakpoint, "# stop here")
    assert seen == [(__file__, line, 0, 2.0), (__file__, line, 1, 4.0), (__file__, line, 2, 6.0)]
    np.testing.assert_array_equal(out.numpy(), [2, 4, 6])


def test_breakpoint_is_dropped_by_compiled_runtimes(monkeypatch):
    monkeypatch.setattr(sys, "breakpointhook", lambda *a, **k: pytest.fail("breakpoint() ran on the cpu"))
    cpu = kd.runtime("cpu")
    out = cpu.zeros(2)
    with_breakpoint[1, 2](cpu.tensor(np.array([1, 2], np.float32)), out)
    np.testing.assert_array_equal(out.numpy(), [2, 4])


def _run(script: str, env: dict, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], input=stdin, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def test_pdb_inside_a_kernel(tmp_path):
    src = tmp_path / "kern.py"
    src.write_text(textwrap.dedent("""
        import numpy as np
        import kerneldsl as kd

        @kd.kernel
        def k(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
            i = kd.unit_pos_x()
            y = x[i] + 10.0
            breakpoint()
            out[i] = y

        rt = kd.runtime("interpreter")
        out = rt.zeros(1)
        k[1, 1](rt.tensor(np.array([5.0], np.float32)), out)
        print("result", out.numpy()[0])
        """))
    r = subprocess.run([sys.executable, str(src)], input="p float(y)\nwhere\ncontinue\n", capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONBREAKPOINT": "pdb.set_trace"})
    assert r.returncode == 0, r.stderr
    # pdb stops at the kernel's line after breakpoint(), in a frame named as the kernel, with its locals
    assert f"{src}(10)k()" in r.stdout and "(Pdb) 15.0" in r.stdout and "result 15.0" in r.stdout, r.stdout


def test_interpret_env_routes_cpu_launches():
    script = """
        import numpy as np
        import kerneldsl as kd
        from test_interpreter import racy_reverse
        cpu = kd.runtime("cpu")
        out = cpu.zeros(8)
        try:
            racy_reverse[1, 8](cpu.tensor(np.arange(8, dtype=np.float32)), out, False)
            print("no race found")
        except Exception as e:
            print(type(e).__name__)
        racy_reverse[1, 8](cpu.tensor(np.arange(8, dtype=np.float32)), out, True)
        print(out.numpy().tolist())
        """
    env = {"PYTHONPATH": os.path.dirname(__file__)}
    routed = _run(script, {**env, "KERNELDSL_INTERPRET": "1"})
    assert routed.returncode == 0, routed.stderr
    assert routed.stdout.split("\n")[:2] == ["SharedMemoryRaceError", str([7.0 - i for i in range(8)])]
    plain = _run(script, {**env, "KERNELDSL_INTERPRET": "0"})
    assert plain.stdout.split("\n")[0] == "no race found", plain.stdout + plain.stderr


def test_interpret_env_copies_device_tensors_in_and_out(monkeypatch):
    if "opencl" not in kd.available_runtimes():
        pytest.skip("no OpenCL runtime on this machine to copy from")
    cl = kd.runtime("opencl")
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = cl.zeros((6, 4))
    monkeypatch.setenv("KERNELDSL_INTERPRET", "1")
    tile_transpose[(3, 2), (2, 2)](cl.tensor(a), out, 2)
    np.testing.assert_array_equal(out.numpy(), a.T)
    with pytest.raises(kd.OutOfBoundsError):
        read_row[1, 1](cl.tensor(a), cl.zeros(1), 6)


def test_interpret_env_flipped_after_a_launch_plan_was_made(monkeypatch):
    """A kernel already launched on the cpu (its launch plan kept) goes to the interpreter once
    KERNELDSL_INTERPRET is set, and a watcher of `Kernel.launch_with` sees each launch once."""
    cpu = kd.runtime("cpu")
    a, out = cpu.tensor(np.arange(12, dtype=np.float32).reshape(4, 3)), cpu.zeros(1)
    for _ in range(2):
        read_row[1, 1](a, out, 5)  # a[0, 5] reads a[1, 2] on the cpu: no per-axis check there
    assert out.numpy()[0] == 5.0
    seen = []
    real = kd.Kernel.launch_with
    monkeypatch.setattr(kd.Kernel, "launch_with", lambda self, *a, **k: seen.append(self) or real(self, *a, **k))
    monkeypatch.setenv("KERNELDSL_INTERPRET", "1")
    with pytest.raises(kd.OutOfBoundsError):
        read_row[1, 1](a, out, 5)
    read_row[1, 1](a, out, 2)
    assert out.numpy()[0] == 2.0 and len(seen) == 2


def test_the_interpreter_runs_only_where_tests_opt_in():
    choices = kd.testing.runtime_choices("", ["cpu", "interpreter"])
    assert [c.id for c in choices] == ["cpu", "cpu-p8"]
    every = kd.testing.runtime_choices("", ["cpu", "interpreter"], opt_in=True)
    assert [c.id for c in every] == ["cpu", "cpu-p8", "interpreter"]
    assert [c.id for c in kd.testing.runtime_choices("interpreter", ["cpu", "interpreter"])] == ["interpreter"]


OPTED_IN = """
import pytest
import kerneldsl as kd

@kd.testing.interpreted
def test_opted_in(runtime):
    assert runtime.name in ("cpu", "interpreter")

def test_not_opted_in(runtime):
    assert runtime.name == "cpu"
"""


def test_the_matrix_shows_the_interpreter_for_tests_that_opt_in(pytester, monkeypatch):
    monkeypatch.setenv("KERNELDSL_RUNTIMES", "cpu,interpreter")
    pytester.makepyfile(test_opt=OPTED_IN)
    # in a subprocess: a run in this process would import pyopencl a second time (it aborts)
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*test_opted_in?interpreter? PASSED*"])
    assert "test_not_opted_in[interpreter]" not in result.stdout.str()
    result.stdout.fnmatch_lines(["feature*cpu*cpu-p8*interpreter*", "opt*pass*pass*pass*"])


@kd.kernel
def through_a_plane_op(out: kd.Tensor[kd.f32]):
    t = kd.unit_pos_x()
    buf = kd.shared(kd.f32, 4)
    buf[t] = 1.0 * t
    s = kd.plane_sum(1.0)                # orders the accesses of its own plane's units
    out[t] = buf[(t + 3) % 4] + s


def test_a_plane_operation_orders_its_own_planes_shared_memory_only():
    """docs/dsl.md's rule, as CUDA's __syncwarp after each plane operation implements it: one
    plane of 4 shares `buf` safely through plane_sum; two planes of 2 race."""
    rt = kd.runtime("interpreter", plane_dim=4)
    out = rt.zeros(4)
    through_a_plane_op[1, 4](out)
    np.testing.assert_array_equal(out.numpy(), [3 + 4, 0 + 4, 1 + 4, 2 + 4])
    rt2 = kd.runtime("interpreter", plane_dim=2)
    with pytest.raises(SharedMemoryRaceError, match=r"buf\[3\]: unit 3 .* wrote it .* unit 0 .* read it"):
        through_a_plane_op[1, 4](rt2.zeros(4))
