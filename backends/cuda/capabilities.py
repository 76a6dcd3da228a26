"""The CUDA device record: from a live device's attributes, or for an arch named
explicitly (sm_80, sm_90, ...) so kernels compile on a machine with no GPU."""
from __future__ import annotations

from kerneldsl.capabilities import I32_MAX, Capabilities, default_atomics
from kerneldsl.dtypes import bf16, f16

WGMMA_SM = 90  # wgmma exists on sm_90a only (not on later archs), so elsewhere kd.group_mma runs on mma.sync
BULK_COPY_SM = 90  # the tensor memory accelerator (cp.async.bulk.tensor) and mbarrier transaction counts
MIN_SM = 80  # mma.sync m16n8k16 with bf16 and cvt.rn.bf16.f32 need Ampere or newer
WARP = 32
STATIC_SHARED_LIMIT = 48 * 1024  # above this a kernel's shared memory must be dynamic (opt-in)

# Opt-in shared memory per block by compute capability (CUDA programming guide,
# "Technical Specifications"), used when no device can be asked.
_OPTIN_SHARED = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024,
                 100: 227 * 1024, 103: 227 * 1024, 120: 99 * 1024}


def parse_arch(arch) -> int:
    """'sm_90' / 'sm90' / '90' / 90 / (9, 0) -> 90."""
    if isinstance(arch, tuple):
        return arch[0] * 10 + arch[1]
    if isinstance(arch, int):
        return arch
    text = str(arch).lower().removeprefix("sm_").removeprefix("sm").removeprefix("compute_")
    if not text.isdigit():
        raise ValueError(f"CUDA arch must look like 'sm_90' or 90, got {arch!r}")
    return int(text)


def sm_of(caps: Capabilities) -> int:
    """The compute capability (e.g. 90) a CUDA record was made for."""
    return parse_arch(caps.arch)


def for_arch(arch, device_name: str | None = None, max_shared_bytes: int | None = None,
             max_cube_units: int = 1024, multiprocessors: int = 0) -> Capabilities:
    """A record for compute capability `arch` (no device needed; `multiprocessors` 0 = unknown)."""
    sm = parse_arch(arch)
    if sm < MIN_SM:
        raise ValueError(f"the cuda back end needs compute capability {MIN_SM // 10}.{MIN_SM % 10} or newer "
                         f"(tensor-core bf16 and bf16 conversions), got sm_{sm}")
    if max_shared_bytes is None:
        max_shared_bytes = _OPTIN_SHARED.get(sm, 99 * 1024)
    return Capabilities(
        backend="cuda",
        device_name=device_name or f"sm_{sm} (compile only)",
        arch=f"sm_{sm}",
        plane_dim=WARP,
        max_cube_units=max_cube_units,
        max_shared_bytes=max_shared_bytes,
        native_plane_ops=True,
        atomics=default_atomics(float_add=True, i64_add=True),  # i64 add through the u64 atomicAdd
        mma_dtypes=(f16, bf16),
        mma_shapes=((16, 16, 16),),
        mma_native=True,
        group_mma_native=sm == WGMMA_SM,
        async_copy=True,  # cp.async: sm_80 and newer, which MIN_SM already requires
        bulk_copy=sm >= BULK_COPY_SM,
        register_budgets=sm == WGMMA_SM,  # setmaxnreg is an sm_90a instruction, like wgmma
        compute_units=multiprocessors,
        shared_memory_emulated=False,
        vector_bytes=16,  # 128-bit loads and stores
        units_are_simd_lanes=False,
        max_grid=(I32_MAX, 65535, 65535),  # gridDim limits of every arch from sm_30 on
        max_cube_dims=(1024, 1024, 64),
    )


def from_device(attrs: dict, name: str) -> Capabilities:
    """A record from device attributes read by the runtime: keys 'major', 'minor',
    'max_threads_per_block', 'max_shared_optin', 'warp_size', 'multiprocessors'."""
    sm = attrs["major"] * 10 + attrs["minor"]
    if sm < MIN_SM:
        raise ValueError(f"{name} has compute capability {attrs['major']}.{attrs['minor']}; the cuda back end "
                         f"needs {MIN_SM // 10}.{MIN_SM % 10} or newer")
    if attrs.get("warp_size", WARP) != WARP:
        raise ValueError(f"{name} reports a warp size of {attrs['warp_size']}; the cuda back end needs {WARP}")
    return for_arch(sm, device_name=name, max_shared_bytes=attrs["max_shared_optin"],
                    max_cube_units=attrs["max_threads_per_block"], multiprocessors=attrs["multiprocessors"])
