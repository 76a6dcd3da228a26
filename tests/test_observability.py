"""Seeing what the kernel pipeline does: compile and cache events through `logging`,
`kd.cache_info()` / `kd.cache_clear()`, and the public API as type checkers see it
(explicit `__all__`, `py.typed`) (issue 21, item 4)."""
import logging
from pathlib import Path

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.builtins import REGISTRY

pytestmark = pytest.mark.feature("observability")


def _make_kernel(scale: float):
    @kd.kernel
    def scaled_copy(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i32):
        i = kd.unit_pos_x()
        if i < n:
            y[i] = x[i] * scale
    return scaled_copy


def test_compile_and_cache_events_are_logged(runtime, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("KERNELDSL_CACHE", str(tmp_path))
    x = runtime.tensor(np.ones(4, np.float32))
    y = runtime.zeros(4)
    with caplog.at_level(logging.DEBUG, logger="kerneldsl"):
        _make_kernel(3.0)[1, 4](x, y, 4)
    compiled = [r for r in caplog.records if r.name == "kerneldsl.compile"]
    assert len(compiled) == 1 and compiled[0].levelno == logging.INFO
    msg = compiled[0].getMessage()
    assert msg.startswith(f"compiled kernel scaled_copy on {runtime.name} in ") and " ms (front end " in msg
    assert any(r.name == "kerneldsl.cache" and r.getMessage().startswith("miss: kernel scaled_copy")
               for r in caplog.records)

    caplog.clear()
    kd.cache_clear(disk=False)  # forget the binary in memory: the next launch finds it on disk
    with caplog.at_level(logging.DEBUG, logger="kerneldsl"):
        _make_kernel(3.0)[1, 4](x, y, 4)
    assert any(r.getMessage().startswith(f"disk hit: kernel scaled_copy on {runtime.name}") for r in caplog.records)
    assert not any(r.name == "kerneldsl.compile" for r in caplog.records)
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3, 3])


def test_cache_info_and_clear(runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELDSL_CACHE", str(tmp_path))
    kd.cache_clear()
    info = kd.cache_info()
    assert info["dir"] == str(tmp_path) and info["disk_entries"] == 0 and info["disk_bytes"] == 0
    x = runtime.tensor(np.ones(4, np.float32))
    y = runtime.zeros(4)
    k = _make_kernel(5.0)
    k[1, 4](x, y, 4)
    info = kd.cache_info()
    files = [p for p in (tmp_path / "kernels").rglob("*") if p.is_file()]
    assert info["disk_entries"] == len(files) >= 1
    assert info["disk_bytes"] == sum(p.stat().st_size for p in files) > 0
    assert info["memory_entries"] >= 1
    assert set(info["stats"]) >= {"compiled", "disk_hits", "memory_hits"}

    compiled = kd.cache_stats()["compiled"]
    kd.cache_clear()
    info = kd.cache_info()
    assert info["disk_entries"] == 0 and info["memory_entries"] == 0
    k[1, 4](x, y, 4)  # compiles again: nothing in memory, nothing on disk
    assert kd.cache_stats()["compiled"] == compiled + 1
    np.testing.assert_array_equal(y.numpy(), [5, 5, 5, 5])


def test_cache_info_with_the_disk_cache_off(monkeypatch):
    monkeypatch.setenv("KERNELDSL_CACHE", "")
    info = kd.cache_info()
    assert info["dir"] is None and info["disk_entries"] == 0
    kd.cache_clear(disk=True, memory=False)  # nothing to remove, and no error


def test_every_public_name_exists_and_every_builtin_is_public():
    missing = [n for n in kd.__all__ if not hasattr(kd, n)]
    assert not missing
    assert len(set(kd.__all__)) == len(kd.__all__)
    assert set(REGISTRY) <= set(kd.__all__)
    for name in ("kernel", "func", "runtime", "tensor", "cache_info", "cache_clear", "Const", "Tensor", "f32"):
        assert name in kd.__all__


@pytest.mark.parametrize("package", ["kerneldsl", "ops"])
def test_packages_are_marked_typed(package):
    assert (Path(__file__).resolve().parent.parent / package / "py.typed").is_file()
