"""SwiGLU experts over dispatched rows: y = (silu(x·gateᵀ) * (x·upᵀ))·downᵀ per expert.

Two launches per forward, whatever the number of experts: the gate and up
projections fused with the gating into one grouped GEMM, then the down
projection. `Scalar` runs everywhere; `TensorCore` runs F16/BF16 on the matrix
primitive; `Auto` takes TensorCore where the runtime's matrix unit is hardware
for the dtype and Scalar otherwise.
"""
from __future__ import annotations

import kerneldsl as kd

from . import gemm_scalar as gs
from . import gemm_tensorcore as gt
from .dispatch import DispatchedTokens
from .options import (GroupedStrategy, MoeError, check_group_options, check_routing_options, check_strategy,
                      check_tensor)
from .routing import check_logits, route, route_sigmoid_grouped
from .tiles import tile_count_bound

MMA_DTYPES = (kd.f16, kd.bf16)


def scalar_blocks(rt) -> tuple:
    """Units per scalar-GEMM cube (spread along K) for the fused and the plain projection. On
    the CPU a cube's units are one or two vectors, so the 16 accumulators stay in registers
    (measured best: 16 fused, 32 plain); GPUs want several planes."""
    return (16, 32) if rt.capabilities.backend == "cpu" else (128, 128)


def resolve_strategy(strategy: GroupedStrategy, dtype, rt) -> GroupedStrategy:
    """The strategy that will run: raises MoeError ("unavailable") for a TensorCore request the
    runtime or dtype cannot serve; Auto picks TensorCore only on matrix hardware."""
    caps = rt.capabilities
    supported = dtype in MMA_DTYPES and dtype in caps.mma_dtypes and (16, 16, 16) in caps.mma_shapes
    if strategy is GroupedStrategy.TensorCore:
        if dtype not in MMA_DTYPES:
            raise MoeError(f"strategy TensorCore is unavailable for {dtype.name.upper()} weights: it needs F16 or BF16")
        if not supported:
            raise MoeError(f"strategy TensorCore is unavailable on {rt.name}: its matrix fragments support "
                           f"{', '.join(d.name.upper() for d in caps.mma_dtypes) or 'no dtype'}, "
                           f"not {dtype.name.upper()}")
        return strategy
    if strategy is GroupedStrategy.Auto:
        return GroupedStrategy.TensorCore if supported and caps.mma_native else GroupedStrategy.Scalar
    return strategy


def _packed_aligned(t: kd.Tensor) -> bool:
    return t.is_contiguous() and t.offset % 8 == 0


class SwiGluExperts:
    """E SwiGLU experts: `gate`, `up` [E, I, H] and `down` [E, H, I], one float dtype, one
    runtime. Reusable across batches; the weights are made contiguous once."""

    def __init__(self, gate: kd.Tensor, up: kd.Tensor, down: kd.Tensor):
        check_tensor("gate", gate, ndim=3)
        rt = gate.runtime
        check_tensor("up", up, ndim=3, runtime=rt)
        check_tensor("down", down, ndim=3, runtime=rt)
        for name, t in (("up", up), ("down", down)):
            if t.dtype is not gate.dtype:
                raise MoeError(f"{name} must have the dtype of gate ({gate.dtype.name.upper()}), "
                               f"got {t.dtype.name.upper()}")
        E, I, H = gate.shape
        if min(E, I, H) < 1:
            raise MoeError(f"gate must have shape [E, I, H] with E, I, H > 0, got {gate.shape}")
        if up.shape != gate.shape:
            raise MoeError(f"up must have the shape of gate {gate.shape} ([E, I, H]), got {up.shape}")
        if down.shape != (E, H, I):
            raise MoeError(f"down must have shape [E, H, I] = {(E, H, I)}, got {down.shape}")
        self.gate = gate.contiguous()
        self.up = up.contiguous()
        self.down = down.contiguous()
        self.runtime = rt
        self.dtype = gate.dtype
        self.experts, self.intermediate, self.hidden = E, I, H

    def __repr__(self):
        return (f"SwiGluExperts(experts={self.experts}, hidden={self.hidden}, intermediate={self.intermediate}, "
                f"dtype={self.dtype.name}, runtime={self.runtime.name!r})")

    # ------------------------------------------------------------------ checks
    def _check_dispatched(self, dispatched) -> None:
        if not isinstance(dispatched, DispatchedTokens):
            raise MoeError(f"dispatched must be a DispatchedTokens (from RoutingPlan.dispatch), "
                           f"got {type(dispatched).__name__}")
        v = dispatched.values()
        check_tensor("dispatched.values()", v, ndim=2, runtime=self.runtime)
        if v.dtype is not self.dtype:
            raise MoeError(f"dispatched values are {v.dtype.name.upper()} but the expert weights are "
                           f"{self.dtype.name.upper()}; dispatch an input of the weights' dtype")
        if v.shape[1] != self.hidden:
            raise MoeError(f"dispatched values have hidden size {v.shape[1]}, the experts need H = {self.hidden}")
        if dispatched.plan.experts() != self.experts:
            raise MoeError(f"the routing plan has {dispatched.plan.experts()} experts, these experts are "
                           f"{self.experts}")

    def _check_forward_args(self, input, logits) -> None:  # noqa: A002
        check_tensor("input", input, ndim=2, runtime=self.runtime)
        check_logits(logits)
        check_tensor("logits", logits, ndim=2, runtime=self.runtime)
        if input.dtype is not self.dtype:
            raise MoeError(f"input is {input.dtype.name.upper()} but the expert weights are "
                           f"{self.dtype.name.upper()}")
        if input.shape[1] != self.hidden:
            raise MoeError(f"input must have hidden size H = {self.hidden}, got shape {input.shape}")
        if logits.shape[0] != input.shape[0]:
            raise MoeError(f"logits must have one row per input token ({input.shape[0]}), got shape {logits.shape}")
        if logits.shape[1] != self.experts:
            raise MoeError(f"logits must have one column per expert ({self.experts}), got shape {logits.shape}")

    # ------------------------------------------------------------------ forward passes
    def forward(self, input: kd.Tensor, logits: kd.Tensor, options) -> kd.Tensor:  # noqa: A002
        """Softmax-route, dispatch, run the experts (Scalar) and combine: [T, H]."""
        self._check_forward_args(input, logits)
        check_routing_options(options, self.experts)
        dispatched = route(logits, options).dispatch(input)
        return dispatched.combine(self.forward_dispatched(dispatched))

    def forward_sigmoid_grouped(self, input: kd.Tensor, logits: kd.Tensor, bias, options,  # noqa: A002
                                strategy: GroupedStrategy) -> kd.Tensor:
        """Grouped-sigmoid-route, dispatch, run the experts with `strategy` and combine: [T, H]."""
        self._check_forward_args(input, logits)
        check_group_options(options, self.experts)
        resolve_strategy(check_strategy(strategy), self.dtype, self.runtime)
        if bias is not None:
            check_tensor("bias", bias, ndim=1, dtypes=(kd.f32,), runtime=self.runtime)
        dispatched = route_sigmoid_grouped(logits, bias, options).dispatch(input)
        return dispatched.combine(self.forward_dispatched_with_strategy(dispatched, strategy))

    def forward_dispatched(self, dispatched: DispatchedTokens) -> kd.Tensor:
        """The experts on every dispatched row, Scalar strategy: [T*top_k, H]."""
        return self.forward_dispatched_with_strategy(dispatched, GroupedStrategy.Scalar)

    def forward_dispatched_with_strategy(self, dispatched: DispatchedTokens, strategy: GroupedStrategy) -> kd.Tensor:
        """The experts on every dispatched row with `strategy`: [T*top_k, H]."""
        self._check_dispatched(dispatched)
        chosen = resolve_strategy(check_strategy(strategy), self.dtype, self.runtime)
        rt = self.runtime
        R, E, I, H = dispatched.rows(), self.experts, self.intermediate, self.hidden
        h = rt.empty((R, I), self.dtype)
        y = rt.empty((R, H), self.dtype)
        if R == 0:
            return y
        x = dispatched.values()
        offsets = dispatched.expert_offsets()
        if chosen is GroupedStrategy.TensorCore:
            tiles = dispatched.tile_offsets(gt.BM)
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
            tiles = dispatched.tile_offsets(gs.TM)
            fused, plain = scalar_blocks(rt)
            rows = tile_count_bound(R, E, gs.TM)
            cols = -(-I // gs.TN_FUSED)
            gs.grouped_gemm_swiglu[rows * cols, fused](x, self.gate, self.up, h, offsets, tiles, E, rows, cols,
                                                       fused, gs.GM)
            cols = -(-H // gs.TN_DOWN)
            gs.grouped_gemm[rows * cols, plain](h, self.down, y, offsets, tiles, E, rows, cols, plain, gs.GM)
        return y
