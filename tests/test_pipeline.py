"""The load pipeline's parts: cache keys made before the front end (kernel digests), cache
entries, scalar packing, `Kernel.specialize` and the back-end table."""
import enum
import sys
import textwrap
import types
from dataclasses import dataclass

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import cache, fingerprint
from kerneldsl.pipeline import LaunchInfo, scalar_bits, scalar_value
from kerneldsl.runtime import BACKENDS

pytestmark = pytest.mark.feature("kernel cache")


def _module(name, source):
    """A fresh module made from `source` (as a user's file would be)."""
    mod = types.ModuleType(name)
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), mod.__dict__)  # noqa: S102
    return mod


BASE = """
    import kerneldsl as kd
    WIDTH = 4

    @kd.func
    def twice(v):
        return v * 2

    def tile(n):
        return n * WIDTH

    @kd.kernel
    def k(x: kd.Tensor[kd.f32]):
        i = kd.unit_pos_x()
        x[i] = twice(x[i]) + tile(1)
"""


def _digest(source=BASE, name="m"):
    return fingerprint.kernel_digest(_module(name, source).k.fn)


def test_kernel_digest_is_stable_and_follows_what_the_kernel_reads():
    base = _digest()
    assert _digest() == base  # the same code and values: the same digest
    assert _digest(BASE.replace("WIDTH = 4", "WIDTH = 5")) != base  # a global read by a helper it calls
    assert _digest(BASE.replace("return v * 2", "return v * 3")) != base  # a @kd.func's body
    assert _digest(BASE.replace("twice(x[i]) +", "twice(x[i]) -")) != base  # the kernel's own body
    assert _digest("\n" + BASE) != base  # its lines: they reach the binary (#line, error records)
    unrelated = BASE + "    OTHER = 1\n"
    assert _digest(unrelated) == base  # a global it does not read


def test_closure_cells_and_module_attributes_are_part_of_the_digest():
    def make(block):
        @kd.kernel
        def k(x: kd.Tensor[kd.f32]):
            x[kd.unit_pos_x()] = kd.f32(block)
        return k

    assert fingerprint.kernel_digest(make(4).fn) == fingerprint.kernel_digest(make(4).fn)
    assert fingerprint.kernel_digest(make(4).fn) != fingerprint.kernel_digest(make(8).fn)

    helpers = _module("kd_test_helpers", "SIZE = 3\n")
    sys.modules["kd_test_helpers"] = helpers
    try:
        user = _module("m2", """
            import kerneldsl as kd
            import kd_test_helpers as helpers

            @kd.kernel
            def k(x: kd.Tensor[kd.f32]):
                x[0] = kd.f32(helpers.SIZE)
        """)
        before = fingerprint.kernel_digest(user.k.fn)
        helpers.SIZE = 4
        assert fingerprint.kernel_digest(user.k.fn) != before
    finally:
        del sys.modules["kd_test_helpers"]


class Mode(enum.Enum):
    FAST = 1
    EXACT = 2


@dataclass(frozen=True)
class Options:
    block: int
    mode: Mode


def test_values_are_described_by_contents():
    d = fingerprint.value_digest
    assert d(Options(4, Mode.FAST)) == d(Options(4, Mode.FAST))
    assert d(Options(4, Mode.FAST)) != d(Options(4, Mode.EXACT))
    assert d(Options(4, Mode.FAST)) != d(Options(8, Mode.FAST))
    assert d(kd.f32) != d(kd.bf16) and d((1, 2)) != d((1, 2.0)) and d(frozenset({"a", "b"})) == d({"b", "a"})
    assert d(np.arange(3)) != d(np.arange(4))
    with pytest.raises(fingerprint.Unkeyable):
        d(object())


def test_a_kernel_reading_an_unkeyable_value_still_runs_uncached(monkeypatch):
    token = object()

    @kd.kernel
    def reads_object(x: kd.Tensor[kd.f32]):
        if token is not None:
            x[kd.unit_pos_x()] = 2.0

    rt = kd.runtime("cpu")
    spec = reads_object.specialize(rt, kd.TensorType(kd.f32, 1), block=4)
    assert spec.key is None
    x = rt.zeros(4, "f32")
    reads_object[1, 4](x)
    assert (x.numpy() == 2).all()


def test_entries_round_trip_and_damage_is_detected():
    entry = cache.Entry({"launch": {"name": "k"}, "frame_bytes": 7}, b"\x00\x01binary")
    data = cache.encode(entry)
    assert cache.decode(data) == entry
    for bad, why in [(data[:10], "header"), (data[:-1], "promises"), (data[:-1] + b"X", "checksum"),
                     (b"XXXX" + data[4:], "magic")]:
        with pytest.raises(ValueError, match=why):
            cache.decode(bad)


def test_launch_info_round_trips_through_json():
    @kd.kernel
    def sig(x: kd.Tensor[kd.f16], n: kd.i32, y: kd.Tensor[kd.f32], s: kd.bf16, B: kd.Const[int]):
        pass

    kir, _ = sig.specialize("cpu", kd.TensorType(kd.f16, 2), 3, kd.TensorType(kd.f32, 1), kd.bf16, 5,
                            block=(8, 2)).ir()
    info = LaunchInfo.of(kir)
    assert LaunchInfo.from_json(info.to_json()) == info
    assert info.cube_units == 16 and [p.name for p in info.params] == ["x", "n", "y", "s"]


@pytest.mark.parametrize("dtype, value, want", [
    ("f32", -1.5, np.array(-1.5, np.float32).view(np.uint32)),
    ("f64", 2.25, np.array(2.25, np.float64).view(np.uint64)),
    ("f16", 0.1, np.array(0.1, np.float16).view(np.uint16)),
    ("bf16", 1.5, 0x3FC0),
    ("i32", -3, 2 ** 32 - 3),
    ("i64", -3, 2 ** 64 - 3),
    ("u32", 4_000_000_000, 4_000_000_000),
    ("u8", 255, 255),
    ("bool", True, 1),
])
def test_scalar_packing(dtype, value, want):
    dt = kd.as_dtype(dtype)
    assert scalar_bits(dt, value) == int(want)
    assert scalar_value(dt, value).tobytes() == int(want).to_bytes(dt.itemsize, "little")


def test_scalars_of_every_dtype_reach_a_cpu_kernel():
    @kd.kernel
    def scalars(out: kd.Tensor[kd.f64], a: kd.bf16, b: kd.i64, c: kd.u32, d: kd.bool, e: kd.f16, f: kd.f64):
        out[0] = kd.f64(a)
        out[1] = kd.f64(b)
        out[2] = kd.f64(c)
        out[3] = kd.f64(1.0) if d else kd.f64(0.0)
        out[4] = kd.f64(e)
        out[5] = f

    out = kd.runtime("cpu").zeros(6, "f64")
    scalars[1, 1](out, 1.5, -3, 4_000_000_000, True, -2.5, 1e300)
    np.testing.assert_array_equal(out.numpy(), [1.5, -3, 4e9, 1, -2.5, 1e300])


@kd.kernel
def scale_rows(x: kd.Tensor[kd.f32], n: kd.i32, BLOCK: kd.Const[int]):
    i = kd.cube_pos_x() * BLOCK + kd.unit_pos_x()
    if i < n:
        x[i] = x[i] * 2.0


def test_specialize_gives_source_and_binary_without_launching():
    rt = kd.runtime("cpu")
    spec = scale_rows.specialize(rt, kd.TensorType(kd.f32, 1), kd.i32, 64, block=64)
    assert "define" in spec.source() and spec.key is not None
    x = rt.tensor(np.arange(100, dtype=np.float32))
    assert spec.source() == scale_rows.source(64, x, 100, 64)
    binary = spec.compile()
    assert spec.compile() is binary
    before = kd.cache_stats()
    scale_rows[2, 64](x, 100, 64)  # the launch finds the specialisation compiled
    after = kd.cache_stats()
    assert after["memory_hits"] == before["memory_hits"] + 1 and after["specialized"] == before["specialized"]
    np.testing.assert_array_equal(x.numpy(), np.arange(100) * 2)
    with pytest.raises(TypeError, match="argument x must be f32"):
        scale_rows.specialize(rt, kd.TensorType(kd.f16, 1), kd.i32, 64, block=64)
    with pytest.raises(ValueError, match="units"):
        scale_rows.specialize(rt, kd.TensorType(kd.f32, 1), kd.i32, 64, block=10 ** 6)


def test_backends_are_one_table_of_lazily_imported_modules():
    assert list(BACKENDS) == ["cpu", "opencl", "cuda", "interpreter"]
    assert all(path.startswith("kerneldsl.backends.") for path in BACKENDS.values())
    with pytest.raises(ValueError, match="expected one of cpu, opencl, cuda, interpreter"):
        kd.runtime("tpu")
