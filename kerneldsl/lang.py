"""The names a kernel body uses (`kd.cube_pos_x()`, `kd.plane_sum(x)`, ...).

The builtins are declared, with their front-end handlers and documentation, in
`kerneldsl.builtins` (one module per topic); this module gathers their stubs, which only
have meaning inside `@kd.kernel`: called from plain Python they raise, naming the
function. It also holds the other names a kernel reads: `kd.PLANE_DIM`, `kd.inf`,
`kd.nan`, and the parameter annotations `kd.Tensor[...]` and `kd.Const[...]`.
"""
from __future__ import annotations

import math

from .annotations import Const, TensorAnnotation as _TensorAnnotation  # noqa: F401  (kernel.py reads it here)
from .builtins import REGISTRY
from .builtins.positions import (cube_pos_x, cube_pos_y, cube_pos_z, cube_count_x, cube_count_y, cube_count_z,
    cube_dim_x, cube_dim_y, cube_dim_z, unit_pos_x, unit_pos_y, unit_pos_z, cube_units, unit_pos, plane_pos,
    lane_pos, plane_count)  # noqa: F401
from .builtins.memory import (avoid_gathers, cubes_per_compute_unit, scalar_statements, shared,  # noqa: F401
                              streaming_stores, sync_cube)
from .builtins.values import cast, bitcast, select, unroll, static_assert  # noqa: F401
from .builtins.math import (exp, exp2, exp2_fast, log, log2, log1p, sqrt, rsqrt, tanh, sigmoid, erf, sin, cos,
    floor, ceil, round, pow, min, max, clamp, abs, fma, isnan, isinf)  # noqa: F401,A004
from .builtins.vectors import load_vec, store_vec, splat, make_vec, vec_sum, vec_max, vec_min  # noqa: F401
from .builtins.async_copy import async_copy, async_commit, async_wait  # noqa: F401
from .builtins.plane import (plane_sum, plane_prod, plane_min, plane_max, plane_inclusive_sum,
    plane_exclusive_sum, plane_broadcast, plane_shuffle, plane_shuffle_xor, plane_ballot, plane_all,
    plane_any, plane_elect)  # noqa: F401
from .builtins.atomics import (atomic_add, atomic_min, atomic_max, atomic_exchange, atomic_cas, atomic_and,
    atomic_or, atomic_xor)  # noqa: F401
from .builtins.fragments import (fragment_a, fragment_b, fragment_acc, fill_fragment, load_fragment,
    store_fragment, mma)  # noqa: F401
from .builtins.fragment_elements import (fragment_len, fragment_row, fragment_col, fragment_row_slot,
    fragment_row_slots, fragment_row_lanes, fragment_get, fragment_set, fragment_convert)  # noqa: F401
from .builtins.group import (group_fragment_acc, group_fragment_a, shared_tile, tile_offset, group_mma,
    group_wait)  # noqa: F401
from .builtins.arrival import (arrival_barriers, barrier_init, barrier_arrive, barrier_expect,
    barrier_wait)  # noqa: F401
from .builtins.bulk_copy import bulk_copy, bulk_store, bulk_store_wait  # noqa: F401
from .builtins.roles import role, sync_role  # noqa: F401
from .builtins.debug import print  # noqa: F401,A004
from .tensor import Tensor  # noqa: F401  (kd.Tensor[...] -> an annotation)


class _PlaneDim:
    """Marker for the plane size, a compile-time constant of the runtime."""

    def __repr__(self):
        return "kd.PLANE_DIM"


PLANE_DIM = _PlaneDim()
inf = math.inf
nan = math.nan

__all__ = ["Tensor", "Const", "PLANE_DIM", "inf", "nan"] + sorted(REGISTRY)
