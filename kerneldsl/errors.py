"""Errors a kernel author sees, each pointing at the line of their own Python source."""
from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """A position in the user's Python file (1-based line, 0-based column)."""

    filename: str
    line: int
    col: int = 0

    def excerpt(self) -> str:
        text = linecache.getline(self.filename, self.line).rstrip("\n")
        if not text:
            return ""
        return f"    {text}\n    {' ' * self.col}^"

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}"


class KernelError(Exception):
    """Base class of kerneldsl errors raised while building or running a kernel."""


class CompileError(KernelError):
    """A kernel that cannot be compiled: message, then `file:line` and a caret excerpt."""

    def __init__(self, message: str, loc: SourceLoc | None = None):
        self.message = message
        self.loc = loc
        text = message
        if loc is not None:
            text = f"{loc}: {message}"
            ex = loc.excerpt()
            if ex:
                text += "\n" + ex
        super().__init__(text)


class UnsupportedFeatureError(CompileError):
    """A DSL feature the chosen device cannot run (names the feature and the device)."""


class LaunchError(KernelError):
    """A launch that failed on the device."""


class OutOfBoundsError(KernelError, IndexError):
    """A tensor access outside its extent, caught with KERNELDSL_BOUNDS_CHECK=1."""


class SharedMemoryRaceError(KernelError):
    """The interpreter saw two units touch one shared slot, one of them writing, with no
    kd.sync_cube() between them: names both units and both lines."""


class UninitializedSharedReadError(KernelError):
    """The interpreter saw a unit read a shared slot no unit of its cube had written."""


class DivergenceError(KernelError):
    """The interpreter saw units of a cube (or plane) not all reach the same barrier or plane
    operation (on a GPU: a hang or garbage)."""


class OutOfMemoryError(KernelError, MemoryError):
    """An allocation the runtime could not satisfy even after freeing its pool's cache: names
    the shape and dtype asked for, the bytes, and what the pool held. The same error on
    every runtime (numpy's MemoryError, OpenCL's allocation failures, CUDA's out-of-memory
    all become this one)."""

# Per-axis bounds checks report through the flat check's record: an index outside its axis
# turns the element offset into AXIS_BASE - (axis + 64 * (index + 2**32)), a value far below
# any real offset, which the flat check rejects and `decode_axis_offset` reads back.
AXIS_BASE = -(1 << 40)
_AXIS_SLOTS = 64
_INDEX_BIAS = 1 << 32


def axis_offset_parts(axis: int) -> tuple:
    """(c, m): the failing offset of `axis` at index i is c - m * i."""
    return AXIS_BASE - axis - _AXIS_SLOTS * _INDEX_BIAS, _AXIS_SLOTS


def decode_axis_offset(offset: int) -> tuple | None:
    """(axis, index) of an offset made by a failed per-axis check; None for a plain offset."""
    if offset > AXIS_BASE:
        return None
    v = AXIS_BASE - offset
    return v % _AXIS_SLOTS, v // _AXIS_SLOTS - _INDEX_BIAS
