"""Printing from a kernel (`kd.print`, and Python's `print` inside a kernel)."""
from __future__ import annotations

from .. import ir
from ..dtypes import VecType, bf16, f16, f32
from ..frontend_values import is_ct
from ..types import coerce, is_weak
from .registry import builtin


@builtin("Print from the kernel: '{}' in fmt is replaced by each arg.")
def print(fe, node, fmt="", *args):  # noqa: A001
    """Without a format string the args are printed separated by spaces."""
    if not isinstance(fmt, str):
        args = (fmt,) + args
        fmt = " ".join(["{}"] * len(args))
    pieces = fmt.split("{}")
    if len(pieces) - 1 != len(args):
        raise fe.error(node, f"kd.print: {len(pieces) - 1} '{{}}' placeholders for {len(args)} values")
    parts = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append(piece)
        if i < len(args):
            a = args[i]
            if is_ct(a):
                parts.append(str(a))
                continue
            e = fe.to_expr(a, node)
            if isinstance(e.dtype, VecType):
                raise fe.error(node, "kd.print takes scalars")
            if is_weak(e):
                e = coerce(e, e.dtype)
            if e.dtype in (f16, bf16):
                e = coerce(e, f32)
            parts.append(e)
    fe.emit(ir.Print(parts=parts, loc=fe.loc(node)))
