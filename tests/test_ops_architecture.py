"""The rules that keep rudnn's families alike (docs/families.md): operators never name a
back end (what they know of a device comes from Capabilities, filled on every runtime);
families are discovered, laid out alike, and validate through ops/validation.py."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import rudnn
from kerneldsl.backends.cuda.capabilities import for_arch, from_device

OPS = Path(__file__).resolve().parent.parent / "ops"
BACKEND_NAMES = ("cpu", "cuda", "opencl", "interpreter")
BACKEND_ATTRIBUTES = ("backend", "attributes")  # Capabilities.backend; the CUDA runtime's attribute dict


# ---------------------------------------------------------------------- no back end named in ops/
def backend_mentions(source: str, filename: str = "<snippet>") -> list:
    """'file:line: what' for every place `source` names a back end: a string that is a
    back-end name ('cpu', 'cuda:0'), an attribute `.backend`/`.attributes` (or getattr of
    one), or an import of kerneldsl.backends. Docstrings and comments may mention them."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        what = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.strip().lower()
            if text.split(":")[0] in BACKEND_NAMES or text in BACKEND_ATTRIBUTES:
                what = f"string {node.value!r}"
        elif isinstance(node, ast.Attribute) and node.attr in BACKEND_ATTRIBUTES:
            what = f"attribute .{node.attr}"
        elif isinstance(node, ast.Import):
            what = next((f"import {a.name}" for a in node.names if "backends" in a.name.split(".")), None)
        elif isinstance(node, ast.ImportFrom) and "backends" in (node.module or "").split("."):
            what = f"from {node.module} import"
        if what:
            found.append(f"{filename}:{node.lineno}: {what}")
    return found


def test_scanner_finds_every_kind_of_backend_mention():
    bad = '''
def f(rt, caps):
    """A docstring may say cpu and cuda."""
    if caps.backend == "cpu":          # line 4
        pass
    n = rt.attributes["multiprocessors"]   # line 6
    k = getattr(rt, "attributes", {})      # line 7
    return rt.name == "cuda:1"             # line 8
from kerneldsl.backends.cuda import capabilities   # line 9
import kerneldsl.backends.cpu                      # line 10
'''
    lines = sorted({int(m.split(":")[1]) for m in backend_mentions(bad)})
    assert lines == [4, 6, 7, 8, 9, 10], backend_mentions(bad)
    clean = '"""Runs on the cpu runtime and on cuda."""\nunits = caps.compute_units if caps.units_are_simd_lanes else 1\n'
    assert backend_mentions(clean) == []


def test_ops_never_name_a_backend():
    found = []
    for path in sorted(OPS.rglob("*.py")):
        found += backend_mentions(path.read_text(), str(path.relative_to(OPS.parent)))
    assert not found, "ops/ must ask Capabilities, not test back-end names:\n" + "\n".join(found)


# ---------------------------------------------------------------------- Capabilities for operators
def test_capabilities_describe_the_device(runtime):
    caps = runtime.capabilities
    assert caps.compute_units >= 1
    assert caps.vector_bytes in (16, 32, 64)
    assert set(caps.matrix_kinds) <= {"mma", "group_mma"}
    if caps.units_are_simd_lanes:  # the cpu back end: units are lanes of a loop over shared-as-ordinary memory
        assert caps.shared_memory_emulated and not caps.native_plane_ops and caps.matrix_kinds == ()
    if hasattr(runtime, "attributes"):  # the CUDA runtime: the count the operators read before Capabilities had it
        assert caps.compute_units == runtime.attributes["multiprocessors"]


def test_cuda_records_carry_the_multiprocessor_count():
    attrs = {"major": 9, "minor": 0, "max_threads_per_block": 1024, "max_shared_optin": 227 * 1024,
             "warp_size": 32, "multiprocessors": 132}
    caps = from_device(attrs, "H200")
    assert caps.compute_units == 132 and not caps.units_are_simd_lanes and not caps.shared_memory_emulated
    assert caps.vector_bytes == 16 and caps.matrix_kinds == ("mma", "group_mma")
    assert for_arch("sm_80").compute_units == 0 and for_arch("sm_80").matrix_kinds == ("mma",)


def test_plans_follow_capabilities_not_names(runtime):
    """The normalization and moe plans a device gets depend on its record alone: a record
    that differs from a GPU's only in its name gets the GPU's plans."""
    from rudnn.moe import tuning as moe_tuning
    from rudnn.normalization import tuning
    gpu = for_arch("sm_90", multiprocessors=132)
    renamed = dataclasses.replace(gpu, backend="cpu", device_name="renamed")
    for width, lanes in ((64, 4), (1000, 8), (33000, 4), (32768, 8)):
        assert tuning.choose_shape(renamed, width, lanes) == tuning.choose_shape(gpu, width, lanes)

    class Rt:
        capabilities = renamed
    assert moe_tuning.scalar_blocks(Rt, 64, 4096) == (128, 128)
    assert tuning.persistent_grid(Rt, 1000) == 132 and tuning.persistent_grid(Rt, 7) == 7


# ---------------------------------------------------------------------- families
def test_families_are_discovered():
    names = rudnn.families()
    assert {"attention", "moe", "normalization"} <= set(names)
    assert "validation" not in names and "errors" not in names


@pytest.mark.parametrize("family", rudnn.families())
def test_family_follows_the_layout(family):
    module = getattr(rudnn, family)
    folder = OPS / family
    assert module.__name__ == f"rudnn.{family}" and module.__doc__, "a module docstring naming the SPEC section"
    assert (folder / "problem.py").is_file() and (folder / "tuning.py").is_file()
    error = rudnn.family_error(family)
    assert issubclass(error, rudnn.RudnnError) and issubclass(error, ValueError)
    assert getattr(rudnn, error.__name__) is error
    problem = ast.parse((folder / "problem.py").read_text())
    uses_shared = any(isinstance(n, ast.ImportFrom) and n.level == 2 and n.module == "validation"
                      for n in ast.walk(problem))
    assert uses_shared, f"ops/{family}/problem.py must validate through ops/validation.py"
    for name in module.__all__:
        assert hasattr(module, name), f"rudnn.{family}.__all__ names {name}, which it lacks"


def test_unknown_attribute_names_the_families():
    with pytest.raises(AttributeError, match="families: attention"):
        rudnn.not_a_family  # noqa: B018
