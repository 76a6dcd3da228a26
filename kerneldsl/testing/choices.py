"""Which runtimes a conformance run covers: every available runtime (the cpu at two plane
sizes), narrowed by `$KERNELDSL_RUNTIMES`. Plain Python, no pytest: the `runtime` fixture
and `assert_runtimes_agree` draw on the same list, so both cover the same runtimes."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

ENV_VAR = "KERNELDSL_RUNTIMES"

# the cpu runs at its default plane size (32 lanes, as a CUDA warp) and at 8, so kernels that
# assume a plane size, or split work unevenly across planes, fail on one of the two
CPU_VARIANTS = (("cpu", {}), ("cpu-p8", {"plane_dim": 8}))


# runtimes too slow for every test: a test (or module) opts in with the `interpreter` marker
# (`kd.testing.interpreted`); assert_runtimes_agree includes them only when named
OPT_IN = ("interpreter",)


class RuntimeSelectionError(ValueError):
    """`$KERNELDSL_RUNTIMES` names a runtime this machine does not have (never a silent skip)."""


@dataclass(frozen=True)
class RuntimeChoice:
    """One column of the conformance matrix: a runtime name and the options it is opened with.
    `id` is the test id ("cpu", "cpu-p8", "opencl:1", "cuda")."""

    id: str
    name: str
    options: dict = field(default_factory=dict, hash=False, compare=False)
    opened: object = field(default=None, hash=False, compare=False, repr=False)  # a runtime object given

    @property
    def opt_in(self) -> bool:
        """Whether only tests that opt in run on this runtime (the interpreter: slow)."""
        return self.name in OPT_IN

    def open(self):
        """The runtime object, `kd.runtime(name, **options)` (one per choice, reused)."""
        if self.opened is not None:
            return self.opened
        import kerneldsl as kd
        return kd.runtime(self.name, **self.options)

    def __str__(self) -> str:
        return self.id


def _choices_of(name: str) -> list:
    if name == "cpu":
        return [RuntimeChoice(cid, "cpu", opts) for cid, opts in CPU_VARIANTS]
    return [RuntimeChoice(name, name, {})]


def _normalise(entry: str) -> str:
    """'opencl:0' and 'opencl' name the same device; runtime names are lower case."""
    entry = entry.strip().lower()
    return entry[:-2] if entry.endswith(":0") else entry


def runtime_choices(wanted: str | None = None, available: list | None = None, opt_in: bool = False) -> list:
    """The runtimes to test on, in order (the first is the reference of `assert_runtimes_agree`).

    `wanted` is a comma-separated list as in `$KERNELDSL_RUNTIMES` (read from the environment
    when None; empty means every available runtime). An entry that is a runtime name ("cpu",
    "opencl:1") selects every variant of it; an entry that is a test id ("cpu-p8") selects that
    variant only. An entry this machine lacks raises RuntimeSelectionError, naming what it has.
    `available` defaults to `kd.available_runtimes()`. Opt-in runtimes (OPT_IN: the interpreter)
    are left out unless `wanted` names them or `opt_in` is set."""
    if available is None:
        import kerneldsl as kd
        available = kd.available_runtimes()
    every = [c for name in available for c in _choices_of(name)]
    if wanted is None:
        wanted = os.environ.get(ENV_VAR, "")
    entries = [_normalise(w) for w in wanted.split(",") if w.strip()]
    if not entries:
        return [c for c in every if opt_in or not c.opt_in]
    picked, missing = [], []
    for entry in entries:
        match = [c for c in every if c.name == entry] or [c for c in every if c.id == entry]
        if not match:
            missing.append(entry)
        picked += [c for c in match if c not in picked]
    if missing:
        raise RuntimeSelectionError(
            f"{ENV_VAR} asks for {', '.join(missing)}, but this machine has {', '.join(c.id for c in every)} "
            f"(kd.runtime_report() says why a runtime is missing)")
    return picked
