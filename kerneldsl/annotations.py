"""Annotations of kernel parameters: `kd.Tensor[...]` and `kd.Const[...]`."""
from __future__ import annotations

from typing import Generic, TypeVar

from .dtypes import DType, as_dtype

T = TypeVar("T")


class TensorAnnotation:
    """`kd.Tensor`, `kd.Tensor[kd.f32]` or `kd.Tensor[kd.f32, 2]` (dtype / rank pinned)."""

    def __init__(self, dtype: DType | None = None, ndim: int | None = None):
        self.dtype = dtype
        self.ndim = ndim

    def __getitem__(self, item):
        if not isinstance(item, tuple):
            item = (item,)
        dtype = as_dtype(item[0]) if item and item[0] is not None else None
        ndim = item[1] if len(item) > 1 else None
        return TensorAnnotation(dtype, ndim)

    def __repr__(self):
        return f"kd.Tensor[{self.dtype}, {self.ndim}]"


class Const(Generic[T]):
    """`N: kd.Const[int]` marks a compile-time parameter: the kernel is specialised
    on its value (any hashable Python value: int, float, bool, str, dtype)."""
