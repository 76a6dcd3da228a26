"""How `kerneldsl` imports itself: no import cycle among its modules, and `import kerneldsl`
loads no optional heavy module (ml_dtypes, a back end's toolchain) until it is needed.

A cycle is read from the source with `ast`: the kerneldsl-internal imports a module runs
when it is imported (module level, outside functions and `if TYPE_CHECKING:`). Imports
inside functions are lazy and allowed: they run after every module has finished loading.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "kerneldsl"
SOURCE = ROOT / "kerneldsl"


def module_files() -> dict[str, Path]:
    """Every module of the kerneldsl source folder, by dotted name (packages by their __init__)."""
    out = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([PACKAGE, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_time_statements(body: list) -> list:
    """The import statements among `body` that run when the module runs: at module level,
    and inside module-level `if`/`try`/`with` blocks, but not in functions or classes'
    methods, nor under `if TYPE_CHECKING:`."""
    found = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += import_time_statements(node.body)
            found += import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += import_time_statements(block)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            found += import_time_statements(node.body)  # a class body runs at import time
    return found


def imported_modules(name: str, path: Path, modules: dict) -> set[str]:
    """The kerneldsl modules that importing module `name` imports while it runs."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in import_time_statements(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` imports the submodule; `from pkg import attr` runs pkg
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            while target and target not in modules:  # `import kerneldsl.x.y` where y is an attribute
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a list of modules (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_sees_relative_imports_and_skips_lazy_ones(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("from . import b\nif TYPE_CHECKING:\n    from . import c\n"
                              "def f():\n    from . import c\n")
    (pkg / "b.py").write_text("try:\n    from .a import f\nexcept ImportError:\n    pass\n")
    (pkg / "c.py").write_text("from . import __version__\n")
    modules = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py", "pkg.c": pkg / "c.py"}
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg"}}


def test_kerneldsl_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 10 and "kerneldsl.frontend" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle among kerneldsl modules: " + " -> ".join(cycle)


# Modules `import kerneldsl` must leave alone: each costs import time and some are optional.
HEAVY = ("ml_dtypes", "llvmlite", "pyopencl", "cuda", "jinja2", "torch", "kerneldsl.backends")


def test_import_kerneldsl_loads_no_optional_module():
    code = ("import sys, kerneldsl\n"
            f"heavy = {HEAVY!r}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"import kerneldsl imported {out.stdout.strip()}"


def test_bf16_host_arrays_still_use_ml_dtypes():
    code = ("import sys, numpy as np, kerneldsl as kd\n"
            "assert 'ml_dtypes' not in sys.modules\n"
            "assert kd.as_dtype('bf16') is kd.bf16 and kd.bf16.itemsize == 2\n"
            "assert 'ml_dtypes' not in sys.modules\n"
            "import ml_dtypes\n"
            "assert kd.bf16.np == np.dtype(ml_dtypes.bfloat16)\n"
            "assert kd.as_dtype(ml_dtypes.bfloat16) is kd.bf16\n"
            "assert kd.as_dtype(np.dtype(ml_dtypes.bfloat16)) is kd.bf16\n"
            "x = kd.runtime('cpu').tensor(np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16))\n"
            "assert x.dtype is kd.bf16 and x.numpy().dtype == ml_dtypes.bfloat16\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("spelling", ["kd.bf16.np", "kd.bf16(1.5).dtype"])
def test_bf16_numpy_type_is_loaded_on_first_use(spelling):
    code = ("import sys, numpy as np, kerneldsl as kd\n"
            f"t = {spelling}\n"
            "import ml_dtypes\n"
            "assert np.dtype(t) == np.dtype(ml_dtypes.bfloat16), t\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
