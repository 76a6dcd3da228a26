"""Launch shape of the paged kernel, from the problem and `runtime.capabilities` only:
units per cube (= tokens per tile), query heads per cube (HC, as many of a KV head's group
as fit the shared memory), heads per K/V load (GC), and whether to split long rows."""
from __future__ import annotations

from dataclasses import dataclass

from .problem import Problem

STATIC_SHARED_LIMIT = 48 * 1024  # statically sized shared arrays stay under every device's default
MAX_HEADS_PER_CUBE = 16
MAX_SPLITS = 32
SPLIT_MIN_TOKENS = 512  # rows shorter than this never split automatically
TOKENS_PER_SPLIT = 256  # the least work a split should get


@dataclass(frozen=True)
class Launch:
    units: int
    heads: int  # HC
    heads_per_load: int  # GC
    chunks: int  # head chunks per KV head
    key_vector: int = 1  # K elements per access (1: scalar)
    rope_vector: int = 1  # the same for kp (MLA)

    def grid(self, p: Problem, splits: int) -> tuple:
        return (p.queries, p.Hkv * self.chunks, splits)


def shared_bytes(p: Problem, units: int, heads: int) -> int:
    """Shared memory of the kernel for `units` units and `heads` heads per cube."""
    return 4 * (heads * (p.D + max(p.P, 1) + p.Dv + units + 3) + units)


def launch(p: Problem) -> Launch:
    caps = p.runtime.capabilities
    # where units are vector lanes a tile's cost grows faster than its tokens (measured on the
    # 2-core dev box: 8 units 13.5 ms, 64 units 60 ms for the CPU benchmark's decode)
    units = min(8 if caps.units_are_simd_lanes else 64, caps.max_cube_units)
    budget = caps.max_shared_bytes if caps.shared_memory_emulated else min(caps.max_shared_bytes, STATIC_SHARED_LIMIT)
    heads = min(p.group, MAX_HEADS_PER_CUBE)
    while heads > 1 and shared_bytes(p, units, heads) > budget:
        heads -= 1
    if heads > 4:
        heads -= heads % 4
    per_load = 4 if heads % 4 == 0 else 2 if heads % 2 == 0 else 1
    return Launch(units, heads, per_load, -(-p.group // heads), vector_width(p, p.k, p.D), vector_width(p, p.kp, p.P))


def vector_width(p: Problem, keys, dim: int) -> int:
    """Elements per K access: a unit reads a whole key row, so on devices whose units are not
    vector lanes wide accesses (up to `vector_bytes`) cut its load instructions; they need
    rows (and the tensor's offset) that are multiples of the width. 1 where units are lanes."""
    caps = p.runtime.capabilities
    if caps.units_are_simd_lanes or dim == 0:
        return 1
    width = max(1, min(8, caps.vector_bytes // p.dtype.itemsize))
    while width > 1 and (dim % width != 0 or keys.offset % width != 0):
        width //= 2
    return width


def auto_splits(p: Problem, lay: Launch, longest: int) -> int:
    """Splits for a call without a workspace: 1 (unsplit) unless rows are long and too few
    cubes would run to fill the device; then enough to fill it twice, each split getting at
    least TOKENS_PER_SPLIT tokens."""
    if longest < SPLIT_MIN_TOKENS:
        return 1
    cubes = p.queries * p.Hkv * lay.chunks
    target = 2 * p.runtime.capabilities.compute_units
    if cubes >= target:
        return 1
    splits = min(MAX_SPLITS, -(-target // cubes), longest // TOKENS_PER_SPLIT)
    return splits if splits >= 2 else 1
