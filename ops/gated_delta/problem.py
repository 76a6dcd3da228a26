"""Validation of rudnn.gated_delta calls (SPEC §0, §3), all run before any launch: a call
becomes a `Problem` (the checked, contiguous tensors and their sizes) or raises
GatedDeltaError naming the function, the argument, what it got and what is needed."""
from __future__ import annotations

from dataclasses import dataclass

import kerneldsl as kd

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks
from .tuning import ROWS_PER_UNIT, recurrent_units, sweep_shared_bytes, sweep_tiling


class GatedDeltaError(RudnnError):
    """Bad arguments to a rudnn.gated_delta function."""


CHECKS = Checks(GatedDeltaError)
F32 = (kd.f32,)


@dataclass
class GatedDeltaInput:
    """One gated-delta-rule call: query/key [B, H, T, K], value [B, H, T, V], beta [B, H, T]
    (all one float dtype), log_decay [B, H, T] F32, initial_state [B, H, K, V] F32, and the
    factor query_scale applied to every query."""

    query: kd.Tensor
    key: kd.Tensor
    value: kd.Tensor
    beta: kd.Tensor
    log_decay: kd.Tensor
    initial_state: kd.Tensor
    query_scale: float


@dataclass
class GatedDeltaOutput:
    """output [B, H, T, V] in the query's dtype, final_state [B, H, K, V] F32."""

    output: kd.Tensor
    final_state: kd.Tensor


@dataclass(frozen=True)
class Problem:
    """A validated call: contiguous copies (or the tensors themselves) of every input, the
    sizes B, H, T, K, V of SPEC §3 and the query scale."""

    q: kd.Tensor
    k: kd.Tensor
    v: kd.Tensor
    beta: kd.Tensor
    g: kd.Tensor
    s0: kd.Tensor
    scale: float
    B: int
    H: int
    T: int
    K: int
    V: int

    @property
    def runtime(self):
        return self.q.runtime


def chunk_workspace_bytes(chunk_size: int) -> int:
    """The F32 triangular workspace of one chunk (SPEC §3): the c×c system and c decays."""
    return 4 * (chunk_size * chunk_size + chunk_size)


def validate(fn: str, input) -> Problem:  # noqa: A002
    """Check a GatedDeltaInput against SPEC §3 and that the recurrence fits a cube of this
    runtime; return the problem with contiguous tensors."""
    sizes = _checked(fn, input)
    K, units, limit = sizes[4], recurrent_units(sizes[4]), input.query.runtime.capabilities.max_cube_units
    if units > limit:
        CHECKS.at(fn).fail(f"K = {K} needs {units} units a cube ({ROWS_PER_UNIT} state rows a unit), more than "
                           f"this runtime's cubes have ({limit}): unavailable")
    return _packed(input, *sizes)


def validate_chunked(fn: str, input, chunk_size) -> tuple:  # noqa: A002
    """The input's rules (validate's, but the recurrent cube's K limit), plus chunk_size: an int
    > 0 whose workspace, and one state column of K beside the chunk, fit the runtime's shared
    memory. Every rule is checked before the inputs are packed (a strided input's copy is a
    launch)."""
    check = CHECKS.at(fn)
    sizes = _checked(fn, input)
    c = check.integer("chunk_size", chunk_size, low=1)
    limit = input.query.runtime.capabilities.max_shared_bytes
    if chunk_workspace_bytes(c) > limit:
        check.fail(f"chunk_size {c} needs a triangular workspace of 4·(c² + c) = {chunk_workspace_bytes(c)} bytes, "
                   f"more than this runtime's shared memory per cube ({limit} bytes)")
    K, V = sizes[4], sizes[5]
    if sweep_tiling(input.query.runtime.capabilities, K, V, c) is None:
        check.fail(f"K = {K} with chunk_size {c} needs {sweep_shared_bytes(K, c, 1)} bytes of shared memory per "
                   f"cube for one state column, more than this runtime has ({limit}): unavailable")
    return _packed(input, *sizes), c


def _packed(input, scale: float, B: int, H: int, T: int, K: int, V: int) -> Problem:  # noqa: A002
    """The problem of a checked input: each tensor itself where packed, else its contiguous copy."""
    return Problem(input.query.contiguous(), input.key.contiguous(), input.value.contiguous(),
                   input.beta.contiguous(), input.log_decay.contiguous(), input.initial_state.contiguous(), scale,
                   B, H, T, K, V)


def _checked(fn: str, input) -> tuple:  # noqa: A002
    """Every SPEC §3 rule of a GatedDeltaInput (no launch); (query_scale, B, H, T, K, V)."""
    check = CHECKS.at(fn)
    check.instance("input", input, GatedDeltaInput)
    names = ("query", "key", "value", "beta", "log_decay", "initial_state")
    for name in names:
        check.tensor(f"input.{name}", getattr(input, name))
    check.same_runtime({f"input.{n}": getattr(input, n) for n in names})
    q = check.tensor("input.query", input.query, rank=4, dtypes=FLOAT_DTYPES)
    B, H, T, K = q.shape
    for axis, size in (("B", B), ("H", H), ("K", K)):
        if size == 0:
            check.fail(f"input.query needs {axis} > 0, got shape {list(q.shape)} ([B, H, T, K])")
    check.same_dtype("input.key", input.key, "input.query", q)
    check.shape("input.key", input.key, (B, H, T, K), "[B, H, T, K] of input.query")
    v = check.tensor("input.value", input.value, rank=4)
    check.same_dtype("input.value", v, "input.query", q)
    V = v.shape[3]
    if V == 0:
        check.fail(f"input.value needs V > 0, got shape {list(v.shape)} ([B, H, T, V])")
    check.shape("input.value", v, (B, H, T, V), "[B, H, T, V] with B, H, T of input.query")
    check.same_dtype("input.beta", input.beta, "input.query", q)
    check.shape("input.beta", input.beta, (B, H, T), "[B, H, T] of input.query")
    check.tensor("input.log_decay", input.log_decay, dtypes=F32, shape=(B, H, T), what="[B, H, T] of input.query")
    check.tensor("input.initial_state", input.initial_state, dtypes=F32, shape=(B, H, K, V),
                 what="[B, H, K, V] of input.query and input.value")
    scale = check.number("input.query_scale", input.query_scale)
    return scale, B, H, T, K, V
