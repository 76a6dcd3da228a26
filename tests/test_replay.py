"""Replayed operator calls (kerneldsl/replay.py): a second call with the same argument layout
replays the first call's allocations and launches on the new call's memory, and gives what
running the operator again gives; what the key does not capture is never replayed."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import replay
from rudnn import normalization as N
from rudnn import pooling as P

from conftest import tol
from family_checks import count_launches

# under KERNELDSL_INTERPRET nothing is recorded or replayed (the last test here checks it)
pytestmark = pytest.mark.skipif(replay.envflags.interpret(), reason="KERNELDSL_INTERPRET is set: calls are "
                                "neither recorded nor replayed, so there is nothing to test here")


@kd.kernel
def scale_into(x: kd.Tensor[kd.f32, 1], y: kd.Tensor[kd.f32, 1], s: kd.f32, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        y[i] = x[i] * s


@kd.kernel
def add_in_place(x: kd.Tensor[kd.f32, 1], v: kd.f32, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        x[i] = x[i] + v


@replay.replayable
def scaled_twice(x, s=2.0):
    """y = x·s and z = y·s through a scratch tensor: two launches, three allocations."""
    n = x.shape[0]
    tmp = x.runtime.empty((n,), kd.f32)
    y = x.runtime.empty((n,), kd.f32)
    scale_into[(n + 63) // 64, 64](x, tmp, s, n)
    scale_into[(n + 63) // 64, 64](tmp, y, s, n)
    return y, n


@replay.replayable
def bump(x, v: float):
    """x += v in place: the write lands in the caller's tensor on a replay too."""
    add_in_place[(x.shape[0] + 63) // 64, 64](x, v, x.shape[0])
    return None


@replay.replayable
def scaled_and_counted(x):
    """(x·2, ones): the ones are zeros made after a scratch tensor, bumped by one: in a replay
    they lie inside the fused buffer, not at its start."""
    n = x.shape[0]
    y = x.runtime.empty((n,), kd.f32)
    scale_into[(n + 63) // 64, 64](x, y, 2.0, n)
    ones = x.runtime.zeros((n,), kd.f32)
    add_in_place[(n + 63) // 64, 64](ones, 1.0, n)
    return y, ones


@replay.replayable
def uploads(x):
    """Passes host values to the device: never recorded."""
    return x.runtime.tensor(np.arange(x.shape[0], dtype=np.float32))


def test_a_replayed_call_runs_no_operator_python_and_gives_the_new_values(runtime, rng, monkeypatch):
    calls = count_launches(monkeypatch)
    a, b = (rng.standard_normal(100).astype(np.float32) for _ in range(2))
    y1, n1 = scaled_twice(runtime.tensor(a))
    assert calls[0] == 2 and len(scaled_twice.replay_records) == 1
    y2, n2 = scaled_twice(runtime.tensor(b))
    assert calls[0] == 2  # replayed: no kernel launched through the Python launch path
    np.testing.assert_allclose(y1.numpy(), a * 4, rtol=1e-6)
    np.testing.assert_allclose(y2.numpy(), b * 4, rtol=1e-6)
    assert (n1, n2) == (100, 100)
    y3, _ = scaled_twice(runtime.tensor(b), 3.0)  # another scalar: another record
    np.testing.assert_allclose(y3.numpy(), b * 9, rtol=1e-6)
    assert len(scaled_twice.replay_records) == 2


def test_results_of_one_replayed_call_do_not_share_elements(runtime):
    x = runtime.tensor(np.ones(8, np.float32))
    N.layer_norm_with_stats(x.reshape(2, 4), runtime.tensor(np.ones(4, np.float32)))
    out, mean, rstd = N.layer_norm_with_stats(runtime.tensor(np.arange(8, dtype=np.float32)).reshape(2, 4),
                                             runtime.tensor(np.ones(4, np.float32)))
    np.testing.assert_allclose(mean.numpy(), [1.5, 5.5], rtol=1e-6)
    assert rstd.numpy().shape == (2,) and out.numpy().shape == (2, 4)
    spans = sorted((t.offset * t.dtype.itemsize, (t.offset + t.size) * t.dtype.itemsize, t.buffer)
                   for t in (out, mean, rstd))
    for (s0, e0, b0), (s1, _, b1) in zip(spans, spans[1:]):
        assert b0 is not b1 or e0 <= s1


def test_a_replay_writes_into_the_callers_tensor(runtime):
    x = runtime.tensor(np.zeros(70, np.float32))
    bump(x, 1.5)
    y = runtime.tensor(np.full(70, 2.0, np.float32))
    bump(y, 1.5)
    assert len(bump.replay_records) == 1
    np.testing.assert_array_equal(x.numpy(), np.full(70, 1.5, np.float32))
    np.testing.assert_array_equal(y.numpy(), np.full(70, 3.5, np.float32))


def test_views_at_another_offset_or_sharing_memory_are_other_layouts(runtime):
    base = runtime.tensor(np.arange(200, dtype=np.float32))
    y0, _ = scaled_twice(base[0:100])
    y1, _ = scaled_twice(base[100:200])  # same shape and strides, another offset
    np.testing.assert_allclose(y1.numpy(), np.arange(100, 200, dtype=np.float32) * 4, rtol=1e-6)
    assert len(scaled_twice.replay_records) == 2
    g = runtime.tensor(np.ones(4, np.float32))
    x = runtime.tensor(np.arange(4, dtype=np.float32).reshape(1, 4))
    a = N.layer_norm_backward(x, g, x, *N.layer_norm_with_stats(x, g)[1:])  # grad aliases input
    dy = runtime.tensor(np.ones((1, 4), np.float32))
    _, mean, rstd = N.layer_norm_with_stats(x, g)
    b = N.layer_norm_backward(x, g, dy, mean, rstd)
    assert len(N.layer_norm_backward.replay_records) == 2
    assert not np.allclose(a[0].numpy(), b[0].numpy())


def test_calls_that_read_host_values_or_return_other_objects_are_not_recorded(runtime):
    x = runtime.tensor(np.ones(5, np.float32))
    for _ in range(2):
        np.testing.assert_array_equal(uploads(x).numpy(), np.arange(5, dtype=np.float32))
    assert uploads.replay_records == {}

    @replay.replayable
    def boxed(t):
        return {"y": scaled_twice(t)[0]}

    @replay.replayable
    def on_a_side_stream(t):
        with t.runtime.use_stream(t.runtime.stream()):
            return scaled_twice(t)[0]

    on_a_side_stream(x)
    assert on_a_side_stream.replay_records == {} and "stream" in str(on_a_side_stream.replay_refusals)

    first = boxed(x)["y"]
    assert boxed.replay_records == {}
    second = boxed(runtime.tensor(np.full(5, 2.0, np.float32)))["y"]
    np.testing.assert_array_equal(first.numpy(), np.full(5, 4.0, np.float32))
    np.testing.assert_array_equal(second.numpy(), np.full(5, 8.0, np.float32))


@replay.replayable
def filled_with_first(x):
    """A tensor of x's shape holding x[0], read to the host (`.numpy()`) and passed to the
    kernel as a number: its work follows x's values, so it is never recorded."""
    y = x.runtime.zeros(x.shape, kd.f32)
    add_in_place[(x.shape[0] + 63) // 64, 64](y, float(x.numpy()[0]), x.shape[0])
    return y


def test_calls_that_download_device_values_are_not_recorded(runtime):
    """Every runtime refuses a recording whose call reads device memory to the host (the cpu
    runtime once did not, and replayed the first call's value for every later call)."""
    for value in (1.0, 5.0, 7.0):
        x = runtime.tensor(np.full(4, value, np.float32))
        np.testing.assert_array_equal(filled_with_first(x).numpy(), np.full(4, value, np.float32))
    assert filled_with_first.replay_records == {}
    assert "host download" in str(filled_with_first.replay_refusals)

    @replay.replayable
    def filled_with_host_value(x):
        y = x.runtime.zeros(x.shape, kd.f32)
        add_in_place[(x.shape[0] + 63) // 64, 64](y, float(x.runtime.host_values([x])[0][0]), x.shape[0])
        return y
    for value in (4.0, 6.0):
        x = runtime.tensor(np.full(4, value, np.float32))
        np.testing.assert_array_equal(filled_with_host_value(x).numpy(), np.full(4, value, np.float32))
    assert filled_with_host_value.replay_records == {}
    if hasattr(runtime, "host_view"):  # a view of the memory shows the host its values as well

        @replay.replayable
        def filled_through_a_view(x):
            y = x.runtime.zeros(x.shape, kd.f32)
            add_in_place[(x.shape[0] + 63) // 64, 64](y, float(np.asarray(x, copy=False)[0]), x.shape[0])
            return y
        for value in (2.0, 3.0):
            x = runtime.tensor(np.full(4, value, np.float32))
            np.testing.assert_array_equal(filled_through_a_view(x).numpy(), np.full(4, value, np.float32))
        assert filled_through_a_view.replay_records == {}


def test_replay_off_and_bad_calls_still_checked(runtime, monkeypatch):
    g = runtime.tensor(np.ones(4, np.float32))
    x = runtime.tensor(np.ones((2, 4), np.float32))
    N.layer_norm(x, g)
    with pytest.raises(N.NormalizationError, match="gamma"):
        N.layer_norm(x, runtime.tensor(np.ones(3, np.float32)))
    monkeypatch.setenv("KERNELDSL_REPLAY", "0")
    calls = count_launches(monkeypatch)
    N.layer_norm(x, g)
    assert calls[0] >= 1


def test_bounds_checking_is_part_of_the_key(runtime, monkeypatch):
    x = runtime.tensor(np.ones(10, np.float32))
    scaled_twice(x)
    monkeypatch.setenv("KERNELDSL_BOUNDS_CHECK", "1")
    calls = count_launches(monkeypatch)
    y, _ = scaled_twice(x)  # not the unchecked record: the kernels launch (checked) again
    np.testing.assert_array_equal(y.numpy(), np.full(10, 4.0, np.float32))
    assert calls[0] == 2


@pytest.mark.interpreter
def test_a_kernel_launched_twice_in_one_call_is_recorded_on_every_runtime(runtime, rng):
    """The second launch of a kernel in a recorded call is prepared from its launch plan (the
    interpreter's too: it prepares its own launches, not the cpu runtime's packed ones)."""
    for _ in range(2):
        a = rng.standard_normal(70).astype(np.float32)
        y, _ = scaled_twice(runtime.tensor(a), 3.0)
        np.testing.assert_allclose(y.numpy(), a * 9.0, rtol=1e-6)
    assert len(scaled_twice.replay_records) == 1


def test_under_the_interpreter_switch_nothing_is_replayed_or_recorded(runtime, monkeypatch):
    x = runtime.tensor(np.ones(10, np.float32))
    scaled_twice(x)
    monkeypatch.setenv("KERNELDSL_INTERPRET", "1")
    calls = count_launches(monkeypatch)
    y, _ = scaled_twice(x)  # launched again, not replayed
    bump(x, 1.0)
    bump(x, 1.0)  # in place, twice: each call ran once
    np.testing.assert_array_equal(y.numpy(), np.full(10, 4.0, np.float32))
    np.testing.assert_array_equal(x.numpy(), np.full(10, 3.0, np.float32))
    assert calls[0] == 4 and bump.replay_records == {}


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_operators_replayed_match_numpy(runtime, rng, dtype):
    """Family entry points called twice on new values: the replay matches the references."""
    t = tol(dtype)
    for _ in range(2):
        x = rng.standard_normal((3, 4, 9, 9)).astype(np.float32)
        X = runtime.tensor(x, dtype=dtype)
        xr = X.numpy().astype(np.float32)
        y, idx = P.max_pool2d_with_indices(X, 3, 2, 1)
        ref = np.full((3, 4, 5, 5), -np.inf, np.float32)
        pad = np.pad(xr, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        for i in range(5):
            for j in range(5):
                ref[:, :, i, j] = pad[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(2, 3))
        np.testing.assert_array_equal(y.numpy().astype(np.float32), ref)
        assert idx.numpy().shape == (3, 4, 5, 5)
        w = rng.standard_normal(9).astype(np.float32)
        out = N.rms_norm(X, runtime.tensor(w)).numpy().astype(np.float32)
        want = xr / np.sqrt((xr * xr).mean(-1, keepdims=True) + 1e-6) * w
        np.testing.assert_allclose(out, want, *t)
        sm = N.softmax_last_axis(X.permute(0, 1, 3, 2)).numpy().astype(np.float32)  # a copy in the call
        e = np.exp(xr.transpose(0, 1, 3, 2) - xr.transpose(0, 1, 3, 2).max(-1, keepdims=True))
        np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), *t)
    assert P.max_pool2d_with_indices.replay_records and N.softmax_last_axis.replay_records


def test_threads_replay_one_record_at_once(runtime):
    x = runtime.tensor(np.ones(300, np.float32))
    scaled_twice(x)
    results, errors = {}, []

    def work(k):
        try:
            for _ in range(20):
                y, _ = scaled_twice(runtime.tensor(np.full(300, float(k), np.float32)))
                results[k] = y.numpy()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for k in range(1, 4):
        np.testing.assert_array_equal(results[k], np.full(300, 4.0 * k, np.float32))


def _family_cases(rt, rng):
    """(name, function, arguments maker): entry points of several launches, temporaries and
    host-made constants, with fresh random values at every call."""
    from rudnn import convolution as C
    from rudnn import grid_sample as GS
    from rudnn import interpolation as I
    from rudnn import moe

    def r(*shape):
        return rt.tensor(rng.standard_normal(shape).astype(np.float32))

    linear = I.InterpolateOptions(I.InterpolateMode.Linear)

    def route():
        return moe.route(r(7, 16), moe.RoutingOptions(top_k=3, renormalize=True))

    return [
        ("layer_norm_backward", N.layer_norm_backward,
         lambda: (lambda x, g: (x, g, r(5, 12), *N.layer_norm_with_stats(x, g)[1:]))(r(5, 12), r(12))),
        ("interpolate_backward", I.interpolate_backward, lambda: (r(2, 3, 5, 6), r(2, 3, 9, 11), (9, 11), linear)),
        ("grid_sample_backward", GS.grid_sample_backward,
         lambda: (r(2, 3, 5, 6), rt.tensor(rng.uniform(-1.1, 1.1, (2, 4, 7, 2)).astype(np.float32)), r(2, 3, 4, 7))),
        ("conv_data_backward", C.conv_data_backward, lambda: (r(2, 4, 6, 6), r(4, 3, 3, 3), (2, 3, 8, 8))),
        ("moe._route", moe.routing._route, lambda: (r(7, 16), moe.RoutingOptions(top_k=3, renormalize=True))),
        ("moe._combine", moe.dispatch._combine,
         lambda: (lambda d: (r(21, 8), d._pair_rows, d._pair_weights, 7, 3))(route().dispatch(r(7, 8)))),
    ]


def test_family_entry_points_replay_what_running_them_gives(runtime, rng, monkeypatch):
    for name, fn, make in _family_cases(runtime, rng):
        fn(*make())  # (a host-made constant is uploaded on the first call: that one is not recorded)
        fn(*make())
        args = make()
        replayed = fn(*args)
        assert fn.replay_records, f"{name}: not recorded ({fn.replay_refusals})"
        monkeypatch.setenv("KERNELDSL_REPLAY", "0")
        direct = fn(*args)
        monkeypatch.setenv("KERNELDSL_REPLAY", "1")
        got = replayed if isinstance(replayed, tuple) else (replayed,)
        want = direct if isinstance(direct, tuple) else (direct,)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_a_replay_reuses_the_memory_of_results_that_are_gone_and_no_other(runtime, rng):
    """A small replayed call keeps its fused buffer: the next call reuses it only once the
    earlier results are gone, so results held at once never share memory."""
    g = runtime.tensor(np.ones(16, np.float32))
    xs = [rng.standard_normal((3, 16)).astype(np.float32) for _ in range(4)]
    N.layer_norm(runtime.tensor(xs[0]), g)
    held = [N.layer_norm(runtime.tensor(x), g) for x in xs]  # all alive together
    assert len({id(t.buffer) for t in held}) == len(held)
    for x, t in zip(xs, held):
        want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-5)
    del held
    x = runtime.tensor(xs[0])
    before = runtime.memory_stats()["allocation.all.allocated"]
    for _ in range(20):
        N.layer_norm(x, g).numpy()
    assert runtime.memory_stats()["allocation.all.allocated"] - before < 10
    runtime.empty_cache()  # gives the kept buffers back
    assert all(p.spare is None for p in N.layer_norm.replay_records.values())


def test_moe_dispatch_replays_group_every_row(runtime, rng):
    """Replayed moe dispatches (rows within an expert come in any order, so compared through
    combine): combining the dispatched rows themselves gives each token times its weights' sum."""
    from rudnn import moe
    opts = moe.RoutingOptions(top_k=3, renormalize=False)
    for _ in range(4):
        x = rng.standard_normal((7, 8)).astype(np.float32)
        plan = moe.route(runtime.tensor(rng.standard_normal((7, 16)).astype(np.float32)), opts)
        d = plan.dispatch(runtime.tensor(x))
        got = d.combine(d.values()).numpy()
        np.testing.assert_allclose(got, x * plan.weights().numpy().sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert moe.dispatch._dispatch.replay_records and moe.dispatch._combine.replay_records


def test_a_replay_zeroes_tensors_inside_its_fused_buffer(runtime, rng):
    """A zero fill replayed on a tensor at an offset of the fused buffer clears that tensor
    (the cpu and OpenCL fills once cleared the buffer's start instead)."""
    for _ in range(5):
        x = rng.standard_normal(100).astype(np.float32)
        y, ones = scaled_and_counted(runtime.tensor(x))
        np.testing.assert_array_equal(y.numpy(), x * np.float32(2.0))
        np.testing.assert_array_equal(ones.numpy(), np.ones(100, np.float32))
        del y, ones  # (the next call may reuse the buffer)
    assert scaled_and_counted.replay_records


def test_imported_memory_at_another_alignment_is_another_layout():
    """Operators choose vector widths by where data starts (ops.validation.aligned), so the key
    holds imported memory's address modulo 256; pool memory is always aligned."""
    rt = kd.runtime("cpu")
    base = np.zeros(64 + 16, np.float32)
    keys = []
    for start in (0, 1, 16):
        view = base[start:start + 64]
        keys.append(replay.call_key((rt.wrap(view),), {}, []))
    assert len(set(keys)) == 3  # 0, 4 and 64 bytes further: three places modulo 256
    pooled = [replay.call_key((rt.empty((64,), kd.f32),), {}, []) for _ in range(2)]
    assert pooled[0] == pooled[1]


@kd.kernel
def add_into(x: kd.Tensor[kd.f32, 1], h: kd.Tensor[kd.f32, 1], y: kd.Tensor[kd.f32, 1], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        y[i] = x[i] + h[i]


@replay.replayable
def plus_host(x, host: np.ndarray):
    """x + host, the host array uploaded as it is: replayed with the next call's array."""
    n = x.shape[0]
    y = x.runtime.empty((n,), kd.f32)
    add_into[(n + 63) // 64, 64](x, x.runtime.tensor(host), y, n)
    return y


@replay.replayable
def plus_host_first(x, host: np.ndarray):
    """x + host[0]: the array's values steer the launch (a scalar), so never recorded."""
    n = x.shape[0]
    y = x.runtime.empty((n,), kd.f32)
    scale_into[(n + 63) // 64, 64](x, y, 1.0, n)
    add_in_place[(n + 63) // 64, 64](y, float(host[0]), n)
    return y


def test_host_array_arguments_are_uploaded_afresh_in_a_replay(runtime, rng):
    x = runtime.tensor(rng.standard_normal(70).astype(np.float32))
    for _ in range(3):  # new values each call: a stale upload would fail
        h = rng.standard_normal(70).astype(np.float32)
        np.testing.assert_array_equal(plus_host(x, h).numpy(), x.numpy() + h)
        np.testing.assert_array_equal(plus_host_first(x, h).numpy(), x.numpy() + h[0])
    assert len(plus_host.replay_records) == 1
    assert plus_host_first.replay_records == {} and "not uploaded" in str(plus_host_first.replay_refusals)


def test_ctc_replays_with_new_targets_and_still_checks_them(runtime, rng, monkeypatch):
    """ctc validates targets and lengths on the host each call; the launches are replayed
    with the new call's targets uploaded (a stale upload would give the first call's loss)."""
    from rudnn import ctc as CTC
    T, Nb, C, S = 10, 3, 6, 4
    lp = rng.standard_normal((T, Nb, C)).astype(np.float32)
    lp = runtime.tensor(lp - np.log(np.exp(lp).sum(-1, keepdims=True)))
    il = runtime.tensor(np.array([10, 9, 7], np.int32))
    for _ in range(3):
        tg = runtime.tensor(rng.integers(1, C, (Nb, S)).astype(np.int32))
        tl = runtime.tensor(rng.integers(1, S + 1, Nb).astype(np.int32))
        got = CTC.ctc_loss(lp, tg, il, tl, reduction="none").numpy()
        grad = CTC.ctc_loss_backward(lp, tg, il, tl, 1.0).numpy()
        monkeypatch.setenv("KERNELDSL_REPLAY", "0")
        np.testing.assert_array_equal(got, CTC.ctc_loss(lp, tg, il, tl, reduction="none").numpy())
        np.testing.assert_array_equal(grad, CTC.ctc_loss_backward(lp, tg, il, tl, 1.0).numpy())
        monkeypatch.setenv("KERNELDSL_REPLAY", "1")
    assert CTC._loss.replay_records and CTC._backward.replay_records
    bad = runtime.tensor(np.zeros((Nb, S), np.int32))  # the blank as a label: same layout, still refused
    with pytest.raises(CTC.CtcError, match="not the blank"):
        CTC.ctc_loss(lp, bad, il, runtime.tensor(np.array([2, 1, 1], np.int32)), reduction="none")


def test_plan_methods_replay_on_the_plan_they_are_called_on(runtime, rng, monkeypatch):
    """Two DevicePlans of one layout but other page tables: each call reads its own plan's
    tables; an append on a plan whose writes collide still raises after a replayed one."""
    from rudnn.paged_attention import DevicePlan, HostPlan, PagedAttentionError
    q = runtime.tensor(rng.standard_normal((2, 2, 8)).astype(np.float32))
    k, v = (runtime.tensor(rng.standard_normal((4, 4, 1, 8)).astype(np.float32)) for _ in range(2))
    plans = [DevicePlan.upload(HostPlan(4, 4, t, [6, 5], [0, 1], [5, 4]), q) for t in ([[3, 0], [2, 1]],
                                                                                        [[1, 2], [0, 3]])]
    for plan in plans + plans:
        got = plan.attention(q, k, v, 0.5, True).numpy()
        monkeypatch.setenv("KERNELDSL_REPLAY", "0")
        np.testing.assert_array_equal(got, plan.attention(q, k, v, 0.5, True).numpy())
        monkeypatch.setenv("KERNELDSL_REPLAY", "1")
    assert len(DevicePlan.attention.replay_records) == 1
    nk = runtime.tensor(rng.standard_normal((2, 1, 8)).astype(np.float32))
    for plan in plans:
        assert plan.append(nk, nk, k, v) == (k, v)
    clash = DevicePlan.upload(HostPlan(4, 4, [[3, 0], [2, 0]], [6, 5], [0, 1], [5, 4]), q)  # page 0 shared
    with pytest.raises(PagedAttentionError, match="validate_writes"):
        clash.append(nk, nk, k, v)


def test_experts_forward_replays_on_each_experts_weights(runtime, rng, monkeypatch):
    from rudnn import moe
    T, E, H, I = 6, 4, 8, 16
    x, logits = (runtime.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((T, H), (T, E)))
    opts = moe.RoutingOptions(top_k=2, renormalize=True)
    experts = [moe.SwiGluExperts(*(runtime.tensor((rng.standard_normal(s) * 0.1).astype(np.float32))
                                   for s in ((E, I, H), (E, I, H), (E, H, I)))) for _ in range(2)]
    for ex in experts + experts:
        got = ex.forward(x, logits, opts).numpy()
        monkeypatch.setenv("KERNELDSL_REPLAY", "0")
        np.testing.assert_array_equal(got, ex.forward(x, logits, opts).numpy())
        monkeypatch.setenv("KERNELDSL_REPLAY", "1")
    assert len(moe.SwiGluExperts.forward.replay_records) == 1
