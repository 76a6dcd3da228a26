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


class OutOfMemoryError(KernelError, MemoryError):
    """An allocation the runtime could not satisfy even after freeing its pool's cache: names
    the shape and dtype asked for, the bytes, and what the pool held. The same error on
    every runtime (numpy's MemoryError, OpenCL's allocation failures, CUDA's out-of-memory
    all become this one)."""
