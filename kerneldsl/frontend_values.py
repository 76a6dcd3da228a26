"""What a name can stand for while the front end reads a kernel, besides an IR expression.

Tensors, shared arrays, fragments and tiles are compile-time handles: a kernel passes them
to builtins and indexes them, and the front end turns each use into IR that names them.
Shared by the front end and the builtin handlers (`kerneldsl.builtins`).
"""
from __future__ import annotations

import types

from dataclasses import dataclass, field

from . import ir
from .dtypes import DType


@dataclass
class TensorRef:
    """A tensor parameter: its IR name, dtype, rank and whether its last axis is contiguous."""
    name: str
    dtype: DType
    ndim: int
    inner_contiguous: bool


@dataclass
class ShapeRef:
    """`x.shape` of a tensor parameter, waiting for its `[axis]`."""
    tensor: TensorRef


@dataclass
class SharedRef:
    """A shared array made by kd.shared: IR name, element dtype and (compile-time) shape."""
    name: str
    dtype: DType
    shape: tuple


@dataclass
class FragRef:
    """A matrix fragment made by kd.fragment_* or kd.group_fragment_*."""
    name: str
    ftype: ir.FragType


@dataclass
class TileRef:
    """kd.shared_tile(...): a group_mma operand in a shared array (compile-time handle)."""
    tile: ir.SharedTile
    dtype: DType


@dataclass
class BarrierRef:
    """kd.arrival_barriers(n): the shared array holding n arrival barriers, and what the
    kernel does with them (for the checker: a wait on barriers nothing arrives at)."""
    name: str
    count: int
    used: set = field(default_factory=set)  # 'arrive' (kd.barrier_arrive/expect) and 'copy' (kd.bulk_copy)
    waits: list = field(default_factory=list)  # SourceLoc of each kd.barrier_wait


@dataclass
class VarRef:
    """A run-time variable (a scalar parameter or a local): its IR name and dtype."""
    name: str  # IR name
    dtype: object


class VarTuple(tuple):
    """A tuple of run-time values bound to a name assigned more than once: its elements
    live in variables (ir.Var), so a later assignment of a tuple of the same length
    updates them in place. This is what carries a tuple through a run-time loop or out of
    a run-time branch (`m = (...)` before a loop, `m = m2` inside it)."""


@dataclass
class BranchTuple:
    """A name whose tuple got new variables inside a branch of a run-time `if` (a tuple
    whose length changed there): after the `if` its variables hold values only when that
    branch ran, so reading it is an error that says how to carry the tuple out."""
    name: str
    line: int


def is_ct(v) -> bool:
    """Whether `v` is known at compile time (anything but an IR expression)."""
    return not isinstance(v, ir.Expr)


def describe(v) -> str:
    """How an error message names a value the kernel passed."""
    if isinstance(v, TensorRef):
        return f"tensor {v.name}"
    if isinstance(v, SharedRef):
        return f"shared array {v.name}"
    if isinstance(v, FragRef):
        return f"fragment {v.name}"
    if isinstance(v, TileRef):
        return f"shared tile of {v.tile.src}"
    if isinstance(v, BarrierRef):
        return f"arrival barriers {v.name}"
    if isinstance(v, types.ModuleType):
        return f"module {v.__name__}"
    return repr(v)


def is_array_ref(v) -> bool:
    """A whole tensor, shared array or fragment: something to index, not a value."""
    return isinstance(v, (TensorRef, SharedRef, FragRef, TileRef, BarrierRef))
