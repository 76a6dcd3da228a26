"""Validation of rudnn.normalization calls (SPEC §0, §1), all run before any launch: each
call becomes a `RowsProblem`, or raises NormalizationError naming the function, the
argument, what it got and what is needed."""
from __future__ import annotations

import math
from dataclasses import dataclass

import kerneldsl as kd

from ..errors import RudnnError
from ..validation import FLOAT_DTYPES, Checks


class NormalizationError(RudnnError):
    """Bad arguments to a rudnn.normalization function."""


CHECKS = Checks(NormalizationError)
F32 = (kd.f32,)


@dataclass(frozen=True)
class RowsProblem:
    """A validated call over `rows` rows of `width` elements (the input's last axis). The
    F32 operands (gamma, beta, mean, rstd) and grad are None where the call has none."""

    input: kd.Tensor
    width: int
    epsilon: float | None = None
    gamma: kd.Tensor | None = None
    beta: kd.Tensor | None = None
    grad: kd.Tensor | None = None
    mean: kd.Tensor | None = None
    rstd: kd.Tensor | None = None

    @property
    def runtime(self):
        return self.input.runtime

    @property
    def rows(self) -> int:
        return math.prod(self.input.shape[:-1])

    @property
    def stat_shape(self) -> tuple:
        """The shape of mean and rstd: the input's without the last axis."""
        return tuple(self.input.shape[:-1])


def _input(check: Checks, input) -> int:  # noqa: A002
    """An F32/F16/BF16 tensor with a last axis W > 0; returns W."""
    check.tensor("input", input, dtypes=FLOAT_DTYPES)
    if input.ndim == 0 or input.shape[-1] == 0:
        check.fail(f"input needs a last axis of length W > 0, got shape {list(input.shape)}")
    return input.shape[-1]


def softmax_problem(fn: str, input) -> RowsProblem:  # noqa: A002
    """softmax_last_axis(input)."""
    return RowsProblem(input, _input(CHECKS.at(fn), input))


def forward_problem(fn: str, input, gamma, beta, epsilon) -> RowsProblem:  # noqa: A002
    """layer_norm / rms_norm (and their _with_stats forms); beta None for RMSNorm or no shift."""
    check = CHECKS.at(fn)
    width = _input(check, input)
    check.tensor("gamma", gamma, dtypes=F32, shape=(width,), what="W = input's last axis")
    if beta is not None:
        check.tensor("beta", beta, dtypes=F32, shape=(width,), what="W = input's last axis")
    eps = check.number("epsilon", epsilon, positive=True)
    check.same_runtime({"input": input, "gamma": gamma, "beta": beta})
    return RowsProblem(input, width, eps, gamma, beta)


def backward_problem(fn: str, input, gamma, grad, mean, rstd, rms: bool) -> RowsProblem:  # noqa: A002
    """layer_norm_backward (mean given) / rms_norm_backward (mean None)."""
    check = CHECKS.at(fn)
    width = _input(check, input)
    check.tensor("gamma", gamma, dtypes=F32, shape=(width,), what="W = input's last axis")
    check.tensor("grad", grad, dtypes=FLOAT_DTYPES, shape=input.shape, what="input's shape")
    stats = tuple(input.shape[:-1])
    if not rms:
        check.tensor("mean", mean, dtypes=F32, shape=stats, what="input's shape without the last axis")
    check.tensor("rstd", rstd, dtypes=F32, shape=stats, what="input's shape without the last axis")
    check.same_runtime({"input": input, "gamma": gamma, "grad": grad, "mean": mean, "rstd": rstd})
    return RowsProblem(input, width, gamma=gamma, grad=grad, mean=mean, rstd=rstd)
