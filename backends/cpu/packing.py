"""A cpu launch's argument words (abi.py's layout), by a function made once per parameter layout.

Packing runs on every launch: a loop over the parameters that tests each one's kind, walks
each tensor's shape and calls a packer per scalar costs µs. `words_function(params)`
instead writes, once per layout (the tensor ranks and item sizes, the scalar dtypes), a
straight-line Python function that builds the list of words in one expression — each
tensor's data address (remembered on its Buffer), its extent, shape and strides, each
scalar's bits — and compiles it. Layouts repeat across kernels, so there are few of them.

`key_indices(params)` lists the words other than the control record's and the tensors'
data addresses: a launch's *argument words* (kerneldsl/loop_bounds.py), which the runtime
compares to tell a launch it has seen end quickly.
"""
from __future__ import annotations

import functools

from kerneldsl import ir
from kerneldsl.pipeline import scalar_packer

from .abi import HEADER_SLOTS


def buffer_address(buffer) -> int:
    """The data address of a cpu Buffer's host array, looked up once and kept on the Buffer
    (its array never changes; numpy's lookup costs about a µs)."""
    address = buffer.address
    if address is None:
        address = buffer.address = buffer.raw.ctypes.data
    return address


def _layout(params) -> tuple:
    """What packing depends on: per parameter ("t", item size, rank) or ("s", dtype)."""
    return tuple(("t", p.dtype.itemsize, p.ndim) if isinstance(p, ir.TensorParam) else ("s", p.dtype)
                 for p in params)


def _extent(i: int, ndim: int) -> str:
    """Python source of tensor i's extent: 1 + sum((n - 1) * stride), 0 when an axis is empty."""
    if ndim == 0:
        return "1"
    terms = " + ".join(f"(s{i}[{k}] - 1) * t{i}[{k}]" for k in range(ndim))
    empty = " and ".join(f"s{i}[{k}]" for k in range(ndim))
    return f"((1 + {terms}) if {empty} else 0)"


@functools.lru_cache(maxsize=None)
def _compiled(layout: tuple):
    """The words function of one layout, compiled from its source."""
    lines, items, env = [], ["g0", "g1", "g2", "control"], {"_address": buffer_address}
    names = [f"a{i}" for i in range(len(layout))]
    if names:
        lines.append(f"    {', '.join(names)}, = args")
    for i, part in enumerate(layout):
        if part[0] == "s":
            env[f"_p{i}"] = scalar_packer(part[1])
            items.append(f"_p{i}(a{i})")
            continue
        _, item, ndim = part
        lines.append(f"    s{i} = a{i}.shape; t{i} = a{i}.strides")
        items.append(f"_address(a{i}.buffer) + a{i}.offset * {item}")
        items.append(_extent(i, ndim))
        items += [f"s{i}[{k}]" for k in range(ndim)] + [f"t{i}[{k}]" for k in range(ndim)]
    source = ("def words(g0, g1, g2, control, args):\n" + "\n".join(lines) + ("\n" if lines else "")
              + f"    return [{', '.join(items)}]\n")
    exec(compile(source, f"<cpu words {layout}>", "exec"), env)  # noqa: S102  (source built above)
    return env["words"]


def words_function(params):
    """`words(g0, g1, g2, control_address, args) -> list` of int words for a kernel with these
    runtime parameters (module docstring); `args` holds exactly one value per parameter."""
    return _compiled(_layout(params))


def key_indices(params) -> tuple:
    """Indices of the argument words (all but the control record's and the data addresses)."""
    out, word = [0, 1, 2], HEADER_SLOTS
    for p in params:
        if isinstance(p, ir.TensorParam):
            out += range(word + 1, word + 2 + 2 * p.ndim)  # extent, shape, strides
            word += 2 + 2 * p.ndim
        else:
            out.append(word)
            word += 1
    return tuple(out)
