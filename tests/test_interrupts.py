"""Ctrl-C stops a running launch: on the cpu runtime KeyboardInterrupt is raised and the
runtime runs the next launch correctly, whether the kernel's cubes are merely slow (they stop
at the next cube boundary) or one of them never ends (the launch is abandoned after a grace
period), on the worker pool and on the fast worker of small launches; an OpenCL wait for a
stuck queue is interruptible too. Each case runs in a child process that the test sends
SIGINT, as a terminal would."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kerneldsl as kd

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import os, sys, time
import numpy as np, kerneldsl as kd

@kd.kernel
def slow(x: kd.Tensor[kd.f32], iters: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    acc = kd.f32(0)
    for k in range(iters):
        acc = acc * 0.999 + 1.0
    x[i % x.shape[0]] = acc

@kd.kernel
def stuck(flag: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    if kd.unit_pos_x() == 0:
        while flag[0] == 0.0:  # nothing ever sets it
            out[0] = out[0] + 1.0

@kd.kernel
def twice(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32]):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < x.shape[0]:
        y[i] = x[i] * 2.0

rt = kd.runtime(sys.argv[1])
case = sys.argv[2]
x = rt.zeros(1024)
flag, out = rt.zeros(1), rt.zeros(1)
slow[1, 32](x, 0)                        # compile before the signal can come
{warm}
print("ready", flush=True)
t0 = time.monotonic()
try:
    if case == "slow":
        slow[1 << 20, 64](x, 1 << 20)      # minutes of work
    elif case == "slow_small":
        slow[512, 32](x, 1 << 24)          # one worker's share of cubes (the fast worker's), minutes of work
    else:
        stuck[1, 32](flag, out)
    {sync}
    print("finished", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {{time.monotonic() - t0:.2f}} s", flush=True)
if sys.argv[1] == "opencl":  # the device keeps running the queued kernel: leave without waiting for it
    os._exit(0)
a = np.arange(1000, dtype=np.float32)
y = rt.empty(1000)
twice[8, 128](rt.tensor(a), y)
assert (y.numpy() == 2 * a).all()
print("usable", flush=True)
"""


def _interrupt(tmp_path, runtime_name: str, case: str, sync: str = "", warm: str = "stuck[0, 32](flag, out)") -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = tmp_path / "child.py"  # kernels are parsed from their source file
    script.write_text(textwrap.dedent(CHILD.format(sync=sync, warm=warm)))
    child = subprocess.Popen([sys.executable, str(script), runtime_name, case], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []  # the child's log lines (an OpenCL device left out, say) may come first
        while not lines or lines[-1] not in ("ready", ""):
            lines.append(child.stdout.readline().strip())
        assert lines[-1] == "ready", lines
        time.sleep(1.0)  # let the launch get going
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, out
    return out


def _stopped_soon(out: str, usable: bool = True) -> None:
    """The child was interrupted (and its runtime still worked afterwards, when `usable`) soon
    after the signal, not at the end of the work."""
    if usable:
        _still_usable(out)
    assert "interrupted after" in out, out
    seconds = float(out.split("interrupted after ")[1].split()[0])
    assert seconds < 1.0 + 5.0, out


def _still_usable(out: str) -> None:
    """The child was interrupted and its runtime still worked afterwards."""
    assert "interrupted after" in out and "usable" in out, out


def test_ctrl_c_stops_a_slow_cpu_launch_at_a_cube_boundary(tmp_path):
    out = _interrupt(tmp_path, "cpu", "slow")
    _stopped_soon(out)


def test_ctrl_c_abandons_a_cpu_launch_whose_cube_never_ends(tmp_path):
    out = _interrupt(tmp_path, "cpu", "stuck")
    _still_usable(out)


def test_ctrl_c_interrupts_an_opencl_wait(tmp_path):
    if "opencl" not in kd.available_runtimes():
        pytest.skip("no working OpenCL device on this machine")
    out = _interrupt(tmp_path, "opencl", "slow", sync="x.numpy()", warm="")
    _stopped_soon(out, usable=False)


# the main thread's one-worker launches go to the cpu runtime's fast worker (handoff.py) once it
# has made FAST_WORKER_AFTER of them: the same Ctrl-C behaviour there
_WARM_FAST = "stuck[0, 32](flag, out); [twice[1, 32](x, x) for _ in range(40)]"
# small launches whose argument words ended quickly before run on the calling thread, where
# Ctrl-C cannot reach them (backends/cpu/runtime.py); a launch that can turn long never does:
# new argument words (here a larger loop count) go to a worker first, and a kernel whose loops
# depend on memory (stuck's flag) always does, however quickly its earlier launches ended
_WARM_QUICK = "[slow[512, 32](x, 10) for _ in range(40)]"
_WARM_QUICK_STUCK = "ones = rt.tensor(np.ones(1, np.float32)); [stuck[1, 32](ones, out) for _ in range(40)]"


@pytest.mark.parametrize("case, warm", [
    pytest.param("slow_small", _WARM_FAST, id="handed-over-slow"),
    pytest.param("stuck", _WARM_FAST, id="handed-over-stuck"),
    pytest.param("slow_small", _WARM_QUICK, id="long-after-inline"),
    pytest.param("stuck", _WARM_QUICK_STUCK, id="memory-bound-stuck"),
])
def test_ctrl_c_after_warm_up_launches(tmp_path, case, warm):
    """A slow launch stops at a cube boundary soon after Ctrl-C; one whose cube never ends is
    abandoned; either way the runtime stays usable."""
    out = _interrupt(tmp_path, "cpu", case, warm=warm)
    if case == "stuck":
        _still_usable(out)
    else:
        _stopped_soon(out)
