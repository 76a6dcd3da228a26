"""Cube and unit positions in 1-3 dimensions, plane and lane ids."""
import numpy as np
import pytest

import kerneldsl as kd

pytestmark = [pytest.mark.feature("positions"), pytest.mark.interpreter]


@kd.kernel
def where_am_i(out: kd.Tensor[kd.i32, 2]):
    cx, cy, cz = kd.cube_pos_x(), kd.cube_pos_y(), kd.cube_pos_z()
    ux, uy, uz = kd.unit_pos_x(), kd.unit_pos_y(), kd.unit_pos_z()
    gx, gy = kd.cube_count_x(), kd.cube_count_y()
    dx, dy, dz = kd.cube_dim_x(), kd.cube_dim_y(), kd.cube_dim_z()
    cube = cx + gx * (cy + gy * cz)
    unit = kd.unit_pos()
    row = cube * kd.cube_units() + unit
    out[row, 0] = cx
    out[row, 1] = cy
    out[row, 2] = cz
    out[row, 3] = ux
    out[row, 4] = uy
    out[row, 5] = uz
    out[row, 6] = unit - (ux + dx * (uy + dy * uz))
    out[row, 7] = kd.plane_pos()
    out[row, 8] = kd.lane_pos()
    out[row, 9] = kd.cube_count_z() * 1000 + dz * 100 + kd.plane_count()


@pytest.mark.parametrize("grid,block", [((3,), (5,)), ((2, 3), (4, 3)), ((2, 1, 2), (3, 2, 2)), ((1,), (1,)),
                                         ((2,), (64,))])
def test_positions(runtime, grid, block):
    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    units = b[0] * b[1] * b[2]
    cubes = g[0] * g[1] * g[2]
    out = runtime.zeros((cubes * units, 10), "i32")
    where_am_i[grid, block](out)
    P = runtime.plane_dim
    ref = np.zeros_like(out.numpy())
    for cz in range(g[2]):
        for cy in range(g[1]):
            for cx in range(g[0]):
                cube = cx + g[0] * (cy + g[1] * cz)
                for uz in range(b[2]):
                    for uy in range(b[1]):
                        for ux in range(b[0]):
                            u = ux + b[0] * (uy + b[1] * uz)
                            ref[cube * units + u] = [cx, cy, cz, ux, uy, uz, 0, u // P, u % P,
                                                     g[2] * 1000 + b[2] * 100 + -(-units // P)]
    np.testing.assert_array_equal(out.numpy(), ref)
