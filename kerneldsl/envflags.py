"""On/off switches read from the environment on every call of a hot path (each launch, each
operator call), so that tests and users may flip them at any time.

`os.environ.get` of a variable that is not set raises and catches a KeyError inside: about a
µs. CPython's `os.environ` keeps its variables in `_data` under `encodekey(name)`, where a
missing key is a plain dict miss; `switch` reads there, and falls back to the public path on
another Python.
"""
from __future__ import annotations

import os
from typing import Callable

OFF = ("", "0", "false", "no")


def switch(name: str, default: bool) -> Callable[[], bool]:
    """A function telling whether $name is on (anything but "", "0", "false", "no"), or
    `default` where it is not set."""
    try:
        data, key = os.environ._data, os.environ.encodekey(name)
    except AttributeError:
        return lambda: (os.environ[name] not in OFF) if name in os.environ else default
    decode = os.environ.decodevalue

    def read() -> bool:
        raw = data.get(key)
        return default if raw is None else decode(raw) not in OFF

    read.__name__ = f"switch({name})"
    return read


bounds_check = switch("KERNELDSL_BOUNDS_CHECK", False)  # bounds-checked kernels (docs/debugging.md)
interpret = switch("KERNELDSL_INTERPRET", False)  # every launch on the interpreter runtime (docs/debugging.md)
