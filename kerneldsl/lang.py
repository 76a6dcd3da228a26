"""The names a kernel body uses (`kd.cube_pos_x()`, `kd.plane_sum(x)`, ...).

These functions exist so kernels read as ordinary Python and editors can find
them; they only have meaning inside `@kd.kernel`, where the front end compiles
each call. Called from plain Python they raise, naming the function.
"""
from __future__ import annotations

import math
from typing import Generic, TypeVar

from .dtypes import DType, as_dtype

BUILTINS: dict = {}  # function object -> name the front end dispatches on

T = TypeVar("T")


def _builtin(fn):
    def stub(*args, **kwargs):
        raise RuntimeError(f"kd.{fn.__name__}() can only be used inside a @kd.kernel function")

    stub.__name__ = fn.__name__
    stub.__qualname__ = fn.__name__
    stub.__doc__ = fn.__doc__
    BUILTINS[stub] = fn.__name__
    return stub


class _PlaneDim:
    """Marker for the plane size, a compile-time constant of the runtime."""

    def __repr__(self):
        return "kd.PLANE_DIM"


PLANE_DIM = _PlaneDim()
inf = math.inf
nan = math.nan


# ------------------------------------------------------------------ annotations
class _TensorAnnotation:
    """`kd.Tensor`, `kd.Tensor[kd.f32]` or `kd.Tensor[kd.f32, 2]` (dtype / rank pinned)."""

    def __init__(self, dtype: DType | None = None, ndim: int | None = None):
        self.dtype = dtype
        self.ndim = ndim

    def __getitem__(self, item):
        if not isinstance(item, tuple):
            item = (item,)
        dtype = as_dtype(item[0]) if item and item[0] is not None else None
        ndim = item[1] if len(item) > 1 else None
        return _TensorAnnotation(dtype, ndim)

    def __repr__(self):
        return f"kd.Tensor[{self.dtype}, {self.ndim}]"


from .tensor import Tensor  # noqa: E402,F401  (re-exported: kd.Tensor[...] -> _TensorAnnotation)


class Const(Generic[T]):
    """`N: kd.Const[int]` marks a compile-time parameter: the kernel is specialised
    on its value (any hashable Python value: int, float, bool, str, dtype)."""


# ------------------------------------------------------------------ positions
@_builtin
def cube_pos_x(): """Index of this cube in the grid, x."""
@_builtin
def cube_pos_y(): """Index of this cube in the grid, y."""
@_builtin
def cube_pos_z(): """Index of this cube in the grid, z."""
@_builtin
def cube_count_x(): """Number of cubes in the grid, x."""
@_builtin
def cube_count_y(): """Number of cubes in the grid, y."""
@_builtin
def cube_count_z(): """Number of cubes in the grid, z."""
@_builtin
def cube_dim_x(): """Units per cube, x (compile-time)."""
@_builtin
def cube_dim_y(): """Units per cube, y (compile-time)."""
@_builtin
def cube_dim_z(): """Units per cube, z (compile-time)."""
@_builtin
def cube_units(): """Units per cube in all (compile-time)."""
@_builtin
def unit_pos_x(): """Index of this unit in its cube, x."""
@_builtin
def unit_pos_y(): """Index of this unit in its cube, y."""
@_builtin
def unit_pos_z(): """Index of this unit in its cube, z."""
@_builtin
def unit_pos(): """Flat index of this unit in its cube: x + y*dim_x + z*dim_x*dim_y."""
@_builtin
def plane_pos(): """Index of this unit's plane in the cube: unit_pos() // PLANE_DIM."""
@_builtin
def lane_pos(): """Index of this unit in its plane: unit_pos() % PLANE_DIM."""
@_builtin
def plane_count(): """Planes per cube (compile-time): ceil(cube_units() / PLANE_DIM)."""


# ------------------------------------------------------------------ memory and sync
@_builtin
def shared(dtype, size): """A cube-shared array of `size` (compile-time) elements."""
@_builtin
def sync_cube(): """Barrier over the cube; must be reached by every unit (uniform control flow)."""
@_builtin
def load_vec(tensor, offset, lanes): """Load `lanes` (2/4/8) consecutive elements as one vector."""
@_builtin
def store_vec(tensor, offset, value): """Store a vector to consecutive elements."""
@_builtin
def async_copy(dst, dst_offset, src, src_offset, lanes, pred=True):
    """Start copying `lanes` consecutive elements (4, 8 or 16 bytes, both ends aligned to
    that size) from tensor `src` to shared array `dst`; zero-fills instead when `pred` is
    false. The data is there for this unit after `async_wait`; a barrier then shows it to
    the cube. Hardware copies on CUDA (cp.async); a plain copy elsewhere."""
@_builtin
def async_commit(): """Close the group of this unit's async copies issued since the last commit."""
@_builtin
def async_wait(pending=0): """Wait until at most `pending` (compile-time) committed copy groups are unfinished."""
@_builtin
def splat(value, lanes): """A vector with every lane equal to value."""
@_builtin
def make_vec(*values): """A vector from 2, 4 or 8 scalars."""
@_builtin
def vec_sum(v): """Sum of a vector's lanes."""
@_builtin
def vec_max(v): """Max of a vector's lanes."""
@_builtin
def vec_min(v): """Min of a vector's lanes."""
@_builtin
def cast(value, dtype): """Convert to dtype."""
@_builtin
def bitcast(value, dtype): """Reinterpret bits as dtype (same size)."""
@_builtin
def select(cond, a, b): """cond ? a : b, both evaluated."""
@_builtin
def unroll(*args): """Like range() with compile-time bounds; the loop is unrolled."""
@_builtin
def static_assert(cond, message=""): """Compile-time assertion."""


# ------------------------------------------------------------------ plane operations
@_builtin
def plane_sum(x): """Sum over the plane's lanes, given to every lane."""
@_builtin
def plane_prod(x): """Product over the plane."""
@_builtin
def plane_min(x): """Minimum over the plane."""
@_builtin
def plane_max(x): """Maximum over the plane."""
@_builtin
def plane_inclusive_sum(x): """Prefix sum including this lane."""
@_builtin
def plane_exclusive_sum(x): """Prefix sum of the lanes before this one."""
@_builtin
def plane_broadcast(x, lane): """x of lane `lane` (plane-uniform) to every lane."""
@_builtin
def plane_shuffle(x, src_lane): """x of lane src_lane (per lane)."""
@_builtin
def plane_shuffle_xor(x, mask): """x of lane (lane_pos() ^ mask)."""
@_builtin
def plane_ballot(pred): """u32 with bit i set when lane i's pred is true."""
@_builtin
def plane_all(pred): """True when pred holds on every lane."""
@_builtin
def plane_any(pred): """True when pred holds on some lane."""
@_builtin
def plane_elect(): """True on exactly one lane of the plane (the lowest)."""


# ------------------------------------------------------------------ atomics
@_builtin
def atomic_add(target, index, value): """Adds value; returns the old value."""
@_builtin
def atomic_min(target, index, value): """Stores min(old, value); returns old."""
@_builtin
def atomic_max(target, index, value): """Stores max(old, value); returns old."""
@_builtin
def atomic_exchange(target, index, value): """Stores value; returns old."""
@_builtin
def atomic_cas(target, index, compare, value): """Stores value if old == compare; returns old."""
@_builtin
def atomic_and(target, index, value): """Bitwise and; returns old."""
@_builtin
def atomic_or(target, index, value): """Bitwise or; returns old."""
@_builtin
def atomic_xor(target, index, value): """Bitwise xor; returns old."""


# ------------------------------------------------------------------ math
@_builtin
def exp(x): """e**x"""
@_builtin
def exp2(x): """2**x"""
@_builtin
def exp2_fast(x): """2**x, one instruction where the device has one; below 2**-126 may be 0"""
@_builtin
def log(x): """natural log"""
@_builtin
def log2(x): """log base 2"""
@_builtin
def log1p(x): """log(1 + x), accurate near 0"""
@_builtin
def sqrt(x): """square root"""
@_builtin
def rsqrt(x): """1 / sqrt(x)"""
@_builtin
def tanh(x): """hyperbolic tangent"""
@_builtin
def sigmoid(x): """1 / (1 + exp(-x))"""
@_builtin
def erf(x): """error function"""
@_builtin
def sin(x): """sine"""
@_builtin
def cos(x): """cosine"""
@_builtin
def pow(x, y): """x**y"""  # noqa: A001
@_builtin
def abs(x): """|x|"""  # noqa: A001
@_builtin
def floor(x): """round down"""
@_builtin
def ceil(x): """round up"""
@_builtin
def round(x): """round half away from zero"""  # noqa: A001
@_builtin
def fma(a, b, c): """a*b + c, one rounding"""
@_builtin
def min(a, b): """minimum (NaN if either is NaN for floats)"""  # noqa: A001
@_builtin
def max(a, b): """maximum (NaN if either is NaN for floats)"""  # noqa: A001
@_builtin
def clamp(x, lo, hi): """min(max(x, lo), hi)"""
@_builtin
def isnan(x): """x is NaN"""
@_builtin
def isinf(x): """x is +-inf"""


# ------------------------------------------------------------------ matrix primitive
@_builtin
def fragment_a(dtype, m, n, k, layout="row"): """A plane-owned m×k input tile (f16/bf16)."""
@_builtin
def fragment_b(dtype, m, n, k, layout="row"): """A plane-owned k×n input tile (f16/bf16)."""
@_builtin
def fragment_acc(m, n, k): """A plane-owned m×n f32 accumulator tile."""
@_builtin
def fill_fragment(frag, value): """Set every element of a tile."""
@_builtin
def load_fragment(frag, src, offset, stride): """Load a tile from a tensor or shared array."""
@_builtin
def store_fragment(dst, offset, frag, stride): """Store an accumulator tile row-major."""
@_builtin
def mma(acc, a, b): """acc += a · b (f32 accumulate)."""
@_builtin
def fragment_len(frag): """Elements of an acc (or a) fragment each lane holds (compile-time)."""
@_builtin
def fragment_get(frag, i): """Element i (compile-time) of this lane's share of an acc fragment, f32."""
@_builtin
def fragment_set(frag, i, value): """Set element i of this lane's share of an acc fragment."""
@_builtin
def fragment_row(frag, i): """Tile row of this lane's element i (i32)."""
@_builtin
def fragment_col(frag, i): """Tile column of this lane's element i (i32)."""
@_builtin
def fragment_row_slot(frag, i): """Compile-time: a lane's elements with equal slots share a tile row."""
@_builtin
def fragment_row_slots(frag): """Compile-time: the number of row slots (see fragment_row_slot)."""
@_builtin
def fragment_row_lanes(frag): """Compile-time xor masks linking the lanes that hold one tile row."""
@_builtin
def fragment_convert(dst, src): """dst (a fragment, f16/bf16) = src (acc fragment), element by element, rounded."""


# ------------------------------------------------------------------ group matrix primitive
@_builtin
def group_fragment_acc(m, n): """A 64×n f32 accumulator shared by a group of 4 planes (plane g: rows 16g..16g+15)."""
@_builtin
def group_fragment_a(dtype, m, k): """A 64×k f16/bf16 A operand in the group's registers."""
@_builtin
def shared_tile(smem, offset, rows, cols, transposed=False): """A group_mma operand in shared memory (tile_offset layout)."""
@_builtin
def tile_offset(row, col, rows): """Element offset of (row, col) in the core-matrix layout of a matrix of `rows` rows."""
@_builtin
def group_mma(acc, a, b, accumulate=True): """acc += a · b over the group (= a · b if not accumulate; async: read acc after group_wait)."""
@_builtin
def group_wait(pending=0): """Wait until at most `pending` of this group's group_mma are unfinished."""


# ------------------------------------------------------------------ debugging
@_builtin
def print(fmt, *args): """Print from the kernel: '{}' in fmt is replaced by each arg."""  # noqa: A001


__all__ = ["Tensor", "Const", "PLANE_DIM", "inf", "nan"] + sorted(BUILTINS.values())
