"""The kerneldsl pytest plugin (entry point `kerneldsl.testing.plugin`, so installing rudnn
enables it): the `runtime` fixture over every available runtime, narrowed by
$KERNELDSL_RUNTIMES; the `feature` marker; the feature x runtime matrix after the run; and a
failure for any skip that gives no reason. Runtimes are probed only once a test asks for one."""
from __future__ import annotations

import gc
import os

import pytest

from .choices import ENV_VAR, RuntimeChoice, RuntimeSelectionError, runtime_choices
from .matrix import NO_RUNTIME, FeatureMatrix

_MATRIX = pytest.StashKey[FeatureMatrix]()
_MATRIX_PROPERTY = "kerneldsl_matrix"  # a report's (feature, column, outcome) for the matrix
_CHOICES = pytest.StashKey[list]()
REASONLESS = ("", "Skipped", "unconditional skip")  # pytest's words for a skip given no reason


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "feature(name): the DSL feature or operator a test covers "
                                       "(its row in the feature x runtime matrix)")
    config.addinivalue_line("markers", "interpreter: also run this test on the interpreter runtime (slow, so "
                                       "tests opt in; kd.testing.interpreted)")
    config.addinivalue_line("markers", "variants_sampled: every case on a runtime's default variant, only the "
                                       "first case on its other variants (the cpu at plane size 8); "
                                       "kd.testing.variants_sampled")
    config.stash[_MATRIX] = FeatureMatrix()
    config.pluginmanager.register(_MatrixRecorder(config.stash[_MATRIX]), "kerneldsl-matrix")
    if os.environ.get(ENV_VAR, "").strip():
        _choices(config)  # a runtime asked for and missing stops the run before any test


def _choices(config: pytest.Config) -> list:
    if _CHOICES not in config.stash:
        try:
            config.stash[_CHOICES] = runtime_choices(opt_in=True)
        except RuntimeSelectionError as e:
            raise pytest.UsageError(str(e)) from None
    return config.stash[_CHOICES]


def _parametrized_by_test(metafunc: pytest.Metafunc) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "runtime" in names:
            return True
    return False


@pytest.hookimpl(tryfirst=True)  # the runtime leads the test id: test_x[cpu-...], as -k selections expect
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that takes `runtime` (directly or through its fixtures) runs once per runtime
    choice, with the choice's id ("cpu", "cpu-p8", "opencl:1", "cuda") in the test id. Opt-in runtimes
    (the interpreter) only for tests marked `interpreter`."""
    if "runtime" in metafunc.fixturenames and not _parametrized_by_test(metafunc):
        opted = metafunc.definition.get_closest_marker("interpreter") is not None
        choices = [c for c in _choices(metafunc.config) if opted or not c.opt_in]
        metafunc.parametrize("runtime", choices, ids=[c.id for c in choices], indirect=True)


SAMPLED = ("sampled: on {variant} this test runs its first case only (variants_sampled: compile-bound "
           "cases that differ in options the variant does not interact with; every case runs on {base})")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Tests marked `variants_sampled` run their first case on a runtime's variants (choices
    opened with options: the cpu at plane size 8) and skip the others, saying why."""
    first = set()
    for item in items:
        callspec = getattr(item, "callspec", None)
        choice = callspec.params.get("runtime") if callspec is not None else None
        if not isinstance(choice, RuntimeChoice) or not choice.options:
            continue
        if item.get_closest_marker("variants_sampled") is None:
            continue
        key = (item.path, item.cls, item.originalname, choice.id)
        if key in first:
            item.add_marker(pytest.mark.skip(reason=SAMPLED.format(variant=choice.id, base=choice.name)))
        else:
            first.add(key)


@pytest.fixture
def runtime(request: pytest.FixtureRequest):
    """A kerneldsl runtime; the test runs once on each (see kd.testing.runtime_choices)."""
    import kerneldsl as kd
    choice = request.param
    return choice.open() if isinstance(choice, RuntimeChoice) else kd.runtime(choice)


@pytest.fixture(autouse=True)
def _kerneldsl_guard():
    """Under $KERNELDSL_GUARD (kerneldsl/guard.py), a test whose buffers were written past
    their end fails at teardown, naming them; nothing happens with the guard off."""
    from kerneldsl import guard
    if not guard.enabled():
        yield
        return
    before = guard.violations()  # freed between tests: an earlier test's
    yield
    gc.collect(1)  # young reference cycles freed (and their buffers checked) now; the rest at the end
    found = [f"{v} (freed before this test began)" for v in before] + guard.violations()
    if found:
        pytest.fail("writes past the end of a buffer:\n" + "\n".join(found), pytrace=False)


def _column(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    choice = callspec.params.get("runtime", NO_RUNTIME) if callspec is not None else NO_RUNTIME
    return choice.id if isinstance(choice, RuntimeChoice) else getattr(choice, "name", str(choice))


def _feature(item: pytest.Item) -> str | None:
    """The matrix row of a test: its `feature` marker, else its module's name for a test that
    takes `runtime`; None for tests that are neither (another project's tests stay out)."""
    mark = item.get_closest_marker("feature")
    if mark is not None:
        return str(mark.args[0])
    if "runtime" in getattr(item, "fixturenames", ()):
        return item.module.__name__.split(".")[-1].removeprefix("test_")
    return None


def _skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple):
        reason = report.longrepr[2].strip()
        return reason.removeprefix("Skipped: ") if reason.startswith("Skipped: ") else reason
    return str(report.longrepr or "").strip()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    feature = _feature(item)
    if feature is None or (report.when != "call" and report.passed):
        return  # (a failed setup or teardown, e.g. guard bytes overwritten, marks the cell too)
    if report.skipped and not hasattr(report, "wasxfail") and _skip_reason(report) in REASONLESS:
        report.outcome = "failed"  # no silent skips: whoever skips says why
        report.longrepr = (f"{item.nodeid}: skipped without a reason; pass one, "
                           f"e.g. pytest.skip(\"{_column(item)} has no fp64\")")
    outcome = "pass" if report.passed else "skip" if report.skipped else "FAIL"
    # recorded from the report (pytest_runtest_logreport), which pytest-xdist sends from its
    # worker processes to the one that prints the summary
    report.user_properties.append((_MATRIX_PROPERTY, (feature, _column(item), outcome)))


class _MatrixRecorder:
    """Records the matrix outcomes reports carry, in the process that prints the summary."""

    def __init__(self, matrix: FeatureMatrix):
        self.matrix = matrix

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == _MATRIX_PROPERTY:
                self.matrix.record(*value)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """Under $KERNELDSL_GUARD: buffers freed only now (older reference cycles) are checked too,
    and a write past the end of any fails the run."""
    from kerneldsl import guard
    if not guard.enabled():
        return
    gc.collect()
    found = guard.violations()
    if found:
        print("\nkerneldsl guard: writes past the end of a buffer, found after the last test:\n" + "\n".join(found))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    matrix = config.stash.get(_MATRIX, None)
    if not matrix:
        return
    import kerneldsl as kd
    terminalreporter.section("feature x runtime matrix")
    for line in matrix.lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line("")
    for status in kd.runtime_report():  # what each column ran on, and what was left out and why
        if status.available:
            terminalreporter.write_line(f"{status.name}: {status.device}")
        else:
            terminalreporter.write_line(f"left out: {status.name} on {status.device}: {status.reason}")
