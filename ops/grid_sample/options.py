"""The public option types of `rudnn.grid_sample` (SPEC §9): modes and the options."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class GridSampleMode(enum.Enum):
    """How a sample is read at a grid point."""

    Bilinear = "Bilinear"  # 2-D bilinear, 3-D trilinear
    Nearest = "Nearest"    # the nearest pixel, ties to even (torch's nearbyint)
    Bicubic = "Bicubic"    # 2-D only: Keys a = −0.75 over 4×4 pixels


class GridSamplePaddingMode(enum.Enum):
    """What grid points outside the input read."""

    Zeros = "Zeros"            # pixels outside are 0
    Border = "Border"          # coordinates clamped to the edge
    Reflection = "Reflection"  # coordinates reflected at the edges, then clamped


@dataclass(frozen=True)
class GridSampleOptions:
    """Mode, padding mode and whether −1/1 are the corner pixels' centres (torch's
    `align_corners`)."""

    mode: GridSampleMode = GridSampleMode.Bilinear
    padding_mode: GridSamplePaddingMode = GridSamplePaddingMode.Zeros
    align_corners: bool = False
