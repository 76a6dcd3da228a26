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
from . import autotune, replay
from .cache import cache_clear, cache_info, stats as cache_stats
from .capabilities import Capabilities
from .dlpack import from_dlpack
from .interop import from_cuda_array_interface
from .dtypes import (ALL_DTYPES, DType, VecType, as_dtype, bf16, boolean, f16, f32, f64, i32, i64, u8, u32,
                     vec)
from .errors import (CompileError, DivergenceError, KernelError, LaunchError, OutOfBoundsError, OutOfMemoryError,
                     SharedMemoryRaceError, SourceLoc, UninitializedSharedReadError, UnsupportedFeatureError)
from .frontend import func
from .kernel import Kernel, SpecializedKernel, TensorType, kernel
from .lang import (  # the in-kernel builtins, by name so that type checkers see them
    abs, arrival_barriers, async_commit, async_copy, async_wait, atomic_add, atomic_and, atomic_cas, atomic_exchange, atomic_max,
    atomic_min, atomic_or, atomic_xor, avoid_gathers, barrier_arrive, barrier_expect, barrier_init, barrier_wait,
    bitcast, bulk_copy, bulk_store, bulk_store_wait, cast, ceil, clamp, cos, cube_count_x, cube_count_y,
    cube_count_z, cube_dim_x, cube_dim_y, cube_dim_z, cube_pos_x, cube_pos_y, cube_pos_z, cube_units,
    cubes_per_compute_unit, erf, exp,
    exp2, exp2_fast, fill_fragment, floor, fma, fragment_a, fragment_acc, fragment_b, fragment_col,
    fragment_convert, fragment_get, fragment_len, fragment_row, fragment_row_lanes, fragment_row_slot,
    fragment_row_slots, fragment_set, group_fragment_a, group_fragment_acc, group_mma, group_wait, isinf, isnan,
    lane_pos, load_fragment, load_vec, log, log1p, log2, make_vec, max, min, mma, plane_all, plane_any,
    plane_ballot, plane_broadcast, plane_count, plane_elect, plane_exclusive_sum, plane_inclusive_sum,
    plane_max, plane_min, plane_pos, plane_prod, plane_shuffle, plane_shuffle_xor, plane_sum, pow, print, role,
    round, rsqrt, scalar_statements, select, shared, shared_tile, sigmoid, sin, splat, sqrt, static_assert,
    store_fragment, store_vec, streaming_stores,
    sync_cube, sync_role, tanh, tile_offset, unit_pos, unit_pos_x, unit_pos_y, unit_pos_z, unroll, vec_max, vec_min,
    vec_sum)  # noqa: A004
from .lang import Const, PLANE_DIM, Tensor, inf, nan
from .reductions import cube_max, cube_sum
from .streams import Event, Stream
from .runtime import (Runtime, RuntimeStatus, RuntimeUnavailable, available_runtimes, runtime_report, empty, get_runtime,
                      runtime, tensor, zeros)

bool_ = boolean
bool = boolean  # noqa: A001  (kd.bool, as DESIGN.md spells the dtype)

__all__ = [  # the public API, spelled out for type checkers (tests/test_authoring_api.py checks it)
    # the host API
    "__version__", "autotune", "replay", "Capabilities", "CompileError", "KernelError", "LaunchError", "OutOfBoundsError",
    "SourceLoc", "UnsupportedFeatureError", "SharedMemoryRaceError", "UninitializedSharedReadError",
    "DivergenceError", "DType", "VecType", "ALL_DTYPES", "as_dtype", "bf16", "bool",
    "bool_", "boolean", "f16", "f32", "f64", "i32", "i64", "u8", "u32", "vec", "Kernel", "SpecializedKernel",
    "TensorType", "kernel", "func", "Runtime", "RuntimeStatus", "RuntimeUnavailable", "available_runtimes",
    "runtime_report", "get_runtime", "runtime", "tensor", "empty", "zeros", "from_dlpack", "Stream", "Event",
    "from_cuda_array_interface", "cube_max",
    "cube_sum", "cache_stats", "cache_info", "cache_clear",
    # what kernels use: annotations, constants and the builtins (kerneldsl.lang)
    "Tensor", "Const", "PLANE_DIM", "inf", "nan", "abs", "arrival_barriers", "async_commit", "async_copy", "async_wait",
    "atomic_add", "atomic_and", "atomic_cas", "atomic_exchange", "atomic_max", "atomic_min", "atomic_or",
    "atomic_xor", "avoid_gathers", "barrier_arrive", "barrier_expect", "barrier_init", "barrier_wait", "bitcast", "bulk_copy", "bulk_store", "bulk_store_wait",
    "cast", "ceil", "clamp", "cos", "cube_count_x", "cube_count_y", "cube_count_z",
    "cube_dim_x", "cube_dim_y", "cube_dim_z", "cube_pos_x", "cube_pos_y", "cube_pos_z", "cube_units",
    "cubes_per_compute_unit", "erf",
    "exp", "exp2", "exp2_fast", "fill_fragment", "floor", "fma", "fragment_a", "fragment_acc", "fragment_b",
    "fragment_col", "fragment_convert", "fragment_get", "fragment_len", "fragment_row", "fragment_row_lanes",
    "fragment_row_slot", "fragment_row_slots", "fragment_set", "group_fragment_a", "group_fragment_acc",
    "group_mma", "group_wait", "isinf", "isnan", "lane_pos", "load_fragment", "load_vec", "log", "log1p",
    "log2", "make_vec", "max", "min", "mma", "plane_all", "plane_any", "plane_ballot", "plane_broadcast",
    "plane_count", "plane_elect", "plane_exclusive_sum", "plane_inclusive_sum", "plane_max", "plane_min",
    "plane_pos", "plane_prod", "plane_shuffle", "plane_shuffle_xor", "plane_sum", "pow", "print", "role", "round",
    "rsqrt", "scalar_statements", "select", "shared", "shared_tile", "sigmoid", "sin", "splat", "sqrt",
    "static_assert",
    "store_fragment", "store_vec", "streaming_stores", "sync_cube", "sync_role", "tanh", "tile_offset", "unit_pos",
    "unit_pos_x", "unit_pos_y",
    "unit_pos_z", "unroll", "vec_max", "vec_min", "vec_sum",
]


def __getattr__(name: str):
    """`kd.testing` (the test harness) loads on first use: importing kerneldsl never imports pytest."""
    if name == "testing":
        import importlib
        return importlib.import_module(f"{__name__}.testing")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
