"""rudnn.torch: every rudnn operator as a PyTorch custom operator (namespace `rudnn`, so
`torch.ops.rudnn.<name>`), zero-copy on torch tensors through DLPack, with fake
implementations for torch.compile and autograd through our backward kernels (docs/torch.md).

Importing it needs PyTorch (the `oracle` extra); `import rudnn` alone never imports torch.
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover  (CI installs the oracle extra)
    raise ImportError("rudnn.torch needs PyTorch: pip install 'rudnn[oracle]' (or any torch>=2.4) "
                      f"to use rudnn's operators from torch; `import rudnn` works without it ({e})") from None

from . import normalization
from .normalization import *  # noqa: F401,F403

__all__ = [*normalization.__all__]
