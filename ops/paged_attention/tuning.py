"""Which kernel runs a paged-attention call and its launch shape, from the problem and
`runtime.capabilities` only. Attention (P = 0) in f16/bf16 with rows of whole 16-byte chunks
runs decode_mma.py (the matrix primitive, K/V through async-copy rings) where the matrix
primitive is native; MLA in f16/bf16 with R and P whole 16-byte chunks runs mla_roles.py
(a producer role's bulk copies, two consumer groups' products) where bulk copies and group
products are native and its shape fits, else mla_group.py
(group products, 64 heads a cube) where group products are native, else mla_mma.py
(plane-owned products) where the matrix primitive is; other attention where units are
hardware threads runs the decode kernel (decode_kernel.py: lane groups, registers,
coalesced rows); where units are SIMD lanes (the CPU) attention runs decode_lanes.py (lanes
along the head dimension: vector loads of K and V rows); the general kernel (paged_kernel.py)
serves the rest, with units per cube (= tokens per tile), query heads per cube (HC, as many of a KV head's group as fit
the shared memory) and heads per K/V load (GC). Long rows split when too few cubes run."""
from __future__ import annotations

from dataclasses import dataclass

from ..validation import aligned
from . import mla_roles
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
    """Splits for a call of the general kernel without a workspace: 1 (unsplit) unless rows
    are long and too few cubes would run to fill the device twice; then enough to fill it
    twice, each split getting at least TOKENS_PER_SPLIT tokens."""
    if longest < SPLIT_MIN_TOKENS:
        return 1
    cubes = p.queries * p.Hkv * lay.chunks
    target = 2 * p.runtime.capabilities.compute_units
    if cubes >= target:
        return 1
    splits = min(MAX_SPLITS, -(-target // cubes), longest // TOKENS_PER_SPLIT)
    return splits if splits >= 2 else 1


# ---------------------------------------------------------------------------- the decode kernel
DECODE_PLANES = 8            # planes per cube (at least one per KV head of its block)
DECODE_HEAD_BLOCK = 2        # the most KV heads a cube reads (neighbours in each token row)
DECODE_MAX_LANES = 16        # lanes per token row (a bf16 row of 128 is 16 lanes x 16 bytes)
DECODE_VECTOR_BYTES = 16     # the widest access a lane makes
DECODE_REGISTER_FLOATS = 128  # query + accumulator floats a lane may hold (HC·(D + Dv)/LPT)
DECODE_TOKENS_PER_STEP = 2   # tokens a lane group has in flight per step
DECODE_WAVES = 2             # automatic splits: cubes per compute unit at most
DECODE_PREFETCH = False      # load the next step's K and V rows while this one is used


@dataclass(frozen=True)
class DecodeLaunch:
    planes: int
    heads: int  # HC: query heads per cube
    lanes_per_token: int  # LPT: lanes of a group reading one row
    vector: int  # VEC: elements per access
    tokens_per_step: int  # U
    chunks: int  # head chunks per KV head
    prefetch: bool = False  # K/V rows loaded a step ahead
    head_block: int = 1  # HB: KV heads per cube

    def grid(self, p: Problem, splits: int) -> tuple:
        return (p.queries * (p.Hkv // self.head_block) * self.chunks, 1, splits)

    def units(self, p: Problem) -> int:
        return self.planes * p.runtime.capabilities.plane_dim


def decode_launch(p: Problem) -> DecodeLaunch | None:
    """The decode kernel's shape for attention problem p, or None where a lane cannot hold one
    query head's slice of q and of the accumulator in DECODE_REGISTER_FLOATS."""
    caps = p.runtime.capabilities
    vec = max(1, min(8, min(caps.vector_bytes, DECODE_VECTOR_BYTES) // p.dtype.itemsize))
    while vec > 1 and (p.D % vec or p.Dv % vec or not all(aligned(t, vec) for t in (p.q, p.k, p.v))):
        vec //= 2
    lanes = min(DECODE_MAX_LANES, caps.plane_dim)
    while lanes > 1 and (p.D % (lanes * vec) or p.Dv % (lanes * vec)):
        lanes //= 2
    per_head = (p.D + p.Dv) // lanes
    if per_head > DECODE_REGISTER_FLOATS:
        return None
    chunks = -(-p.group // max(1, DECODE_REGISTER_FLOATS // per_head))
    heads = -(-p.group // chunks)
    budget = caps.max_shared_bytes if caps.shared_memory_emulated else min(caps.max_shared_bytes, STATIC_SHARED_LIMIT)
    most = caps.max_cube_units // caps.plane_dim
    block = max(b for b in range(1, min(DECODE_HEAD_BLOCK, p.Hkv, most) + 1) if p.Hkv % b == 0)
    while True:  # planes: a multiple of the head block, as many as DECODE_PLANES, the cube and shared memory allow
        planes = block * max(1, min(DECODE_PLANES, most) // block)
        while planes > block and 4 * planes * heads * (p.Dv + 2) > budget:
            planes -= block
        if 4 * planes * heads * (p.Dv + 2) <= budget:
            return DecodeLaunch(planes, heads, lanes, vec, DECODE_TOKENS_PER_STEP, chunks, DECODE_PREFETCH, block)
        if block == 1:
            return None
        block = max(b for b in range(1, block) if p.Hkv % b == 0)


def decode_splits(p: Problem, lay, longest: int, waves: int | None = None) -> int:
    """Splits of a decode kernel (`lay`: DecodeLaunch or MmaDecodeLaunch) without a workspace:
    as many as keep the cubes within `waves` (default DECODE_WAVES) per compute unit (rounded
    down: a partial extra wave costs a whole one), each split getting at least
    TOKENS_PER_SPLIT tokens; 1 below two."""
    if longest < SPLIT_MIN_TOKENS:
        return 1
    gx, gy, _ = lay.grid(p, 1)
    splits = min(MAX_SPLITS, (waves or DECODE_WAVES) * p.runtime.capabilities.compute_units // (gx * gy),
                 longest // TOKENS_PER_SPLIT)
    return splits if splits >= 2 else 1


# ---------------------------------------------------------------- the decode kernel on SIMD lanes
LANES_QUERY_FLOATS = 32  # query floats a lane holds (HC · D / W): with its K row slice, the registers
LANES_MAX_PER_LANE = 16  # the most K or V elements a lane owns (D / W, Dv / W: unrolled loads)
LANES_MIN_UNITS = 4      # fewer lanes a cube (odd head dims): the general kernel
LANES_MAX_UNITS = 64     # lanes a cube at most (below one vector: narrower vectors)
LANES_HEAD_BLOCK = 8     # the most neighbouring KV heads a cube reads (HB·D contiguous elements a row)
LANES_WAVES = 2          # automatic splits: cubes per compute unit at most
LANES_STEP_PAIRS = 1     # (token, head) pairs a step, in passes of the cube: T = this · W / HC tokens (2: the same time)


@dataclass(frozen=True)
class LanesLaunch:
    units: int   # W: lanes of the cube (one vector of f32 on the CPU)
    heads: int   # HC: query heads per KV head (<= W)
    tokens: int  # T: tokens a step (T · HC pairs: LANES_STEP_PAIRS passes of the cube)
    chunks: int  # head chunks per KV head
    head_block: int = 1  # HB: KV heads per cube

    def grid(self, p: Problem, splits: int) -> tuple:
        return (p.queries, p.Hkv // self.head_block * self.chunks, splits)


def lanes_launch(p: Problem) -> LanesLaunch | None:
    """decode_lanes.py's shape for attention problem p: W = one vector of f32 lanes (a power of
    two, halved until it divides D and Dv), as many query heads of a KV head as
    LANES_QUERY_FLOATS allow (head chunks of near-equal size), LANES_STEP_PAIRS · W / HC tokens
    a step, up to LANES_HEAD_BLOCK neighbouring KV heads a cube (a divisor of Hkv); None for
    MLA or where a lane would own more than LANES_MAX_PER_LANE elements of a row."""
    caps = p.runtime.capabilities
    if p.P != 0:
        return None
    w = max(1, min(caps.vector_bytes // 4, caps.max_cube_units, LANES_MAX_UNITS))
    w = 1 << (w.bit_length() - 1)
    while w > 1 and (p.D % w or p.Dv % w):
        w //= 2
    if max(p.D, p.Dv) // w > LANES_MAX_PER_LANE:
        return None
    most = max(1, min(w, LANES_QUERY_FLOATS // (p.D // w)))
    chunks = -(-p.group // most)
    heads = -(-p.group // chunks)
    block = max(b for b in range(1, min(LANES_HEAD_BLOCK, p.Hkv) + 1) if p.Hkv % b == 0)
    return LanesLaunch(w, heads, max(1, int(LANES_STEP_PAIRS * w) // heads), chunks, block)


# ---------------------------------------------------------------- the decode kernel on the matrix primitive
DECODE_MMA_PLANES = 1   # planes per cube, each with its own tiles of 16 tokens
DECODE_MMA_STAGES = None  # ring slots per plane (copies run STAGES - 1 tiles ahead); None: mma_stages
DECODE_MMA_MAX_STAGES = 6
DECODE_MMA_DEFAULT_STAGES = 4
DECODE_MMA_WAVES = 4    # automatic splits: cubes per compute unit at most
SHARED_RESERVED = 1024  # shared memory the driver keeps per cube (CUDA: 1 KiB)
MMA_MAX_HEADS = 16      # query heads per cube: the rows of one m16n16k16 tile


@dataclass(frozen=True)
class MmaDecodeLaunch:
    planes: int
    heads: int  # HC: query heads per cube (rows of the A operand that exist)
    chunks: int  # head chunks per KV head
    stages: int  # ring slots per plane

    def grid(self, p: Problem, splits: int) -> tuple:
        return (p.queries * p.Hkv * self.chunks, 1, splits)

    def units(self, p: Problem) -> int:
        return self.planes * p.runtime.capabilities.plane_dim


def mma_shared_bytes(p: Problem, planes: int, heads: int, stages: int) -> int:
    """Shared memory of decode_mma.py: the K/V rings and Q tile (rows padded by 16 bytes),
    the planes' merge arrays."""
    dp, dvp = -(-p.D // 16) * 16, -(-p.Dv // 16) * 16
    ring = p.dtype.itemsize * (stages * planes * 16 * (dp + 8 + dvp + 8) + 16 * (dp + 8))
    return ring + 4 * planes * heads * (p.Dv + 2)


def mma_decode_launch(p: Problem) -> MmaDecodeLaunch | None:
    """decode_mma.py's shape for attention problem p, or None where the matrix primitive does
    not take its dtype or rows are not whole 16-byte chunks (D, Dv, alignment)."""
    caps = p.runtime.capabilities
    if (p.P != 0 or p.dtype not in caps.mma_dtypes or (16, 16, 16) not in caps.mma_shapes or p.dtype.itemsize != 2
            or p.D % 8 or p.Dv % 8 or not all(aligned(t, 8) for t in (p.q, p.k, p.v))):
        return None
    chunks = -(-p.group // MMA_MAX_HEADS)
    heads = -(-p.group // chunks)
    planes = max(1, min(DECODE_MMA_PLANES, caps.max_cube_units // caps.plane_dim))
    stages = max(2, DECODE_MMA_STAGES or mma_stages(p, planes, heads, chunks))
    while mma_shared_bytes(p, planes, heads, stages) > caps.max_shared_bytes:
        if stages > 2:
            stages -= 1
        elif planes > 1:
            planes -= 1
        else:
            return None
    return MmaDecodeLaunch(planes, heads, chunks, stages)


def mma_stages(p: Problem, planes: int, heads: int, chunks: int) -> int:
    """The deepest ring (up to DECODE_MMA_MAX_STAGES) with which every cube of an unsplit
    launch is resident at once, counting a compute unit's shared memory as max_shared_bytes
    (a ring too deep for that leaves a second, partial wave: measured 0.65 against 0.35 ms);
    DECODE_MMA_DEFAULT_STAGES when no depth does (many waves anyway)."""
    caps = p.runtime.capabilities
    cubes = p.queries * p.Hkv * chunks
    for stages in range(DECODE_MMA_MAX_STAGES, 1, -1):
        per_unit = caps.max_shared_bytes // (mma_shared_bytes(p, planes, heads, stages) + SHARED_RESERVED)
        if per_unit * caps.compute_units >= cubes:
            return stages
    return DECODE_MMA_DEFAULT_STAGES


# ---------------------------------------------------------------- MLA decode on the matrix primitive
MLA_HEAD_GROUPS = 2   # groups of 16 query heads per cube (planes along the heads)
MLA_R_PARTS = 4       # slices of R per head group (planes along the latent)
MLA_TILES = 2         # tiles of 16 tokens per step
MLA_STAGES = 3        # ring slots (copies run STAGES - 1 steps ahead)
MLA_WAVES = 2         # automatic splits: cubes per compute unit at most


@dataclass(frozen=True)
class MlaLaunch:
    head_groups: int  # HG
    r_parts: int      # RP
    tiles: int        # NT
    stages: int
    chunks: int       # head chunks of 16·HG per query row

    def grid(self, p: Problem, splits: int) -> tuple:
        return (p.queries * self.chunks, 1, splits)

    def units(self, p: Problem) -> int:
        return self.head_groups * self.r_parts * p.runtime.capabilities.plane_dim


def mla_shared_bytes(p: Problem, groups: int, parts: int, tiles: int, stages: int) -> int:
    """Shared memory of mla_mma.py: the ring and query rows ([latent | kp] padded to the
    planes' contraction slices, plus 16 bytes), the partial scores."""
    rw = -(-p.Dv // 16) * 16
    width = -(-(rw // 16 + -(-p.P // 16)) // parts) * parts * 16 + 8
    return p.dtype.itemsize * width * (stages * 16 * tiles + 16 * groups) + 4 * groups * parts * tiles * 16 * 20


def mla_mma_launch(p: Problem) -> MlaLaunch | None:
    """mla_mma.py's shape for MLA problem p, or None where the matrix primitive does not take
    its dtype or rows are not whole 16-byte chunks (R, P, alignment). R parts: the most, up to
    MLA_R_PARTS, that divide R's tiles of 16; head groups: up to MLA_HEAD_GROUPS, no more than
    the heads need and the cube holds."""
    caps = p.runtime.capabilities
    if (p.P == 0 or p.dtype not in caps.mma_dtypes or (16, 16, 16) not in caps.mma_shapes or p.dtype.itemsize != 2
            or p.Dv % 8 or p.P % 8 or not all(aligned(t, 8) for t in (p.q, p.qp, p.k, p.kp))):
        return None
    most = caps.max_cube_units // caps.plane_dim
    tiles_r = -(-p.Dv // 16)
    parts = max(d for d in range(1, min(MLA_R_PARTS, most) + 1) if tiles_r % d == 0)
    groups = max(1, min(MLA_HEAD_GROUPS, -(-p.Hq // 16), most // parts))
    tiles, stages = max(1, MLA_TILES), max(2, MLA_STAGES)
    while mla_shared_bytes(p, groups, parts, tiles, stages) > caps.max_shared_bytes:
        if stages > 2:
            stages -= 1
        elif tiles > 1:
            tiles -= 1
        elif groups > 1:
            groups -= 1
        else:
            return None
    return MlaLaunch(groups, parts, tiles, stages, -(-p.Hq // (16 * groups)))


# ---------------------------------------------------------------- MLA decode on group products
MLA_GROUP_TOKENS = 16      # tokens per step (N; 32 spills registers on sm_90: measured 0.267 against 0.229 ms)
MLA_GROUP_STAGES = 4       # ring slots (at least 3: tile j + 1 lands while S_j+1 and P_j·V_j read two)
MLA_GROUP_MIN_GROUPS = 1   # groups (R slices of at most 256 columns) a cube has at least ...
MLA_GROUP_MAX_GROUPS = 2   # ... and at most
MLA_GROUP_WAVES = 1        # automatic splits: cubes per compute unit at most
GROUP_ROWS = 64            # query heads per cube


@dataclass(frozen=True)
class MlaGroupLaunch:
    groups: int   # NG: R slices (and contraction slices), 4 planes each
    tokens: int   # N
    stages: int
    chunks: int   # head chunks of 64 per query row

    def grid(self, p: Problem, splits: int) -> tuple:
        return (p.queries * self.chunks, 1, splits)

    def units(self, p: Problem) -> int:
        return 4 * self.groups * p.runtime.capabilities.plane_dim


def mla_group_shared_bytes(p: Problem, groups: int, tokens: int, stages: int) -> int:
    """Shared memory of mla_group.py: Q and the ring ([latent | kp] rows padded to the groups'
    contraction slices), the partial scores."""
    rw = -(-p.Dv // 16) * 16
    width = -(-(rw // 16 + -(-p.P // 16)) // groups) * groups * 16
    return p.dtype.itemsize * width * (GROUP_ROWS + stages * tokens) + 4 * groups * (GROUP_ROWS + 4) * tokens


def mla_group_launch(p: Problem) -> MlaGroupLaunch | None:
    """mla_group.py's shape for MLA problem p, or None where mla_mma_launch finds no shape,
    R needs more than MLA_GROUP_MAX_GROUPS slices of at most 256 columns (the fewest from
    MLA_GROUP_MIN_GROUPS on that divide R's tiles of 16), shared memory does not hold Q and
    three slots, or (where the primitive is emulated) a slice is not whole planes wide (the emulation's row slots then
    differ between S and O; steps are rounded up to whole planes there)."""
    if mla_mma_launch(p) is None:
        return None
    caps = p.runtime.capabilities
    tiles_r = -(-p.Dv // 16)
    groups = next((g for g in range(MLA_GROUP_MIN_GROUPS, MLA_GROUP_MAX_GROUPS + 1)
                   if tiles_r % g == 0 and 16 * tiles_r // g <= 256), None)
    if groups is None or 4 * groups * caps.plane_dim > caps.max_cube_units:
        return None
    pd = caps.plane_dim
    tokens, stages = MLA_GROUP_TOKENS, max(3, MLA_GROUP_STAGES)
    if not caps.mma_native:  # the emulation's row slots need steps of whole planes
        tokens = -(-tokens // pd) * pd
    while mla_group_shared_bytes(p, groups, tokens, stages) > caps.max_shared_bytes:
        if stages > 3:
            stages -= 1
        elif tokens > 16:
            tokens -= 16
        else:
            return None
    if not caps.mma_native and (tokens % pd or 16 * tiles_r // groups % pd):
        return None
    return MlaGroupLaunch(groups, tokens, stages, -(-p.Hq // GROUP_ROWS))


# ---------------------------------------------------------------- MLA decode on roles and bulk copies
MLA_ROLES_TOKENS = 32   # tokens per step (N): 64 leaves room for 2 stages only (Q 72 KiB + 72 KiB a stage)
MLA_ROLES_STAGES = 4    # ring stages at most (fewer where shared memory is short; at least 2)
MLA_ROLES_WAVES = 1     # automatic splits: cubes per compute unit at most


@dataclass(frozen=True)
class MlaRolesLaunch:
    tokens: int   # N
    box: int      # rows of a bulk copy: min(page size, N)
    stages: int
    chunks: int   # head chunks of 64 per query row

    def grid(self, p: Problem, splits: int) -> tuple:
        return (p.queries * self.chunks, 1, splits)

    def units(self, p: Problem) -> int:
        return 12 * p.runtime.capabilities.plane_dim


def mla_roles_shared_bytes(p: Problem, tokens: int, stages: int) -> int:
    """Shared memory of mla_roles.py: Q (64 rows) and the ring (`tokens` rows a stage) of
    [latent | kp] in bands of 64 columns, the ring's and Q's arrival barriers."""
    bands = -(-p.Dv // 64) + -(-p.P // 64)
    return p.dtype.itemsize * bands * 64 * (GROUP_ROWS + stages * tokens) + 8 * (2 * stages + 1)


def mla_roles_launch(p: Problem) -> MlaRolesLaunch | None:
    """mla_roles.py's shape for MLA problem p, or None where it does not apply: f16/bf16 taken
    by the matrix primitive, R and P multiples of 8, R in an even number of bands of 64 columns
    (two consumers, at most 256 output columns each), a cube of 12 planes, a page size that
    divides a step or is a multiple of it in whole 8-row boxes, Q and two stages in shared
    memory, and (where the primitive is emulated) steps and output slices of whole planes.
    MLA_ROLES_STAGES stages and MLA_ROLES_TOKENS tokens a step, fewer where shared memory is
    short (stages first)."""
    caps = p.runtime.capabilities
    bands = -(-p.Dv // 64)
    if (p.P == 0 or p.dtype.itemsize != 2 or p.dtype not in caps.mma_dtypes or p.Dv % 8 or p.P % 8
            or bands % 2 or bands > 8 or 12 * caps.plane_dim > caps.max_cube_units):
        return None
    ps = p.k.shape[1]
    tokens, stages = MLA_ROLES_TOKENS, max(2, MLA_ROLES_STAGES)
    while mla_roles_shared_bytes(p, tokens, stages) > caps.max_shared_bytes:
        if stages > 2:
            stages -= 1
        elif tokens > 16:
            tokens //= 2
        else:
            return None
    box = min(ps, tokens)
    if box % 8 or (ps % tokens and tokens % ps):
        return None
    pd = caps.plane_dim
    if not caps.mma_native and (tokens % pd or bands * 32 % pd):
        return None
    return MlaRolesLaunch(tokens, box, stages, -(-p.Hq // GROUP_ROWS))


def kernel_for(p: Problem) -> str:
    """For MLA 'mla_roles' (mla_roles.py) where bulk copies and group products are native, its
    launch fits and the copy engine reads the operands, else 'mla_group' (mla_group.py) where
    group products are native and its launch fits, else 'mla_mma' (mla_mma.py) on
    decode_mma's terms; 'decode_mma' (decode_mma.py) for attention where the matrix primitive
    runs on hardware and the launch fits; 'decode'
    (decode_kernel.py) for attention where units are hardware threads and its launch fits;
    'decode_lanes' (decode_lanes.py) for attention where units are SIMD lanes and a cube gets
    at least LANES_MIN_UNITS lanes; else 'general' (paged_kernel.py)."""
    caps = p.runtime.capabilities
    if (p.P > 0 and caps.bulk_copy and caps.group_mma_native and mla_roles_launch(p) is not None
            and mla_roles.usable(p.q, p.qp, p.k, p.kp)):
        return "mla_roles"
    if p.P > 0 and caps.group_mma_native and mla_group_launch(p) is not None:
        return "mla_group"
    if p.P > 0 and caps.mma_native and mla_mma_launch(p) is not None:
        return "mla_mma"
    if p.P == 0 and caps.mma_native and mma_decode_launch(p) is not None:
        return "decode_mma"
    if p.P == 0 and not caps.units_are_simd_lanes and decode_launch(p) is not None:
        return "decode"
    if p.P == 0 and caps.units_are_simd_lanes:
        lay = lanes_launch(p)
        if lay is not None and lay.units >= LANES_MIN_UNITS:
            return "decode_lanes"
    return "general"
