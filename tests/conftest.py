"""Shared fixtures: the `runtime` fixture (every available runtime, the CPU at two plane
sizes), tolerances per dtype, and the feature x runtime matrix printed at the end."""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

# compiled kernels of test runs go to a cache inside the checkout (gitignored) unless the
# caller chose one; a fresh clone compiles once, later runs reuse it
os.environ.setdefault("KERNELDSL_CACHE", str(Path(__file__).resolve().parent.parent / ".kdcache"))

import kerneldsl as kd  # noqa: E402


def _runtime_names():
    avail = kd.available_runtimes()
    wanted = os.environ.get("KERNELDSL_RUNTIMES")
    if wanted:
        names = [w.strip() for w in wanted.split(",") if w.strip()]
        missing = [n for n in names if n.split(":")[0] not in avail]
        if missing:
            raise pytest.UsageError(f"KERNELDSL_RUNTIMES asks for {missing}, but this machine has {avail}")
        avail = names
    params = []
    for name in avail:
        if name.split(":")[0] == "cpu":
            params.append(pytest.param(("cpu", {}), id="cpu"))
            params.append(pytest.param(("cpu", {"plane_dim": 8}), id="cpu-p8"))
        else:
            params.append(pytest.param((name, {}), id=name))
    return params


RUNTIME_PARAMS = _runtime_names()


@pytest.fixture(params=RUNTIME_PARAMS)
def runtime(request):
    name, opts = request.param
    request.node._kd_runtime = name + (f"-p{opts['plane_dim']}" if opts else "")
    return kd.runtime(name, **opts)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def tol(dtype):
    """(rtol, atol) for comparing a result computed in `dtype` storage."""
    d = kd.as_dtype(dtype)
    return {"f32": (2e-5, 1e-6), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2), "f64": (1e-12, 1e-14)}.get(
        d.name, (0, 0))


# ------------------------------------------------------------------ feature matrix
_MATRIX: dict = defaultdict(dict)


def pytest_configure(config):
    config.addinivalue_line("markers", "feature(name): the DSL feature or operator a test covers (matrix row)")


def pytest_runtest_makereport(item, call):
    if call.when != "call" and not (call.when == "setup" and call.excinfo is not None):
        return
    mark = item.get_closest_marker("feature")
    feature = mark.args[0] if mark else item.module.__name__.split(".")[-1].removeprefix("test_")
    rt = getattr(item, "_kd_runtime", "-")
    if call.excinfo is None:
        outcome = "pass"
    elif call.excinfo.errisinstance(pytest.skip.Exception):
        outcome = "skip"
    else:
        outcome = "FAIL"
    cell = _MATRIX[feature]
    prev = cell.get(rt)
    rank = {"FAIL": 3, "skip": 1, "pass": 2}
    if prev is None or rank[outcome] > rank[prev]:
        cell[rt] = outcome


def pytest_terminal_summary(terminalreporter):
    if not _MATRIX:
        return
    cols = sorted({rt for row in _MATRIX.values() for rt in row}, key=lambda c: (c == "-", c))
    w = max(len("feature"), *(len(f) for f in _MATRIX)) + 2
    width = max(9, *(len(c) + 2 for c in cols))
    tr = terminalreporter
    tr.section("feature x runtime matrix")
    tr.write_line("feature".ljust(w) + "".join(c.ljust(width) for c in cols))
    for feature in sorted(_MATRIX):
        row = _MATRIX[feature]
        tr.write_line(feature.ljust(w) + "".join(row.get(c, ".").ljust(width) for c in cols))
    tr.write_line("")
    for status in kd.runtime_report():  # what each column ran on, and what was left out and why
        if status.available:
            tr.write_line(f"{status.name}: {status.device}")
        else:
            tr.write_line(f"left out: {status.name} on {status.device}: {status.reason}")
