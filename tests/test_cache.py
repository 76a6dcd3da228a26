"""The disk cache: a second Python process reuses compiled kernels without compiling, and
without running the front end or a renderer; what changes the binary changes the key."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import kerneldsl as kd

pytestmark = pytest.mark.feature("kernel cache")

SCRIPT = textwrap.dedent("""
    import json, os, sys, numpy as np, kerneldsl as kd

    if os.environ.get("POISON_FRONT_END"):  # a warm process must never get here
        from kerneldsl import frontend
        def refuse(*a, **k):
            raise AssertionError("the front end ran")
        frontend.Frontend.build = refuse
        frontend.parse_source = refuse

    SCALE = {scale}

    @kd.func
    def combine(a, b):
        return {combine}

    @kd.kernel
    def cached_axpy(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], a: kd.f32, REPEAT: kd.Const[int]):
        i = kd.unit_pos_x()
        for _ in kd.unroll(REPEAT):
            y[i] = combine(a * x[i], y[i]) * SCALE

    rt = kd.runtime("{runtime}")
    x, y = rt.tensor(np.ones(8, np.float32)), rt.zeros(8, "f32")
    cached_axpy[1, 8](x, y, 3.0, {repeat})
    cached_axpy[1, 8](x, y, 3.0, {repeat})
    want = np.zeros(8, np.float32)
    for _ in range(2 * {repeat}):
        want = ({combine_py}) * {scale}
    assert np.allclose(y.numpy(), want), (y.numpy(), want)
    stats = kd.cache_stats()
    stats["renderer_imported"] = "kerneldsl.backends.cpu.renderer" in sys.modules
    print(json.dumps(stats))
""")


def _run(cache_dir, tmp_path, poison=False, scale=1.0, combine="a + b", combine_py="3.0 + want", repeat=1,
         runtime="cpu"):
    script = tmp_path / "cached_script.py"
    script.write_text(SCRIPT.format(scale=scale, combine=combine, combine_py=combine_py, repeat=repeat,
                                    runtime=runtime))
    env = dict(os.environ, KERNELDSL_CACHE=str(cache_dir))
    env.pop("POISON_FRONT_END", None)
    if poison:
        env["POISON_FRONT_END"] = "1"
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_second_process_reuses_disk_cache(tmp_path):
    cache_dir = tmp_path / "kcache"
    first, _ = _run(cache_dir, tmp_path)
    assert first["compiled"] + first["disk_hits"] == 1 and first["memory_hits"] == 1, first
    second, _ = _run(cache_dir, tmp_path)
    assert second["compiled"] == 0 and second["disk_hits"] == 1, (first, second)
    assert any(cache_dir.rglob("*"))


def test_warm_process_runs_no_front_end_and_no_renderer(tmp_path):
    cache_dir = tmp_path / "kcache"
    first, _ = _run(cache_dir, tmp_path)
    assert first["specialized"] == 1 and first["rendered"] == 1 and first["compiled"] == 1, first
    warm, _ = _run(cache_dir, tmp_path, poison=True)  # the front end raises if called
    assert warm["specialized"] == 0 and warm["rendered"] == 0 and warm["compiled"] == 0, warm
    assert warm["disk_hits"] == 1 and not warm["renderer_imported"], warm


@pytest.mark.parametrize("change", [
    {"repeat": 2},                                     # a kd.Const value
    {"scale": 2.0},                                    # a module-level constant the kernel reads
    {"combine": "a - b", "combine_py": "3.0 - want"},  # the source of a @kd.func it calls
])
def test_what_changes_the_binary_changes_the_key(tmp_path, change):
    cache_dir = tmp_path / "kcache"
    _run(cache_dir, tmp_path)
    changed, _ = _run(cache_dir, tmp_path, **change)
    assert changed["compiled"] == 1 and changed["disk_hits"] == 0, changed
    again, _ = _run(cache_dir, tmp_path, poison=True, **change)
    assert again["compiled"] == 0 and again["disk_hits"] == 1, again


# every runtime of this machine, by the name a new process asks for (cpu-p8 would repeat cpu)
RUNTIME_NAMES = [n for n in kd.available_runtimes() if n.split(":")[0] in ("cpu", "opencl", "cuda")]


@pytest.mark.parametrize("runtime_name", RUNTIME_NAMES)
def test_damaged_entry_is_rebuilt_with_a_warning(tmp_path, runtime_name):
    """A flipped bit, a truncated entry and an empty one are each discarded with a warning and
    rebuilt, never loaded (a damaged object file crashed the loader before entries had a
    checksum), and the next process answers right from the rebuilt entry."""
    cache_dir = tmp_path / "kcache"
    run = lambda **kw: _run(cache_dir, tmp_path, runtime=runtime_name, **kw)  # noqa: E731
    run()
    (entry,) = [p for p in (cache_dir / "kernels").rglob("*") if p.is_file()]
    data = bytearray(entry.read_bytes())
    data[-5] ^= 0x10  # one flipped bit in the payload
    entry.write_bytes(bytes(data))
    rebuilt, stderr = run()
    assert rebuilt["compiled"] == 1 and rebuilt["disk_hits"] == 0, rebuilt
    assert "damaged kernel cache entry" in stderr and "checksum" in stderr
    entry.write_bytes(b"KDCE")  # truncated: shorter than its header
    again, stderr = run()
    assert again["compiled"] == 1 and "header" in stderr
    entry.write_bytes(b"")  # emptied
    emptied, stderr = run()
    assert emptied["compiled"] == 1 and "damaged kernel cache entry" in stderr
    third, _ = run(poison=True)  # the rebuilt entry is good again
    assert third["compiled"] == 0 and third["disk_hits"] == 1


@pytest.mark.parametrize("make", ["a file", "read-only"])
def test_unusable_cache_folder_is_reported_once(tmp_path, make):
    cache_dir = tmp_path / "kcache"
    if make == "a file":
        cache_dir.write_text("not a folder")
    else:
        cache_dir.mkdir()
        cache_dir.chmod(0o500)
        if os.access(cache_dir, os.W_OK):  # root ignores permission bits
            pytest.skip("this user can write into a read-only folder (root): nothing to report")
    first, stderr = _run(cache_dir, tmp_path, repeat=2)
    assert first["compiled"] == 1
    assert stderr.count("is unusable") == 1, stderr


def test_cache_disabled_with_empty_setting(tmp_path):
    first, _ = _run("", tmp_path)
    second, _ = _run("", tmp_path)
    assert first["compiled"] == 1 and second["compiled"] == 1
