"""What a device can do: the record kernel checks and tests are derived from.

Every back end fills one `Capabilities` per device. The front end rejects a
feature a device lacks with an error naming the feature and the device; the
conformance tests read the same record to decide what each runtime must pass.
Operators (`rudnn`) read it too, and only it, for what they need to know of a
device: they never test a back end's name (tests/test_architecture_ops.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import dtypes as dt
from .ir import ATOMIC_OPS, PLANE_OPS

INT_ATOMIC_TYPES = (dt.i32, dt.u32)
I32_MAX = (1 << 31) - 1
I64_MAX = (1 << 63) - 1


def default_atomics(float_add: bool = True, i64_add: bool = False) -> dict:
    """op -> dtypes: every op on i32/u32; `add` also on f32 (`float_add`) and on i64
    (`i64_add`: a native 64-bit integer add, e.g. for exact fixed-point sums)."""
    table = {op: INT_ATOMIC_TYPES for op in ATOMIC_OPS}
    table["add"] = INT_ATOMIC_TYPES + ((dt.f32,) if float_add else ()) + ((dt.i64,) if i64_add else ())
    return table


@dataclass(frozen=True)
class Capabilities:
    backend: str  # 'cpu' | 'opencl' | 'cuda'
    device_name: str
    arch: str  # part of the kernel cache key (CPU name + features, GPU compute capability, ...)
    plane_dim: int
    max_cube_units: int = 1024
    max_shared_bytes: int = 48 * 1024
    dtypes: tuple = dt.ALL_DTYPES
    plane_ops: tuple = PLANE_OPS
    native_plane_ops: bool = False  # hardware warp/sub-group instructions, vs emulated
    atomics: dict = field(default_factory=default_atomics)
    mma_dtypes: tuple = (dt.f16, dt.bf16)
    mma_shapes: tuple = ((16, 16, 16),)
    mma_native: bool = False  # tensor cores (vs an exact emulation)
    group_mma_native: bool = False  # kd.group_mma reads shared memory itself (wgmma), vs plane by plane
    interpreted: bool = False  # kernels run as Python (the interpreter): breakpoint() reaches the IR and
    #                            every access is checked per axis, always
    async_copy: bool = False  # hardware global->shared copies (cp.async) for kd.async_copy, vs a plain copy
    bulk_copy: bool = False  # bulk tensor copies and arrival barriers in hardware (TMA and mbarrier) for
    #                          kd.bulk_copy / kd.barrier_*, vs copies by the issuing unit and an emulation
    register_budgets: bool = False  # kd.role(..., registers=R) moves registers between a cube's roles
    #                                 (setmaxnreg, sm_90a), vs ignored
    # What operators tune for (never the back end's name):
    compute_units: int = 0  # cubes that run at once at full speed: CPU threads, CUDA multiprocessors,
    #                         OpenCL compute units; 0 where unknown (a compile-only record)
    shared_memory_emulated: bool = False  # kd.shared arrays are ordinary memory behind the same caches as
    #                                       global data (no faster to read), vs an on-chip scratchpad
    vector_bytes: int = 16  # preferred width of one vector access: 16 (128-bit loads) on GPUs; the SIMD
    #                         register width on a CPU
    streaming_stores: bool = False  # kd.streaming_stores() makes a kernel's wide stores bypass the caches
    #                                 (non-temporal stores: the cpu back end on x86), vs ignored
    units_are_simd_lanes: bool = False  # a cube's units run as the lanes of one vectorised loop on a core
    #   (the cpu back end), not as hardware threads: a unit's own accesses are best scalar and unit-strided
    #   (the loop makes them vectors), every split point (barrier, plane op) costs a pass over the units,
    #   kd.exp is a vector library call (a short polynomial vectorises better) and re-reading a row just
    #   written costs a cache hit

    # launch limits (kerneldsl/launch_checks.py): cubes per grid axis (cube ids are 32-bit
    # signed in every renderer), cubes in one launch, units per cube axis
    max_grid: tuple = (I32_MAX, 65535, 65535)
    max_grid_cubes: int = I64_MAX
    max_cube_dims: tuple = (1024, 1024, 64)

    @property
    def matrix_kinds(self) -> tuple:
        """The matrix primitives that run on hardware: 'mma' (kd.mma on plane fragments, tensor
        cores) and 'group_mma' (kd.group_mma reading shared memory itself, wgmma); () where both
        are exact emulations (they still run, for correctness, not speed)."""
        return (("mma",) if self.mma_native else ()) + (("group_mma",) if self.group_mma_native else ())

    def supports_dtype(self, d) -> bool:
        return dt.as_dtype(d) in self.dtypes
