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
"""
from __future__ import annotations

import array
import threading

from .abi import CONTROL_SLOTS
from .packing import buffer_address


class InlineBlock:
    """One array of a launch sequence's table, control record and slots (module docstring)."""

    __slots__ = ("array", "table", "count", "patch", "lock")

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
            run_sequence(self.table, 0, self.count)
        finally:
            self.lock.release()
        return True
