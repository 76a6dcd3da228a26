"""How a CTC problem maps onto cubes, from the sizes and `runtime.capabilities` only: which
recursion runs (recursion.py: a cube per sample and direction, states in shared memory or
a global workspace, for any length; plane.py: a sample's states in one plane's registers,
R a lane, for 2S + 1 up to MAX_STATES_PER_LANE·PLANE_DIM, when PLANE_PATH or a caller asks),
its cube shape, and the cube shape of the gradient kernel."""
from __future__ import annotations

from dataclasses import dataclass

# Units that are SIMD lanes (the cpu runtime): every step's barrier is a split point, a pass
# over the units, so a cube keeps few of them (each takes several states a step). At T 500,
# N 64, S 100 (201 states) the forward took 88-104 ms with 16 units, 137 with 32, 141 with 64
# and 768 with 8 (2-core dev box, shared); 64 for long targets keeps the blocks a step few.
SIMD_UNITS = 16
SIMD_LONG_UNITS = 64
SIMD_LONG_STATES = 1024
GPU_MAX_UNITS = 1024
# The shared-memory budget of the state planes: half the device's, leaving room for a second
# resident cube per core.
SHARED_FRACTION = 2
MAX_CLASS_CHUNK = 2048  # classes scattered per pass of the gradient kernel (8 KiB of shared F32)
CUBES_PER_UNIT = 16     # gradient cubes aimed at per compute unit (several resident per GPU core hide barriers)
# The plane path: R states a lane in registers (the fewest that hold 2S + 1, at least 2), so up
# to 16 × 32 = 512 states (S <= 255) on a plane of 32. Planes (samples) per cube: on a GPU as
# few as keep every compute unit busy (each plane steps on its own, so packing them only
# shares a core), at most GPU_MAX_PLANES; SIMD_PLANES on the cpu runtime.
#
# PLANE_PATH: whether the plane path runs by default where the states fit (off: only when
# asked, as the tests and `benchmarks.ctc --plane-path` ask). Off because on every device
# measured it was slower than, or even with, the cube path (2026-12-01, best-of wall times of
# one call, T 500 N 64 C 32):
# - H200, S 100 (R 7): alpha_beta 1.47 ms vs 0.60, loss + backward 2.52 vs 1.18, the loss
#   alone 0.70 vs 0.73 (host time dominates it); S 30 (R 2): even (1.45 vs 1.42 both passes);
#   N 256: 3.40 vs 2.95. Those runs stored each state from inside its log-add, branching
#   between the R log-adds; the stores now follow them (not re-measured on a GPU).
# - cpu runtime, S 100: the loss 47-60 ms vs 24-27 (1-8 planes a cube alike; as slow without
#   the shuffles: the R log-adds a unit cost it, though the region loop is 16-wide SIMD).
# - Intel's CPU OpenCL: the loss 22-24 ms vs 20-22, alpha_beta 52-63 vs 45-48.
# Both host runtimes lose at S 10, 30 and 60 too (benchmarks/RESULTS.md).
# The cpu runtime keeps the cube path even with PLANE_PATH on.
PLANE_PATH = False
MAX_STATES_PER_LANE = 16
GPU_MAX_PLANES = 4
SIMD_PLANES = 4


def _pow2_at_least(x: int, low: int) -> int:
    p = low
    while p < x:
        p *= 2
    return p


@dataclass(frozen=True)
class RecursionPlan:
    """Units per cube. The plane path when `per_lane` (R) > 0: a plane per sample, `units` //
    PLANE_DIM samples a cube. Else the cube path: `plane`: floats per state plane, room for
    whole blocks of `units` states, FRONT before them and 2 after (a power of two in shared
    memory); `shared`: whether the planes fit shared memory; `labels`: whether the states'
    labels and skip rules are kept in shared memory too (recursion.recurse)."""

    units: int
    plane: int
    shared: bool
    per_lane: int = 0
    labels: bool = False

    def samples_per_cube(self, plane_dim: int) -> int:
        return self.units // plane_dim if self.per_lane else 1


def cube_units(caps, states: int) -> int:
    """Units of a cube that walks `states` states (or classes) a step."""
    if caps.units_are_simd_lanes:
        return SIMD_UNITS if states <= SIMD_LONG_STATES else SIMD_LONG_UNITS
    cap = min(GPU_MAX_UNITS, caps.max_cube_units)
    return min(cap, _pow2_at_least(states, caps.plane_dim))


def states_per_lane(caps, states: int) -> int:
    """R of the plane path for `states` (the fewest, from 2, that hold them), 0 when even
    MAX_STATES_PER_LANE do not."""
    r = max(2, -(-states // caps.plane_dim))
    return r if r <= MAX_STATES_PER_LANE else 0


def recursion_plan(caps, states: int, planes: int = 1, shared_bytes: int | None = None,
                   on_planes: bool | None = None) -> RecursionPlan:
    """The plan for 2S + 1 = `states` and `planes` (sample, direction) recursions. Tests force
    the cube path (`on_planes` False; `shared_bytes` 0 for its global workspace) or the plane
    path (`on_planes` True, for states that fit)."""
    per_lane = states_per_lane(caps, states)
    if on_planes is None:
        on_planes = PLANE_PATH and per_lane > 0 and not caps.units_are_simd_lanes
    if on_planes:
        if not per_lane:
            raise ValueError(f"{states} states do not fit a plane of {caps.plane_dim} lanes")
        if caps.units_are_simd_lanes:
            per_cube = SIMD_PLANES
        else:
            per_cube = max(1, min(GPU_MAX_PLANES, planes // max(caps.compute_units, 1)))
        return RecursionPlan(per_cube * caps.plane_dim, 0, False, per_lane)
    budget = caps.max_shared_bytes // SHARED_FRACTION if shared_bytes is None else shared_bytes
    units = cube_units(caps, states)
    # every lane of the last block of states, the -inf slots before them (recursion.FRONT)
    # and 2 past them
    need = -(-states // units) * units + 4
    plane = _pow2_at_least(need, 32)
    if 2 * plane * 4 <= budget:
        # where units are SIMD lanes, the states' labels and skip rules too (recursion.recurse)
        labels = caps.units_are_simd_lanes and 4 * plane * 4 <= budget
        return RecursionPlan(units, plane, True, labels=labels)
    return RecursionPlan(units, need, False)


@dataclass(frozen=True)
class GradPlan:
    """The gradient kernel: units per cube, classes per shared pass, time steps per cube, and
    the size of the occupancies' shared array (0: not staged; gradient.py says when)."""

    units: int
    class_chunk: int
    steps: int
    staged: int = 0

    def grid(self, N: int, T: int) -> tuple:
        return (N, max(1, -(-T // self.steps)))


def grad_plan(caps, T: int, N: int, C: int, states: int) -> GradPlan:
    chunk = min(_pow2_at_least(C, 32), MAX_CLASS_CHUNK, caps.max_shared_bytes // 8)
    units = cube_units(caps, max(states, min(C, chunk)))
    target = CUBES_PER_UNIT * caps.compute_units
    per_sample = max(1, -(-target // max(N, 1)))
    steps = max(1, -(-T // per_sample))
    staged = _pow2_at_least(states, 32) if caps.units_are_simd_lanes else 0
    if 4 * (staged + 1 + chunk) > caps.max_shared_bytes:
        staged = 0
    return GradPlan(units, chunk, steps, staged)
