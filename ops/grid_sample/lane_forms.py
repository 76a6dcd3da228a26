"""Which forward runs where units are SIMD lanes (the cpu runtime) and both forms serve a call:
lanes_last.py (the input copied to channels-last rows, a tap's channels one vector load) or
lanes.py (no copy, a tap's channels gathered). Their results are the same bits; their
speeds are not, and the winner depends on the CPU as much as on the shape, so large calls
time both once per key (`kerneldsl.autotune`, remembered beside the kernel cache).

Why not one rule: gathers are fast on Intel cores and slow on AMD Zen 4. lanes_last.py won
[4, 16, 128²] f32 on a Zen 4 box (random grid 3.14 against 5.21 process CPU ms, session 21);
on an Intel box (session 57, best wall ms, lanes_last / lanes) it lost there (random 1.03–1.21 /
0.83–0.93, affine 0.83 / 0.63–0.69) and won BF16 (random 1.16 / 1.42–1.56). A call whose output
has fewer points than its input (downsampling) pays the copy of the whole input for little
use ([2, 64, 96²] to 48², f32 affine 0.77 / 0.34); one with more points (upsampling) gains from
it ([1, 16, 64²] to 256², bf16 0.39 / 0.93).

Small calls (under TUNE_MIN_ELEMENTS input and output elements together) keep the default,
lanes_last.py: timing them would cost more than it could save."""
from __future__ import annotations

from typing import Callable

from kerneldsl import autotune

FAMILY = "grid_sample"
LAST, LANES = "lanes_last", "lanes"
TUNE_MIN_ELEMENTS = 1 << 20   # input + output elements from which a call's form is timed


def key(rt, dtype, dims: int, mode: str, channels: int, in_elements: int, out_elements: int) -> tuple:
    """The tuning key: device, dtype, dimensions, sampling mode and shape buckets (channels,
    input and output elements)."""
    return (autotune.device_key(rt), "forward lanes", dtype.name, dims, mode, autotune.bucket(channels),
            autotune.bucket(in_elements), autotune.bucket(out_elements))


def choose(rt, dtype, dims: int, mode: str, channels: int, in_elements: int, out_elements: int,
           run_last: Callable[[], None], run_lanes: Callable[[], None]) -> str:
    """LAST or LANES for a call both forms serve: LAST below TUNE_MIN_ELEMENTS, else the faster
    for this key (each run_* runs its form once; the first call of a key times both)."""
    if in_elements + out_elements < TUNE_MIN_ELEMENTS:
        return LAST
    label = f"forward, {dtype.name}, {dims}-D {mode}, C~{autotune.bucket(channels)}, " \
            f"in~{autotune.bucket(in_elements)}, out~{autotune.bucket(out_elements)}"
    return autotune.tuner(FAMILY).choose(key(rt, dtype, dims, mode, channels, in_elements, out_elements),
                                         {LAST: autotune.waited(rt, run_last), LANES: autotune.waited(rt, run_lanes)},
                                         label)
