"""Compiled-kernel cache on disk ($KERNELDSL_CACHE, else the user cache dir).

Entries are keyed by a hash of the generated source (which is a pure function
of the IR and compile-time values), the back end, the device arch and the
toolchain and package versions, so a second process never recompiles. Writes
go to a temporary file and are renamed into place, so concurrent processes are
safe. `KERNELDSL_DUMP=dir` additionally writes every generated source there.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path

from .version import __version__

STATS = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}
_LOCK = threading.Lock()


def cache_dir() -> Path:
    d = os.environ.get("KERNELDSL_CACHE")
    if d:
        return Path(d)
    try:
        import platformdirs  # well-kept, per-OS cache locations (XDG on Linux, ~/Library/Caches, ...)
    except ImportError:  # a machine with only the core packages (e.g. a GPU box): the XDG default
        return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kerneldsl"
    return Path(platformdirs.user_cache_dir("kerneldsl"))


def enabled() -> bool:
    return os.environ.get("KERNELDSL_CACHE", "x") != ""


def key(*parts) -> str:
    h = hashlib.sha256()
    h.update(f"kerneldsl-{__version__}".encode())
    for p in parts:
        h.update(b"\0")
        h.update(p if isinstance(p, bytes) else str(p).encode())
    return h.hexdigest()


def load(backend: str, k: str) -> bytes | None:
    if not enabled():
        return None
    path = cache_dir() / backend / k[:2] / k
    try:
        data = path.read_bytes()
    except OSError:
        return None
    count("disk_hits")
    return data


def store(backend: str, k: str, data: bytes) -> None:
    if not enabled():
        return
    folder = cache_dir() / backend / k[:2]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, folder / k)
    except OSError:
        pass  # a read-only or full disk only costs recompilation


def count(what: str) -> None:
    with _LOCK:
        STATS[what] += 1


def stats() -> dict:
    """How many kernels were compiled, found on disk, found in memory in this process."""
    return dict(STATS)


def dump(name: str, source: str, ext: str) -> None:
    d = os.environ.get("KERNELDSL_DUMP")
    if not d:
        return
    Path(d).mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    (Path(d) / f"{name}.{digest}.{ext}").write_text(source)
