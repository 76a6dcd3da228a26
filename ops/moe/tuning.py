"""How rudnn.moe's experts run on a device (the family's tuning): the strategy that serves
a request, and the cube sizes of the scalar grouped GEMMs, from the device's capabilities."""
from __future__ import annotations

import kerneldsl as kd

from .options import GroupedStrategy
from .problem import CHECKS

MMA_DTYPES = (kd.f16, kd.bf16)


SHORT_K = 256  # reductions up to this long take 8 units a cube where units are SIMD lanes


def scalar_blocks(rt, hidden: int, intermediate: int) -> tuple:
    """Units per scalar-GEMM cube (spread along K) for the fused projection (K = hidden) and
    the plain one (K = intermediate). Where units are SIMD lanes (the CPU) a cube's units are
    one vector: 8 for K up to SHORT_K, where the cube's closing sum of its 16 accumulators
    over the units costs as much as its K loop, else 16 (measured, RESULTS.md session 32).
    GPUs want several planes."""
    if not rt.capabilities.units_are_simd_lanes:
        return 128, 128
    return tuple(8 if k <= SHORT_K else 16 for k in (hidden, intermediate))


def resolve_strategy(strategy: GroupedStrategy, dtype, rt) -> GroupedStrategy:
    """The strategy that will run: raises MoeError ("unavailable") for a TensorCore request the
    runtime or dtype cannot serve; Auto picks TensorCore only on matrix hardware."""
    caps = rt.capabilities
    supported = dtype in MMA_DTYPES and dtype in caps.mma_dtypes and (16, 16, 16) in caps.mma_shapes
    if strategy is GroupedStrategy.TensorCore:
        if dtype not in MMA_DTYPES:
            CHECKS.fail(f"strategy TensorCore is unavailable for {dtype.name.upper()} weights: it needs F16 or BF16")
        if not supported:
            CHECKS.fail(f"strategy TensorCore is unavailable on {rt.name}: its matrix fragments support "
                        f"{', '.join(d.name.upper() for d in caps.mma_dtypes) or 'no dtype'}, "
                        f"not {dtype.name.upper()}")
        return strategy
    if strategy is GroupedStrategy.Auto:
        return GroupedStrategy.TensorCore if supported and caps.mma_native else GroupedStrategy.Scalar
    return strategy
