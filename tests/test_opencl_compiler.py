"""OpenCL compiler specifics: driver build errors mapped back to the user's Python line,
KERNELDSL_DUMP writes the .cl source, program binaries come back from the disk cache."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kerneldsl as kd

opencl_runtime = pytest.importorskip("kerneldsl.backends.opencl.runtime",
                                     reason="pyopencl is not installed (the test extra installs it)")
from kerneldsl.backends.opencl import compiler, renderer  # noqa: E402

pytestmark = [pytest.mark.feature("opencl backend"),
              pytest.mark.skipif(not opencl_runtime.available(), reason="no OpenCL device on this machine "
                                 "(pip install 'rudnn[opencl]' gives a CPU one)")]
THIS = os.path.abspath(__file__)


@kd.kernel
def synced_copy(x: kd.Tensor[kd.f32], out: kd.Tensor[kd.f32]):
    t = kd.unit_pos_x()
    v = x[t]
    kd.sync_cube()  # the statement the broken renderer below turns into invalid OpenCL C
    out[t] = v


def test_build_errors_point_at_the_python_line(monkeypatch):
    """A driver error inside generated code lands on the DSL statement it came from, through
    the `#line` directives, with the source line and a caret."""
    rt = opencl_runtime.OpenCLRuntime(0)  # a private runtime: nothing cached from other tests
    monkeypatch.setattr(renderer.OpenCLRenderer, "barrier_stmt", "barrier(CLK_LOCAL_MEM_FENCE) no_such_symbol;")
    monkeypatch.setenv("KERNELDSL_CACHE", "")
    with pytest.raises(kd.CompileError) as info:
        synced_copy[1, 4](rt.zeros(4, "f32"), rt.zeros(4, "f32"), runtime=rt)
    err = info.value
    import inspect
    lines, start = inspect.getsourcelines(synced_copy.fn)
    want = start + next(i for i, text in enumerate(lines) if "kd.sync_cube()" in text)
    assert err.loc.filename == THIS and err.loc.line == want, err.build_log
    text = str(err)
    assert "rejected kernel synced_copy" in text and "kd.sync_cube()" in text and "^" in text
    assert "no_such_symbol" in err.build_log or "expected" in err.build_log


def _sync_line():
    import inspect
    lines, start = inspect.getsourcelines(synced_copy.fn)
    return start + next(i for i, text in enumerate(lines) if "kd.sync_cube()" in text)


@pytest.mark.parametrize("style", ["pocl", "clang", "edg", "own-buffer"])
def test_build_log_formats_map_to_the_python_line(style):
    """The message formats drivers use, including one naming its own buffer (`<kernel>:N:M`)
    with N a line of the generated source."""
    rt = kd.runtime("opencl")
    kir, _ = synced_copy.specialize(rt, kd.TensorType(kd.f32, 1), kd.TensorType(kd.f32, 1), block=4).ir()
    rendered = renderer.render(kir, rt.capabilities)
    gen = next(i for i, t in enumerate(rendered.source.splitlines(), 1) if t.strip().startswith("barrier("))
    py = _sync_line()
    log = {"pocl": f"error: {THIS}:{py}:9: unknown thing",
           "clang": f"{THIS}:{py}:9: error: unknown thing",
           "edg": f'"{THIS}", line {py}: error: unknown thing',
           "own-buffer": f"<kernel>:{gen}:9: error: unknown thing"}[style]
    dev = opencl_runtime.devices()[0][1]
    err = compiler.build_error("Build on device:\n\n" + log + "\n1 error generated.", "synced_copy", dev,
                               rendered.locs, kir.loc, rendered.loc_of_source_line)
    assert err.loc.filename == THIS and err.loc.line == py
    assert str(err).startswith(f"{THIS}:{py}: the OpenCL compiler of") and "unknown thing" in str(err)


def test_build_error_without_a_python_line_shows_the_log():
    dev = opencl_runtime.devices()[0][1]
    err = compiler.build_error("some driver failure\nline two", "k", dev, {}, None)
    assert "rejected kernel k" in str(err) and "line two" in str(err)


def test_dump_writes_the_opencl_source(tmp_path):
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.dirname(THIS)!r})
        import numpy as np, kerneldsl as kd
        from test_opencl_compiler import synced_copy
        rt = kd.runtime("opencl")
        synced_copy[1, 4](rt.tensor(np.ones(4, np.float32)), rt.zeros(4, "f32"))
    """)
    env = dict(os.environ, KERNELDSL_DUMP=str(tmp_path), KERNELDSL_CACHE=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    dumped = list(tmp_path.glob("synced_copy.*.cl"))
    assert dumped
    src = dumped[0].read_text()
    assert "__kernel void" in src and "kd_synced_copy" in src and "#line" in src and THIS in src


SCRIPT = textwrap.dedent("""
    import json, numpy as np, kerneldsl as kd

    @kd.kernel
    def cl_cached_axpy(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], a: kd.f32):
        i = kd.unit_pos_x()
        y[i] = a * x[i] + y[i]

    rt = kd.runtime("opencl")
    x, y = rt.tensor(np.ones(8, np.float32)), rt.zeros(8, "f32")
    cl_cached_axpy[1, 8](x, y, 3.0)
    assert (y.numpy() == 3).all()
    print(json.dumps(kd.cache_stats()))
""")


def test_program_binaries_come_back_from_disk(tmp_path):
    script = tmp_path / "cl_cached.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, KERNELDSL_CACHE=str(tmp_path / "kcache"), KERNELDSL_OPENCL_STORE_BINARIES="1")

    def run():
        out = subprocess.run([sys.executable, str(script)], env=env, check=True, capture_output=True, text=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["compiled"] == 1 and first["disk_hits"] == 0
    assert second["compiled"] == 0 and second["disk_hits"] == 1
    assert any((tmp_path / "kcache" / "kernels").rglob("*"))


def test_pocl_binaries_are_left_to_pocls_own_cache(monkeypatch):
    plat = opencl_runtime.devices()[0][0]
    monkeypatch.delenv("KERNELDSL_OPENCL_STORE_BINARIES", raising=False)
    monkeypatch.delenv("POCL_KERNEL_CACHE", raising=False)
    pocl = "Portable Computing Language" in plat.name
    assert compiler.stores_binaries(plat) is (not pocl)
    monkeypatch.setenv("KERNELDSL_OPENCL_STORE_BINARIES", "1")
    assert compiler.stores_binaries(plat)
