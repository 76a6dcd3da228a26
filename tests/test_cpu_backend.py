"""CPU back end specifics: the generated code vectorises (unit loops, inline exp/log),
cubes of any size run, plane sizes are a runtime setting."""
import re

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.backends.cpu import compiler

pytestmark = pytest.mark.feature("cpu backend")


@kd.kernel
def softmax_rows(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2], B: kd.Const[int]):
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    n = x.shape[1]
    m = -kd.inf
    for i in range(0, n, B):
        j = i + t
        if j < n:
            m = kd.max(m, x[row, j])
    m = kd.plane_max(m)
    red = kd.shared(kd.f32, kd.plane_count())
    if kd.plane_elect():
        red[kd.plane_pos()] = m
    kd.sync_cube()
    for p in range(kd.plane_count()):
        m = kd.max(m, red[p])
    kd.sync_cube()
    s = kd.f32(0)
    for i in range(0, n, B):
        j = i + t
        if j < n:
            e = kd.exp(x[row, j] - m)
            out[row, j] = e
            s += e
    s = kd.plane_sum(s)
    if kd.plane_elect():
        red[kd.plane_pos()] = s
    kd.sync_cube()
    total = kd.f32(0)
    for p in range(kd.plane_count()):
        total += red[p]
    for i in range(0, n, B):
        j = i + t
        if j < n:
            out[row, j] = out[row, j] / total


def _optimised_ir(kernel, block, *args):
    return str(compiler.optimize(kernel.source(block, *args)))


def test_softmax_kernel_is_correct_and_vectorised():
    rt = kd.runtime("cpu")
    a = np.random.default_rng(0).standard_normal((5, 300)).astype(np.float32)
    x, out = rt.tensor(a), rt.zeros((5, 300), "f32")
    softmax_rows[5, 64](x, out, 64)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)
    ir = _optimised_ir(softmax_rows, 64, x, out, 64)
    assert "@expf" not in ir and "@llvm.exp." not in ir, "exp must be inline arithmetic, not a libm call"
    assert "x float>" in ir, "the unit loops must be vectorised"
    import re
    callees = set(re.findall(r"call [^@]*@\"?([\w.]+)", ir))
    assert callees and all(c.startswith("llvm.") for c in callees), f"library calls left: {callees}"
    assert "llvm.floor.v" in " ".join(callees)  # the exp range reduction runs on vectors


@kd.kernel
def strided_rows(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32], B: kd.Const[int]):
    row = kd.cube_pos_x()
    t = kd.unit_pos_x()
    acc = kd.f32(0)
    for i in range(0, x.shape[1], B):
        if i + t < x.shape[1]:
            acc += x[row, i + t]
    out[row * B + t] = acc


def test_unit_strided_loads_become_vector_loads():
    rt = kd.runtime("cpu")
    x, out = rt.zeros((3, 100), "f32"), rt.zeros(3 * 32, "f32")
    ir = _optimised_ir(strided_rows, 32, x, out, 32)
    assert "gather" not in ir
    assert "masked.load" in ir or "load <" in ir


@pytest.mark.parametrize("units", [1, 3, 1024, 4096])
def test_any_cube_size(units):
    rt = kd.runtime("cpu")
    out = rt.zeros(units, "i32")

    @kd.kernel
    def ids(o: kd.Tensor[kd.i32]):
        t = kd.unit_pos()
        s = kd.shared(kd.i32, kd.cube_units())
        s[t] = t
        kd.sync_cube()
        o[t] = s[kd.cube_units() - 1 - t] + kd.plane_sum(1) * 0

    ids[1, units](out)
    np.testing.assert_array_equal(out.numpy(), np.arange(units)[::-1])


def test_plane_size_is_a_runtime_setting():
    @kd.kernel
    def lanes(o: kd.Tensor[kd.i32]):
        o[kd.unit_pos()] = kd.PLANE_DIM * 100 + kd.plane_sum(1)

    for p in (1, 4, 16):
        rt = kd.runtime("cpu", plane_dim=p)
        out = rt.zeros(16, "i32")
        lanes[1, 16](out)
        np.testing.assert_array_equal(out.numpy(), p * 100 + p)


@kd.kernel
def big_frame(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    """A cube whose shared array (1 MB) makes a stack frame larger than the runtime lets
    the calling thread run."""
    N = 262_144  # the cpu runtime's whole 1 MiB of shared memory per cube
    buf = kd.shared(kd.f32, N)
    t = kd.unit_pos_x()
    for i in range(t, N, kd.cube_units()):
        buf[i] = x[kd.cube_pos_x() * N + i]
    kd.sync_cube()
    s = kd.f32(0)
    for i in range(t, N, kd.cube_units()):
        s += buf[N - 1 - i]
    out[kd.cube_pos_x() * kd.cube_units() + t] = s


@pytest.mark.parametrize("threads", [1, 2])
def test_large_frames_run_on_threads_with_room(rng, threads):
    """Shared arrays, emulated fragments and per-unit variables live in the kernel's stack
    frame: one past CALLER_FRAME_LIMIT runs on threads started with a stack to fit (a frame
    of several MB on an ordinary thread's stack corrupted memory)."""
    rt = kd.runtime("cpu")
    saved = rt.threads
    rt.threads = threads
    try:
        cubes, units = 3, 64
        x = rng.standard_normal(cubes * 262_144).astype(np.float32)
        out = rt.zeros(cubes * units, "f32")
        big_frame[cubes, units](rt.tensor(x), out)
        binary = next(iter(big_frame._binaries.values()))
        assert binary.frame_bytes > rt.CALLER_FRAME_LIMIT
        want = np.stack([x[c * 262_144:(c + 1) * 262_144][::-1][t::units].astype(np.float64).sum()
                         for c in range(cubes) for t in range(units)])
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)
    finally:
        rt.threads = saved


@kd.kernel
def spin_rows(x: kd.Tensor[kd.f32, 2], steps: kd.i32):
    """Each cube walks its row `steps` times: few units, long cubes."""
    r = kd.cube_pos_x()
    u = kd.unit_pos_x()
    acc = x[r, u]
    for _ in range(steps):
        acc = acc * 0.999 + 0.001
    x[r, u] = acc


def test_few_units_with_long_cubes_are_spread_over_the_workers(monkeypatch):
    """A launch too small to wake a second worker runs on one; once SLOW_LAUNCHES of its
    launches took longer than LONG_LAUNCH_S, the kernel's later launches use every worker,
    until one of them is short."""
    rt = kd.runtime("cpu", threads=2)
    spread = []
    real = type(rt)._run_on_pool

    def watching(self, binary, ncubes, workers, *rest):
        spread.append(workers)
        return real(self, binary, ncubes, workers, *rest)

    monkeypatch.setattr(type(rt), "_run_on_pool", watching)
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 0.0)  # every one-worker launch counts as long
    x = rt.tensor(np.zeros((4, 8), np.float32))
    binary_of = lambda: next(iter(spin_rows._plans.values())).binary  # noqa: E731
    spin_rows[4, 8](x, 10)
    spin_rows[4, 8](x, 10)
    assert binary_of().slow_launches == 2
    spread.clear()
    spin_rows[4, 8](x, 10)
    assert spread == [2]
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 1e9)  # a short spread launch: back to one worker
    spin_rows[4, 8](x, 10)
    assert binary_of().slow_launches == 0
    spread.clear()
    spin_rows[4, 8](x, 10)
    assert 2 not in spread
    want = np.zeros((4, 8), np.float32)
    for _ in range(50):
        want = want * np.float32(0.999) + np.float32(0.001)
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-6)


@kd.kernel
def scale_by(x: kd.Tensor[kd.f32, 1], y: kd.Tensor[kd.f32, 1], s: kd.f32, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        y[i] = x[i] * s


def _three_scalings(x):
    """y = x·2·3·5 through two scratch tensors: three launches a call."""
    n, rt = x.shape[0], x.runtime
    a, b, y = rt.empty((n,), kd.f32), rt.empty((n,), kd.f32), rt.empty((n,), kd.f32)
    scale_by[(n + 63) // 64, 64](x, a, 2.0, n)
    scale_by[(n + 63) // 64, 64](a, b, 3.0, n)
    scale_by[(n + 63) // 64, 64](b, y, 5.0, n)
    return y


def test_a_replayed_launch_sequence_is_handed_over_once(monkeypatch):
    """A replayed call's consecutive one-worker launches go to the fast worker in one handoff
    (handoff.py's kd_run_sequence), in order; a sequence that took long runs one by one."""
    from kerneldsl import replay
    from kerneldsl.backends.cpu.runtime import CpuLaunchSequence
    rt = kd.runtime("cpu", threads=2)
    op = replay.replayable(_three_scalings)
    handoffs = []
    real = type(rt)._run_handed_over

    def counting(self, *args):
        handoffs.append(args[2])  # the handed-over launch's cube count (a sequence: its launches)
        return real(self, *args)

    monkeypatch.setattr(type(rt), "_run_handed_over", counting)
    # on the class, as the other tests patch it: an instance patch, undone by pytest < 9.1,
    # left the cached runtime's own INLINE_UNITS behind, deaf to later class patches
    monkeypatch.setattr(type(rt), "FAST_WORKER_AFTER", 0)
    monkeypatch.setattr(type(rt), "INLINE_UNITS", 0)  # the handoff itself (inline runs: below)
    # no run counts as long until the test says so: on a loaded machine two 2 ms hiccups in a
    # row would otherwise split the sequence (a fresh-clone CI run at load 5 failed so)
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 1e9)
    rng = np.random.default_rng(3)
    op(rt.tensor(np.ones(100, np.float32)))  # recorded
    (program,) = op.replay_records.values()
    (step,) = [s for s in program.steps if s[0] == "run"]
    assert isinstance(step[1], CpuLaunchSequence) and len(step[1].launches) == 3
    for _ in range(3):
        x = rng.standard_normal(100).astype(np.float32)
        handoffs.clear()
        y = op(rt.tensor(x))
        np.testing.assert_allclose(y.numpy(), x * np.float32(30.0), rtol=1e-6)
        assert handoffs == [3]  # one handoff of the three launches
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 0.0)  # every run counts as long
    op(rt.tensor(np.ones(100, np.float32)))
    assert step[1].joined  # one long run can be a hiccup
    op(rt.tensor(np.ones(100, np.float32)))
    assert not step[1].joined  # two in a row: one by one from now on
    handoffs.clear()
    x = rng.standard_normal(100).astype(np.float32)
    np.testing.assert_allclose(op(rt.tensor(x)).numpy(), x * np.float32(30.0), rtol=1e-6)
    assert 3 not in handoffs  # launched one by one (those counted long then spread)
    monkeypatch.setattr(type(rt), "LONG_LAUNCH_S", 1e9)  # a short run one by one: joined again
    for b in {p.binary for p in step[1].launches}:
        b.slow_launches = 0
    op(rt.tensor(x))
    assert step[1].joined


@kd.kernel
def bucket_of(edges: kd.Tensor[kd.i32, 1], out: kd.Tensor[kd.i32, 1], n_edges: kd.i32):
    """out[cube · units + unit] = the last bucket whose edge is <= the cube's position, found
    by a uniform binary search; cubes past the last edge leave their outputs alone."""
    c = kd.cube_pos_x()
    if c >= edges[n_edges - 1]:
        return
    lo = 0
    n = n_edges
    while n > 1:
        half = n // 2
        if edges[lo + half] <= c:
            lo = lo + half
        n = n - half
    out[c * kd.cube_dim_x() + kd.unit_pos_x()] = lo * 100 + kd.unit_pos_x()


def test_uniform_while_and_early_return_run_once_a_cube():
    """A uniform while loop (no break) and a uniform `if ...: return` sit at the split level:
    the search runs once a cube, not once a unit, and the return ends the cube instead of
    masking every unit (a grouped GEMM's expert lookup; RESULTS.md session 32)."""
    from kerneldsl import analysis
    from kerneldsl.backends.cpu import regions
    rt = kd.runtime("cpu")
    edges = np.array([0, 3, 4, 9, 12], np.int32)
    cubes, units = 14, 8
    out = rt.tensor(np.full(cubes * units, -1, np.int32))
    bucket_of[cubes, units](rt.tensor(edges), out, len(edges))
    want = np.full((cubes, units), -1)
    for c in range(12):
        want[c] = (np.searchsorted(edges, c, side="right") - 1) * 100 + np.arange(units)
    np.testing.assert_array_equal(out.numpy().reshape(cubes, units), want)

    spec = bucket_of.specialize(rt, rt.tensor(edges), out, len(edges), block=units)
    kir = spec.ir()[0]
    items = regions.build_schedule(kir, analysis.Uniformity(kir)).items
    kinds = [type(it).__name__ for it in items]
    assert "SIf" in kinds and "SWhile" in kinds, kinds
    lifted_if = next(it for it in items if isinstance(it, regions.SIf))
    assert any(isinstance(x, regions.SJump) and x.kind == "return" for x in lifted_if.then)


def test_streaming_pass_takes_wide_tensor_stores_only():
    """streaming.py rewrites the vector stores of 32 bytes or more that carry the tensor TBAA
    tag (an aligned-address test, then a non-temporal or a plain store), leaves untagged ones
    (kd.shared arrays, spills) and narrow ones alone, and fences the function that streams.
    A store wider than a line (a ×2 interleave of 512-bit vectors) is tested for a line's
    alignment, not its width: a 64-byte aligned tensor may start off a 128-byte boundary."""
    from kerneldsl.backends.cpu import streaming
    module = "\n".join([
        "define void @k(ptr %t, ptr %s) {",
        "  store <16 x float> zeroinitializer, ptr %t, align 4, !tbaa !2",
        "  store <16 x float> zeroinitializer, ptr %s, align 4",
        "  store <4 x float> zeroinitializer, ptr %t, align 4, !tbaa !2",
        "  store <32 x float> zeroinitializer, ptr %t, align 4, !tbaa !2",
        "  ret void",
        "}",
        "define void @other() {",
        "  ret void",
        "}",
        '!0 = !{!"kd.tbaa"}',
        f'!1 = !{{!"{streaming.TENSOR_TYPE}", !0, i64 0}}',
        "!2 = !{!1, !1, i64 0}",
    ])
    out = streaming.rewrite(module)
    assert out.count('call void @"kd.stream.16xfloat.4"(ptr %t,') == 1
    assert "store <16 x float> zeroinitializer, ptr %s, align 4" in out
    assert "store <4 x float> zeroinitializer, ptr %t, align 4, !tbaa !2" in out
    assert "align 64, !nontemporal" in out and "and i64 %address, 63" in out
    assert out.count('call void @"kd.stream.32xfloat.4"(ptr %t,') == 1
    assert "store <32 x float> %v, ptr %p, align 64, !nontemporal" in out and "127" not in out
    assert out.count(streaming.SFENCE) == 1  # in @k, before its ret; @other is not fenced
    assert streaming.rewrite(module.replace("!tbaa !2", "")) is None  # nothing tagged: nothing to do
    if streaming.applies(compiler.target_machine().triple):
        import llvmlite.binding as llvm
        llvm.parse_assembly(out).verify()


def test_one_lane_masked_stores_become_scalar_stores():
    """masked_stores.py rewrites a masked store whose constant mask has one lane set into an
    extract and a store of that lane (its address and alignment), keeping the call's
    metadata; stores with several lanes or a run-time mask stay."""
    from kerneldsl.backends.cpu import ir_text, masked_stores
    one = "<i1 false, i1 false, i1 true, i1 false>"
    two = "<i1 true, i1 false, i1 true, i1 false>"
    call = "  tail call void @llvm.masked.store.v4i16.p0(<4 x i16> %v, ptr align 8 %p, <4 x i1> "
    module = "\n".join([
        "define void @k(ptr %p, <4 x i16> %v, <4 x i1> %m) {",
        f"{call}{one}), !llvm.access.group !0",
        f"{call}{two})",
        f"{call}%m)",
        "  ret void",
        "}",
        "declare void @llvm.masked.store.v4i16.p0(<4 x i16>, ptr, <4 x i1>)",
        "!0 = distinct !{}",
    ])
    out = masked_stores.rewrite(module)
    assert "%kd.lane0 = extractelement <4 x i16> %v, i64 2" in out
    assert "%kd.at0 = getelementptr i16, ptr %p, i64 2" in out
    assert "store i16 %kd.lane0, ptr %kd.at0, align 2, !llvm.access.group !0" in out
    assert out.count("@llvm.masked.store.v4i16.p0(<4 x i16> %v") == 2  # two lanes; a run-time mask
    assert masked_stores.rewrite(module.replace(one, two)) is None
    if ir_text.applies(compiler.target_machine().triple):
        import llvmlite.binding as llvm
        llvm.parse_assembly(out).verify()


@kd.kernel
def exp_rows(x: kd.Tensor[kd.f32, 1], y: kd.Tensor[kd.f32, 1], n: kd.i32):
    """y = exp(x), a cube's units striding over n (one vectorised unit loop)."""
    for i0 in range(0, n, kd.cube_dim_x()):
        i = i0 + kd.unit_pos_x()
        if i < n:
            y[i] = kd.exp(x[i])


def test_wide_vectors_on_avx512_hosts(monkeypatch):
    """On AVX-512 hosts the cpu runtime lifts LLVM's preference for 256-bit vectors (unless
    KERNELDSL_CPU_WIDE_VECTORS is off): the feature string gains "-prefer-256-bit" and a unit
    loop compiles to 512-bit registers; elsewhere, and with the switch off, nothing changes.
    Results are the same either way (the whole suite runs with it)."""
    avx512 = "+sse2,+avx,+avx2,+avx512f,+fma"
    assert compiler.with_wide_vectors(avx512, True) == avx512 + ",-prefer-256-bit"
    assert compiler.with_wide_vectors(avx512, False) == avx512
    assert compiler.with_wide_vectors("+sse2,+avx,+avx2,-avx512f", True) == "+sse2,+avx,+avx2,-avx512f"
    for value, wide in (("0", False), ("no", False), ("1", True)):
        monkeypatch.setenv("KERNELDSL_CPU_WIDE_VECTORS", value)
        assert compiler.wide_vectors() is wide
    monkeypatch.delenv("KERNELDSL_CPU_WIDE_VECTORS")
    assert compiler.wide_vectors()
    import llvmlite.binding as llvm
    host = llvm.get_host_cpu_features().flatten()
    if "+avx512f" not in host.split(","):
        pytest.skip("the host has no AVX-512: the 256-bit preference is LLVM's own choice here")
    rt = kd.runtime("cpu")
    x, y = rt.zeros((4096,), "f32"), rt.zeros((4096,), "f32")
    rendering = next(iter(rt.renderings(*exp_rows.specialize(rt, x, y, 4096, block=256).ir())))
    target = llvm.Target.from_default_triple()

    def registers(wide: bool) -> set:
        tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                          features=compiler.with_wide_vectors(host, wide), opt=3, reloc="pic",
                                          codemodel="jitdefault")
        monkeypatch.setattr(compiler, "target_machine", lambda gathers=True: tm)
        return set(re.findall(r"%([xyz])mm\d+", compiler.assembly(rendering.source, **rendering.rendered)))
    assert "z" in registers(True)
    if llvm.get_host_cpu_name() in ("skylake-avx512", "cascadelake", "cooperlake", "icelake-server",
                                    "sapphirerapids", "emeraldrapids", "graniterapids"):
        assert "z" not in registers(False)  # (LLVM tunes these to 256 bits)
