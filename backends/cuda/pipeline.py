"""The CUDA hooks of the kernel load pipeline (`Runtime.load`): render CUDA C++, compile it
with NVRTC for the runtime's compute capability, and the toolchain facts of the cache key.
Shared by the device runtime (`runtime.py`, which adds `wrap_binary`: load into a context)
and the compile-only one (`compile_only.py`)."""
from __future__ import annotations

from kerneldsl.pipeline import Rendering, launch_args_to_json

from . import compiler


class CudaPipeline:
    """Mixin for a `Runtime` whose capabilities are a CUDA device's (it has `sm`)."""

    source_ext = "cu"

    def toolchain(self) -> str:
        return f"nvrtc-{'.'.join(map(str, compiler.version()))}|{' '.join(compiler.OPTIONS)}"

    def renderings(self, kir, uniformity):
        from . import renderer  # only when something is compiled: a warm process never renders
        out = renderer.render(kir, self.capabilities)
        yield Rendering(out.source, {"symbol": out.name, "args": launch_args_to_json(out.args),
                                     "dynamic_shared": out.dynamic_shared, "tensor_maps": out.tensor_maps}, out)

    def compile_rendering(self, rendering, info) -> bytes:
        kind, image = compiler.compile_source(rendering.source, info.name, self.sm, rendering.rendered.filename)
        rendering.meta["image"] = kind
        return image
