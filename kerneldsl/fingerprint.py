"""Cache keys computed before the front end: a digest of a kernel's code and all it reads.

A warm process must find its compiled kernels without parsing or rendering anything,
so the key of a specialised kernel is made from what the front end *would* read:

- the kernel function's code and that of every function it reaches: `@kd.func` helpers,
  compile-time Python helpers, other kernels, methods of user classes. Code objects are
  hashed field by field (bytecode, constants, names, file name and line table, since
  line numbers reach the binary through `#line` and bounds-error records);
- the values of the globals, closure cells, default arguments and module attributes that
  code names (numbers, strings, dtypes, enums, tuples, dicts, dataclasses, plain objects'
  attributes, numpy arrays), so changing a module-level constant changes the key;
- the package's own source (`library_digest`: every file of kerneldsl and its back ends,
  the package version and the Python version), which stands for the front end, the passes
  and the renderers.

The caller adds the specialisation (dtypes, ranks, contiguity, `kd.Const` values, cube
shape, flags) and the runtime's identity. A value with no stable description (an object
whose repr is its address) raises `Unkeyable`: that kernel then goes through the front end
in every process (correct, only slower).
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.util
import os
import sys
import types

from .version import __version__

_LIBRARY = "kerneldsl"
_CODE_ATTRS = ("co_name", "co_filename", "co_firstlineno", "co_argcount", "co_posonlyargcount",
               "co_kwonlyargcount", "co_flags", "co_names", "co_varnames", "co_freevars", "co_cellvars")


class Unkeyable(Exception):
    """A value a kernel reads has no description that is stable across processes."""


@functools.lru_cache(maxsize=None)
def library_digest() -> str:
    """sha256 of every file of the kerneldsl package and its back ends, the package version
    and the Python version (computed once per process)."""
    h = hashlib.sha256(f"kerneldsl-{__version__}|{sys.version}".encode())
    roots = [os.path.dirname(os.path.abspath(__file__))]
    spec = importlib.util.find_spec("kerneldsl.backends")
    if spec is not None:
        roots += [os.path.abspath(p) for p in spec.submodule_search_locations or ()]
    for root in dict.fromkeys(roots):
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
                h.update(b"\0")
    return h.hexdigest()


def kernel_digest(fn) -> str:
    """sha256 of `fn`'s code and everything it reads (see the module docstring); raises
    `Unkeyable` when some value it reads cannot be described stably."""
    w = _Walker()
    w.function(fn)
    return w.h.hexdigest()


def value_digest(value) -> str:
    """sha256 describing a value as `kernel_digest` describes the values a kernel reads
    (used for `kd.Const` arguments); raises `Unkeyable`."""
    w = _Walker()
    w.value(value, ())
    return w.h.hexdigest()


def _module_name(obj) -> str:
    return getattr(obj, "__module__", None) or ""


def _is_library(obj) -> bool:
    name = _module_name(obj)
    return name == _LIBRARY or name.startswith(_LIBRARY + ".")


def _is_external(module_name: str) -> bool:
    """Modules whose contents are not the user's: the standard library and installed
    packages, identified by name and package version (their internals are not walked)."""
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names or top in ("builtins", ""):
        return True
    path = getattr(sys.modules.get(top), "__file__", None) or ""
    return "site-packages" in path or "dist-packages" in path


@functools.lru_cache(maxsize=None)
def _package_version(module_name: str) -> str:
    """The version of the installed package a module belongs to ("" for the standard library)."""
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names or top in ("builtins", ""):
        return ""
    version = getattr(sys.modules.get(top), "__version__", None)
    if version is None:
        try:
            import importlib.metadata  # (here: slow to import, rarely needed)
            version = importlib.metadata.version(top)
        except Exception:  # noqa: BLE001  (no distribution of that name)
            version = "?"
    return str(version)


def _names_read(code) -> set:
    """Global and attribute names read by `code` and the code nested in it."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names_read(c)
    return out


class _Walker:
    """Feeds a description of functions and values into one sha256."""

    def __init__(self):
        self.h = hashlib.sha256()
        self.seen: dict = {}

    def put(self, *parts) -> None:
        for p in parts:
            self.h.update(p if isinstance(p, bytes) else str(p).encode())
            self.h.update(b"\0")

    def _once(self, obj) -> bool:
        """True the first time `obj` is met; later meetings record a back reference."""
        ref = self.seen.get(id(obj))
        if ref is not None:
            self.put("ref", ref)
            return False
        self.seen[id(obj)] = len(self.seen)
        return True

    # ------------------------------------------------------------------ code
    def code(self, co) -> None:
        self.put("code", *(getattr(co, a) for a in _CODE_ATTRS))
        self.put(co.co_code, getattr(co, "co_linetable", None) or co.co_lnotab,
                 getattr(co, "co_exceptiontable", b""))
        for c in co.co_consts:
            if isinstance(c, types.CodeType):
                self.code(c)
            else:
                self.literal(c)

    def literal(self, c) -> None:
        """A constant of a code object (frozensets sorted: their order varies by process)."""
        if isinstance(c, frozenset):
            self.put("frozenset", sorted(repr(x) for x in c))
        elif isinstance(c, tuple):
            self.put("tuple", len(c))
            for x in c:
                self.literal(x)
        else:
            self.put(type(c).__name__, repr(c))

    def function(self, fn) -> None:
        if not self._once(fn):
            return
        if _is_library(fn):
            self.put("library function", _module_name(fn), fn.__qualname__)
            return
        co = fn.__code__
        self.code(co)
        names = _names_read(co)
        self.value(fn.__defaults__, names)
        self.value(fn.__kwdefaults__, names)
        for name, cell in zip(co.co_freevars, fn.__closure__ or ()):
            self.put("cell", name)
            try:
                contents = cell.cell_contents
            except ValueError:  # not assigned yet
                self.put("empty cell")
                continue
            self.value(contents, names)
        g = fn.__globals__
        for name in sorted(names):
            if name in g:
                self.put("global", name)
                self.value(g[name], names)

    # ------------------------------------------------------------------ values
    def value(self, v, names) -> None:
        """Describe `v`; `names` are the attribute names the reading code uses (what it
        may look up in a module or object)."""
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
            self.put(type(v).__name__, repr(v))
        elif isinstance(v, (tuple, list)):
            self.put(type(v).__name__, len(v))
            for x in v:
                self.value(x, names)
        elif isinstance(v, (set, frozenset)):
            self.put("set", len(v))
            for x in sorted(v, key=repr):
                self.value(x, names)
        elif isinstance(v, dict):
            self.put("dict", len(v))
            for k in sorted(v, key=repr):
                self.value(k, names)
                self.value(v[k], names)
        elif isinstance(v, types.ModuleType):
            self.module(v, names)
        elif isinstance(v, types.FunctionType):
            self.function(v)
        elif isinstance(v, types.MethodType):
            self.value(v.__self__, names)
            self.function(v.__func__)
        elif isinstance(v, types.BuiltinFunctionType):
            owner = getattr(v, "__self__", None)
            self.put("builtin", getattr(v, "__module__", None), v.__qualname__)
            if isinstance(owner, type):
                self.put("of class", _module_name(owner), owner.__qualname__)
            elif owner is not None and not isinstance(owner, types.ModuleType):
                self.value(owner, names)  # a method bound to an object: the object matters
        elif isinstance(v, functools.partial):
            self.put("partial")
            self.value(v.func, names)
            self.value(v.args, names)
            self.value(v.keywords, names)
        elif isinstance(v, type):
            self.cls(v, names)
        elif isinstance(v, enum.Enum):
            self.put("enum", v.name)
            self.cls(type(v), names)
            self.value(v.value, names)
        else:
            self.instance(v, names)

    def module(self, m, names) -> None:
        if not self._once(m):
            return
        self.put("module", m.__name__)
        if _is_library(m):
            return  # the library digest covers it
        if _is_external(m.__name__):
            self.put("version", _package_version(m.__name__))
            return
        attrs = vars(m)
        for name in sorted(names):
            if name in attrs:
                self.put("attr", name)
                self.value(attrs[name], names)

    def cls(self, c, names) -> None:
        if not self._once(c):
            return
        self.put("class", _module_name(c), c.__qualname__)
        if _is_library(c):
            return
        if _is_external(_module_name(c)):
            self.put("version", _package_version(_module_name(c)))
            return
        for name, a in sorted(vars(c).items()):
            if isinstance(a, (staticmethod, classmethod)):
                a = a.__func__
            elif isinstance(a, property):
                a = a.fget
            if isinstance(a, types.FunctionType):
                self.put("method", name)
                self.function(a)
            elif not name.startswith("_"):  # (private names: the class machinery's, e.g. Enum's)
                self.put("class attr", name)
                self.value(a, names)

    def instance(self, v, names) -> None:
        t = type(v)
        wrapped = getattr(v, "fn", None) if _is_library(t) else None
        if isinstance(wrapped, types.FunctionType):  # kd.kernel, kd.func: their Python function
            self.put("wrapper", t.__qualname__)
            self.function(wrapped)
            return
        if type(v).__module__ == "numpy" and hasattr(v, "dtype") and hasattr(v, "tobytes"):
            self.put("numpy", v.dtype.str, getattr(v, "shape", ()), hashlib.sha256(v.tobytes()).hexdigest())
            return
        if not self._once(v):
            return
        self.cls(t, names)
        if dataclasses.is_dataclass(v):
            for f in dataclasses.fields(v):
                self.put("field", f.name)
                self.value(getattr(v, f.name), names)
            return
        if not (_is_library(t) or _is_external(_module_name(t))):
            state = getattr(v, "__dict__", None)
            slots = [s for c in t.__mro__ for s in getattr(c, "__slots__", ())]
            if state is not None or slots:
                self.value(dict(state or {}), names)
                for s in slots:
                    if s not in ("__dict__", "__weakref__") and hasattr(v, s):
                        self.put("slot", s)
                        self.value(getattr(v, s), names)
                return
        text = repr(v)
        if " at 0x" in text or " object at " in text:
            raise Unkeyable(f"{t.__module__}.{t.__qualname__} has no stable description ({text})")
        self.put("repr", text)


__all__ = ["Unkeyable", "library_digest", "kernel_digest", "value_digest"]
