"""Guard bytes after allocations ($KERNELDSL_GUARD): a debugging mode that catches writes past
the end of a tensor, whoever makes them (a kernel's indexing, or a compiler's code generation,
which bounds checks inside kernels cannot see).

With $KERNELDSL_GUARD on, every allocation of a runtime's pool (`Runtime.allocate`) takes
GUARD_BYTES more than asked and fills them with PATTERN. A freed buffer is not given back to
the pool at once: its block waits (`defer`, from the buffer's destructor, which may run in
the middle of a driver call or of garbage collection, where reading device memory is not
safe) until the next allocation or `violations()` call after the work queued on it is done,
which reads its guard back and then frees the block (`settle`). Bytes that changed are
recorded as a violation naming the runtime, the request and the first changed byte.
`violations()` returns and clears them; the kerneldsl pytest plugin fails a test that left
any. Memory imported from other libraries has no guard. Each read is a device-to-host copy:
a debugging mode, not a fast one.
"""
from __future__ import annotations

import atexit
import sys
import threading

import numpy as np

from . import envflags

enabled = envflags.switch("KERNELDSL_GUARD", False)
enabled.__doc__ = "$KERNELDSL_GUARD is on (read at each allocation)."

GUARD_BYTES = 64
PATTERN = 0xA5
_FILL = np.full(GUARD_BYTES, PATTERN, np.uint8)
_violations: list = []
waiting: list = []  # (guard, pool, block, streams, events) of freed buffers whose guards are not read yet
_lock = threading.Lock()


class _State(threading.local):
    settling = False  # this thread is in settle() (a buffer freed meanwhile waits for the next call)


_state = _State()


def arm(runtime, buffer, nbytes: int, what: str) -> None:
    """Fill the GUARD_BYTES after the first `nbytes` of `buffer` (allocated that much larger)
    and remember to check them when it is freed; `what` names the request for the message."""
    runtime._upload(buffer, nbytes, _FILL)
    buffer.guard = (runtime, nbytes, what)


def defer(buffer) -> None:
    """Hold `buffer`'s block (its destructor runs) until `settle` has read its guard, after an
    event on each stream that used it (their queued work may still write the guard)."""
    if sys.is_finalizing():
        return  # (the process is ending: no driver calls; its memory goes with it)
    try:
        events = [s.record_event() for s in buffer.streams()]
    except Exception:  # noqa: BLE001  (a lost device or driver: the block is freed unchecked)
        try:
            buffer._pool.free(buffer.block, buffer.used_streams)
        except Exception:  # noqa: BLE001
            pass
        return
    with _lock:
        waiting.append((buffer.guard, buffer._pool, buffer.block, buffer.used_streams, events))


def settle() -> None:
    """Read back the guards of the freed buffers whose streams' work is done, record the ones
    that changed and give their blocks back to their pools; buffers still in use on a stream
    wait for a later call. Not re-entered from a destructor (a buffer freed meanwhile waits)."""
    if not waiting or _state.settling:
        return
    _state.settling = True
    try:
        with _lock:
            ready, held = [], []
            for w in waiting:
                done = _done(w[4])
                if done is False:
                    held.append(w)
                else:
                    ready.append((w, done))
            waiting[:] = held
        for ((runtime, nbytes, what), pool, block, streams, _), readable in ready:
            try:
                if readable:
                    _check(runtime, block, pool, nbytes, what)
            finally:
                pool.free(block, streams)
    finally:
        _state.settling = False


def _done(events: list):
    """True where every event completed, False while one has not; None where a query fails
    (the driver that made it is gone, as a test's fake is): the block is freed unchecked."""
    try:
        return all(e.query() for e in events)
    except Exception:  # noqa: BLE001
        return None


def _check(runtime, block, pool, nbytes: int, what: str) -> None:
    from .runtime import Buffer  # (a stand-in without a pool: freeing it does nothing)
    got = np.asarray(runtime._download(Buffer(pool.view(block), block.size), nbytes, GUARD_BYTES)).view(np.uint8)
    changed = np.flatnonzero(got != PATTERN)
    if changed.size:
        message = (f"the {runtime.name} runtime's buffer for {what} was written past its end: "
                   f"{changed.size} of the {GUARD_BYTES} guard bytes after its {nbytes} bytes changed, the "
                   f"first at byte {nbytes + int(changed[0])} (now {int(got[changed[0]]):#04x})")
        with _lock:
            _violations.append(message)


@atexit.register
def _at_exit() -> None:
    """Check what waits while the drivers still work, then drop the rest (blocks still in use
    on a stream, and their events) before modules are torn down; report violations left."""
    try:
        settle()
    finally:
        with _lock:
            waiting.clear()
    if _violations:
        print("kerneldsl guard: writes past the end of a buffer:\n" + "\n".join(violations()), file=sys.stderr)


def violations() -> list:
    """The violations recorded since the last call (messages, oldest first), cleared; the
    buffers freed since the last check are checked first."""
    settle()
    with _lock:
        out = list(_violations)
        _violations.clear()
    return out
