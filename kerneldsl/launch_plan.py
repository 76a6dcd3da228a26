"""Launch plans: what a kernel's launch with one argument signature has proved, so that the
next launch with that signature does a dict lookup and the per-call checks only.

A launch's *signature* (`signature`) is everything its argument checks and its binary
depend on except per-call values: the runtime asked for, the cube shape, the bounds-check
flag, and per argument: a tensor's type, dtype, rank, inner contiguity and runtime object;
a `kd.Const`'s type and value. The first launch with a signature runs every check
(`Kernel._check_args`, `launch_checks.launch_shape`), finds or compiles the binary and
stores a `LaunchPlan` under it; later launches with the same signature check only what a
signature does not fix — the grid, scalar values, read-only tensors — with the same errors.
"""
from __future__ import annotations

from . import launch_checks
from .tensor import Tensor

TENSOR, SCALAR, CONST = "tensor", "scalar", "const"


def signature(kinds: tuple, args: tuple, runtime, block, bounds: bool):
    """The plan key of a launch (module docstring), or None where it has none: an argument
    count the kernel does not take, a block that is not exact ints, a tensor argument that
    is not a `kd.Tensor`, or no tensor to take the runtime from."""
    if len(args) != len(kinds) or not launch_checks.exact_ints(block):
        return None
    key = [runtime, block, bounds]
    tensors = False
    for kind, a in zip(kinds, args):
        if kind == TENSOR:
            if type(a) is not Tensor:
                return None
            shape = a.shape
            inner = not shape or a.strides[-1] == 1 or shape[-1] == 1
            key += (a.dtype, len(shape), inner, a.runtime)
            tensors = True
        elif kind == CONST:
            key += (type(a), a)
    if not tensors and runtime is None:  # the default runtime may change (KERNELDSL_RUNTIME)
        return None
    return tuple(key)


def _scalar_passes(dtype):
    """A quick test that accepts the common well-formed values of a scalar parameter
    (`Kernel._check_scalar` judges, and words the error for, anything it refuses)."""
    if dtype.is_bool:
        return lambda a: type(a) is bool
    if dtype.is_int:
        lo, hi = launch_checks.int_range(dtype)
        return lambda a: type(a) is int and lo <= a <= hi
    return lambda a: type(a) is float or type(a) is int


class LaunchPlan:
    """A checked launch of one kernel with one signature: its runtime, cube shape, binary,
    which arguments reach the binary (the non-`kd.Const` ones), and the per-call checks left."""

    __slots__ = ("kernel", "runtime", "block", "binary", "run_index", "scalars", "written", "bulk")

    def __init__(self, kernel, runtime, block: tuple, binary):
        self.kernel = kernel
        self.runtime = runtime
        self.block = block
        self.binary = binary
        kinds = [kind for _, kind, _ in kernel.params]
        self.run_index = None if CONST not in kinds else tuple(i for i, k in enumerate(kinds) if k != CONST)
        self.scalars = tuple((i, name, dtype, _scalar_passes(dtype))
                             for i, (name, kind, dtype) in enumerate(kernel.params) if kind == SCALAR)
        self.written = binary.info.written
        self.bulk = binary.info.bulk_sources

    def launch(self, grid, args: tuple) -> None:
        """Check what the signature leaves open, then launch (nothing for an empty grid)."""
        kernel = self.kernel
        rt = self.runtime
        grid = launch_checks.grid_shape(kernel.__name__, grid, rt)
        for i, name, dtype, passes in self.scalars:
            a = args[i]
            if not passes(a):
                kernel._check_scalar(name, dtype, a)
        run_args = list(args) if self.run_index is None else [args[i] for i in self.run_index]
        if self.written:
            launch_checks.check_writable(self.binary.info, run_args)
        if self.bulk:
            launch_checks.check_bulk_sources(self.binary.info, run_args)
        if grid[0] * grid[1] * grid[2] == 0:
            return
        rt.launch(self.binary, grid, self.block, run_args)
