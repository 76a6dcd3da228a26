"""The compiled-kernel cache on disk ($KERNELDSL_CACHE, else the user cache dir), one layout
for every back end.

An entry is found by a key computed *before* the front end runs (see
`fingerprint.py`): the kernel's source and everything it reads, its specialisation,
the runtime's device and toolchain identity and the package's own source. It holds
what a launch needs with no IR at all: the binary and a small JSON record of launch
facts (parameters, argument layout, shared-memory size, ...). File layout:

    <cache dir>/kernels/<key[:2]>/<key>:
        magic b"KDCE", format version (u16), metadata length (u32), image length (u64),
        sha256 of metadata + image (32 bytes), metadata (UTF-8 JSON), image (bytes)

Writes go to a temporary file renamed into place, so concurrent processes are safe; an
entry whose header, length or checksum does not verify is discarded with a warning and
rebuilt. `KERNELDSL_DUMP=dir` additionally writes every generated source there.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from .version import __version__

STATS = {"compiled": 0, "disk_hits": 0, "memory_hits": 0, "specialized": 0, "rendered": 0}
_LOCK = threading.Lock()

MAGIC = b"KDCE"
FORMAT = 1
_HEADER = struct.Struct("<4sHIQ32s")  # magic, format, metadata bytes, image bytes, sha256


@dataclass
class Entry:
    """One cached kernel: launch facts (JSON-able dict) and the compiled image."""
    meta: dict
    image: bytes


def cache_dir() -> Path:
    """The cache's root folder ($KERNELDSL_CACHE, else the per-user cache dir)."""
    d = os.environ.get("KERNELDSL_CACHE")
    if d:
        return Path(d)
    try:
        import platformdirs  # well-kept, per-OS cache locations (XDG on Linux, ~/Library/Caches, ...)
    except ImportError:  # a machine with only the core packages (e.g. a GPU box): the XDG default
        return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kerneldsl"
    return Path(platformdirs.user_cache_dir("kerneldsl"))


def enabled() -> bool:
    """False when $KERNELDSL_CACHE is set to the empty string (no disk cache at all)."""
    return os.environ.get("KERNELDSL_CACHE", "x") != ""


def key(*parts) -> str:
    """A hex sha256 of the package version and `parts` (bytes, or anything str() spells)."""
    h = hashlib.sha256()
    h.update(f"kerneldsl-{__version__}".encode())
    for p in parts:
        h.update(b"\0")
        h.update(p if isinstance(p, bytes) else str(p).encode())
    return h.hexdigest()


def entry_path(k: str) -> Path:
    """Where the entry of key `k` lives."""
    return cache_dir() / "kernels" / k[:2] / k


def encode(entry: Entry) -> bytes:
    """An entry's bytes on disk: header, metadata, image."""
    meta = json.dumps(entry.meta, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(meta + entry.image).digest()
    return _HEADER.pack(MAGIC, FORMAT, len(meta), len(entry.image), digest) + meta + entry.image


def decode(data: bytes) -> Entry:
    """The entry in `data`; ValueError naming what is wrong when it does not verify."""
    if len(data) < _HEADER.size:
        raise ValueError(f"{len(data)} bytes is shorter than the {_HEADER.size}-byte header")
    magic, fmt, nmeta, nimage, digest = _HEADER.unpack_from(data)
    if magic != MAGIC or fmt != FORMAT:
        raise ValueError(f"not a format-{FORMAT} kernel entry (magic {magic!r}, format {fmt})")
    body = data[_HEADER.size:]
    if len(body) != nmeta + nimage:
        raise ValueError(f"the header promises {nmeta + nimage} bytes after it, the file has {len(body)}")
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("the checksum does not match the contents")
    meta = json.loads(body[:nmeta].decode())
    return Entry(meta, bytes(body[nmeta:]))


def load(k: str | None) -> Entry | None:
    """The entry stored under `k`, or None (no key, cache off, missing or damaged entry:
    a damaged one is removed, with a warning, so it is rebuilt)."""
    if k is None or not enabled():
        return None
    path = entry_path(k)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        entry = decode(data)
    except ValueError as e:
        log().warning("kerneldsl: discarding damaged kernel cache entry %s: %s", path, e)
        discard(k)
        return None
    count("disk_hits")
    return entry


def discard(k: str) -> None:
    """Remove the entry of `k` (a damaged or unloadable one); missing is fine."""
    try:
        entry_path(k).unlink()
    except OSError:
        pass


def store(k: str | None, entry: Entry) -> None:
    """Write `entry` under `k` atomically (no-op without a key or with the cache off)."""
    if k is None or not enabled():
        return
    path = entry_path(k)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(encode(entry))
        os.replace(tmp, path)
    except OSError as e:  # a read-only or full disk, or a path that is a file: recompile, say so once
        _report_unusable(path.parent, e)


_REPORTED: set = set()


def _report_unusable(folder, error: OSError) -> None:
    """Warn once per process and folder that compiled kernels cannot be stored there."""
    root = str(cache_dir())
    with _LOCK:
        if root in _REPORTED:
            return
        _REPORTED.add(root)
    log().warning("kerneldsl: the kernel cache %s is unusable (%s: %s); kernels will be compiled in "
                  "every process. Set KERNELDSL_CACHE to a writable folder, or to an empty value to "
                  "turn the cache off", root, type(error).__name__, error)


def log():
    """The cache's logger ("kerneldsl.cache"; logging is imported only when something is said)."""
    import logging
    return logging.getLogger("kerneldsl.cache")


def count(what: str) -> None:
    """Add one to the statistic `what` (see `stats`). No lock: every launch counts a memory
    hit, and a count two threads raise at the same instant may lose one (they are statistics)."""
    STATS[what] += 1


def stats() -> dict:
    """This process's counts: kernels compiled, found on disk, found in memory, run through
    the front end ("specialized") and rendered to source ("rendered")."""
    return dict(STATS)


def dump(name: str, source: str, ext: str) -> None:
    """Write a generated source to $KERNELDSL_DUMP (when set), named by kernel and digest."""
    d = os.environ.get("KERNELDSL_DUMP")
    if not d:
        return
    Path(d).mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    (Path(d) / f"{name}.{digest}.{ext}").write_text(source)


def _disk_entries() -> list:
    """The entry files under the cache's kernels/ folder (none when it does not exist)."""
    root = cache_dir() / "kernels"
    if not root.is_dir():
        return []
    return [p for p in root.glob("*/*") if p.is_file() and not p.name.endswith(".tmp")]


def cache_info() -> dict:
    """`kd.cache_info()`: where the disk cache is and what it holds (entries, bytes), how
    many compiled kernels this process holds in memory, and this process's `stats()`."""
    from .kernel import loaded_kernels  # (imported here: kernel.py imports this module)
    files = _disk_entries() if enabled() else []
    kernels = loaded_kernels()
    return {
        "dir": str(cache_dir()) if enabled() else None,
        "disk_entries": len(files),
        "disk_bytes": sum(p.stat().st_size for p in files),
        "memory_entries": sum(len(k._binaries) for k in kernels),
        "stats": stats(),
    }


def cache_clear(disk: bool = True, memory: bool = True) -> None:
    """`kd.cache_clear()`: forget compiled kernels, so the next launch of each compiles
    again: those held in this process (`memory`) and the entries on disk (`disk`)."""
    if memory:
        from .kernel import loaded_kernels
        from .runtime import loaded_runtimes
        for k in loaded_kernels():
            k.forget_binaries()
        for rt in loaded_runtimes():
            rt._kernels.clear()
    if disk and enabled():
        for p in _disk_entries():
            try:
                p.unlink()
            except OSError:
                pass  # another process removed it, or a read-only cache
