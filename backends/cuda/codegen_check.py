"""pytest plugin: compile every kernel the tests launch for CUDA, with NVRTC alone (no GPU).

    python -m pytest -p kerneldsl.backends.cuda.codegen_check tests/test_dsl_*.py

Every launch, on whatever runtime the test uses, is also specialised as it would be
on a CUDA device of each arch in $KERNELDSL_CUDA_ARCHS (default "sm_80,sm_90") and
compiled to a cubin. A renderer or NVRTC error fails the test that launched the
kernel (`CudaCodegenError`, which no `pytest.raises(CompileError)` swallows), so a
CUDA syntax or type error fails CI on machines without a GPU. Launches the CUDA
front end rejects for capability reasons (more units or shared memory per cube than
CUDA allows) are counted, not compiled. $KERNELDSL_CUDA_CODEGEN_REPORT names a JSON
file that receives the counts at the end of the session.
"""
from __future__ import annotations

import json
import os
import traceback

ARCHS_ENV = "KERNELDSL_CUDA_ARCHS"
REPORT_ENV = "KERNELDSL_CUDA_CODEGEN_REPORT"


class CudaCodegenError(AssertionError):
    """The CUDA renderer or NVRTC failed on a kernel the test suite launches."""


class _State:
    def __init__(self, archs):
        self.archs = archs
        self.done: set = set()
        self.compiled = {a: 0 for a in archs}
        self.rejected: list = []  # front-end rejections (capabilities, bad arguments the test expects)
        self.failures: list = []
        self.original = None


_STATE: _State | None = None


def _archs() -> list:
    text = os.environ.get(ARCHS_ENV, "sm_80,sm_90")
    return [a.strip() for a in text.split(",") if a.strip()]


def _compile(kernel, block, args):
    from kerneldsl.errors import CompileError
    from kerneldsl.kernel import _dims, bounds_check_enabled

    from .compile_only import runtime_for
    st = _STATE
    try:
        block = _dims(block, "block")
    except (TypeError, ValueError) as e:
        st.rejected.append(f"{kernel.__name__}: {e}")
        return
    for arch in st.archs:
        rt = runtime_for(arch)
        units = block[0] * block[1] * block[2]
        try:
            if not 1 <= units <= rt.capabilities.max_cube_units or block[2] > 64:
                raise ValueError(f"block {block} is not a CUDA cube size")
            spec_args, key = kernel._check_args(args, rt)
            memo = (id(kernel), key, block, bounds_check_enabled(), arch)
            if memo in st.done:
                continue
            kir, uni = kernel.specialize(rt, spec_args, block, bounds_check_enabled())
        except (CompileError, TypeError, ValueError) as e:
            # the launch itself will raise, or CUDA cannot run this shape
            st.rejected.append(f"{kernel.__name__} for {arch}: {str(e).splitlines()[0]}")
            continue
        st.done.add(memo)
        try:
            rt.load(kir, uni)
        except Exception as e:  # noqa: BLE001  (renderer bugs and NVRTC errors alike)
            text = f"{kernel.__name__} for {arch} (block {block}): {type(e).__name__}: {e}"
            st.failures.append(text)
            raise CudaCodegenError(f"CUDA code generation failed: {text}\n{traceback.format_exc()}") from None
        st.compiled[arch] += 1


def pytest_configure(config):
    global _STATE
    from kerneldsl.kernel import Kernel

    from . import compiler
    if not compiler.available():
        raise RuntimeError("kerneldsl.backends.cuda.codegen_check needs NVRTC: pip install cuda-bindings "
                           "nvidia-cuda-nvrtc (the test extra)")
    _STATE = _State(_archs())
    _STATE.original = original = Kernel.launch

    def launch(self, grid, block, *args, runtime=None):
        _compile(self, block, args)
        return original(self, grid, block, *args, runtime=runtime)

    Kernel.launch = launch


def pytest_unconfigure(config):
    if _STATE is not None and _STATE.original is not None:
        from kerneldsl.kernel import Kernel
        Kernel.launch = _STATE.original


def pytest_terminal_summary(terminalreporter):
    st = _STATE
    if st is None:
        return
    counts = ", ".join(f"{n} for {a}" for a, n in st.compiled.items())
    terminalreporter.section("CUDA code generation (NVRTC, no GPU)")
    terminalreporter.write_line(f"specialisations compiled: {counts}; front-end rejections: {len(st.rejected)}; "
                                f"failures: {len(st.failures)}")
    for f in st.failures:
        terminalreporter.write_line(f"  FAILED {f.splitlines()[0]}")
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "w") as fh:
            json.dump({"compiled": st.compiled, "rejected": st.rejected, "failures": st.failures}, fh)
