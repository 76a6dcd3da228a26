"""The cuda runtime's native launcher (backends/cuda/launcher.py) against a stand-in for the
driver's cuLaunchKernel (a ctypes callback with its C signature), so the JIT'd launch loop is
checked on machines without a GPU: every descriptor word reaches the call, launches go in
order on the given stream, and the first failure stops the sequence and is reported with its
index. The same for its graph launch (stand-ins for the three driver calls it makes) and for
graphs.KernelGraph on a stand-in driver module."""
from __future__ import annotations

import array
import ctypes

import pytest

from kerneldsl.backends.cuda import graphs, launcher

pytestmark = pytest.mark.feature("streams")

_CU_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p)


class FakeLaunch:
    """A cuLaunchKernel stand-in logging its arguments; `fail` maps a function handle to the
    CUresult it returns."""

    def __init__(self, fail=None):
        self.calls: list = []
        self.fail = fail or {}
        self.callback = _CU_LAUNCH(self._call)
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def _call(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        first = None  # the value of the first kernel parameter (params[0] points at it)
        if params:
            first = ctypes.cast(ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))[0], ctypes.POINTER(ctypes.c_uint64))[0]
        self.calls.append((f, (gx, gy, gz), (bx, by, bz), shared, stream, first, extra))
        return self.fail.get(f, 0)


def test_every_descriptor_word_reaches_the_driver_in_order():
    fake = FakeLaunch()
    native = launcher.NativeLauncher(fake.address)
    slot = (ctypes.c_uint64 * 1)(0xABCDEF)
    params = (ctypes.c_uint64 * 1)(ctypes.addressof(slot))
    descriptors = (launcher.descriptor(0x1000, (7, 2, 3), (128, 2, 1), 49152, ctypes.addressof(params))
                   + launcher.descriptor(0x2000, (1, 1, 1), (32, 1, 1), 0, 0))
    assert native.launch_all(descriptors.buffer_info()[0], 2, 0x5151) == 0
    assert fake.calls == [(0x1000, (7, 2, 3), (128, 2, 1), 49152, 0x5151, 0xABCDEF, None),
                          (0x2000, (1, 1, 1), (32, 1, 1), 0, 0x5151, None, None)]
    fake.calls.clear()
    assert native.launch_all(descriptors.buffer_info()[0], 0, 0x5151) == 0 and fake.calls == []


def test_the_first_failure_stops_the_sequence_and_names_its_launch():
    fake = FakeLaunch(fail={0x2000: 701})
    native = launcher.NativeLauncher(fake.address)
    descriptors = sum((launcher.descriptor(f, (1, 1, 1), (1, 1, 1), 0, 0) for f in (0x1000, 0x1001, 0x2000, 0x1002)),
                      launcher.descriptor(0x0FFF, (1, 1, 1), (1, 1, 1), 0, 0))
    code = native.launch_all(descriptors.buffer_info()[0], 5, 0)
    assert launcher.failure(code) == (3, 701)
    assert [c[0] for c in fake.calls] == [0x0FFF, 0x1000, 0x1001, 0x2000]  # nothing after the failure


def test_no_native_launcher_for_a_stand_in_driver():
    """Only the cuda-python driver module gets one (a test's fake driver launches through its own
    cuLaunchKernel)."""
    assert launcher.get(object()) is None


_IS_CAPTURING = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
_SET_PARAMS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_GRAPH_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class FakeGraphDriver:
    """Stand-ins for cuStreamIsCapturing (`capturing`: the status it reports), the node
    parameter update (logs the node and the struct's words, with the value its first kernel
    parameter points at; `fail` maps a node to its CUresult) and cuGraphLaunch (`launch_result`)."""

    def __init__(self, capturing=0, fail=None, launch_result=0):
        self.capturing, self.fail, self.launch_result = capturing, fail or {}, launch_result
        self.calls: list = []
        self.callbacks = (_IS_CAPTURING(self._is_capturing), _SET_PARAMS(self._set), _GRAPH_LAUNCH(self._launch))
        self.native = launcher.NativeLauncher(FakeLaunch().address,
                                              tuple(ctypes.cast(c, ctypes.c_void_p).value for c in self.callbacks))

    def _is_capturing(self, stream, status):
        self.calls.append(("capturing", stream))
        status[0] = self.capturing
        return 0

    def _set(self, graph_exec, node, params):
        words = list(ctypes.cast(params, ctypes.POINTER(ctypes.c_uint64))[:graphs.NODE_WORDS])
        first = None
        if words[5]:
            first = ctypes.cast(ctypes.cast(words[5], ctypes.POINTER(ctypes.c_void_p))[0],
                                ctypes.POINTER(ctypes.c_uint64))[0]
        self.calls.append(("set", graph_exec, node, words, first))
        return self.fail.get(node, 0)

    def _launch(self, graph_exec, stream):
        self.calls.append(("launch", graph_exec, stream))
        return self.launch_result


def _graph_table(*nodes) -> tuple:
    """graph_run's (table, keep-alive) for nodes given as (handle, function, grid, slot values)."""
    keep, rows = [], []
    for handle, function, grid, values in nodes:
        slots = array.array("Q", values)
        base = slots.buffer_info()[0]
        params = array.array("Q", [base + 8 * i for i in range(len(values))])
        words = array.array("Q", graphs.node_words(function, grid, (32, 1, 1), 0, params.buffer_info()[0]))
        shadow = array.array("Q", bytes(8 * (2 + len(values))))
        keep.append((slots, params, words, shadow))
        rows += [handle, words.buffer_info()[0], base, len(values), shadow.buffer_info()[0]]
    return array.array("Q", rows), keep


def test_graph_run_sets_the_nodes_whose_arguments_moved_then_launches():
    fake = FakeGraphDriver()
    table, keep = _graph_table((0x71, 0x1000, (7, 2, 3), [0xA0A0, 5]), (0x72, 0x2000, (1, 1, 1), [0xB0B0]))
    (slots_a, _, words_a, shadow_a), (slots_b, _, words_b, _) = keep

    def run():
        fake.calls.clear()
        assert fake.native.graph_run(0xE0, 0x5151, table.buffer_info()[0], 2) == 0
        return fake.calls

    assert run() == [("capturing", 0x5151), ("set", 0xE0, 0x71, list(words_a), 0xA0A0),
                     ("set", 0xE0, 0x72, list(words_b), 0xB0B0), ("launch", 0xE0, 0x5151)]
    assert list(shadow_a) == [words_a[1], words_a[2], 0xA0A0, 5]
    assert run() == [("capturing", 0x5151), ("launch", 0xE0, 0x5151)]  # nothing moved: no update
    slots_b[0] = 0xB1B1
    assert [c[:3] for c in run()][1:] == [("set", 0xE0, 0x72), ("launch", 0xE0, 0x5151)]
    words_a[1] = 8 | 2 << 32  # a new grid
    assert [c[:3] for c in run()][1:] == [("set", 0xE0, 0x71), ("launch", 0xE0, 0x5151)]
    slots_a[1] = 6  # a scalar
    assert [c[:3] for c in run()][1:] == [("set", 0xE0, 0x71), ("launch", 0xE0, 0x5151)]


def test_graph_run_on_a_capturing_stream_does_nothing():
    """A graph launch would end the capture: the caller launches one by one instead."""
    fake = FakeGraphDriver(capturing=1)
    table, keep = _graph_table((0x71, 0x1000, (1, 1, 1), [1]))
    code = fake.native.graph_run(0xE0, 0x5151, table.buffer_info()[0], 1)
    assert code == launcher.GRAPH_FALLBACK and fake.calls == [("capturing", 0x5151)]
    assert list(keep[0][3]) == [0, 0, 0]  # the shadow untouched


@pytest.mark.parametrize("fail_node, launch_result, step", [(0x72, 0, 1), (None, 700, 3)])
def test_graph_run_reports_the_step_that_failed(fail_node, launch_result, step):
    fake = FakeGraphDriver(fail={fail_node: 1} if fail_node else None, launch_result=launch_result)
    table, keep = _graph_table(*((0x71 + k, f, (1, 1, 1), [f]) for k, f in enumerate((1, 2, 3))))
    code = fake.native.graph_run(0xE0, 0, table.buffer_info()[0], 3)
    assert graphs.failed_step(code, 3) == (("the graph launch", 700) if fail_node is None
                                           else ("setting node 1's parameters", 1))
    assert [c[0] for c in fake.calls][-1] == ("launch" if fail_node is None else "set")  # nothing after it
    assert (code >> 32) - 1 == step
    if fail_node is not None:  # the node that was not updated is updated at the next launch
        fake.fail, fake.calls = {}, []
        assert fake.native.graph_run(0xE0, 0, table.buffer_info()[0], 3) == 0
        assert [c[:3] for c in fake.calls][1:] == [("set", 0xE0, 0x72), ("set", 0xE0, 0x73), ("launch", 0xE0, None)]


class StandInGraphDriver:
    """The graph-making calls of cuda-python's driver module, logged; CUDA_KERNEL_NODE_PARAMS is
    cuda-python's own (KernelGraph checks its layout against node_words)."""

    def __init__(self, refuse=None):
        from cuda.bindings import driver as real
        self.CUDA_KERNEL_NODE_PARAMS = real.CUDA_KERNEL_NODE_PARAMS
        self.refuse = refuse
        self.calls: list = []

    def _result(self, name, value=None):
        self.calls.append(name)
        return (1,) if name == self.refuse else (0, value)

    def cuGraphCreate(self, flags):
        return self._result("cuGraphCreate", 0x6000)

    def cuGraphAddKernelNode(self, graph, dependencies, count, params):
        self.calls.append(("node", list(dependencies), count, params.gridDimX, params.blockDimX))
        return self._result("cuGraphAddKernelNode", 0x7000 + len([c for c in self.calls if c[0] == "node"]))

    def cuGraphInstantiate(self, graph, flags):
        return self._result("cuGraphInstantiate", 0xE000)

    def cuGraphExecDestroy(self, graph_exec):
        self.calls.append("cuGraphExecDestroy")

    def cuGraphDestroy(self, graph):
        self.calls.append("cuGraphDestroy")


def test_a_kernel_graph_is_made_at_its_second_launch_as_a_chain():
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed")
    driver, runs = StandInGraphDriver(), []

    def run(graph_exec, stream, table_ptr, n):
        table = (ctypes.c_uint64 * (n * launcher.ROW_WORDS)).from_address(table_ptr)
        rows = [table[k * launcher.ROW_WORDS:(k + 1) * launcher.ROW_WORDS] for k in range(n)]
        words = (ctypes.c_uint64 * graphs.NODE_WORDS).from_address(rows[0][1])
        shadows = [list((ctypes.c_uint64 * (2 + row[3])).from_address(row[4])) for row in rows]
        runs.append((graph_exec, stream, [row[0] for row in rows], words[1], words[2] & 0xFFFFFFFF, shadows))
        return 0

    from cuda.bindings import driver as real
    slots = array.array("Q", [0x5000, 3]), array.array("Q", [0x6000])
    g = graphs.KernelGraph(driver, run, [(real.CUfunction(0x10), (4, 1, 1), (64, 1, 1), 0, 0x900, slots[0]),
                                         (real.CUfunction(0x20), (2, 3, 1), (32, 1, 1), 256, 0x908, slots[1])])
    assert g.launch(0x51) == launcher.GRAPH_FALLBACK and driver.calls == [] and runs == []
    assert g.launch(0x51) == 0
    assert driver.calls == ["cuGraphCreate", ("node", [], 0, 4, 64), "cuGraphAddKernelNode",
                            ("node", [0x7001], 1, 2, 32), "cuGraphAddKernelNode", "cuGraphInstantiate"]
    # each shadow starts from what its node was made with (so the first graph launch updates nothing)
    assert runs == [(0xE000, 0x51, [0x7001, 0x7002], 4 | 1 << 32, 1,
                     [[4 | 1 << 32, 1 | 64 << 32, 0x5000, 3], [2 | 3 << 32, 1 | 32 << 32, 0x6000]])]
    assert g.launch(0x99) == launcher.GRAPH_FALLBACK and len(runs) == 1  # only on the stream it was made on
    assert g.launch(0x51) == 0 and len(runs) == 2
    one = graphs.KernelGraph(driver, run, [(real.CUfunction(0x10), (1, 1, 1), (64, 1, 1), 0, 0x900, slots[1])])
    one.launch_grid((9, 8, 7), 0x52)
    assert one.launch_grid((5, 6, 7), 0x52) == 0
    assert runs[-1][3:5] == (5 | 6 << 32, 7)  # this call's grid, the cube shape kept
    assert driver.calls[-3][1:] == ([], 0, 5, 64)  # made with the grid of the launch that made it
    del g, one
    assert driver.calls.count("cuGraphExecDestroy") == 2 and driver.calls.count("cuGraphDestroy") == 2


@pytest.mark.parametrize("refuse", ["cuGraphAddKernelNode", "cuGraphInstantiate"])
def test_a_graph_the_driver_refuses_leaves_launches_one_by_one(refuse):
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python is not installed")
    from cuda.bindings import driver as real
    driver = StandInGraphDriver(refuse=refuse)
    g = graphs.KernelGraph(driver, None, [(real.CUfunction(0x10), (1, 1, 1), (64, 1, 1), 0, 0x900,
                                           array.array("Q", [0]))])
    assert [g.launch(0) for _ in range(4)] == [launcher.GRAPH_FALLBACK] * 4
    assert refuse in g.failure and driver.calls.count("cuGraphCreate") == 1  # tried once
    assert driver.calls[-1] == "cuGraphDestroy"  # the half-made graph given back
