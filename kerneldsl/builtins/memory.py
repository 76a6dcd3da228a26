"""Cube-shared memory and the cube barrier."""
from __future__ import annotations

from .. import ir
from ..dtypes import as_dtype
from ..frontend_values import SharedRef
from .registry import builtin


@builtin("A cube-shared array of `size` (compile-time; an int or a shape tuple) elements.")
def shared(fe, node, dtype, size):
    dtype = as_dtype(fe.ct(dtype, node, "shared dtype"))
    size = fe.ct(size, node, "shared array size")
    shape = tuple(int(s) for s in size) if isinstance(size, tuple) else (int(size),)
    total = 1
    for s in shape:
        total *= s
    if total <= 0:
        raise fe.error(node, f"shared array size must be positive, got {size}")
    limit = fe.spec.caps.max_shared_bytes
    used = sum(d.dtype.itemsize * d.size for d in fe.shared.values())
    if used + total * dtype.itemsize > limit:
        raise fe.error(node, f"shared memory of {used + total * dtype.itemsize} bytes exceeds the device's "
                             f"{limit} bytes per cube")
    name = fe.fresh("sh")
    fe.shared[name] = ir.SharedDecl(name=name, dtype=dtype, size=total, shape=shape, loc=fe.loc(node))
    return SharedRef(name, dtype, shape)


@builtin("Ask the compiler to leave room for `n` (compile-time) cubes on one compute unit: on CUDA "
         "`__launch_bounds__(units, n)`, which caps a unit's registers (more cubes resident to hide "
         "latency, possibly spills); a hint that other back ends ignore.")
def cubes_per_compute_unit(fe, node, n):
    n = fe.ct(n, node, "cubes per compute unit")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise fe.error(node, f"kd.cubes_per_compute_unit needs a compile-time int of at least 1, got {n!r}")
    fe.min_cubes = max(fe.min_cubes, n)


@builtin("Hint that the kernel's straight-line arithmetic is independent scalar chains best left scalar: "
         "CPU back ends then do not pack its statements into vectors (LLVM's SLP vectoriser, which would "
         "gather strided loads through shuffles); other back ends ignore it.")
def scalar_statements(fe, node):
    fe.scalar_statements = True


@builtin("Hint that the kernel's strided tensor loads are best made as whole vector loads and shuffles: CPU "
         "back ends then tell the compiler to prefer no gather instructions (on AMD Zen 4 a stride-2 f32 load as "
         "gathers took 1.5x the time of loads and shuffles); a load whose addresses follow no stride becomes one "
         "scalar load a lane, so leave the hint out of kernels that gather (grid sampling, table lookups); other "
         "back ends ignore it.")
def avoid_gathers(fe, node):
    fe.avoid_gathers = True


@builtin("Hint that the kernel writes tensors far larger than the caches and reads none of them back: where "
         "the runtime can (`Capabilities.streaming_stores`: the cpu runtime on x86), its wide vector stores to "
         "tensors bypass the caches (non-temporal, where a store's address is aligned to its width or a 64-byte "
         "line), which saves the read of each line that a cached store costs; other back ends ignore it. Stores to "
         "kd.shared arrays stay cached (they are read again).")
def streaming_stores(fe, node):
    fe.streaming_stores = True


@builtin("Barrier over the cube; must be reached by every unit (uniform control flow).")
def sync_cube(fe, node):
    fe.emit(ir.Barrier(loc=fe.loc(node)))
