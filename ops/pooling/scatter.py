"""Pooling backward passes for devices whose units are SIMD lanes (the cpu runtime), as torch's
CPU kernels compute them: a cube takes one plane, sums the gradient of every output in
increasing output order into an F32 copy of the plane in cube-shared memory (max pooling:
at the output's index; averages: over the output's window, divided as the forward divided),
then stores the plane cast once to its dtype. Deterministic (one unit scatters a plane, in
torch's order, so f32 results equal torch's bit for bit), no atomics. The gather kernels
(backward.py) take K taps an input element with run-time divisions; these take one
read-modify-write an index (a window's taps for averages), torch's work, and the zeroing and
the final store run across the cube's units (vectors). A unit a plane would serialise a GPU:
devices whose units are not SIMD lanes keep the gather kernels (tuning.scatter_backward)."""
import kerneldsl as kd

from .forward import average
from .window import span


@kd.func
def plane_of(planes):
    """(this cube's plane, whether it exists): a 1-D grid wrapping from x into y."""
    p = kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()
    return p, p < planes


@kd.func
def zero_plane(acc, IS):
    """acc[0 .. IS) = 0, across the cube's units."""
    BX = kd.cube_dim_x()
    for i0 in range(0, IS, BX):
        i = i0 + kd.unit_pos_x()
        if i < IS:
            acc[i] = kd.f32(0)
    kd.sync_cube()


@kd.func
def store_plane(acc, dx, base, IS):
    """dx[base + i] = acc[i] (cast to dx's dtype) for i in [0, IS), across the cube's units."""
    kd.sync_cube()
    BX = kd.cube_dim_x()
    for i0 in range(0, IS, BX):
        i = i0 + kd.unit_pos_x()
        if i < IS:
            dx[base + i] = acc[i]


@kd.kernel
def scatter_max_backward(grad: kd.Tensor, indices: kd.Tensor[kd.i64, 1], dx: kd.Tensor, planes: kd.i32,
                         OS: kd.i32, IS: kd.Const[int]):
    """dx[p, j] = Σ grad[p, o] over the outputs o (increasing) whose index is j, plane p a
    cube; IS = input elements a plane, OS = outputs a plane. Indices outside the plane
    are ignored (as the gather kernel ignores them)."""
    p, ok = plane_of(planes)
    if ok:
        acc = kd.shared(kd.f32, IS)
        zero_plane(acc, IS)
        if kd.unit_pos_x() == 0:
            ob = kd.i64(p) * OS
            for o in range(OS):
                j = indices[ob + o]
                if j >= 0 and j < IS:
                    q = kd.i32(j)
                    acc[q] = acc[q] + kd.f32(grad[ob + o])
        store_plane(acc, dx, kd.i64(p) * IS, IS)


@kd.kernel
def scatter_avg_backward(grad: kd.Tensor, dx: kd.Tensor, planes: kd.i32,
                         OD: kd.i32, OH: kd.i32, OW: kd.i32,
                         KD: kd.i32, KH: kd.i32, KW: kd.i32, SD: kd.i32, SH: kd.i32, SW: kd.i32,
                         PD: kd.i32, PH: kd.i32, PW: kd.i32, divisor: kd.i32,
                         ID: kd.Const[int], IH: kd.Const[int], IW: kd.Const[int],
                         ADAPTIVE: kd.Const[bool], WIDE: kd.Const[bool], DIMS: kd.Const[int],
                         INCLUDE_PAD: kd.Const[bool]):
    """dx[p] = Σ over outputs o of plane p (increasing) of grad[p, o] divided as the forward
    divided o's sum (forward.average), added to every input of o's window (dilation 1),
    plane p a cube: avg_pool and adaptive_avg_pool of 1 to 3 axes."""
    IS = ID * IH * IW
    p, ok = plane_of(planes)
    if ok:
        acc = kd.shared(kd.f32, IS)
        zero_plane(acc, IS)
        if kd.unit_pos_x() == 0:
            o = kd.i64(p) * (OD * OH * OW)
            for od in range(OD):
                zd, cd = span(od, ID, OD, KD, SD, PD, 1, ADAPTIVE, WIDE, DIMS == 3)
                for oh in range(OH):
                    zh, ch = span(oh, IH, OH, KH, SH, PH, 1, ADAPTIVE, WIDE, DIMS >= 2)
                    for ow in range(OW):
                        zw, cw = span(ow, IW, OW, KW, SW, PW, 1, ADAPTIVE, WIDE)
                        share = average(kd.f32(grad[o]), od, oh, ow, cd, ch, cw, ID, IH, IW, KD, KH, KW,
                                        SD, SH, SW, PD, PH, PW, divisor, ADAPTIVE, INCLUDE_PAD)
                        for a in range(cd):
                            for b in range(ch):
                                line = ((zd + a) * IH + zh + b) * IW + zw
                                for c in range(cw):
                                    acc[line + c] = acc[line + c] + share
                        o += 1
        store_plane(acc, dx, kd.i64(p) * IS, IS)
