"""Reading a kernel's or device function's Python source: its AST, file and line offset,
and the names its body assigns (which decide what becomes a run-time variable).

`@kd.func` lives here too: a device function is only a source to inline at each call.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass

from .errors import CompileError


class DeviceFunction:
    """A function marked `@kd.func`: inlined into the kernels that call it."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a @kd.func: call it from a kernel")


def func(fn):
    """Mark a Python function as a device function callable from kernels (inlined)."""
    return DeviceFunction(fn)


@dataclass
class ParsedSource:
    """A function's AST with where it came from (for error locations) and its namespaces."""
    tree: ast.FunctionDef
    filename: str
    line_offset: int
    col_offset: int
    globals: dict
    closure: dict


def source_lines(fn, text: str | None = None) -> tuple:
    """(lines, first line number) of `fn`'s definition: from `text` when given, else from
    its file, else from the interactive history that IPython and Jupyter keep in
    `linecache` (cells named like `<ipython-input-3-...>`); a clear error otherwise."""
    if text is not None:
        return textwrap.dedent(text).splitlines(keepends=True), 1
    code = getattr(fn, "__code__", None)
    # read the history entry first: inspect's linecache.checkcache drops entries whose
    # "file" does not exist on disk, as a notebook cell's does not
    entry = linecache.cache.get(code.co_filename) if code is not None else None
    try:
        return inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        why = e
    history = entry[2] if entry is not None and len(entry) >= 3 else []
    if history and 0 < code.co_firstlineno <= len(history):
        return inspect.getblock(history[code.co_firstlineno - 1:]), code.co_firstlineno
    where = f" (defined in {code.co_filename})" if code is not None else ""
    raise CompileError(
        f"cannot read the source of {fn.__name__}{where}: {why}. A kernel defined at the plain `python` prompt "
        f"or through exec() has no source to read: put it in a file (a module or script), define it in "
        f"IPython or Jupyter (they keep cell sources), or give the text: kd.kernel({fn.__name__}, "
        f"source=text)") from None


def parse_source(fn, text: str | None = None) -> ParsedSource:
    """Parse `fn`'s source (or `text`, its definition); its AST's line numbers plus
    `line_offset` are the file's."""
    lines, start = source_lines(fn, text)
    src = "".join(lines)
    dedented = textwrap.dedent(src)
    indent = len(lines[0]) - len(lines[0].lstrip())
    module = ast.parse(dedented)
    fdef = next(n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    closure = {}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:
                pass
    return ParsedSource(fdef, inspect.getsourcefile(fn) or fn.__code__.co_filename, start - 1, indent,
                        fn.__globals__, closure)


def multi_assigned_names(fdef) -> set:
    """Names assigned more than once (or augmented, or annotated): run-time variables."""
    counts: dict = {}

    def count(target, n=1):
        if isinstance(target, ast.Name):
            counts[target.id] = counts.get(target.id, 0) + n
        elif isinstance(target, ast.Tuple):
            for t in target.elts:
                count(t, n)

    for node in ast.walk(fdef):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                count(t)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            count(node.target, 2)
        elif isinstance(node, ast.For):
            count(node.target, 2)
    return {k for k, v in counts.items() if v > 1}


def assigned_names(fdef) -> set:
    """Every name a function body assigns (so a parameter of that name needs its own copy)."""
    out = set()
    for node in ast.walk(fdef):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out.add(n.id)
    return out
