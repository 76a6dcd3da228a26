"""Global average pooling (adaptive average pooling to one element a plane) as a row
reduction: one cube a plane sums its row in F32 (vector loads where the row allows) and
reduces over the cube; the grid wraps from x into y for many planes."""
import kerneldsl as kd


@kd.kernel
def plane_mean(x: kd.Tensor, out: kd.Tensor, planes: kd.i64, size: kd.i32, BX: kd.Const[int], L: kd.Const[int]):
    """out[p] = mean of x[p·size : (p+1)·size]; rows start L-aligned when L > 1."""
    p = kd.i64(kd.cube_pos_y()) * kd.cube_count_x() + kd.cube_pos_x()
    live = p < planes
    base = kd.select(live, p, planes - 1) * size
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
    s = kd.cube_sum(acc)
    if live and t == 0:
        out[p] = s / kd.f32(size)
