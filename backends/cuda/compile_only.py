"""Compile kernels for CUDA with no GPU: a runtime-like object for an explicit arch.

`CompileOnlyRuntime("sm_90")` renders and NVRTC-compiles every kernel handed to it
(through the load pipeline and its caches) and launches nothing;
`compile_launch(kernel, block, args, arch)` does that for one launch's specialisation,
given arguments on any runtime. CI uses these to
compile the whole conformance suite for sm_80 and sm_90 on machines without a GPU
(see `codegen_check.py`), so a CUDA syntax or type error fails there too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kerneldsl.runtime import Runtime

from .capabilities import for_arch, sm_of
from .pipeline import CudaPipeline


@dataclass
class CompiledKernel:
    """A compiled kernel: its image, and the rendered kernel where it was just rendered
    (None for one from the cache)."""
    kind: str  # 'cubin' or 'ptx'
    image: bytes
    rendered: object = None


class CompileOnlyRuntime(CudaPipeline, Runtime):
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

    def wrap_binary(self, info, entry, rendering=None) -> CompiledKernel:
        return CompiledKernel(entry.meta["image"], entry.image)

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
    spec = kernel.specialize(runtime_for(arch), *args, block=block)
    rendering = next(iter(spec.runtime.renderings(*spec.ir())))
    binary = spec.compile()
    return CompiledKernel(binary.kind, binary.image, rendering.rendered)
