"""The CPU device record: every DSL feature, emulated plane ops of a chosen size."""
from __future__ import annotations

import os

from kerneldsl.capabilities import I32_MAX, I64_MAX, Capabilities, default_atomics

from . import compiler, streaming

DEFAULT_PLANE_DIM = 32  # like CUDA, so kernels tuned for warps of 32 behave the same
PLANE_DIMS = (1, 2, 4, 8, 16, 32)


def simd_bytes(features) -> int:
    """The widest SIMD register the host's LLVM features name (64 AVX-512, 32 AVX, else 16)."""
    if features.get("avx512f"):
        return 64
    if features.get("avx"):
        return 32
    return 16


def capabilities(plane_dim: int = DEFAULT_PLANE_DIM) -> Capabilities:
    if plane_dim not in PLANE_DIMS:
        raise ValueError(f"plane_dim for the cpu runtime must be one of {PLANE_DIMS}, got {plane_dim}")
    import llvmlite.binding as llvm
    return Capabilities(
        backend="cpu",
        device_name=f"cpu ({llvm.get_host_cpu_name()}, {os.cpu_count()} threads)",
        arch=compiler.arch(),
        plane_dim=plane_dim,
        max_cube_units=4096,
        max_shared_bytes=1 << 20,
        native_plane_ops=False,
        atomics=default_atomics(float_add=True, i64_add=True),  # LLVM atomicrmw on i64
        mma_native=False,
        compute_units=os.cpu_count() or 1,  # the worker pool's default size (runtime.py)
        shared_memory_emulated=True,
        vector_bytes=simd_bytes(llvm.get_host_cpu_features()),
        units_are_simd_lanes=True,
        streaming_stores=streaming.applies(llvm.get_process_triple()),
        # the renderer counts cubes in an i64 and truncates each cube id to i32
        max_grid=(I32_MAX, I32_MAX, I32_MAX),
        max_grid_cubes=I64_MAX,
        max_cube_dims=(4096, 4096, 4096),
    )
