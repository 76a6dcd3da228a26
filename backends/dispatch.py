"""Dispatch tables of the renderers: IR node class -> the name of the method that lowers it.

Every renderer (CPU, C-like) names its handlers alike, so the tables below are shared (with the few handlers in SharedHandlers):
EXPRESSIONS for every expression node, STATEMENTS for the statements every renderer lowers
in place; the C-like base adds barriers, plane and fragment operations to its statement
table, the CPU lowers those between regions (its SPLIT_HANDLERS). Dict literals, one entry
per IR node class, so a missing one is visible at a glance and fails tests/test_renderers.py.
A renderer binds its tables once per instance with `bind`; rendering a node is then one
dictionary lookup.
Binding per instance (not per class) keeps a dialect's overriding methods, and a test's
monkeypatched ones, in effect.
"""
from __future__ import annotations

from kerneldsl import ir
from kerneldsl.errors import UnsupportedFeatureError

STATEMENTS = {
    ir.Assign: "s_assign",
    ir.Store: "s_store",
    ir.SharedStore: "s_shared_store",
    ir.If: "s_if",
    ir.For: "s_for",
    ir.While: "s_while",
    ir.Break: "s_break",
    ir.Continue: "s_continue",
    ir.Return: "s_return",
    ir.Atomic: "s_atomic",
    ir.Print: "s_print",
    ir.FragSet: "s_frag_set",
    ir.FragConvert: "s_frag_convert",
    ir.SharedDecl: "s_declared",  # declared at the kernel's top from KernelIR.shared
    ir.FragDecl: "s_declared",  # declared at the kernel's top from KernelIR.frags
    ir.Breakpoint: "s_breakpoint",  # only for interpreted runtimes (the front end drops it elsewhere)
    ir.AsyncCopy: "s_needs_async_copy",  # the front end lowers kd.async_copy to a plain copy where
    ir.AsyncCommit: "s_needs_async_copy",  # Capabilities.async_copy is off; CUDA overrides these
    ir.AsyncWait: "s_needs_async_copy",
    ir.BarrierInit: "s_needs_bulk_copy",  # the front end emulates arrival barriers and bulk copies where
    ir.BarrierArrive: "s_needs_bulk_copy",  # Capabilities.bulk_copy is off; CUDA overrides these
    ir.BarrierWait: "s_needs_bulk_copy",
    ir.BulkCopy: "s_needs_bulk_copy",
    ir.BulkStore: "s_needs_bulk_copy",
    ir.BulkStoreWait: "s_needs_bulk_copy",
    ir.Role: "s_role",
    ir.PhaseCheck: "s_phase_check",  # only where Capabilities.interpreted (emulated waits inside roles)
}
EXPRESSIONS = {
    ir.Const: "e_const",
    ir.Var: "e_var",
    ir.BinOp: "e_binop",
    ir.UnOp: "e_unop",
    ir.Cmp: "e_cmp",
    ir.Logic: "e_logic",
    ir.Select: "e_select",
    ir.Cast: "e_cast",
    ir.Bitcast: "e_bitcast",
    ir.Math: "e_math",
    ir.Load: "e_load",
    ir.SharedLoad: "e_shared_load",
    ir.TensorDim: "e_tensor_dim",
    ir.Position: "e_position",
    ir.VecMake: "e_vec_make",
    ir.VecExtract: "e_vec_extract",
    ir.FragGet: "e_frag_get",
}


def bind(renderer, table: dict) -> dict:
    """{IR node class: bound method} for one renderer instance."""
    return {node: getattr(renderer, name) for node, name in table.items()}


def lower(handlers: dict, node, renderer_name: str):
    """Call the handler of `node`'s class, or fail naming the renderer and the node."""
    handler = handlers.get(type(node))
    if handler is None:
        raise NotImplementedError(f"{renderer_name} renderer has no handler for IR node {type(node).__name__}")
    return handler(node)


class SharedHandlers:
    """Handlers that read the same in every renderer (mixed into CpuRenderer and CLikeRenderer;
    `dialect` names the renderer in messages)."""

    dialect = "?"

    def s_declared(self, s):
        """Shared arrays and fragments are declared at the kernel's top (KernelIR.shared, .frags)."""

    def s_breakpoint(self, s):
        raise UnsupportedFeatureError(
            f"{self.dialect} renderer: breakpoint() reaches a renderer only where Capabilities.interpreted is "
            f"set (the front end drops it for compiled back ends)", s.loc)

    def s_needs_async_copy(self, s):
        raise UnsupportedFeatureError(
            f"{self.dialect} renderer: {type(s).__name__} reaches a renderer only where Capabilities.async_copy "
            f"is set (the front end lowers kd.async_copy to a plain copy elsewhere)", s.loc)


    def s_phase_check(self, s):
        raise UnsupportedFeatureError(
            f"{self.dialect} renderer: PhaseCheck reaches a renderer only where Capabilities.interpreted is set "
            f"(the front end emits it for kd.barrier_wait inside an emulated kd.role there)", s.loc)

    def s_needs_bulk_copy(self, s):
        raise UnsupportedFeatureError(
            f"{self.dialect} renderer: {type(s).__name__} reaches a renderer only where Capabilities.bulk_copy "
            f"is set (the front end emulates arrival barriers and bulk copies elsewhere)", s.loc)


def printf_format(parts: list, convert) -> tuple:
    """(printf format, arguments) of kd.print's parts: literal strings (with % escaped) and
    expressions, each turned into (conversion, argument) by `convert`, in order."""
    fmt, args = "", []
    for part in parts:
        if isinstance(part, str):
            fmt += part.replace("%", "%%")
            continue
        spec, arg = convert(part)
        fmt += spec
        args.append(arg)
    return fmt, args
