"""Where the rows of each expert live: exclusive scans of per-expert counts into
row offsets and row-tile offsets, and the lookup a grouped-GEMM cube does to find
its expert and rows. Everything stays on the device (no host round trip)."""
from __future__ import annotations

import kerneldsl as kd

SCAN_UNITS = 256


def scan_units(rt, n: int) -> int:
    """Units of a one-cube scan of n values: SCAN_UNITS, or where units are SIMD lanes (the
    CPU, whose unit loops run over every unit) the fewest whole planes covering n, up to it."""
    if not rt.capabilities.units_are_simd_lanes:
        return SCAN_UNITS
    plane = rt.plane_dim
    return min(SCAN_UNITS, max(plane, -(-n // plane) * plane))


@kd.func
def scan_into(src, dst, n, FROM_OFFSETS, DIV):
    """dst[i] = sum_{j<i} ceil(v_j / DIV) for i in 0..n by this cube; v_j is src[j], or
    src[j+1] - src[j] when FROM_OFFSETS (src then holds n+1 row offsets). `src` may be a
    tensor or a shared array; every unit of the cube must call it."""
    t = kd.unit_pos_x()
    part = kd.shared(kd.u32, 2 * kd.plane_count())
    carry = kd.u32(0)
    for base in range(0, n, kd.cube_units()):
        i = base + t
        v = kd.u32(0)
        if i < n:
            if FROM_OFFSETS:
                v = src[i + 1] - src[i]
            else:
                v = src[i]
            if DIV > 1:
                v = (v + (DIV - 1)) // DIV
        incl = kd.plane_inclusive_sum(v)
        slot = (base // kd.cube_units()) % 2 * kd.plane_count()   # alternate halves: one barrier per round
        if kd.lane_pos() == kd.PLANE_DIM - 1:
            part[slot + kd.plane_pos()] = incl
        kd.sync_cube()
        before = kd.u32(0)
        total = kd.u32(0)
        for p in range(kd.plane_count()):
            s = part[slot + p]
            total += s
            if p < kd.plane_pos():
                before += s
        if i < n:
            dst[i] = carry + before + incl - v
        carry += total
    if t == 0:
        dst[n] = carry


@kd.kernel
def exclusive_scan(src: kd.Tensor[kd.u32, 1], dst: kd.Tensor[kd.u32, 1], n: kd.i32,
                   FROM_OFFSETS: kd.Const[bool], DIV: kd.Const[int]):
    """dst[i] = sum_{j<i} ceil(v_j / DIV) for i in 0..n, one cube (`scan_into`)."""
    scan_into(src, dst, n, FROM_OFFSETS, DIV)


def tile_offsets(offsets: kd.Tensor, experts: int, rows_per_tile: int) -> kd.Tensor:
    """U32 [E+1]: the exclusive prefix sum of ceil(count_e / rows_per_tile) over the experts
    whose rows `offsets` (U32 [E+1]) delimit: where each expert's row tiles start."""
    rt = offsets.runtime
    out = rt.empty((experts + 1,), kd.u32)
    exclusive_scan[1, scan_units(rt, experts)](offsets, out, experts, True, rows_per_tile)
    return out


@kd.func
def find_tile(offsets, tile_offsets, E, tile, TM):
    """(expert, first row, end row) of row tile `tile`; first row == end row when the
    tile is past the last one. tile_offsets[e] counts the TM-row tiles before expert e.

    The expert is the last e with tile_offsets[e] <= tile, found by a binary search whose
    steps depend on E alone (the span [lo, lo + n) holding it halves each step, whatever the
    offsets hold): the kernel's work is then fixed by its arguments (kerneldsl/loop_bounds.py),
    which lets the cpu runtime run small launches on the calling thread."""
    lo = 0
    n = E
    while n > 1:
        half = n // 2
        if kd.i32(tile_offsets[lo + half]) <= tile:
            lo = lo + half
        n = n - half
    rend = kd.i32(offsets[lo + 1])
    r0 = kd.i32(offsets[lo]) + (tile - kd.i32(tile_offsets[lo])) * TM
    r0 = kd.select(tile < kd.i32(tile_offsets[E]), r0, rend)
    return lo, r0, rend


def tile_count_bound(rows: int, experts: int, tm: int) -> int:
    """An upper bound on sum_e ceil(count_e / tm) over experts whose counts sum to rows."""
    return (rows + experts * (tm - 1)) // tm
