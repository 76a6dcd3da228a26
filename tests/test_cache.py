"""The disk cache: a second Python process reuses compiled kernels without compiling."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.feature("kernel cache")

SCRIPT = textwrap.dedent("""
    import json, numpy as np, kerneldsl as kd

    @kd.kernel
    def cached_axpy(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], a: kd.f32):
        i = kd.unit_pos_x()
        y[i] = a * x[i] + y[i]

    rt = kd.runtime("cpu")
    x, y = rt.tensor(np.ones(8, np.float32)), rt.zeros(8, "f32")
    cached_axpy[1, 8](x, y, 3.0)
    cached_axpy[1, 8](x, y, 3.0)
    assert (y.numpy() == 6).all()
    print(json.dumps(kd.cache_stats()))
""")


def _run(cache_dir, tmp_path):
    script = tmp_path / "cached_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, KERNELDSL_CACHE=str(cache_dir))
    out = subprocess.run([sys.executable, str(script)], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_reuses_disk_cache(tmp_path):
    cache_dir = tmp_path / "kcache"
    first = _run(cache_dir, tmp_path)
    assert first["compiled"] + first["disk_hits"] == 1 and first["memory_hits"] == 1, first
    second = _run(cache_dir, tmp_path)
    assert second["compiled"] == 0 and second["disk_hits"] == 1, (first, second)
    assert any(cache_dir.rglob("*"))


def test_cache_disabled_with_empty_setting(tmp_path):
    first = _run("", tmp_path)
    second = _run("", tmp_path)
    assert first["compiled"] == 1 and second["compiled"] == 1
