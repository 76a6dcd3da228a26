"""rudnn: neural-network operators written once in kerneldsl, run on every runtime.

Each operator family (SPEC.md) is a subpackage found here, not listed: a package
beside this file with a `problem.py` is a family (docs/families.md gives the layout).
`rudnn.<family>` imports it on first use, and each family's error class (the
`rudnn.RudnnError` subclass in its `__all__`) is also importable from `rudnn`.
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from .errors import RudnnError

_HERE = Path(__file__).parent


def families() -> tuple:
    """The names of the operator families, sorted: subpackages holding a problem.py."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules([str(_HERE)])
                        if m.ispkg and not m.name.startswith("_") and (_HERE / m.name / "problem.py").is_file()))


def family_error(family: str) -> type:
    """The error class a family raises: the one RudnnError subclass its `__all__` exports."""
    module = importlib.import_module(f"{__name__}.{family}")
    errors = [obj for obj in (getattr(module, n) for n in module.__all__)
              if isinstance(obj, type) and issubclass(obj, RudnnError)]
    if len(errors) != 1:
        raise ImportError(f"rudnn.{family} must export exactly one RudnnError subclass in __all__, "
                          f"found {[e.__name__ for e in errors]}")
    return errors[0]


def __getattr__(name: str):
    if name in families():
        return importlib.import_module(f"{__name__}.{name}")
    if name.endswith("Error"):
        for family in families():
            error = family_error(family)
            if error.__name__ == name:
                return error
    raise AttributeError(f"module 'rudnn' has no attribute {name!r} (families: {', '.join(families())})")


def __dir__() -> list:
    return sorted(set(globals()) | set(families()))


__all__ = ["RudnnError", "families", "family_error", *families()]
