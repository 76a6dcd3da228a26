"""The DSL's builtins (`kd.cube_pos_x`, `kd.plane_sum`, `kd.exp`, ...), one module per topic.

Each builtin is declared once, with its front-end handler and its line of documentation,
in `registry.REGISTRY` (see `registry.py`); importing this package declares them all, in
the order of the reference in docs/dsl.md.
"""
from __future__ import annotations

# in the order of the reference (a module imports only those before it)
from . import positions, memory, values, math, vectors, async_copy, plane, atomics  # noqa: F401,I001
from . import fragments, fragment_elements, group, arrival, bulk_copy, roles, debug  # noqa: F401,I001
from .registry import REGISTRY, Builtin, builtin, declare, lookup

__all__ = ["REGISTRY", "Builtin", "builtin", "declare", "lookup", "reference"]


def reference() -> str:
    """The builtin reference of docs/dsl.md: one line per builtin, `kd.name(params)`: doc."""
    return "\n".join(f"- `{b.usage()}`: {b.doc}" for b in REGISTRY.values())
