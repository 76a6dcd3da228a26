"""How a launch's arguments reach a CPU kernel: one packed buffer of 8-byte slots.

Layout (all little-endian int64 slots):
  [0] grid x  [1] grid y  [2] grid z  [3] address of the launch's control record (CONTROL_SLOTS
  int64s: [0..3] the bounds error, see Runtime._raise_bounds; [CANCEL_SLOT] nonzero asks the
  kernel to stop before its next cube)
  then, per runtime parameter in order:
    tensor: data address, extent (elements reachable from the base), shape[ndim], strides[ndim]
    scalar: the value in the low bytes of one slot
The kernel symbol is `kd_main(i8* args, i64 first_cube, i64 end_cube)`.
"""
from __future__ import annotations

from kerneldsl import ir

HEADER_SLOTS = 4
CONTROL_SLOTS = 5
CANCEL_SLOT = 4
ENTRY = "kd_main"


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
