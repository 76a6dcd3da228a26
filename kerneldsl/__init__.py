"""kerneldsl: write GPU-style kernels once in Python, run them on CUDA, OpenCL or the CPU.

    import numpy as np, kerneldsl as kd
    rt = kd.runtime("cpu")
    x = rt.tensor(np.arange(8, dtype=np.float32))

See README.md for the tour and docs/dsl.md for the language reference.
"""
from __future__ import annotations

from .version import __version__
from . import source_tree  # noqa: F401  (kerneldsl.backends in a source checkout)
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
from .kernel import Kernel, SpecializedKernel, TensorType, kernel
from .lang import *  # noqa: F401,F403  (the in-kernel builtins: cube_pos_x, plane_sum, exp, ...)
from .lang import Const, PLANE_DIM, Tensor, inf, nan
from .reductions import cube_max, cube_sum
from .runtime import (Runtime, RuntimeStatus, RuntimeUnavailable, available_runtimes, runtime_report, empty, get_runtime,
                      runtime, tensor, zeros)

bool_ = boolean
bool = boolean  # noqa: A001  (kd.bool, as DESIGN.md spells the dtype)

__all__ = [n for n in dir() if not n.startswith("_") and n != "builtins"]  # kerneldsl.builtins: internal


def __getattr__(name: str):
    """`kd.testing` (the test harness) loads on first use: importing kerneldsl never imports pytest."""
    if name == "testing":
        import importlib
        return importlib.import_module(f"{__name__}.testing")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
