"""The input gradient of grid_sample's backward on devices whose units are SIMD lanes (the
cpu runtime), 8 planes at once: scatter_planes, chosen over lanes.scatter_input_grad where
the channels are whole groups of 8 (tuning.lane_plan's `vector_planes`).

lanes.scatter_input_grad has one unit add every grid point's contributions, point by point
and tap by tap in order, into F32 copies of PLANES planes: scalar read-modify-writes, one a
plane, tap and point. Here a one-unit cube keeps its 8 planes interleaved, acc[pixel, plane]
(F32, in a scratch tensor), so a point's tap is one 8-wide vector read-modify-write: the
point's 8 out_grad values as a vector (8 points' worth loaded along the planes and
transposed with kd.make_vec), times the tap's weight, added to the tap's pixel. Each
element still receives its terms in point order, then tap order, each a product then a
sum (lanes.py's bits). The planes then leave transposed back, 8 pixels × 8 planes a step.

VEC (the host checked that out_grad's and dx's planes start at multiples of 8 elements)
takes whole vectors along the points and pixels; else those are read and written element
by element (what the tests force on GPUs, whose vector accesses must be aligned)."""
from __future__ import annotations

import kerneldsl as kd

from .vector_blocks import transpose8


@kd.func
def point_vector(g, p0, points, j):
    """The 8 planes p0 .. p0 + 7 of out_grad at point j, as an F32 vector."""
    return kd.make_vec(kd.f32(g[kd.i64(p0) * points + j]), kd.f32(g[kd.i64(p0 + 1) * points + j]),
                       kd.f32(g[kd.i64(p0 + 2) * points + j]), kd.f32(g[kd.i64(p0 + 3) * points + j]),
                       kd.f32(g[kd.i64(p0 + 4) * points + j]), kd.f32(g[kd.i64(p0 + 5) * points + j]),
                       kd.f32(g[kd.i64(p0 + 6) * points + j]), kd.f32(g[kd.i64(p0 + 7) * points + j]))


@kd.func
def add_point(acc, first, tap_at, tap_w, e, gv, TAPS):
    """acc's 8 planes at each tap's pixel of the point whose taps start at e, plus the tap's
    weight × gv, taps in order (an outside tap's pixel is the slot past the plane)."""
    for k in kd.unroll(TAPS):
        at = first + kd.i64(tap_at[e + k]) * 8
        kd.store_vec(acc, at, kd.load_vec(acc, at, 8) + kd.splat(tap_w[e + k], 8) * gv)


@kd.kernel
def scatter_planes(g: kd.Tensor, tap_at: kd.Tensor[kd.i32, 1], tap_w: kd.Tensor[kd.f32, 1],
                   acc: kd.Tensor[kd.f32, 1], dx: kd.Tensor, channels: kd.i32, points: kd.i32, plane: kd.i32,
                   TAPS: kd.Const[int], VEC: kd.Const[bool]):
    """dx[p] = Σ over the grid points of plane p's batch item (in order) and their taps (in
    order) of g[p, point] × the tap's weight (lanes.grid_grad_lanes' tap_at, tap_w): cube x
    takes planes 8x .. 8x + 7 of one batch item, summed in acc [pixel, plane] (the cube's
    (plane + 1) × 8 F32 from (plane + 1) · 8x on; pixel `plane`: outside taps, never read)."""
    p0 = kd.cube_pos_x() * 8
    n = p0 // channels
    first = kd.i64(kd.cube_pos_x()) * (plane + 1) * 8
    for i in range(plane + 1):
        kd.store_vec(acc, first + kd.i64(i) * 8, kd.splat(kd.f32(0), 8))
    e0 = kd.i64(n) * points * TAPS
    whole = points - points % 8 if VEC else 0
    for j0 in range(0, whole, 8):   # 8 points: their out_grad read along the points, transposed
        gs = ()
        for q in kd.unroll(8):
            gs = gs + (kd.cast(kd.load_vec(g, kd.i64(p0 + q) * points + j0, 8), kd.f32),)
        gvs = transpose8(gs)
        for i in kd.unroll(8):
            add_point(acc, first, tap_at, tap_w, e0 + kd.i64(j0 + i) * TAPS, gvs[i], TAPS)
    for j in range(whole, points):
        add_point(acc, first, tap_at, tap_w, e0 + kd.i64(j) * TAPS, point_vector(g, p0, points, j), TAPS)
    pixels = plane - plane % 8 if VEC else 0
    for s0 in range(0, pixels, 8):   # 8 pixels × 8 planes, transposed back
        vs = ()
        for i in kd.unroll(8):
            vs = vs + (kd.load_vec(acc, first + kd.i64(s0 + i) * 8, 8),)
        planes = transpose8(vs)
        for q in kd.unroll(8):
            kd.store_vec(dx, kd.i64(p0 + q) * plane + s0, planes[q])
    for s in range(pixels, plane):
        for q in kd.unroll(8):
            dx[kd.i64(p0 + q) * plane + s] = acc[first + kd.i64(s) * 8 + q]
