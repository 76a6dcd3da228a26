"""Launch shapes are checked against the runtime's `Capabilities` (cube ids past what the
device's position registers hold are refused, naming the limit), and grid, block and
arguments are checked the same way on the first launch and the hundredth."""
from __future__ import annotations

import numpy as np
import pytest

import kerneldsl as kd

pytestmark = pytest.mark.interpreter  # (the interpreter runs these too)


@kd.kernel
def mark_cubes(out: kd.Tensor[kd.i32, 3]):
    if kd.unit_pos_x() == 0:
        out[kd.cube_pos_z(), kd.cube_pos_y(), kd.cube_pos_x()] = (kd.cube_pos_z() * 100 + kd.cube_pos_y() * 10
                                                                  + kd.cube_pos_x())


@kd.kernel
def scale(x: kd.Tensor[kd.f32], k: kd.f32, n: kd.i32):
    i = kd.cube_pos_x() * kd.cube_dim_x() + kd.unit_pos_x()
    if i < n:
        x[i] = x[i] * k


def test_grid_positions_in_three_axes(runtime):
    out = runtime.zeros((2, 3, 5), "i32")
    mark_cubes[(5, 3, 2), 32](out)
    z, y, x = np.meshgrid(range(2), range(3), range(5), indexing="ij")
    np.testing.assert_array_equal(out.numpy(), z * 100 + y * 10 + x)


def test_capabilities_state_grid_limits(runtime):
    caps = runtime.capabilities
    assert len(caps.max_grid) == 3 and len(caps.max_cube_dims) == 3
    assert all(1 <= g <= (1 << 31) - 1 for g in caps.max_grid)  # every renderer's cube ids are i32
    assert caps.max_grid_cubes >= caps.max_grid[0]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cube_ids_past_the_limit_are_refused(runtime, axis):
    out = runtime.zeros((1, 1, 1), "i32")
    limit = runtime.capabilities.max_grid[axis]
    grid = [1, 1, 1]
    grid[axis] = limit + 5
    with pytest.raises(ValueError, match=rf"{limit + 5} cubes along {'xyz'[axis]}; .* at most {limit}"):
        mark_cubes[tuple(grid), 32](out)
    assert out.numpy().sum() == 0  # nothing ran


@pytest.mark.parametrize("grid", [(1 << 31, 1 << 31, 1 << 31), (1 << 32, 1 << 32, 1), 2 ** 31 + 5])
def test_huge_grids_from_the_issue_are_refused(grid):
    out = kd.runtime("cpu").zeros((1, 1, 1), "i32")
    with pytest.raises(ValueError, match="at most 2147483647"):
        mark_cubes[grid, 32](out)


def test_too_many_units_along_an_axis(runtime):
    caps = runtime.capabilities
    out = runtime.zeros((1, 1, 1), "i32")
    if caps.max_cube_dims[2] < caps.max_cube_units:
        with pytest.raises(ValueError, match=rf"units along z; .* at most {caps.max_cube_dims[2]}"):
            mark_cubes[1, (1, 1, caps.max_cube_dims[2] + 1)](out)
    with pytest.raises(ValueError, match=rf"allows 1 to {caps.max_cube_units} per cube"):
        mark_cubes[1, caps.max_cube_units + 1](out)


BAD_SHAPES = [2.0, (2.0, 1), (2, 1.5), True, (True,), "2", None, (), (1, 1, 1, 1), -1, (2, -3), np.float32(2)]


@pytest.mark.parametrize("bad", BAD_SHAPES, ids=repr)
def test_bad_grid_or_block_refused_even_after_good_launches(runtime, bad):
    x = runtime.tensor(np.ones(64, np.float32))
    for _ in range(3):
        scale[2, 32](x, 2.0, 64)  # good launches first: nothing they cached may let a bad one pass
    with pytest.raises((TypeError, ValueError), match="grid"):
        scale[bad, 32](x, 2.0, 64)
    with pytest.raises((TypeError, ValueError), match="block"):
        scale[2, bad](x, 2.0, 64)
    np.testing.assert_array_equal(x.numpy(), 8.0)


def test_numpy_integers_are_accepted(runtime):
    x = runtime.tensor(np.ones(64, np.float32))
    scale[np.int64(2), (np.int32(32),)](x, 3.0, 64)
    np.testing.assert_array_equal(x.numpy(), 3.0)


BAD_ARGS = [
    ("x", lambda rt: (np.ones(64, np.float32), 2.0, 64), TypeError),
    ("x", lambda rt: (rt.zeros(64, "f16"), 2.0, 64), TypeError),
    ("k", lambda rt: (rt.zeros(64), "2", 64), TypeError),
    ("n", lambda rt: (rt.zeros(64), 2.0, 64.0), TypeError),
    ("n", lambda rt: (rt.zeros(64), 2.0, 1 << 40), ValueError),
    ("n", lambda rt: (rt.zeros(64), 2.0, True), TypeError),
]


@pytest.mark.parametrize("name, make, error", BAD_ARGS, ids=[f"{a[0]}-{i}" for i, a in enumerate(BAD_ARGS)])
def test_bad_arguments_refused_on_the_hundredth_launch(runtime, name, make, error):
    x = runtime.tensor(np.ones(64, np.float32))
    for _ in range(100):
        scale[2, 32](x, 1.0, 64)
    with pytest.raises(error, match=rf"\b{name}\b"):
        scale[2, 32](*make(runtime))
    np.testing.assert_array_equal(x.numpy(), 1.0)
