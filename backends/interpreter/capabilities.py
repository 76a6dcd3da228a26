"""The interpreter's device record: every DSL feature, all of it emulated in Python."""
from __future__ import annotations

from kerneldsl.capabilities import I32_MAX, I64_MAX, Capabilities, default_atomics

DEFAULT_PLANE_DIM = 32  # as the cpu runtime and CUDA, so kernels behave as they do there
PLANE_DIMS = (1, 2, 4, 8, 16, 32, 64)  # 64: an OpenCL device's sub-groups may be that wide


def capabilities(plane_dim: int = DEFAULT_PLANE_DIM) -> Capabilities:
    """The interpreter at plane size `plane_dim`: nothing native (plane operations, matrix
    products, shared memory are emulated), `interpreted` so breakpoint() and checks apply."""
    if isinstance(plane_dim, bool) or plane_dim not in PLANE_DIMS:
        raise ValueError(f"plane_dim for the interpreter runtime must be one of {PLANE_DIMS}, got {plane_dim!r}")
    return Capabilities(
        backend="interpreter",
        device_name="interpreter (Python over numpy, one unit at a time)",
        arch="python",
        plane_dim=plane_dim,
        max_cube_units=1024,
        max_shared_bytes=1 << 20,
        native_plane_ops=False,
        atomics=default_atomics(float_add=True, i64_add=True),
        mma_native=False,
        interpreted=True,
        compute_units=1,
        shared_memory_emulated=True,
        vector_bytes=16,
        max_grid=(I32_MAX, I32_MAX, I32_MAX),
        max_grid_cubes=I64_MAX,
        max_cube_dims=(1024, 1024, 64),
    )
