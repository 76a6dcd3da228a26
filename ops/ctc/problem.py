"""Validation of rudnn.ctc calls (SPEC §0, §10), all run before any launch: each call
becomes a `CtcCall` (log-probabilities viewed as [T, N, C]; the targets, per-sample offsets
and lengths packed into one I32 array), or raises CtcError naming the function, the
argument, what it got and what is needed.

The rules on label values and lengths need their values, so targets and lengths are read
to the host here (they are small integer arrays; the log-probabilities stay on the device).
Every call pays for these checks, so each rule is a reduction or two over the whole array
(Python's min and max over a list for arrays up to SMALL long, numpy's beyond), and the
first offender is looked for only once a rule fails.
"""
from __future__ import annotations

import itertools
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


@dataclass(slots=True)
class CtcCall:
    """A validated call, in the form its `@replayable` launch functions key on
    (kerneldsl/replay.py). `log_probs` is [T, N, C] (an unbatched [T, C] input seen with
    N = 1); `samples` is the host I32 array the call uploads: the targets tensor's values
    flattened (padded rows keep their padding, which no launch reads), one spare element,
    then per sample its label offset, input length and target length, so calls of one layout
    upload arrays of one shape; `labels` is the targets' size. `states` = 2S + 1 is the last
    axis of alpha and beta, S being the padded target width (or the longest target when
    targets are concatenated); `longest` (2·the longest target length + 1) picks the
    recursion's cube shape."""

    log_probs: kd.Tensor
    samples: np.ndarray
    labels: int
    longest: int
    max_target: int
    blank: int
    reduction: str
    zero_infinity: bool
    batched: bool

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


def _integer_tensor(check: Checks, name: str, value) -> bool:
    """Whether `value` is a tensor (then of an integer dtype), to be read with the others."""
    if not isinstance(value, kd.Tensor):
        return False
    if not value.dtype.is_int:
        check.fail(f"{name} must be an integer tensor, got {describe(value)}")
    return True


def _integers(check: Checks, name: str, value, host, shape_rule: str, n: int | None) -> np.ndarray:
    """An integer tensor (`host`: its values read to the host, in their dtype) or Python ints
    (as int64) as a 1-D host array; of length n when given."""
    if host is not None:
        arr = host
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


SMALL = 64  # arrays up to this long are checked as Python lists (a numpy reduction costs about 1 µs)


def _in_range(check: Checks, name: str, values, high: int, high_is: str) -> tuple:
    """(smallest, largest) of `values` (a list of ints, or a 1-D int64 array; (0, 0) when
    empty), each checked to lie in [0, high]."""
    if not len(values):
        return 0, 0
    if isinstance(values, list):
        low, top = min(values), max(values)
    else:
        low, top = int(values.min()), int(values.max())
    if low < 0 or top > high:
        values = np.asarray(values)
        i = int(np.flatnonzero((values < 0) | (values > high))[0])
        check.fail(f"{name} must be between 0 and {high_is} ({high}), got {int(values[i])} at index {i}")
    return low, top


def ctc_problem(fn: str, log_probs, targets, input_lengths, target_lengths, blank, reduction="mean",
                zero_infinity=False) -> CtcCall:
    """Check every SPEC §10 rule for one call of `fn`; the call in its launch form."""
    check = CHECKS.at(fn)
    lp = log_probs if type(log_probs) is kd.Tensor and log_probs.dtype in FLOAT_DTYPES else \
        check.tensor("log_probs", log_probs, dtypes=FLOAT_DTYPES)
    if lp.ndim not in (2, 3):
        check.fail(f"log_probs must have rank 3 ([T, N, C]) or 2 ([T, C], unbatched), got rank {lp.ndim} "
                   f"(shape {list(lp.shape)})")
    batched = lp.ndim == 3
    T, C = lp.shape[0], lp.shape[-1]
    N = lp.shape[1] if batched else 1
    if C == 0:
        check.fail(f"log_probs needs C >= 1 classes, got shape {list(lp.shape)}")
    # (each rule's common case is tested inline; the Checks method runs, and names the
    # offender, only where that test fails: every call pays for these checks)
    b = blank if type(blank) is int and 0 <= blank < C else \
        check.integer("blank", blank, low=0, high=C - 1, high_is="C - 1")
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        check.fail(f"reduction must be one of 'none', 'sum', 'mean', got {reduction!r}")
    zi = zero_infinity if type(zero_infinity) is bool else check.boolean("zero_infinity", zero_infinity)
    tg = targets if type(targets) is kd.Tensor else check.tensor("targets", targets)
    if not tg.dtype.is_int:
        check.fail(f"targets must be an integer tensor, got {describe(tg)}")
    il_tensor, tl_tensor = isinstance(input_lengths, kd.Tensor), isinstance(target_lengths, kd.Tensor)
    rt = lp.runtime
    if tg.runtime is not rt or (il_tensor and input_lengths.runtime is not rt) or \
            (tl_tensor and target_lengths.runtime is not rt):
        check.same_runtime({"log_probs": lp, "targets": tg, "input_lengths": input_lengths if il_tensor else None,
                            "target_lengths": target_lengths if tl_tensor else None})
    if batched and tg.ndim not in (1, 2):
        check.fail(f"targets must have rank 2 ([N, S], padded) or 1 (concatenated), got rank {tg.ndim} "
                   f"(shape {list(tg.shape)})")
    if not batched and tg.ndim != 1:
        check.fail(f"targets must have rank 1 ([S]) for unbatched log_probs, got rank {tg.ndim} "
                   f"(shape {list(tg.shape)})")
    if batched and tg.ndim == 2 and tg.shape[0] != N:
        check.fail(f"targets must have shape [N, S] with N = {N} (log_probs' batch), got {list(tg.shape)}")
    # the targets and the length tensors read to the host together (one wait on cuda)
    read = [tg]
    if il_tensor and _integer_tensor(check, "input_lengths", input_lengths):
        read.append(input_lengths)
    if tl_tensor and _integer_tensor(check, "target_lengths", target_lengths):
        read.append(target_lengths)
    hosts = rt.to_numpy_all(read)
    flat = hosts[0].reshape(-1)
    il_host = hosts[1] if il_tensor else None
    tl_host = hosts[-1] if tl_tensor else None
    il = _integers(check, "input_lengths", input_lengths, il_host, "N = log_probs' batch", N if batched else None)
    tl = _integers(check, "target_lengths", target_lengths, tl_host, "N = log_probs' batch", N if batched else None)
    padded = tg.ndim == 2 or not batched
    width = tg.shape[-1]
    small = flat.size <= SMALL and N <= SMALL
    if small:  # the rules on Python lists (see SMALL)
        il, tl = il.tolist(), tl.tolist()
    else:
        il, tl = il.astype(np.int64, copy=False), tl.astype(np.int64, copy=False)
    _in_range(check, "input_lengths", il, T, "T")
    if padded:
        shortest, longest = _in_range(check, "target_lengths", tl, width, "S")
        offsets = [n * width for n in range(N)]
        labels = _padded_labels(flat, tl, width, shortest)
    else:
        longest = _in_range(check, "target_lengths", tl, width, "the length of targets")[1]
        ends = list(itertools.accumulate(tl)) if small else np.cumsum(tl)
        total = int(ends[-1]) if N else 0
        if total > width:
            check.fail(f"target_lengths must sum to at most the length of the concatenated targets ({width}), "
                       f"got {total}")
        offsets = [e - n for e, n in zip(ends, tl)] if small else ends - tl
        labels = flat[:total]  # concatenated targets lie back to back from the start
    _check_labels(check, labels, tl, b, C)
    view = lp if batched else (lp if lp.is_contiguous() else lp.contiguous()).reshape(T, 1, C)
    n_labels = flat.size
    samples = np.empty(n_labels + 1 + 3 * N, np.int32)
    samples[:n_labels] = flat  # (padding values outside I32 wrap: no launch reads them)
    if small:
        samples[n_labels:] = [0, *offsets, *il, *tl]
    else:
        samples[n_labels] = 0
        samples[n_labels + 1:n_labels + 1 + N] = offsets
        samples[n_labels + 1 + N:n_labels + 1 + 2 * N] = il
        samples[n_labels + 1 + 2 * N:] = tl
    max_target = width if padded else longest
    return CtcCall(view, samples, n_labels, 2 * longest + 1, max_target, b, reduction, zi, batched)


def _padded_labels(flat: np.ndarray, tl, width: int, shortest: int):
    """The labels within each row's target length, row after row, of padded targets (`flat`:
    N rows of `width`; `tl`: the target lengths, a list when small): `flat` itself when every
    row is full, else a list where `tl` is one."""
    if shortest == width:
        return flat
    if isinstance(tl, list):
        items = flat.tolist()
        return [v for at, n in zip(range(0, len(items), width), tl) for v in items[at:at + n]]
    return flat.reshape(-1, width)[np.arange(width) < tl[:, None]]


def _check_labels(check: Checks, labels, tl, blank: int, C: int) -> None:
    """Every label within the target lengths in [0, C) and not the blank (`labels`: an array,
    or a list of at most SMALL); the error names the first bad one and its sample."""
    if not len(labels):
        return
    if len(labels) <= SMALL:
        items = labels if isinstance(labels, list) else labels.tolist()
        if min(items) >= 0 and max(items) < C and blank not in items:
            return
        labels = np.asarray(items, np.int64)
    elif labels.dtype.kind == "i" and labels.itemsize >= 4:  # one reduction for both bounds: a
        # negative label read unsigned is 2^31 or more, past any class count
        if int(labels.view(labels.dtype.str.replace("i", "u")).max()) < C and not (labels == blank).any():
            return
    elif int(labels.min()) >= 0 and int(labels.max()) < C and not (labels == blank).any():
        return
    bad = np.flatnonzero((labels < 0) | (labels >= C) | (labels == blank))
    v = int(labels[bad[0]])
    n = int(np.searchsorted(np.cumsum(tl), bad[0], side="right"))
    need = f"not the blank ({blank})" if v == blank else f"in [0, C) = [0, {C})"
    check.fail(f"targets must hold labels {need} within each target length, got {v} in sample {n}")


def grad_out_scale(fn: str, p: CtcCall, grad_out) -> kd.Tensor | float:
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
