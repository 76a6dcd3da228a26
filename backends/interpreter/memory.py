"""Memory as the interpreter sees it: tensors with every access checked (per axis where the
front end indexed by axis), and cube-shared arrays that report races and reads of unwritten
slots.

Race rule: two different units touching one shared slot, at least one of them writing (or one
atomically updating it and the other accessing it plainly), with nothing ordering them, is a
race. kd.sync_cube() orders every unit's accesses; a plane operation orders those of its own
plane's units (the DSL's rule, docs/dsl.md: the compiled back ends fence after it); fragment
operations order nothing. Atomic updates of one slot by several units are not a race.
"""
from __future__ import annotations

import sys

import numpy as np

from kerneldsl.errors import OutOfBoundsError, SharedMemoryRaceError, UninitializedSharedReadError, decode_axis_offset


# which recorded accesses of another unit conflict with an access of each kind, and their verbs
_CONFLICTS = {"read": ("write", "atomic"), "write": ("write", "read", "atomic"), "atomic": ("write", "read")}
_VERB = {"read": "read", "write": "wrote", "atomic": "atomically updated"}


def caller_line() -> int:
    """The line of the kernel statement making an access (the generated code's caller frame)."""
    return sys._getframe(2).f_lineno


class LaunchState:
    """What messages name: the kernel, its file, the cube being run and the unit running now."""

    def __init__(self, name: str, filename: str, cube_dim: tuple, grid: tuple, plane_dim: int):
        self.name = name
        self.filename = filename
        self.cube_dim = cube_dim
        self.grid = grid
        self.plane_dim = plane_dim
        self.cube = (0, 0, 0)
        self.unit = 0  # flat index of the unit running now
        self.plane_phase: list = []  # per plane of the cube: plane operations completed so far

    def phase(self, unit: int) -> int:
        """The plane operations `unit`'s plane has completed (accesses of one plane in different
        phases are ordered)."""
        return self.plane_phase[unit // self.plane_dim]

    def where(self, line: int) -> str:
        return f"{self.filename}:{line}"

    def describe_unit(self, unit: int) -> str:
        dx, dy, _ = self.cube_dim
        pos = (unit % dx, unit // dx % dy, unit // (dx * dy))
        return f"unit {unit} (unit_pos {pos}) of cube {self.cube}"


def out_of_bounds(st: LaunchState, what: str, shape: tuple, off: int, line: int, size: str) -> OutOfBoundsError:
    """The error of an access at element offset `off` outside `what` (of `shape`): per axis where
    the front end encoded the failing axis and index in the offset (errors.decode_axis_offset)."""
    where = f" at {st.where(line)} ({st.describe_unit(st.unit)})"
    axis_index = decode_axis_offset(off)
    if axis_index is not None:
        axis, index = axis_index
        return OutOfBoundsError(f"{st.name}: index {index} is out of bounds for axis {axis} of {what}, whose "
                                f"extent is {shape[axis]} (shape {shape}){where}")
    return OutOfBoundsError(f"{st.name}: index {off} is out of bounds for {what} (shape {shape}, {size}){where}")


class TensorAccess:
    """A tensor parameter: its reachable elements as a flat numpy array from the tensor's base,
    read and written at element offsets (the IR's), each checked."""

    def __init__(self, state: LaunchState, name: str, flat: np.ndarray, shape: tuple, strides: tuple):
        self.state = state
        self.name = name
        self.flat = flat
        self.extent = len(flat)
        self.shape = shape
        self.dims = tuple(np.int32(d) for d in shape)
        self.steps = tuple(np.int32(s) for s in strides)
        self.view = np.lib.stride_tricks.as_strided(flat, shape, [s * flat.itemsize for s in strides]) \
            if self.extent else np.empty(shape, flat.dtype)

    def __repr__(self):
        return f"tensor {self.name} {self.shape} {self.flat.dtype}:\n{self.view!r}"

    def _check(self, off, lanes: int, line: int | None = None) -> int:
        off = int(off)
        if off < 0 or off + lanes > self.extent:
            self._fail(off, sys._getframe(2).f_lineno if line is None else line)
        return off

    def _fail(self, off: int, line: int):
        raise out_of_bounds(self.state, f"tensor '{self.name}'", self.shape, off, line,
                            f"{self.extent} elements reachable")

    def load(self, off):
        return self.flat[self._check(off, 1)]

    def load_vec(self, off, lanes: int):
        o = self._check(off, lanes)
        return self.flat[o:o + lanes].copy()

    def store(self, off, value):
        self.flat[self._check(off, 1)] = value

    def store_vec(self, off, value):
        o = self._check(off, len(value))
        self.flat[o:o + len(value)] = value

    def read_at(self, off, unit: int, line: int):
        """An element read by a fragment operation of `unit` at `line`."""
        self.state.unit = unit
        return self.flat[self._check(off, 1, line)]

    def write_at(self, off, value, unit: int, line: int):
        self.state.unit = unit
        self.flat[self._check(off, 1, line)] = value

    def atomic(self, op: str, off, value, compare=None):
        o = self._check(off, 1)
        old = self.flat[o]
        self.flat[o] = atomic_result(op, old, value, compare)
        return old


def atomic_result(op: str, old, value, compare):
    """The value an atomic `op` leaves in a slot holding `old`."""
    if op == "add":
        return old + value
    if op == "min":
        return min(old, value)
    if op == "max":
        return max(old, value)
    if op == "exchange":
        return value
    if op == "cas":
        return value if old == compare else old
    if op == "and":
        return old & value
    if op == "or":
        return old | value
    return old ^ value  # xor


class SharedArray:
    """One cube's shared array with the race and initialisation checks (see the module's rule).

    Per slot, the accesses of the current barrier epoch by kind (plain reads, plain writes,
    atomic updates), each unit -> (line, plane phase) of its latest such access. A barrier
    starts a new epoch."""

    def __init__(self, state: LaunchState, decl):
        self.state = state
        self.name = decl.label or decl.name
        self.shape = tuple(decl.shape) or (decl.size,)
        self.data = np.zeros(decl.size, decl.dtype.np)
        self.written = np.zeros(decl.size, bool)
        self.seen: dict = {kind: {} for kind in _CONFLICTS}  # kind -> slot -> {unit: (line, phase)}
        # reads of slots unwritten at the time, reported at the epoch's end unless another unit's
        # write to the slot in the same epoch turns one into a race first (which says more)
        self.unwritten_reads: list = []  # (slot, unit, line, what)

    def __repr__(self):
        shown = np.where(self.written, self.data, np.nan if self.data.dtype.kind == "f" else 0)
        return f"shared array {self.name} {self.shape} {self.data.dtype} (unwritten slots shown as nan/0):\n" \
               f"{shown.reshape(self.shape)!r}"

    def new_epoch(self, units=None):
        """A cube barrier (or the cube's end): every access before it is ordered before every
        access after it. Reports the epoch's first read of an unwritten slot. `units`: a role's
        barrier (kd.sync_role), which orders only those units' accesses: only theirs are
        forgotten, so another unit's access still races with what a role unit does after it."""
        if units is not None:
            for table in self.seen.values():
                for slot in list(table):
                    accesses = table[slot]
                    for u in units:
                        accesses.pop(u, None)
                    if not accesses:
                        del table[slot]
            return
        if self.unwritten_reads:
            slot, unit, line, what = self.unwritten_reads[0]
            st = self.state
            raise UninitializedSharedReadError(
                f"{st.name}: {st.describe_unit(unit)} {what} {self._label(slot)} at {st.where(line)}, which no unit "
                f"of its cube had written; write it first, with a kd.sync_cube() between the write and the read "
                f"if another unit writes it")
        for table in self.seen.values():
            table.clear()

    # ---------------------------------------------------------------- checks
    def slot(self, off, line: int) -> int:
        off = int(off)
        if 0 <= off < len(self.data):
            return off
        raise out_of_bounds(self.state, f"shared array '{self.name}'", self.shape, off, line,
                            f"{len(self.data)} elements")

    def _label(self, slot: int) -> str:
        if len(self.shape) == 1:
            return f"{self.name}[{slot}]"
        return f"{self.name}[{', '.join(str(int(i)) for i in np.unravel_index(slot, self.shape))}]"

    def _race(self, slot, other: tuple, other_did: str, unit: int, line: int, did: str):
        st = self.state
        ounit, oline = other
        raise SharedMemoryRaceError(
            f"{st.name}: shared-memory race on {self._label(slot)}: {st.describe_unit(ounit)} {other_did} it at "
            f"{st.where(oline)} and {st.describe_unit(unit)} {did} it at {st.where(line)}, with no "
            f"kd.sync_cube() between them; put a kd.sync_cube() between the two accesses (reached by every unit; "
            f"a plane operation orders the accesses of its own plane's units only)")

    def _others(self, table: dict, slot: int, unit: int):
        """Another unit's access in `table` to `slot` that nothing orders before `unit`'s now:
        (unit, line), or None. A unit of the same plane is ordered by a plane operation since."""
        st = self.state
        plane, phase = unit // st.plane_dim, st.phase(unit)
        for u, (line, ph) in table.get(slot, {}).items():
            if u != unit and not (u // st.plane_dim == plane and ph < phase):
                return u, line
        return None

    def note(self, slot: int, unit: int, line: int, kind: str):
        """Record an access of `kind` ('read', 'write' or 'atomic') by `unit` at `line`, raising
        SharedMemoryRaceError if another unit's access of this epoch conflicts with it."""
        if kind != "write" and not self.written[slot]:
            self.unwritten_reads.append((slot, unit, line, "reads" if kind == "read" else "atomically updates"))
        for other in _CONFLICTS[kind]:
            o = self._others(self.seen[other], slot, unit)
            if o is not None:
                self._race(slot, o, _VERB[other], unit, line, _VERB[kind])
        self.seen[kind].setdefault(slot, {})[unit] = (line, self.state.phase(unit))
        if kind == "write":
            self.written[slot] = True

    def access(self, off, n: int, kind: str, unit: int, line: int) -> int:
        """Check and record an access of `kind` by `unit` at `line` to slots off .. off + n - 1;
        the first slot."""
        self.state.unit = unit
        s = self.slot(off, line)
        self.slot(s + n - 1, line)
        for i in range(n):
            self.note(s + i, unit, line, kind)
        return s

    # ---------------------------------------------------------------- accesses from kernel code
    def load(self, off):
        return self.data[self.access(off, 1, "read", self.state.unit, caller_line())]

    def load_vec(self, off, lanes: int):
        s = self.access(off, lanes, "read", self.state.unit, caller_line())
        return self.data[s:s + lanes].copy()

    def store(self, off, value):
        self.data[self.access(off, 1, "write", self.state.unit, caller_line())] = value

    def store_vec(self, off, value):
        s = self.access(off, len(value), "write", self.state.unit, caller_line())
        self.data[s:s + len(value)] = value

    def atomic(self, op: str, off, value, compare=None):
        s = self.access(off, 1, "atomic", self.state.unit, caller_line())
        old = self.data[s]
        self.data[s] = atomic_result(op, old, value, compare)
        return old

    # ---------------------------------------------------------------- accesses of fragment operations
    def read_at(self, off, unit: int, line: int):
        """A slot read by a fragment operation or group product of `unit` at `line`."""
        return self.data[self.access(off, 1, "read", unit, line)]

    def write_at(self, off, value, unit: int, line: int):
        self.data[self.access(off, 1, "write", unit, line)] = value
