"""`@kd.kernel`: a Python function compiled per specialisation and launched over a grid.

    @kd.kernel
    def add(x: kd.Tensor[kd.f32], y: kd.Tensor[kd.f32], n: kd.i32):
        i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
        if i < n:
            y[i] += x[i]

    add[grid, block](x, y, n)          # grid, block: int or (x, y[, z]) tuples
    add[grid, block](x, y, n=n)        # arguments by keyword too, as in a Python call

A specialisation is fixed by the tensors' dtypes, ranks and inner contiguity,
the values of `kd.Const` parameters, the cube shape, the runtime (its back end,
device and plane size) and the bounds-check flag. Arguments are checked before
anything compiles; compiled kernels are cached in memory and on disk, under a key
made from the kernel's source and its specialisation before the front end runs
(`fingerprint.py`), so a warm process neither parses nor compiles.
`kernel.specialize(runtime, *args, block=...)` gives one specialisation as a
`SpecializedKernel` (IR, source, binary) without launching it.
"""
from __future__ import annotations

import functools
import inspect
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from . import cache, envflags, fingerprint, lang, launch_checks, launch_plan, replay
from .dtypes import DType, as_dtype
from .errors import CompileError
from .runtime import Runtime, get_runtime
from .tensor import Tensor

_dims = launch_checks.dims  # grid / block parsing (the cuda compile-only paths import it from here)
_MISSING = object()  # a parameter no launch argument gave
_REPLAY_LOCAL = replay._local
_STATS = cache.STATS
_exact_ints = launch_checks.exact_ints


_int_range = launch_checks.int_range


bounds_check_enabled = envflags.bounds_check  # whether $KERNELDSL_BOUNDS_CHECK is on (read on every launch)


interpret_enabled = envflags.interpret  # $KERNELDSL_INTERPRET: every launch on the interpreter runtime


@dataclass(frozen=True)
class TensorType:
    """A tensor argument described by what a specialisation depends on, for
    `Kernel.specialize` without allocating: dtype, rank, and whether the last axis is
    contiguous (stride 1)."""
    dtype: DType
    ndim: int
    inner_contiguous: bool = True

    def __post_init__(self):
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if not isinstance(self.ndim, int) or self.ndim < 0:
            raise ValueError(f"TensorType ndim must be a non-negative int, got {self.ndim!r}")


class SpecializedKernel:
    """One specialisation of a kernel on one runtime (argument dtypes, ranks and
    contiguity, `kd.Const` values, cube shape, bounds-check flag), made by
    `Kernel.specialize`. Nothing runs until asked: `ir()` runs the front end, `source()`
    renders, `compile()` gives the launchable binary through the memory and disk caches."""

    def __init__(self, kernel: "Kernel", runtime: Runtime, spec_args, spec_key, block, bounds_check: bool):
        self.kernel = kernel
        self.runtime = runtime
        self.block = block
        self.bounds_check = bounds_check
        self._spec_args = spec_args
        self._spec_key = spec_key
        self._ir = None
        self._key = False  # not computed yet

    def __repr__(self):
        return f"<specialised kd.kernel {self.kernel.__name__} on {self.runtime.name}, block {self.block}>"

    @property
    def memory_key(self) -> tuple:
        """The key of this specialisation in its kernel's in-process binary table."""
        return (id(self.runtime), self._spec_key, self.block, self.bounds_check)

    @property
    def key(self) -> str | None:
        """The disk-cache key (None when something the kernel reads has no stable
        description; it then compiles in every process)."""
        if self._key is False:
            self._key = self.kernel._cache_key(self.runtime, self._spec_key, self.block, self.bounds_check)
        return self._key

    def ir(self) -> tuple:
        """(KernelIR, uniformity facts): the front end's output for this specialisation."""
        if self._ir is None:
            self._ir = self.kernel._build_ir(self.runtime, self._spec_args, self.block, self.bounds_check)
        return self._ir

    def source(self) -> str:
        """The generated source (LLVM IR, OpenCL C or CUDA C++) the compiler sees."""
        return self.runtime.render(*self.ir())

    def compile(self):
        """The launchable binary of this specialisation: from the kernel's table, else the
        runtime's caches (memory, disk), else built (front end, render, compile)."""
        k = self.kernel
        binary = k._binaries.get(self.memory_key)
        if binary is None:
            with k._lock:
                binary = k._binaries.get(self.memory_key)
                if binary is None:
                    binary = self.runtime.load(self.key, self.ir, k.__name__)
                    k._binaries[self.memory_key] = binary
        return binary


class Kernel:
    """A DSL kernel. Index with `[grid, block]` to launch."""

    def __init__(self, fn, source: str | None = None):
        self.fn = fn
        self._source_text = source
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._source = None
        self._binaries: dict = {}
        self._plans: dict = {}  # launch signature -> LaunchPlan (launch_plan.py)
        self._lock = threading.Lock()
        self.params = self._read_params(fn)
        self._kinds = tuple(kind for _, kind, _ in self.params)
        self._signature = launch_plan.signature_function(self._kinds)  # (args, runtime, block, bounds) -> plan key
        _KERNELS.add(self)

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
                arg = getattr(ann, "__args__", (None,))[0]
                out.append((name, "const", arg if isinstance(arg, type) else None))
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
        return _Launcher(self, *launch)

    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        """Positional arguments in parameter order from a launch's positional and keyword
        arguments (as a Python call binds them), naming the kernel when they do not fit."""
        names = [n for n, _, _ in self.params]
        out = list(args) + [_MISSING] * (len(names) - len(args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self.__name__}() has no parameter {k!r}; its parameters are {', '.join(names)}")
            i = names.index(k)
            if i < len(args):
                raise TypeError(f"{self.__name__}() got argument {k!r} both by position and by keyword")
            out[i] = v
        missing = [n for n, v in zip(names, out) if v is _MISSING]
        if missing:
            raise TypeError(f"{self.__name__}() is missing argument(s) {', '.join(missing)}")
        return tuple(out)

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
                if not isinstance(a, (Tensor, TensorType)):
                    raise TypeError(f"{self.__name__}: argument {name} must be a kd tensor, got {type(a).__name__}")
                if info.dtype is not None and a.dtype is not info.dtype:
                    raise TypeError(f"{self.__name__}: argument {name} must be {info.dtype.name}, got {a.dtype.name}")
                if info.ndim is not None and a.ndim != info.ndim:
                    raise ValueError(f"{self.__name__}: argument {name} must have {info.ndim} dims, got {a.ndim} "
                                     f"(shape {a.shape})")
                if a.dtype not in rt.capabilities.dtypes:
                    raise TypeError(f"{self.__name__}: argument {name} is {a.dtype.name}, which {rt.name} does not "
                                    f"support")
                if isinstance(a, TensorType):
                    inner = a.ndim == 0 or a.inner_contiguous
                else:
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
                if info is not None and type(a) is not info:  # (an exact match needs no call)
                    self._check_const(name, info, a)
                spec_args.append(("const", a))
                key.append(("c", type(a).__name__, a))
        return spec_args, tuple(key)

    def _check_const(self, name, info, a) -> None:
        """A `kd.Const[T]` argument must be a T (an int for `Const[int]`: no bool, no 2.5)."""
        if info is int:
            ok = isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))
        elif info is float:
            ok = isinstance(a, (int, float, np.integer, np.floating)) and not isinstance(a, (bool, np.bool_))
        elif info is bool:
            ok = isinstance(a, (bool, np.bool_)) or isinstance(a, (int, np.integer)) and a in (0, 1)
        else:
            ok = isinstance(a, info)
        if not ok:
            raise TypeError(f"{self.__name__}: kd.Const[{info.__name__}] argument {name} must be of type "
                            f"{info.__name__}, got {a!r} ({type(a).__name__})")

    def _check_scalar(self, name, dtype: DType, a):
        if a is dtype:  # a scalar described by its type (Kernel.specialize)
            return
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

    def _build_ir(self, rt: Runtime, spec_args, block, bounds_check) -> tuple:
        """Front end + checks for one specialisation: the IR and its uniformity facts."""
        from .analysis import check_kernel  # (imported here: a process with a warm cache never needs them)
        from .frontend import Frontend, _Spec, parse_source
        cache.count("specialized")
        if self._source is None:
            self._source = parse_source(self.fn, self._source_text)
        spec = _Spec(spec_args, block, rt.plane_dim, bounds_check, rt.capabilities)
        kir = Frontend(self._source, spec).build()
        return kir, check_kernel(kir)

    def _cache_key(self, rt: Runtime, spec_key, block, bounds_check) -> str | None:
        """The disk-cache key of a specialisation, computed without the front end: the
        kernel's code and all it reads, the specialisation, the runtime's identity and
        the package's own source. None when some value read has no stable description."""
        try:
            spec = [(kind, *rest) if kind != "c" else (kind, rest[0], fingerprint.value_digest(rest[1]))
                    for kind, *rest in spec_key]
            return cache.key(fingerprint.library_digest(), fingerprint.kernel_digest(self.fn), spec, block,
                             bounds_check, rt.cache_identity())
        except fingerprint.Unkeyable as e:
            cache.log().debug("kernel %s is not cached on disk: %s", self.__name__, e)
            return None

    def _check_block(self, rt: Runtime, block) -> None:
        units = block[0] * block[1] * block[2]
        if units < 1 or units > rt.capabilities.max_cube_units:
            raise ValueError(f"{self.__name__}: block {block} has {units} units; {rt.name} allows 1 to "
                             f"{rt.capabilities.max_cube_units} per cube")

    def _launch_dims(self, v, what: str) -> tuple:
        """`_dims` with errors that name this kernel."""
        try:
            return _dims(v, what)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{self.__name__}[grid, block]: {e}") from None

    def specialize(self, runtime, *args, block) -> SpecializedKernel:
        """This kernel specialised as `kernel[grid, block](*args)` would be on `runtime` (a
        Runtime or a runtime name), without launching. Arguments may be kd tensors on any
        runtime or `TensorType`s, scalars or their dtype, and `kd.Const` values; only
        what specialises is read. Raises what a launch would for bad arguments."""
        rt = get_runtime(runtime)
        block = self._launch_dims(block, "block")
        self._check_block(rt, block)
        spec_args, key = self._check_args(args, rt)
        return SpecializedKernel(self, rt, spec_args, key, block, bounds_check_enabled())

    def source(self, block, *args, runtime=None) -> str:
        """The source the runtime generates for these arguments and cube shape (LLVM IR,
        OpenCL C or CUDA C++), without launching: for reading what the compiler sees."""
        return self.specialize(self._pick_runtime(args, runtime), *args, block=block).source()

    def launch(self, grid, block, *args, runtime=None):
        """`self[grid, block](*args, runtime=runtime)`."""
        return self.launch_with(grid, block, args, runtime)

    def launch_with(self, grid, block, args: tuple, runtime=None):
        """`self[grid, block](*args, runtime=runtime)` with the arguments as one tuple in
        parameter order: every launch passes through here (tools wrap it to watch launches).
        One whose signature has a plan (launch_plan.py) takes the first branch: the key, the
        plan, its per-call checks."""
        rec = _REPLAY_LOCAL.__dict__.get("recorder")  # replay.active(), inlined
        # (under $KERNELDSL_INTERPRET, flipped at any time, no plan is used: _launch_first sends
        # the launch to the interpreter)
        if rec is None and (type(block) is int or _exact_ints(block)) and not interpret_enabled():
            key = self._signature(args, runtime, block, bounds_check_enabled())
            if key is not None:
                try:
                    plan = self._plans.get(key)
                except TypeError:  # an unhashable kd.Const: _launch_first words the error
                    plan = None
                if plan is not None:
                    _STATS["memory_hits"] += 1
                    return plan.launch(grid, args)
        if rec is not None:  # a replayable operator's first call: note the launch once it ran
            self._launch(grid, block, args, runtime)
            rec.launched(self, grid, block, args, runtime)
            return None
        return self._launch(grid, block, args, runtime)

    def _launch(self, grid, block, args, runtime):
        bounds = bounds_check_enabled()
        key = launch_plan.signature(self._kinds, args, runtime, block, bounds)
        try:
            plan = self._plans.get(key) if key is not None else None
        except TypeError:  # an unhashable kd.Const: _check_args words the error
            key = plan = None
        if plan is None or interpret_enabled():
            return self._launch_first(grid, block, args, runtime, bounds, key)
        _STATS["memory_hits"] += 1
        plan.launch(grid, args)

    def prepare(self, grid, block, args: tuple, runtime=None):
        """The launch `self[grid, block](*args)` that just ran, as the runtime's `PreparedLaunch`
        (replay.py): None where the launch has no plan to build one from, False for an empty grid."""
        key = launch_plan.signature(self._kinds, args, runtime, block, bounds_check_enabled())
        try:
            plan = self._plans.get(key) if key is not None else None
        except TypeError:
            plan = None
        if plan is None:
            return None
        grid = launch_checks.grid_shape(self.__name__, grid, plan.runtime)
        if grid[0] * grid[1] * grid[2] == 0:
            return False
        run_args = list(args) if plan.run_index is None else [args[i] for i in plan.run_index]
        return plan.runtime.prepare_launch(plan.binary, grid, plan.block, run_args), run_args

    def _launch_first(self, grid, block, args, runtime, bounds, plan_key) -> None:
        """A launch whose signature has no plan yet: every check, the binary (compiled if
        needed), and a `LaunchPlan` kept for the next launch with this signature."""
        rt = self._pick_runtime(args, runtime)
        if rt.kind != "interpreter" and interpret_enabled():
            from .backends.interpreter.runtime import interpret_launch  # every launch through the interpreter
            return interpret_launch(self, grid, block, args, rt)
        grid, block = launch_checks.launch_shape(self.__name__, grid, block, rt)
        spec_args, key = self._check_args(args, rt)
        binary = self._binaries.get((id(rt), key, block, bounds))
        if binary is None:
            for watcher in _WATCHERS:
                watcher(self, block, args)
            binary = SpecializedKernel(self, rt, spec_args, key, block, bounds).compile()
        else:
            cache.count("memory_hits")
        run_args = [a for (_, kind, _), a in zip(self.params, args) if kind != "const"]
        launch_checks.check_writable(binary.info, run_args)
        if binary.info.bulk_sources:
            launch_checks.check_bulk_sources(binary.info, run_args)
        if plan_key is not None:
            self._plans[plan_key] = launch_plan.LaunchPlan(self, rt, block, binary)
        if grid[0] * grid[1] * grid[2] == 0:
            return
        rt.launch(binary, grid, block, run_args)

    def forget_binaries(self) -> None:
        """Drop the compiled binaries held in this process (and the launch plans using them)."""
        with self._lock:
            self._binaries.clear()
            self._plans.clear()


class _Launcher:
    """`kernel[grid, block]`: call it with the kernel's arguments to launch."""

    __slots__ = ("kernel", "grid", "block")

    def __init__(self, kernel: Kernel, grid, block):
        self.kernel = kernel
        self.grid = grid
        self.block = block

    @property
    def __name__(self) -> str:
        return f"{self.kernel.__name__}[grid, block]"

    def __repr__(self):
        return f"<launch of kd.kernel {self.kernel.__name__} on grid {self.grid!r}, block {self.block!r}>"

    def __call__(self, *args, runtime=None, **kwargs):
        kernel = self.kernel
        return kernel.launch_with(self.grid, self.block, kernel._bind(args, kwargs) if kwargs else args, runtime)


_WATCHERS: list = []
_KERNELS: "weakref.WeakSet[Kernel]" = weakref.WeakSet()  # every live kernel (for kd.cache_clear)


def loaded_kernels() -> list:
    """Every `Kernel` object alive in this process."""
    return list(_KERNELS)


def watch_specializations(callback) -> None:
    """Call `callback(kernel, block, args)` whenever a launch meets a specialisation its
    kernel has not compiled in this process yet, before compiling it (tools use this to
    compile the same specialisation for other targets, e.g. `backends/cuda/codegen_check.py`).
    What the callback raises propagates out of the launch."""
    _WATCHERS.append(callback)


def unwatch_specializations(callback) -> None:
    """Stop calling a callback given to `watch_specializations`."""
    _WATCHERS.remove(callback)


def kernel(fn=None, *, source: str | None = None):
    """Decorator: compile a Python function as a kerneldsl kernel. `source` (the text of its
    `def`) is for functions whose source Python cannot find, e.g. typed at the plain REPL."""
    if fn is None:
        return functools.partial(kernel, source=source)
    return Kernel(fn, source)


__all__ = ["Kernel", "SpecializedKernel", "TensorType", "kernel", "watch_specializations", "unwatch_specializations",
           "CompileError"]
