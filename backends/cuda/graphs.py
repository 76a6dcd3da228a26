"""Kernel launches as launches of CUDA graphs, which cost the host less than `cuLaunchKernel`.

On the H200 hosts `cuLaunchKernel` takes about 4 µs a call. Launching an instantiated graph of
one kernel node takes about 1.4 µs, and giving a node new parameters 0.5 µs; a graph of N
nodes costs about 0.8 + 0.6 N µs to launch (session 29, `benchmarks/RESULTS.md`). So a
binary launched again (the generated launch of `CudaRuntime.launcher`, a replay's prepared
launch or joined launches) is launched as a `KernelGraph`: a chain of kernel nodes, one per
launch, each reading its parameters from the parameter block the `cuLaunchKernel` path fills.
The driver copies a node's parameter values when they are set, so each launch gives new
values to the nodes whose grid or arguments moved since (a shadow copy per node says which),
then launches the graph (`launcher.graph_run`, one native call).

Semantics stay those of the launches one by one: the nodes run in order on the stream, after
the work queued on it before. A graph's launches are also ordered behind its earlier launches
on any stream, a dependency that launches one by one do not have, so a graph is launched
only on the stream it was made on; launches on other streams go one by one (and stay free
to overlap).
A graph cannot be launched on a stream that is being captured (that would end the capture):
`graph_run` sees the capture and does nothing, and the caller launches one by one, which the
capture records.
"""
from __future__ import annotations

import array
import ctypes
import weakref

from .launcher import GRAPH_FALLBACK, NODE_BYTES, ROW_WORDS

NODE_WORDS = NODE_BYTES // 8
BUILD_AT = 2  # a graph is made at its binary's second launch: many binaries run once (tests, set-up)


class GraphUnavailable(Exception):
    """The driver refused a step of making a graph, or lays its node parameters out otherwise."""


def node_words(function: int, grid, block, shared: int, params_ptr: int) -> list:
    """A CUDA_KERNEL_NODE_PARAMS (func; grid x, y, z; block x, y, z; shared bytes; the
    parameter-address array; extra, kern, ctx left 0) as 64-bit little-endian words."""
    return [function, grid[0] | grid[1] << 32, grid[2] | block[0] << 32, block[1] | block[2] << 32, shared,
            params_ptr, 0, 0, 0]


def _checked(result, what: str):
    if int(result[0]) != 0:
        raise GraphUnavailable(f"{what}: {result[0]!r}")
    return result[1] if len(result) > 1 else None


class KernelGraph:
    """Launches (CUfunction, grid, block, shared bytes, parameter-address array, parameter slots
    (an array.array the addresses point into)) in order as one graph, made at the BUILD_AT-th
    `launch` for the stream of that launch. Before it, on any other stream, and where making
    it failed, `launch` returns GRAPH_FALLBACK and the caller launches them itself. Callers
    hold the lock that guards the slots across `launch`."""

    __slots__ = ("descriptors", "words", "shadows", "table", "table_ptr", "count", "exec_handle", "stream", "run",
                 "driver", "calls", "failure", "__weakref__")

    def __init__(self, driver, run, descriptors: list):
        self.driver = driver
        self.run = run  # launcher.NativeLauncher.graph_run
        self.descriptors = [tuple(d) for d in descriptors]
        self.count = len(descriptors)
        self.words = array.array("Q", [w for f, grid, block, shared, params_ptr, _ in self.descriptors
                                       for w in node_words(int(f), grid, block, shared, params_ptr)])
        # per node: the grid words and slot values it last got (graph_run compares and updates them)
        self.shadows = [array.array("Q", bytes(8 * (2 + len(slots)))) for *_, slots in self.descriptors]
        words_ptr = self.words.buffer_info()[0]
        self.table = array.array("Q")  # graph_run's rows (launcher.py); node handles filled in by _build
        for k, ((*_, slots), shadow) in enumerate(zip(self.descriptors, self.shadows)):
            self.table.extend([0, words_ptr + k * NODE_BYTES, slots.buffer_info()[0], len(slots),
                               shadow.buffer_info()[0]])
        self.table_ptr = self.table.buffer_info()[0]
        self.exec_handle = 0
        self.stream = None  # the stream the graph is launched on (the one it was made on)
        self.calls = 0
        self.failure = None  # why no graph was made (GraphUnavailable's text), for tests and reports

    def launch(self, stream_handle: int) -> int:
        """Give every node whose grid or arguments moved its parameters from the slots as they
        are now, and launch the graph: 0, GRAPH_FALLBACK (no graph, or the stream is being
        captured: nothing was done), or `launcher.failure`'s code of the step that failed."""
        if self.exec_handle:
            if stream_handle != self.stream:
                return GRAPH_FALLBACK
            return self.run(self.exec_handle, stream_handle, self.table_ptr, self.count)
        self.calls += 1
        if self.calls < BUILD_AT or self.failure is not None:
            return GRAPH_FALLBACK
        try:
            self._build(stream_handle)
        except GraphUnavailable as e:
            self.failure = str(e)
            return GRAPH_FALLBACK
        return self.run(self.exec_handle, stream_handle, self.table_ptr, self.count)

    def launch_grid(self, grid, stream_handle: int) -> int:
        """`launch` of a one-node graph with this call's grid."""
        w = self.words
        w[1] = grid[0] | grid[1] << 32
        w[2] = grid[2] | (w[2] & 0xFFFFFFFF00000000)
        return self.launch(stream_handle)

    def _build(self, stream_handle: int) -> None:
        """Make the graph from the slots and grids as they are now (the nodes copy them), start
        each shadow from them, and keep the graph for this stream."""
        driver = self.driver
        graph = _checked(driver.cuGraphCreate(0), "cuGraphCreate")
        try:
            previous = []
            for k, (function, _, _, shared, params_ptr, slots) in enumerate(self.descriptors):
                mine = self.words[k * NODE_WORDS:(k + 1) * NODE_WORDS]
                half = 0xFFFFFFFF
                p = driver.CUDA_KERNEL_NODE_PARAMS()
                p.func = function
                p.gridDimX, p.gridDimY, p.gridDimZ = mine[1] & half, mine[1] >> 32, mine[2] & half
                p.blockDimX, p.blockDimY, p.blockDimZ = mine[2] >> 32, mine[3] & half, mine[3] >> 32
                p.sharedMemBytes = shared
                p.kernelParams = params_ptr
                if ctypes.string_at(p.getPtr(), NODE_BYTES) != mine.tobytes():
                    raise GraphUnavailable("this cuda-python lays out CUDA_KERNEL_NODE_PARAMS otherwise")
                node = _checked(driver.cuGraphAddKernelNode(graph, previous, len(previous), p),
                                "cuGraphAddKernelNode")
                self.table[k * ROW_WORDS] = int(node)
                self.shadows[k][:] = array.array("Q", [mine[1], mine[2], *slots])
                previous = [node]
            graph_exec = _checked(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except BaseException:
            driver.cuGraphDestroy(graph)
            raise
        self.exec_handle = int(graph_exec)
        self.stream = stream_handle
        # the node handles stay the graph's: it lives as long as its executable graph
        finalizer = weakref.finalize(self, _destroy, driver, graph_exec, graph)
        finalizer.atexit = False  # (at exit the driver frees them with the context)


def _destroy(driver, graph_exec, graph) -> None:
    driver.cuGraphExecDestroy(graph_exec)
    driver.cuGraphDestroy(graph)


def failed_step(code: int, count: int) -> tuple:
    """(what failed, CUresult value) from a nonzero, non-fallback `launch` code of a graph of
    `count` nodes."""
    index, result = (code >> 32) - 1, code & 0xFFFFFFFF
    return ("the graph launch" if index >= count else f"setting node {index}'s parameters"), result
