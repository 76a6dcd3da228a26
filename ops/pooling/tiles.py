"""Max pooling's backward pass where the windows tile the input (each input element lies in
exactly one window: kernel = stride with no padding or dilation, or adaptive bins of one
size, every axis a whole number of windows), for devices whose units are SIMD lanes.

There a window's gradient needs no sum: the forward's index names one element of it, which
takes the output's gradient, and every other element is 0. So a unit takes an output, reads
its gradient and index once and writes its whole window; dx is written once, in order, by
vector stores (a window row's KW elements across the units are one interleaved store), with
no zeroed plane first and no read-modify-write an index, which is what the scatter
backward (scatter.py) pays per plane.

The shortcut holds only for indices inside their own windows, which the forward gives. An
index anywhere else (another window, outside the plane: a caller's own indices) marks its
plane in `stray`, and scatter.scatter_max_backward, launched after with the same `stray` as
its gate, redoes those planes (and only those) in torch's order, so every index is
honoured as before. Results are the scatter's bit for bit: a gradient lands as a sum into
zeros would leave it (−0 becomes +0)."""
import kerneldsl as kd


@kd.func
def window_gradient(grad, indices, dx, o, line, start, ow, IH, IW, KD, KH, KW):
    """dx over output o's window (its first element at `line` + ow·KW in dx, at `start` +
    ow·KW in its plane) = grad[o] at o's index, 0 elsewhere; 1 where the index lies outside
    the window (nothing of it then stands), else 0."""
    zero = kd.cast(0.0, dx.dtype)
    g = grad[o]
    g = kd.select(kd.f32(g) == 0.0, zero, g)  # (a sum into zeros: -0 becomes +0, as in the scatter)
    rel = indices[o] - (start + ow * KW)
    hit = False
    for a in kd.unroll(KD):
        for b in kd.unroll(KH):
            row = (a * IH + b) * IW
            for c in kd.unroll(KW):
                here = rel == row + c
                dx[line + ow * KW + row + c] = kd.select(here, g, zero)
                hit = hit or here
    return kd.select(hit, 0, 1)


@kd.kernel
def tiled_max_backward(grad: kd.Tensor, indices: kd.Tensor[kd.i64, 1], dx: kd.Tensor, stray: kd.Tensor[kd.i32, 1],
                       rows: kd.i32, OD: kd.i32, OH: kd.i32, OW: kd.i32, IH: kd.i32, IW: kd.i32,
                       KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int], BX: kd.Const[int],
                       STREAM: kd.Const[bool]):
    """dx [planes, OD·KD, IH, IW] of max pooling into windows KD×KH×KW that tile it (OH·KH =
    IH, OW·KW = IW) from grad and indices [planes, OD, OH, OW] (module docstring). A cube an
    output row (rows = planes·OD·OH; grid x wrapping into y), BX <= OW units across it in
    whole vectors (the last one ending at the row's end); stray[p] = 1 for a plane with an
    index outside its window (`stray` zeroed before). STREAM: dx is large (ops/streaming.py),
    its stores bypass the caches."""
    if STREAM:
        kd.streaming_stores()
    r = kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()
    if r < rows:
        slab = r // OH   # (plane, od)
        oh = r - slab * OH
        p = slab // OD
        line = (kd.i64(slab) * (KD * IH) + oh * KH) * IW   # the windows' first input row in dx
        start = line - kd.i64(p) * (OD * KD * IH) * IW     # ... and in their plane
        o = kd.i64(r) * OW
        full = OW - OW % BX
        missed = 0
        for i0 in range(0, full, BX):
            ow = i0 + kd.unit_pos_x()
            missed += window_gradient(grad, indices, dx, o + ow, line, start, ow, IH, IW, KD, KH, KW)
        if full < OW:   # the rest as the row's last BX outputs, some written again (the same values):
            ow = OW - BX + kd.unit_pos_x()   # whole vectors, where masked stores ran 7x slower (bf16)
            missed += window_gradient(grad, indices, dx, o + ow, line, start, ow, IH, IW, KD, KH, KW)
        if missed > 0:
            stray[p] = 1
