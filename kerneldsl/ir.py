"""The one structured IR every back end renders.

Expressions are typed trees; statements keep structured control flow (if / for /
while / break / continue / return) so C-like targets render them directly and the
CPU back end can cut kernels at split points (barriers, plane operations, matrix
fragment operations) by walking the tree. Every node carries the user's source
location for error messages and `#line` directives.

Conventions renderers rely on:
- tensor element offsets (`Load.offset`, `Store.offset`, ...) are i64 expressions
  in elements from the tensor's base; multi-indices were already turned into
  offsets with the tensor's strides by the front end;
- f16/bf16 appear only as storage types (loads, stores, casts, variables);
  arithmetic and math run on f32/f64 and integers;
- operands of split statements (`PlaneOp`, fragment ops) and `Atomic` are
  `Var` or `Const` nodes, never larger expressions;
- `Const` values are Python numbers already cast to the node's dtype.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .dtypes import DType
from .errors import SourceLoc

Type = Any  # DType | VecType


# ----------------------------------------------------------------------------- expressions
@dataclass(eq=False)
class Expr:
    dtype: Type
    loc: SourceLoc | None = field(default=None, kw_only=True)


@dataclass(eq=False)
class Const(Expr):
    value: Any = 0


@dataclass(eq=False)
class Var(Expr):
    """A local variable (or scalar kernel parameter) by name."""
    name: str = ""


@dataclass(eq=False)
class BinOp(Expr):
    """`op` in + - * / % & | ^ << >> min max pow; operands already have `dtype`.

    `/` and `%` on integers truncate toward zero (C semantics); `%` on floats is fmod.
    """
    op: str = "+"
    a: Expr = None
    b: Expr = None


@dataclass(eq=False)
class UnOp(Expr):
    """`op` in neg, not (bool), invert (bitwise)."""
    op: str = "neg"
    a: Expr = None


@dataclass(eq=False)
class Cmp(Expr):
    """Comparison of two operands of one type; dtype is bool (or a bool vector)."""
    op: str = "<"  # < <= > >= == !=
    a: Expr = None
    b: Expr = None


@dataclass(eq=False)
class Logic(Expr):
    """Short-circuit `and` / `or` of two bool expressions."""
    op: str = "and"
    a: Expr = None
    b: Expr = None


@dataclass(eq=False)
class Select(Expr):
    cond: Expr = None
    a: Expr = None
    b: Expr = None


@dataclass(eq=False)
class Cast(Expr):
    """Numeric conversion to `dtype` (float->int truncates; bool is x != 0)."""
    a: Expr = None


@dataclass(eq=False)
class Bitcast(Expr):
    """Reinterpret the bits of `a` as `dtype` (same size)."""
    a: Expr = None


@dataclass(eq=False)
class Math(Expr):
    """Elementwise math: exp exp2 exp2_fast log log2 log1p sqrt rsqrt tanh sigmoid erf sin
    cos pow abs floor ceil round fma isnan isinf. `round` rounds half away from zero.
    isnan/isinf have dtype bool; the rest have the operands' (f32/f64, ints for abs)."""
    fn: str = "exp"
    args: list = field(default_factory=list)


@dataclass(eq=False)
class Load(Expr):
    """tensor[offset] from the tensor parameter named `tensor`; `dtype` may be a VecType
    (a wide load of `lanes` consecutive elements starting at offset)."""
    tensor: str = ""
    offset: Expr = None
    checked: bool = False


@dataclass(eq=False)
class SharedLoad(Expr):
    array: str = ""
    offset: Expr = None
    checked: bool = False


@dataclass(eq=False)
class TensorDim(Expr):
    """`.shape[axis]` (attr 'shape') or `.stride(axis)` (attr 'stride') as i32."""
    tensor: str = ""
    attr: str = "shape"
    axis: int = 0


@dataclass(eq=False)
class Position(Expr):
    """A position register, i32 (or u32 where noted):
    cube_pos x|y|z, cube_count x|y|z (grid size), unit_pos x|y|z, unit_flat
    (x + y·dx + z·dx·dy). Cube dims and PLANE_DIM are compile-time constants and
    appear as Const."""
    kind: str = "cube_pos"
    axis: int = 0


@dataclass(eq=False)
class VecMake(Expr):
    elems: list = field(default_factory=list)


@dataclass(eq=False)
class VecExtract(Expr):
    a: Expr = None
    lane: int = 0


# ----------------------------------------------------------------------------- statements
@dataclass(eq=False)
class Stmt:
    loc: SourceLoc | None = field(default=None, kw_only=True)


@dataclass(eq=False)
class Assign(Stmt):
    name: str = ""
    value: Expr = None


@dataclass(eq=False)
class Store(Stmt):
    """tensor[offset] = value; value's dtype equals the tensor's (or a VecType of it)."""
    tensor: str = ""
    offset: Expr = None
    value: Expr = None
    checked: bool = False


@dataclass(eq=False)
class SharedDecl(Stmt):
    """A cube-shared array of `size` elements (static). Listed in KernelIR.shared, not
    in the body: renderers declare every shared array once at the kernel's top."""
    name: str = ""
    dtype: DType = None
    size: int = 0
    shape: tuple = ()  # the shape kd.shared was given (size is its product)
    label: str = ""  # the kernel's name for the array (its first assignment), for messages


@dataclass(eq=False)
class SharedStore(Stmt):
    array: str = ""
    offset: Expr = None
    value: Expr = None
    checked: bool = False


@dataclass(eq=False)
class If(Stmt):
    cond: Expr = None
    then: list = field(default_factory=list)
    orelse: list = field(default_factory=list)


@dataclass(eq=False)
class For(Stmt):
    """for var in range(start, stop, step): `var` is declared by the loop (dtype of start).
    `step` is nonzero; when it is not a Const its sign is tested at run time."""
    var: str = ""
    start: Expr = None
    stop: Expr = None
    step: Expr = None
    body: list = field(default_factory=list)


@dataclass(eq=False)
class While(Stmt):
    cond: Expr = None
    body: list = field(default_factory=list)


@dataclass(eq=False)
class Break(Stmt):
    pass


@dataclass(eq=False)
class Continue(Stmt):
    pass


@dataclass(eq=False)
class Return(Stmt):
    """Ends the unit's execution of the kernel."""


@dataclass(eq=False)
class Breakpoint(Stmt):
    """`breakpoint()` in a kernel body: reaches the IR only for runtimes whose Capabilities are
    `interpreted` (pdb stops there); the front end drops it for compiled back ends."""


@dataclass(eq=False)
class Barrier(Stmt):
    """kd.sync_cube(): all units of the cube arrive before any continues; shared memory
    written before it is visible after it."""
    origin: str = ""  # the builtin that made it where not kd.sync_cube() (for messages)
    role: tuple | None = None  # kd.sync_role(): (first unit, units) of the role it orders; None: the cube


PLANE_REDUCE_OPS = ("sum", "prod", "min", "max")
PLANE_OPS = PLANE_REDUCE_OPS + (
    "inclusive_sum", "exclusive_sum", "broadcast", "shuffle", "shuffle_xor",
    "ballot", "all", "any", "elect",
)


@dataclass(eq=False)
class PlaneOp(Stmt):
    """dst = plane_<op>(value[, arg]) across the lanes of the unit's plane.
    `arg`: the source lane for broadcast/shuffle, the xor mask for shuffle_xor.
    ballot gives u32 (lane i -> bit i), all/any/elect give bool."""
    dst: str = ""
    op: str = "sum"
    value: Expr | None = None
    arg: Expr | None = None
    dtype: Type = None


ATOMIC_OPS = ("add", "min", "max", "exchange", "cas", "and", "or", "xor")


@dataclass(eq=False)
class Atomic(Stmt):
    """dst = old value of target[offset]; target[offset] = op(old, value).
    space: 'global' (tensor) or 'shared'. cas: stores value if old == compare."""
    dst: str | None = None
    op: str = "add"
    space: str = "global"
    target: str = ""
    offset: Expr = None
    value: Expr = None
    compare: Expr | None = None
    dtype: DType = None
    checked: bool = False


@dataclass(eq=False)
class Print(Stmt):
    """kd.print: `parts` are literal strings and expressions, in order."""
    parts: list = field(default_factory=list)


GROUP_PLANES = 4  # planes that share a group fragment (a warpgroup on CUDA)


@dataclass(frozen=True)
class FragType:
    """A matrix tile. role 'a' (m×k), 'b' (k×n) or 'acc' (m×n, f32). A 'plane' fragment is
    owned by one plane; a 'group' fragment (m = 64) by GROUP_PLANES consecutive planes, the
    g-th of which holds tile rows 16g .. 16g + 15."""
    role: str
    dtype: DType
    m: int
    n: int
    k: int
    layout: str = "row"  # a/b in memory: 'row' or 'col'
    scope: str = "plane"  # 'plane' | 'group'

    @property
    def group(self) -> bool:
        return self.scope == "group"

    @property
    def rows(self) -> int:
        """Rows one plane holds (the whole tile for a plane fragment, 16 for a group one)."""
        if self.group:
            return self.m // GROUP_PLANES
        return {"a": self.m, "b": self.k, "acc": self.m}[self.role]

    @property
    def cols(self) -> int:
        return {"a": self.k, "b": self.n, "acc": self.n}[self.role]


@dataclass(eq=False)
class FragDecl(Stmt):
    name: str = ""
    ftype: FragType = None


@dataclass(eq=False)
class FragFill(Stmt):
    frag: str = ""
    value: Expr = None


@dataclass(eq=False)
class FragLoad(Stmt):
    """Load the tile from `space` ('global' tensor or 'shared' array) `src`, element
    (r, c) of the tile at offset + r*stride + c (row layout) or offset + c*stride + r (col)."""
    frag: str = ""
    space: str = "global"
    src: str = ""
    offset: Expr = None
    stride: Expr = None
    checked: bool = False


@dataclass(eq=False)
class FragStore(Stmt):
    """Store an acc tile row-major: element (r, c) at offset + r*stride + c, cast to the
    destination's dtype."""
    frag: str = ""
    space: str = "global"
    dst: str = ""
    offset: Expr = None
    stride: Expr = None
    checked: bool = False


@dataclass(eq=False)
class FragMma(Stmt):
    """acc += a · b, products and sums in f32."""
    acc: str = ""
    a: str = ""
    b: str = ""


@dataclass(eq=False)
class FragGet(Expr):
    """Element `elem` (compile-time, 0 <= elem < elements per lane) of this lane's share of
    an acc fragment, f32. Which tile position it holds is the front end's layout rule
    (`kd.fragment_row`/`fragment_col`): the tensor-core layout where the primitive is
    native, element lane + elem * PLANE_DIM of the row-major tile where it is emulated."""
    frag: str = ""
    elem: int = 0


@dataclass(eq=False)
class FragSet(Stmt):
    """Set element `elem` of this lane's share of an acc fragment (same layout as FragGet)."""
    frag: str = ""
    elem: int = 0
    value: Expr = None


@dataclass(eq=False)
class FragConvert(Stmt):
    """dst (an a fragment of f16/bf16) = src (an acc fragment of the same m x k shape),
    element by element in this lane's share, rounded to dst's dtype. The two layouts put
    element i of a lane at the same tile position on every back end."""
    dst: str = ""
    src: str = ""


@dataclass
class SharedTile:
    """A rows x cols operand of kd.group_mma read from a 16-bit shared array in the core-matrix
    layout (`kd.tile_offset`, kerneldsl/tile_layout.py, for a swizzle span of `swizzle`
    bytes): stored as given, or (transposed) stored as its cols x rows transpose. `offset`
    (elements) is the same on every unit of the group."""
    src: str
    offset: Expr
    rows: int
    cols: int
    transposed: bool = False
    swizzle: int = 32

    @property
    def stored_rows(self) -> int:
        return self.cols if self.transposed else self.rows


@dataclass(eq=False)
class GroupMma(Stmt):
    """acc (a 64 x n group fragment) += A · B (or = A · B when not accumulate), f32, issued
    asynchronously: the acc
    may be read only after a GroupWait that covers it. A is the group a fragment `a` or the
    tile `a_tile` (64 x k); B is the tile `b_tile` (k x n)."""
    acc: str = ""
    a: str = ""
    a_tile: SharedTile | None = None
    b_tile: SharedTile = None
    k: int = 16
    accumulate: bool = True  # False: acc = A · B (its old value ignored)


@dataclass(eq=False)
class GroupWait(Stmt):
    """Wait until at most `pending` of this group's issued GroupMma are unfinished."""
    pending: int = 0


@dataclass(eq=False)
class AsyncCopy(Stmt):
    """Start copying `lanes` consecutive elements from tensor `src` at src_offset to the
    shared array `dst` at dst_offset (4, 8 or 16 bytes, both addresses aligned to that);
    when `pred` is false nothing is read and the destination is zero-filled. Only emitted
    for devices with `Capabilities.async_copy`; elsewhere the front end emits a plain copy."""
    dst: str = ""
    dst_offset: Expr = None
    src: str = ""
    src_offset: Expr = None
    lanes: int = 8
    pred: Expr | None = None
    dtype: DType = None
    checked: bool = False


@dataclass(eq=False)
class AsyncCommit(Stmt):
    """Close the group of this unit's async copies issued since the last commit."""


@dataclass(eq=False)
class AsyncWait(Stmt):
    """Wait until at most `pending` of this unit's committed copy groups are unfinished."""
    pending: int = 0


@dataclass(eq=False)
class BarrierInit(Stmt):
    """Set up arrival barrier `index` of the shared barrier array `array` for `count` arrivals
    a phase. Only for devices with `Capabilities.bulk_copy` (native barriers); elsewhere the
    front end writes the emulation (kerneldsl/builtins/arrival.py) with shared stores and atomics."""
    array: str = ""
    index: Expr = None
    count: Expr = None


@dataclass(eq=False)
class BarrierArrive(Stmt):
    """Arrive at barrier `index`; with `nbytes`, also announce that many bytes of bulk copies
    to this phase (arrive.expect_tx). Native barriers only (see BarrierInit)."""
    array: str = ""
    index: Expr = None
    nbytes: Expr | None = None


@dataclass(eq=False)
class BarrierWait(Stmt):
    """Wait until barrier `index`'s phase of parity `parity` (i32, 0 or 1) has completed.
    Native barriers only (where emulated the front end emits a Barrier); placed like a
    split statement (uniform control flow) so that a kernel means the same everywhere."""
    array: str = ""
    index: Expr = None
    parity: Expr = None


@dataclass(eq=False)
class BulkStore(Stmt):
    """Write the `rows` x `cols` box of shared array `src` from element `src_offset` (group-tile
    layout, kd.tile_offset for `rows` rows) into the 2-D tensor `dst` at (row, col), the parts
    outside the tensor left out. Native bulk copies only; elsewhere the front end writes the
    issuing unit's own copy."""
    dst: str = ""
    row: Expr = None
    col: Expr = None
    src: str = ""
    src_offset: Expr = None
    rows: int = 8
    cols: int = 16
    dtype: DType = None
    swizzle: int = 32  # the layout's swizzle span in bytes (kerneldsl/tile_layout.py)


@dataclass(eq=False)
class BulkStoreWait(Stmt):
    """Wait until this unit's bulk stores are done (their source may be written again, their
    data is in the tensor). Native bulk copies only."""


@dataclass(eq=False)
class Role(Stmt):
    """`with kd.role(first, groups, registers=...)`: `body` runs on the units of groups
    first .. first + groups - 1 only (a group is 4 planes; `first_unit`, `units` count units).
    Natively roles run concurrently, ordered only by arrival barriers; where arrival barriers
    are emulated the front end follows each role with a cube barrier, so roles run in program
    order. `registers`: the role's register budget a unit where the device has budgets
    (`Capabilities.register_budgets`), else None."""
    first_unit: int = 0
    units: int = 0
    registers: int | None = None
    body: list = field(default_factory=list)
    guarded: bool = True  # False: a renderer already knows only the role's units get here


@dataclass(eq=False)
class PhaseCheck(Stmt):
    """An emulated kd.barrier_wait inside a role (interpreted runtimes only): roles run in
    program order there, so the phase must already be complete; the interpreter raises if not."""
    array: str = ""
    index: Expr = None
    parity: Expr = None


@dataclass(eq=False)
class BulkCopy(Stmt):
    """Copy the `rows` x `cols` box of the 2-D tensor `src` whose first element is
    (row, col) (i32; zeros for the part outside the tensor) into shared array `dst` from
    element `dst_offset` in the group-tile layout (kd.tile_offset for `rows` rows), and deliver
    its bytes to barrier `index` of `barriers`. Native bulk copies only (`Capabilities.bulk_copy`);
    elsewhere the front end emits the copy as loads and stores and counts the bytes down itself."""
    dst: str = ""
    dst_offset: Expr = None
    src: str = ""
    row: Expr = None
    col: Expr = None
    rows: int = 8
    cols: int = 16
    barriers: str = ""
    index: Expr = None
    dtype: DType = None
    swizzle: int = 32  # the layout's swizzle span in bytes (kerneldsl/tile_layout.py)


SPLIT_STMTS = (Barrier, PlaneOp, FragFill, FragLoad, FragStore, FragMma, GroupMma, GroupWait)
# statements every unit of a cube must reach (the checker's placement rule): the split
# statements, and arrival-barrier waits (a cube barrier where the barriers are emulated)
UNIFORM_STMTS = SPLIT_STMTS + (BarrierWait,)


# ----------------------------------------------------------------------------- kernel
@dataclass
class TensorParam:
    name: str
    dtype: DType
    ndim: int
    index: int  # position among the kernel's runtime arguments


@dataclass
class ScalarParam:
    name: str
    dtype: DType
    index: int


@dataclass
class KernelIR:
    """A specialised kernel: parameters, body, and the launch-shape constants.

    Locals are function-scoped: `var_types` lists every one (renderers declare them
    at the top); scalar parameters are read through `Var` nodes of their name."""
    name: str
    params: list  # TensorParam | ScalarParam, in launch order (Const params removed)
    body: list
    cube_dim: tuple  # (x, y, z) units per cube, compile-time
    plane_dim: int
    loc: SourceLoc | None = None
    bounds_check: bool = False
    var_types: dict = field(default_factory=dict)  # every local variable -> Type
    shared: dict = field(default_factory=dict)  # shared array -> SharedDecl
    frags: dict = field(default_factory=dict)  # fragment -> FragType
    bulk_sources: tuple = ()  # tensor parameters kd.bulk_copy reads or kd.bulk_store writes (launches check
    #                           their layout)
    min_cubes: int = 1  # kd.cubes_per_compute_unit(n): cubes the compiler keeps room for on one compute unit
    scalar_statements: bool = False  # kd.scalar_statements(): CPU back ends leave straight-line code scalar
    streaming_stores: bool = False  # kd.streaming_stores(): wide stores bypass the caches where the runtime can
    avoid_gathers: bool = False  # kd.avoid_gathers(): CPU back ends make strided loads as vector loads and shuffles

    @property
    def cube_units(self) -> int:
        x, y, z = self.cube_dim
        return x * y * z

    def tensor_params(self):
        return [p for p in self.params if isinstance(p, TensorParam)]


# ----------------------------------------------------------------------------- walking
def child_blocks(stmt: Stmt):
    if isinstance(stmt, If):
        return [stmt.then, stmt.orelse]
    if isinstance(stmt, (For, While, Role)):
        return [stmt.body]
    return []


def walk_stmts(stmts):
    """Every statement in pre-order, nested blocks included."""
    for s in stmts:
        yield s
        for blk in child_blocks(s):
            yield from walk_stmts(blk)


def stmt_exprs(s: Stmt):
    """The expressions a statement evaluates directly (not those of nested blocks)."""
    if isinstance(s, Assign):
        return [s.value]
    if isinstance(s, (Store, SharedStore)):
        return [s.offset, s.value]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, For):
        return [s.start, s.stop, s.step]
    if isinstance(s, While):
        return [s.cond]
    if isinstance(s, PlaneOp):
        return [e for e in (s.value, s.arg) if e is not None]
    if isinstance(s, Atomic):
        return [e for e in (s.offset, s.value, s.compare) if e is not None]
    if isinstance(s, Print):
        return [p for p in s.parts if isinstance(p, Expr)]
    if isinstance(s, FragFill):
        return [s.value]
    if isinstance(s, (FragLoad, FragStore)):
        return [s.offset, s.stride]
    if isinstance(s, AsyncCopy):
        return [e for e in (s.dst_offset, s.src_offset, s.pred) if e is not None]
    if isinstance(s, FragSet):
        return [s.value]
    if isinstance(s, GroupMma):
        return [t.offset for t in (s.a_tile, s.b_tile) if t is not None]
    if isinstance(s, BarrierInit):
        return [s.index, s.count]
    if isinstance(s, BarrierArrive):
        return [e for e in (s.index, s.nbytes) if e is not None]
    if isinstance(s, (BarrierWait, PhaseCheck)):
        return [s.index, s.parity]
    if isinstance(s, BulkCopy):
        return [s.dst_offset, s.row, s.col, s.index]
    if isinstance(s, BulkStore):
        return [s.src_offset, s.row, s.col]
    return []


def expr_children(e: Expr):
    if isinstance(e, (BinOp, Cmp, Logic)):
        return [e.a, e.b]
    if isinstance(e, (UnOp, Cast, Bitcast, VecExtract)):
        return [e.a]
    if isinstance(e, Select):
        return [e.cond, e.a, e.b]
    if isinstance(e, Math):
        return list(e.args)
    if isinstance(e, (Load, SharedLoad)):
        return [e.offset]
    if isinstance(e, VecMake):
        return list(e.elems)
    return []


def walk_expr(e: Expr):
    yield e
    for c in expr_children(e):
        yield from walk_expr(c)


def vars_read(e: Expr) -> set:
    return {n.name for n in walk_expr(e) if isinstance(n, Var)}


def stmt_defs(s: Stmt) -> set:
    """Variables a statement writes directly."""
    if isinstance(s, Assign):
        return {s.name}
    if isinstance(s, For):
        return {s.var}
    if isinstance(s, PlaneOp):
        return {s.dst}
    if isinstance(s, Atomic) and s.dst:
        return {s.dst}
    return set()


def contains(stmts, kinds) -> bool:
    return any(isinstance(s, kinds) for s in walk_stmts(stmts))


def written_tensors(stmts) -> set:
    """Names of the tensor parameters `stmts` store to, atomically update or store fragments
    into (their global memory writes)."""
    out = set()
    for s in walk_stmts(stmts):
        if isinstance(s, Store):
            out.add(s.tensor)
        elif isinstance(s, Atomic) and s.space == "global":
            out.add(s.target)
        elif isinstance(s, FragStore) and s.space == "global":
            out.add(s.dst)
        elif isinstance(s, BulkStore):
            out.add(s.dst)
    return out
