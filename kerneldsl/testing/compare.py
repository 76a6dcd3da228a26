"""Comparing a result with what was expected: tolerances chosen by dtype, NaN and inf matched
exactly, and a failure message that names the tensor and its worst element."""
from __future__ import annotations

import numpy as np

# (rtol, atol) for a result stored in each dtype: f16/bf16 results are computed in f32 and
# rounded once on store, so the storage precision sets the bound; integers compare exactly
TOLERANCES = {"f32": (2e-5, 1e-6), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2), "f64": (1e-12, 1e-14)}


def tolerance(dtype) -> tuple:
    """(rtol, atol) for comparing a result stored in `dtype` (a kd dtype, its name or a numpy
    dtype); (0, 0), exact, for integer and boolean dtypes."""
    import kerneldsl as kd
    try:
        name = kd.as_dtype(dtype).name
    except TypeError:  # a numpy dtype kerneldsl has no name for (int16, uint64, ...)
        return (0, 0)
    return TOLERANCES.get(name, (0, 0))


def to_host(value) -> np.ndarray:
    """A numpy array for a kd tensor (downloaded), a numpy array or anything array-like."""
    if hasattr(value, "numpy") and hasattr(value, "runtime"):
        return value.numpy()
    return np.asarray(value)


def _looser(a: tuple, b: tuple) -> tuple:
    return max(a[0], b[0]), max(a[1], b[1])


def assert_close(actual, expected, *, rtol: float | None = None, atol: float | None = None,
                 name: str = "tensor") -> None:
    """Assert |actual - expected| <= atol + rtol * |expected| elementwise.

    `actual` and `expected` are kd tensors, numpy arrays or array-likes of one shape.
    Tolerances left out come from the dtypes (`tolerance()`, the looser of the two: an f16
    result against an f64 reference gets the f16 bound); integers and booleans compare
    exactly. NaN must meet NaN and an infinity the same infinity, whatever the tolerance.
    On a failure the AssertionError names `name`, how many elements differ, and the worst one."""
    got, want = to_host(actual), to_host(expected)
    for array, what in ((got, "actual"), (want, "expected")):
        if array.dtype.kind not in "biuf" and array.dtype.name != "bfloat16":
            raise TypeError(f"assert_close: {what} {name} has dtype {array.dtype}; kd dtypes are real numbers")
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {got.shape} where {want.shape} was expected")
    auto = _looser(tolerance(got.dtype), tolerance(want.dtype))
    rtol = auto[0] if rtol is None else rtol
    atol = auto[1] if atol is None else atol
    if got.dtype.kind in "biu" and want.dtype.kind in "biu" and rtol == 0 and atol == 0:
        bad = got != want
        excess = bad.astype(np.float64)
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            nan_g, nan_w = np.isnan(g), np.isnan(w)
            inf_g, inf_w = np.isinf(g), np.isinf(w)
            special = nan_g | nan_w | inf_g | inf_w
            special_bad = (nan_g != nan_w) | ((inf_g | inf_w) & ~(nan_g | nan_w) & (g != w))
            diff = np.where(special, 0.0, np.abs(g - w))
            bound = atol + rtol * np.where(special, 0.0, np.abs(w))
            excess = np.where(special_bad, np.inf, np.where(diff > bound, diff - bound, 0.0))
        bad = excess > 0
    n_bad = int(np.count_nonzero(bad))
    if n_bad == 0:
        return
    worst = np.unravel_index(int(np.argmax(excess)), got.shape) if got.ndim else ()
    g_worst, w_worst = got[worst], want[worst]
    detail = f"got {g_worst}, expected {w_worst}"
    d = abs(float(g_worst) - float(w_worst))
    if np.isfinite(d) and d > 0:
        rel = d / abs(float(w_worst)) if float(w_worst) != 0 else float("inf")
        detail += f" (|diff| {d:.3g}, relative {rel:.3g})"
    raise AssertionError(f"{name}: {n_bad} of {got.size} elements differ beyond rtol={rtol:g}, atol={atol:g} "
                         f"(dtype {got.dtype}); worst at index {tuple(int(i) for i in worst)}: {detail}")
