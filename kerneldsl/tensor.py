"""Tensors: a typed, strided view of a runtime's buffer.

Views (reshape, permute, transpose, basic slicing) share the buffer and never
copy; `.contiguous()` copies when needed; `.numpy()` waits for the runtime and
returns a host copy. Strides are in elements and never negative.
"""
from __future__ import annotations

import math

import numpy as np

from .annotations import TensorAnnotation
from .dtypes import DType, as_dtype


def contiguous_strides(shape) -> tuple:
    """Row-major strides (in elements) of `shape`; an axis of size 0 counts as 1."""
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _packed_strides(shape: tuple) -> tuple:
    """`contiguous_strides` of a tuple of Python ints, remembered (shapes repeat from call
    to call)."""
    strides = _STRIDES.get(shape)
    if strides is None:
        strides = contiguous_strides(shape)
        if len(_STRIDES) < 4096:
            _STRIDES[shape] = strides
    return strides


packed_strides = _packed_strides  # (the runtime's `empty` makes tensors with it)
_STRIDES: dict = {}  # shape (a tuple of ints) -> its contiguous strides
# reshape targets met before (non-negative ints) -> (shape, contiguous strides, size); a target
# equal to one of them (2.0 == 2) reshapes as it did, to the ints
_RESHAPES: dict = {}
_EXTENTS: dict = {}  # (shape, strides) met before -> Tensor.extent's value


class Tensor:
    """A view of `buffer` starting `offset` elements in, with `shape` and `strides`."""

    __slots__ = ("buffer", "offset", "shape", "strides", "dtype", "runtime", "__weakref__")

    def __class_getitem__(cls, item):
        """`kd.Tensor[kd.f32]` / `kd.Tensor[kd.f32, 2]`: a kernel parameter annotation."""
        return TensorAnnotation()[item]

    def __init__(self, runtime, buffer, shape, dtype: DType, strides=None, offset: int = 0):
        self.runtime = runtime
        self.buffer = buffer
        self.shape = tuple(map(int, shape))
        self.dtype = dtype if type(dtype) is DType else as_dtype(dtype)
        self.strides = tuple(map(int, strides)) if strides is not None else _packed_strides(self.shape)
        self.offset = int(offset)

    @classmethod
    def _of(cls, runtime, buffer, shape: tuple, dtype: DType, strides: tuple, offset: int) -> "Tensor":
        """A tensor from parts already in their final form (tuples of ints, a DType, an int):
        views of a tensor skip the conversions of `__init__`."""
        t = object.__new__(cls)
        t.runtime = runtime
        t.buffer = buffer
        t.shape = shape
        t.dtype = dtype
        t.strides = strides
        t.offset = offset
        return t

    # ------------------------------------------------------------------ facts
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    numel = size

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def readonly(self) -> bool:
        """Imported from memory its owner does not let us write (a read-only numpy array):
        a launch that would store to this tensor is refused."""
        return self.buffer.readonly

    def is_contiguous(self) -> bool:
        packed = _packed_strides(self.shape)
        if self.strides == packed or self.size <= 1:
            return True
        return all(st == cs for st, cs, n in zip(self.strides, packed, self.shape) if n != 1)

    def extent(self) -> int:
        """Elements reachable from the view's first element (what bounds checks allow); every
        launch passes each tensor's, so layouts met before are remembered."""
        layout = (self.shape, self.strides)
        got = _EXTENTS.get(layout)
        if got is None:
            got = 0 if self.size == 0 else 1 + sum((n - 1) * st for n, st in zip(self.shape, self.strides))
            if len(_EXTENTS) < 4096:
                _EXTENTS[layout] = got
        return got

    def __repr__(self):
        return f"kd.Tensor(shape={self.shape}, dtype={self.dtype.name}, runtime={self.runtime.name!r})"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ------------------------------------------------------------------ views
    def _view(self, shape: tuple, strides: tuple, offset: int | None = None):
        """A view of the same buffer; `shape` and `strides` are tuples of ints."""
        return Tensor._of(self.runtime, self.buffer, shape, self.dtype, strides,
                          self.offset if offset is None else offset)

    def reshape(self, *shape) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        try:
            known = _RESHAPES.get(shape)
        except TypeError:  # an unhashable entry: the checks below word the error
            known = None
        if known is not None and known[2] == self.size and self.is_contiguous():
            return self._view(known[0], known[1])
        shape = list(shape)
        if shape.count(-1) > 1:
            raise ValueError("reshape: only one dimension can be -1")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or self.size % known:
                raise ValueError(f"reshape: cannot infer -1 for {self.shape} -> {tuple(shape)}")
            shape[shape.index(-1)] = self.size // known
        if math.prod(shape) != self.size:
            raise ValueError(f"reshape: {self.shape} has {self.size} elements, {tuple(shape)} has {math.prod(shape)}")
        if not self.is_contiguous():
            raise ValueError("reshape of a non-contiguous view would need a copy; call .contiguous() first")
        shape = tuple(map(int, shape))
        if len(_RESHAPES) < 4096:
            _RESHAPES[shape] = (shape, _packed_strides(shape), math.prod(shape))
        return self._view(shape, _packed_strides(shape))

    view = reshape

    def permute(self, *axes) -> "Tensor":
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        axes = tuple(a % self.ndim for a in axes) if self.ndim else ()
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"permute: {axes} is not a permutation of {self.ndim} axes")
        return self._view(tuple(self.shape[a] for a in axes), tuple(self.strides[a] for a in axes))

    def transpose(self, a: int, b: int) -> "Tensor":
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return self.permute(axes)

    @property
    def T(self) -> "Tensor":
        return self.permute(tuple(reversed(range(self.ndim))))

    def __getitem__(self, key) -> "Tensor":
        if type(key) is slice and self.shape and key.step is None:  # t[a:b], the common view, directly
            start, stop, _ = key.indices(self.shape[0])
            count = max(0, stop - start)
            offset = self.offset + start * self.strides[0] if count else self.offset
            return Tensor._of(self.runtime, self.buffer, (count,) + self.shape[1:], self.dtype, self.strides, offset)
        if not isinstance(key, tuple):
            key = (key,)
        if Ellipsis in key:
            i = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1:]
        if len(key) > self.ndim:
            raise IndexError(f"too many indices: {len(key)} for a {self.ndim}-d tensor")
        offset = self.offset
        shape, strides = [], []
        for axis, k in enumerate(key):
            n, st = self.shape[axis], self.strides[axis]
            if isinstance(k, (int, np.integer)):
                k = int(k)
                if not -n <= k < n:
                    raise IndexError(f"index {k} out of range for axis {axis} of size {n}")
                offset += (k % n) * st
            elif isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step <= 0:
                    raise ValueError("tensor slices need a positive step")
                count = max(0, -(-(stop - start) // step))
                if count:
                    offset += start * st
                shape.append(count)
                strides.append(st * step)
            else:
                raise TypeError(f"unsupported index {k!r}: use ints and slices")
        shape += self.shape[len(key):]
        strides += self.strides[len(key):]
        return self._view(tuple(shape), tuple(strides), offset)

    def contiguous(self) -> "Tensor":
        if self.is_contiguous():
            return self
        return self.runtime.copy(self)

    def clone(self) -> "Tensor":
        return self.runtime.copy(self)

    def to(self, runtime) -> "Tensor":
        """A copy on another runtime (through the host)."""
        from .runtime import get_runtime
        rt = get_runtime(runtime)
        return rt.tensor(self.numpy())

    # ------------------------------------------------------------------ host
    def numpy(self) -> np.ndarray:
        """Wait for queued work, then return a host copy (ml_dtypes.bfloat16 for bf16)."""
        return self.runtime.to_numpy(self)

    def __array__(self, dtype=None, copy=None):
        """`np.asarray(t)`: a host copy; `np.asarray(t, copy=False)` a view sharing the
        tensor's memory where the runtime has one (the cpu's `host_view`, which keeps the
        memory alive), else ValueError, as numpy's protocol asks."""
        if copy is False:
            view = getattr(self.runtime, "host_view", None)
            if view is None or (dtype is not None and np.dtype(dtype) != self.dtype.np):
                raise ValueError(f"np.asarray(copy=False) of a {self.runtime.name} tensor would need a copy")
            return view(self)
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def __dlpack__(self, *args, **kwargs):
        return self.runtime.dlpack_export(self, *args, **kwargs)

    def __dlpack_device__(self):
        return self.runtime.dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface, version 3 (CUDA tensors only; kerneldsl/interop.py)."""
        return self.runtime.cuda_array_interface(self)

    def record_stream(self, stream) -> None:
        """Note that work queued on `stream` uses this tensor's memory, as PyTorch's
        `Tensor.record_stream`: its memory is not reused before that work is done. Launches
        and copies of this runtime record their stream themselves; this is for work queued
        by other libraries (e.g. on a stream from `rt.external_stream`)."""
        from .streams import Stream
        if not isinstance(stream, Stream) or stream.runtime is not self.runtime:
            raise ValueError(f"record_stream takes a kd.Stream of {self.runtime!r}, got {stream!r}")
        self.buffer.record_stream(stream)
