"""Replayed operator calls: an operator's first call with one argument layout is recorded
(its allocations, zero fills and kernel launches), later calls with the same layout replay
the record instead of running the operator's Python again.

An operator's host work (validation, plan choice, views, argument packing) depends only on
its arguments' *layouts* — each tensor's runtime, dtype, shape, strides, offset, whether it
is read-only, which other argument shares its memory and, for imported memory, its
address modulo 256 (vector widths follow alignment) — and on its plain arguments
(numbers, strings, enums, dataclasses of them); the key also holds the KERNELDSL_BOUNDS_CHECK
switch. Under KERNELDSL_INTERPRET (a debugging mode: every launch on the interpreter) calls
are neither recorded nor replayed. `@replayable` keys a call on exactly those
(`call_key`); a call whose key was recorded allocates the same buffers, launches the same
kernels with the same grids, cube shapes and scalars on tensors rebuilt at the same places
in the new call's memory, and returns results built the same way. Nothing is validated
again: the recorded call was, and every check depends only on what the key fixes.

Two more kinds of argument are keyed: a numpy array by its dtype and shape only, for
operators that pass host values to the device — the call must upload each such array as it
is (`rt.tensor(array)`), which the record keeps as an upload step of the new call's array
(ctc's packed targets and lengths); and an object with a `replay_fields()` method by what
that returns (tensors, plain values: e.g. a paged-attention `DevicePlan` or moe's
`SwiGluExperts`, whose methods are replayed with the object as their first argument). A
class whose `replay_fields()` never change once made (`replay_fields_fixed = True`: the
paged `DevicePlan`) has that part of the key made once, when the object is a call's first
argument.

A record is kept only when the first call was layout-pure as far as the runtime can see:
any other host upload (`rt.tensor`), a host array argument not uploaded as it is, or a
download (`rt.to_numpy`, `.numpy()`) during the call means its work may depend on values, and a stream switch (`rt.use_stream`) orders work a
replay would not, so such a call is not recorded (it still runs). An
operator opts in with the decorator only when its Python branches on nothing else (no
global state other than the runtime's capabilities, `KERNELDSL_BOUNDS_CHECK` — part of the
key — and autotuning choices, which the `kerneldsl.autotune` timing calls disqualify while
they are being made). `KERNELDSL_REPLAY=0` turns replay off; `clear()` drops every record
(the test suite does so between tests, since tests monkeypatch tuning constants).
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import math
import operator
import sys
import threading
import weakref

import numpy as np

from . import envflags
from .dtypes import u8
from .tensor import Tensor

FUSE_LIMIT = 1 << 20  # a replayed call whose buffers total at most this takes them as one allocation
FUSED_ALIGN = 256  # byte alignment of each buffer inside a fused allocation (what allocations give)
SPARE_LIMIT = 16 << 20  # bytes of fused buffers records may hold for reuse, all records together
MAX_RECORDS = 256  # records kept per operator (oldest dropped first): shapes of one model repeat
_PLAIN = frozenset((int, float, bool, str, bytes, type(None)))


class _ThreadState(threading.local):
    """Per thread: `recorder`, the Recording of its outermost replayable call (None outside
    one; a class default, since a missing thread-local attribute costs a raised exception)."""

    recorder = None


_local = _ThreadState()
_records: list = []  # every operator's records and refusals (for clear())
_SPARE_LOCK = threading.Lock()
_SPARES: "weakref.WeakSet[Program]" = weakref.WeakSet()  # records holding a spare buffer
_spare_bytes = 0


enabled = envflags.switch("KERNELDSL_REPLAY", True)
enabled.__doc__ = "$KERNELDSL_REPLAY is not off (read at each call: tests and users may change it)."


def clear() -> None:
    """Forget every recorded call (the next call of each layout runs the operator again)."""
    release_spares()
    for r in _records:
        r.clear()


def release_spares(runtime=None) -> None:
    """Give back the fused buffers records hold for reuse (of one runtime, or all):
    `Runtime.empty_cache` calls it before returning cached memory to the driver."""
    global _spare_bytes
    with _SPARE_LOCK:
        for program in list(_SPARES):
            if program.spare is not None and (runtime is None or program.fused[0] is runtime):
                _spare_bytes -= program.fused[1]
                program.spare = None
                _SPARES.discard(program)


def active():
    """The recording in progress on this thread, or None."""
    return _local.recorder


@contextlib.contextmanager
def paused():
    """No recording on this thread inside (the one in progress, if any, resumes after): for
    work a refused record need not keep, such as autotuning's timed runs, whose recorded
    launches would cost host time the timings then count, and whose buffers the record would
    hold."""
    rec = _local.recorder
    _local.recorder = None
    try:
        yield
    finally:
        _local.recorder = rec


# ------------------------------------------------------------------------------ keys
def _leaf_key(a, buffers: dict, tensors: list):
    """The key part of one argument (its tensors appended to `tensors`, in order); raises
    _Unkeyed for arguments the key cannot hold. How an argument is keyed depends on its type
    alone, so each type's rule is worked out once (`_rule`)."""
    rule = _RULES.get(type(a))
    if rule is None:
        rule = _RULES[type(a)] = _rule(type(a))
    kind, values = rule
    if kind is _VALUES:  # a dataclass (its fields) or an object with replay_fields
        return (type(a), *_keys(values(a), buffers, tensors))
    if kind is _SEQUENCE:
        return (type(a), *_keys(a, buffers, tensors))
    if kind is _ARRAY:  # host values the call uploads as they are (Recording.uploaded)
        tensors.append(a)
        return (np.ndarray, a.dtype.str, a.shape)
    if kind is _ENUM:
        return (type(a), a)
    if kind is _FIXED:
        if not tensors:
            return _fixed_key(a, values, buffers, tensors)
        return (type(a), *_keys(values(a), buffers, tensors))
    if kind is _SIMPLE:
        return _keys((a,), buffers, tensors)[0]
    raise _Unkeyed


_SIMPLE, _SEQUENCE, _ENUM, _ARRAY, _VALUES, _FIXED, _NONE = range(7)
_RULES: dict = {}  # type -> (how its instances are keyed, the function giving their key values or None)


def _rule(cls: type) -> tuple:
    """How `_leaf_key` keys an instance of `cls`: a tensor or plain value as `_keys` does, a
    tuple or list by its items, an enum member as itself, a numpy array by dtype and shape, a
    dataclass by its fields' values now (one C call: dataclasses.fields costs a µs a call, a
    getattr a field 0.05 µs), an object with `replay_fields` by what that returns (made once
    where `replay_fields_fixed`), anything else not at all."""
    if cls is Tensor or cls in _PLAIN:
        return _SIMPLE, None
    if issubclass(cls, (tuple, list)):
        return _SEQUENCE, None
    if issubclass(cls, enum.Enum):
        return _ENUM, None
    if cls is np.ndarray:
        return _ARRAY, None
    if dataclasses.is_dataclass(cls) and not issubclass(cls, type):
        names = [f.name for f in dataclasses.fields(cls)]
        return _VALUES, ((lambda o: ()) if not names else (
            operator.attrgetter(*names) if len(names) > 1 else (lambda o, n=names[0]: (getattr(o, n),))))
    fields = getattr(cls, "replay_fields", None)
    if fields is not None:
        return (_FIXED if getattr(cls, "replay_fields_fixed", False) else _VALUES), fields
    return _NONE, None


def _fixed_key(a, fields, buffers: dict, tensors: list):
    """_leaf_key of an object whose replay_fields never change (`replay_fields_fixed`), as the
    call's first argument: made once and kept on the object with its tensors and their
    aliases (with nothing before it in the key, they are the same every call)."""
    cached = a.__dict__.get("_replay_key")
    if cached is None:
        part = (type(a), *_keys(fields(a), buffers, tensors))
        cached = a._replay_key = (part, tuple(tensors), dict(buffers))
        return part
    part, mine, aliases = cached
    tensors.extend(mine)
    buffers.update(aliases)
    return part


def _keys(items, buffers: dict, tensors: list) -> list:
    """_leaf_key of each item, its two commonest cases (a tensor, a plain value) inlined:
    the key is made on every call of a replayed operator, and a plan object or an options
    dataclass holds many such leaves."""
    out = []
    for a in items:
        if type(a) is Tensor:
            buffer = a.buffer
            alias = buffers.setdefault(id(buffer), len(tensors))
            tensors.append(a)
            # imported memory may start anywhere; operators choose vector widths by alignment
            place = 0 if buffer.block is not None else _address_low_bits(buffer.raw)
            out.append((a.runtime, a.dtype, a.shape, a.strides, a.offset, buffer.readonly, alias, place))
        elif type(a) in _PLAIN:
            out.append((type(a), a))
        else:
            out.append(_leaf_key(a, buffers, tensors))
    return out


def _address_low_bits(raw) -> int:
    """The low 8 bits of imported memory's address (alignment up to 256 bytes, which vector
    width choices read), 0 where the runtime does not tell the address."""
    if isinstance(raw, int):
        return raw & 255
    data = getattr(raw, "ctypes", None)  # a numpy array (the cpu runtime)
    return data.data & 255 if data is not None else 0


class _Unkeyed(Exception):
    """An argument whose layout a key cannot capture (the call runs without replay)."""


def call_key(args: tuple, kwargs: dict, tensors: list):
    """The replay key of a call (module docstring), or None where an argument has none; the
    call's tensors are appended to `tensors` in the key's order."""
    buffers: dict = {}
    try:
        key = _keys(args, buffers, tensors)
        if kwargs:
            key += [(k, _leaf_key(v, buffers, tensors)) for k, v in sorted(kwargs.items())]
    except _Unkeyed:
        return None
    key.append(envflags.bounds_check())
    return tuple(key)


# ------------------------------------------------------------------------------ recording
class Recording:
    """What one call did, in terms a replay can redo on other memory of the same layout."""

    def __init__(self, inputs: list):
        self.inputs = len(inputs)  # (a count: the call's tensors are not held)
        self.sources: dict = {}  # id(buffer) -> (kind, index, base byte offset)
        self.held: list = []  # buffers referred to by id above (kept alive while recording)
        self.arrays: dict = {}  # id(host array argument) -> its index in inputs
        for i, t in enumerate(inputs):
            if type(t) is Tensor:
                self._source(t.buffer, ("in", i, t.offset * t.dtype.itemsize))
            else:
                self.arrays[id(t)] = i
        self.uploads: set = set()  # indices of the host arrays uploaded as they are
        self.allocations: list = []  # (runtime, nbytes)
        # ("launch", kernel, grid, block, argspecs, runtime) | ("run", prepared, refs) | ("zero", spec)
        # | ("upload", host array index, spec)
        self.steps: list = []
        self.refused = None  # why the call cannot be replayed

    def _source(self, buffer, where):
        if id(buffer) not in self.sources:
            self.sources[id(buffer)] = where
            self.held.append(buffer)

    def refuse(self, why: str) -> None:
        if self.refused is None:
            self.refused = why

    def allocated(self, runtime, buffer, nbytes: int) -> None:
        self._source(buffer, ("buf", len(self.allocations), 0))
        self.allocations.append((runtime, nbytes))

    def tensor_spec(self, t: Tensor) -> tuple:
        """Where a tensor lies: (kind, index, byte offset from the source, shape, strides, dtype)."""
        where = self.sources.get(id(t.buffer))
        byte = t.offset * t.dtype.itemsize
        if where is None:  # memory made before the call (a constant the operator keeps): held as is
            self._source(t.buffer, ("ext", t.buffer, 0))
            where = self.sources[id(t.buffer)]
        kind, index, base = where
        return (kind, index, byte - base, t.shape, t.strides, t.dtype, t.runtime)

    def spec(self, value):
        """A launch argument or result: tensors by place, tuples, lists and dataclasses by their
        items, plain values as they are; anything else refuses the record (a replay would hand
        back the recorded call's object)."""
        if type(value) is Tensor:
            return ("T", self.tensor_spec(value))
        if type(value) in _PLAIN or isinstance(value, enum.Enum):
            return ("V", value)
        if type(value) in (tuple, list):
            return ("S", type(value), tuple(self.spec(v) for v in value))
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = dataclasses.fields(value)
            if all(f.init for f in fields):
                return ("D", type(value), tuple((f.name, self.spec(getattr(value, f.name))) for f in fields))
        self.refuse(f"a {type(value).__name__} among the results")
        return ("V", None)

    def is_argument(self, array) -> bool:
        """Whether `array` is one of the call's host array arguments, uploadable as it is
        (C-contiguous): its upload can be replayed with the next call's array."""
        return id(array) in self.arrays and array.flags.c_contiguous

    def uploaded(self, array, t: Tensor) -> None:
        """`t` was made by uploading the host array argument `array` (is_argument)."""
        index = self.arrays[id(array)]
        self.uploads.add(index)
        self.steps.append(("upload", index, self.tensor_spec(t)))

    def zero_filled(self, t: Tensor) -> None:
        self.steps.append(("zero", self.tensor_spec(t)))

    def launched(self, kernel, grid, block, args: tuple, runtime) -> None:
        """A launch that ran: kept as the runtime's prepared launch with where each tensor
        argument lies, or (no launch plan to prepare from) as the launch call itself."""
        prepared = kernel.prepare(grid, block, args, runtime)
        if prepared is False:  # an empty grid: nothing ran, nothing to replay
            return
        if prepared is None:
            self.steps.append(("launch", kernel, grid, block, tuple(self.spec(a) for a in args), runtime))
            return
        launch, run_args = prepared
        self.steps.append(("run", launch, tuple(self.tensor_spec(a)[:3] for a in run_args if type(a) is Tensor)))

    def program(self, result) -> "Program | None":
        built = self.spec(result)
        if len(self.uploads) != len(self.arrays):  # its values may have steered the call
            self.refuse("a host array argument not uploaded as it is")
        if self.refused is not None:
            return None
        return Program(tuple(self.allocations), tuple(self.steps), built, self.inputs)


class Program:
    """A recorded call: allocate, then run the steps, then build the result."""

    __slots__ = ("allocations", "steps", "result", "build", "fused", "spare", "__weakref__")

    def __init__(self, allocations: tuple, steps: tuple, result, inputs: int):
        self.allocations = allocations
        steps = _joined(_fills_first(steps))
        self.result = result
        self.build = _builder(result)  # (inputs, buffers) -> the call's result
        # small calls on one runtime take all their memory as one allocation (each costs µs of
        # Python): the runtime, the total and each buffer's byte offset in it
        self.fused = None
        runtimes = {id(rt) for rt, _ in allocations}
        if len(runtimes) == 1:
            bases, total = [], 0
            for _, nbytes in allocations:
                bases.append(total)
                total += -(-max(nbytes, 1) // FUSED_ALIGN) * FUSED_ALIGN
            if total <= FUSE_LIMIT:
                self.fused = (allocations[0][0], total, tuple(bases))
        if self.fused is not None:
            steps = _merged_fills(steps, allocations, self.fused[2])
        # each run step gains its references flattened for Program.run (`_flat_refs`)
        bases = None if self.fused is None else self.fused[2]
        self.steps = tuple(step + (_flat_refs(step[2], inputs, bases),) if step[0] == "run" else step
                           for step in steps)
        self.spare = None  # the last call's fused buffer, reused once nothing else holds it

    def _reuse(self, rt):
        """The last call's fused buffer if its results are all gone and it was used on this
        stream only (the stream orders the new work after the old, as the allocator's own
        reuse does); else None."""
        with _SPARE_LOCK:
            buffer = self.spare
            if buffer is None or sys.getrefcount(buffer) > 3:  # self.spare, `buffer`, the argument
                return None
            stream = rt._stream_local.__dict__.get("current") or rt._default_stream
            if buffer.stream is not stream or buffer.used_streams:
                return None
            return buffer  # (still the spare: free again once this call's results are gone)

    def _keep(self, buffer, nbytes: int) -> None:
        """Hold `buffer` for reuse by the next call (within SPARE_LIMIT bytes for all records)."""
        global _spare_bytes
        with _SPARE_LOCK:
            if self.spare is None and _spare_bytes + nbytes <= SPARE_LIMIT:
                self.spare = buffer
                _spare_bytes += nbytes
                _SPARES.add(self)

    def run(self, inputs: list):
        if self.fused is not None:
            rt, total, bases = self.fused
            whole = self._reuse(rt) if self.spare is not None else None
            if whole is None:
                whole = rt.allocate(total)
                self._keep(whole, total)
            buffers = [(whole, base) for base in bases]
        else:
            buffers = [(rt.allocate(nbytes), 0) for rt, nbytes in self.allocations]
        places = [(t.buffer, t.offset * t.dtype.itemsize) if type(t) is Tensor else None for t in inputs]
        # an input's place at its index, then the call's buffers (the fused one: one source)
        sources = places + ([(whole, 0)] if self.fused is not None else buffers)
        for step in self.steps:
            if step[0] == "run":  # (Buffer, byte offset) of each tensor argument in this call
                if step[3] is not None:
                    step[1].run_sources(sources, *step[3])
                    continue
                refs = []
                for kind, index, delta in step[2]:
                    if kind == "in":
                        buffer, byte = places[index]
                        refs.append((buffer, byte + delta))
                    elif kind == "buf":
                        buffer, byte = buffers[index]
                        refs.append((buffer, byte + delta))
                    else:
                        refs.append((index, delta))
                step[1].run(refs)
            elif step[0] == "launch":
                _, kernel, grid, block, specs, runtime = step
                kernel.launch_with(grid, block, tuple(_build(s, inputs, buffers) for s in specs), runtime)
            elif step[0] == "upload":
                host = inputs[step[1]]
                if host.size:
                    kind, index, delta, _, _, _, runtime = step[2]
                    if kind == "in":
                        buffer, byte = places[index]
                    elif kind == "buf":
                        buffer, byte = buffers[index]
                    else:
                        buffer, byte = index, 0
                    runtime._upload(buffer, byte + delta, (host if host.ndim == 1 else host.reshape(-1)).view(np.uint8))
            else:
                t = _tensor(step[1], inputs, buffers)
                t.runtime._fill_zero(t)
        return self.build(inputs, buffers)


def _flat_refs(refs: tuple, inputs: int, bases: tuple | None):
    """A run step's references as (indices into the sources of Program.run, byte deltas), or
    None where one is memory held by the record ("ext"). With `bases` (a fused call's buffer
    offsets) every buffer of the call is the one fused source, at its base."""
    if any(kind not in ("in", "buf") for kind, _, _ in refs):
        return None
    if bases is None:
        return (tuple(index if kind == "in" else inputs + index for kind, index, _ in refs),
                tuple(delta for _, _, delta in refs))
    return (tuple(index if kind == "in" else inputs for kind, index, _ in refs),
            tuple(delta if kind == "in" else bases[index] + delta for kind, index, delta in refs))


def _fills_first(steps: tuple) -> tuple:
    """The steps with each zero fill of a buffer the call allocated moved to the front when no
    earlier step touches that buffer (fresh memory: nothing reads it before the fill), so that
    the launches around it can be joined (a fill between them splits a handoff in two)."""
    front, rest = [], []
    touched: set = set()  # allocation indices an earlier step refers to
    opaque = False  # an earlier step whose references are not listed (an unprepared launch)
    for step in steps:
        kind = step[0]
        if kind == "zero" and step[1][0] == "buf" and not opaque and step[1][1] not in touched:
            front.append(step)
            continue
        rest.append(step)
        if kind == "run":
            touched.update(index for where, index, _ in step[2] if where == "buf")
        elif kind in ("zero", "upload"):
            spec = step[1] if kind == "zero" else step[2]
            if spec[0] == "buf":
                touched.add(spec[1])
        else:
            opaque = True
    return tuple(front + rest)


def _covers(spec: tuple, allocations: tuple) -> bool:
    """Whether a zero fill's tensor is the whole of an allocation of the call, packed."""
    kind, index, delta, shape, strides, dtype, _ = spec
    if kind != "buf" or delta != 0 or math.prod(shape) * dtype.itemsize != allocations[index][1]:
        return False
    packed, step = [], 1
    for n in reversed(shape):
        packed.append(step)
        step *= n
    return all(st == p for st, p, n in zip(strides, reversed(packed), shape) if n != 1)


def _merged_fills(steps: tuple, allocations: tuple, bases: tuple) -> tuple:
    """The steps of a fused call with each run of consecutive zero fills of whole, consecutive
    allocations made one fill of bytes over them (the padding between them is the call's own,
    unused memory): one fill costs a driver call or a numpy assignment whatever its size."""
    out: list = []
    for step in steps:
        prev = out[-1] if out else None
        if (step[0] == "zero" and prev is not None and prev[0] == "zero" and prev[1][5] is u8
                and len(prev) == 3 and _covers(step[1], allocations) and step[1][1] == prev[2] + 1):
            first, index = prev[1][1], step[1][1]
            nbytes = bases[index] + allocations[index][1] - bases[first]
            out[-1] = ("zero", ("buf", first, 0, (nbytes,), (1,), u8, step[1][6]), index)
            continue
        if step[0] == "zero" and _covers(step[1], allocations):
            spec = step[1]
            nbytes = allocations[spec[1]][1]
            step = ("zero", ("buf", spec[1], 0, (nbytes,), (1,), u8, spec[6]), spec[1])  # (+ its last index)
        out.append(step)
    return tuple(out)


def _joined(steps: tuple) -> tuple:
    """The steps with each run of consecutive prepared launches on one runtime joined into one
    where the runtime can issue them together (`Runtime.join_launches`)."""
    out: list = []
    group: list = []

    def flush():
        if len(group) > 1:
            joined = group[0][1].runtime.join_launches([step[1] for step in group])
            if joined is not None:
                out.append(("run", joined, tuple(ref for step in group for ref in step[2])))
                group.clear()
                return
        out.extend(group)
        group.clear()

    for step in steps:
        if step[0] == "run" and (not group or step[1].runtime is group[0][1].runtime):
            group.append(step)
            continue
        flush()
        if step[0] == "run":
            group.append(step)
        else:
            out.append(step)
    flush()
    return tuple(out)


def _tensor(spec: tuple, inputs: list, buffers: list) -> Tensor:
    kind, index, delta, shape, strides, dtype, runtime = spec
    if kind == "in":
        src = inputs[index]
        buffer, byte = src.buffer, src.offset * src.dtype.itemsize + delta
    elif kind == "buf":
        buffer, byte = buffers[index]
        byte += delta
    else:
        buffer, byte = index, delta
    return Tensor._of(runtime, buffer, shape, dtype, strides, byte // dtype.itemsize)


def _build(spec, inputs: list, buffers: list):
    tag = spec[0]
    if tag == "T":
        return _tensor(spec[1], inputs, buffers)
    if tag == "V":
        return spec[1]
    if tag == "D":
        return spec[1](**{name: _build(s, inputs, buffers) for name, s in spec[2]})
    items = [_build(s, inputs, buffers) for s in spec[2]]
    return tuple(items) if spec[1] is tuple else spec[1](items)


def _builder(spec):
    """`_build` of one result spec as a function `(inputs, buffers) -> value`, its dispatch
    on tags worked out once (a Program builds its result with it on every call)."""
    tag = spec[0]
    if tag == "T" and spec[1][0] == "buf":
        _, index, delta, shape, strides, dtype, runtime = spec[1]
        item, of = dtype.itemsize, Tensor._of

        def tensor(inputs, buffers):
            buffer, byte = buffers[index]
            return of(runtime, buffer, shape, dtype, strides, (byte + delta) // item)
        return tensor
    if tag == "V":
        value = spec[1]
        return lambda inputs, buffers: value
    if tag == "S" and spec[1] is tuple:
        parts = tuple(_builder(s) for s in spec[2])
        return lambda inputs, buffers: tuple([part(inputs, buffers) for part in parts])
    return functools.partial(_build, spec)


# ------------------------------------------------------------------------------ decorator
def replayable(fn):
    """Replay `fn`'s calls per argument layout (module docstring). For operator entry points
    whose host work depends only on the layouts and plain values of their arguments."""
    records: dict = {}
    refusals: dict = {}
    _records.extend((records, refusals))

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if _local.recorder is not None or not enabled() or envflags.interpret():  # inside another recorded call: it records our kernels
            return fn(*args, **kwargs)
        inputs: list = []
        key = call_key(args, kwargs, inputs)
        if key is None:
            return fn(*args, **kwargs)
        program = records.get(key)
        if program is not None:
            return program.run(inputs)
        rec = _local.recorder = Recording(inputs)
        try:
            result = fn(*args, **kwargs)
        finally:
            _local.recorder = None
        program = rec.program(result)
        store = records if program is not None else refusals
        if len(store) >= MAX_RECORDS:
            store.pop(next(iter(store)))
        store[key] = program if program is not None else rec.refused
        return result

    call.replay_records = records  # key -> Program
    call.replay_refusals = refusals  # key -> why a call with that key was not recorded (it runs unrecorded)
    return call
