"""Validation of rudnn.ctc calls (SPEC §0, §10), all run before any launch: each call
becomes a `CtcProblem` (log-probabilities viewed as [T, N, C], the targets packed one
sample after another as I32, per-sample offsets and lengths), or raises CtcError naming
the function, the argument, what it got and what is needed.

The rules on label values and lengths need their values, so targets and lengths are read
to the host here (they are small integer arrays; the log-probabilities stay on the device).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import kerneldsl as kd
import numpy as np

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks, describe

REDUCTIONS = ("none", "sum", "mean")


class CtcError(RudnnError):
    """Bad arguments to a rudnn.ctc function."""


CHECKS = Checks(CtcError)


@dataclass(frozen=True)
class CtcProblem:
    """A validated call. `log_probs` is [T, N, C] (an unbatched [T, C] input seen with N = 1);
    `labels` is the targets tensor's values flattened (I32, host: padded rows keep their
    padding, which no launch reads), sample n's labels from `offsets[n]`; `states` = 2S + 1 is
    the last axis of alpha and beta, S being the padded target width (or the longest target
    when targets are concatenated). `labels` has the targets' size whatever the lengths, so
    calls of one layout upload arrays of one shape (what a replay keys on, `CtcCall`)."""

    log_probs: kd.Tensor
    batched: bool
    labels: np.ndarray
    offsets: np.ndarray
    input_lengths: np.ndarray
    target_lengths: np.ndarray
    max_target: int
    blank: int
    reduction: str = "mean"
    zero_infinity: bool = False

    @property
    def runtime(self):
        return self.log_probs.runtime

    @property
    def T(self) -> int:
        return self.log_probs.shape[0]

    @property
    def N(self) -> int:
        return self.log_probs.shape[1]

    @property
    def C(self) -> int:
        return self.log_probs.shape[2]

    @property
    def states(self) -> int:
        return 2 * self.max_target + 1

    @property
    def loss_shape(self) -> tuple:
        """The loss's shape: [N] for reduction "none" on batched input, else a scalar."""
        return (self.N,) if self.reduction == "none" and self.batched else ()


def _integers(check: Checks, name: str, value, shape_rule: str, n: int | None) -> np.ndarray:
    """An integer tensor (or Python ints) as a 1-D int64 host array; of length n when given."""
    if isinstance(value, kd.Tensor):
        if not value.dtype.is_int:
            check.fail(f"{name} must be an integer tensor, got {describe(value)}")
        arr = np.asarray(value.numpy()).astype(np.int64)
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        arr = np.asarray([int(value)], np.int64).reshape(())
    elif isinstance(value, (list, tuple)) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                  for v in value):
        arr = np.asarray(value, np.int64).reshape(len(value))
    else:
        check.fail(f"{name} must be an integer tensor or int(s), got {describe(value)}")
    if n is None:  # unbatched: shape [1] or a scalar
        if arr.shape not in ((), (1,)):
            check.fail(f"{name} must have shape [1] or be a scalar (unbatched input), got shape {list(arr.shape)}")
        return arr.reshape(1)
    if arr.shape != (n,):
        check.fail(f"{name} must have shape [{n}] ({shape_rule}), got shape {list(arr.shape)}")
    return arr


def _in_range(check: Checks, name: str, values: np.ndarray, high: int, high_is: str) -> None:
    if not values.size or (values.min() >= 0 and values.max() <= high):  # (two reductions: the common case)
        return
    bad = np.flatnonzero((values < 0) | (values > high))
    if bad.size:
        i = int(bad[0])
        check.fail(f"{name} must be between 0 and {high_is} ({high}), got {int(values[i])} at index {i}")


def ctc_problem(fn: str, log_probs, targets, input_lengths, target_lengths, blank, reduction="mean",
                zero_infinity=False) -> CtcProblem:
    """Check every SPEC §10 rule for one call of `fn`."""
    check = CHECKS.at(fn)
    lp = check.tensor("log_probs", log_probs, dtypes=FLOAT_DTYPES)
    if lp.ndim not in (2, 3):
        check.fail(f"log_probs must have rank 3 ([T, N, C]) or 2 ([T, C], unbatched), got rank {lp.ndim} "
                   f"(shape {list(lp.shape)})")
    batched = lp.ndim == 3
    T, C = lp.shape[0], lp.shape[-1]
    N = lp.shape[1] if batched else 1
    if C == 0:
        check.fail(f"log_probs needs C >= 1 classes, got shape {list(lp.shape)}")
    b = check.integer("blank", blank, low=0, high=C - 1, high_is="C - 1")
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        check.fail(f"reduction must be one of 'none', 'sum', 'mean', got {reduction!r}")
    zi = check.boolean("zero_infinity", zero_infinity)
    tg = check.tensor("targets", targets)
    if not tg.dtype.is_int:
        check.fail(f"targets must be an integer tensor, got {describe(tg)}")
    check.same_runtime({"log_probs": lp, "targets": tg,
                        "input_lengths": input_lengths if isinstance(input_lengths, kd.Tensor) else None,
                        "target_lengths": target_lengths if isinstance(target_lengths, kd.Tensor) else None})
    if batched and tg.ndim not in (1, 2):
        check.fail(f"targets must have rank 2 ([N, S], padded) or 1 (concatenated), got rank {tg.ndim} "
                   f"(shape {list(tg.shape)})")
    if not batched and tg.ndim != 1:
        check.fail(f"targets must have rank 1 ([S]) for unbatched log_probs, got rank {tg.ndim} "
                   f"(shape {list(tg.shape)})")
    if batched and tg.ndim == 2 and tg.shape[0] != N:
        check.fail(f"targets must have shape [N, S] with N = {N} (log_probs' batch), got {list(tg.shape)}")
    il = _integers(check, "input_lengths", input_lengths, "N = log_probs' batch", N if batched else None)
    tl = _integers(check, "target_lengths", target_lengths, "N = log_probs' batch", N if batched else None)
    _in_range(check, "input_lengths", il, T, "T")
    padded = tg.ndim == 2 or not batched
    width = tg.shape[-1]
    if padded:
        _in_range(check, "target_lengths", tl, width, "S")
        offsets = np.arange(N, dtype=np.int64) * (width if batched else 0)
    else:
        _in_range(check, "target_lengths", tl, width, "the length of targets")
        if int(tl.sum()) > width:
            check.fail(f"target_lengths must sum to at most the length of the concatenated targets ({width}), "
                       f"got {int(tl.sum())}")
        offsets = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64)
    flat = tg.numpy().reshape(-1) if tg.size else np.zeros(0, np.int64)
    if not N:
        labels = flat[:0]
    elif padded:  # each row's first target-length entries, row after row
        labels = flat.reshape(N, width)[np.arange(width) < tl[:, None]]
    else:  # concatenated targets lie back to back from the start
        labels = flat[:int(tl.sum())]
    bad = np.flatnonzero((labels < 0) | (labels >= C) | (labels == b)) if labels.size and (
        labels.min() < 0 or labels.max() >= C or (labels == b).any()) else labels[:0]
    if bad.size:
        v = int(labels[bad[0]])
        n = int(np.searchsorted(np.cumsum(tl), bad[0], side="right"))
        need = f"not the blank ({b})" if v == b else f"in [0, C) = [0, {C})"
        check.fail(f"targets must hold labels {need} within each target length, got {v} in sample {n}")
    max_target = width if padded else (int(tl.max()) if N else 0)
    view = lp if batched else (lp if lp.is_contiguous() else lp.contiguous()).reshape(T, 1, C)
    return CtcProblem(view, batched, flat.astype(np.int32), offsets.astype(np.int32), il.astype(np.int32),
                      tl.astype(np.int32), max_target, b, reduction, zi)


@dataclass(frozen=True)
class CtcCall:
    """What a validated call's launches depend on, in the form `@replayable` keys
    (kerneldsl/replay.py): log_probs [T, N, C]; `samples`, the host I32 array the call uploads
    (the flattened targets, one spare element, then per sample the label offset, input length
    and target length: one shape per layout); and plain values. `longest` (2·the longest
    target length + 1) picks the recursion's cube shape; `labels` is the targets' size."""

    log_probs: kd.Tensor
    samples: np.ndarray
    labels: int
    longest: int
    max_target: int
    blank: int
    reduction: str
    zero_infinity: bool
    batched: bool

    runtime = CtcProblem.runtime
    T = CtcProblem.T
    N = CtcProblem.N
    C = CtcProblem.C
    states = CtcProblem.states
    loss_shape = CtcProblem.loss_shape


def ctc_call(p: CtcProblem) -> CtcCall:
    """The launch form of a validated call (for N >= 1)."""
    samples = np.concatenate((p.labels, np.zeros(1, np.int32), p.offsets, p.input_lengths, p.target_lengths))
    return CtcCall(p.log_probs, samples, p.labels.size, int(2 * p.target_lengths.max() + 1), p.max_target, p.blank,
                   p.reduction, p.zero_infinity, p.batched)


def grad_out_scale(fn: str, p: CtcProblem, grad_out) -> kd.Tensor | float:
    """Check ctc_loss_backward's grad_out: a float tensor of the loss's shape on log_probs'
    runtime, or a number when the loss is a scalar."""
    check = CHECKS.at(fn)
    shape = p.loss_shape
    if not shape and isinstance(grad_out, numbers.Real) and not isinstance(grad_out, bool):
        return float(grad_out)
    what = "the loss's shape: [N] for reduction 'none'" if shape else "the loss's shape: a scalar"
    if not isinstance(grad_out, kd.Tensor):
        check.fail(f"grad_out must be a float tensor of shape {list(shape)} ({what}), got {describe(grad_out)}")
    if tuple(grad_out.shape) != shape and not (not shape and tuple(grad_out.shape) == (1,)):
        check.fail(f"grad_out must have shape {list(shape)} ({what}), got {list(grad_out.shape)}")
    return check.tensor("grad_out", grad_out, dtypes=FLOAT_DTYPES, runtime=p.runtime, runtime_of="log_probs")
