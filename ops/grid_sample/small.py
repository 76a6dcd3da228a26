"""The backward of small grid_sample calls in one launch: the host time of the bucketed and
fixed-point forms (about ten launches and their buffers) is most of a small call's time.

The first cubes take sample.point_gradient's grid gradient, a unit a grid point (no
scatter); the rest take the input gradient, a unit an input element (n, c, z, y, x): it
walks every grid point of its sample in order and adds out_grad times each tap weight that
lands on it (the contributions sample.py's scatter adds, summed in F32 in point and tap
order, so the result does not depend on the order the units run in). Its work grows as
elements times points, so tuning.small_backward keeps it to small calls."""
from __future__ import annotations

import kerneldsl as kd

from .sample import point_gradient, point_taps, tap_layout


@kd.func
def element_gradient(grid, g, n, c, z, y, w, size_d, size_h, size_w, pad_mode, align, MODE, DIMS):
    """Σ over the sample's grid points (in order: no divisions) and their taps on input element
    (z, y, w) of channel c: out_grad × the tap's weight (NaN or ±inf as the float sum gives)."""
    acc = kd.f32(0)
    for od in range(g.shape[2]):
        for oh in range(g.shape[3]):
            for ow in range(g.shape[4]):
                t = point_taps(grid, n, od, oh, ow, size_d, size_h, size_w, MODE, pad_mode, align, DIMS)
                TZ, TX, Z, Y, X = tap_layout(len(t), DIMS)
                go = kd.f32(g[n, c, od, oh, ow])
                for a in kd.unroll(TZ):
                    for b in kd.unroll(TX):
                        for k in kd.unroll(TX):
                            hit = t[Z + 3 * TZ + a] and t[Y + 3 * TX + b] and t[X + 3 * TX + k] and \
                                t[Z + a] == z and t[Y + b] == y and t[X + k] == w
                            if hit:
                                acc += t[Z + TZ + a] * t[Y + TX + b] * t[X + TX + k] * go
    return acc


@kd.kernel
def small_backward(x: kd.Tensor, grid: kd.Tensor, g: kd.Tensor, grad_grid: kd.Tensor, dx: kd.Tensor,
                   total: kd.i32, pad_mode: kd.i32, align: kd.i32, MODE: kd.Const[str], DIMS: kd.Const[int],
                   BX: kd.Const[int]):
    """grad_grid (cubes 0 .. ⌈total / BX⌉ − 1, a unit a grid point; `total` points in all)
    and dx (the next cubes, a unit an element of x) of one grid_sample backward; tensors 5-D
    as in sample.py."""
    point_cubes = (total + BX - 1) // BX
    cube = kd.cube_pos_x()
    if cube < point_cubes:
        e = cube * BX + kd.unit_pos_x()
        if e < total:
            point_gradient(x, grid, g, grad_grid, dx, dx, dx, kd.f64(0), e, pad_mode, align, MODE, DIMS, False)
    else:
        i = kd.i64(cube - point_cubes) * BX + kd.unit_pos_x()
        size_d = x.shape[2]
        size_h = x.shape[3]
        size_w = x.shape[4]
        if i < kd.i64(x.shape[0]) * x.shape[1] * size_d * size_h * size_w:
            w = kd.i32(i % size_w)
            r = i // size_w
            y = kd.i32(r % size_h)
            r = r // size_h
            z = kd.i32(r % size_d)
            r = r // size_d
            c = kd.i32(r % x.shape[1])
            n = kd.i32(r // x.shape[1])
            dx[n, c, z, y, w] = element_gradient(grid, g, n, c, z, y, w, size_d, size_h, size_w, pad_mode, align,
                                                 MODE, DIMS)
