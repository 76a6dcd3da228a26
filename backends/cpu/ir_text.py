"""Passes over the text of an optimised module, run before code generation (streaming.py,
masked_stores.py): each rewrites lines of the printed IR and the module is parsed again. They
read the opaque-pointer form (`ptr`) that LLVM 15 on prints, and serve x86-64."""
from __future__ import annotations

from typing import Callable

import llvmlite.binding as llvm


def applies(triple: str) -> bool:
    """Whether text passes serve `triple`'s target (x86-64) with this LLVM (15 on)."""
    return triple.startswith("x86_64") and llvm.llvm_version_info >= (15,)


def reparsed(mod, rewrite: Callable[[str], "str | None"]):
    """`rewrite` of `mod`'s text as a new, verified module; None where the target is not
    served or `rewrite` found nothing to change (it returns None then)."""
    if not applies(mod.triple):
        return None
    text = rewrite(str(mod))
    if text is None:
        return None
    out = llvm.parse_assembly(text)
    out.verify()
    return out
