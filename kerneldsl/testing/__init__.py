"""kd.testing: the cross-runtime conformance harness for your own kernels.

- the pytest plugin (enabled by installing rudnn): a `runtime` fixture over every available
  runtime, narrowed by $KERNELDSL_RUNTIMES, and the feature x runtime matrix after the run;
- `feature(name)`: the marker naming a test's row in that matrix; `interpreted`: the marker that
  runs a test on the interpreter runtime too (slow, so tests opt in); `variants_sampled`: the
  marker that runs only a test's first case on a runtime's variants (the cpu at plane size 8);
- `assert_runtimes_agree(kernel, grid, block, *args)`: one launch on every runtime, outputs
  compared; `assert_close(actual, expected)`: dtype-aware tolerances, NaN/inf matched exactly.

See docs/testing.md. Importing this module does not import pytest.
"""
from __future__ import annotations

from .agree import assert_runtimes_agree
from .choices import RuntimeChoice, RuntimeSelectionError, runtime_choices
from .compare import TOLERANCES, assert_close, tolerance


def feature(name: str):
    """`@kd.testing.feature("softmax")`: the test's row in the feature x runtime matrix
    (`pytest.mark.feature(name)`; a whole module: `pytestmark = kd.testing.feature(...)`)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"kd.testing.feature needs a non-empty name, got {name!r}")
    import pytest
    return pytest.mark.feature(name)


def __getattr__(name: str):
    """`kd.testing.interpreted`: the marker that runs a test (or, as `pytestmark`, a module) on the
    interpreter runtime too (slow: tests opt in). `kd.testing.variants_sampled`: the marker that
    runs every case of a test on a runtime's default variant but only its first on the other
    variants (the cpu at plane size 8), for compile-bound sweeps. Made on first use: importing
    kd.testing does not import pytest."""
    if name == "interpreted":
        import pytest
        return pytest.mark.interpreter
    if name == "variants_sampled":  # (for compile-bound tests: the plugin's pytest_collection_modifyitems)
        import pytest
        return pytest.mark.variants_sampled
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RuntimeChoice", "RuntimeSelectionError", "TOLERANCES", "assert_close", "assert_runtimes_agree",
           "feature", "runtime_choices", "tolerance"]
