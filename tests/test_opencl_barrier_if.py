"""Barriers and plane operations inside a uniform `if` on OpenCL (a PoCL regression).

PoCL (3.x, CPU) gave wrong results in a few percent of launches when a branch of an `if`
held barriers and code after the branch's last barrier read values assigned before its
first one: those values were sometimes another work-group's. The renderer now ends each
such branch at a barrier and runs the rest in a second `if` on the saved condition
(backends/clike.py, `_split_if`). The launch loops below failed within a few hundred
launches before the fix; the source check fails deterministically on the old shape.
"""
import re

import numpy as np
import pytest

import kerneldsl as kd

opencl_runtime = pytest.importorskip("kerneldsl.backends.opencl.runtime",
                                     reason="pyopencl is not installed (the test extra installs it)")

pytestmark = [pytest.mark.feature("opencl backend"),
              pytest.mark.skipif(not opencl_runtime.available(), reason="no OpenCL device on this machine "
                                 "(pip install pocl-binary-distribution gives a CPU one)")]

LAUNCHES = 150
GX, GY, UNITS, K = 11, 6, 128, 19


@kd.func
def sums_to_columns(x, y, c, t):
    """y[c, 4*cy + j] = (j + 1) * sum(x[c]): n0 and N are set before the first plane sum and
    read after the last barrier."""
    n0 = kd.cube_pos_y() * 4
    N = y.shape[1]
    a = kd.f32(0)
    if t < x.shape[1]:
        a = x[c, t]
    part = kd.shared(kd.f32, 4 * kd.plane_count())
    for j in kd.unroll(4):
        s = kd.plane_sum(a * (j + 1))
        if kd.lane_pos() == 0:
            part[j * kd.plane_count() + kd.plane_pos()] = s
    kd.sync_cube()
    if t < 4:
        n = n0 + t
        if n < N:
            acc = kd.f32(0)
            for p in range(kd.plane_count()):
                acc += part[t * kd.plane_count() + p]
            y[c, n] = acc


@kd.kernel
def tail_reads_head(live: kd.Tensor[kd.i32, 1], x: kd.Tensor[kd.f32, 2], y: kd.Tensor[kd.f32, 2],
                    MODE: kd.Const[int]):
    """sums_to_columns for the cubes whose live[c] is set, else a marker. MODE 0: in an if,
    1: in an elif (the other branches hold no barrier), 2: in an if inside a uniform loop."""
    t = kd.unit_pos_x()
    c = kd.cube_pos_x()
    flag = live[c]
    if MODE == 0:
        if flag != 0:
            sums_to_columns(x, y, c, t)
        elif t == 0:
            y[c, kd.cube_pos_y() * 4] = 5.0
    if MODE == 1:
        if flag == 7:
            y[c, 0] = -1.0  # never taken: live[] holds 0 or 1
        elif flag != 0:
            sums_to_columns(x, y, c, t)
        else:
            if t == 0:
                y[c, kd.cube_pos_y() * 4] = 5.0
    if MODE == 2:
        for rnd in range(3):
            if flag != 0 and rnd == 1:
                sums_to_columns(x, y, c, t)


def _inputs(rt):
    rng = np.random.default_rng(7)
    live = (rng.random(GX) < 0.75).astype(np.int32)
    live[:2] = (1, 0)
    x = rng.integers(-4, 5, (GX, K)).astype(np.float32)
    return live, x


def _expected(live, x, mode):
    want = np.zeros((GX, 4 * GY), np.float32)
    sums = x.sum(1)
    for c in range(GX):
        if live[c]:
            want[c] = np.tile(sums[c] * np.arange(1, 5), GY)
        elif mode < 2:
            want[c, ::4] = 5.0
    return want


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["if", "elif", "in-loop"])
def test_every_launch_is_right(mode):
    rt = kd.runtime("opencl")
    live, x = _inputs(rt)
    want = _expected(live, x, mode)
    lt, xt = rt.tensor(live), rt.tensor(x)
    wrong = []
    for i in range(LAUNCHES):
        y = rt.zeros((GX, 4 * GY), "f32")
        tail_reads_head[(GX, GY), UNITS](lt, xt, y, mode)
        got = y.numpy()
        if not np.array_equal(got, want):
            wrong.append((i, np.argwhere(got != want)[:4].tolist()))
    assert not wrong, f"{len(wrong)} of {LAUNCHES} launches wrong, first: {wrong[:3]}"


@kd.kernel
def early_exit_tail(x: kd.Tensor[kd.f32, 1], y: kd.Tensor[kd.f32, 1], n: kd.i32):
    """A split branch whose tail returns, and one whose tail breaks out of a uniform loop."""
    t = kd.unit_pos_x()
    c = kd.cube_pos_x()
    base = c * 10
    for r in range(4):
        if r == n:
            s = kd.plane_sum(x[t])
            kd.sync_cube()
            if t == 0:
                y[c] = s + kd.f32(base)
            break
    if c % 2 == 1:
        s = kd.plane_max(x[t])
        kd.sync_cube()
        return
    if t == 1:
        y[kd.cube_count_x() + c] = kd.f32(base)


def test_tails_with_return_and_break():
    rt = kd.runtime("opencl")
    x = np.arange(32, dtype=np.float32)
    for _ in range(20):
        y = rt.zeros(2 * 6, "f32")
        early_exit_tail[6, 32](rt.tensor(x), y, 2)
        want = np.zeros(12, np.float32)
        want[:6] = x.sum() + 10 * np.arange(6)
        want[6::2] = 10 * np.arange(0, 6, 2)
        np.testing.assert_array_equal(y.numpy(), want)


def _unfenced_blocks(source: str):
    """(line, last statement) of each `if`/`else`/loop block of generated OpenCL C that holds
    a barrier but ends neither at one nor at a jump right after one."""
    stack, bad = [], []  # per open block: [kind, holds a barrier, its last two statements]
    for no, raw in enumerate(source.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("}"):
            kind, holds, last = stack.pop()
            fenced = last[-1:] and (last[-1].startswith("barrier(") or
                                    (last[-1] in ("break;", "continue;", "return;") and last[-2:-1]
                                     and last[-2].startswith("barrier(")))
            if kind != "other" and holds and not fenced:
                bad.append((no, last[-1:]))
            if stack:
                stack[-1][2] = stack[-1][2][-1:] + ["}"]
        if line.startswith("barrier("):
            for blk in stack:
                blk[1] = True
        if line.endswith("{"):
            kind = "if" if re.match(r"(\} else|if \()", line) else "loop" if re.match(r"(for|while) ?\(", line) else "other"
            stack.append([kind, False, []])
        elif stack and not line.startswith("}"):
            stack[-1][2] = stack[-1][2][-1:] + [line]
    return bad


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_generated_branches_end_at_a_barrier(monkeypatch, mode):
    """Deterministic: in the generated OpenCL C, no branch or loop body holding a barrier runs
    into its join or latch from statements after its last barrier (the shape PoCL mishandled)."""
    rt = opencl_runtime.OpenCLRuntime(0)  # private: renders afresh
    sources = {}
    monkeypatch.setattr(opencl_runtime.cache, "dump", lambda name, src, ext: sources.setdefault(name, src))
    live, x = _inputs(rt)
    tail_reads_head[(GX, GY), UNITS](rt.tensor(live), rt.tensor(x), rt.zeros((GX, 4 * GY), "f32"), mode,
                                     runtime=rt)
    early_exit_tail[2, 32](rt.tensor(np.ones(32, np.float32)), rt.zeros(4, "f32"), 1, runtime=rt)
    assert set(sources) == {"tail_reads_head", "early_exit_tail"}
    for name, src in sources.items():
        assert src.count("barrier(") >= 2
        assert _unfenced_blocks(src) == [], (name, src)
