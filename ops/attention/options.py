"""The public option types of `rudnn.attention` (SPEC §5): options and strategies."""
from __future__ import annotations

import enum
from dataclasses import dataclass

@dataclass(frozen=True)
class AttentionModuleOptions:
    """How scores are formed: `scale` (default 1/sqrt(D)), an optional tanh `softcap`
    (> 0), and bottom-right aligned causal masking."""

    scale: float | None = None
    softcap: float | None = None
    is_causal: bool = False


@dataclass(frozen=True)
class BlackboxAcceleratedStrategy:
    """Tiling of `FlashBlackboxAccelerated`: a cube runs `num_planes` planes; each plane owns
    `seq_q` tiles of 16 query rows, and each step consumes 16·num_planes·seq_kv keys (on
    tensor-core devices, whose kernels keep the scores in registers, 16·ceil(num_planes·
    seq_kv / seq_q) keys: a plane's score tiles stay num_planes·seq_kv however many query
    tiles it owns). Where group products are native (wgmma), seq_q = 1 with num_planes a
    multiple of 4 runs the group kernel (64 query rows per 4 planes), except where the device
    also has bulk copies and the inputs suit them: there (12, 1, 1) and (8, 1, k) run the
    roles kernel (a producer group and two or one consumer groups of 64 query rows; keys a
    step count the consumers' planes only: 128, or 64·k). Defaults: (12, 1, 1) where the
    roles kernel serves the inputs (head dim 128: flash_mma.ROLES_DIMS); (4, 1, 1) elsewhere with group
    products; (4, 2, 2) on other tensor-core devices and shapes (head dims up to 128); else
    (4, 1, 1); smaller tilings where shared memory is short."""

    num_planes: int = 4
    seq_q: int = 1
    seq_kv: int = 1


class AttentionStrategy(enum.Enum):
    """Which implementation runs (every one gives the same results up to rounding)."""

    FlashBlackboxAccelerated = "FlashBlackboxAccelerated"  # fused, matrix primitive (tensor cores), F16/BF16
    FlashUnit = "FlashUnit"                                # fused online softmax on plain arithmetic
    Fallback = "Fallback"                                  # matmul, softmax, matmul as separate kernels
    Autotune = "Autotune"                                  # time the valid ones once per shape bucket


__all__ = ["AttentionModuleOptions", "BlackboxAcceleratedStrategy", "AttentionStrategy"]
