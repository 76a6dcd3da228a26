"""The shared C-like renderer (OpenCL C and CUDA C++): `CLikeRenderer` in base.py, whose
docstring lists the hooks a dialect overrides; the lowering is split by concern into the
mixins beside it."""
from .base import EXPRESSION_HANDLERS, STATEMENT_HANDLERS, VECTOR_HANDLERS, CLikeRenderer
from .kernel_frame import SKELETON, KernelArg, Rendered
from .text import HALVES, cname, parens

__all__ = ["CLikeRenderer", "KernelArg", "Rendered", "SKELETON", "cname", "parens", "HALVES",
           "STATEMENT_HANDLERS", "EXPRESSION_HANDLERS", "VECTOR_HANDLERS"]
