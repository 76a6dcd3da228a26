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
                      f"to call rudnn's operators from torch; `import rudnn` works without it ({e})") from None

from . import attention_ops as _attention
from . import convolution as _convolution
from . import ctc as _ctc
from . import gated_delta as _gated_delta
from . import moe as _moe
from . import normalization as _normalization
from . import pooling as _pooling
from . import sampling as _sampling
from .attention_ops import *  # noqa: F401,F403
from .convolution import *  # noqa: F401,F403
from .ctc import *  # noqa: F401,F403
from .gated_delta import *  # noqa: F401,F403
from .moe import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .sampling import *  # noqa: F401,F403

__all__ = [name for module in (_attention, _convolution, _ctc, _gated_delta, _moe, _normalization, _pooling,
                                _sampling) for name in module.__all__]
