"""The argument slots of replayed cpu launches that run on the calling thread, kept between runs.

A replayed launch (or a joined sequence of them, `CpuLaunchSequence`) has fixed argument
words except its tensors' data addresses (kerneldsl/replay.py). Packing it afresh each
run — copy the words, patch the addresses, build an array, a table for `kd_run_sequence`,
a control record — costs µs per launch. An `InlineBlock` holds all of it in one
array('Q') made once: `kd_run_sequence`'s table (fn, argp, ncubes per launch), one control
record (no launch in a block is bounds-checked, and nothing sets its cancel flag: inline
runs are not handed to another thread), and each launch's slots. A run writes the data
addresses into their slots and calls `kd_run_sequence` on the calling thread. Two threads
may replay the same call: a run that finds the block in use says so, and its caller packs
its own.

A replayed call's tensors lie in a few places (its inputs, its fused buffer), and those
often stay put from one call to the next (weights, a reused fused buffer). `run_sources`
takes the places and where each slot lies in them, and rewrites the slots of the places
that moved since its last run only.
"""
from __future__ import annotations

import array
import threading

from kerneldsl.prepared import group_by_source

from .abi import CONTROL_SLOTS
from .packing import buffer_address


class InlineBlock:
    """One array of a launch sequence's table, control record and slots (module docstring)."""

    __slots__ = ("array", "table", "count", "patch", "lock", "groups", "at", "last")

    def __init__(self, launches: list):
        n = len(launches)
        words = [0] * (3 * n + CONTROL_SLOTS)
        offsets = []
        for p in launches:
            offsets.append(len(words))
            words += p.words
        self.array = block = array.array("Q", words)  # never resized: its address is in its own words
        base = block.buffer_info()[0]
        control = base + 8 * 3 * n
        for j, (p, offset) in enumerate(zip(launches, offsets)):
            block[3 * j] = p.binary.address
            block[3 * j + 1] = base + 8 * offset
            block[3 * j + 2] = p.ncubes
            block[offset + 3] = control
        self.table = base
        self.count = n
        self.patch = tuple(offset + word for p, offset in zip(launches, offsets) for word in p.addresses)
        self.lock = threading.Lock()
        self.groups = ()  # run_sources' slots per source (kerneldsl/prepared.py group_by_source)
        self.at = None  # the `at` those groups were made for
        self.last = []  # each group's address at the last run_sources (None: slots not written)

    def run(self, run_sequence, refs) -> bool:
        """Run the launches with tensor k's data at refs[k] ((Buffer, byte offset)) through
        `run_sequence` (kd_run_sequence); False, having run nothing, where another thread is
        running this block."""
        if not self.lock.acquire(False):
            return False
        try:
            block = self.array
            for i, (buffer, byte) in zip(self.patch, refs):
                address = buffer.address  # (buffer_address, inlined)
                block[i] = (address if address is not None else buffer_address(buffer)) + byte
            self.last = [None] * len(self.groups)  # (the slots no longer hold run_sources' addresses)
            run_sequence(self.table, 0, self.count)
        finally:
            self.lock.release()
        return True

    def run_sources(self, run_sequence, sources, at, deltas) -> bool:
        """`run` with slot k's tensor at sources[at[k]] ((Buffer, byte offset)) plus deltas[k]
        bytes, rewriting only the slots of sources whose address changed since the last call."""
        if not self.lock.acquire(False):
            return False
        try:
            if at is not self.at:
                self.groups = group_by_source(self.patch, at, deltas)
                self.at = at
                self.last = [None] * len(self.groups)
            block, last = self.array, self.last
            for j, (source, slots) in enumerate(self.groups):
                buffer, byte = sources[source]
                address = buffer.address  # (buffer_address, inlined)
                address = (address if address is not None else buffer_address(buffer)) + byte
                if last[j] != address:
                    last[j] = address
                    for slot, delta in slots:
                        block[slot] = address + delta
            run_sequence(self.table, 0, self.count)
        finally:
            self.lock.release()
        return True
