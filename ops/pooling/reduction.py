"""Global average pooling (adaptive average pooling to one element a plane) as a row
reduction: BY rows a cube, each summed in F32 by BX units (vector loads where the row
allows) and reduced over its plane (BY > 1: one plane a row) or over the cube (BY == 1);
the grid wraps from x into y for many rows."""
import kerneldsl as kd


@kd.kernel
def plane_mean(x: kd.Tensor, out: kd.Tensor, rows: kd.i64, size: kd.i32, L: kd.Const[int]):
    """out[r] = mean of x[r·size : (r+1)·size]; rows start L-aligned when L > 1."""
    BX = kd.cube_dim_x()
    BY = kd.cube_dim_y()
    r = (kd.i64(kd.cube_pos_y()) * kd.cube_count_x() + kd.cube_pos_x()) * BY + kd.unit_pos_y()
    live = r < rows
    base = kd.select(live, r, rows - 1) * size
    t = kd.unit_pos_x()
    acc = kd.f32(0)
    if L == 1:
        for i in range(t, size, BX):
            acc += kd.f32(x[base + i])
    else:
        full = size - size % L
        for i in range(t * L, full, BX * L):
            acc += kd.vec_sum(kd.cast(kd.load_vec(x, base + i, L), kd.f32))
        for i in range(full + t, size, BX):
            acc += kd.f32(x[base + i])
    if BY == 1:
        s = kd.cube_sum(acc)
    else:
        s = kd.plane_sum(acc)
    if live and t == 0:
        out[r] = s / kd.f32(size)
