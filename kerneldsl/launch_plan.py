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

import functools

from . import launch_checks
from .tensor import Tensor

TENSOR, SCALAR, CONST = "tensor", "scalar", "const"


def signature(kinds: tuple, args: tuple, runtime, block, bounds: bool):
    """The plan key of a launch (module docstring), or None where it has none: an argument
    count the kernel does not take, a block that is not exact ints, a tensor argument that
    is not a `kd.Tensor`, or no tensor to take the runtime from."""
    if type(block) is not int and not launch_checks.exact_ints(block):
        return None
    return signature_function(kinds)(args, runtime, block, bounds)


@functools.lru_cache(maxsize=None)
def signature_function(kinds: tuple):
    """`key(args, runtime, block, bounds)`: `signature` for a kernel with these parameter kinds
    once its block is known to be exact ints, as straight-line code compiled once per kinds
    tuple (a loop testing each argument's kind cost a µs a launch)."""
    names = [f"a{i}" for i in range(len(kinds))]
    lines = [f"    if len(args) != {len(kinds)}:", "        return None"]
    if names:
        lines.append(f"    {', '.join(names)}, = args")
    parts = ["runtime", "block", "bounds"]
    for i, kind in enumerate(kinds):
        if kind == TENSOR:
            lines += [f"    if type(a{i}) is not Tensor:", "        return None", f"    s{i} = a{i}.shape"]
            parts += [f"a{i}.dtype", f"len(s{i})", f"(not s{i} or a{i}.strides[-1] == 1 or s{i}[-1] == 1)",
                      f"a{i}.runtime"]
        elif kind == CONST:
            parts += [f"type(a{i})", f"a{i}"]
    if TENSOR not in kinds:  # the default runtime may change (KERNELDSL_RUNTIME)
        lines += ["    if runtime is None:", "        return None"]
    source = "def key(args, runtime, block, bounds):\n" + "\n".join(lines) + f"\n    return ({', '.join(parts)},)\n"
    env = {"Tensor": Tensor}
    exec(compile(source, f"<launch signature {kinds}>", "exec"), env)  # noqa: S102  (source built above)
    return env["key"]


def _scalar_test(i: int, dtype) -> str:
    """An expression accepting the common well-formed values of scalar argument `a{i}`
    (`Kernel._check_scalar` judges, and words the error for, anything it refuses)."""
    if dtype.is_bool:
        return f"type(a{i}) is bool"
    if dtype.is_int:
        lo, hi = launch_checks.int_range(dtype)
        return f"type(a{i}) is int and {lo} <= a{i} <= {hi}"
    return f"type(a{i}) is float or type(a{i}) is int"


class LaunchPlan:
    """A checked launch of one kernel with one signature: its runtime, cube shape, binary,
    and `launch(grid, args)`: the per-call checks left, then the runtime's launch, as
    straight-line code made for the plan (`_launch_source`)."""

    __slots__ = ("kernel", "runtime", "block", "binary", "run_index", "grids", "launch")

    GRIDS = 4096  # grids remembered per plan

    def __init__(self, kernel, runtime, block: tuple, binary):
        self.kernel = kernel
        self.runtime = runtime
        self.block = block
        self.binary = binary
        kinds = [kind for _, kind, _ in kernel.params]  # which arguments reach the binary (not kd.Const)
        self.run_index = None if CONST not in kinds else tuple(i for i, k in enumerate(kinds) if k != CONST)
        self.grids: dict = {}  # grid as given (exact ints) -> (x, y, z), for grids that passed the checks
        env = {"grids": self.grids, "exact_ints": launch_checks.exact_ints, "new_grid": self._grid,
               "check_scalar": kernel._check_scalar, "check_writable": launch_checks.check_writable,
               "check_bulk": launch_checks.check_bulk_sources, "info": binary.info,
               "run": runtime.launcher(binary, block)}
        env.update((f"dtype{i}", dtype) for i, (_, kind, dtype) in enumerate(kernel.params) if kind == SCALAR)
        source = _launch_source(kernel.params, binary.info)
        exec(compile(source, f"<launch plan {kernel.__name__}>", "exec"), env)  # noqa: S102  (source built here)
        self.launch = env["launch"]

    def _grid(self, grid) -> tuple:
        """A grid not remembered yet: checked (`launch_checks.grid_shape`), and remembered when
        given as exact ints."""
        shape = launch_checks.grid_shape(self.kernel.__name__, grid, self.runtime)
        if launch_checks.exact_ints(grid) and len(self.grids) < self.GRIDS:
            self.grids[grid] = shape
        return shape


def _launch_source(params, info) -> str:
    """`launch(grid, args)` of a plan: the grid (remembered, or checked), each scalar's value,
    that written tensors are writable and bulk sources fit (`launch_checks`, which word the
    errors), then `run(shape, launch arguments)`; nothing for an empty grid."""
    lines = ["def launch(grid, args):",
             "    shape = grids.get(grid) if type(grid) is int or exact_ints(grid) else None",
             "    if shape is None:",
             "        shape = new_grid(grid)"]
    for i, (name, kind, dtype) in enumerate(params):
        if kind == SCALAR:
            lines += [f"    a{i} = args[{i}]", f"    if not ({_scalar_test(i, dtype)}):",
                      f"        check_scalar({name!r}, dtype{i}, a{i})"]
    run_index = [i for i, (_, kind, _) in enumerate(params) if kind != CONST]
    if len(run_index) == len(params):
        lines.append("    run_args = args")
    else:
        lines.append(f"    run_args = ({''.join(f'args[{i}], ' for i in run_index)})")
    for i in info.written:
        lines += [f"    if run_args[{i}].buffer.readonly:", "        check_writable(info, run_args)"]
    if info.bulk_sources:
        lines.append("    check_bulk(info, run_args)")
    lines += ["    if shape[0] and shape[1] and shape[2]:", "        run(shape, run_args)", ""]
    return "\n".join(lines)
