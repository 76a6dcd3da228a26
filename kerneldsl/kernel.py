"""`@kd.kernel`: a Python function compiled per specialisation and launched over a grid.

    @kd.kernel
    def add(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i32):
        i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
        if i < n:
            y[i] += x[i]

    add[grid, block](x, y, n)          # grid, block: int or (x, y[, z]) tuples

A specialisation is fixed by the tensors' dtypes, ranks and inner contiguity,
the values of `kd.Const` parameters, the cube shape, the runtime (its back end,
device and plane size) and the bounds-check flag. Arguments are checked before
anything compiles; compiled kernels are cached in memory and on disk.
"""
from __future__ import annotations

import functools
import inspect
import os
import threading

import numpy as np

from . import cache, lang, launch_checks
from .analysis import check_kernel
from .dtypes import DType, as_dtype
from .errors import CompileError
from .frontend import Frontend, _Spec, parse_source
from .runtime import Runtime, get_runtime
from .tensor import Tensor

_dims = launch_checks.dims  # grid / block parsing (the cuda compile-only paths import it from here)


@functools.lru_cache(maxsize=None)
def _int_range(dtype: DType) -> tuple:
    info = np.iinfo(dtype.np)
    return int(info.min), int(info.max)


def bounds_check_enabled() -> bool:
    return os.environ.get("KERNELDSL_BOUNDS_CHECK", "0") not in ("", "0", "false", "no")


class Kernel:
    """A DSL kernel. Index with `[grid, block]` to launch."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._source = None
        self._binaries: dict = {}
        self._lock = threading.Lock()
        self.params = self._read_params(fn)

    @staticmethod
    def _read_params(fn):
        sig = inspect.signature(fn)
        out = []
        for name, p in sig.parameters.items():
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise TypeError(f"kernel {fn.__name__}: parameter {name} must be positional")
            ann = p.annotation
            if isinstance(ann, str):
                try:
                    ann = eval(ann, fn.__globals__)  # noqa: S307  (the user's own annotation)
                except Exception as e:  # noqa: BLE001
                    raise TypeError(f"kernel {fn.__name__}: cannot evaluate annotation of {name}: {e}") from None
            if ann is inspect.Parameter.empty:
                raise TypeError(f"kernel {fn.__name__}: parameter {name} needs an annotation "
                                f"(kd.Tensor[...], a dtype such as kd.i32, or kd.Const[int])")
            if ann is Tensor:
                ann = lang._TensorAnnotation()
            if isinstance(ann, lang._TensorAnnotation):
                out.append((name, "tensor", ann))
            elif getattr(ann, "__origin__", None) is lang.Const or ann is lang.Const:
                out.append((name, "const", None))
            else:
                try:
                    out.append((name, "scalar", as_dtype(ann)))
                except TypeError:
                    raise TypeError(f"kernel {fn.__name__}: unsupported annotation {ann!r} for {name}") from None
        return out

    def __repr__(self):
        return f"<kd.kernel {self.__name__}>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"launch a kernel with {self.__name__}[grid, block](...)")

    def __getitem__(self, launch):
        if not isinstance(launch, tuple) or len(launch) != 2:
            raise TypeError(f"launch {self.__name__} as {self.__name__}[grid, block](args...)")
        grid, block = launch
        return lambda *args, runtime=None: self.launch(grid, block, *args, runtime=runtime)

    # ------------------------------------------------------------------ launch
    def _pick_runtime(self, args, runtime):
        rts = [(name, a.runtime) for (name, kind, _), a in zip(self.params, args) if kind == "tensor"
               and isinstance(a, Tensor)]
        rt = get_runtime(runtime) if runtime is not None else (rts[0][1] if rts else get_runtime())
        for name, other in rts:
            if other.device_key != rt.device_key:
                raise ValueError(f"{self.__name__}: tensor {name} is on runtime {other.name!r} but the launch "
                                 f"runs on {rt.name!r}; move it with .to({rt.name!r})")
        return rt

    def _check_args(self, args, rt: Runtime):
        if len(args) != len(self.params):
            names = ", ".join(n for n, _, _ in self.params)
            raise TypeError(f"{self.__name__}() takes {len(self.params)} arguments ({names}), got {len(args)}")
        spec_args, key = [], []
        for (name, kind, info), a in zip(self.params, args):
            if kind == "tensor":
                if not isinstance(a, Tensor):
                    raise TypeError(f"{self.__name__}: argument {name} must be a kd tensor, got {type(a).__name__}")
                if info.dtype is not None and a.dtype is not info.dtype:
                    raise TypeError(f"{self.__name__}: argument {name} must be {info.dtype.name}, got {a.dtype.name}")
                if info.ndim is not None and a.ndim != info.ndim:
                    raise ValueError(f"{self.__name__}: argument {name} must have {info.ndim} dims, got {a.ndim} "
                                     f"(shape {a.shape})")
                if a.dtype not in rt.capabilities.dtypes:
                    raise TypeError(f"{self.__name__}: argument {name} is {a.dtype.name}, which {rt.name} does not "
                                    f"support")
                inner = a.ndim == 0 or a.strides[-1] == 1 or a.shape[-1] == 1
                payload = (a.dtype, a.ndim, inner)
                spec_args.append(("tensor", payload))
                key.append(("t", a.dtype.name, a.ndim, inner))
            elif kind == "scalar":
                self._check_scalar(name, info, a)
                spec_args.append(("scalar", info))
                key.append(("s", info.name))
            else:
                if isinstance(a, Tensor):
                    raise TypeError(f"{self.__name__}: argument {name} is a kd.Const and cannot be a tensor")
                try:
                    hash(a)
                except TypeError:
                    raise TypeError(f"{self.__name__}: kd.Const argument {name} must be hashable, got {a!r}") from None
                spec_args.append(("const", a))
                key.append(("c", type(a).__name__, a))
        return spec_args, tuple(key)

    def _check_scalar(self, name, dtype: DType, a):
        if isinstance(a, Tensor) or isinstance(a, np.ndarray) and a.ndim > 0:
            raise TypeError(f"{self.__name__}: argument {name} must be a {dtype.name} scalar, got an array")
        if dtype.is_bool:
            if not isinstance(a, (bool, np.bool_)):
                raise TypeError(f"{self.__name__}: argument {name} must be bool, got {type(a).__name__}")
            return
        if dtype.is_int:
            if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
                raise TypeError(f"{self.__name__}: argument {name} must be an integer ({dtype.name}), got {a!r}")
            lo, hi = _int_range(dtype)
            if not lo <= int(a) <= hi:
                raise ValueError(f"{self.__name__}: argument {name}={a} does not fit in {dtype.name}")
            return
        if not isinstance(a, (int, float, np.integer, np.floating)) or isinstance(a, (bool, np.bool_)):
            raise TypeError(f"{self.__name__}: argument {name} must be a number ({dtype.name}), got {a!r}")

    def specialize(self, rt: Runtime, spec_args, block, bounds_check):
        """Front end + checks for one specialisation: the IR and its uniformity facts."""
        if self._source is None:
            self._source = parse_source(self.fn)
        spec = _Spec(spec_args, block, rt.plane_dim, bounds_check, rt.capabilities)
        kir = Frontend(self._source, spec).build()
        return kir, check_kernel(kir)

    def source(self, block, *args, runtime=None) -> str:
        """The source the runtime generates for these arguments and cube shape (LLVM IR,
        OpenCL C or CUDA C++), without launching: for reading what the compiler sees."""
        block = launch_checks.dims(block, "block")
        rt = self._pick_runtime(args, runtime)
        spec_args, _ = self._check_args(args, rt)
        kir, uni = self.specialize(rt, spec_args, block, bounds_check_enabled())
        return rt.render(kir, uni)

    def launch(self, grid, block, *args, runtime=None):
        rt = self._pick_runtime(args, runtime)
        grid, block = launch_checks.launch_shape(self.__name__, grid, block, rt)
        spec_args, key = self._check_args(args, rt)
        bounds = bounds_check_enabled()
        full_key = (id(rt), key, block, bounds)
        binary = self._binaries.get(full_key)
        if binary is None:
            with self._lock:
                binary = self._binaries.get(full_key)
                if binary is None:
                    kir, uni = self.specialize(rt, spec_args, block, bounds)
                    binary = rt.load(kir, uni)
                    self._binaries[full_key] = binary
        else:
            cache.count("memory_hits")
        run_args = [a for (_, kind, _), a in zip(self.params, args) if kind != "const"]
        launch_checks.check_writable(binary.kir, run_args)
        if grid[0] * grid[1] * grid[2] == 0:
            return
        rt.launch(binary, grid, block, run_args)


def kernel(fn=None):
    """Decorator: compile a Python function as a kerneldsl kernel."""
    if fn is None:
        return kernel
    return Kernel(fn)


__all__ = ["Kernel", "kernel", "CompileError"]
