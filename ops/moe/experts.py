"""SwiGLU experts over dispatched rows: y = (silu(x·gateᵀ) * (x·upᵀ))·downᵀ per expert.

Two launches per forward, whatever the number of experts: the gate and up
projections fused with the gating into one grouped GEMM, then the down
projection. `Scalar` runs everywhere; `TensorCore` runs F16/BF16 on the matrix
primitive; `Auto` takes TensorCore where the runtime's matrix unit is hardware
for the dtype and Scalar otherwise.
"""
from __future__ import annotations

import kerneldsl as kd
from kerneldsl.replay import replayable

from . import gemm_roles as gr
from . import gemm_scalar as gs
from . import gemm_tensorcore as gt
from .dispatch import DispatchedTokens
from .options import GroupedStrategy
from .problem import (check_bias, check_dispatched, check_expert_weights, check_forward_args, check_group_options,
                      check_routing_options, check_strategy)
from .routing import route, route_sigmoid_grouped
from .tiles import tile_count_bound, tile_offsets
from .tuning import resolve_strategy, scalar_blocks


def _packed_aligned(t: kd.Tensor) -> bool:
    return t.is_contiguous() and t.offset % 8 == 0


class SwiGluExperts:
    """E SwiGLU experts: `gate`, `up` [E, I, H] and `down` [E, H, I], one float dtype, one
    runtime. Reusable across batches; the weights are made contiguous once and are read-only
    attributes (a replayed forward's key holds them, made once: kerneldsl/replay.py); their
    values may be updated in place."""

    replay_fields_fixed = True

    def __init__(self, gate: kd.Tensor, up: kd.Tensor, down: kd.Tensor):
        E, I, H = check_expert_weights(gate, up, down)
        self._weights = (gate.contiguous(), up.contiguous(), down.contiguous())
        self.runtime = gate.runtime
        self.dtype = gate.dtype
        self.experts, self.intermediate, self.hidden = E, I, H

    def __repr__(self):
        return (f"SwiGluExperts(experts={self.experts}, hidden={self.hidden}, intermediate={self.intermediate}, "
                f"dtype={self.dtype.name}, runtime={self.runtime.name!r})")

    @property
    def gate(self) -> kd.Tensor:
        return self._weights[0]

    @property
    def up(self) -> kd.Tensor:
        return self._weights[1]

    @property
    def down(self) -> kd.Tensor:
        return self._weights[2]

    def replay_fields(self) -> tuple:
        """The weights: all a forward's host work depends on besides its arguments (the
        forwards are replayed per layout, kerneldsl/replay.py)."""
        return self._weights

    # ------------------------------------------------------------------ forward passes
    @replayable
    def forward(self, input: kd.Tensor, logits: kd.Tensor, options) -> kd.Tensor:  # noqa: A002
        """Softmax-route, dispatch, run the experts (Scalar) and combine: [T, H]."""
        check_forward_args(self, input, logits)
        check_routing_options(options, self.experts)
        dispatched = route(logits, options).dispatch(input)
        return dispatched.combine(self.forward_dispatched(dispatched))

    @replayable
    def forward_sigmoid_grouped(self, input: kd.Tensor, logits: kd.Tensor, bias, options,  # noqa: A002
                                strategy: GroupedStrategy) -> kd.Tensor:
        """Grouped-sigmoid-route, dispatch, run the experts with `strategy` and combine: [T, H]."""
        check_forward_args(self, input, logits)
        check_group_options(options, self.experts)
        resolve_strategy(check_strategy(strategy), self.dtype, self.runtime)
        if bias is not None:
            check_bias(bias, self.experts, self.runtime)
        dispatched = route_sigmoid_grouped(logits, bias, options).dispatch(input)
        return dispatched.combine(self.forward_dispatched_with_strategy(dispatched, strategy))

    def forward_dispatched(self, dispatched: DispatchedTokens) -> kd.Tensor:
        """The experts on every dispatched row, Scalar strategy: [T*top_k, H]."""
        return self.forward_dispatched_with_strategy(dispatched, GroupedStrategy.Scalar)

    def forward_dispatched_with_strategy(self, dispatched: DispatchedTokens, strategy: GroupedStrategy) -> kd.Tensor:
        """The experts on every dispatched row with `strategy`: [T*top_k, H]."""
        check_dispatched(self, dispatched)
        chosen = resolve_strategy(check_strategy(strategy), self.dtype, self.runtime)
        return self._grouped_rows(dispatched.values(), dispatched.expert_offsets(), chosen)

    @replayable
    def _grouped_rows(self, x: kd.Tensor, offsets: kd.Tensor, chosen: GroupedStrategy) -> kd.Tensor:
        """The experts on checked rows `x` [R, H] grouped by expert (`offsets`, U32 [E+1]) with
        a resolved strategy: [R, H]. Replayed per layout (its tile offsets are computed in the
        call, so a replay reads the new call's)."""
        rt = self.runtime
        R, E, I, H = x.shape[0], self.experts, self.intermediate, self.hidden
        h = rt.empty((R, I), self.dtype)
        y = rt.empty((R, H), self.dtype)
        if R == 0:
            return y
        if chosen is GroupedStrategy.TensorCore and gr.usable(rt, (x, self.gate, self.up, self.down, h)):
            gr.run(x, self.gate, self.up, self.down, h, y, offsets, lambda tm: tile_offsets(offsets, E, tm), E,
                   lambda tm: tile_count_bound(R, E, tm))
        elif chosen is GroupedStrategy.TensorCore:
            tiles = tile_offsets(offsets, E, gt.BM)
            units = gt.PLANES * rt.plane_dim
            rows = tile_count_bound(R, E, gt.BM)
            vec_up = H % 8 == 0 and all(_packed_aligned(t) for t in (x, self.gate, self.up))
            vec_down = I % 8 == 0 and all(_packed_aligned(t) for t in (h, self.down))
            cols = -(-I // gt.BN_FUSED)
            gt.grouped_gemm_swiglu_tc[rows * cols, units](x, self.gate, self.up, h, offsets, tiles, E, rows, cols,
                                                          self.dtype, vec_up, H % gt.BK != 0, gt.GM)
            cols = -(-H // gt.BN_DOWN)
            gt.grouped_gemm_tc[rows * cols, units](h, self.down, y, offsets, tiles, E, rows, cols, self.dtype,
                                                   vec_down, I % gt.BK != 0, gt.GM)
        else:
            tiles = tile_offsets(offsets, E, gs.TM)
            fused, plain = scalar_blocks(rt, H, I)
            rows = tile_count_bound(R, E, gs.TM)
            cols = -(-I // gs.TN_FUSED)
            lanes = rt.capabilities.units_are_simd_lanes
            gs.grouped_gemm_swiglu[rows * cols, fused](x, self.gate, self.up, h, offsets, tiles, E, rows, cols,
                                                       fused, gs.GM, lanes)
            cols = -(-H // gs.TN_DOWN)
            gs.grouped_gemm[rows * cols, plain](h, self.down, y, offsets, tiles, E, rows, cols, plain, gs.GM, lanes)
        return y
