"""Validation of rudnn.ctc calls (SPEC §0, §10), all run before any launch: each call
becomes a `CtcCall` (log-probabilities viewed as [T, N, C]; the targets, per-sample offsets
and lengths packed into one I32 array), or raises CtcError naming the function, the
argument, what it got and what is needed.

Validation runs in two parts. The rules on types, ranks, shapes, dtypes and runtimes depend
only on the arguments' layouts: a call whose four tensors (and plain arguments) have a
layout already checked takes its `CtcForm` from a cache instead of checking them again. The
rules on label values and lengths need their values, so targets and lengths are read to the
host on every call (they are small integer arrays; the log-probabilities stay on the
device). Each value rule is a reduction or two over the whole array (Python's min and max
over a list for arrays up to SMALL long, numpy's beyond), and the first offender is looked
for only once a rule fails.
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
SMALL = 64  # arrays up to this long are checked as Python lists (a numpy reduction costs about 1 µs)
FORMS_KEPT = 256  # checked layouts remembered (all forgotten when full)
_FORMS: dict = {}  # layout key (`_layout_key`) -> CtcForm
_TOKENS = itertools.count()


@dataclass(frozen=True, slots=True)
class CtcForm:
    """What a call's layouts fix, checked once per layout: the sizes (log_probs as [T, N, C],
    an unbatched input with N = 1), whether targets are padded ([N, S] or unbatched [S]) and
    their last axis `width`, which lengths are tensors (read with the targets), the plain
    arguments, and for padded targets of at most SMALL samples each row's start (`starts`).
    `token` is unique to this form: a replayed launch function keys on it in place of the
    fields (kerneldsl/replay.py)."""

    token: int
    runtime: object
    T: int
    N: int
    C: int
    batched: bool
    padded: bool
    width: int
    labels: int  # the targets' size
    blank: int
    reduction: str
    zero_infinity: bool
    il_tensor: bool
    tl_tensor: bool
    starts: tuple  # padded targets: each row's first label's index (i·width); else ()


class CtcCall:
    """A validated call, in the form its `@replayable` launch functions key on: `form`'s
    token, `log_probs` (as given: [T, N, C], or [T, C] unbatched; `batched_log_probs` views
    it as [T, N, C]), `samples` and the two lengths below. `samples` is the host
    I32 array the call uploads: the targets tensor's values flattened (padded rows keep
    their padding, which no launch reads), one spare element, then per sample its label
    offset, input length and target length, so calls of one layout upload arrays of one
    shape. `states` = 2S + 1 is the last axis of alpha and beta, S (`max_target`) being the
    padded target width (or the longest target when targets are concatenated); `longest`
    (2·the longest target length + 1) picks the recursion's cube shape."""

    __slots__ = ("form", "log_probs", "samples", "longest", "max_target")

    def __init__(self, form: CtcForm, log_probs: kd.Tensor, samples: np.ndarray, longest: int, max_target: int):
        self.form = form
        self.log_probs = log_probs
        self.samples = samples
        self.longest = longest
        self.max_target = max_target

    def batched_log_probs(self) -> kd.Tensor:
        """log_probs as [T, N, C]: unbatched input as N = 1, copied first where it is strided.
        (A copy is a launch, so the launch functions call this, after every check: SPEC §0.)"""
        lp = self.log_probs
        if self.form.batched:
            return lp
        return (lp if lp.is_contiguous() else lp.contiguous()).reshape(self.form.T, 1, self.form.C)

    def replay_fields(self) -> tuple:
        return (self.form.token, self.log_probs, self.samples, self.longest, self.max_target)

    runtime = property(lambda self: self.form.runtime)
    T = property(lambda self: self.form.T)
    N = property(lambda self: self.form.N)
    C = property(lambda self: self.form.C)
    labels = property(lambda self: self.form.labels)
    blank = property(lambda self: self.form.blank)
    reduction = property(lambda self: self.form.reduction)
    zero_infinity = property(lambda self: self.form.zero_infinity)
    batched = property(lambda self: self.form.batched)

    @property
    def states(self) -> int:
        return 2 * self.max_target + 1

    @property
    def loss_shape(self) -> tuple:
        """The loss's shape: [N] for reduction "none" on batched input, else a scalar."""
        return (self.form.N,) if self.form.reduction == "none" and self.form.batched else ()


def ctc_problem(fn: str, log_probs, targets, input_lengths, target_lengths, blank, reduction="mean",
                zero_infinity=False) -> CtcCall:
    """Check every SPEC §10 rule for one call of `fn`; the call in its launch form."""
    key = _layout_key(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
    form = _FORMS.get(key) if key is not None else None
    if form is None:
        form = _form(CHECKS.at(fn), log_probs, targets, input_lengths, target_lengths, blank, reduction,
                     zero_infinity)
        if key is not None:
            if len(_FORMS) >= FORMS_KEPT:
                _FORMS.clear()  # (one step, safe beside other threads; a layout is checked again in µs)
            _FORMS[key] = form
    return _checked_values(fn, form, log_probs, targets, input_lengths, target_lengths)


def _layout_key(lp, tg, il, tl, blank, reduction, zero_infinity):
    """What the layout rules read of a call whose four tensor arguments are tensors and whose
    plain arguments have their types (the common call), else None (checked in full)."""
    T = kd.Tensor
    if type(lp) is not T or type(tg) is not T or type(il) is not T or type(tl) is not T or type(blank) is not int \
            or type(reduction) is not str or type(zero_infinity) is not bool:
        return None
    return (lp.runtime, lp.dtype, lp.shape, tg.runtime, tg.dtype, tg.shape, il.runtime, il.dtype, il.shape,
            tl.runtime, tl.dtype, tl.shape, blank, reduction, zero_infinity)


def _form(check: Checks, log_probs, targets, input_lengths, target_lengths, blank, reduction,
          zero_infinity) -> CtcForm:
    """Every rule that does not read a value of targets or lengths; their form."""
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
    il_tensor, tl_tensor = isinstance(input_lengths, kd.Tensor), isinstance(target_lengths, kd.Tensor)
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
    for name, value, is_tensor in (("input_lengths", input_lengths, il_tensor),
                                   ("target_lengths", target_lengths, tl_tensor)):
        if is_tensor:
            if not value.dtype.is_int:
                check.fail(f"{name} must be an integer tensor, got {describe(value)}")
            _length_shape(check, name, value.shape, N if batched else None)
    padded = tg.ndim == 2 or not batched
    return CtcForm(next(_TOKENS), lp.runtime, T, N, C, batched, padded, tg.shape[-1], tg.size, b, reduction, zi,
                   il_tensor, tl_tensor, tuple(i * tg.shape[-1] for i in range(N)) if padded and N <= SMALL else ())


def _length_shape(check: Checks, name: str, shape: tuple, n: int | None) -> None:
    """A lengths argument's shape: [n], or for unbatched input (n None) [1] or a scalar."""
    if n is None:
        if shape not in ((), (1,)):
            check.fail(f"{name} must have shape [1] or be a scalar (unbatched input), got shape {list(shape)}")
    elif shape != (n,):
        check.fail(f"{name} must have shape [{n}] (N = log_probs' batch), got shape {list(shape)}")


def _host_integers(fn: str, name: str, value, n: int | None) -> np.ndarray:
    """Python ints given for a lengths argument, as a 1-D int64 array (of length n when given)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        arr = np.asarray([int(value)], np.int64).reshape(())
    elif isinstance(value, (list, tuple)) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                  for v in value):
        arr = np.asarray(value, np.int64).reshape(len(value))
    else:
        CHECKS.at(fn).fail(f"{name} must be an integer tensor or int(s), got {describe(value)}")
    _length_shape(CHECKS.at(fn), name, arr.shape, n)
    return arr.reshape(-1)


def _checked_values(fn: str, form: CtcForm, log_probs, targets, input_lengths, target_lengths) -> CtcCall:
    """The value rules of a call of checked `form`: lengths in range, labels in [0, C) and not
    the blank within each target length; the call, its samples packed."""
    n = form.N if form.batched else None
    # the targets and the length tensors read to the host together (one wait on cuda; no
    # copies on the cpu: host_values gives views, and `samples` below is built from them)
    read = [targets]
    if form.il_tensor:
        read.append(input_lengths)
    if form.tl_tensor:
        read.append(target_lengths)
    hosts = form.runtime.host_values(read)
    flat = hosts[0].reshape(-1)
    il = hosts[1].reshape(-1) if form.il_tensor else _host_integers(fn, "input_lengths", input_lengths, n)
    tl = hosts[-1].reshape(-1) if form.tl_tensor else _host_integers(fn, "target_lengths", target_lengths, n)
    small = flat.size <= SMALL and form.N <= SMALL
    samples, longest = (_small_samples if small else _samples)(fn, form, flat, il, tl)
    return CtcCall(form, log_probs, samples, 2 * longest + 1, form.width if form.padded else longest)


def _small_samples(fn: str, form: CtcForm, flat: np.ndarray, il: np.ndarray, tl: np.ndarray) -> tuple:
    """(packed samples, longest target) of at most SMALL labels and samples, every value rule
    checked on Python lists (see SMALL): targets, one spare element, offsets, input lengths,
    target lengths, as I32."""
    il, tl = il.tolist(), tl.tolist()
    T, width, N = form.T, form.width, form.N
    if il and (min(il) < 0 or max(il) > T):
        _in_range(fn, "input_lengths", il, T, "T")  # (raises, naming the first offender)
    shortest, longest = (min(tl), max(tl)) if tl else (0, 0)
    items = flat.tolist()
    if form.padded:
        if shortest < 0 or longest > width:
            _in_range(fn, "target_lengths", tl, width, "S")
        offsets = form.starts
        labels = items if shortest == width else [v for at, k in zip(offsets, tl) for v in items[at:at + k]]
    else:
        if shortest < 0 or longest > width:
            _in_range(fn, "target_lengths", tl, width, "the length of targets")
        ends = list(itertools.accumulate(tl))
        total = ends[-1] if N else 0
        if total > width:
            _too_long(fn, width, total)
        offsets = [e - k for e, k in zip(ends, tl)]
        labels = items[:total]  # concatenated targets lie back to back from the start
    if labels and (min(labels) < 0 or max(labels) >= form.C or form.blank in labels):
        _check_labels(fn, np.asarray(labels), tl, form.blank, form.C)  # (raises)
    try:  # one conversion of one list (a third of the time of filling an array in parts)
        return np.array([*items, 0, *offsets, *il, *tl], np.int32), longest
    except OverflowError:  # padding values outside I32 (no launch reads them) wrap instead
        samples = np.empty(flat.size + 1 + 3 * N, np.int32)
        samples[:flat.size] = flat
        samples[flat.size:] = [0, *offsets, *il, *tl]
        return samples, longest


def _samples(fn: str, form: CtcForm, flat: np.ndarray, il: np.ndarray, tl: np.ndarray) -> tuple:
    """`_small_samples` for larger arrays, each value rule a numpy reduction or two."""
    N, width = form.N, form.width
    il, tl = il.astype(np.int64, copy=False), tl.astype(np.int64, copy=False)
    _in_range(fn, "input_lengths", il, form.T, "T")
    if form.padded:
        shortest, longest = _in_range(fn, "target_lengths", tl, width, "S")
        offsets = np.arange(N, dtype=np.int64) * width
        labels = flat if shortest == width else flat.reshape(-1, width)[np.arange(width) < tl[:, None]]
    else:
        longest = _in_range(fn, "target_lengths", tl, width, "the length of targets")[1]
        ends = np.cumsum(tl)
        total = int(ends[-1]) if N else 0
        if total > width:
            _too_long(fn, width, total)
        offsets = ends - tl
        labels = flat[:total]
    _check_labels(fn, labels, tl, form.blank, form.C)
    n = flat.size
    samples = np.empty(n + 1 + 3 * N, np.int32)
    samples[:n] = flat
    samples[n] = 0
    samples[n + 1:n + 1 + N] = offsets
    samples[n + 1 + N:n + 1 + 2 * N] = il
    samples[n + 1 + 2 * N:] = tl
    return samples, longest


def _too_long(fn: str, width: int, total: int) -> None:
    """Raise: concatenated targets' lengths summing to `total`, past their `width` labels."""
    CHECKS.at(fn).fail(f"target_lengths must sum to at most the length of the concatenated targets "
                       f"({width}), got {total}")


def _in_range(fn: str, name: str, values, high: int, high_is: str) -> tuple:
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
        CHECKS.at(fn).fail(f"{name} must be between 0 and {high_is} ({high}), got {int(values[i])} at index {i}")
    return low, top


def _check_labels(fn: str, labels, tl, blank: int, C: int) -> None:
    """Every label within the target lengths in [0, C) and not the blank (`labels`: an integer
    array); the error names the first bad one and its sample."""
    if not len(labels):
        return
    if labels.dtype.kind == "i" and labels.itemsize >= 4:  # one reduction for both bounds: a
        # negative label read unsigned is 2^31 or more, past any class count
        if int(labels.view(labels.dtype.str.replace("i", "u")).max()) < C and not (labels == blank).any():
            return
    elif int(labels.min()) >= 0 and int(labels.max()) < C and not (labels == blank).any():
        return
    bad = np.flatnonzero((labels < 0) | (labels >= C) | (labels == blank))
    v = int(labels[bad[0]])
    n = int(np.searchsorted(np.cumsum(tl), bad[0], side="right"))
    need = f"not the blank ({blank})" if v == blank else f"in [0, C) = [0, {C})"
    CHECKS.at(fn).fail(f"targets must hold labels {need} within each target length, got {v} in sample {n}")


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
