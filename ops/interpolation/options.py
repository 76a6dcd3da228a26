"""The public option types of `rudnn.interpolation` (SPEC §8): the mode enum and the options."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class InterpolateMode(enum.Enum):
    """How an output sample is formed from the input along each spatial axis."""

    Nearest = "Nearest"            # src = floor(i·I/O), exact integer arithmetic
    NearestExact = "NearestExact"  # src = min(floor((i + 0.5)·I/O), I − 1)
    Linear = "Linear"              # linear / bilinear / trilinear, as torch
    Bicubic = "Bicubic"            # Keys a = −0.75, edge-replicated taps, per axis
    Lanczos3 = "Lanczos3"          # 6 taps sinc(d)·sinc(d/3), normalised, per axis


@dataclass(frozen=True)
class InterpolateOptions:
    """The mode and, for Linear, Bicubic and Lanczos3, whether the corner samples of input
    and output are aligned (torch's `align_corners`)."""

    mode: InterpolateMode
    align_corners: bool = False
