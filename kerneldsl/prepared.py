"""Prepared launches: one checked launch of a binary whose grid, cube shape, scalars and tensor
layouts are fixed, so that launching it again needs only where each tensor's data now is.

A replayed operator call (replay.py) launches what its recorded call launched, on tensors of
the same layouts in other memory. `Runtime.prepare_launch(binary, grid, block, args)` turns
one launch into a `PreparedLaunch`; `run(refs)` launches it with tensor argument i's data at
`refs[i]` = (Buffer, byte offset). This base form rebuilds the tensors and calls
`Runtime.launch`; a runtime whose argument packing is costly overrides `prepare_launch` to
pack everything once and patch only the data addresses (the cpu and cuda runtimes).
The grid is the checked three-axis grid; it is never empty (empty launches are not prepared).
`Runtime.join_launches` may turn consecutive prepared launches into one that issues them
together (the cuda runtime: one native call for all of them).

`run_sources(sources, at, deltas)` is `run` with refs[k] = (buffer, byte + deltas[k]) for
(buffer, byte) = sources[at[k]]: a replayed call's tensors mostly lie in a few places (its
inputs, its one fused buffer), so a launch that keeps its slots between runs may patch per
source, and only the sources that moved (the cpu runtime's InlineBlock).
"""
from __future__ import annotations

from .tensor import Tensor


class PreparedLaunch:
    """`runtime.launch(binary, grid, block, args)` again, with the tensors' data moved."""

    __slots__ = ("runtime", "binary", "grid", "block", "values", "tensors", "templates")

    def __init__(self, runtime, binary, grid: tuple, block: tuple, args):
        self.runtime = runtime
        self.binary = binary
        self.grid = grid
        self.block = block
        # the arguments with every tensor replaced by None (no memory of the recorded call is held)
        self.values = [None if type(a) is Tensor else a for a in args]
        self.tensors = tuple(i for i, a in enumerate(args) if type(a) is Tensor)
        self.templates = tuple((args[i].runtime, args[i].shape, args[i].dtype, args[i].strides) for i in self.tensors)

    def arguments(self, refs) -> list:
        """The launch's arguments with tensor i's data at refs[i]."""
        args = list(self.values)
        for pos, (rt, shape, dtype, strides), (buffer, byte) in zip(self.tensors, self.templates, refs):
            args[pos] = Tensor._of(rt, buffer, shape, dtype, strides, byte // dtype.itemsize)
        return args

    def run(self, refs) -> None:
        self.runtime.launch(self.binary, self.grid, self.block, self.arguments(refs))

    def run_sources(self, sources, at, deltas) -> None:
        """`run` with tensor k's data at sources[at[k]] moved by deltas[k] bytes (module docstring)."""
        self.run(refs_from(sources, at, deltas))


def group_by_source(targets, at, deltas) -> tuple:
    """The argument slots of a run_sources caller grouped by source: ((source index,
    ((target, delta), ...)), ...), `targets` being where each ref's address goes, in refs'
    order; a launch that keeps its slots writes a group only when its source moved."""
    groups: dict = {}
    for target, source, delta in zip(targets, at, deltas):
        groups.setdefault(source, []).append((target, delta))
    return tuple((source, tuple(g)) for source, g in groups.items())


def refs_from(sources, at, deltas) -> list:
    """run's refs of a run_sources call: (buffer, byte + delta) for each (source index, delta)."""
    return [(s[0], s[1] + d) for s, d in zip(map(sources.__getitem__, at), deltas)]
