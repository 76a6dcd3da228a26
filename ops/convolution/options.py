"""The public option types of `rudnn.convolution` (SPEC §6): the geometry options and the strategies."""
from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class ConvOptions:
    """Stride, padding and dilation per spatial axis (tuples of length N = 1, 2 or 3; a
    plain int applies to every axis) and the number of channel groups."""

    stride: int | tuple = 1
    padding: int | tuple = 0
    dilation: int | tuple = 1
    groups: int = 1


class ConvStrategy(enum.Enum):
    """Which implementation runs; all give the same results up to rounding."""

    Direct = "Direct"              # tiled direct convolution: every configuration, every runtime
    ImplicitGemm = "ImplicitGemm"  # GEMM over the implicit im2col matrix (F16/BF16 on the matrix primitive)
    Autotune = "Autotune"          # time the valid candidates once per shape bucket, remember the fastest


__all__ = ["ConvOptions", "ConvStrategy"]
