"""OpenCL C text -> a built program for one device, through the driver (text in, program out).

Program binaries are cached on disk by the load pipeline (kerneldsl/runtime.py, one cache
for every back end; the key names the device, driver and pyopencl versions); pyopencl's
own source cache is bypassed so there is one cache to reason about. PoCL keeps its own
on-disk cache of compiled programs (keyed by source), and asking it for a binary costs
about as much as a third of a cold build, so with PoCL the cache entry holds the source
alone unless KERNELDSL_OPENCL_STORE_BINARIES=1 (see `stores_binaries`). A failed build raises CompileError at
the user's Python line: the generated source carries `#line` directives, so the driver's
build log already names the Python file and line.
"""
from __future__ import annotations

import os
import re
import warnings

from kerneldsl.errors import CompileError, SourceLoc

def build_options(device, native=None, units: int = 0) -> list:
    """Options for every build: correctly rounded f32 division and sqrt where the device offers
    them, so results match the cpu runtime's IEEE operations; OpenCL C 2.0 for sub-group
    built-ins (native='khr'); on NVIDIA, a register budget that lets `units` units run in one
    cube (its compiler otherwise plans for 256, whatever reqd_work_group_size says)."""
    import pyopencl as cl
    opts = ["-cl-std=CL2.0"] if native == "khr" else []
    if units and "cl_nv_compiler_options" in device.extensions:
        regs = getattr(device, "registers_per_block_nv", 65536) or 65536
        opts.append(f"-cl-nv-maxrregcount={max(16, min(255, regs // units // 8 * 8))}")
    cfg = getattr(device, "single_fp_config", 0)
    if cfg & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
        opts.append("-cl-fp32-correctly-rounded-divide-sqrt")
    return opts


def stores_binaries(platform) -> bool:
    """Whether built programs are written to kerneldsl's disk cache on this platform."""
    env = os.environ.get("KERNELDSL_OPENCL_STORE_BINARIES")
    if env is not None:
        return env not in ("", "0", "false", "no")
    pocl = "Portable Computing Language" in platform.name
    return not (pocl and os.environ.get("POCL_KERNEL_CACHE", "1") != "0")


class _BuildFailed(Exception):
    """The driver rejected a program; the message is its build log."""


def _build(program, options, devices):
    import pyopencl as cl
    try:
        with warnings.catch_warnings():  # warnings about generated code are ours to fix, not the user's
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program.build(options=options, devices=devices, cache_dir=False)
    except cl.Error as e:  # pyopencl puts the build log in the message
        raise _BuildFailed(str(e)) from None
    return program


def build(ctx, device, source: str, options, name: str = "kernel", locs=None, kernel_loc=None,
          source_loc=None):
    """A `pyopencl.Program` built from `source` for `device`; a rejected build raises
    CompileError at the user's Python line (see `build_error`)."""
    import pyopencl as cl
    try:
        return _build(cl.Program(ctx, source), options, [device])
    except _BuildFailed as e:
        raise build_error(str(e), name, device, locs or {}, kernel_loc, source_loc) from None


def from_binary(ctx, device, binary: bytes, options):
    """A `pyopencl.Program` from a program binary of `device` (raises when the driver
    refuses it: a stale or foreign binary)."""
    import pyopencl as cl
    return _build(cl.Program(ctx, [device], [binary]), options, [device])


def binary_of(program) -> bytes:
    """The device binary of a built program (b"" for a driver that gives none)."""
    import pyopencl as cl
    try:
        binaries = program.get_info(cl.program_info.BINARIES)
    except cl.Error:
        return b""
    return bytes(binaries[0]) if binaries and binaries[0] else b""


_PY_STYLES = (r":(\d+):(?:\d+:)?", r'", line (\d+)', r"\((\d+)\)")
_ANY_CLANG = re.compile(r"^(?:error:\s*)?\S*?:(\d+):(?:\d+:)?\s*(?:(?:fatal )?error:)?\s*(.*)$")


def build_error(log: str, name: str, device, locs: dict, kernel_loc=None, source_loc=None) -> CompileError:
    """The first error of a build log, at the user's Python line. Drivers that honour `#line`
    name the Python file (PoCL: `error: f.py:12:3: msg`, clang: `f.py:12:3: error: msg`, EDG:
    `"f.py", line 12: error: msg`); for one that names its own buffer, `source_loc(line)`
    maps a generated-source line back through the nearest `#line` above it."""
    dev = device.name.strip()
    files = sorted({f for f, _ in locs}, key=len, reverse=True)

    def found(loc, msg):
        err = CompileError(f"the OpenCL compiler of {dev} rejected kernel {name}: {msg.strip()}", loc)
        err.build_log = log
        return err

    errors = [t for t in log.splitlines() if "error" in t and "BUILD_PROGRAM_FAILURE" not in t]
    for text in errors:
        for fn in files:
            for style in _PY_STYLES:
                m = re.search(re.escape(fn) + style + r"\s*(?:(?:fatal )?error:?\s*)?(.*)", text)
                if m:
                    line = int(m.group(1))
                    return found(locs.get((fn, line)) or SourceLoc(fn, line, 0), m.group(2))
    if source_loc is not None:
        for text in errors:
            m = _ANY_CLANG.match(text.strip())
            if m and source_loc(int(m.group(1))) is not None:
                return found(source_loc(int(m.group(1))), m.group(2))
    tail = "\n".join(log.strip().splitlines()[-15:])
    err = CompileError(f"the OpenCL compiler of {dev} rejected kernel {name}; build log:\n{tail}", kernel_loc)
    err.build_log = log
    return err
