"""Which OpenCL devices work here, and why the others do not.

Two jobs, both done once per process before any device is used:

- **Finding pip-installed drivers.** Intel's CPU runtime (`intel-opencl-rt` on PyPI) ships
  an ICD file whose library path is a build-time placeholder, so the ICD loader cannot find
  it. Unless the user has set `OCL_ICD_VENDORS`, we write a vendors folder of our own (the
  pip-installed drivers with their real paths, plus the system's `/etc/OpenCL/vendors`
  entries, which that variable would otherwise hide) and point the loader at it before it
  first reads its configuration.
- **Telling the truth about devices.** A device is usable only if a one-line kernel builds
  and runs on it and gives the right answer: PoCL's bundled LLVM, for one, enumerates a
  device on CPUs it does not know and then fails every build. `probe()` keeps each device's
  verdict and reason; the runtime numbers only the working devices, and `kd.runtime_report()`
  shows the rest.
"""
from __future__ import annotations

import functools
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .capabilities import device_label

LOG = logging.getLogger("kerneldsl.opencl")

# pip-installed OpenCL drivers whose ICD file cannot name its library: (distribution, library)
PIP_DRIVERS = (("intel-opencl-rt", "libintelocl.so"),)
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")
KIND_ORDER = ("GPU", "ACCELERATOR", "CPU")

_SMOKE_SOURCE = "__kernel void kd_smoke(__global int* x) { int i = get_global_id(0); x[i] = x[i] * 3 + i; }"


@dataclass(frozen=True)
class DeviceVerdict:
    """One OpenCL device the loader listed: usable or not, and why."""

    platform: object  # pyopencl.Platform
    device: object  # pyopencl.Device, None where the platform listed no device
    label: str
    works: bool
    reason: str = ""


def _pip_driver_library(dist_name: str, lib_name: str) -> Path | None:
    """The absolute path of a driver library installed by pip, or None."""
    try:
        from importlib import metadata
        files = metadata.files(dist_name) or ()
    except Exception:  # noqa: BLE001  (not installed)
        files = ()
    for f in files:
        if Path(str(f)).name == lib_name:
            path = Path(f.locate()).resolve()
            if path.exists():
                return path
    for root in {sys.prefix, sys.base_prefix}:  # a layout metadata did not describe
        path = Path(root) / "lib" / lib_name
        if path.exists():
            return path
    return None


def _vendor_lines() -> dict:
    """ICD file name -> library line: pip-installed drivers, then the system's own entries."""
    lines = {}
    for dist, lib in PIP_DRIVERS:
        path = _pip_driver_library(dist, lib)
        if path is not None:
            lines[f"kd-{dist}.icd"] = str(path)
    if SYSTEM_VENDORS.is_dir():
        for icd in sorted(SYSTEM_VENDORS.glob("*.icd")):
            try:
                lines.setdefault(icd.name, icd.read_text().strip())
            except OSError:
                continue
    return lines


def _write_vendor_dir(lines: dict) -> Path:
    """A folder of ICD files for `lines`, under the kernel cache root (a temporary folder if
    that is not writable). Its name hashes the contents, so processes never rewrite it."""
    import hashlib
    digest = hashlib.sha256(repr(sorted(lines.items())).encode()).hexdigest()[:16]
    try:
        from kerneldsl import cache
        if not cache.enabled():
            raise OSError("the kernel cache is disabled")
        folder = cache.cache_dir() / "opencl-vendors" / digest
    except Exception:  # noqa: BLE001  (not a name importable as a package, were the temp folder on sys.path)
        folder = Path(tempfile.gettempdir()) / f"kerneldsl-opencl-vendors-{os.getuid()}" / digest
    try:
        return _fill_folder(folder, lines)
    except OSError:
        return _fill_folder(Path(tempfile.mkdtemp(prefix="kerneldsl-icd-")), lines)


def _fill_folder(folder: Path, lines: dict) -> Path:
    """Write one ICD file per entry of `lines` into `folder`, each atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, line in lines.items():
        target = folder / name
        if not target.exists() or target.read_text() != line + "\n":
            tmp = folder / f".{name}.{os.getpid()}"
            tmp.write_text(line + "\n")
            os.replace(tmp, target)
    return folder


@functools.lru_cache(maxsize=None)
def register_pip_drivers() -> str | None:
    """Point the ICD loader at pip-installed drivers (once, before pyopencl lists platforms).

    Returns the vendors folder used, or None where nothing was changed: the user set
    `OCL_ICD_VENDORS` themselves, or no pip-installed driver is present."""
    if "OCL_ICD_VENDORS" in os.environ:
        return None
    lines = _vendor_lines()
    if not any(name.startswith("kd-") for name in lines):
        return None
    try:
        folder = _write_vendor_dir(lines)
    except OSError as e:
        LOG.warning("could not register pip-installed OpenCL drivers: %s", e)
        return None
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    return str(folder)


def smoke_test(platform, device) -> str:
    """'' when a trivial kernel builds and runs correctly on `device`, else the reason."""
    import warnings

    import pyopencl as cl
    try:
        ctx = cl.Context([device])
        queue = cl.CommandQueue(ctx, device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            prg = cl.Program(ctx, _SMOKE_SOURCE).build(cache_dir=False)
        host = np.arange(64, dtype=np.int32)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
        prg.kd_smoke(queue, (64,), None, buf)
        out = np.empty_like(host)
        cl.enqueue_copy(queue, out, buf, is_blocking=True)
    except Exception as e:  # noqa: BLE001  (any driver failure is the reason)
        return _first_lines(str(e) or type(e).__name__)
    want = np.arange(64, dtype=np.int32) * 4
    if not np.array_equal(out, want):
        return "a test kernel ran but gave wrong results"
    return ""


def _first_lines(text: str) -> str:
    """The informative part of a driver message: its 'error:' line if there is one."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and not ln.lower().startswith("clbuildprogram failed")]
    picked = errors[:2] or lines[:2]
    return "; ".join(picked)[:300]


@functools.lru_cache(maxsize=None)
def probe() -> tuple:
    """Every device the loader lists, tested once: a tuple of DeviceVerdict, working GPUs
    first, then accelerators, then CPUs (in the loader's order within a kind), then the
    devices that failed. Raises ImportError without pyopencl."""
    register_pip_drivers()
    import pyopencl as cl
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:  # the loader found no platform at all
        return (DeviceVerdict(None, None, "OpenCL ICD loader", False, _first_lines(str(e))),)
    ranked = []
    for plat in platforms:
        try:
            devs = plat.get_devices()
        except cl.Error as e:
            ranked.append((1, 0, len(ranked), DeviceVerdict(plat, None, plat.name.strip(), False,
                                                            f"lists no device: {_first_lines(str(e))}")))
            continue
        for d in devs:
            kinds = cl.device_type.to_string(d.type)
            rank = next((i for i, k in enumerate(KIND_ORDER) if k in kinds), len(KIND_ORDER))
            reason = smoke_test(plat, d)
            verdict = DeviceVerdict(plat, d, device_label(plat, d), not reason, reason)
            ranked.append((0 if verdict.works else 1, rank, len(ranked), verdict))
    ranked.sort(key=lambda r: r[:3])
    verdicts = tuple(r[3] for r in ranked)
    for v in verdicts:
        if not v.works:
            LOG.warning("OpenCL device %s left out: %s", v.label, v.reason)
    return verdicts


def working() -> tuple:
    """(platform, device) pairs of the devices that passed the smoke test, in runtime order."""
    return tuple((v.platform, v.device) for v in probe() if v.works)


def failures() -> tuple:
    return tuple(v for v in probe() if not v.works)
