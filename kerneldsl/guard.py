"""Guard bytes after allocations ($KERNELDSL_GUARD): a debugging mode that catches writes past
the end of a tensor, whoever makes them (a kernel's indexing, or a compiler's code generation,
which bounds checks inside kernels cannot see).

With $KERNELDSL_GUARD on, every allocation of a runtime's pool (`Runtime.allocate`) takes
GUARD_BYTES more than asked and fills them with PATTERN. When the buffer is freed its guard is
read back; bytes that changed are recorded as a violation naming the runtime, the request and
the first changed byte (a destructor cannot raise). `violations()` returns and clears them;
the `runtime` fixture of kerneldsl's pytest plugin fails a test that left any. Memory imported
from other libraries has no guard. On GPU runtimes the read at free time waits for the
device: a debugging mode, not a fast one.
"""
from __future__ import annotations

import threading

import numpy as np

from . import envflags

enabled = envflags.switch("KERNELDSL_GUARD", False)
enabled.__doc__ = "$KERNELDSL_GUARD is on (read at each allocation)."

GUARD_BYTES = 64
PATTERN = 0xA5
_FILL = np.full(GUARD_BYTES, PATTERN, np.uint8)
_violations: list = []
_lock = threading.Lock()


def arm(runtime, buffer, nbytes: int, what: str) -> None:
    """Fill the GUARD_BYTES after the first `nbytes` of `buffer` (allocated that much larger)
    and remember to check them when it is freed; `what` names the request for the message."""
    runtime._upload(buffer, nbytes, _FILL)
    buffer.guard = (runtime, nbytes, what)


def check(buffer) -> None:
    """Read `buffer`'s guard back (it is being freed) and record a violation where it changed."""
    runtime, nbytes, what = buffer.guard
    runtime.synchronize()  # (GPU runtimes) the buffer's queued work may still write the guard
    got = np.asarray(runtime._download(buffer, nbytes, GUARD_BYTES)).view(np.uint8)
    changed = np.flatnonzero(got != PATTERN)
    if changed.size:
        message = (f"the {runtime.name} runtime's buffer for {what} was written past its end: "
                   f"{changed.size} of the {GUARD_BYTES} guard bytes after its {nbytes} bytes changed, the "
                   f"first at byte {nbytes + int(changed[0])} (now {int(got[changed[0]]):#04x})")
        with _lock:
            _violations.append(message)


def violations() -> list:
    """The violations recorded since the last call (messages, oldest first), cleared."""
    with _lock:
        out = list(_violations)
        _violations.clear()
    return out
