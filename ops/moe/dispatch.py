"""Dispatch (tokens -> rows grouped by expert) and combine (rows -> tokens).

`DispatchedTokens` holds the grouped rows and what combine needs: for every token,
its slots' rows and weights listed in ascending expert-id order. Every
(token, slot) pair becomes one row; nothing is dropped.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.replay import replayable

from . import dispatch_kernels as dk
from .problem import CHECKS, check_dispatch_input, check_tensor
from .tiles import exclusive_scan, scan_units, tile_offsets

COUNT_UNITS = 256
# dispatches of at most SMALL_PAIRS (token, slot) pairs over at most SMALL_EXPERTS experts
# count and scan in one launch (dispatch_kernels.count_and_scan): a memset and a launch fewer
SMALL_PAIRS = 4096
SMALL_EXPERTS = 1024
ROW_UNITS = 256


def _units_for(width: int) -> int:
    """Units per cube for a row of `width` elements: a power of two from 32 to ROW_UNITS."""
    return min(ROW_UNITS, max(32, 1 << max(0, width - 1).bit_length()))


class DispatchedTokens:
    """The rows of every (token, slot) pair grouped by expert.

    `values()` [T*top_k, H] (the input dtype), `row_experts()` U32 [T*top_k],
    `expert_offsets()` U32 [E+1] (exclusive prefix sum of the per-expert counts);
    rows inside one expert are in no particular order. `combine(expert_output)`
    sums each token's rows back, weighted, in F32 and ascending expert id."""

    def __init__(self, plan, values, row_experts, offsets, pair_rows, pair_weights):
        self.plan = plan
        self._values = values
        self._row_experts = row_experts
        self._offsets = offsets
        self._pair_rows = pair_rows
        self._pair_weights = pair_weights
        self._tile_offsets: dict = {}

    def values(self) -> kd.Tensor:
        return self._values

    def row_experts(self) -> kd.Tensor:
        return self._row_experts

    def expert_offsets(self) -> kd.Tensor:
        return self._offsets

    @property
    def runtime(self):
        return self._values.runtime

    def rows(self) -> int:
        return self._values.shape[0]

    def tile_offsets(self, rows_per_tile: int) -> kd.Tensor:
        """U32 [E+1]: exclusive prefix sum of ceil(count_e / rows_per_tile) (computed once per size)."""
        t = self._tile_offsets.get(rows_per_tile)
        if t is None:
            t = self._tile_offsets[rows_per_tile] = tile_offsets(self._offsets, self.plan.experts(), rows_per_tile)
        return t

    def combine(self, expert_output: kd.Tensor) -> kd.Tensor:
        """out[t] = sum_j weight[t, j] * expert_output[row(t, j)], in F32, ascending expert id."""
        R = self.rows()
        check_tensor("expert_output", expert_output, ndim=2, runtime=self.runtime, runtime_of="the dispatched values")
        if expert_output.shape[0] != R:
            CHECKS.fail(f"expert_output must have {R} rows (tokens x top_k = {self.plan.tokens()} x "
                        f"{self.plan.top_k()}), got shape {expert_output.shape}")
        if expert_output.dtype is not self._values.dtype:
            CHECKS.fail(f"expert_output must have the dtype of the dispatched values "
                        f"({self._values.dtype.name.upper()}), got {expert_output.dtype.name.upper()}")
        return _combine(expert_output, self._pair_rows, self._pair_weights, self.plan.tokens(), self.plan.top_k())

    def __repr__(self):
        return (f"DispatchedTokens(rows={self.rows()}, hidden={self._values.shape[1]}, "
                f"experts={self.plan.experts()}, runtime={self.runtime.name!r})")


@replayable
def _combine(expert_output: kd.Tensor, pair_rows: kd.Tensor, pair_weights: kd.Tensor, T: int, k: int) -> kd.Tensor:
    """`DispatchedTokens.combine` of a checked expert_output: [T, W], each token's k rows weighed."""
    W = expert_output.shape[1]
    out = expert_output.runtime.empty((T, W), expert_output.dtype)
    if T == 0 or W == 0:
        return out
    dk.combine_rows[T, _units_for(W)](expert_output, pair_rows, pair_weights, out, k)
    return out


def dispatch(plan, input: kd.Tensor) -> DispatchedTokens:  # noqa: A002
    """Group the rows of `input` [T, H] by expert, one row per (token, slot)."""
    check_dispatch_input(input, plan)
    return DispatchedTokens(plan, *_dispatch(input, plan.expert_indices(), plan.weights(), plan.experts()))


@replayable
def _dispatch(input: kd.Tensor, ids: kd.Tensor, weights: kd.Tensor, E: int) -> tuple:  # noqa: A002
    """(values, row_experts, offsets, pair_rows, pair_weights) of `dispatch` for a checked input
    and a plan's ids and weights [T, top_k] over E experts."""
    rt = input.runtime
    T, H = input.shape
    R = T * ids.shape[1]
    values = rt.empty((R, H), input.dtype)
    row_experts = rt.empty((R,), kd.u32)
    pair_rows = rt.empty((R,), kd.u32)
    pair_weights = rt.empty((R,), kd.f32)
    if R == 0:
        return values, row_experts, rt.zeros((E + 1,), kd.u32), pair_rows, pair_weights
    offsets = rt.empty((E + 1,), kd.u32)   # (every entry written by the scan)
    rank = rt.empty((R,), kd.u32)
    if R <= SMALL_PAIRS and E <= SMALL_EXPERTS:   # one cube counts in shared memory and scans
        dk.count_and_scan[1, scan_units(rt, max(R, E))](ids, rank, offsets, R, E, SMALL_EXPERTS)
    else:
        counts = rt.zeros((E,), kd.u32)
        dk.count_experts[-(-R // COUNT_UNITS), COUNT_UNITS](ids, counts, rank, R)
        exclusive_scan[1, scan_units(rt, E)](counts, offsets, E, False, 1)
    dk.place_rows[T, _units_for(H)](input, ids, weights, rank, offsets, values, row_experts, pair_rows, pair_weights)
    return values, row_experts, offsets, pair_rows, pair_weights
