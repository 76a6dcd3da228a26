"""The `interpreter` runtime: host memory (as the cpu runtime's), kernels run as Python.

A kernel is rendered to a Python generator per unit (renderer.py), compiled with the kernel's
own file and lines (compiler.py) and run cube after cube (scheduler.py), every access checked
(memory.py). Nothing is cached on disk: rendering is cheap next to running. Tensors of this
runtime are its own (mixing them with another runtime's is an error, as for any runtime);
`KERNELDSL_INTERPRET=1` routes every launch of a program here (`interpret_launch`).
"""
from __future__ import annotations

import time

import numpy as np

from kerneldsl import cache
from kerneldsl.pipeline import LaunchInfo
from kerneldsl.runtime import Runtime, get_runtime
from kerneldsl.tensor import Tensor

from ..cpu.runtime import CpuRuntime
from . import compiler, renderer
from .capabilities import DEFAULT_PLANE_DIM, capabilities
from .memory import LaunchState, TensorAccess
from .numerics import KernelHelpers
from .scheduler import CubeRunner

class InterpretedKernel:
    """A rendered and compiled kernel: its IR, the unit generator and its split statements."""

    def __init__(self, kir, rendering: renderer.Rendering):
        self.kir = kir
        self.info = LaunchInfo.of(kir)
        self.source = rendering.source
        self.splits = rendering.splits
        filename = kir.loc.filename if kir.loc is not None else f"<kernel {kir.name}>"
        self.filename = filename
        self.fn = compiler.unit_function(rendering, filename)
        self.helpers = KernelHelpers(kir)


class InterpreterRuntime(CpuRuntime):
    """Host memory of the cpu runtime's kind; launches interpreted, one unit at a time."""

    kind = "interpreter"
    source_ext = "py"

    def __init__(self, plane_dim: int = DEFAULT_PLANE_DIM):
        Runtime.__init__(self, "interpreter", capabilities(plane_dim))
        self.threads = 1
        self._pool = None
        self._abandoned: list = []

    @property
    def device_key(self):
        return "interpreter"  # host memory: every plane size shares it

    def __repr__(self):
        extra = "" if self.plane_dim == DEFAULT_PLANE_DIM else f", plane_dim={self.plane_dim}"
        return f"kd.runtime('interpreter'{extra})"

    # -------------------------------------------------------------- kernels
    def renderings(self, kir, uniformity):
        yield renderer.render(kir)

    def load(self, key, specialize, name="?"):
        """An InterpretedKernel, from memory or rendered now (never from or to the disk cache)."""
        binary = self._kernels.get(key) if key is not None else None
        if binary is None:
            start = time.perf_counter()
            kir, _facts = specialize()
            rendering = renderer.render(kir)
            cache.dump(kir.name, rendering.source, self.source_ext)
            binary = InterpretedKernel(kir, rendering)
            cache.log().debug("interpreter: rendered kernel %s in %.1f ms", name, (time.perf_counter() - start) * 1e3)
            if key is not None:
                self._kernels[key] = binary
        return binary

    def prepare_launch(self, binary: InterpretedKernel, grid, block, args):
        """The base form (rebuilt tensors, then `launch`): the cpu runtime's packed form, which
        this class would otherwise inherit, needs a compiled cpu binary."""
        return Runtime.prepare_launch(self, binary, grid, block, args)

    def launch(self, binary: InterpretedKernel, grid, block, args):
        kir = binary.kir
        state = LaunchState(kir.name, binary.filename, tuple(kir.cube_dim), tuple(grid), kir.plane_dim)
        values, memory = [], {}
        for p, a in zip(kir.params, args):
            if isinstance(a, Tensor):
                access = TensorAccess(state, p.name, _flat(a), a.shape, a.strides)
                memory[p.name] = access
                values.append(access)
            else:
                values.append(np.array(a, p.dtype.np)[()])
        runner = CubeRunner(binary, state, values, memory)
        with np.errstate(all="ignore"):  # integers wrap and floats overflow as on the compiled runtimes
            for z in range(grid[2]):
                for y in range(grid[1]):
                    for x in range(grid[0]):
                        runner.run((x, y, z))


def _flat(t: Tensor) -> np.ndarray:
    """The elements reachable from a host tensor's first element, as a writable flat array."""
    item = t.dtype.itemsize
    n = t.extent()
    raw = t.buffer.raw[t.offset * item:(t.offset + n) * item]
    return raw.view(t.dtype.np)


def interpret_launch(kernel, grid, block, args, rt: Runtime):
    """`kernel[grid, block](*args)` meant for runtime `rt`, run on the interpreter at rt's plane
    size: host tensors (cpu) are used in place; the buffers of a device runtime's tensors are
    copied to the host, and those the kernel changed copied back after the launch."""
    interp = get_runtime("interpreter", plane_dim=rt.plane_dim) if rt.plane_dim != DEFAULT_PLANE_DIM \
        else get_runtime("interpreter")
    copies: dict = {}  # id(device buffer) -> (its runtime, the buffer, its host copy, its bytes before)
    moved = []
    for a in args:
        if not isinstance(a, Tensor):
            moved.append(a)
            continue
        buf = a.buffer
        if not isinstance(buf.raw, np.ndarray):  # device memory: a host copy of the whole buffer
            if id(buf) not in copies:
                a.runtime.synchronize()
                before = np.array(a.runtime._download(buf, 0, buf.nbytes).view(np.uint8))
                host = interp.allocate(buf.nbytes)
                host.raw[:buf.nbytes] = before
                copies[id(buf)] = (a.runtime, buf, host, before)
            buf = copies[id(buf)][2]
        moved.append(Tensor(interp, buf, a.shape, a.dtype, a.strides, a.offset))
    kernel._launch(grid, block, tuple(moved), interp)  # (not launch_with: watchers see the launch once)
    for owner, device, host, before in copies.values():
        after = host.raw[:device.nbytes]
        if not np.array_equal(after, before):  # only buffers the kernel wrote go back
            owner._upload(device, 0, after)


def available() -> bool:
    return True


def report() -> list:
    """The interpreter's RuntimeStatus: it needs numpy only."""
    from kerneldsl.runtime import RuntimeStatus
    return [RuntimeStatus("interpreter", True, capabilities().device_name, "")]


def create(index: int = 0, **options) -> InterpreterRuntime:
    if index != 0:
        raise ValueError(f"the interpreter runtime has one device, got index {index}")
    return InterpreterRuntime(**options)
