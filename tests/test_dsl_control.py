"""Runtime if/for/while/break/continue/return, compile-time constants and unrolling."""
import re

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import CompileError

pytestmark = [pytest.mark.feature("control flow"), pytest.mark.interpreter]


@kd.kernel
def branches(x: kd.Tensor[kd.i32], out: kd.Tensor[kd.i32], n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i >= n:
        return
    v = x[i]
    if v < 0:
        r = -1
    elif v == 0:
        r = 0
    elif v < 10 and v % 2 == 1:
        r = 1
    else:
        r = 2
    out[i] = r


def test_if_elif_else_and_early_return(runtime, rng):
    n = 101
    x = rng.integers(-5, 20, n).astype(np.int32)
    out = runtime.tensor(np.full(n + 7, 99, np.int32))
    branches[(n + 31) // 32, 32](runtime.tensor(x), out, n)
    ref = np.where(x < 0, -1, np.where(x == 0, 0, np.where((x < 10) & (x % 2 == 1), 1, 2)))
    got = out.numpy()
    np.testing.assert_array_equal(got[:n], ref)
    np.testing.assert_array_equal(got[n:], 99)  # untouched past n


@kd.kernel
def loops(x: kd.Tensor[kd.i32], out: kd.Tensor[kd.i32], n: kd.i32, step: kd.i32):
    i = kd.unit_pos_x()
    s = 0
    for j in range(i, n, step):          # runtime step
        s += x[j]
    out[i, 0] = s
    s = 0
    for j in range(n - 1, -1, -3):       # negative constant step
        s += x[j] * (j % 3)
    out[i, 1] = s
    k = 0
    t = 0
    while True:                          # while with break and continue
        k += 1
        if k > i + 5:
            break
        if k % 2 == 0:
            continue
        t += k
    out[i, 2] = t
    c = 0
    for a in range(4):                   # nested loops, break out of the inner one
        for b in range(10):
            if b > a + i % 3:
                break
            c += 1
    out[i, 3] = c
    w = i
    while w > 1:                         # while with a data-dependent condition
        w = w // 2 if w % 2 == 0 else 3 * w + 1
        c += 1
    out[i, 4] = c


def test_loops_break_continue(runtime, rng):
    n, units, step = 23, 16, 5
    x = rng.integers(-9, 9, n).astype(np.int32)
    out = runtime.zeros((units, 5), "i32")
    loops[1, units](runtime.tensor(x), out, n, step)
    ref = np.zeros((units, 5), np.int64)
    for i in range(units):
        ref[i, 0] = x[i:n:step].sum()
        ref[i, 1] = sum(x[j] * (j % 3) for j in range(n - 1, -1, -3))
        ref[i, 2] = sum(k for k in range(1, i + 6) if k % 2 == 1)
        c = sum(min(10, a + i % 3 + 1) for a in range(4))
        ref[i, 3] = c
        w = i
        while w > 1:
            w = w // 2 if w % 2 == 0 else 3 * w + 1
            c += 1
        ref[i, 4] = c
    np.testing.assert_array_equal(out.numpy(), ref)


@kd.kernel
def consts(out: kd.Tensor[kd.f32], N: kd.Const[int], SCALE: kd.Const[float], MODE: kd.Const[str]):
    i = kd.unit_pos_x()
    acc = kd.f32(0)
    for j in kd.unroll(N):
        acc += j * SCALE
    HALF = N // 2
    if MODE == "neg":
        acc = -acc
    elif MODE == "half":
        acc = acc + HALF
    out[i] = acc + i


@pytest.mark.parametrize("mode", ["neg", "half", "plain"])
def test_const_params_unroll_and_static_if(runtime, mode):
    out = runtime.zeros(5, "f32")
    consts[1, 5](out, 6, 0.5, mode)
    base = sum(j * 0.5 for j in range(6))
    base = -base if mode == "neg" else base + 3 if mode == "half" else base
    np.testing.assert_allclose(out.numpy(), base + np.arange(5))


@kd.func
def clamp_add(a, b, lo: float = 0.0):
    s = a + b
    return kd.max(s, lo)


@kd.kernel
def uses_func(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    i = kd.unit_pos_x()
    out[i] = clamp_add(x[i], 1.0) + clamp_add(x[i], -10.0, lo=-1.0)


def test_device_function_inlining(runtime):
    x = np.linspace(-3, 3, 9).astype(np.float32)
    out = runtime.zeros(9, "f32")
    uses_func[1, 9](runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), np.maximum(x + 1, 0) + np.maximum(x - 10, -1))


@kd.kernel
def short_circuit(x: kd.Tensor[kd.i32], out: kd.Tensor[kd.i32], n: kd.i32):
    i = kd.unit_pos_x()
    # x[i] is only read when i < n: the right side must not be evaluated otherwise
    ok = i < n and x[i] > 0
    out[i] = 1 if ok or i == 0 else 0


def test_short_circuit_logic(runtime):
    x = np.array([3, -1, 2], np.int32)
    out = runtime.zeros(8, "i32")
    short_circuit[1, 8](runtime.tensor(x), out, 3)
    np.testing.assert_array_equal(out.numpy(), [1, 0, 1, 0, 0, 0, 0, 0])


@kd.kernel
def ternary_and_vars(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    i = kd.unit_pos_x()
    v: kd.f32 = x[i]
    a, b = v * 2, v + 1
    out[i] = a if v > 0 else b


def test_annotated_locals_tuple_assign_ternary(runtime):
    x = np.array([-2, -0.5, 0.5, 3], np.float32)
    out = runtime.zeros(4, "f32")
    ternary_and_vars[1, 4](runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), np.where(x > 0, x * 2, x + 1))


@kd.kernel
def const_in_the_middle(x: kd.Tensor[kd.f32], N: kd.Const[int], y: kd.Tensor[kd.f32], s: kd.f32):
    i = kd.unit_pos_x()
    y[i] = x[i] * N + s


def test_const_parameter_between_runtime_parameters(runtime):
    x = runtime.tensor(np.arange(8, dtype=np.float32))
    y = runtime.zeros(8, "f32")
    const_in_the_middle[1, 8](x, 3, y, 0.5)
    np.testing.assert_array_equal(y.numpy(), np.arange(8) * 3 + 0.5)


@kd.func
def scaled_at(x, pos, scale):
    return x[pos] * scale


@kd.kernel
def func_with_positions(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2]):
    t = kd.unit_pos_x()
    for r in range(x.shape[0]):
        out[r, t] = scaled_at(x, r * x.shape[1] + t, 2.0)


def test_device_function_with_position_arguments_in_a_loop(runtime, rng):
    a = rng.standard_normal((3, 16)).astype(np.float32)
    out = runtime.zeros((3, 16), "f32")
    func_with_positions[1, 16](runtime.tensor(a), out)
    np.testing.assert_array_equal(out.numpy(), a * 2)


@kd.kernel
def tuple_state(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i32, flip: kd.i32):
    """Tuples of run-time values carried through a run-time loop (rebuilt element by element
    and rotated) and out of a run-time branch."""
    m = ()
    for s in kd.unroll(3):
        m = m + (kd.f32(0),)
    r = (1.0, 2.0, 3.0)  # compile-time numbers: still carried as run-time values
    for j in range(n):
        m2 = ()
        for s in kd.unroll(3):
            m2 = m2 + (kd.max(m[s], x[j * 3 + s]),)
        m = m2
        r = (r[1], r[2], r[0])
    if flip > 0:
        r = (r[0] * 10.0, r[1], r[2])
    for s in kd.unroll(3):
        y[s] = m[s]
        y[3 + s] = r[s]


@pytest.mark.parametrize("n,flip", [(0, 0), (4, 0), (5, 1)])
def test_tuples_carried_through_loops_and_branches(runtime, rng, n, flip):
    x = rng.standard_normal(max(3 * n, 3)).astype(np.float32)
    y = runtime.zeros(6, "f32")
    tuple_state[1, 1](runtime.tensor(x), y, n, flip)
    want_m = x[:3 * n].reshape(n, 3).max(0).clip(0) if n else np.zeros(3)
    r = np.roll(np.array([1.0, 2.0, 3.0]), -(n % 3))
    if flip:
        r[0] *= 10
    np.testing.assert_allclose(y.numpy(), np.concatenate([want_m, r]), rtol=1e-6)


@kd.kernel
def nested_tuple_state(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i32, flip: kd.i32):
    """A tuple of tuples of run-time values carried through a run-time loop and out of a
    run-time branch, as flat ones are (it was once bound by value: the loop reread its first
    values every iteration and the branch's last assignment won)."""
    lines = ((x[0], x[0] * 2.0), (x[0] + 1.0, x[0] + 2.0))
    for j in range(n):
        lines = ((lines[0][0] + 1.0, lines[0][1]), (lines[1][0], lines[1][1] * 2.0))
    if flip > 0:
        lines = ((lines[0][0], -lines[0][1]), lines[1])
    for t in kd.unroll(2):
        y[2 * t] = lines[t][0]
        y[2 * t + 1] = lines[t][1]


@pytest.mark.parametrize("n,flip", [(0, 1), (3, 0)])
def test_nested_tuples_are_carried_like_flat_ones(runtime, n, flip):
    x = runtime.tensor(np.array([5.0], np.float32))
    y = runtime.zeros(4, "f32")
    nested_tuple_state[1, 1](x, y, n, flip)
    np.testing.assert_array_equal(y.numpy(), [5.0 + n, 10.0 * (-1 if flip else 1), 6.0, 7.0 * 2 ** n])


@kd.kernel
def tuple_grown_in_branch(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], flip: kd.i32, READ_AFTER: kd.Const[bool]):
    """A tuple built element by element inside a run-time branch: fine to use there; read
    after the branch it would hold values only when the branch ran, which is an error."""
    a = ()
    if flip > 0:
        for s in kd.unroll(2):
            a = a + (x[s] * 2.0,)
        y[0] = a[0] + a[1]
    else:
        for s in kd.unroll(2):
            a = a + (x[s],)
    if READ_AFTER:
        y[1] = a[1]


def test_tuple_grown_in_a_branch_is_usable_there_and_an_error_after(runtime):
    x = runtime.tensor(np.array([1.0, 2.0], np.float32))
    y = runtime.zeros(2, "f32")
    tuple_grown_in_branch[1, 1](x, y, 1, False)
    np.testing.assert_allclose(y.numpy(), [6.0, 0.0])
    with pytest.raises(CompileError, match=r"tuple 'a' got new variables inside the run-time `if` at line \d+"):
        tuple_grown_in_branch[1, 1](x, y, 1, True)


@kd.kernel
def loop_variable_after(out: kd.Tensor[kd.i32], n: kd.i32, stop_at: kd.i32):
    for i in range(n):
        pass
    out[0] = i          # noqa: F821 (the first value that failed the test, or the start: C's for)
    for j in range(2, n, 3):
        pass
    out[1] = j          # noqa: F821
    for k in range(n, 0, -2):
        pass
    out[2] = k          # noqa: F821
    for m in range(n):
        if m == stop_at:
            break
    out[3] = m          # noqa: F821 (a break keeps the value it broke at)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_a_loop_variable_after_its_loop_is_the_same_everywhere(runtime, n):
    """Reading a counted loop's variable after the loop gives C's value on every runtime, the
    interpreter included (Python's `for` would leave the last value, or no value for n = 0)."""
    out = runtime.zeros(4, "i32")
    loop_variable_after[1, 1](out, n, 2)
    def c_end(start, stop, step):
        v = start
        while (v < stop) if step > 0 else (v > stop):
            v += step
        return v
    np.testing.assert_array_equal(out.numpy(), [c_end(0, n, 1), c_end(2, n, 3), c_end(n, 0, -2),
                                                2 if n > 2 else c_end(0, n, 1)])


@kd.kernel
def hinted_copy(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], N: kd.Const[int]):
    kd.cubes_per_compute_unit(N)
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < len(x):
        y[i] = x[i] * 2.0


def test_cubes_per_compute_unit_is_a_hint(runtime, rng):
    """kd.cubes_per_compute_unit(n) changes no result (CUDA caps registers with it:
    tests/test_cuda_codegen.py); n must be a compile-time int of at least 1."""
    x = rng.standard_normal(300).astype(np.float32)
    y = runtime.zeros((300,), "f32")
    hinted_copy[(3,), 128](runtime.tensor(x), y, 2)
    np.testing.assert_array_equal(y.numpy(), x * 2)
    with pytest.raises(kd.CompileError, match="at least 1"):
        hinted_copy[(3,), 128](runtime.tensor(x), y, 0)


@kd.kernel
def scalar_chains(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2], W: kd.Const[int], K: kd.Const[int]):
    kd.scalar_statements()
    row = kd.cube_pos_x()
    sums = ()
    for w in kd.unroll(W):
        sums = sums + (kd.f32(0),)
    for c in kd.unroll(K):
        nxt = ()
        for w in kd.unroll(W):
            nxt = nxt + (sums[w] + x[row, w * K + c],)
        sums = nxt
    for w in kd.unroll(W):
        out[row, w] = sums[w]


def test_scalar_statements_is_a_hint(runtime, rng):
    """kd.scalar_statements() changes no result on any runtime: the same sums in the same
    order. The cpu runtime compiles such a kernel without LLVM's SLP vectoriser, which would
    pack these chains into vectors."""
    a = rng.standard_normal((4, 40)).astype(np.float32)
    x, out = runtime.tensor(a), runtime.zeros((4, 5), "f32")
    scalar_chains[4, 1](x, out, 5, 8)
    want = np.zeros((4, 5), np.float32)
    for c in range(8):
        want += a[:, c::8]
    np.testing.assert_array_equal(out.numpy(), want)
    if runtime.name.split(":")[0] == "cpu":
        from kerneldsl.backends.cpu import compiler
        rendering = next(iter(runtime.renderings(*scalar_chains.specialize(runtime, x, out, 5, 8, block=1).ir())))
        packed = lambda ir: re.search(r"fadd[^\n]*<\d+ x float>", str(ir)) is not None  # noqa: E731
        assert not packed(compiler.optimize(rendering.source, slp=rendering.rendered["slp"])), "the hint was ignored"
        if not packed(compiler.optimize(rendering.source)):  # (llvmlite is not pinned)
            pytest.skip("this LLVM's SLP vectoriser does not pack these chains: the hint changes nothing here")


@kd.kernel
def spread_pairs(x: kd.Tensor, y: kd.Tensor, STREAM: kd.Const[bool]):
    if STREAM:
        kd.streaming_stores()
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    v = x[i]
    y[2 * i] = v
    y[2 * i + 1] = -v


def test_streaming_stores_is_a_hint(runtime, rng):
    """kd.streaming_stores() changes no result on any runtime, whether the output starts on a
    vector's alignment or not. Where Capabilities.streaming_stores (the cpu runtime on x86),
    the hinted kernel's wide stores are non-temporal (taken where aligned) and it ends with
    an sfence; the same kernel without the hint has neither."""
    n = 4096
    a = rng.standard_normal(n).astype(np.float32)
    want = np.stack([a, -a], axis=1).reshape(-1)
    x = runtime.tensor(a)
    for start in (0, 1, 3):  # the output's first element: on a 64-byte boundary, then off it
        whole = runtime.zeros((2 * n + start,), "f32")
        y = whole[start:]
        spread_pairs[n // 256, 256](x, y, True)
        np.testing.assert_array_equal(y.numpy(), want)
        assert not whole.numpy()[:start].any()
    if runtime.capabilities.streaming_stores:
        from kerneldsl.backends.cpu import compiler

        def assembly(stream: bool) -> str:
            rendering = next(iter(runtime.renderings(*spread_pairs.specialize(runtime, x, y, stream, block=256).ir())))
            return compiler.assembly(rendering.source, **rendering.rendered)
        hinted, plain = assembly(True), assembly(False)
        assert re.search(r"movnt(ps|pd|dq)", hinted) and "sfence" in hinted, "the hint was ignored"
        assert "movnt" not in plain and "sfence" not in plain


@kd.kernel
def pair_sums(g: kd.Tensor, out: kd.Tensor, n: kd.i32, AVOID: kd.Const[bool]):
    """out[i] = g[2i] + g[2i + 1]: a stride-2 load, which LLVM may make gathers."""
    if AVOID:
        kd.avoid_gathers()
    for i0 in range(0, n, kd.cube_dim_x()):
        i = i0 + kd.unit_pos_x()
        if i < n:
            out[i] = g[2 * i] + g[2 * i + 1]


def test_avoid_gathers_is_a_hint(runtime, rng):
    """kd.avoid_gathers() changes no result on any runtime. On the cpu runtime of an x86 host
    with gathers (AVX2 or AVX-512) the hinted kernel compiles for "+prefer-no-gather" and its
    stride-2 load has no gather instruction (unhinted, LLVM makes it gathers on Zen 4); the
    feature string is left as it is on hosts without gathers."""
    from kerneldsl.backends.cpu import compiler
    n = 1000
    g = rng.standard_normal(2 * n).astype(np.float32)
    for avoid in (True, False):
        out = runtime.zeros((n,), "f32")
        pair_sums[1, 64](runtime.tensor(g), out, n, avoid)
        np.testing.assert_array_equal(out.numpy(), g[0::2] + g[1::2])
    import llvmlite.binding as llvm
    known = llvm.llvm_version_info[0] >= compiler.NO_GATHER_LLVM
    assert compiler.without_gathers("+sse2,+avx,+avx2,+fma") == "+sse2,+avx,+avx2,+fma" + (
        ",+prefer-no-gather" if known else "")
    assert compiler.without_gathers("+sse2,+avx,-avx2,-avx512f") == "+sse2,+avx,-avx2,-avx512f"
    assert compiler.without_gathers("+neon,+fp-armv8") == "+neon,+fp-armv8"
    if runtime.name.split(":")[0] != "cpu" or compiler.without_gathers(compiler.features()) == compiler.features():
        return  # (the hint is for the cpu runtime on hosts with gather instructions)
    x, y = runtime.zeros((2 * n,), "f32"), runtime.zeros((n,), "f32")
    rendering = next(iter(runtime.renderings(*pair_sums.specialize(runtime, x, y, n, True, block=64).ir())))
    assert rendering.rendered["gathers"] is False
    assert not re.search(r"v(p)?gather", compiler.assembly(rendering.source, **rendering.rendered))


@kd.kernel
def copy_cast_prefix(out: kd.Tensor, src: kd.Tensor, N: kd.Const[int]):
    """out[i] = src[i] for i < N, cast to out's dtype, a cube's units striding over N (a
    compile-time count: the vectorised loop's last vector has a constant mask)."""
    for i0 in range(0, N, kd.cube_dim_x()):
        i = i0 + kd.unit_pos_x()
        if i < N:
            out[i] = src[i]


@pytest.mark.parametrize("out_dtype, src_dtype", [("bf16", "f32"), ("u8", "i32"), ("i32", "i64")])
def test_a_last_partial_vector_stores_its_elements_only(runtime, out_dtype, src_dtype):
    """A narrowing store loop over a constant count one past a whole number of vectors stores
    exactly N elements: the element after them keeps its value (the cpu runtime's LLVM stored a
    one-lane masked bf16 / u8 / i32 store 4 or 8 bytes wide, overwriting out[N];
    backends/cpu/masked_stores.py)."""
    for n in (9, 33):
        src = (np.arange(n + 8) % 50).astype(kd.as_dtype(src_dtype).np)
        out = runtime.tensor(np.full(n + 8, 7, np.float32), out_dtype)
        copy_cast_prefix[1, 64](out, runtime.tensor(src), n)
        got = out.numpy().astype(np.float64)
        np.testing.assert_array_equal(got[:n], src[:n].astype(np.float64), err_msg=f"N = {n}")
        np.testing.assert_array_equal(got[n:], 7, err_msg=f"N = {n}: stored past the last element")
