"""Adaptive pooling into equal bins on devices whose units are SIMD lanes (the cpu runtime),
for output rows too narrow to fill a vector: a cube of ONE unit a plane, so the code stays
scalar and each output row's windows are summed (or maxed) side by side.

Across lanes (lanes.pool_plane_lanes) every tap of these windows is a gather: 8-lane
gathers cost more than the scalar loads they replace, and each window's sum is one chain
of dependent adds. Here a unit walks its plane's output rows; for each it keeps the OW
windows' running sums (or maxima) in registers and reads every input row of the bins once,
in address order, adding each element to its window's sum: OW independent chains, plain
loads. Each window still takes its taps in torch's order (depth, then height, then width,
fold_tap's rule for the max), and sums are divided as adaptive pooling divides them, so the
results are bit for bit those of the other forms (and torch's). 2-core Zen 4 box, f32
[64, 256, 56²] to 7×7: 5.9 ms against 40.5 ms across lanes (torch 13.1 ms). Compiled with
kd.scalar_statements() for F32 inputs: LLVM's SLP vectoriser packed the OW chains through
shuffles of their strided loads, which was slower than the scalar chains (2-core Emerald
Rapids box, the same call: 5.7-7.9 ms packed, 4.4-4.5 scalar; torch 10.2-13.5; even on Zen
4). 16-bit inputs are packed (PACKED): there the scalar chains' conversions cost more than
the shuffles (tuning.bin_packing)."""
import kerneldsl as kd

from .forward import fold_tap


@kd.func
def position(v, F32):
    """An in-plane position as the max's running `where` holds it: F32 (exact below 2^24; the
    max's select then stays in vector registers, twice as fast as an I64 one), else I64."""
    if F32:
        p = kd.f32(v)
    else:
        p = kd.i64(v)
    return p


@kd.kernel
def pool_bins(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], planes: kd.i32,
              OD: kd.i32, OH: kd.i32, IH: kd.i32, IW: kd.i32,
              OW: kd.Const[int], KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int],
              MAX: kd.Const[bool], INDICES: kd.Const[bool], F32_POS: kd.Const[bool], ROW: kd.Const[int],
              PACKED: kd.Const[bool]):
    """out (and for max with INDICES, indices: flat positions in a plane) of adaptive max or
    average pooling of x [planes, OD·KD, IH, IW] into [planes, OD, OH, OW], each bin KD×KH×KW
    (IH = OH·KH, IW = OW·KW). Launched with one-unit cubes, a cube a plane (grid y wrapping
    into x). F32_POS: positions in a plane below 2^24, tracked as F32 (`position`). ROW (= IW,
    or 0): each input row is first widened to F32 in shared memory by one loop the compiler
    vectorises, and the chains read it there (f16 maxima: converted in the chains, their taps
    took four times as long, tuning.bin_row_widening). PACKED: the chains may be packed into
    vectors by the compiler (else kd.scalar_statements())."""
    if not PACKED:
        kd.scalar_statements()  # (f32: packed, the OW chains' strided loads became shuffles: 1.6x slower)
    wide = kd.shared(kd.f32, max(ROW, 1))
    p = kd.cube_pos_y() * kd.cube_count_x() + kd.cube_pos_x()
    if p < planes:
        base = kd.i64(p) * (OD * KD) * IH * IW
        first = kd.i64(p) * OD * OH * OW
        for od in range(OD):
            for oh in range(OH):
                bests = ()
                wheres = ()
                sums = ()
                for ow in kd.unroll(OW):
                    bests = bests + (kd.f32(-kd.inf),)
                    wheres = wheres + (position((od * KD * IH + oh * KH) * IW + ow * KW, F32_POS),)
                    sums = sums + (kd.f32(0),)
                for a in kd.unroll(KD):
                    for b in kd.unroll(KH):
                        row = ((od * KD + a) * IH + oh * KH + b) * IW
                        at = base + row
                        row_pos = position(row, F32_POS)
                        if ROW:  # (to IW, an argument: a loop of ROW would be unrolled and folded into the chains)
                            for i in range(kd.min(IW, ROW)):
                                wide[i] = kd.f32(x[at + i])
                        nb = ()
                        nw = ()
                        ns = ()
                        for ow in kd.unroll(OW):
                            best = bests[ow]
                            where = wheres[ow]
                            acc = sums[ow]
                            for c in kd.unroll(KW):
                                if ROW:
                                    v = wide[ow * KW + c]
                                else:
                                    v = kd.f32(x[at + (ow * KW + c)])
                                best, where, acc = fold_tap(v, True, row_pos + (ow * KW + c), best, where, acc, MAX)
                            nb = nb + (best,)
                            nw = nw + (where,)
                            ns = ns + (acc,)
                        bests = nb
                        wheres = nw
                        sums = ns
                e = first + (od * OH + oh) * OW
                for ow in kd.unroll(OW):
                    if MAX:
                        out[e + ow] = bests[ow]
                        if INDICES:
                            indices[e + ow] = kd.i64(wheres[ow])
                    else:
                        out[e + ow] = sums[ow] / kd.f32(KD) / kd.f32(KH) / kd.f32(KW)
