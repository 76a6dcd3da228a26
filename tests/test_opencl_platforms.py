"""OpenCL device discovery: pip-installed drivers registered with the ICD loader, only devices
that build and run a kernel listed, and every other one reported with its reason."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kerneldsl as kd

pytest.importorskip("pyopencl", reason="pyopencl is not installed (the opencl extra installs it)")
platforms = pytest.importorskip("kerneldsl.backends.opencl.platforms")
opencl_runtime = pytest.importorskip("kerneldsl.backends.opencl.runtime")
pytestmark = pytest.mark.feature("opencl platforms")

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=full)


def test_every_listed_device_runs_and_every_other_has_a_reason():
    report = kd.runtime_report()
    names = kd.available_runtimes()
    assert names[0] == "cpu"
    assert [s.name for s in report if s.available] == names
    for status in report:
        if not status.available:
            assert status.reason, f"{status.name} on {status.device} is left out with no reason"
    for name in names:
        if name.startswith("opencl"):
            rt = kd.runtime(name)
            x = rt.tensor(np.arange(5, dtype=np.float32))
            np.testing.assert_array_equal(x.numpy(), np.arange(5, dtype=np.float32))
    text = str(report)
    assert text.splitlines()[0].split()[:2] == ["runtime", "ok"]
    assert all(s.name in text for s in report)


def test_pip_installed_intel_runtime_is_registered():
    lib = platforms._pip_driver_library("intel-opencl-rt", "libintelocl.so")
    if lib is None:
        pytest.skip("intel-opencl-rt is not installed (the opencl extra installs it on x86-64 Linux)")
    out = _run("import json, os, kerneldsl as kd; s = kd.runtime_report(); "
               "print(json.dumps([os.environ.get('OCL_ICD_VENDORS'), [[x.name, x.available, x.device] for x in s]]))")
    assert out.returncode == 0, out.stderr
    folder, statuses = json.loads(out.stdout.strip().splitlines()[-1])
    assert folder and Path(folder).is_dir()
    icds = {p.name: p.read_text().strip() for p in Path(folder).glob("*.icd")}
    assert icds.get("kd-intel-opencl-rt.icd") == str(lib) and Path(icds["kd-intel-opencl-rt.icd"]).is_file()
    intel = [s for s in statuses if "Intel" in s[2]]
    assert intel and all(available for _, available, _ in intel), statuses


def test_user_vendor_setting_is_left_alone(tmp_path):
    """With OCL_ICD_VENDORS set, nothing is registered; a vendors folder naming a library that
    does not exist is one reason in the report, not a crash, and the cpu runtime still works."""
    (tmp_path / "broken.icd").write_text(str(tmp_path / "libmissing-driver.so") + "\n")
    code = ("import os, numpy as np, kerneldsl as kd\n"
            "from kerneldsl.backends.opencl import platforms\n"
            "assert platforms.register_pip_drivers() is None\n"
            f"assert os.environ['OCL_ICD_VENDORS'] == {str(tmp_path)!r}\n"
            "report = kd.runtime_report()\n"
            "assert all(s.reason for s in report if not s.available)\n"
            "assert 'Intel' not in ' '.join(s.device for s in report)\n"
            "t = kd.runtime('cpu').tensor(np.ones(4, np.float32)); print('cpu', t.numpy().sum())\n")
    out = _run(code, OCL_ICD_VENDORS=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("cpu 4.0")


@pytest.fixture
def broken_drivers(monkeypatch):
    """Every OpenCL device fails its smoke test, as on a machine whose drivers cannot build."""
    platforms.probe.cache_clear()
    monkeypatch.setattr(platforms, "smoke_test", lambda plat, dev: "error: the driver cannot build kernels")
    yield
    platforms.probe.cache_clear()


def test_no_working_device_is_one_clear_error(broken_drivers):
    assert not any(n.startswith("opencl") for n in kd.available_runtimes())
    left_out = [s for s in kd.runtime_report() if s.name == "opencl"]
    assert left_out and all(not s.available and "cannot build kernels" in s.reason for s in left_out)
    with pytest.raises(kd.RuntimeUnavailable, match="found no working OpenCL device") as err:
        opencl_runtime.create(0)
    for status in left_out:
        if status.device != "-":
            assert status.device in str(err.value)
    t = kd.runtime("cpu").tensor(np.ones(3, np.float32))
    assert t.numpy().sum() == 3


def test_intel_cpu_runtime_uses_native_subgroups():
    """Intel's CPU runtime has sub-group shuffles and ballots and sizes sub-groups on request:
    plane operations there run on the sub-group instructions, 32 lanes a plane."""
    import pyopencl as cl
    intel = [i for i, (p, d) in enumerate(opencl_runtime.devices())
             if "Intel" in p.name and "CPU" in cl.device_type.to_string(d.type)]
    if not intel:
        pytest.skip("no working Intel OpenCL CPU device here (the opencl extra installs it on x86-64 Linux)")
    rt = kd.runtime("opencl" if intel[0] == 0 else f"opencl:{intel[0]}")
    assert rt.capabilities.native_plane_ops and rt.capabilities.plane_dim == 32
    local = kd.runtime(rt.name, native_planes=False)
    assert not local.capabilities.native_plane_ops and local.device_key != rt.device_key
