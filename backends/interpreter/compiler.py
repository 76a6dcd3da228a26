"""Python source -> a code object whose lines are the kernel's own.

The generated text is parsed, every node is given the user's line of the IR statement it came
from (the renderer's line map), and the tree is compiled under the user's file name: a
traceback through a kernel, and pdb inside one, show the kernel's file and lines.
"""
from __future__ import annotations

import ast
import linecache
import types

import numpy as np

from .renderer import Rendering


def compile_rendering(rendering: Rendering, filename: str) -> types.CodeType:
    """The module code of `rendering`, its line numbers mapped to the kernel's in `filename`."""
    tree = ast.parse(rendering.source)
    lines = rendering.lines
    for node in ast.walk(tree):
        if "lineno" in node._attributes and getattr(node, "lineno", None) is not None:
            line = lines[node.lineno - 1]
            node.lineno = node.end_lineno = line
            # columns of the generated text mean nothing in the user's line: every node spans the
            # whole statement there (tracebacks then print the line without carets)
            node.col_offset, node.end_col_offset = _statement_columns(filename, line)
    return compile(tree, filename, "exec")


def _statement_columns(filename: str, line: int) -> tuple:
    """(first, end) columns (UTF-8 bytes, as ast counts) of the text of `line` in `filename`; (0, 0)
    where it cannot be read."""
    text = linecache.getline(filename, line).rstrip().encode()
    body = text.lstrip()
    return (len(text) - len(body), len(text)) if body else (0, 0)


def unit_function(rendering: Rendering, filename: str) -> types.FunctionType:
    """The unit generator of a rendering (its only function), defined in a namespace of its constants."""
    namespace = {"np": np, "range": range, "int": int, "__name__": "kerneldsl_interpreted"}
    namespace.update(rendering.consts)
    exec(compile_rendering(rendering, filename), namespace)  # noqa: S102  (our own generated code)
    return next(v for v in namespace.values() if isinstance(v, types.FunctionType))
