"""Autotuning: time candidate implementations once per key, then remember the fastest.

    from kerneldsl import autotune
    tuner = autotune.tuner("attention")
    name = tuner.choose(key, {"FlashUnit": run_a, "Fallback": run_b}, label="bf16, Sq~4096, D=128")

A key is a tuple of plain values naming what decides speed: the device
(`device_key(runtime)`), the dtype, a shape bucket (`bucket(n)`: powers of two) and the
options that change the kernel. Each candidate is a zero-argument callable that runs the
work once and waits for it; each is called once to warm up (compile), then the candidates
are timed in turn for `reps` rounds (a slow spell of a shared machine falls on all alike),
each keeping its best time. They run with the replay recording paused: the call that tunes
is not recorded anyway, and a record would keep their buffers and time its bookkeeping. A
candidate that raises is never chosen (the message says why: "unavailable", or the error).
Progress goes to stderr while tuning.

Choices are kept in memory and persisted as JSON beside the kernel cache,
`kerneldsl.cache.cache_dir() / "autotune" / "<family>.json"`, so a second process reuses
them without timing anything. A missing, unreadable or corrupted file is ignored (and
rewritten at the next choice); writes go through a temporary file and a rename, and merge
with entries other processes wrote meanwhile. With `KERNELDSL_CACHE=""` choices stay in
memory only.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from . import cache, replay

FORMAT = 1


def bucket(n: int) -> int:
    """The shape bucket of a size: the next power of two (0 stays 0)."""
    n = int(n)
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def device_key(runtime) -> str:
    """What identifies a device for tuning: back end, device name, arch and plane size."""
    caps = runtime.capabilities
    arch = hashlib.sha256(str(caps.arch).encode()).hexdigest()[:12]
    return f"{caps.backend}:{caps.device_name}:{arch}:p{caps.plane_dim}"


def path(family: str) -> Path:
    """The JSON file holding a family's choices."""
    return cache.cache_dir() / "autotune" / f"{family}.json"


def _key_text(key) -> str:
    if isinstance(key, str):
        return key
    return "|".join(str(part) for part in key)


def _read(file: Path) -> dict:
    """Entries of a choices file, or {} when it is missing or not a valid choices file."""
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("choices"), dict):
        return {}
    return {k: v for k, v in data["choices"].items()
            if isinstance(v, dict) and isinstance(v.get("choice"), str)}


def _write(file: Path, entries: dict) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"format": FORMAT, "choices": entries}, f, indent=1, sort_keys=True)
        os.replace(tmp, file)
    except OSError:
        pass  # a read-only cache only costs re-tuning in the next process


def _fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


class Tuner:
    """Choices of one operator family (one JSON file). Thread-safe."""

    def __init__(self, family: str, reps: int = 3, quiet: bool = False, clock: Callable[[], float] = None):
        if not family or any(c in family for c in "/\\"):
            raise ValueError(f"autotune family must be a plain name, got {family!r}")
        self.family = family
        self.reps = reps
        self.quiet = quiet
        self.clock = clock or time.perf_counter
        self._memory: dict = {}
        self._disk_loaded = False
        self._lock = threading.RLock()
        self.tuned = 0  # how many keys this process timed (for tests and curiosity)

    # ------------------------------------------------------------------ lookup
    def _disk(self) -> dict:
        if not cache.enabled():
            return {}
        return _read(path(self.family))

    def lookup(self, key, names=None) -> str | None:
        """The remembered choice for `key` (memory, then disk), if it is one of `names`."""
        text = _key_text(key)
        with self._lock:
            entry = self._memory.get(text)
            if entry is None and not self._disk_loaded:
                self._memory.update({k: v for k, v in self._disk().items() if k not in self._memory})
                self._disk_loaded = True
                entry = self._memory.get(text)
            if entry is None:
                return None
            choice = entry["choice"]
            return choice if names is None or choice in names else None

    def forget(self) -> None:
        """Drop what this process remembers (the file stays)."""
        with self._lock:
            self._memory.clear()
            self._disk_loaded = False

    # ------------------------------------------------------------------ tuning
    def choose(self, key, candidates: Mapping[str, Callable[[], object]], label: str = "") -> str:
        """The name of the fastest candidate for `key`, timing them if `key` is new."""
        if not candidates:
            raise ValueError(f"autotune {self.family}: no candidates for {label or _key_text(key)}")
        with self._lock:
            known = self.lookup(key, set(candidates))
            if known is not None:
                return known
            return self._tune(key, candidates, label)

    def _tune(self, key, candidates, label) -> str:
        text = _key_text(key)
        rec = replay.active()
        if rec is not None:  # the call being recorded also ran every candidate: not a record to replay
            rec.refuse("autotuning")
        with replay.paused():  # (the candidates' launches and buffers are not recorded)
            return self._timed_choice(text, candidates, label)

    def _timed_choice(self, text: str, candidates, label) -> str:
        """Warm every candidate up once, then time them in turn, `reps` rounds (a machine's
        slow spell then falls on every candidate alike), each keeping its best."""
        say = (lambda s: None) if self.quiet else (lambda s: (sys.stderr.write(s), sys.stderr.flush()))
        say(f"tuning {self.family} [{label or text}]: ")
        times: dict = {}
        errors: dict = {}

        def failed(name, e):
            times[name] = None
            errors[name] = e

        for name, run in candidates.items():
            try:
                run()  # warm-up: compiles, fills caches
                times[name] = float("inf")
            except Exception as e:  # noqa: BLE001  (a failing candidate is reported and never chosen)
                failed(name, e)
        for _ in range(self.reps):
            for name, run in candidates.items():
                if times[name] is None:
                    continue
                try:
                    t0 = self.clock()
                    run()
                    times[name] = min(times[name], self.clock() - t0)
                except Exception as e:  # noqa: BLE001
                    failed(name, e)
        for n, name in enumerate(candidates):
            sep = ", " if n else ""
            if times[name] is None:
                e = errors[name]
                why = "unavailable" if "unavailable" in str(e) else f"failed ({type(e).__name__}: {e})"
                say(f"{sep}{name} {why}")
            else:
                say(f"{sep}{name} {_fmt_time(times[name])}")
        ok = {n: t for n, t in times.items() if t is not None}
        if not ok:
            say(" -> nothing ran\n")
            raise next(iter(errors.values()))
        choice = min(ok, key=ok.get)
        say(f" -> {choice}\n")
        ms = {n: (None if t is None else round(t * 1e3, 4)) for n, t in times.items()}
        entry = {"choice": choice, "times_ms": ms, "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
        self._memory[text] = entry
        self.tuned += 1
        if cache.enabled():
            merged = _read(path(self.family))
            merged[text] = entry
            _write(path(self.family), merged)
        return choice


def waited(runtime, run: Callable[[], object]) -> Callable[[], None]:
    """A candidate from `run` (a call that queues work on `runtime`): it runs it, then waits
    for the runtime, so that its timing holds the work and not only its enqueueing."""
    def go():
        run()
        runtime.synchronize()
    return go


_TUNERS: dict = {}
_TUNERS_LOCK = threading.Lock()


def tuner(family: str) -> Tuner:
    """The process-wide tuner of an operator family."""
    with _TUNERS_LOCK:
        t = _TUNERS.get(family)
        if t is None:
            t = _TUNERS[family] = Tuner(family)
        return t


__all__ = ["Tuner", "tuner", "bucket", "device_key", "path", "FORMAT"]
