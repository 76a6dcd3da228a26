"""CUDA C++ text -> a cubin for one compute capability, through NVRTC (text in, bytes out).

NVRTC runs without a GPU, so this module also serves the compile-only checks. A
cubin is preferred: PTX from an NVRTC newer than the driver may not load. PTX
(for the newest virtual arch NVRTC knows) is the fallback only for a device newer
than NVRTC. Caching is the load pipeline's (kerneldsl/runtime.py), whose key names
the NVRTC version and options (`pipeline.py`). An NVRTC error is raised as a CompileError at the user's Python line,
which the renderer's `#line` directives make NVRTC report.
"""
from __future__ import annotations

import functools
import re

from kerneldsl.errors import CompileError, SourceLoc

from .capabilities import WGMMA_SM

OPTIONS = (
    "-std=c++17",
    "-default-device",
    "--fmad=false",  # per-operation IEEE rounding, as on the cpu runtime; kernels ask for kd.fma explicitly
    "-lineinfo",
)


class NvrtcUnavailable(RuntimeError):
    """NVRTC (the nvidia-cuda-nvrtc wheel or a CUDA toolkit) cannot be loaded."""


@functools.lru_cache(maxsize=None)
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise NvrtcUnavailable(f"the cuda back end needs cuda-python (pip install 'rudnn[cuda]'): {e}") from None
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # noqa: BLE001  (the library itself is missing)
        raise NvrtcUnavailable(f"NVRTC could not be loaded (pip install nvidia-cuda-nvrtc): {e}") from None
    _check(nvrtc, err, "nvrtcVersion")
    return nvrtc


def _check(nvrtc, err, what):
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise RuntimeError(f"{what} failed: {msg.decode() if isinstance(msg, bytes) else msg}")


def available() -> bool:
    try:
        _nvrtc()
        return True
    except NvrtcUnavailable:
        return False


@functools.lru_cache(maxsize=None)
def version() -> tuple:
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    return major, minor


@functools.lru_cache(maxsize=None)
def supported_archs() -> tuple:
    """Compute capabilities this NVRTC can emit cubins for, e.g. (75, 80, 86, 89, 90, ...)."""
    nvrtc = _nvrtc()
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    _check(nvrtc, err, "nvrtcGetSupportedArchs")
    return tuple(int(a) for a in archs)


def target_for(sm: int) -> tuple:
    """('cubin', sm) when NVRTC knows the arch, else ('ptx', newest virtual arch below it)."""
    archs = supported_archs()
    if sm in archs:
        return "cubin", sm
    older = [a for a in archs if a <= sm]
    if not older:
        raise CompileError(f"NVRTC {'.'.join(map(str, version()))} cannot compile for sm_{sm} "
                           f"(it supports {', '.join(f'sm_{a}' for a in archs)})")
    return "ptx", max(older)


_LOG_LINE = re.compile(r'^(?P<file>.*?)\((?P<line>\d+)\): (?P<kind>error|warning|catastrophic error)\s*:?\s*(?P<msg>.*)$')


def _error_from_log(log: str, kernel_name: str) -> CompileError:
    """The first error of an NVRTC log, placed at the user's file and line."""
    for text in log.splitlines():
        m = _LOG_LINE.match(text.strip())
        if m and m.group("kind") != "warning":
            loc = SourceLoc(m.group("file"), int(m.group("line")), 0)
            return CompileError(f"NVRTC rejected the CUDA C++ generated for {kernel_name}: {m.group('msg')}\n"
                                f"(full log below; set KERNELDSL_DUMP=dir to read the generated source)\n{log}",
                                loc)
    return CompileError(f"NVRTC rejected the CUDA C++ generated for {kernel_name}:\n{log}")


def compile_source(source: str, kernel_name: str, sm: int, filename: str = "kernel.cu",
                   ptx: bool = False) -> tuple:
    """Compile `source` for compute capability `sm`; returns (kind, image) with kind
    'cubin' or 'ptx' (`ptx=True` asks for PTX text, for reading). Raises CompileError with
    the user's location on NVRTC errors."""
    kind, arch = ("ptx", sm) if ptx else target_for(sm)
    # sm_90's cubins target sm_90a, whose arch-specific instructions (wgmma) kd.group_mma uses
    suffix = "a" if arch == WGMMA_SM else ""
    flag = f"--gpu-architecture={'sm' if kind == 'cubin' else 'compute'}_{arch}{suffix}"
    options = OPTIONS + (flag,)
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise _error_from_log(_log(nvrtc, prog), kernel_name)
        if kind == "cubin":
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            _check(nvrtc, err, "nvrtcGetCUBINSize")
            image = b" " * size
            (err,) = nvrtc.nvrtcGetCUBIN(prog, image)
            _check(nvrtc, err, "nvrtcGetCUBIN")
        else:
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            _check(nvrtc, err, "nvrtcGetPTXSize")
            image = b" " * size
            (err,) = nvrtc.nvrtcGetPTX(prog, image)
            _check(nvrtc, err, "nvrtcGetPTX")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return kind, image


def _log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0 ").decode(errors="replace")
