"""The builtin registry: every public `kd.*` builtin is declared once with a handler and a
line of documentation, docs/dsl.md lists exactly the registry, and a call with the wrong
arguments is a compile error naming the builtin at the user's line."""
import inspect
import re
from pathlib import Path

import pytest

import kerneldsl as kd
from kerneldsl import ir, lang
from kerneldsl.builtins import REGISTRY, lookup, reference

pytestmark = pytest.mark.feature("builtins")
DSL_MD = Path(__file__).resolve().parent.parent / "docs" / "dsl.md"
NOT_BUILTINS = {"Tensor", "Const", "PLANE_DIM", "inf", "nan"}  # the other names kernels read from kd.lang


def test_every_public_builtin_is_registered_with_a_handler():
    public = set(lang.__all__) - NOT_BUILTINS
    assert public == set(REGISTRY)
    assert len(REGISTRY) >= 100
    for name, record in REGISTRY.items():
        stub = getattr(kd, name)
        assert stub is getattr(lang, name) is record.stub, name
        assert lookup(stub) is record and stub.__name__ == name
        assert callable(record.handler), name
        # the handler takes (fe, node) and then whatever the documented parameters allow
        required = [p for p in record.signature.parameters.values()
                    if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
        inspect.signature(record.handler).bind(None, None, *[None] * len(required))


def test_every_plane_op_and_atomic_of_the_ir_is_a_builtin():
    assert {f"plane_{op}" for op in ir.PLANE_OPS} <= set(REGISTRY)
    assert {f"atomic_{op}" for op in ir.ATOMIC_OPS} <= set(REGISTRY)


def test_doc_lines_are_single_nonempty_lines():
    for name, record in REGISTRY.items():
        assert record.doc.strip() and "\n" not in record.doc, name
        assert record.stub.__doc__ == record.doc


def test_docs_reference_lists_exactly_the_registry():
    text = DSL_MD.read_text()
    m = re.search(r"<!-- builtin reference: begin -->\n(.*?)\n<!-- builtin reference: end -->", text, re.S)
    assert m, "docs/dsl.md has no builtin reference section"
    listed = re.findall(r"^- `kd\.(\w+)\(", m.group(1), re.M)
    missing = [n for n in REGISTRY if n not in listed]
    unknown = [n for n in listed if n not in REGISTRY]
    assert not missing and not unknown, f"docs/dsl.md: missing {missing}, not builtins {unknown}"
    assert m.group(1) == reference(), "docs/dsl.md's builtin reference is stale; paste:\n" + reference()


def test_a_stub_called_outside_a_kernel_names_itself():
    with pytest.raises(RuntimeError, match=r"kd\.plane_sum\(\) can only be used inside a @kd.kernel"):
        kd.plane_sum(1.0)
    assert str(inspect.signature(kd.plane_broadcast)) == "(x, lane)"
    assert str(inspect.signature(kd.async_wait)) == "(pending=0)"


@kd.kernel
def fma_missing_an_argument(x: kd.Tensor[kd.f32]):
    x[0] = kd.fma(x[0], 2.0)


@kd.kernel
def plane_sum_too_many(x: kd.Tensor[kd.f32]):
    x[0] = kd.plane_sum(x[0], x[1])


@pytest.mark.parametrize("kernel,text,message", [
    (fma_missing_an_argument, "kd.fma(x[0], 2.0)", "kd.fma: wrong arguments (missing a required argument: 'c')"),
    (plane_sum_too_many, "kd.plane_sum(x[0], x[1])", "kd.plane_sum takes 1 argument(s)"),
])
def test_wrong_arguments_name_the_builtin_and_the_line(kernel, text, message):
    x = kd.runtime("cpu").zeros(8, "f32")
    with pytest.raises(kd.CompileError) as info:
        kernel[1, 8](x)
    lines, start = inspect.getsourcelines(kernel.fn)
    line = start + next(i for i, s in enumerate(lines) if text in s)
    assert message in str(info.value)
    assert info.value.loc.line == line and text in str(info.value)
