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
from .window import quotient, span


@kd.func
def plane_of(planes):
    """(this cube's plane, whether it exists): a 1-D grid wrapping from x into y."""
    p = kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()
    return p, p < planes


@kd.func
def zero_plane(acc, IS, base=0):
    """acc[base .. base + IS) = 0, across the cube's units (whole vectors, then one masked)."""
    BX = kd.cube_dim_x()
    full = IS - IS % BX
    at = kd.i64(base)  # (64-bit sums with the unit's position inline: the vectoriser sees consecutive lanes)
    for i0 in range(0, full, BX):
        acc[at + i0 + kd.unit_pos_x()] = kd.f32(0)
    if full + kd.unit_pos_x() < IS:
        acc[at + full + kd.unit_pos_x()] = kd.f32(0)
    kd.sync_cube()


@kd.func
def store_plane(acc, dx, base, IS, abase=0):
    """dx[base + i] = acc[abase + i] (cast to dx's dtype) for i in [0, IS), across the cube's
    units: whole vectors, unmasked (so that streaming stores apply), then one masked."""
    kd.sync_cube()
    BX = kd.cube_dim_x()
    full = IS - IS % BX
    at = kd.i64(abase)
    for i0 in range(0, full, BX):
        dx[base + i0 + kd.unit_pos_x()] = acc[at + i0 + kd.unit_pos_x()]
    if full + kd.unit_pos_x() < IS:
        dx[base + full + kd.unit_pos_x()] = acc[at + full + kd.unit_pos_x()]


@kd.func
def scatter_max_plane(grad, indices, acc, abase, ob, OS, IS):
    """acc[abase + j] += grad[ob + o] for each output o < OS (increasing) whose index j lies in
    [0, IS), by unit 0 (the plane's accumulator zeroed before, across the units)."""
    zero_plane(acc, IS, abase)
    if kd.unit_pos_x() == 0:
        for o in range(OS):
            j = indices[ob + o]
            if j >= 0 and j < IS:
                q = abase + j
                acc[q] = acc[q] + kd.f32(grad[ob + o])


@kd.kernel
def scatter_max_backward(grad: kd.Tensor, indices: kd.Tensor[kd.i64, 1], dx: kd.Tensor,
                         work: kd.Tensor[kd.f32, 1], stray: kd.Tensor[kd.i32, 1], planes: kd.i32, OS: kd.i32,
                         IS: kd.Const[int], GLOBAL: kd.Const[bool], IN_PLACE: kd.Const[bool],
                         STREAM: kd.Const[bool], GATED: kd.Const[bool]):
    """dx[p, j] = Σ grad[p, o] over the outputs o (increasing) whose index is j; IS = input
    elements a plane, OS = outputs a plane. Indices outside the plane are ignored (as the
    gather kernel ignores them). The F32 plane is summed in shared memory, a cube a plane;
    where it does not fit (GLOBAL), in global memory: with IN_PLACE in an F32 dx itself
    (passed as `work`, a cube a plane, not stored again), else in the cube's own plane of
    `work` ([cubes·IS]), each cube taking planes c, c + cubes, ... so that plane stays in
    its core's cache (a cube a core: bf16 [2, 32, 512²] 2×2, 5.2-6.6 -> 3.6-4.1 ms on the
    2-core dev box, against a workspace plane per plane). STREAM (shared memory only: a
    workspace is read again): dx is large (ops/streaming.py), its stores bypass the caches.
    GATED: only planes p with stray[p] != 0 (tiles.tiled_max_backward wrote the others)."""
    if STREAM:
        kd.streaming_stores()
    c, ok = plane_of(planes)
    if ok:
        if GLOBAL and IN_PLACE:
            if not GATED or stray[c] != 0:
                scatter_max_plane(grad, indices, work, kd.i64(c) * IS, kd.i64(c) * OS, OS, IS)
        elif GLOBAL:
            cubes = kd.cube_count_x() * kd.cube_count_y()
            at = kd.i64(c) * IS
            for p in range(c, planes, cubes):
                if not GATED or stray[p] != 0:
                    scatter_max_plane(grad, indices, work, at, kd.i64(p) * OS, OS, IS)
                    store_plane(work, dx, kd.i64(p) * IS, IS, at)
        elif not GATED or stray[c] != 0:
            acc = kd.shared(kd.f32, IS)
            scatter_max_plane(grad, indices, acc, 0, kd.i64(c) * OS, OS, IS)
            store_plane(acc, dx, kd.i64(c) * IS, IS)


@kd.kernel
def scatter_avg_backward(grad: kd.Tensor, dx: kd.Tensor, planes: kd.i32,
                         OD: kd.i32, OH: kd.i32, OW: kd.i32,
                         KD: kd.i32, KH: kd.i32, KW: kd.i32, SD: kd.i32, SH: kd.i32, SW: kd.i32,
                         PD: kd.i32, PH: kd.i32, PW: kd.i32, divisor: kd.i32,
                         ID: kd.Const[int], IH: kd.Const[int], IW: kd.Const[int],
                         ADAPTIVE: kd.Const[bool], WIDE: kd.Const[bool], DIMS: kd.Const[int],
                         INCLUDE_PAD: kd.Const[bool], STREAM: kd.Const[bool]):
    """dx[p] = Σ over outputs o of plane p (increasing) of grad[p, o] divided as the forward
    divided o's sum (forward.average), added to every input of o's window (dilation 1),
    plane p a cube: avg_pool and adaptive_avg_pool of 1 to 3 axes. STREAM: dx is large
    (ops/streaming.py), its stores bypass the caches."""
    if STREAM:
        kd.streaming_stores()
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


@kd.kernel
def rows_avg_backward(grad: kd.Tensor, dx: kd.Tensor, planes: kd.i32, divisor: kd.i32,
                      IH: kd.Const[int], IW: kd.Const[int], OH: kd.Const[int], OW: kd.Const[int],
                      KH: kd.Const[int], KW: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
                      PH: kd.Const[int], PW: kd.Const[int], INCLUDE_PAD: kd.Const[bool],
                      STREAM: kd.Const[bool]):
    """scatter_avg_backward for 1- and 2-D windows small enough to unroll (sizes compile-time),
    with the same sums in the same order, run across the cube's units: each output's share
    (its gradient divided as the forward divided) into shared memory, then for each output
    row oh and window row kh, each unit adds to its columns of input row oh·SH - PH + kh the
    shares of the outputs of row oh covering them, in increasing output order (per element,
    torch's order: rows of outputs in turn, columns increasing). A unit always owns the same
    columns, so nothing races; the plane sum is read and written as vectors. STREAM: dx is
    large (ops/streaming.py), its stores bypass the caches."""
    if STREAM:
        kd.streaming_stores()
    BX = kd.cube_dim_x()
    t = kd.unit_pos_x()
    p, ok = plane_of(planes)
    C = (KW + SW - 1) // SW          # outputs of a row whose windows may cover a column
    if ok:
        acc = kd.shared(kd.f32, IH * IW)
        share = kd.shared(kd.f32, OH * OW)
        ob = kd.i64(p) * (OH * OW)
        for o0 in range(0, OH * OW, BX):
            o = kd.min(o0 + t, OH * OW - 1)
            oh = quotient(o, OW, True)
            ow = o - oh * OW
            zh, ch = span(oh, IH, OH, KH, SH, PH, 1, False, False)
            zw, cw = span(ow, IW, OW, KW, SW, PW, 1, False, False)
            v = average(kd.f32(grad[ob + o]), 0, oh, ow, 1, ch, cw, 1, IH, IW, 1, KH, KW, 1, SH, SW, 0, PH, PW,
                        divisor, False, INCLUDE_PAD)
            if o0 + t < OH * OW:
                share[o] = v
        zero_plane(acc, IH * IW)
        for oh in range(OH):
            for kh in kd.unroll(KH):
                ih = oh * SH - PH + kh
                if ih >= 0 and ih < IH:
                    for i0 in range(0, IW, BX):
                        iw = kd.min(i0 + t, IW - 1)
                        last = (iw + PW) // SW
                        s = acc[ih * IW + iw]
                        for j in kd.unroll(C):
                            ow = last - (C - 1 - j)
                            fits = ow >= 0 and ow < OW and iw + PW - ow * SW < KW
                            s += kd.select(fits, share[oh * OW + kd.clamp(ow, 0, OW - 1)], kd.f32(0))
                        if i0 + t < IW:
                            acc[ih * IW + iw] = s
        store_plane(acc, dx, kd.i64(p) * (IH * IW), IH * IW)


@kd.kernel
def cols_avg_backward(grad: kd.Tensor, dx: kd.Tensor, planes: kd.i32, divisor: kd.i32,
                      IH: kd.Const[int], IW: kd.Const[int], OH: kd.Const[int], OW: kd.Const[int],
                      KH: kd.Const[int], KW: kd.Const[int], SH: kd.Const[int], SW: kd.Const[int],
                      PH: kd.Const[int], PW: kd.Const[int], INCLUDE_PAD: kd.Const[bool], BX: kd.Const[int],
                      STREAM: kd.Const[bool]):
    """rows_avg_backward with a unit an OUTPUT column: the same sums in the same order, every
    access to the plane sum a vector (no gathers). For output row oh and window row kh, the
    taps kw of unit ow's window land on columns ow·SW − PW + kw; they are taken in blocks of
    SW (kw = b·SW .. b·SW + SW − 1, taps past KW adding 0: complete interleave groups), the
    blocks b from the last to the first, a cube barrier between blocks: within a block the
    units touch distinct columns, and each column receives its outputs' shares in increasing
    ow (torch's order). The plane sum lives in rows of RS columns starting PW before column 0
    and reaching past the last unit's last tap; units past OW carry a share of 0, so no access
    is masked. STREAM: as rows_avg_backward's."""
    if STREAM:
        kd.streaming_stores()
    t = kd.unit_pos_x()
    p, ok = plane_of(planes)
    OWC = (OW + BX - 1) // BX * BX      # output columns covered by whole cubes of units
    B = (KW + SW - 1) // SW             # blocks of SW taps
    RS = (OWC + B) * SW                 # plane-sum row: columns -PW .. RS - PW - 1
    if ok:
        acc = kd.shared(kd.f32, IH * RS)
        share = kd.shared(kd.f32, OH * OWC)
        ob = kd.i64(p) * (OH * OW)
        for o0 in range(0, OH * OWC, BX):
            o = o0 + t
            sh = o // OWC
            sw = o - sh * OWC
            live = sw < OW and sh < OH
            owc = kd.min(sw, OW - 1)
            ohc = kd.min(sh, OH - 1)
            zh, ch = span(ohc, IH, OH, KH, SH, PH, 1, False, False)
            zw, cw = span(owc, IW, OW, KW, SW, PW, 1, False, False)
            v = average(kd.f32(grad[ob + ohc * OW + owc]), 0, ohc, owc, 1, ch, cw, 1, IH, IW, 1, KH, KW, 1, SH,
                        SW, 0, PH, PW, divisor, False, INCLUDE_PAD)
            if o < OH * OWC:
                share[o] = kd.select(live, v, kd.f32(0))
        zero_plane(acc, IH * RS)
        for oh in range(OH):
            for bb in kd.unroll(B):
                b = B - 1 - bb
                for kh in kd.unroll(KH):     # (distinct rows: one barrier for the window's rows)
                    ih = oh * SH - PH + kh
                    if ih >= 0 and ih < IH:
                        for ow0 in range(0, OWC, BX):
                            ow = ow0 + t
                            s = share[oh * OWC + ow]
                            at = ih * RS + (ow + b) * SW
                            for r in kd.unroll(SW):
                                if b * SW + r < KW:
                                    acc[at + r] = acc[at + r] + s
                                else:
                                    acc[at + r] = acc[at + r] + kd.f32(0)
                kd.sync_cube()
        base = kd.i64(p) * (IH * IW)
        for ih in range(IH):
            for i0 in range(0, IW, BX):
                iw = i0 + t
                if iw < IW:
                    dx[base + ih * IW + iw] = acc[ih * RS + PW + iw]
