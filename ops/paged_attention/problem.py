"""Validation for `rudnn.paged_attention` (SPEC §4): the family error, and the checks turning
an attention / MLA / append call on a `DevicePlan` into one `Problem` record, before any
launch. (The plan's own rules live in host_plan.py.)"""
from __future__ import annotations

from dataclasses import dataclass

from kerneldsl.tensor import Tensor

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks

MAX_HEAD_DIM = 1024
MAX_ROPE_DIM = 256


class PagedAttentionError(RudnnError):
    """Bad input to a rudnn.paged_attention plan, call or workspace."""


CHECKS = Checks(PagedAttentionError)


@dataclass(frozen=True)
class Problem:
    """A validated attention or MLA call. MLA is attention with one KV head whose keys are
    [latent | kp] and whose values are the latent: `qp`/`kp` hold the rotary part (P > 0)
    or repeat q/k (P = 0, never read)."""

    q: Tensor
    qp: Tensor
    k: Tensor
    kp: Tensor
    v: Tensor
    scale: float
    causal: bool
    P: int

    @property
    def runtime(self):
        return self.q.runtime

    @property
    def dtype(self):
        return self.q.dtype

    @property
    def queries(self) -> int:
        return self.q.shape[0]

    @property
    def Hq(self) -> int:
        return self.q.shape[1]

    @property
    def Hkv(self) -> int:
        return self.k.shape[2]

    @property
    def group(self) -> int:
        """Query heads per KV head: query head h reads KV head h // group."""
        return self.Hq // self.Hkv

    @property
    def D(self) -> int:
        return self.q.shape[2]

    @property
    def Dv(self) -> int:
        return self.v.shape[3]

    @property
    def out_shape(self) -> tuple:
        return (self.queries, self.Hq, self.Dv)


def _operand(check: Checks, name: str, t, rank: int, dtype=None, dtype_of: str = "q") -> Tensor:
    """A contiguous tensor of `rank`, F32/F16/BF16, of `dtype` (that of `dtype_of`) if given."""
    check.tensor(name, t, rank=rank, dtypes=FLOAT_DTYPES)
    if dtype is not None and t.dtype is not dtype:
        check.fail(f"{name} must have the dtype of {dtype_of} ({dtype.name.upper()}), got {t.dtype.name.upper()}")
    if not t.is_contiguous():
        check.fail(f"{name} must be contiguous, got strides {list(t.strides)} for shape {list(t.shape)}")
    return t


def check_plan_runtime(check: Checks, named: dict, plan) -> None:
    """All tensors on one runtime, and that runtime the one the plan was uploaded for."""
    check.same_runtime(named)
    name, first = next((n, t) for n, t in named.items() if t is not None)
    if first.runtime.device_key != plan.runtime.device_key:
        check.fail(f"the plan was uploaded for runtime {plan.runtime.name!r} but {name} is on "
                   f"{first.runtime.name!r}: upload the plan for the runtime of the tensors")


def _cache_shape(check: Checks, name: str, t: Tensor, host, what: str) -> None:
    if t.shape[0] != host.pages or t.shape[1] != host.page_size:
        check.fail(f"{name} must have shape [pages={host.pages}, page_size={host.page_size}, {what}], "
                   f"got {list(t.shape)}")


def _head_dim(check: Checks, name: str, value: int, high: int = MAX_HEAD_DIM) -> None:
    if not 1 <= value <= high:
        check.fail(f"{name} must be between 1 and {high}, got {value}")


def _common(check: Checks, plan, q: Tensor, scale, causal) -> tuple:
    if q.shape[0] != plan.host().query_count():
        check.fail(f"q must have one row per query of the plan ({plan.host().query_count()}), got {q.shape[0]}")
    return check.number("scale", scale, positive=True), check.boolean("causal", causal)


def _operands(check: Checks, plan, named: dict, caches: dict) -> None:
    """q first (rank 3), then the others: one runtime (the plan's), q's dtype, contiguous;
    the caches named in `caches` (rank 4, [pages, page_size, <its entry>]), the rest rank 3."""
    q = check.tensor("q", named["q"], rank=3, dtypes=FLOAT_DTYPES)
    check_plan_runtime(check, {n: (t if isinstance(t, Tensor) else None) for n, t in named.items()}, plan)
    for n, t in named.items():
        _operand(check, n, t, 4 if n in caches else 3, None if n == "q" else q.dtype)
    for n, what in caches.items():
        _cache_shape(check, n, named[n], plan.host(), what)


def validate_attention(plan, q, k, v, scale, causal, where: str = "attention") -> Problem:
    """q [queries, Hq, D], k [pages, page_size, Hkv, D], v [pages, page_size, Hkv, Dv]."""
    check = CHECKS.at(where)
    _operands(check, plan, {"q": q, "k": k, "v": v}, {"k": "Hkv, D", "v": "Hkv, Dv"})
    Hq, D = q.shape[1], q.shape[2]
    Hkv = k.shape[2]
    if v.shape[2] != Hkv:
        check.fail(f"v must have k's KV heads ({Hkv}) on axis 2, got {v.shape[2]}")
    if k.shape[3] != D:
        check.fail(f"k must have q's head dimension D = {D} on axis 3, got {k.shape[3]}")
    if Hkv < 1 or Hq % Hkv != 0:
        check.fail(f"q's heads ({Hq}) must be a multiple of k's KV heads ({Hkv})")
    _head_dim(check, "D (q's axis 2)", D)
    _head_dim(check, "Dv (v's axis 3)", v.shape[3])
    scale, causal = _common(check, plan, q, scale, causal)
    return Problem(q, q, k, k, v, scale, causal, 0)


def validate_mla(plan, q, qp, latent, kp, scale, causal, where: str = "mla") -> Problem:
    """q [queries, H, R], qp [queries, H, P], latent [pages, page_size, 1, R], kp [.., 1, P]."""
    check = CHECKS.at(where)
    _operands(check, plan, {"q": q, "qp": qp, "latent": latent, "kp": kp}, {"latent": "1, R", "kp": "1, P"})
    host = plan.host()
    H, R = q.shape[1], q.shape[2]
    P = qp.shape[2]
    if qp.shape[:2] != q.shape[:2]:
        check.fail(f"qp must have shape [{q.shape[0]}, {H}, P] (q's rows and heads), got {list(qp.shape)}")
    if latent.shape[2] != 1 or latent.shape[3] != R:
        check.fail(f"latent must have shape [{host.pages}, {host.page_size}, 1, R={R}], got {list(latent.shape)}")
    if kp.shape[2] != 1 or kp.shape[3] != P:
        check.fail(f"kp must have shape [{host.pages}, {host.page_size}, 1, P={P}], got {list(kp.shape)}")
    _head_dim(check, "R (q's axis 2)", R)
    _head_dim(check, "P (qp's axis 2)", P, MAX_ROPE_DIM)
    scale, causal = _common(check, plan, q, scale, causal)
    return Problem(q, qp, latent, kp, latent, scale, causal, P)


def validate_workspace(check: Checks, p: Problem, workspace) -> None:
    """A SplitWorkspace matching the call's queries, heads and value dimension, on its runtime."""
    from .workspace import SplitWorkspace
    check.instance("workspace", workspace, SplitWorkspace)
    want = (p.queries, p.Hq, p.Dv)
    got = (workspace.queries, workspace.heads, workspace.value_dim)
    if got != want:
        check.fail(f"workspace must be made for (queries, heads, value_dim) = {want}, got {got}")
    check.on_runtime("workspace", workspace.tensor, p.runtime, "q")


def validate_append(plan, new_k, new_v, k_cache, v_cache) -> tuple:
    """new_k [queries, Hkv, D], new_v [queries, Hkv, Dv] into caches [pages, page_size, Hkv, D|Dv]
    of one dtype; the plan must pass validate_writes()."""
    check = CHECKS.at("append")
    named = {"new_k": new_k, "new_v": new_v, "k_cache": k_cache, "v_cache": v_cache}
    for n, t in named.items():
        check.tensor(n, t, rank=3 if n.startswith("new") else 4, dtypes=FLOAT_DTYPES)
    check_plan_runtime(check, named, plan)
    for n, t in named.items():
        _operand(check, n, t, t.ndim, k_cache.dtype, "k_cache")
    host = plan.host()
    _cache_shape(check, "k_cache", k_cache, host, "Hkv, D")
    _cache_shape(check, "v_cache", v_cache, host, "Hkv, Dv")
    Q = host.query_count()
    want_k = (Q, k_cache.shape[2], k_cache.shape[3])
    want_v = (Q, v_cache.shape[2], v_cache.shape[3])
    check.shape("new_k", new_k, want_k, "queries, k_cache's Hkv and D")
    check.shape("new_v", new_v, want_v, "queries, v_cache's Hkv and Dv")
    host.validate_writes()
    return new_k, new_v, k_cache, v_cache
