"""CUDA code generation with NVRTC alone (no GPU needed): native warp and tensor-core
instructions in the PTX, wide vector accesses, NVRTC errors at the user's Python line,
dynamic shared memory, capability records, a clear error where no driver exists, DLPack
capsules, and the whole conformance suite compiled for sm_80 and sm_90."""
import ctypes
import gc
import weakref
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kerneldsl as kd

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (the test extra) is not installed")
from kerneldsl.backends.cuda import capabilities, compiler, dlpack  # noqa: E402
from kerneldsl.backends.cuda.compile_only import compile_launch  # noqa: E402
from kerneldsl.backends.cuda.renderer import CudaRenderer  # noqa: E402

if not compiler.available():
    pytest.skip("NVRTC (nvidia-cuda-nvrtc, the test extra) cannot be loaded", allow_module_level=True)

pytestmark = pytest.mark.feature("cuda codegen")
TESTS = Path(__file__).resolve().parent
CPU = kd.runtime("cpu")


def ptx_of(kernel, block, args, sm=90) -> str:
    r = compile_launch(kernel, block, args, f"sm_{sm}")
    return compiler.compile_source(r.rendered.source, kernel.__name__, sm, ptx=True)[1].decode()


def instructions(ptx: str, pattern: str) -> set:
    return set(re.findall(pattern, ptx))


def test_plane_ops_are_warp_instructions():
    from test_dsl_plane import int_plane_ops, plane_all_ops
    x, k = CPU.zeros(100, "f32"), CPU.zeros(100, "i32")
    ptx = ptx_of(plane_all_ops, 100, (x, k, CPU.zeros((100, 12), "f32"), CPU.zeros(100, "u32"), 1))
    found = instructions(ptx, r"\b(shfl\.sync\.\w+|vote\.sync\.\w+)")
    assert {"shfl.sync.bfly", "shfl.sync.down", "shfl.sync.up", "shfl.sync.idx", "vote.sync.ballot",
            "vote.sync.all", "vote.sync.any"} <= found
    ptx = ptx_of(int_plane_ops, 64, (CPU.zeros(64, "i32"), CPU.zeros((64, 5), "i32")))
    assert {"redux.sync.add.s32", "redux.sync.min.s32", "redux.sync.max.s32"} <= instructions(
        ptx, r"\b(redux\.sync\.\S+)")


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_mma_runs_on_tensor_cores(dt):
    from test_dsl_mma import gemm_tiles
    a, b = CPU.zeros((32, 64), dt), CPU.zeros((64, 48), dt)
    ptx = ptx_of(gemm_tiles, 64, (a, b, CPU.zeros((32, 48), "f32"), 32, 48, 64, kd.as_dtype(dt)), sm=80)
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{dt}.{dt}.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx  # B row-major from shared memory


@pytest.mark.parametrize("dt,lanes", [("f32", 4), ("bf16", 8), ("f64", 2)])
def test_vector_accesses_are_128_bit_where_aligned(dt, lanes):
    from test_dsl_vectors import saxpy_vec
    x = CPU.zeros(203, dt)
    ptx = ptx_of(saxpy_vec, 32, (x, x, x, 0.5, 203, lanes))
    wide = r"\b(ld|st)\.global\.v(?:4\.[a-z]32|2\.[a-z]64)\b"  # 16 bytes in one access
    assert instructions(ptx, wide) == {"ld", "st"}


def test_i64_atomic_add_is_one_64_bit_atomic():
    from test_dsl_atomics import wide_add
    x = CPU.zeros(64, "i64")
    ptx = ptx_of(wide_add, 64, (x, x, x, 64))
    assert instructions(ptx, r"\b((?:atom|red)\.global\.add\.u64)\b") == {"atom.global.add.u64"}
    assert kd.i64 in capabilities.for_arch("sm_80").atomics["add"]


def test_vector_lanes_to_shared_become_one_wide_store():
    from test_cuda_fragments import vec_to_shared
    x = CPU.zeros(8 * 32, "f32")
    ptx = ptx_of(vec_to_shared, 32, (x, x, 0))
    assert "st.shared.v4" in ptx


def test_source_has_line_directives_and_launch_bounds():
    from test_dsl_plane import butterfly_rowsum
    r = compile_launch(butterfly_rowsum, 128, (CPU.zeros((9, 33), "f32"), CPU.zeros(9, "f32"), 128), "sm_90")
    src = r.rendered.source
    assert '#line' in src and str(TESTS / "test_dsl_plane.py") in src
    assert "__launch_bounds__(128)" in src and 'extern "C" __global__' in src
    assert "#include" not in src  # self-contained: NVRTC needs no CUDA headers
    assert r.kind == "cubin"


@kd.kernel
def with_barrier(x: kd.Tensor[kd.f32]):
    x[kd.unit_pos_x()] = 1.0
    kd.sync_cube()


def test_nvrtc_errors_point_at_the_python_line(monkeypatch):
    monkeypatch.setattr(CudaRenderer, "s_barrier", lambda self, s: self.emit("kd_no_such_function();"))
    monkeypatch.setenv("KERNELDSL_CACHE", "")
    with pytest.raises(kd.CompileError) as info:
        compile_launch(with_barrier, 32, (CPU.zeros(32, "f32"),), "sm_90")
    err = info.value
    assert err.loc.filename == __file__
    assert err.loc.line == with_barrier.fn.__code__.co_firstlineno + 3
    assert "kd_no_such_function" in str(err) and "kd.sync_cube()" in str(err)  # the user's line, quoted


def test_compiler_log_parsing():
    src = '#line 7 "/some/user/file.py"\nextern "C" __global__ void k() { undefined_name = 1; }\n'
    with pytest.raises(kd.CompileError) as info:
        compiler.compile_source(src, "k", 80)
    assert (info.value.loc.filename, info.value.loc.line) == ("/some/user/file.py", 7)
    assert "undefined_name" in str(info.value)


@kd.kernel
def big_shared(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32], N: kd.Const[int]):
    buf = kd.shared(kd.f32, N)
    small = kd.shared(kd.f32, 3)
    t = kd.unit_pos_x()
    for i in range(t, N, kd.cube_dim_x()):
        buf[i] = x[i] * 2.0
    if t < 3:
        small[t] = 1.0
    kd.sync_cube()
    for i in range(t, N, kd.cube_dim_x()):
        out[i] = buf[N - 1 - i] + small[i % 3]


def test_large_shared_memory_is_dynamic():
    n = 20000  # 80 KB: over the 48 KiB static limit
    for arch in ("sm_80", "sm_90"):
        r = compile_launch(big_shared, 256, (CPU.zeros(n, "f32"), CPU.zeros(n, "f32"), n), arch)
        assert r.rendered.dynamic_shared == 80000 + 16
        assert "extern __shared__" in r.rendered.source
    small = compile_launch(big_shared, 256, (CPU.zeros(64, "f32"), CPU.zeros(64, "f32"), 64), "sm_90")
    assert small.rendered.dynamic_shared == 0 and "extern __shared__" not in small.rendered.source
    huge = 50000  # 200 KB: fits sm_90's 227 KB, not sm_80's 163 KB
    compile_launch(big_shared, 256, (CPU.zeros(huge, "f32"), CPU.zeros(huge, "f32"), huge), "sm_90")
    with pytest.raises(kd.CompileError, match="exceeds the device's"):
        compile_launch(big_shared, 256, (CPU.zeros(huge, "f32"), CPU.zeros(huge, "f32"), huge), "sm_80")


@kd.kernel
def frag_partial_cube(c: kd.Tensor[kd.f32]):
    acc = kd.fragment_acc(16, 16, 16)
    kd.fill_fragment(acc, 1.0)
    kd.store_fragment(c, 0, acc, 16)


def test_fragments_need_whole_planes():
    with pytest.raises(kd.UnsupportedFeatureError, match="multiple of 32 units"):
        compile_launch(frag_partial_cube, 48, (CPU.zeros(256, "f32"),), "sm_90")
    compile_launch(frag_partial_cube, 64, (CPU.zeros(256, "f32"),), "sm_90")


def test_capabilities_for_explicit_arch():
    c80, c90 = capabilities.for_arch("sm_80"), capabilities.for_arch(90)
    assert (c80.arch, c90.arch) == ("sm_80", "sm_90")
    assert c90.plane_dim == 32 and c90.native_plane_ops and c90.mma_native
    assert c90.max_shared_bytes == 227 * 1024 and c80.max_shared_bytes == 163 * 1024
    assert (16, 16, 16) in c90.mma_shapes and kd.bf16 in c90.mma_dtypes and kd.f32 in c90.atomics["add"]
    with pytest.raises(ValueError, match="compute capability 8.0 or newer"):
        capabilities.for_arch("sm_75")
    assert compiler.target_for(90) == ("cubin", 90)


def test_without_a_driver_the_error_is_clear():
    if "cuda" in kd.available_runtimes():
        pytest.skip("this machine has a CUDA device: the runtime is available")
    with pytest.raises(kd.RuntimeUnavailable, match="cuda runtime needs"):
        kd.runtime("cuda")


class _FakeBuffer:
    raw = 0x7000
    readonly = False


class _FakeTensor:
    """What export_capsule reads of a kd tensor (device memory is never touched); each has its
    own buffer, whose lifetime the tests watch through a weak reference."""
    shape, strides, ndim, size, offset, dtype = (2, 3), (4, 1), 2, 6, 5, kd.bf16

    def __init__(self, buffer=None):
        self.buffer = buffer or _FakeBuffer()


def _exported(versioned, buffer=None):
    """A capsule of a fresh fake tensor, and a weak reference to that tensor's buffer."""
    t = _FakeTensor(buffer)
    return dlpack.export_capsule(t, 3, versioned), weakref.ref(t.buffer)


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_capsules_roundtrip(versioned):
    cap, buffer = _exported(versioned)
    gc.collect()
    assert buffer() is not None  # the export keeps the buffer
    owner, data, dev, dt, shape, strides = dlpack.read_capsule(cap, None)
    assert (data, dev, dt, shape, strides) == (0x7000 + 10, (2, 3), kd.bf16, (2, 3), (4, 1))
    with pytest.raises(BufferError):
        dlpack.read_capsule(cap, None)  # a consumed capsule cannot be used twice
    del cap
    gc.collect()
    assert buffer() is not None  # the consumer still holds it
    del owner
    gc.collect()
    assert buffer() is None  # its deleter ran
    cap, buffer = _exported(versioned)  # never consumed: freed with the capsule
    del cap
    gc.collect()
    assert buffer() is None
    assert ctypes.sizeof(dlpack.DLTensor) == 48


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_release_while_an_exception_propagates(versioned):
    """numpy takes a CUDA capsule, rejects its device and frees it with its error already
    raised: the capsule's destructor is native code, so the error reaches the caller intact
    (a Python destructor there turned it into SystemError) and the buffer is freed."""

    class Rejected:
        def __dlpack__(self, **kwargs):
            return self.capsule

        def __dlpack_device__(self):
            return (dlpack.KDL_CUDA, 0)

    rejected = Rejected()
    rejected.capsule, buffer = _exported(versioned)
    with pytest.raises((BufferError, RuntimeError, TypeError, ValueError)):
        np.from_dlpack(rejected)
    del rejected
    gc.collect()
    assert buffer() is None


def test_dlpack_read_only_flag_travels_in_versioned_capsules():
    ro = type("ReadOnlyBuffer", (_FakeBuffer,), {"readonly": True})()
    for tensor, want in ((_FakeTensor(), False), (_FakeTensor(ro), True)):
        owner = dlpack.read_capsule(dlpack.export_capsule(tensor, 0, True), None)[0]
        assert owner.readonly is want
        del owner


def test_conformance_suite_compiles_for_sm80_and_sm90(tmp_path):
    """Re-runs the DSL conformance suite on the cpu runtime with the codegen_check plugin,
    which compiles every kernel it launches for sm_80 and sm_90: a CUDA syntax or type error
    fails here. $KERNELDSL_CUDA_CODEGEN_TESTS (a glob under tests/) widens it, e.g. to
    "test_*.py" for the operators too (or run pytest with -p kerneldsl.backends.cuda.codegen_check)."""
    if "cuda" in kd.available_runtimes():
        pytest.skip("a CUDA device is present: this run compiles and runs every kernel on it")
    pattern = os.environ.get("KERNELDSL_CUDA_CODEGEN_TESTS", "test_dsl_*.py")
    files = sorted({str(p) for p in TESTS.glob(pattern)} | {str(TESTS / "test_tensors.py"),
                                                           str(TESTS / "test_cuda_fragments.py")})
    files = [f for f in files if not f.endswith("test_cuda_codegen.py")]
    report = tmp_path / "codegen.json"
    env = dict(os.environ, KERNELDSL_RUNTIMES="cpu", KERNELDSL_CUDA_CODEGEN_REPORT=str(report),
               KERNELDSL_CUDA_ARCHS="sm_80,sm_90")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "kerneldsl.backends.cuda.codegen_check",
           "-p", "no:cacheprovider", "-k", "not cpu-p8", *files]
    run = subprocess.run(cmd, cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=1800)
    # other tests' own failures are theirs to report in the main run; here only codegen counts
    assert report.exists(), run.stdout[-6000:] + run.stderr[-3000:]
    got = json.loads(report.read_text())
    assert got["failures"] == [], "\n".join(got["failures"]) + "\n" + run.stdout[-6000:]
    assert set(got["compiled"]) == {"sm_80", "sm_90"}
    assert min(got["compiled"].values()) >= 150, got["compiled"]  # the DSL suite has ~200 specialisations


def test_roles_run_as_per_role_copies_with_register_budgets():
    """sm_90a: the roles GEMM's producer gives registers back and its consumers take them
    (setmaxnreg), each role in its own copy of the code chosen by a warp-uniform group index;
    sm_80 has no budgets and compiles the guarded form."""
    import sys
    sys.path.insert(0, str(TESTS.parent))
    from benchmarks.bulk_gemm import CONFIGS, gemm_roles
    a, b, c = CPU.zeros((256, 64), "bf16"), CPU.zeros((64, 128), "bf16"), CPU.zeros((256, 128), "f32")
    BN, BK, S, _, G, _, SW = CONFIGS["roles 128x64x16/s3/g8"]
    ptx = ptx_of(gemm_roles, 384, (a, b, c, BN, BK, S, G, False, SW))
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in ptx and "setmaxnreg.inc.sync.aligned.u32 232;" in ptx
    assert ptx.count("wgmma.mma_async") >= 1 and "mbarrier.try_wait.parity" in ptx
    src = compile_launch(gemm_roles, 384, (a, b, c, BN, BK, S, G, False, SW), "sm_90").rendered.source
    assert "__launch_bounds__(384, 1)" in src and src.count("__shfl_sync(0xffffffffu, (int)((unsigned)kd_unit") >= 2
    ptx80 = ptx_of(gemm_roles, 384, (a, b, c, BN, BK, S, G, False, SW), sm=80)
    assert "setmaxnreg" not in ptx80 and "mbarrier" not in ptx80


def test_128_byte_tiles_start_on_their_pattern_period():
    """wgmma reads a 128-byte-swizzled tile by address bits 4-9: arrays holding such tiles
    start on 1024-byte boundaries even with no bulk copy (async copies fill them); 32-byte
    tiles on 256."""
    from test_dsl_group_mma import chained
    q, k = CPU.zeros((64, 64), "bf16"), CPU.zeros((64, 64), "bf16")
    s_out, o_out = CPU.zeros(64 * 64, "f32"), CPU.zeros(64 * 64, "f32")
    for sw, align in ((128, 1024), (32, 256)):
        src = compile_launch(chained, 128, (q, k, k, s_out, o_out, 64, 64, 64, False, sw), "sm_90").rendered.source
        assert f"__shared__ __align__({align})" in src and "__align__(16)" not in src


def test_the_128_byte_layout_copies_bands_of_64_columns():
    """swizzle=128: tensor maps of 64-column boxes with the 128-byte swizzle, one copy a band
    (a 64 x 64 tile of A is one copy), wgmma descriptors of layout 1; sm_80 reads the same
    layout with ldmatrix."""
    import sys
    sys.path.insert(0, str(TESTS.parent))
    from benchmarks.bulk_gemm import CONFIGS, gemm_roles
    a, b, c = CPU.zeros((256, 128), "bf16"), CPU.zeros((128, 128), "bf16"), CPU.zeros((256, 128), "bf16")
    BN, BK, S, _, G, _, SW = CONFIGS["roles 128x64x64/s2/g8/persistent/staged/sw128"]
    assert SW == 128
    r = compile_launch(gemm_roles, 384, (a, b, c, BN, BK, S, G, True, SW), "sm_90").rendered
    assert r.tensor_maps and all(box[2] == 128 for box in r.tensor_maps)
    descs = re.findall(r"kd_wg_desc\(\([^;]*\);", r.source)  # the calls, not the prelude's definition
    assert descs and all(d.endswith(", 1);") for d in descs)
    copies = [line for line in r.source.splitlines() if "cp.async.bulk.tensor.2d.shared::cluster" in line]
    assert copies and all(line.count("cp.async.bulk.tensor") == 1 for line in copies)  # 64 columns: one band
    ptx = ptx_of(gemm_roles, 384, (a, b, c, BN, BK, S, G, True, SW))
    assert ptx.count("wgmma.mma_async") >= 1 and "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    ptx_of(gemm_roles, 384, (a, b, c, BN, BK, S, G, True, SW), sm=80)


def test_a_role_barrier_is_a_named_barrier_of_its_units():
    from test_dsl_roles import reverse_in_role
    x = CPU.zeros(384, "f32")
    ptx = ptx_of(reverse_in_role, 384, (x, x))
    assert re.search(r"bar\.sync\s+1,\s*128;", ptx) or re.search(r"barrier\.sync(\.aligned)?\s+1,\s*128;", ptx)
    ptx80 = ptx_of(reverse_in_role, 384, (x, x), sm=80)  # emulated roles: every unit reaches each barrier
    assert not re.search(r"bar(rier)?\.sync(\.aligned)?\s+1,", ptx80)


def test_bulk_stores_are_tensor_stores_of_the_copy_engine():
    from test_dsl_bulk_copy import store_box
    tile, out = CPU.zeros((16, 32), "bf16"), CPU.zeros((37, 56), "bf16")
    ptx = ptx_of(store_box, 64, (tile, out, 0, 0, 16, 32, 32))
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 2  # two 16-column bands
    assert "cp.async.bulk.commit_group" in ptx and "cp.async.bulk.wait_group 0" in ptx
    assert "fence.proxy.async.shared::cta" in ptx
    ptx80 = ptx_of(store_box, 64, (tile, out, 0, 0, 16, 32, 32), sm=80)
    assert "cp.async.bulk" not in ptx80


def test_convolution_group_products_are_wgmma():
    """The channels-last forward on group products (rudnn.convolution.implicit_gemm_group) in
    its H200 tile shapes: wgmma reading the 128-byte layout (descriptors of layout 1), filled
    by 16-byte cp.async copies."""
    from rudnn.convolution import ConvOptions, implicit_gemm_group
    from rudnn.convolution.problem import as_5d, user_shape, validate_forward
    for C, K in ((64, 64), (128, 256)):
        x, w = CPU.zeros((2, 14, 14, C), "bf16"), CPU.zeros((K, 3, 3, C), "bf16")
        p = validate_forward("conv_forward_nhwc", x, w, None, ConvOptions(padding=1), True)
        g = p.geo
        y5 = as_5d(CPU.empty(user_shape((g.B, g.K, *g.O), g.rank, True), "bf16"), g.rank, True)
        BN, S, L = implicit_gemm_group.tile_shape(capabilities.for_arch("sm_90"), K)
        assert BN == min(K, 128)
        args = (p.x, p.w, y5, CPU.zeros((1,), "f32"), False, p.dtype, g.consts(), BN, S, L, 2, 1, False,
                implicit_gemm_group.const_channels(g.Cg))
        assert args[-1] == C   # (64 and 128 channels: the step's tap and channel by constant division)
        src = compile_launch(implicit_gemm_group.conv_gemm_group, 256, args, "sm_90").rendered.source
        descs = re.findall(r"kd_wg_desc\(\([^;]*\);", src)
        assert descs and all(d.endswith(", 1);") for d in descs)
        ptx = ptx_of(implicit_gemm_group.conv_gemm_group, 256, args)
        assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.bf16.bf16") == 4  # BK = 64: 4 k16 products
        assert "cp.async.cg.shared.global" in ptx or "cp.async.ca.shared.global" in ptx


def test_convolution_data_backward_on_group_products_compiles():
    """The stride-1 data backward on group products (rudnn.convolution.implicit_gemm_dgrad)
    for sm_90: the NDHWC transpose of dy, the flipped channel-swapped weights, and the
    group-product forward of the equivalent problem (wgmma), storing into dx's NCHW view."""
    from rudnn.convolution import ConvOptions, implicit_gemm_dgrad, implicit_gemm_group
    from rudnn.convolution.problem import as_5d, validate_data_backward
    dy, w = CPU.zeros((2, 64, 14, 14), "bf16"), CPU.zeros((64, 32, 3, 3), "bf16")
    p = validate_data_backward(dy, w, (2, 64, 14, 14), ConvOptions(padding=1, groups=2))
    g = p.geo
    dys, ws = implicit_gemm_dgrad._shapes(g)
    dy_cl = implicit_gemm_dgrad.channels_last_view(CPU, CPU.empty((2 * 14 * 14 * 64,), "bf16").buffer, dys, p.dtype)
    w_cl = implicit_gemm_dgrad.channels_last_view(CPU, CPU.empty((64 * 32 * 9,), "bf16").buffer, ws, p.dtype)
    ptx = ptx_of(implicit_gemm_dgrad.to_channels_last, implicit_gemm_dgrad.TILE_UNITS, (p.dy, dy_cl, p.dtype, False))
    assert "bar.sync" in ptx or "barrier.sync" in ptx
    from kerneldsl.tensor import Tensor
    flat = (dy.reshape(2, 64, 196), Tensor(CPU, dy_cl.buffer, (2, 64, 196), p.dtype, (196 * 64, 1, 64)), p.dtype, True)
    ptx_of(implicit_gemm_dgrad.to_channels_last, implicit_gemm_dgrad.TILE_UNITS, flat)
    ptx_of(implicit_gemm_dgrad.flip_weights, implicit_gemm_dgrad.COPY_UNITS, (p.w, w_cl, 64 * 32 * 9, g.consts()))
    fp = implicit_gemm_dgrad.forward_problem(p, dy_cl, w_cl)
    assert fp.geo.pad == (0, 1, 1) and fp.geo.Cg == 32 and fp.geo.Kg == 32
    BN, S, L = implicit_gemm_group.tile_shape(capabilities.for_arch("sm_90"), fp.geo.Kg)
    dx5 = as_5d(CPU.empty((2, 64, 14, 14), "bf16"), 2, False)
    args = (fp.x, fp.w, dx5, CPU.zeros((1,), "f32"), False, p.dtype, fp.geo.consts(), BN, S, L, 2, 1, False,
            implicit_gemm_group.const_channels(fp.geo.Cg))
    ptx = ptx_of(implicit_gemm_group.conv_gemm_group, 256, args)
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.bf16.bf16") == 4


def test_convolution_weight_backward_on_group_products_compiles():
    """The weight gradient on group products (rudnn.convolution.implicit_gemm_wgrad): for sm_90
    wgmma m64n128k16 with A = dyᵀ read transposed (MN-major) and B = im2col(x) as stored, both
    in the 128-byte layout (descriptors of layout 1) and filled by 16-byte cp.async copies; the
    same kernel on sm_80 (mma.sync), the ordered sum of the partials and the transposes."""
    from rudnn.convolution import ConvOptions, implicit_gemm_dgrad, implicit_gemm_wgrad as wg
    from rudnn.convolution.problem import as_5d, validate_weight_backward
    x, dy = CPU.zeros((2, 64, 14, 14), "bf16"), CPU.zeros((2, 128, 14, 14), "bf16")
    p = validate_weight_backward(x, dy, (128, 32, 3, 3), ConvOptions(padding=1, groups=2))
    g = p.geo
    cl = lambda c: implicit_gemm_dgrad.channels_last_view(  # noqa: E731
        CPU, CPU.empty((2 * 14 * 14 * c,), "bf16").buffer, (2, c, 1, 14, 14), p.dtype)
    x_cl, dy_cl = cl(64), cl(128)
    part = CPU.empty((3, 128, 32 * 9), "f32")
    BN, S, L = wg.tile_shape(capabilities.for_arch("sm_90"))
    args = (dy_cl, x_cl, part, g.Kg, g.Cg, 192, p.dtype, g.consts(), BN, S, L)
    src = compile_launch(wg.wgrad_group, 128, args, "sm_90").rendered.source
    descs = re.findall(r"kd_wg_desc\(\([^;]*\);", src)
    assert len(descs) == 2 and all(d.endswith(", 1);") for d in descs)
    ptx = ptx_of(wg.wgrad_group, 128, args)
    products = re.findall(rf"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.bf16.bf16 [^;]*;", ptx)
    assert len(products) == 4 and all(re.search(r"1, 1, 1, 1;$", q) for q in products)  # both operands MN-major
    assert "cp.async.cg.shared.global" in ptx or "cp.async.ca.shared.global" in ptx
    ptx80 = ptx_of(wg.wgrad_group, 128, args, sm=80)
    assert "wgmma" not in ptx80 and "mma.sync" in ptx80
    ptx_of(wg.sum_partials, wg.SUM_UNITS, (part, as_5d(CPU.empty((128, 32, 3, 3), "bf16"), 2, False), 128 * 288,
                                           g.consts()))
    ptx_of(implicit_gemm_dgrad.to_channels_last, implicit_gemm_dgrad.TILE_UNITS, (p.x, x_cl, p.dtype, False))


def ptxas_report(source: str, sm: int = 90) -> str:
    """ptxas's resource report (registers, spills) and warnings for `source`, as NVRTC logs them."""
    nvrtc = compiler._nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    try:
        arch = f"--gpu-architecture=sm_{sm}{'a' if sm == 90 else ''}"
        opts = [o.encode() for o in compiler.OPTIONS + (arch, "--ptxas-options=-v")]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS
        return compiler._log(nvrtc, prog)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("D,NG,BN,PINGPONG", [(128, 2, 128, True), (128, 2, 128, False), (64, 2, 128, True)])
def test_attention_roles_kernel_compiles_without_spills(D, NG, BN, PINGPONG):
    """sm_90a: attention's roles kernel (ops/attention/flash_roles.py) gives its producer 24
    registers and its consumers 240, copies with the tensor memory accelerator onto mbarriers,
    multiplies with wgmma, and neither spills nor has its products serialised by ptxas (no C75xx
    warning; with ping-pong each consumer group has its own copy of the code, and those copies
    end the kernel, else C7512); sm_80 compiles the emulated form (no budgets, no bulk copies)."""
    from rudnn.attention.flash_roles import CONSUMER_REGISTERS, PRODUCER_REGISTERS, flash_roles_kernel
    rows = CPU.zeros((256, D), "bf16")
    args = (rows, rows, rows, CPU.zeros((1, 2, 128, D), "bf16"), CPU.zeros((1, 1, 1, 1), "bool"),
            CPU.zeros((1, 1, 1, 1)), 0.1, 1.0, 1, 1, 128, D, D, BN, NG, False, False, False, PINGPONG)
    units = (NG + 1) * 128
    ptx = ptx_of(flash_roles_kernel, units, args)
    assert f"setmaxnreg.dec.sync.aligned.u32 {PRODUCER_REGISTERS};" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {CONSUMER_REGISTERS};" in ptx
    assert "wgmma.mma_async" in ptx and "mbarrier.try_wait.parity" in ptx
    assert "cp.async.bulk.tensor.2d" in ptx
    log = ptxas_report(compile_launch(flash_roles_kernel, units, args, "sm_90").rendered.source)
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
    assert not re.search(r"C75\d\d", log), log[-2000:]
    ptx80 = ptx_of(flash_roles_kernel, units, args, sm=80)
    assert "setmaxnreg" not in ptx80 and "cp.async.bulk" not in ptx80


def test_mla_roles_compiles_with_budgets_and_tensor_copies():
    """rudnn's paged MLA decode on roles (ops/paged_attention/mla_roles.py) in its H200 shape
    (R 512, P 64, pages of 64, tuning's tokens and stages): sm_90a gives the producer 40
    registers and the consumers 232, copies with the copy engine and multiplies with wgmma;
    sm_80 (no bulk copies: the emulation, 2 stages to fit its shared memory) compiles too."""
    from rudnn.paged_attention import tuning
    from rudnn.paged_attention.mla_roles import mla_roles_kernel
    B, H, R, P, PS = 2, 128, 512, 64, 64
    N = tuning.MLA_ROLES_TOKENS
    q, qp = CPU.zeros((B * H, R), "bf16"), CPU.zeros((B * H, P), "bf16")
    lat, kp = CPU.zeros((8 * PS, R), "bf16"), CPU.zeros((8 * PS, P), "bf16")
    meta = (CPU.zeros((B, 4), "i32"), CPU.zeros((B,), "i32"), CPU.zeros((B,), "i32"), CPU.zeros((B,), "i32"))
    out = CPU.zeros((B, H, R), "bf16")
    for sm, stages in ((90, tuning.MLA_ROLES_STAGES), (80, 2)):
        args = (q, qp, lat, kp, *meta, out, out, 0.1, 1, 1, H, R, P, N, PS, min(PS, N), stages, False)
        ptx = ptx_of(mla_roles_kernel, 384, args, sm=sm)
        if sm == 90:
            assert "setmaxnreg.dec.sync.aligned.u32 40;" in ptx and "setmaxnreg.inc.sync.aligned.u32 232;" in ptx
            assert f"wgmma.mma_async.sync.aligned.m64n{N}k16.f32.bf16.bf16" in ptx
            assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in ptx
            assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
        else:
            assert "setmaxnreg" not in ptx and "mbarrier" not in ptx and "mma.sync" in ptx


def test_gated_delta_group_kernels_are_wgmma_fed_by_bulk_copies():
    """The chunked gated delta rule's group path (rudnn.gated_delta: chunk_prepare_group,
    chunk_state_group, chunk_output_group) in the H200 shape (K = V = 128, chunk 64, the
    128-byte layout): wgmma products fed by tensor bulk copies, results out by tensor bulk
    stores, for sm_90; the same kernels compile for sm_80 (mma.sync, emulated copies)."""
    from rudnn.gated_delta.chunk_output_group import chunk_output_group
    from rudnn.gated_delta.chunk_prepare_group import chunk_prepare_group
    from rudnn.gated_delta.chunk_state_group import chunk_state_group
    K = V = 128
    C, T, rows = 64, 128, 2
    m = lambda *s, dt="bf16": CPU.zeros(s, dt)  # noqa: E731
    kk, vv, wn = m(rows * T, K), m(rows * T, V), m(rows * T, K)
    beta, g, gc, s = m(1, 2, T), m(1, 2, T, dt="f32"), m(rows, T, dt="f32"), m(1, 2, K, V, dt="f32")
    hT, dT = m(rows * 2 * V, K), m(rows * 2 * V, C)
    jobs = [(chunk_prepare_group, (kk, vv, beta, g, gc, wn, vv, wn, T, K, V, C, 128, 128)),
            (chunk_state_group, (wn, wn, vv, gc, s, hT, dT, s, T, K, V, C, 128)),
            (chunk_output_group, (kk, kk, gc, hT, dT, m(rows * T, V), T, 0.5, K, V, C, 128, 128))]
    for kernel, args in jobs:
        ptx = ptx_of(kernel, 128, args)
        assert len(instructions(ptx, r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16")) >= 1
        assert "cp.async.bulk.tensor" in ptx, kernel.__name__
        assert re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx), kernel.__name__  # a bulk store
        assert "mma.sync" in ptx_of(kernel, 128, args, sm=80), kernel.__name__


@pytest.mark.parametrize("dt", ["bf16", "f32"])
def test_convolution_depthwise_compiles(dt):
    """The depthwise kernels (rudnn.convolution.depthwise) for sm_90 and sm_80: the channels-last
    forward loads taps and weights and stores outputs as 16-byte vectors without spilling (its
    H200 shape: 3x3, 256 channels at 28²); the plane-tile forward and data backward, the weight
    partials and their ordered sum compile."""
    from rudnn.convolution import ConvOptions, depthwise, implicit_gemm
    from rudnn.convolution.problem import as_5d, validate_forward, validate_weight_backward
    x, w = CPU.zeros((2, 28, 28, 256), dt), CPU.zeros((256, 3, 3, 1), dt)
    opts = ConvOptions(padding=1, groups=256)
    p = validate_forward("conv_forward_nhwc", x, w, None, opts, True)
    y5 = as_5d(CPU.empty((2, 28, 28, 256), dt), 2, True)
    assert depthwise.channels_last_covers(p, y5)
    V = depthwise.vector_lanes(p)
    args = (p.x, p.w, CPU.zeros((256,), dt), y5, True, V, depthwise.PX, depthwise.ROWS, p.geo.consts())
    for sm in (90, 80):
        ptx = ptx_of(depthwise.forward_channels_last, depthwise.UNITS, args, sm=sm)
        assert len(re.findall(r"ld\.global[.\w]*\.v4\.[bfu]32", ptx)) >= 9 + 3 * (depthwise.PX + 2)  # weights, a row of taps
        assert len(re.findall(r"st\.global[.\w]*\.v4\.[bfu]32", ptx)) == depthwise.PX
    log = ptxas_report(compile_launch(depthwise.forward_channels_last, depthwise.UNITS, args, "sm_90").rendered.source)
    assert "0 bytes spill stores" in log
    xn, wn = CPU.zeros((2, 256, 28, 28), dt), CPU.zeros((256, 1, 3, 3), dt)
    pn = validate_weight_backward(xn, xn, (256, 1, 3, 3), opts)
    yn = as_5d(CPU.empty((2, 256, 28, 28), dt), 2, False)
    TW, Q = depthwise.plane_tile(28, 28)
    for sm in (90, 80):
        ptx_of(depthwise.forward_planes, depthwise.UNITS, (pn.x, as_5d(wn, 2, False), CPU.zeros((1,), "f32"), yn,
                                                          False, TW, Q, pn.geo.consts()), sm=sm)
        ptx_of(depthwise.data_planes, depthwise.UNITS, (pn.dy, as_5d(wn, 2, False), yn, TW, Q, pn.geo.consts()),
               sm=sm)
        part = CPU.empty((3, 256, 9), "f32")
        ptx_of(depthwise.weight_partials, depthwise.WGRAD_UNITS, (pn.x, pn.dy, part, 1, 32, pn.geo.consts()), sm=sm)
        ptx_of(implicit_gemm.sum_partials, depthwise.SUM_UNITS, (part, CPU.empty((256, 9), dt)), sm=sm)


@pytest.mark.parametrize("groups,mi,inflight,persistent,pairs", [
    (2, 1, 0, False, False), (4, 1, 0, False, False), (2, 2, 0, False, False), (2, 2, 1, False, False),
    (2, 1, 0, True, False), (2, 2, 0, True, False), (2, 1, 0, "stationary", False), (2, 2, 0, "stationary", False),
    (2, 1, 0, False, True)])
def test_convolution_group_products_tiles_compile_without_spills(groups, mi, inflight, persistent, pairs):
    """The channels-last forward on group products at 64@56's shape (issue 17) in its tile
    variants (BM = 128 today; 256 with 4 groups or 2 fragments a group): sm_90a has MI wgmma
    m64n64 a k16 step, neither spills nor has its products serialised (no C75xx warning);
    sm_80 compiles the same kernel (mma.sync). Also the epilogue's paired stores, and the persistent form (one pipeline across a
    cube's tiles; "stationary": the weights copied once a cube). Prints ptxas's register
    report (pytest -s)."""
    from rudnn.convolution import ConvOptions, implicit_gemm_group, implicit_gemm_group_persistent
    from rudnn.convolution.problem import as_5d, user_shape, validate_forward
    x, w = CPU.zeros((2, 56, 56, 64), "bf16"), CPU.zeros((64, 3, 3, 64), "bf16")
    p = validate_forward("conv_forward_nhwc", x, w, None, ConvOptions(padding=1), True)
    g = p.geo
    y5 = as_5d(CPU.empty(user_shape((g.B, g.K, *g.O), g.rank, True), "bf16"), g.rank, True)
    args = (p.x, p.w, y5, CPU.zeros((1,), "f32"), False, p.dtype, g.consts(), 64, 3, inflight, groups, mi)
    if persistent:
        args += (9 if persistent == "stationary" else 0,)  # WSTAT: 9 steps of 64 (576 = 9 taps x 64)
    args += (pairs,) if persistent else (pairs, implicit_gemm_group.const_channels(g.Cg))
    units = 128 * groups
    kernel = (implicit_gemm_group_persistent.conv_gemm_group_persistent if persistent
              else implicit_gemm_group.conv_gemm_group)
    ptx = ptx_of(kernel, units, args)
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == 4 * mi
    assert ("st.global.v2.u16" in ptx) == pairs  # pairs: a lane's column pair in one 4-byte store
    log = ptxas_report(compile_launch(kernel, units, args, "sm_90").rendered.source)
    print(f"groups {groups} mi {mi} inflight {inflight} persistent {persistent}:",
          " ".join(re.findall(r"Used \d+ registers[^\n]*", log)),
          " ".join(re.findall(r"\d+ bytes spill stores, \d+ bytes spill loads", log)))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
    assert not re.search(r"C75\d\d", log), log[-2000:]
    smem = (3 * 64 * groups * mi + (9 if persistent == "stationary" else 3) * 64) * 64 * 2
    if smem <= capabilities.for_arch("sm_80").max_shared_bytes:  # 2 x 2 stationary: 168 KiB, past the A100's
        assert "wgmma" not in ptx_of(kernel, units, args, sm=80)


@pytest.mark.parametrize("dt,mode,dims", [("f32", "Bilinear", 2), ("bf16", "Bilinear", 2), ("f32", "Nearest", 2),
                                          ("f32", "Bilinear", 3)])
def test_grid_sample_gathered_input_gradient_compiles_without_spills(dt, mode, dims):
    """The gathered grid_sample input gradient (rudnn.grid_sample.backward_gather, issue 19) at
    its H200 shape ([32, 64, 256²], K = 8 channels a unit of i64
    accumulators): sm_90a and sm_80 compile it with no atomics (the sums are registers) and at
    most 24 bytes spilled with flag bits one a channel or packed 10 a word (the default); the
    bucketing passes make 32-bit atomics only; backward_last's kernel with its
    scatter off (the grid gradient) has no 64-bit atomic left. Prints ptxas's register counts."""
    from rudnn.grid_sample import backward_gather as bg, backward_last as bl, gate, tuning
    from rudnn.grid_sample.options import GridSampleMode
    n, c, s = 32, 64, 256
    size = (4, s, s) if dims == 3 else (1, s, s)
    locations = s * s
    points = n * locations
    k = tuning.backward_gather_channels(capabilities.for_arch("sm_90"), GridSampleMode(mode), dims, size, c, n,
                                        points, 4 if dt == "f32" else 2)
    assert k == 8   # tuning.BACKWARD_GATHER_CHANNELS: 8 channels a unit in either dtype
    cells = tuning.gather_cells(GridSampleMode(mode), dims, size)
    grid, go = CPU.zeros((points * dims,), dt), CPU.zeros((n * c * locations,), dt)
    u32 = CPU.zeros((n * cells,), "u32")
    record = bg.record_words(mode, tuning.BACKWARD_GATHER_RECORDS)
    lists, bits, dx = CPU.zeros((points * max(1, record),), "i32"), CPU.zeros((2,), "u32"), CPU.zeros((n * c * s * s,), dt)
    v = tuning.backward_gather_vector(k, 4 if dt == "f32" else 2)
    def gather_args(flags, when, two):
        """The gather's arguments: out_grad's channels-last copy walked (V channels a load), or
        with `two` also the walk of [N, C, points] itself first (the device's choice, gate.py)."""
        rows, direct = (go, c, 1, v), (go, 1, locations, 1)
        first = direct if two else rows
        return (grid, first[0], u32, u32, u32, lists, bits, dx, c, locations, cells, *size, *first[1:3], 0, 0, mode,
                dims, 18, k, first[3], flags, 256, tuning.BACKWARD_GATHER_FINITE_PATH, record,
                tuning.BACKWARD_GATHER_FLAT, bits, 0, when, *rows, two)

    # flag bits packed 10 channels a u32, or one a channel; both forms' walks in one kernel
    for flags, when, two in ((10, gate.IF_ROUGH, False), (1, gate.IF_ROUGH, False), (10, gate.ALWAYS, True)):
        log = ptxas_report(compile_launch(bg.gather_input_grad, 256, gather_args(flags, when, two), "sm_90")
                           .rendered.source)
        spilled = int(re.search(r"(\d+) bytes spill stores", log).group(1))
        assert spilled <= 24, log   # (a few bytes: ptxas keeps the register count down)
        print(dt, mode, dims, flags, two, spilled, " ".join(re.findall(r"Used \d+ registers[^\n]*", log)))
    args = gather_args(tuning.BACKWARD_GATHER_FLAGS, gate.ALWAYS, False)
    for sm in (90, 80):
        ptx = ptx_of(bg.gather_input_grad, 256, args, sm=sm)
        assert not re.search(r"\b(atom|red)\.", ptx)
        assert re.search(r"ld\.global[.\w]*\.v4\.[bfu]32", ptx)   # out_grad's channels as 16-byte vectors
        count = ptx_of(bg.count_cells, 256, (grid, u32, points, locations, cells, *size, 0, 0, mode, dims), sm=sm)
        assert instructions(count, r"\b(?:atom|red)\.global\.add\.(\w+)") == {"u32"}
        fill = ptx_of(bg.fill_cells, 256, (grid, u32, u32, u32, lists, points, locations, cells, *size, 0, 0, mode,
                                           dims, 256, record), sm=sm)
        assert instructions(fill, r"\b(?:atom|red)\.global\.add\.(\w+)") == {"u32"}
        ptx_of(bg.block_scan, 256, (u32, u32, u32, n * cells), sm=sm)
        ptx_of(bg.count_rough, 256, (grid, u32, points, *size, 0, 0, mode, dims, 256), sm=sm)
        xl, gg = CPU.zeros((n * c * s * s,), dt), CPU.zeros((points * dims,), dt)
        one64, one32 = CPU.zeros((1,), "i64"), CPU.zeros((1,), "u32")
        for loop in (False, True):   # (a cube a block, or looping over blocks: tuning.gated_cubes)
            ptx = ptx_of(bl.backward_channels_last, 256, (xl, grid, go, gg, one64, one32, bits, points, locations, c,
                                                          *size, 0, 0, mode, dims, 18, 8, 0, False, bits, 0,
                                                          gate.IF_ROUGH, loop), sm=sm)
            assert not re.search(r"\b(atom|red)\.global\.add\.u64", ptx)


@pytest.mark.parametrize("kind,bn,stages,inflight,groups,mi,lanes", [
    ("weight", 128, 3, 0, 2, 1, 8), ("weight", 256, 3, 0, 2, 1, 8), ("weight", 128, 4, 1, 2, 1, 8),
    ("weight", 128, 3, 0, 2, 1, 2),
    ("data", 128, 3, 0, 2, 1, 8), ("data", 128, 3, 0, 2, 2, 8), ("data", 256, 3, 0, 2, 1, 8),
    ("data", 128, 4, 1, 2, 1, 8), ("data", 128, 3, 0, 4, 1, 8), ("data", 128, 3, 0, 2, 1, 4),
    ("data", 128, 4, 0, 2, 2, 8)])
def test_convolution_pointwise_backward_compiles_without_spills(kind, bn, stages, inflight, groups, mi, lanes):
    """The 1×1 backward passes as batched products on NCHW operands (rudnn.convolution.
    pointwise_backward) at issue 17's shape (256 → 1024 channels, 56², bf16) in their tile
    variants: sm_90a wgmma (the weight gradient's A and B K-major, the data backward's both
    MN-major: descriptors of the 128-byte layout), cp.async copies (16-byte, or narrower
    where LANES < 8), the data backward's paired 4-byte stores (or, staged, its bulk tensor
    stores: the 2 x 2-fragment, 4-slot case), no spills, no serialised
    products (C75xx); sm_80 compiles the same kernels (mma.sync). Prints ptxas's report."""
    from rudnn.convolution import ConvOptions, implicit_gemm, pointwise_backward as pb
    from rudnn.convolution.problem import as_5d, validate_data_backward, validate_weight_backward
    x, dy, w = CPU.zeros((2, 256, 56, 56), "bf16"), CPU.zeros((2, 1024, 56, 56), "bf16"), CPU.zeros((1024, 256, 1, 1),
                                                                                                   "bf16")
    caps = capabilities.for_arch("sm_90")
    assert pb.native(caps)
    units = 128 * groups
    if kind == "weight":
        p = validate_weight_backward(x, dy, (1024, 256, 1, 1), ConvOptions())
        dy3, x3, lanes8 = pb._pixel_matrix(p.dy, CPU, p.dtype), pb._pixel_matrix(p.x, CPU, p.dtype), 8
        part = CPU.empty((16, 1024, 256), "f32")
        kernel, args = pb.wgrad_pointwise, (dy3, x3, part, 12, p.dtype, bn, stages, inflight, groups, lanes)
        nprod, layout = bn, "0, 0"   # a (no transpose) b (no transpose): both K-major
    else:
        p = validate_data_backward(dy, w, (2, 256, 56, 56), ConvOptions())
        dx5 = as_5d(CPU.empty((2, 256, 56, 56), "bf16"), 2, False)
        dy3, w2, dxv, dx2, lanes8, pairs = pb.data_operands(
            __import__("dataclasses").replace(p, runtime=__import__("types").SimpleNamespace(
                capabilities=__import__("dataclasses").replace(CPU.capabilities, group_mma_native=True,
                                                               mma_native=True, async_copy=True,
                                                               mma_dtypes=(kd.f16, kd.bf16)), plane_dim=32)), dx5)
        assert pairs and dx2 is not None
        staged = mi == 2 and stages == 4
        kernel, args = pb.dgrad_pointwise, (dy3, w2, dxv, dx2 if staged else w2, p.dtype, bn, stages, inflight, groups,
                                            mi, lanes, True, staged)
        nprod, layout = bn, "1, 1"
    assert lanes8 == 8
    src = compile_launch(kernel, units, args, "sm_90").rendered.source
    descs = re.findall(r"kd_wg_desc\(\([^;]*\);", src)
    assert descs and all(d.endswith(", 1);") for d in descs)
    ptx = ptx_of(kernel, units, args)
    products = re.findall(rf"wgmma.mma_async.sync.aligned.m64n{nprod}k16.f32.bf16.bf16 [^;]*;", ptx)
    assert len(products) == 4 * mi and all(re.search(rf"1, 1, {layout};$", q) for q in products), products[:1]
    size = {8: "cg", 4: "ca", 2: "ca"}[lanes]
    assert f"cp.async.{size}.shared.global" in ptx
    if kind == "data":
        assert ("st.global.v2.u16" in ptx) != staged and ("cp.async.bulk.tensor" in ptx) == staged
    log = ptxas_report(src)
    print(f"{kind} bn {bn} stages {stages} inflight {inflight} groups {groups} mi {mi} lanes {lanes}:",
          " ".join(re.findall(r"Used \d+ registers[^\n]*", log)),
          " ".join(re.findall(r"\d+ bytes spill stores, \d+ bytes spill loads", log)))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
    assert not re.search(r"C75\d\d", log), log[-2000:]
    if kind == "weight" and bn == 128 and stages == 3:
        assert "wgmma" not in ptx_of(kernel, units, args, sm=80)
        ptx_of(implicit_gemm.sum_partials, implicit_gemm.SUM_UNITS, (part, CPU.empty((1024, 256), "bf16")))


def test_convolution_pointwise_weight_backward_on_the_roles_gemm_compiles():
    """pointwise_backward's "roles" weight gradient: MoE's roles GEMM over dy as [B·K, P] rows
    and x as [B·C, P] expert weights, F32 partials, for sm_90a: bulk tensor copies, wgmma
    m64n256k16, no spills."""
    from rudnn.convolution import pointwise_backward as pb
    from rudnn.moe import gemm_roles
    B, C, K, P = 2, 256, 1024, 3136
    dy2, x2 = CPU.zeros((B * K, P), "bf16"), CPU.zeros((B * C, P), "bf16")
    part = CPU.empty((B * K, C), "f32")
    offs, tiles = CPU.tensor(np.array([0, K, 2 * K], np.uint32)), CPU.tensor(np.array([0, 8, 16], np.uint32))
    _, bn, stages = gemm_roles.tile_shape(capabilities.for_arch("sm_90"))
    rows, cols = B * K // gemm_roles.BM, -(-C // bn)
    units = gemm_roles.UNITS_PLANES * 32
    args = (dy2, x2, x2, part, offs, tiles, B, C, rows, cols, False, bn, stages, gemm_roles.GM, part, False, False)
    ptx = ptx_of(gemm_roles.grouped_gemm_roles, units, args)
    assert "cp.async.bulk.tensor" in ptx and f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16" in ptx
    log = ptxas_report(compile_launch(gemm_roles.grouped_gemm_roles, units, args, "sm_90").rendered.source)
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
    assert pb.WEIGHT_KERNEL in ("ring", "roles")


@pytest.mark.parametrize("mode,bn", [("forward", 64), ("forward", 128), ("forward-nhwc", 64), ("forward-nhwc", 128), ("data", 64),
                                     ("weight", 128)])
def test_convolution_f32_gemm_compiles_without_spills(mode, bn):
    """The F32 register-tiled implicit GEMM (rudnn.convolution.implicit_gemm_simt, issue 17) at
    64@56's shape: sm_90a and sm_80 compile each pass with no spills and no tensor-core
    instruction (F32 products on the units' FMA pipes). Prints ptxas's register counts."""
    from rudnn.convolution import ConvOptions, implicit_gemm_simt as simt
    from rudnn.convolution.problem import (as_5d, user_shape, validate_data_backward, validate_forward,
                                           validate_weight_backward)
    nhwc = mode == "forward-nhwc"
    x = CPU.zeros((2, 56, 56, 64) if nhwc else (2, 64, 56, 56), "f32")
    w = CPU.zeros((64, 3, 3, 64) if nhwc else (64, 64, 3, 3), "f32")
    dy = CPU.zeros((2, 64, 56, 56), "f32")
    one = CPU.zeros((1,), "f32")
    o = ConvOptions(padding=1)
    if mode.startswith("forward"):
        p = validate_forward("conv_forward", x, w, None, o, nhwc)
        g = p.geo
        y5 = as_5d(CPU.empty(user_shape((g.B, g.K, *g.O), g.rank, nhwc), "f32"), g.rank, nhwc)
        args = (p.x, p.w, p.x, y5, one, g.B * g.pixels, g.Kg, 576, 576, 64, 64, 64, simt.FORWARD, False, g.consts(), (),
                128, bn, nhwc, nhwc, not nhwc, simt.cubes(128, bn))
    elif mode == "data":
        p = validate_data_backward(dy, w, x.shape, o)
        g = p.geo
        args = (p.dy, p.w, p.dy, as_5d(CPU.empty(x.shape, "f32"), 2, False), one, g.B * g.in_pixels, 64, 576, 576,
                64, 64, 64, simt.DATA, False, simt.flipped_geometry(g), (), 128, bn, False, False, True,
                simt.cubes(128, bn))
    else:
        p = validate_weight_backward(x, dy, w.shape, o)
        g = p.geo
        part = CPU.empty((4, 64, 576), "f32")
        args = (p.dy, p.x, p.x, part, part, 64, 576, g.B * g.pixels, 1568, 64, 64, 64, simt.WEIGHT, False, g.consts(),
                simt.pixel_sizes(g.O), 64, bn, True, True, False, simt.cubes(64, bn))
    source = compile_launch(simt.conv_simt, simt.UNITS, args, "sm_90").rendered.source
    n = args[-1]
    assert (f"__launch_bounds__({simt.UNITS}, {n})" if n > 1 else f"__launch_bounds__({simt.UNITS})") in source
    log = ptxas_report(source)
    print(f"{mode} BN {bn}:", " ".join(re.findall(r"Used \d+ registers[^\n]*", log)),
          " ".join(re.findall(r"\d+ bytes spill stores, \d+ bytes spill loads", log)))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
    for sm in (90, 80):
        ptx = ptx_of(simt.conv_simt, simt.UNITS, args, sm=sm)
        assert not re.search(r"\b(mma|wgmma)\.", ptx) and "fma.rn.f32" in ptx
        print(f"sm_{sm}: {len(re.findall(r'ld.shared.v4.f32', ptx))} ld.shared.v4, "
              f"{len(re.findall(r'ld.shared.f32', ptx))} ld.shared.f32")


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_pooling_backward_by_cells_compiles_without_spills(dt):
    """rudnn.pooling's backward by cells (backward.pool_backward_cells) at its H200 benchmark
    window (3×3 s2 p1, 2×2 candidates and 2×2 inputs a unit), max (64-bit indices) and
    average: sm_90a and sm_80 compile it with no spills and no atomics. Prints ptxas's
    register counts."""
    from rudnn.pooling.backward import pool_backward_cells
    g, dx = CPU.zeros((64 * 56 * 56,), dt), CPU.zeros((64 * 112 * 112,), dt)
    idx = CPU.zeros((64 * 56 * 56,), "i64")
    geometry = (64 * 57, 1, 112, 112, 1, 56, 56, 1, 57, 57, 0, 1, 1, 0, 1, 3, 3, 1, 2, 2, 1, 2, 2)
    for maximum in (True, False):
        args = (g, idx, dx, *geometry, maximum, 2, True)
        log = ptxas_report(compile_launch(pool_backward_cells, (64, 4), args, "sm_90").rendered.source)
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log), log[-2000:]
        print(dt, "max" if maximum else "avg", " ".join(re.findall(r"Used \d+ registers[^\n]*", log)))
        for sm in (90, 80):
            assert not re.search(r"\b(atom|red)\.", ptx_of(pool_backward_cells, (64, 4), args, sm=sm))
