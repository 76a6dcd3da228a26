"""Dispatch tables shared by the renderers: IR node class -> the name of the method that
lowers it.

Each renderer declares its tables as dict literals (one entry per IR node class, so a
missing one is visible at a glance and fails tests/test_renderers.py) and binds them
once per renderer instance with `bind`; rendering a node is then one dictionary lookup.
Binding per instance (not per class) keeps a dialect's overriding methods, and a test's
monkeypatched ones, in effect.
"""
from __future__ import annotations

from kerneldsl.errors import UnsupportedFeatureError


def bind(renderer, table: dict) -> dict:
    """{IR node class: bound method} for one renderer instance."""
    return {node: getattr(renderer, name) for node, name in table.items()}


def lower(handlers: dict, node, renderer_name: str):
    """Call the handler of `node`'s class, or fail naming the renderer and the node."""
    handler = handlers.get(type(node))
    if handler is None:
        raise NotImplementedError(f"{renderer_name} renderer has no handler for IR node {type(node).__name__}")
    return handler(node)


def needs_async_copy(node, renderer_name: str):
    """The handler of AsyncCopy / AsyncCommit / AsyncWait where a target has no hardware copies."""
    raise UnsupportedFeatureError(
        f"{renderer_name} renderer: {type(node).__name__} reaches a renderer only where Capabilities.async_copy "
        f"is set (the front end lowers kd.async_copy to a plain copy elsewhere)", node.loc)
