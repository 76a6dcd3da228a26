"""A cuda launch's parameter slots filled by a function made once per argument plan.

`CudaRuntime.launch` writes one 8-byte slot per kernel parameter (a tensor's data address,
extent, shapes and strides, each scalar's bits) before `cuLaunchKernel`. A loop over the
binary's plan that tests each slot's kind costs about 0.1 µs a slot: 3 µs for five 2-D
tensors. `fill_function(plan)` writes, once per plan shape, a straight-line function that
stores every slot and records the launch's stream on each tensor's memory, as the loop
does. Plans with other kinds of slots (a bounds-error buffer, tensor maps) keep the loop.
"""
from __future__ import annotations

import functools

_KINDS = ("data", "extent", "shape", "stride", "scalar")


@functools.lru_cache(maxsize=None)
def _compiled(shape: tuple):
    """The fill function of one plan shape ((kind, argument index, axis) per slot)."""
    lines = []
    for i, (kind, index, axis) in enumerate(shape):
        v = f"args[{index}]"
        if kind == "data":
            lines += [f"    v = {v}", "    b = v.buffer", "    if b.stream is not stream:",
                      "        b.record_stream(stream)", f"    slots[{i}] = b.raw + v.offset * v.dtype.itemsize"]
        elif kind == "extent":
            lines.append(f"    slots[{i}] = {v}.extent()")
        elif kind == "shape":
            lines.append(f"    slots[{i}] = {v}.shape[{axis}]")
        elif kind == "stride":
            lines.append(f"    slots[{i}] = {v}.strides[{axis}]")
        else:
            lines.append(f"    slots[{i}] = packers[{i}]({v})")
    source = "def fill(slots, args, stream, packers):\n" + ("\n".join(lines) or "    pass") + "\n"
    env: dict = {}
    exec(compile(source, f"<cuda slots {shape}>", "exec"), env)  # noqa: S102  (source built above)
    return env["fill"]


def fill_function(plan: tuple):
    """`fill(slots, args, stream, packers)` for a binary's plan ((kind, argument index, axis,
    packer) per slot; `packers` is `packers_of(plan)`), or None where a slot is of a kind it
    does not fill (module docstring)."""
    if any(kind not in _KINDS for kind, _, _, _ in plan):
        return None
    return _compiled(tuple((kind, index, axis) for kind, index, axis, _ in plan))


def packers_of(plan: tuple) -> tuple:
    """The scalar packer of each slot (None for the others), as `fill` takes them."""
    return tuple(packer for _, _, _, packer in plan)
