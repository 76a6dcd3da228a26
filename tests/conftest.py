"""Our suite on the kd.testing plugin (the `runtime` fixture, the feature x runtime matrix),
plus what only this suite wants: a seeded `rng`, `tol` for `from conftest import tol`, a
kernel cache inside the checkout, guard bytes after every buffer, and every test in the
matrix (its module names the row)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# compiled kernels of test runs go to a cache inside the checkout (gitignored) unless the
# caller chose one; a fresh clone compiles once, later runs reuse it
os.environ.setdefault("KERNELDSL_CACHE", str(Path(__file__).resolve().parent.parent / ".kdcache"))
# every buffer carries guard bytes, read back when it is freed: a write past the end of a tensor
# fails the test that made it (kerneldsl/guard.py; KERNELDSL_GUARD=0 turns it off)
os.environ.setdefault("KERNELDSL_GUARD", "1")

from kerneldsl.testing import tolerance as tol  # noqa: E402,F401  ((rtol, atol) per dtype, for tests)

# installed, rudnn's entry point has loaded the plugin and this is a no-op; it covers runs
# with plugin autoloading off (PYTEST_DISABLE_PLUGIN_AUTOLOAD)
pytest_plugins = ["kerneldsl.testing.plugin", "pytester"]  # pytester: tests of the plugin itself


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def launches(monkeypatch):
    """A one-element counter of kernel launches (validation must fail before any)."""
    from family_checks import count_launches
    return count_launches(monkeypatch)


def pytest_collection_modifyitems(items):
    """Every test of ours has a matrix row: a test with no `feature` marker gets its module's."""
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and item.get_closest_marker("feature") is None:
            item.add_marker(pytest.mark.feature(module.__name__.split(".")[-1].removeprefix("test_")))


@pytest.fixture(autouse=True)
def _no_replays_from_other_tests():
    """Every test starts with no recorded operator calls (kerneldsl/replay.py): tests
    monkeypatch tuning constants, which a record made before would not see."""
    import kerneldsl as kd
    kd.replay.clear()
