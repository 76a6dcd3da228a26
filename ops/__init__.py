"""rudnn: neural-network operators written once in kerneldsl, run on every runtime.

Operator families live in their own modules (see SPEC.md); this package holds
the error base classes shared by all of them.
"""
from __future__ import annotations

from .errors import RudnnError
from . import moe
from .moe import MoeError

__all__ = ["RudnnError", "moe", "MoeError"]

from . import normalization  # noqa: E402
from .normalization import NormalizationError  # noqa: E402

__all__ += ["normalization", "NormalizationError"]

from . import attention  # noqa: E402
from .attention import AttentionSetupError  # noqa: E402

__all__ += ["attention", "AttentionSetupError"]
