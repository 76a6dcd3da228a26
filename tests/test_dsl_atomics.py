"""Atomics on global and shared memory: add/min/max/exchange/cas/and/or/xor on i32/u32,
add on f32 (and i64 where the device has it); contended updates from many cubes and units."""
import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("atomics"), pytest.mark.interpreter]


@kd.kernel
def histogram(x: kd.Tensor[kd.i32], hist: kd.Tensor, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        kd.atomic_add(hist, x[i], 1)


@pytest.mark.parametrize("dt", ["i32", "u32", "f32"])
def test_global_atomic_add_histogram(runtime, rng, dt):
    n = 5000
    x = rng.integers(0, 17, n).astype(np.int32)
    hist = runtime.zeros(17, dt)
    histogram[(n + 127) // 128, 128](runtime.tensor(x), hist, n)
    np.testing.assert_array_equal(hist.numpy(), np.bincount(x, minlength=17).astype(kd.as_dtype(dt).np))


@kd.func
def every_integer_op(acc, v):
    """min, max, and, or, xor, add of v into acc[0..5]; exchange into acc[6], returning the old value."""
    kd.atomic_min(acc, 0, v)
    kd.atomic_max(acc, 1, v)
    kd.atomic_and(acc, 2, v)
    kd.atomic_or(acc, 3, v)
    kd.atomic_xor(acc, 4, v)
    kd.atomic_add(acc, 5, v)
    return kd.atomic_exchange(acc, 6, v)


@kd.kernel
def int_atomics(x: kd.Tensor, acc: kd.Tensor, old: kd.Tensor, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        old[i] = every_integer_op(acc, x[i])


def integer_inputs(rng, dt, n):
    """(x, the initial acc) for every_integer_op: identities for min/and, a start for exchange."""
    npd = kd.as_dtype(dt).np
    x = rng.integers(1, 1 << 20, n).astype(npd)
    init = np.array([np.iinfo(npd).max, 0, np.iinfo(npd).max if dt == "u32" else -1, 0, 0, 0, 12345], npd)
    return x, init


def check_integer_ops(got, old, x, init):
    """acc after every_integer_op over x (got) and the exchange's old values (old)."""
    assert got[0] == x.min() and got[1] == x.max()
    assert got[2] == np.bitwise_and.reduce(x) & init[2]
    assert got[3] == np.bitwise_or.reduce(x)
    assert got[4] == np.bitwise_xor.reduce(x)
    assert got[5] == x.astype(np.int64).sum().astype(x.dtype)
    # exchange: the values seen form a chain — every x and the initial value appear once
    seen = np.sort(np.concatenate([old, [got[6]]]))
    np.testing.assert_array_equal(seen, np.sort(np.concatenate([x, [init[6]]])))


@pytest.mark.parametrize("dt", ["i32", "u32"])
def test_integer_atomics(runtime, rng, dt):
    n = 777
    x, init = integer_inputs(rng, dt, n)
    acc = runtime.tensor(init)
    old = runtime.zeros(n, dt)
    int_atomics[(n + 63) // 64, 64](runtime.tensor(x), acc, old, n)
    check_integer_ops(acc.numpy(), old.numpy(), x, init)


@kd.kernel
def cas_counter(counter: kd.Tensor[kd.i32], tickets: kd.Tensor[kd.i32], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        done = False
        while not done:                      # a lock-free increment by compare-exchange
            cur = counter[0]
            prev = kd.atomic_cas(counter, 0, cur, cur + 1)
            if prev == cur:
                tickets[i] = cur
                done = True


def test_compare_exchange_loop(runtime):
    n = 300
    counter = runtime.zeros(1, "i32")
    tickets = runtime.zeros(n, "i32")
    cas_counter[(n + 31) // 32, 32](counter, tickets, n)
    assert counter.numpy()[0] == n
    np.testing.assert_array_equal(np.sort(tickets.numpy()), np.arange(n))


@kd.kernel
def shared_atomics(x: kd.Tensor[kd.i32], out: kd.Tensor[kd.i32], fout: kd.Tensor[kd.f32], B: kd.Const[int]):
    t = kd.unit_pos_x()
    bins = kd.shared(kd.i32, 8)
    fsum = kd.shared(kd.f32, 1)
    mx = kd.shared(kd.u32, 1)
    if t < 8:
        bins[t] = 0
    if t == 0:
        fsum[0] = 0.0
        mx[0] = 0
    kd.sync_cube()
    v = x[kd.cube_pos_x() * B + t]
    kd.atomic_add(bins, v % 8, 1)
    kd.atomic_add(fsum, 0, kd.f32(v) * 0.5)
    kd.atomic_max(mx, 0, kd.u32(v))
    kd.sync_cube()
    if t < 8:
        out[kd.cube_pos_x() * 9 + t] = bins[t]
    if t == 0:
        out[kd.cube_pos_x() * 9 + 8] = kd.i32(mx[0])
        fout[kd.cube_pos_x()] = fsum[0]


def test_shared_atomics(runtime, rng):
    B, cubes = 64, 3
    x = rng.integers(0, 100, B * cubes).astype(np.int32)
    out = runtime.zeros(9 * cubes, "i32")
    fout = runtime.zeros(cubes, "f32")
    shared_atomics[cubes, B](runtime.tensor(x), out, fout, B)
    got = out.numpy().reshape(cubes, 9)
    for c in range(cubes):
        xs = x[c * B:(c + 1) * B]
        np.testing.assert_array_equal(got[c, :8], np.bincount(xs % 8, minlength=8))
        assert got[c, 8] == xs.max()
        assert fout.numpy()[c] == xs.sum() * 0.5


@kd.kernel
def shared_int_atomics(x: kd.Tensor, acc: kd.Tensor, old: kd.Tensor, tickets: kd.Tensor[kd.i32], n: kd.i32,
                       B: kd.Const[int]):
    """int_atomics and cas_counter on a shared copy of acc (one cube; unit u takes x[u], x[u + B], ...)."""
    u = kd.unit_pos_x()
    sh = kd.shared(acc.dtype, 8)
    if u < 7:
        sh[u] = acc[u]
    if u == 7:
        sh[7] = 0
    kd.sync_cube()
    for i0 in range(0, n, B):
        i = i0 + u
        if i < n:
            old[i] = every_integer_op(sh, x[i])
            done = False
            while not done:
                cur = kd.atomic_add(sh, 7, 0)  # (an atomic read: a plain one would race)
                prev = kd.atomic_cas(sh, 7, cur, cur + 1)
                if prev == cur:
                    tickets[i] = kd.i32(cur)
                    done = True
    kd.sync_cube()
    if u < 8:
        acc[u] = sh[u]


@pytest.mark.parametrize("dt", ["i32", "u32"])
def test_shared_integer_atomics(runtime, rng, dt):
    """The same rules on shared memory (the cpu runtime runs these as plain read-modify-writes in
    lane order, one thread a cube): lanes of one vector hitting one slot lose no update."""
    n, B = 777, 64
    x, init = integer_inputs(rng, dt, n)
    acc = runtime.tensor(np.append(init, 0).astype(init.dtype))  # (slot 7: the cas counter)
    old = runtime.zeros(n, dt)
    tickets = runtime.zeros(n, "i32")
    shared_int_atomics[1, B](runtime.tensor(x), acc, old, tickets, n, B)
    got = acc.numpy()
    check_integer_ops(got, old.numpy(), x, init)
    assert got[7] == n
    np.testing.assert_array_equal(np.sort(tickets.numpy()), np.arange(n))


@kd.kernel
def shared_float_tickets(olds: kd.Tensor[kd.f32], total: kd.Tensor[kd.f32], B: kd.Const[int]):
    """Each unit adds 1.0 to one shared f32 four times; the old values are the tickets."""
    u = kd.unit_pos_x()
    sh = kd.shared(kd.f32, 1)
    if u == 0:
        sh[0] = 0.0
    kd.sync_cube()
    for k in range(4):
        olds[k * B + u] = kd.atomic_add(sh, 0, kd.f32(1.0))
    kd.sync_cube()
    if u == 0:
        total[0] = sh[0]


def test_shared_float_add_returns_each_old_value_once(runtime):
    B = 64
    olds = runtime.zeros(4 * B, "f32")
    total = runtime.zeros(1, "f32")
    shared_float_tickets[1, B](olds, total, B)
    assert total.numpy()[0] == 4 * B
    np.testing.assert_array_equal(np.sort(olds.numpy()), np.arange(4 * B, dtype=np.float32))


@kd.kernel
def wide_add(x: kd.Tensor[kd.i64], acc: kd.Tensor[kd.i64], old: kd.Tensor[kd.i64], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        old[i] = kd.atomic_add(acc, i % 3, x[i])


def test_i64_atomic_add_where_the_device_has_it(runtime, rng):
    """kd.atomic_add on i64 (caps.atomics['add'] lists it where the device adds 64-bit words):
    values of either sign past 32 bits, carries across the low word; exact sums, and the old
    values returned form each slot's chain of partial sums."""
    if kd.i64 not in runtime.capabilities.atomics["add"]:
        pytest.skip(f"{runtime.capabilities.device_name} has no 64-bit atomic add")
    n = 999
    x = rng.integers(-(1 << 40), 1 << 40, n).astype(np.int64)
    init = np.array([0, (1 << 32) - 1, -(1 << 33)], np.int64)
    acc, old = runtime.tensor(init), runtime.zeros(n, "i64")
    wide_add[(n + 63) // 64, 64](runtime.tensor(x), acc, old, n)
    got, olds = acc.numpy(), old.numpy()
    for s in range(3):
        xs, os_ = x[s::3], olds[s::3]
        assert got[s] == init[s] + xs.sum()
        np.testing.assert_array_equal(np.sort(np.append(os_, got[s])), np.sort(np.append(os_ + xs, init[s])))
