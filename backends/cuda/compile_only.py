"""Compile kernels for CUDA with no GPU: a runtime-like object for an explicit arch.

`CompileOnlyRuntime("sm_90")` renders and NVRTC-compiles every kernel handed to it
(`load`) and launches nothing; `compile_launch(kernel, block, args, arch)` does that
for one launch's specialisation, given arguments on any runtime. CI uses these to
compile the whole conformance suite for sm_80 and sm_90 on machines without a GPU
(see `codegen_check.py`), so a CUDA syntax or type error fails there too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kerneldsl import cache
from kerneldsl.runtime import Runtime

from . import compiler, renderer
from .capabilities import for_arch, sm_of


@dataclass
class CompiledKernel:
    """What `load` produced: the rendered kernel and its binary."""
    rendered: object
    kind: str  # 'cubin' or 'ptx'
    image: bytes


class CompileOnlyRuntime(Runtime):
    """Capabilities of compute capability `arch`; memory on the host; launches are no-ops."""

    kind = "cuda"

    def __init__(self, arch="sm_90"):
        caps = for_arch(arch)
        super().__init__(f"cuda-compile-only:{caps.arch}", caps)

    @property
    def sm(self) -> int:
        return sm_of(self.capabilities)

    def _raw_alloc(self, nbytes):
        return np.empty(nbytes, np.uint8)

    def _raw_free(self, raw):
        pass

    def _upload(self, buffer, byte_offset, host):
        buffer.raw[byte_offset:byte_offset + host.nbytes] = host.reshape(-1).view(np.uint8)

    def _download(self, buffer, byte_offset, nbytes):
        return buffer.raw[byte_offset:byte_offset + nbytes].copy()

    def render(self, kir, uniformity) -> str:
        return renderer.render(kir, self.capabilities).source

    def load(self, kir, uniformity) -> CompiledKernel:
        out = renderer.render(kir, self.capabilities)
        cache.dump(kir.name, out.source, "cu")
        kind, image = compiler.compile_source(out.source, kir.name, self.sm, out.filename)
        return CompiledKernel(out, kind, image)

    def launch(self, binary, grid, block, args):
        pass


_RUNTIMES: dict = {}


def runtime_for(arch) -> CompileOnlyRuntime:
    """One compile-only runtime per arch (so kernels' in-memory binary caches stay small)."""
    rt = _RUNTIMES.get(str(arch))
    if rt is None:
        rt = _RUNTIMES[str(arch)] = CompileOnlyRuntime(arch)
    return rt


def compile_launch(kernel, block, args, arch="sm_90") -> CompiledKernel:
    """Specialise `kernel` as `kernel[grid, block](*args)` would on a CUDA device of `arch`
    and compile it; the arguments may live on any runtime (only dtypes, ranks and
    compile-time values matter). Raises the front end's or NVRTC's CompileError."""
    from kerneldsl.kernel import _dims, bounds_check_enabled
    rt = runtime_for(arch)
    block = _dims(block, "block")
    spec_args, _ = kernel._check_args(args, rt)
    kir, uni = kernel.specialize(rt, spec_args, block, bounds_check_enabled())
    return rt.load(kir, uni)
