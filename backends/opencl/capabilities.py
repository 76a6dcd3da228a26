"""The OpenCL device record, probed from the driver: dtypes (f64 only with cl_khr_fp64),
work-group and local-memory limits, and how plane operations run (sub-groups or local memory)."""
from __future__ import annotations

import os

from kerneldsl import dtypes as dt
from kerneldsl.capabilities import I32_MAX, Capabilities, default_atomics

EMULATED_PLANE_DIM = 32  # like CUDA's warps, so kernels tuned for 32 lanes behave the same


INT64_ATOMICS = "cl_khr_int64_base_atomics"


def extensions(device) -> set:
    return set(device.extensions.split())


def has_fp64(device) -> bool:
    return "cl_khr_fp64" in extensions(device) or bool(getattr(device, "double_fp_config", 0))


def subgroups_wanted(device) -> bool:
    """Sub-group instructions for plane operations: where the device has cl_khr_subgroups and
    KERNELDSL_OPENCL_SUBGROUPS is not 0 (set it to 0 to force the local-memory path)."""
    if os.environ.get("KERNELDSL_OPENCL_SUBGROUPS", "1") in ("0", "false", "no"):
        return False
    exts = extensions(device)
    # OpenCL 3.0 drivers may offer sub-groups as a feature of the language (Intel's CPU runtime
    # lists cl_intel_subgroups and the shuffle/ballot extensions but not cl_khr_subgroups)
    return "cl_khr_subgroups" in exts or "cl_intel_subgroups" in exts


def sized_subgroups(device) -> bool:
    """Whether a kernel can ask for sub-groups of 32 (cl_intel_required_subgroup_size)."""
    return "cl_intel_required_subgroup_size" in extensions(device)


def device_label(platform, device) -> str:
    return f"{device.name.strip()} ({platform.name.strip()})"


def arch(platform, device) -> str:
    """Part of the kernel cache key: device, driver and toolchain versions."""
    import pyopencl as cl
    return (f"{platform.name}|{platform.version}|{device.name}|{device.version}|{device.driver_version}"
            f"|pyopencl-{cl.VERSION_TEXT}")


def local_memory_emulated(device) -> bool:
    """Whether the device's local memory is global memory behind its caches (CPU devices)."""
    import pyopencl as cl
    return int(device.local_mem_type) != int(cl.device_local_mem_type.LOCAL)


def vector_bytes(device) -> int:
    """The preferred vector access: the device's preferred float vector width, at least 128 bits."""
    return min(64, max(16, 4 * int(device.preferred_vector_width_float)))


def capabilities(platform, device, native_planes: bool = False, plane_dim: int = EMULATED_PLANE_DIM) -> Capabilities:
    types = tuple(d for d in dt.ALL_DTYPES if d is not dt.f64 or has_fp64(device))
    return Capabilities(
        backend="opencl",
        device_name=device_label(platform, device),
        arch=arch(platform, device) + f"|planes-{'native' if native_planes else 'local'}-{plane_dim}",
        plane_dim=plane_dim,
        max_cube_units=int(device.max_work_group_size),
        max_shared_bytes=int(device.local_mem_size),
        dtypes=types,
        native_plane_ops=native_planes,
        # f32 add as a compare-exchange loop; i64 add where cl_khr_int64_base_atomics is listed
        atomics=default_atomics(float_add=True, i64_add=INT64_ATOMICS in extensions(device)),
        mma_native=False,
        compute_units=int(device.max_compute_units),
        shared_memory_emulated=local_memory_emulated(device),
        vector_bytes=vector_bytes(device),
        units_are_simd_lanes=False,  # however the driver maps work-items, kernels see hardware-like units
        # kernels read get_group_id as an int; the global size (cubes x units) is a size_t
        max_grid=(I32_MAX, I32_MAX, I32_MAX),
        max_grid_cubes=(1 << min(int(device.address_bits), 63)) - 1,
        max_cube_dims=tuple(int(n) for n in device.max_work_item_sizes[:3]),
    )
