"""Roles (`with kd.role(first, groups, registers=...)`): whole groups of a cube running their own
code. A producer group feeding two consumer groups through arrival barriers (the roles GEMM
of benchmarks/bulk_gemm.py, one tile a cube and persistent), groups reducing with different
plane operations, a role ordering its own shared memory (kd.sync_role), every compile-time rule, and the interpreter's check that emulated roles
can run in program order. Native on sm_90 (warp-uniform branches, setmaxnreg, one copy of
the code per role); an emulation elsewhere that must give the same answers."""
import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import CompileError, DivergenceError, SharedMemoryRaceError

pytestmark = [pytest.mark.feature("roles"), pytest.mark.interpreter]


def test_a_producer_group_feeds_two_consumer_groups(runtime, rng):
    """The roles GEMM: the producer refills each stage once both consumers are through with
    it (7 k steps a tile over a ring of 3 stages, so several phases of every barrier; the
    persistent launch walks several tiles as one stream; a staged epilogue writes the tiles by
    bulk stores, ordered by kd.sync_role; the 32- and 128-byte layouts): equal to numpy's product."""
    from test_dsl_bulk_copy import check_gemm_configs
    configs = ["roles 128x64x16/s3/g8", "roles 128x64x16/s3/g8/persistent", "roles 128x64x64/s2/g8/persistent/staged/sw128",
               "roles 128x64x16/s3/g8/persistent/staged"]
    if runtime.capabilities.interpreted:  # one unit at a time: the configuration that does it all (~35 s)
        configs = configs[-1:]
    if runtime.capabilities.bulk_copy:
        configs += ["roles 128x256x64/s4/g8", "roles 128x256x64/s4/g8/persistent", "roles 128x256x64/s3/g8/staged",
                    "roles 128x256x64/s4/g8/sw128", "roles 128x256x64/s3/g8/persistent/staged/sw128"]
    check_gemm_configs(runtime, rng, configs)


@kd.kernel
def reduce_by_role(x: kd.Tensor[kd.f32, 2], out: kd.Tensor[kd.f32, 2]):
    """Group 0 sums each plane's row, group 1 takes maxima, group 2 (no role) writes -1; a
    role's own variables and loops stay inside it."""
    p = kd.plane_pos()
    lane = kd.lane_pos()
    with kd.role(0):
        total = 0.0
        for k in range(x.shape[1] // kd.PLANE_DIM):
            total += kd.plane_sum(x[p, k * kd.PLANE_DIM + lane])
        if lane == 0:
            out[p, 0] = total
    with kd.role(1, 1):
        top = -kd.inf
        for k in range(x.shape[1] // kd.PLANE_DIM):
            top = kd.max(top, kd.plane_max(x[p, k * kd.PLANE_DIM + lane]))
        if lane == 0:
            out[p, 0] = top
    if p >= 8 and lane == 0:
        out[p, 0] = -1.0


def test_groups_run_their_own_plane_operations(runtime, rng):
    P = runtime.plane_dim
    x = rng.standard_normal((12, 3 * P)).astype(np.float32)
    out = runtime.zeros((12, 1), kd.f32)
    reduce_by_role[1, 12 * P](runtime.tensor(x), out)
    got = out.numpy()[:, 0]
    np.testing.assert_allclose(got[:4], x[:4].astype(np.float64).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(got[4:8], x[4:8].max(axis=1))
    np.testing.assert_array_equal(got[8:], -1.0)


@kd.kernel
def reverse_in_role(x: kd.Tensor[kd.f32, 1], out: kd.Tensor[kd.f32, 1]):
    """Group 1 reverses its slice of x through shared memory, ordered by kd.sync_role() alone
    (twice: the buffer is reused); group 0 copies its slice meanwhile."""
    sh = kd.shared(kd.f32, 4 * kd.PLANE_DIM)
    u = kd.unit_pos()
    n = 4 * kd.PLANE_DIM
    with kd.role(1):
        for rep in range(2):
            sh[u - n] = x[u] + rep
            kd.sync_role()
            out[u + rep * n] = sh[2 * n - 1 - u]
            kd.sync_role()
    with kd.role(0):
        out[u] = x[u]


def test_a_role_orders_its_own_shared_memory(runtime, rng):
    n = 4 * runtime.plane_dim
    x = rng.standard_normal(3 * n).astype(np.float32)
    out = runtime.zeros(3 * n, kd.f32)
    reverse_in_role[1, 3 * n](runtime.tensor(x), out)
    got = out.numpy()
    np.testing.assert_array_equal(got[:n], x[:n])
    np.testing.assert_array_equal(got[n:2 * n], x[n:2 * n][::-1])
    np.testing.assert_array_equal(got[2 * n:], x[n:2 * n][::-1] + 1)


@kd.kernel
def consumer_first(x: kd.Tensor[kd.f32, 1]):
    """Wrong where roles are emulated: the consumers wait for a phase the producer completes
    only in a later role."""
    bars = kd.arrival_barriers(1)
    if kd.unit_pos() == 0:
        kd.barrier_init(bars, 0, 1)
    kd.sync_cube()
    with kd.role(0):
        kd.barrier_wait(bars, 0, 0)
        x[kd.unit_pos()] = 1.0
    with kd.role(1):
        if kd.unit_pos() == 4 * kd.PLANE_DIM:
            kd.barrier_arrive(bars, 0)


def test_the_interpreter_rejects_waits_program_order_cannot_meet(runtime):
    if not runtime.capabilities.interpreted:
        pytest.skip("the check belongs to the interpreter (the debugging runtime); compiled emulations trust it")
    x = runtime.zeros(8 * runtime.plane_dim, kd.f32)
    with pytest.raises(DivergenceError, match="inside a kd.role.*program order"):
        consumer_first[1, 8 * runtime.plane_dim](x)


@kd.kernel
def outsider_then_role(x: kd.Tensor[kd.f32, 1]):
    """Group 1 writes a slot outside any role; group 0's role reads it after kd.sync_role()
    alone, which orders the role's units only: a race (a kd.sync_cube() is needed)."""
    sh = kd.shared(kd.f32, 8)
    if kd.unit_pos() == 4 * kd.PLANE_DIM:
        sh[0] = 1.0
    with kd.role(0):
        kd.sync_role()
        if kd.unit_pos() == 0:
            x[0] = sh[0]


def test_a_role_barrier_does_not_order_other_units(runtime):
    if not runtime.capabilities.interpreted:
        pytest.skip("the race check belongs to the interpreter (the debugging runtime)")
    with pytest.raises(SharedMemoryRaceError, match=r"sh\[0\]"):
        outsider_then_role[1, 8 * runtime.plane_dim](runtime.zeros(8, kd.f32))


def _compile(rt, fn, planes=8):
    x = rt.zeros(64, kd.f32)
    return kd.kernel(fn).specialize(rt, x, block=planes * rt.plane_dim).ir()


def test_role_errors_name_the_rule_and_the_line(runtime):
    def barrier_inside(x: kd.Tensor[kd.f32, 1]):
        with kd.role(0):
            kd.sync_cube()

    def under_a_branch(x: kd.Tensor[kd.f32, 1]):
        if kd.unit_pos() < 3:
            with kd.role(0):
                x[0] = 1.0

    def nested(x: kd.Tensor[kd.f32, 1]):
        with kd.role(0, 2):
            with kd.role(1):
                x[0] = 1.0

    def too_far(x: kd.Tensor[kd.f32, 1]):
        with kd.role(1, 2):
            x[0] = 1.0

    def budget_gap(x: kd.Tensor[kd.f32, 1]):
        with kd.role(0, registers=40):
            x[0] = 1.0

    def budget_too_big(x: kd.Tensor[kd.f32, 1]):  # 1024 units x 256 registers
        groups = kd.cube_units() // (4 * kd.PLANE_DIM)
        with kd.role(0, groups - 1, registers=256):
            x[0] = 1.0
        with kd.role(groups - 1, 1, registers=256):
            x[1] = 1.0

    def budget_in_loop(x: kd.Tensor[kd.f32, 1]):
        for i in range(2):
            with kd.role(0, 2, registers=128):
                x[i] = 1.0

    def odd_budget(x: kd.Tensor[kd.f32, 1]):
        with kd.role(0, 2, registers=100):
            x[0] = 1.0

    def read_outside(x: kd.Tensor[kd.f32, 1]):
        v = 0.0
        with kd.role(0):
            v = x[1]
        x[0] = v

    def leaves(x: kd.Tensor[kd.f32, 1]):
        with kd.role(0):
            if x[0] > 0.0:
                return
            x[1] = 1.0

    def plane_op_on_own_value(x: kd.Tensor[kd.f32, 1]):
        with kd.role(0):
            n = x[kd.unit_pos()]
            if n > 0.0:
                x[0] = kd.plane_sum(n)

    def role_barrier_outside(x: kd.Tensor[kd.f32, 1]):
        kd.sync_role()

    def role_barrier_in_branch(x: kd.Tensor[kd.f32, 1]):
        with kd.role(0):
            if x[kd.unit_pos()] > 0.0:
                kd.sync_role()

    def not_a_role(x: kd.Tensor[kd.f32, 1]):
        with kd.role(0) as r:
            x[0] = 1.0

    for fn, match in [(barrier_inside, r"kd.sync_cube\(\) inside a kd.role"),
                      (under_a_branch, "kd.role must be reached by every unit"),
                      (nested, "roles do not nest"),
                      (too_far, "2 whole groups"),
                      (budget_gap, "cover every group of the cube exactly once"),
                      (budget_too_big, "total 262144 registers"),
                      (budget_in_loop, "top level"),
                      (odd_budget, "multiple of 8 in 24..256"),
                      (read_outside, "'v' is set inside the kd.role"),
                      (leaves, "would leave a kd.role"),
                      (plane_op_on_own_value, "must be reached by every unit"),
                      (role_barrier_outside, r"kd.sync_role\(\) outside a kd.role"),
                      (role_barrier_in_branch, "must be reached by every unit"),
                      (not_a_role, "one kd.role")]:
        with pytest.raises(CompileError, match=match) as e:
            _compile(runtime, fn, 1024 // runtime.plane_dim if fn is budget_too_big else 8)
        assert e.value.loc is not None and e.value.loc.line > 0, fn.__name__
