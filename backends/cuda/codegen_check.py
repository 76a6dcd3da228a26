"""pytest plugin: compile every kernel the tests launch for CUDA, with NVRTC alone (no GPU).

    python -m pytest -p kerneldsl.backends.cuda.codegen_check tests/test_dsl_*.py

Every specialisation the tests launch, on whatever runtime, is also specialised as it
would be on a CUDA device of each arch in $KERNELDSL_CUDA_ARCHS (default "sm_80,sm_90")
(`Kernel.specialize`, seen through `kerneldsl.kernel.watch_specializations`) and
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


_STATE: _State | None = None


def _archs() -> list:
    text = os.environ.get(ARCHS_ENV, "sm_80,sm_90")
    return [a.strip() for a in text.split(",") if a.strip()]


def _compile(kernel, block, args):
    """Specialise and compile one launch's kernel for every arch (once per specialisation)."""
    from kerneldsl.errors import CompileError

    from .compile_only import runtime_for
    st = _STATE
    for arch in st.archs:
        rt = runtime_for(arch)
        try:
            if block[2] > 64:
                raise ValueError(f"block {block} is not a CUDA cube size")
            spec = kernel.specialize(rt, *args, block=block)
            memo = (id(kernel),) + spec.memory_key
            if memo in st.done:
                continue
            spec.ir()
        except (CompileError, TypeError, ValueError) as e:
            # the launch itself will raise, or CUDA cannot run this shape
            st.rejected.append(f"{kernel.__name__} for {arch}: {str(e).splitlines()[0]}")
            continue
        st.done.add(memo)
        try:
            spec.compile()
        except Exception as e:  # noqa: BLE001  (renderer bugs and NVRTC errors alike)
            text = f"{kernel.__name__} for {arch} (block {block}): {type(e).__name__}: {e}"
            st.failures.append(text)
            raise CudaCodegenError(f"CUDA code generation failed: {text}\n{traceback.format_exc()}") from None
        st.compiled[arch] += 1


def pytest_configure(config):
    global _STATE
    from kerneldsl.kernel import watch_specializations

    from . import compiler
    if not compiler.available():
        raise RuntimeError("kerneldsl.backends.cuda.codegen_check needs NVRTC: pip install cuda-bindings "
                           "nvidia-cuda-nvrtc (the test extra)")
    _STATE = _State(_archs())
    watch_specializations(_compile)


def pytest_unconfigure(config):
    if _STATE is not None:
        from kerneldsl.kernel import unwatch_specializations
        unwatch_specializations(_compile)


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
