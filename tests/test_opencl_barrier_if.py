"""Barriers and plane operations inside a uniform `if` on OpenCL (a PoCL regression).

PoCL (3.0, CPU) mishandled barriers inside an `if`: values set before them were wrong after
them (another work-group's in a few percent of launches, or in every launch when the other
branch did work), and a routing kernel whose barrier-free branch wrote its answer corrupted
the heap. The OpenCL renderer now emits no barrier inside an `if` (backends/clike/flat_barriers.py,
`_flat`). Before the fix the launch loops below failed (the first one intermittently, the
others in every launch) and the routing-shaped kernel aborted in free(); the source check
fails deterministically on the old shape.
"""
import re

import numpy as np
import pytest

import kerneldsl as kd
from rudnn.moe.routing_kernels import NO_KEY, TOP_KEY, cube_max, key_id, order_key, sigmoid_stable

opencl_runtime = pytest.importorskip("kerneldsl.backends.opencl.runtime",
                                     reason="pyopencl is not installed (the test extra installs it)")

pytestmark = [pytest.mark.feature("opencl backend"),
              pytest.mark.skipif(not opencl_runtime.available(), reason="no OpenCL device on this machine "
                                 "(pip install 'rudnn[opencl]' gives a CPU one)")]

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
def flagged_or_ranked(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.i32, 2]):
    """Per row: if any value is negative, out[row, :k] = -1 (no barrier); else the ids of the
    k largest values by repeated cube maxima (barriers in a loop in the else branch)."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    n = x.shape[1]
    k = out.shape[1]
    v = kd.select(t < n, x[row, kd.min(t, n - 1)], -1.0e30)
    part = kd.shared(kd.f32, kd.plane_count())
    m = kd.plane_min(kd.select(t < n, v, 1.0))
    if kd.lane_pos() == 0:
        part[kd.plane_pos()] = m
    kd.sync_cube()
    lowest = part[0]
    for p in range(1, kd.plane_count()):
        lowest = kd.min(lowest, part[p])
    kd.sync_cube()
    if lowest < 0.0:
        if t < k:
            out[row, t] = -1
    else:
        taken = False
        for j in range(k):
            best = kd.plane_max(kd.select(taken, -2.0e30, v))
            if kd.lane_pos() == 0:
                part[kd.plane_pos()] = best
            kd.sync_cube()
            top = part[0]
            for p in range(1, kd.plane_count()):
                top = kd.max(top, part[p])
            kd.sync_cube()
            if not taken and v == top:
                taken = True
                out[row, j] = t


def test_barrier_free_branch_next_to_barriers():
    """The routing shape: the cube answers at once in one branch, loops over cube-wide maxima
    in the other (distinct values, so the k largest are unique)."""
    rt = kd.runtime("opencl")
    rng = np.random.default_rng(3)
    rows, n, k = 40, 100, 5
    x = rng.permutation(rows * n).reshape(rows, n).astype(np.float32) + 1
    neg = rng.random(rows) < 0.4
    x[neg, 7] = -3.0
    want = np.argsort(-x, axis=1, kind="stable")[:, :k].astype(np.int32)
    want[neg] = -1
    for _ in range(30):
        out = rt.zeros((rows, k), "i32")
        flagged_or_ranked[rows, 128](rt.tensor(x), out)
        np.testing.assert_array_equal(out.numpy(), want)


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


def _misplaced_barriers(source: str):
    """(line, text) of each barrier of generated OpenCL C inside an `if`/`else` block, and of
    the last statement of each loop body that holds a barrier but does not end at one."""
    stack, bad = [], []  # per open block: [kind, holds a barrier, its last statement]
    for no, raw in enumerate(source.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("}"):
            kind, holds, last = stack.pop()
            if kind == "loop" and holds and not last.startswith("barrier("):
                bad.append((no, last))
            if stack:
                stack[-1][2] = "}"
        if line.startswith("barrier("):
            if any(blk[0] == "if" for blk in stack):
                bad.append((no, line))
            for blk in stack:
                blk[1] = True
        if line.endswith("{"):
            kind = "if" if re.match(r"(\} else|if \()", line) else "loop" if re.match(r"(for|while) ?\(", line) else "other"
            stack.append([kind, False, ""])
        elif stack and not line.startswith("}"):
            stack[-1][2] = line
    return bad


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_generated_branches_end_at_a_barrier(monkeypatch, mode):
    """Deterministic: the generated OpenCL C has no barrier inside an `if` (the shape PoCL
    mishandled), and loop bodies holding a barrier end at one."""
    from kerneldsl import cache
    rt = opencl_runtime.OpenCLRuntime(0)  # private, and no disk cache: renders afresh
    monkeypatch.setenv("KERNELDSL_CACHE", "")
    sources = {}
    monkeypatch.setattr(cache, "dump", lambda name, src, ext: sources.setdefault(name, src))
    live, x = _inputs(rt)
    tail_reads_head[(GX, GY), UNITS](rt.tensor(live), rt.tensor(x), rt.zeros((GX, 4 * GY), "f32"), mode,
                                     runtime=rt)
    early_exit_tail[2, 32](rt.tensor(np.ones(32, np.float32)), rt.zeros(4, "f32"), 1, runtime=rt)
    flagged_or_ranked[2, 128](rt.tensor(np.ones((2, 100), np.float32)), rt.zeros((2, 5), "i32"), runtime=rt)
    assert set(sources) == {"tail_reads_head", "early_exit_tail", "flagged_or_ranked"}
    for name, src in sources.items():
        # plane ops emulated through local memory add barriers; native ones (NVIDIA) do not
        assert src.count("barrier(") >= (1 if rt.capabilities.native_plane_ops else 2)
        assert _misplaced_barriers(src) == [], (name, src)


# the grouped sigmoid top-k of rudnn.moe as of commit bcf219d, kept as it was (its key and
# reduction helpers are the library's own, unchanged since)


@kd.kernel
def grouped_pick(logits: kd.Tensor, bias: kd.Tensor[kd.f32, 1], ids: kd.Tensor[kd.u32, 2],
                         weights: kd.Tensor, G: kd.i32, SG: kd.i32, scale: kd.f32, HAS_BIAS: kd.Const[bool],
                         TOP_TWO: kd.Const[bool], RENORMALIZE: kd.Const[bool], KMAX: kd.Const[int]):
    """The routing kernel that corrupted the heap (rudnn.moe's grouped sigmoid top-k as of
    bcf219d): a row holding a NaN answers in a barrier-free branch, the other branch ranks
    groups and picks experts through barriers and cube maxima."""
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    E = logits.shape[1]
    k = ids.shape[1]
    S = E // G
    c_all = kd.shared(kd.f32, kd.cube_units())
    score = kd.shared(kd.f32, 128)
    picked = kd.shared(kd.i32, 128)
    sel_p = kd.shared(kd.f32, KMAX)
    ipart = kd.shared(kd.i32, 2 * kd.plane_count())
    kpart = kd.shared(kd.i64, 2 * kd.plane_count())
    live = t < E
    tc = kd.min(t, E - 1)
    p = sigmoid_stable(kd.f32(logits[row, tc]))
    c = p
    if HAS_BIAS:
        c = p + bias[tc]
    nan = 0
    if live and kd.isnan(c):
        nan = 1
    c_all[t] = c
    any_nan = cube_max(nan, ipart, 0)      # its barrier also publishes c_all
    if any_nan > 0:
        if t < k:
            ids[row, t] = t
            weights[row, t] = kd.nan
    else:
        if t < G:                          # group scores
            b1 = -kd.inf
            b2 = -kd.inf
            for i in range(S):
                v = c_all[t * S + i]
                if v > b1:
                    b2 = b1
                    b1 = v
                elif v > b2:
                    b2 = v
            sc = b1
            if TOP_TWO:
                sc = b1 + b2
            if kd.isnan(sc):
                sc = -kd.inf
            score[t] = sc
        kd.sync_cube()
        if t < G:                          # a group is kept when fewer than SG groups beat it
            mine = score[t]
            rank = 0
            for g in range(G):
                other = score[g]
                if other > mine or (other == mine and g < t):
                    rank += 1
            picked[t] = kd.select(rank < SG, 1, 0)
        kd.sync_cube()
        key = kd.i64(NO_KEY)
        if live and picked[t // S] != 0:
            key = order_key(c, t)
        prev = kd.i64(TOP_KEY)
        for j in range(k):
            cand = kd.select(key < prev, key, kd.i64(NO_KEY))
            prev = cube_max(cand, kpart, j % 2 * kd.plane_count())
            if t == key_id(prev):
                sel_p[j] = p
                ids[row, j] = t
        kd.sync_cube()
        if t < k:
            total = kd.f32(0)
            if RENORMALIZE:
                for j in range(k):
                    total += sel_p[j]
            w = sel_p[t] * scale
            if RENORMALIZE:
                w = sel_p[t] / total * scale
            weights[row, t] = w


def run_grouped_pick(name: str, launches: int):
    """(ids, weights) of `launches` launches of grouped_pick on random rows, every third
    launch with a NaN row (the same inputs on every runtime)."""
    rt = kd.runtime(name)
    rng = np.random.default_rng(11)
    T, E, K = 64, 128, 8
    out = []
    for i in range(launches):  # fresh inputs and outputs each time: heap traffic shows corruption
        logits = rng.standard_normal((T, E)).astype(np.float32)
        logits[i % T, 3] = np.nan if i % 3 == 0 else logits[i % T, 3]
        bias = (rng.standard_normal(E) * 0.1).astype(np.float32)
        ids, w = rt.empty((T, K), "u32"), rt.empty((T, K), "f32")
        grouped_pick[T, 128](rt.tensor(logits), rt.tensor(bias), ids, w, 8, 4, 2.5, True, True, True, 64)
        out.append((ids.numpy(), w.numpy()))
    return out


def test_grouped_pick_runs_clean():
    """In a subprocess (heap corruption aborts the interpreter): many launches, then the
    results must match the cpu runtime's."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import sys, numpy as np; sys.path.insert(0, %r); import test_opencl_barrier_if as m; "
            "r = m.run_grouped_pick('opencl', 100); "
            "np.save(sys.argv[1], np.stack([np.concatenate([i.view(np.float32), w], 1) for i, w in r]))" % here)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.npy")
        proc = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
        got = np.load(path)
    for n, (ids, w) in enumerate(run_grouped_pick("cpu", 100)):
        np.testing.assert_array_equal(got[n, :, :8].view(np.uint32), ids, err_msg=f"launch {n}")
        np.testing.assert_allclose(got[n, :, 8:], w, rtol=1e-6, err_msg=f"launch {n}")
