"""Small cpu launches on the calling thread (backends/cpu/runtime.py `CpuRuntime.launch`): a
launch of an argument-bound kernel (kerneldsl/loop_bounds.py) whose argument words an earlier
launch ended quickly with runs inline, with no handoff; new words, a kernel whose loops
depend on memory, or a large launch go to the workers; an inline run that took long forgets
its words. Replayed calls (kerneldsl/replay.py) run their launches inline the same way."""
import threading

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import replay
from kerneldsl.errors import OutOfBoundsError

pytestmark = pytest.mark.feature("cpu backend")


@kd.kernel
def add_n(x: kd.Tensor[kd.f32, 1], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < x.shape[0]:
        acc = x[i]
        for _ in range(n):
            acc = acc + 1.0
        x[i] = acc


@kd.kernel
def add_until(x: kd.Tensor[kd.f32, 1], limit: kd.Tensor[kd.f32, 1]):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < x.shape[0]:
        while x[i] < limit[0]:  # the trip count is memory's
            x[i] = x[i] + 1.0


@kd.kernel
def poke(x: kd.Tensor[kd.f32, 1], at: kd.Tensor[kd.i32, 1]):
    if kd.unit_pos_x() == 0:
        x[at[0]] = 1.0  # where is memory's (no loop: argument-bound all the same)


def _quick_runtime(monkeypatch):
    """The two-worker cpu runtime with every run counted as quick (a loaded machine's
    hiccups would otherwise send launches back to the workers), and the list `_watch` fills."""
    rt = kd.runtime("cpu", threads=2)
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 1e9)
    return rt, _watch(monkeypatch, rt)


def _watch(monkeypatch, rt) -> list:
    """Count the launches that go to the workers (`_execute`)."""
    calls = []
    real = type(rt)._execute

    def counting(self, *a, **k):
        calls.append(a[1])  # its cube count
        return real(self, *a, **k)

    monkeypatch.setattr(type(rt), "_execute", counting)
    return calls


def test_a_repeated_quick_launch_runs_inline(monkeypatch):
    rt, calls = _quick_runtime(monkeypatch)
    x = rt.zeros(100)
    add_n[4, 32](x, 3)  # first: on the workers
    assert calls == [4]
    for _ in range(5):
        add_n[4, 32](x, 3)  # the same words: inline
    assert calls == [4]
    np.testing.assert_array_equal(x.numpy(), 18.0)
    y = rt.zeros(100)
    add_n[4, 32](y, 3)  # other memory, same words: inline
    assert calls == [4]
    add_n[4, 32](y, 4)  # a new scalar: the workers first
    add_n[4, 32](y[:50], 4)  # a new shape: the workers first
    assert calls == [4, 4, 4]
    np.testing.assert_array_equal(y.numpy(), np.r_[np.full(50, 11.0), np.full(50, 7.0)])


def test_memory_bound_large_and_slow_launches_stay_on_the_workers(monkeypatch):
    rt, calls = _quick_runtime(monkeypatch)
    x, limit = rt.zeros(64), rt.tensor(np.array([2.0], np.float32))
    for _ in range(3):
        add_until[2, 32](x, limit)  # its loop reads memory: never inline
    assert calls == [2, 2, 2]
    np.testing.assert_array_equal(x.numpy(), 2.0)
    calls.clear()
    monkeypatch.setattr(type(rt), "INLINE_UNITS", 64)
    big = rt.zeros(128)
    for _ in range(3):
        add_n[4, 32](big, 1)  # 128 units, over the limit
    assert calls == [4, 4, 4]
    calls.clear()
    monkeypatch.setattr(type(rt), "INLINE_UNITS", 1 << 15)
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 0.0)  # every run counts as long
    for _ in range(3):
        add_n[1, 32](big, 1)
    assert calls == [1, 1, 1]
    np.testing.assert_array_equal(big.numpy(), np.r_[np.full(32, 6.0), np.full(96, 3.0)])


def test_an_inline_run_that_took_long_forgets_its_words(monkeypatch):
    rt, calls = _quick_runtime(monkeypatch)
    x = rt.zeros(32)
    add_n[1, 32](x, 2)
    add_n[1, 32](x, 2)
    assert calls == [1]
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 0.0)
    add_n[1, 32](x, 2)  # inline, and took "long"
    add_n[1, 32](x, 2)  # so this one goes to the workers
    assert calls == [1, 1]
    np.testing.assert_array_equal(x.numpy(), 8.0)


def test_an_inline_launch_reports_its_bounds_error(monkeypatch):
    monkeypatch.setenv("KERNELDSL_BOUNDS_CHECK", "1")
    rt, calls = _quick_runtime(monkeypatch)
    x, at = rt.zeros(8), rt.tensor(np.array([0], np.int32))
    poke[1, 32](x, at)
    poke[1, 32](x, rt.tensor(np.array([3], np.int32)))
    assert calls == [1]  # the second ran inline
    with pytest.raises(OutOfBoundsError, match="index 8 is out of bounds for tensor 'x'"):
        poke[1, 32](x, rt.tensor(np.array([8], np.int32)))  # inline too
    assert calls == [1]
    poke[1, 32](x, rt.tensor(np.array([5], np.int32)))  # the next inline launch has a clean record
    np.testing.assert_array_equal(x.numpy(), [1, 0, 0, 1, 0, 1, 0, 0])


def _three_adds(x):
    """y = (x + 1) + 2 + 3 through scratch tensors: three launches a call."""
    y = x.clone()
    add_n[(x.shape[0] + 31) // 32, 32](y, 1)
    add_n[(x.shape[0] + 31) // 32, 32](y, 2)
    add_n[(x.shape[0] + 31) // 32, 32](y, 3)
    return y


def test_a_replayed_call_runs_inline_and_from_two_threads(monkeypatch):
    from kerneldsl.backends.cpu.runtime import CpuLaunchSequence
    rt = kd.runtime("cpu", threads=2)
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 1e9)
    op = replay.replayable(_three_adds)
    rng = np.random.default_rng(5)
    op(rt.tensor(np.ones(70, np.float32)))  # recorded
    calls = _watch(monkeypatch, rt)
    sequences = [s[1] for p in op.replay_records.values() for s in p.steps
                 if s[0] == "run" and isinstance(s[1], CpuLaunchSequence)]
    for _ in range(3):
        x = rng.standard_normal(70).astype(np.float32)
        np.testing.assert_allclose(op(rt.tensor(x)).numpy(), x + 6.0, rtol=1e-6)
    assert len(calls) <= 3  # at most one run on the workers before the inline ones
    assert sequences and all(s.block is not None for s in sequences)
    errors = []

    def work(seed):
        try:
            r = np.random.default_rng(seed)
            for _ in range(200):
                x = r.standard_normal(70).astype(np.float32)
                np.testing.assert_allclose(op(rt.tensor(x)).numpy(), x + 6.0, rtol=1e-6)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for th in threads:
        th.start()
    work(3)
    for th in threads:
        th.join()
    assert not errors, errors


@kd.kernel
def weighted_sum(x: kd.Tensor[kd.f32, 1], y: kd.Tensor[kd.f32, 1], out: kd.Tensor[kd.f32, 1], w: kd.f32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < out.shape[0]:
        out[i] = x[i] + w * y[i]


def _two_sums(x, y):
    """(x + 2y) + 3x in two launches through a scratch tensor of the call."""
    rt = x.runtime
    mid, out = rt.empty(x.shape, kd.f32), rt.empty(x.shape, kd.f32)
    weighted_sum[(x.shape[0] + 31) // 32, 32](x, y, mid, 2.0)
    weighted_sum[(x.shape[0] + 31) // 32, 32](mid, x, out, 3.0)
    return out


def test_a_replayed_inline_call_rewrites_the_inputs_that_moved(monkeypatch):
    """An inline replay keeps its argument slots between calls and rewrites only those of
    the places that moved (InlineBlock.run_sources): inputs that stay, move, trade places or
    alias each other, and views at an offset, all give the call's own answer."""
    from kerneldsl.backends.cpu.runtime import CpuLaunchSequence
    rt = kd.runtime("cpu", threads=2)
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 1e9)
    op = replay.replayable(_two_sums)
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(80).astype(np.float32) for _ in range(3)]
    a, b, c = (rt.tensor(v) for v in arrays)
    wide = rt.tensor(np.concatenate(arrays[:2]))
    calls = [(a, b), (a, b), (a, c), (c, a), (b, b), (a, b), (wide[80:], wide[:80]), (wide[:80], wide[80:])]
    for x, y in calls:
        xs, ys = x.numpy(), y.numpy()
        want = (xs + np.float32(2) * ys) + np.float32(3) * xs
        np.testing.assert_allclose(op(x, y).numpy(), want, rtol=1e-6, atol=1e-6)
    blocks = [s[1].block for p in op.replay_records.values() for s in p.steps
              if s[0] == "run" and isinstance(s[1], CpuLaunchSequence)]
    assert blocks[0] is not None and blocks[0].groups, "the calls of the first layout must run inline by sources"
