"""A cuda launch's parameter slots filled, and the launch made, by functions generated once
per argument plan.

`CudaRuntime.launch` writes one 8-byte slot per kernel parameter (a tensor's data address,
extent, shapes and strides, each scalar's bits) before `cuLaunchKernel`. A loop over the
binary's plan that tests each slot's kind costs about 0.1 µs a slot: 3 µs for five 2-D
tensors. `fill_function(plan)` writes, once per plan shape, a straight-line function that
stores every slot and records the launch's stream on each tensor's memory, as the loop
does; `launch_maker(plan)` wraps the same lines in the whole launch of one binary with one
cube shape (context, current stream, lock, driver call, result check), which a launch plan
calls with no `CudaRuntime.launch` in between, as a one-node graph where it can
(graphs.py). Plans with other kinds of slots (a bounds-error buffer, tensor maps) keep the loop.
"""
from __future__ import annotations

import functools

_KINDS = ("data", "extent", "shape", "stride", "scalar")


def _fill_lines(shape: tuple, indent: str) -> list:
    """The statements storing each slot of a plan shape ((kind, argument index, axis) per slot;
    for a scalar, its integer mask in place of the axis, None for a packer) from `args`,
    recording `stream` on each tensor's memory."""
    lines = []
    for i, (kind, index, axis) in enumerate(shape):
        v = f"args[{index}]"
        if kind == "data":
            lines += [f"v = {v}", "b = v.buffer", "if b.stream is not stream:",
                      "    b.record_stream(stream)", f"slots[{i}] = b.raw + v.offset * v.dtype.itemsize"]
        elif kind == "extent":
            lines.append(f"slots[{i}] = {v}.extent()")
        elif kind == "shape":
            lines.append(f"slots[{i}] = {v}.shape[{axis}]")
        elif kind == "stride":
            lines.append(f"slots[{i}] = {v}.strides[{axis}]")
        elif axis is not None:  # an integer scalar: its two's-complement bits (pipeline.scalar_packer)
            lines.append(f"slots[{i}] = int({v}) & {axis}")
        else:
            lines.append(f"slots[{i}] = packers[{i}]({v})")
    return [indent + line for line in lines]


def _define(source: str, name: str, what: str):
    env: dict = {}
    exec(compile(source, f"<cuda {what}>", "exec"), env)  # noqa: S102  (source built by this module)
    return env[name]


@functools.lru_cache(maxsize=None)
def _compiled(shape: tuple):
    """The fill function of one plan shape."""
    body = _fill_lines(shape, "    ") or ["    pass"]
    return _define("def fill(slots, args, stream, packers):\n" + "\n".join(body) + "\n", "fill", f"slots {shape}")


@functools.lru_cache(maxsize=None)
def _launch_maker(shape: tuple):
    """`make(...)` returning the launch function of one plan shape (`launch_maker`)."""
    source = "\n".join([
        "def make(local, enter, streams, default_stream, lock, slots, packers, launch_kernel, function,",
        "         bx, by, bz, shared, params_ptr, success, failed, graph_launch, fallback, graph_failed):",
        "    def launch(grid, args):",
        "        if not local.__dict__.get('entered'):",
        "            enter()",
        "        stream = streams.__dict__.get('current')",
        "        if stream is None:",
        "            stream = default_stream",
        "        with lock:",
        *_fill_lines(shape, "            "),
        "            code = fallback if graph_launch is None else graph_launch(grid, stream.handle)",
        "            if code == fallback:",
        "                result = launch_kernel(function, grid[0], grid[1], grid[2], bx, by, bz, shared, stream.cu,",
        "                                       params_ptr, 0)",
        "        if code != fallback:",
        "            if code:",
        "                graph_failed(code, grid)",
        "        elif result[0] != success:",
        "            failed(result, grid)",
        "    return launch", ""])
    return _define(source, "make", f"launch {shape}")


def _shape(plan: tuple):
    """A plan's (kind, argument index, axis) per slot, or None where a slot is of a kind the
    generated code does not fill."""
    if any(kind not in _KINDS for kind, _, _, _ in plan):
        return None
    return tuple((kind, index, getattr(packer, "mask", None) if kind == "scalar" else axis)
                 for kind, index, axis, packer in plan)


def fill_function(plan: tuple):
    """`fill(slots, args, stream, packers)` for a binary's plan ((kind, argument index, axis,
    packer) per slot; `packers` is `packers_of(plan)`), or None where a slot is of a kind it
    does not fill (module docstring)."""
    shape = _shape(plan)
    return None if shape is None else _compiled(shape)


def launch_maker(plan: tuple):
    """For a binary's plan, `make(local, enter, streams, default_stream, lock, slots, packers,
    launch_kernel, function, bx, by, bz, shared, params_ptr, success, failed, graph_launch,
    fallback, graph_failed)` returning `launch(grid, args)`: `CudaRuntime.launch` of that binary
    with that cube shape, through `graph_launch(grid, stream handle)` (graphs.py) unless that is
    None or returns `fallback` (`failed(result, grid)` and `graph_failed(code, grid)` raise for a
    driver error), or None where `fill_function` is None."""
    shape = _shape(plan)
    return None if shape is None else _launch_maker(shape)


def packers_of(plan: tuple) -> tuple:
    """The scalar packer of each slot (None for the others), as `fill` takes them."""
    return tuple(packer for _, _, _, packer in plan)
