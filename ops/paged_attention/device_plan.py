"""`DevicePlan`: a HostPlan's metadata uploaded to one runtime (page tables as an I32
[sequences, widest table] tensor, lengths, sequence ids and positions), and the calls that
run on it: attention, MLA (each unsplit or split over a workspace) and cache append."""
from __future__ import annotations

import numpy as np

import kerneldsl as kd
from kerneldsl.replay import replayable

from .append_kernel import append_kernel
from .decode_kernel import decode_kernel
from .decode_lanes import decode_lanes_kernel
from .decode_mma import decode_mma_kernel
from .host_plan import HostPlan
from .merge_kernel import merge_kernel
from .mla_group import mla_group_kernel
from .mla_mma import mla_mma_kernel
from .mla_roles import mla_roles_kernel, views
from .paged_kernel import paged_kernel
from ..errors import RudnnError
from .problem import (CHECKS, Problem, validate_append, validate_attention, validate_mla,
                      validate_workspace)
from . import tuning
from .scores import LOG2E
from .tuning import (auto_splits, decode_launch, decode_splits, lanes_launch, launch, mla_group_launch,
                     mla_mma_launch, mla_roles_launch, mma_decode_launch)
from .workspace import SplitWorkspace

LAUNCHES = {"decode": decode_launch, "decode_mma": mma_decode_launch, "mla_mma": mla_mma_launch,
            "mla_group": mla_group_launch, "mla_roles": mla_roles_launch,
            "decode_lanes": lanes_launch}  # the launch shape of each kernel but the general one
APPEND_UNITS = 128
MERGE_UNITS = 64


class DevicePlan:
    """A HostPlan on the runtime of the tensor it was uploaded `like`; build with `upload`."""

    replay_fields_fixed = True  # (kerneldsl/replay.py: its key part is made once per plan)

    def __init__(self, host: HostPlan, runtime, tables, lengths, sequence_ids, positions):
        self._host = host
        self._longest = {}  # causal -> the most tokens any row sees (picks the automatic split)
        self._fields = None  # replay_fields(), made on first use
        self.runtime = runtime
        self.tables, self.lengths, self.sequence_ids, self.positions = tables, lengths, sequence_ids, positions

    def replay_fields(self) -> tuple:
        """What the host work of this plan's calls depends on besides their own arguments
        (kerneldsl/replay.py keys the replayed calls on it): the metadata tensors (a replay
        launches on the new plan's), the plan's sizes, the longest row (which picks the split)
        either way of `causal`, and whether `append`'s write rules hold. Fixed once uploaded."""
        if self._fields is None:
            host = self._host
            try:
                host.validate_writes()
                writable = True
            except RudnnError:
                writable = False
            longest = tuple(max((host.visible(r, c) for r in range(host.query_count())), default=0)
                            for c in (False, True))
            self._fields = (self.tables, self.lengths, self.sequence_ids, self.positions, host.page_size,
                            host.pages, host.query_count(), longest, writable)
        return self._fields

    @classmethod
    def upload(cls, host: HostPlan, like: kd.Tensor) -> "DevicePlan":
        """Copy `host`'s metadata onto `like`'s runtime."""
        check = CHECKS.at("DevicePlan.upload")
        check.instance("host", host, HostPlan)
        check.tensor("like", like)
        rt = like.runtime
        width = max(1, max(len(t) for t in host.tables))
        S = host.sequence_count()
        Q = max(1, host.query_count())
        # one upload (each costs a host→device copy): the table, then lengths, ids and positions,
        # each starting at a multiple of 16 elements (64 bytes)
        starts, end = [], 0
        for n in (S * width, S, Q, Q):
            starts.append(end)
            end += -(-n // 16) * 16
        packed = np.zeros(end, np.int32)
        for s, t in enumerate(host.tables):
            packed[starts[0] + s * width:starts[0] + s * width + len(t)] = t
        packed[starts[1]:starts[1] + S] = host.lengths
        packed[starts[2]:starts[2] + len(host.sequence_ids)] = host.sequence_ids
        packed[starts[3]:starts[3] + len(host.positions)] = host.positions
        whole = rt.tensor(packed)
        at = [whole.offset + start for start in starts]  # the four views made directly (a slice
        # and a reshape cost twice as much, 2.8 µs of the call's 14 on the cpu)
        return cls(host, rt, whole._view((S, width), (width, 1), at[0]), whole._view((S,), (1,), at[1]),
                   whole._view((Q,), (1,), at[2]), whole._view((Q,), (1,), at[3]))

    def host(self) -> HostPlan:
        """The HostPlan this plan was uploaded from."""
        return self._host

    # ------------------------------------------------------------------ attention
    @replayable
    def attention(self, q, k, v, scale, causal):
        """softmax(scale·q·Kᵀ)·V over each row's visible tokens: [queries, Hq, Dv] in q's dtype."""
        return self._run(validate_attention(self, q, k, v, scale, causal), None)

    @replayable
    def mla(self, q, qp, latent, kp, scale, causal):
        """Multi-head latent attention: score scale·(q·latent + qp·kp), values the latent: [queries, H, R]."""
        return self._run(validate_mla(self, q, qp, latent, kp, scale, causal), None)

    def attention_with_workspace(self, q, k, v, scale, causal, workspace: SplitWorkspace):
        """`attention` on the split path, over `workspace`'s splits."""
        p = validate_attention(self, q, k, v, scale, causal, "attention_with_workspace")
        validate_workspace(CHECKS.at("attention_with_workspace"), p, workspace)
        return self._run(p, workspace)

    def mla_with_workspace(self, q, qp, latent, kp, scale, causal, workspace: SplitWorkspace):
        """`mla` on the split path, over `workspace`'s splits."""
        p = validate_mla(self, q, qp, latent, kp, scale, causal, "mla_with_workspace")
        validate_workspace(CHECKS.at("mla_with_workspace"), p, workspace)
        return self._run(p, workspace)

    def _run(self, p: Problem, workspace: SplitWorkspace | None):
        rt = p.runtime
        out = rt.empty(p.out_shape, p.dtype)
        if out.size == 0:  # no queries, or no query heads (Hq = 0)
            return out
        kind = tuning.kernel_for(p)  # looked up at call time: tests force each kernel
        lay = LAUNCHES.get(kind, launch)(p)
        if p.causal not in self._longest:
            self._longest[p.causal] = max(self._host.visible(r, p.causal) for r in range(p.queries))
        longest = self._longest[p.causal]
        if workspace is None:
            if kind == "general":
                splits = auto_splits(p, lay, longest)
            else:
                waves = {"decode_mma": tuning.DECODE_MMA_WAVES, "mla_mma": tuning.MLA_WAVES,
                         "mla_group": tuning.MLA_GROUP_WAVES, "mla_roles": tuning.MLA_ROLES_WAVES,
                         "decode_lanes": tuning.LANES_WAVES}.get(kind)
                splits = decode_splits(p, lay, longest, waves)
            if splits > 1:
                workspace = SplitWorkspace(p.q, p.queries, p.Hq, p.Dv, splits)
        splits = 1 if workspace is None else workspace.splits
        span = -(-longest // splits)  # the most tokens of any row's share (the host kernels' loops run to it)
        work = out if workspace is None else workspace.tensor
        meta = (self.tables, self.lengths, self.sequence_ids, self.positions)
        if kind == "decode_mma":
            decode_mma_kernel[lay.grid(p, splits), lay.units(p)](
                p.q, p.k, p.v, *meta, out, work, p.scale * LOG2E, int(p.causal), splits, p.D, p.Dv, lay.heads,
                p.k.shape[1], lay.stages, workspace is not None)
        elif kind == "mla_roles":
            mla_roles_kernel[lay.grid(p, splits), lay.units(p)](
                *views(p.q, p.qp, p.k, p.kp), *meta, out, work, p.scale * LOG2E, int(p.causal), splits, p.Hq, p.Dv,
                p.P, lay.tokens, p.k.shape[1], lay.box, lay.stages, workspace is not None)
        elif kind == "mla_group":
            mla_group_kernel[lay.grid(p, splits), lay.units(p)](
                p.q, p.qp, p.k, p.kp, *meta, out, work, p.scale * LOG2E, int(p.causal), splits, p.Dv, p.P,
                lay.tokens, p.k.shape[1], lay.stages, workspace is not None)
        elif kind == "mla_mma":
            mla_mma_kernel[lay.grid(p, splits), lay.units(p)](
                p.q, p.qp, p.k, p.kp, *meta, out, work, p.scale * LOG2E, int(p.causal), splits, p.Dv, p.P,
                lay.head_groups, lay.tiles, p.k.shape[1], lay.stages, workspace is not None)
        elif kind == "decode":
            decode_kernel[lay.grid(p, splits), lay.units(p)](
                p.q, p.k, p.v, *meta, out, work, p.scale * LOG2E, int(p.causal), splits, p.D, p.Dv, lay.heads,
                lay.lanes_per_token, lay.vector, lay.tokens_per_step, p.k.shape[1], lay.prefetch, lay.head_block,
                workspace is not None)
        elif kind == "decode_lanes":
            decode_lanes_kernel[lay.grid(p, splits), lay.units](
                p.q, p.k, p.v, *meta, out, work, p.scale * LOG2E, int(p.causal), splits, span, p.D, p.Dv, lay.heads,
                lay.tokens, lay.units, lay.head_block, p.k.shape[1], workspace is not None)
        else:
            paged_kernel[lay.grid(p, splits), lay.units](
                p.q, p.qp, p.k, p.kp, p.v, *meta, out, work, p.scale * LOG2E, int(p.causal), splits, span, p.D, p.P,
                p.Dv, lay.heads, lay.heads_per_load, workspace is not None, lay.key_vector, lay.rope_vector)
        if workspace is not None:
            merge_kernel[(p.queries, p.Hq), MERGE_UNITS](work, out, p.Dv)
        return out

    # ------------------------------------------------------------------ append
    def append(self, new_k, new_v, k_cache, v_cache):
        """Write each query row's new K/V into its slot of the caches, in place; returns the caches."""
        self._append(new_k, new_v, k_cache, v_cache)
        return k_cache, v_cache

    @replayable
    def _append(self, new_k, new_v, k_cache, v_cache) -> None:
        """`append`'s checks and launches (replayed per layout; `append` hands back the very caches)."""
        validate_append(self, new_k, new_v, k_cache, v_cache)
        if self._host.query_count() > 0:
            Q = self._host.query_count()
            append_kernel[(Q,), APPEND_UNITS](new_k, k_cache, new_v, v_cache, self.tables, self.sequence_ids,
                                              self.positions)

    def __repr__(self) -> str:
        return f"DevicePlan({self._host!r}, runtime={self.runtime.name!r})"
