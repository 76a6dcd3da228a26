"""Every IR node has a handler in every renderer's dispatch tables, and a node without one
fails loudly naming the renderer and the node.

The node list is derived from kerneldsl/ir.py (every Stmt and Expr subclass defined there),
so a node added to the IR without a handler in the CPU, OpenCL, CUDA or interpreter renderer fails here.
"""
import inspect

import pytest

from kerneldsl import ir
from kerneldsl.analysis import check_kernel
from kerneldsl.backends.cuda.capabilities import for_arch
from kerneldsl.backends.cpu.renderer import CpuRenderer
from kerneldsl.backends.cuda.renderer import CudaRenderer
from kerneldsl.backends.interpreter.renderer import InterpreterRenderer
from kerneldsl.backends.opencl.renderer import NativePlaneRenderer, OpenCLRenderer
from kerneldsl.capabilities import Capabilities
from kerneldsl.dtypes import boolean, i32
from kerneldsl.errors import UnsupportedFeatureError

pytestmark = pytest.mark.feature("renderers")


def ir_nodes(base) -> list:
    """The concrete node classes of kerneldsl/ir.py deriving from `base` (Stmt or Expr)."""
    return [c for _, c in inspect.getmembers(ir, inspect.isclass)
            if issubclass(c, base) and c is not base and c.__module__ == ir.__name__]


# renderer -> (its statement tables, its expression tables); a statement may be handled in any
# of its statement tables (the CPU lowers split points between regions, the rest inside them)
RENDERERS = {
    "cpu": (CpuRenderer, ("STATEMENT_HANDLERS", "SPLIT_HANDLERS"), ("EXPRESSION_HANDLERS",)),
    "opencl": (OpenCLRenderer, ("STATEMENT_HANDLERS",), ("EXPRESSION_HANDLERS",)),
    "opencl-subgroups": (NativePlaneRenderer, ("STATEMENT_HANDLERS",), ("EXPRESSION_HANDLERS",)),
    "cuda": (CudaRenderer, ("STATEMENT_HANDLERS",), ("EXPRESSION_HANDLERS",)),
    "interpreter": (InterpreterRenderer, ("STATEMENT_HANDLERS",), ("EXPRESSION_HANDLERS",)),
}


def unhandled(cls, table_names, nodes) -> list:
    """Nodes no table of `cls` lists, or whose listed method `cls` lacks."""
    tables = [getattr(cls, t) for t in table_names]
    out = []
    for node in nodes:
        methods = [t[node] for t in tables if node in t]
        if not methods or not all(callable(getattr(cls, m, None)) for m in methods):
            out.append(node.__name__)
    return out


def test_node_lists_come_from_the_ir():
    stmts, exprs = ir_nodes(ir.Stmt), ir_nodes(ir.Expr)
    assert {ir.Assign, ir.If, ir.For, ir.Barrier, ir.PlaneOp, ir.Atomic, ir.GroupMma, ir.AsyncCopy} <= set(stmts)
    assert {ir.Const, ir.Var, ir.BinOp, ir.Load, ir.Position, ir.FragGet} <= set(exprs)
    assert not set(stmts) & set(exprs)
    assert len(stmts) >= 25 and len(exprs) >= 17


@pytest.mark.parametrize("renderer", list(RENDERERS))
@pytest.mark.parametrize("kind", ["statements", "expressions"])
def test_every_ir_node_has_a_handler(renderer, kind):
    cls, stmt_tables, expr_tables = RENDERERS[renderer]
    nodes = ir_nodes(ir.Stmt) if kind == "statements" else ir_nodes(ir.Expr)
    missing = unhandled(cls, stmt_tables if kind == "statements" else expr_tables, nodes)
    assert not missing, f"the {renderer} renderer has no handler for IR {kind} {missing}"


def test_the_check_finds_a_missing_or_misnamed_handler():
    class NoPrint(OpenCLRenderer):
        STATEMENT_HANDLERS = {k: v for k, v in OpenCLRenderer.STATEMENT_HANDLERS.items() if k is not ir.Print}

    class Misnamed(OpenCLRenderer):
        EXPRESSION_HANDLERS = {**OpenCLRenderer.EXPRESSION_HANDLERS, ir.Cast: "e_no_such_method"}

    assert unhandled(NoPrint, ("STATEMENT_HANDLERS",), ir_nodes(ir.Stmt)) == ["Print"]
    assert unhandled(Misnamed, ("EXPRESSION_HANDLERS",), ir_nodes(ir.Expr)) == ["Cast"]


def test_cpu_split_points_are_lowered_between_regions_only():
    assert set(CpuRenderer.SPLIT_HANDLERS) == set(ir.SPLIT_STMTS)
    assert not set(CpuRenderer.STATEMENT_HANDLERS) & set(ir.SPLIT_STMTS)


class Unknown(ir.Stmt):
    """A statement no renderer knows (not in kerneldsl.ir, so not in the tables)."""


def _caps(cls):
    if cls is CudaRenderer:
        return for_arch("sm_90")
    return Capabilities(backend="cpu" if cls is CpuRenderer else "opencl", device_name="test", arch="test",
                        plane_dim=32)


def _kernel(body) -> ir.KernelIR:
    return ir.KernelIR(name="k", params=[], body=body, cube_dim=(32, 1, 1), plane_dim=32,
                       var_types={"v": i32, "b": boolean})


@pytest.mark.parametrize("renderer", list(RENDERERS))
def test_a_node_without_handler_fails_naming_renderer_and_node(renderer):
    cls = RENDERERS[renderer][0]
    k = _kernel([ir.Assign(name="v", value=ir.Const(i32, 1))])
    if cls is InterpreterRenderer:
        r = cls(k)
    else:
        r = CpuRenderer(k, check_kernel(k), _caps(cls)) if cls is CpuRenderer else cls(k, _caps(cls))
    name = "cpu" if cls is CpuRenderer else r.dialect
    with pytest.raises(NotImplementedError, match=f"{name} renderer has no handler for IR node Unknown"):
        r.stmt(Unknown())


@pytest.mark.parametrize("cls", [OpenCLRenderer, NativePlaneRenderer])
def test_async_copies_need_the_capability(cls):
    """The front end emits AsyncCopy only where Capabilities.async_copy is set; a renderer
    without hardware copies says so instead of rendering something else."""
    k = _kernel([ir.AsyncCommit()])
    with pytest.raises(UnsupportedFeatureError, match="AsyncCommit .*Capabilities.async_copy"):
        cls(k, _caps(cls)).render()


@pytest.mark.parametrize("cls, primitives, fence", [
    (CudaRenderer, None, "__syncwarp(kd_mask);"),
    (NativePlaneRenderer, "khr", "sub_group_barrier(CLK_LOCAL_MEM_FENCE);"),
    (NativePlaneRenderer, "ptx", "bar.warp.sync"),
    (OpenCLRenderer, None, None),  # the local-memory emulation orders through its own barriers
])
def test_native_plane_operations_order_memory(cls, primitives, fence):
    """A plane operation orders its plane's memory accesses (docs/dsl.md): warp shuffles order
    none, so a native renderer emits a fence right after each (racecheck found the hazard)."""
    k = _kernel([ir.PlaneOp(dst="v", op="sum", value=ir.Var(i32, name="v"), dtype=i32),
                 ir.PlaneOp(dst="b", op="elect", dtype=boolean)])
    r = cls(k, _caps(cls))
    if primitives:
        r.primitives = primitives
    lines = r.render().source.splitlines()
    if fence is None:
        assert not r.plane_fence
        return
    at = [i for i, line in enumerate(lines) if fence in line]
    assert len(at) == 1, "one fence: after the sum, none after elect (no memory, no exchange)"
    assert any("kd_b" in line or "__reduce" in line or "kd_plane_reduce" in line for line in lines[:at[0]])


@pytest.mark.parametrize("cls", [OpenCLRenderer, CudaRenderer])
def test_breakpoint_reaches_only_the_interpreter(cls):
    """The front end emits Breakpoint only for interpreted runtimes; a compiled renderer says so."""
    k = _kernel([ir.Breakpoint()])
    with pytest.raises(UnsupportedFeatureError, match="breakpoint.*Capabilities.interpreted"):
        cls(k, _caps(cls)).render()
