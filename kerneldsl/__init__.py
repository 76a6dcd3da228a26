"""kerneldsl: write GPU-style kernels once in Python, run them on CUDA, OpenCL or the CPU.

    import numpy as np, kerneldsl as kd
    rt = kd.runtime("cpu")
    x = rt.tensor(np.arange(8, dtype=np.float32))

See README.md for the tour and docs/dsl.md for the language reference.
"""
from __future__ import annotations

__version__ = "0.1.0"  # the one version of the rudnn distribution (pyproject.toml reads it)


def _checkout_backends() -> None:
    """In a source checkout, `kerneldsl.backends` is the folder backends/ beside this one
    (installs map it under kerneldsl/). Python started in the checkout imports this folder
    rather than an installed copy, so point `kerneldsl.backends` at the sibling folder."""
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sibling = os.path.join(os.path.dirname(here), "backends")
    if os.path.isdir(os.path.join(here, "backends")) or "kerneldsl.backends" in sys.modules:
        return
    init = os.path.join(sibling, "__init__.py")
    if not os.path.isfile(init):
        return
    spec = importlib.util.spec_from_file_location("kerneldsl.backends", init, submodule_search_locations=[sibling])
    module = importlib.util.module_from_spec(spec)
    sys.modules["kerneldsl.backends"] = module
    spec.loader.exec_module(module)


_checkout_backends()

from . import lang as _lang
from . import autotune
from .cache import stats as cache_stats
from .capabilities import Capabilities
from .dlpack import from_dlpack
from .dtypes import (ALL_DTYPES, DType, VecType, as_dtype, bf16, boolean, f16, f32, f64, i32, i64, u8, u32,
                     vec)
from .errors import (CompileError, KernelError, LaunchError, OutOfBoundsError, OutOfMemoryError, SourceLoc,
                     UnsupportedFeatureError)
from .frontend import func
from .kernel import Kernel, kernel
from .lang import *  # noqa: F401,F403  (the in-kernel builtins: cube_pos_x, plane_sum, exp, ...)
from .lang import Const, PLANE_DIM, Tensor, inf, nan
from .reductions import cube_max, cube_sum
from .runtime import (Runtime, RuntimeStatus, RuntimeUnavailable, available_runtimes, runtime_report, empty, get_runtime,
                      runtime, tensor, zeros)

bool_ = boolean
bool = boolean  # noqa: A001  (kd.bool, as DESIGN.md spells the dtype)

__all__ = [n for n in dir() if not n.startswith("_")]
