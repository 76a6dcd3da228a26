"""Global average pooling (adaptive average pooling to one element a plane) as a row
reduction: each row summed in F32 by SEG units (vector loads where the row allows), then
reduced over the cube (SEG == 0: one cube a row, for long rows), over the plane (SEG ==
PLANE_DIM) or by a shuffle ladder within aligned groups of SEG lanes (short rows: several
rows a plane, so no lane idles on a row of 49 elements); the grid wraps from x into y for
many rows."""
import kerneldsl as kd


@kd.kernel
def plane_mean(x: kd.Tensor, out: kd.Tensor, rows: kd.i64, size: kd.i32, L: kd.Const[int], SEG: kd.Const[int]):
    """out[r] = mean of x[r·size : (r+1)·size]; rows start L-aligned when L > 1. The cube is
    (units a row, rows a cube): (SEG, BY) or, for SEG == 0, (BX, 1)."""
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
    s = acc
    if SEG == 0:
        s = kd.cube_sum(acc)
    elif SEG == kd.PLANE_DIM:
        s = kd.plane_sum(acc)
    else:
        for k in kd.unroll(1, 8):  # xor masks SEG/2, SEG/4, ..., 1 (compile-time ifs)
            if (SEG >> k) > 0:
                s += kd.plane_shuffle_xor(s, SEG >> k)
    if live and t == 0:
        out[r] = s / kd.f32(size)


@kd.kernel
def lane_row_mean(x: kd.Tensor, out: kd.Tensor, rows: kd.i32, size: kd.i32):
    """out[r] = mean of x[r·size : (r+1)·size] for devices whose units are SIMD lanes: a cube a
    row, its units along the row, every loop uniform (the cpu runtime runs each chunk as one
    vector load), four partial sums a unit (independent chains: a unit's sum lives in memory
    between chunks on the cpu runtime), the cube's sums reduced by kd.cube_sum."""
    t = kd.unit_pos_x()
    BX = kd.cube_dim_x()
    r = kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()
    live = r < rows
    base = kd.i64(kd.min(r, rows - 1)) * size
    full = size - size % (4 * BX)
    a0 = kd.f32(0)
    a1 = kd.f32(0)
    a2 = kd.f32(0)
    a3 = kd.f32(0)
    for i0 in range(0, full, 4 * BX):
        a0 += kd.f32(x[base + i0 + t])
        a1 += kd.f32(x[base + i0 + BX + t])
        a2 += kd.f32(x[base + i0 + 2 * BX + t])
        a3 += kd.f32(x[base + i0 + 3 * BX + t])
    for i0 in range(full, size, BX):
        if i0 + t < size:
            a0 += kd.f32(x[base + i0 + t])
    s = kd.cube_sum((a0 + a1) + (a2 + a3))
    if live and t == 0:
        out[r] = s / kd.f32(size)


@kd.kernel
def vector_row_mean(x: kd.Tensor, out: kd.Tensor, rows: kd.i32, size: kd.i32, SIZE: kd.Const[int],
                    RPC: kd.Const[int], L: kd.Const[int], A: kd.Const[int]):
    """out[r] = mean of x[r·size : (r+1)·size] on devices whose units are SIMD lanes: a
    one-unit cube takes RPC consecutive rows, each row read as whole vectors of L elements
    (contiguous loads; rows need no alignment there) added lane-wise, the lanes summed, then
    the row's last elements one by one. Short rows (SIZE = size, compile-time) are unrolled
    into one chain of vectors; longer ones (SIZE 0) loop over A vectors a step into A
    partial sums. Units across rows made each tap a strided load, which LLVM makes a gather,
    and a cube a row (lane_row_mean) pays a reduction over the cube a row."""
    r0 = (kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()) * RPC
    for k in range(RPC):
        r = kd.min(r0 + k, rows - 1)
        s = kd.f32(0)
        if SIZE > 0:
            base = kd.i64(r) * SIZE
            if SIZE >= L:
                acc = kd.cast(kd.load_vec(x, base, L), kd.f32)
                for j in kd.unroll(1, SIZE // L):
                    acc = acc + kd.cast(kd.load_vec(x, base + j * L, L), kd.f32)
                s = kd.vec_sum(acc)
            for j in kd.unroll(SIZE - SIZE % L, SIZE):
                s += kd.f32(x[base + j])
        else:
            base = kd.i64(r) * size
            accs = ()
            for a in kd.unroll(A):
                accs = accs + (kd.splat(kd.f32(0), L),)
            full = size - size % (A * L)
            for i in range(0, full, A * L):
                step = ()
                for a in kd.unroll(A):
                    step = step + (accs[a] + kd.cast(kd.load_vec(x, base + i + a * L, L), kd.f32),)
                accs = step
            acc = accs[0]
            for a in kd.unroll(1, A):
                acc = acc + accs[a]
            s = kd.vec_sum(acc)
            for i in range(full, size):
                s += kd.f32(x[base + i])
        if r0 + k < rows:
            out[r] = s / kd.f32(size)


@kd.kernel
def spread_mean(grad: kd.Tensor, dx: kd.Tensor, rows: kd.i32, ID: kd.i32, IH: kd.i32, IW: kd.i32,
                STREAM: kd.Const[bool]):
    """Global average pooling's backward pass, dx[r, i] = grad[r] / (ID·IH·IW) for every
    element i of row r, one f32 division as torch's (its global pooling is a mean, for 1 to 3
    axes; dividing by each size in turn differs in the last bit for some values): a cube a
    row, its units along it (a vector store a chunk on the cpu runtime). STREAM: dx is large
    (ops/streaming.py), its stores bypass the caches."""
    if STREAM:
        kd.streaming_stores()
    t = kd.unit_pos_x()
    BX = kd.cube_dim_x()
    r = kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()
    live = r < rows
    row = kd.min(r, rows - 1)
    size = ID * IH * IW
    base = kd.i64(row) * size
    v = kd.f32(grad[row]) / kd.f32(size)
    full = kd.select(live, size - size % BX, 0)
    for i0 in range(0, full, BX):
        dx[base + i0 + t] = v
    if live and full + t < size:
        dx[base + full + t] = v

