"""One record per DSL builtin: the public name, the stub users call as `kd.<name>`, the
front-end handler that turns a call into IR, and one line of documentation.

A topic module declares each builtin once, next to its handler:

    @builtin("a*b + c, one rounding")
    def fma(fe, node, a, b, c):
        ...

The decorator returns the stub, so the module's `fma` *is* `kd.fma`; `lookup(stub)` gives
the front end the record (a dict lookup). A handler receives the front end (`fe`), the
call's AST node (for error locations) and the evaluated arguments: compile-time Python
values, IR expressions, or the handles of `kerneldsl.frontend_values`. It returns the
call's value (None for a statement-like builtin) and emits IR through `fe.emit`.
Handlers made by a factory (one per plane operation, per atomic, ...) are declared with
`declare(name, handler, doc, params)`.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

Handler = Callable[..., Any]  # handler(frontend, node, *args, **kwargs) -> value or None


@dataclass(frozen=True)
class Builtin:
    """A builtin's record: what `kd.<name>` is, how the front end lowers it, what it does."""
    name: str
    doc: str
    handler: Handler
    stub: Callable
    signature: inspect.Signature  # the parameters a kernel passes (without fe and node)

    def usage(self) -> str:
        """`kd.name(params)`, as the documentation lists it."""
        return f"kd.{self.name}{self.signature}"


REGISTRY: dict[str, Builtin] = {}
_BY_STUB: dict[Callable, Builtin] = {}


def lookup(fn) -> Builtin | None:
    """The record of `fn` when it is a builtin's stub (`kd.exp`), else None."""
    try:
        return _BY_STUB.get(fn)
    except TypeError:  # an unhashable value is no builtin
        return None


def _kernel_signature(handler: Handler) -> inspect.Signature:
    """The handler's parameters after (fe, node): what a kernel passes."""
    params = list(inspect.signature(handler).parameters.values())
    if len(params) < 2 or params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        raise TypeError(f"builtin handler {handler.__qualname__} must take (fe, node, ...)")
    return inspect.Signature(params[2:])


def _named_signature(params: str) -> inspect.Signature:
    """A signature from a list of names such as "x, lane" or "*values"."""
    out = []
    for p in (p.strip() for p in params.split(",") if p.strip()):
        if p.startswith("*"):
            out.append(inspect.Parameter(p[1:], inspect.Parameter.VAR_POSITIONAL))
        else:
            out.append(inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    return inspect.Signature(out)


def declare(name: str, handler: Handler, doc: str, params: str | None = None) -> Callable:
    """Register builtin `name` lowered by `handler`, documented by the line `doc`; return
    its stub. `params` ("x, lane") names the parameters when the handler takes `*args`."""
    if name in REGISTRY:
        raise ValueError(f"builtin kd.{name} is declared twice")
    doc = doc.strip()
    if not doc or "\n" in doc:
        raise ValueError(f"builtin kd.{name} needs a one-line doc, got {doc!r}")
    signature = _named_signature(params) if params is not None else _kernel_signature(handler)

    def stub(*args, **kwargs):
        raise RuntimeError(f"kd.{name}() can only be used inside a @kd.kernel function")

    stub.__name__ = stub.__qualname__ = name
    stub.__module__ = "kerneldsl"
    stub.__doc__ = doc
    stub.__signature__ = signature
    record = Builtin(name, doc, handler, stub, signature)
    REGISTRY[name] = record
    _BY_STUB[stub] = record
    return stub


def builtin(doc: str, *, name: str | None = None) -> Callable[[Handler], Callable]:
    """Decorator form of `declare`: the handler's name (or `name`) is the builtin's."""
    def register(handler: Handler) -> Callable:
        return declare(name or handler.__name__, handler, doc)
    return register


def wrong_arguments(record: Builtin, args: tuple, kwargs: dict) -> str | None:
    """Why a call's arguments do not fit the handler (None when they do)."""
    try:
        inspect.signature(record.handler).bind(None, None, *args, **kwargs)
    except TypeError as e:
        return str(e)
    return None
