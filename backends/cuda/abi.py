"""How a launch's arguments reach a CUDA kernel: one struct of 8-byte slots, by value.

The kernel's only parameter is `const kd_args_t args` (`unsigned long long s[N]`):
  s[0]  address of the bounds-error record (4 x i64; 0 when bounds checks are off)
  then, per runtime parameter in order:
    tensor: data address (view offset applied), extent (elements reachable), shape[ndim], strides[ndim]
    scalar: the value's bits in the low bytes of one slot
One parameter keeps the launch cheap from Python (one pointer for cuLaunchKernel)
and the layout shared with the cpu back end's slot buffer.
"""
from __future__ import annotations

from kerneldsl import ir

HEADER_SLOTS = 1
ENTRY_PREFIX = "kd_"


def param_slots(params) -> dict:
    """param name -> first slot index."""
    slot = HEADER_SLOTS
    out = {}
    for p in params:
        out[p.name] = slot
        slot += 2 + 2 * p.ndim if isinstance(p, ir.TensorParam) else 1
    return out


def total_slots(params) -> int:
    n = HEADER_SLOTS
    for p in params:
        n += 2 + 2 * p.ndim if isinstance(p, ir.TensorParam) else 1
    return n
