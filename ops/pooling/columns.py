"""Adaptive max pooling into equal bins on devices whose units are SIMD lanes (the cpu
runtime), down the columns first: a cube a plane, a unit an INPUT column.

torch's answer for a bin is its first maximum in scan order (depth, height, width), or its
last NaN. That is a reduction whose operator (`merge`) needs no order: of two candidates
(value, flat position), a NaN beats a number, of two NaNs the later position wins, of two
numbers the larger, and of equal numbers the earlier position. So a bin can be reduced down
each of its columns first, then across them:
- each unit folds its column's taps of a bin row by row (forward.fold_tap, torch's rule),
  the cube's units reading each input row as consecutive elements (vector loads, no
  gathers) into a per-column (maximum, position) in cube-shared memory;
- after a barrier, a unit an output merges its bin's KW column results.
bins.pool_bins reads the same rows in the same order but folds every tap in scalar code;
this form is several times faster (RESULTS.md, session 31). Positions are F32 (exact below
2^24, tuning.BIN_F32_POSITIONS), which keeps the selects in vector registers."""
import kerneldsl as kd

from .forward import fold_tap
from .scatter import plane_of


@kd.func
def merge(m, q, best, where):
    """(best, where) merged with the candidate (m, q) by torch's rule for one bin (see the
    module docstring): commutative, so candidates may come in any order."""
    take = (kd.isnan(m) and (not kd.isnan(best) or q > where)) or m > best or (m == best and q < where)
    return kd.select(take, m, best), kd.select(take, q, where)


@kd.kernel
def max_bins_columns(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], planes: kd.i32,
                     OD: kd.i32, OH: kd.i32, IH: kd.i32,
                     IW: kd.Const[int], OW: kd.Const[int], KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int],
                     R: kd.Const[int], STEP: kd.Const[int], LOOPED: kd.Const[bool]):
    """out and indices (flat positions in a plane) of adaptive max pooling of
    x [planes, OD·KD, IH, IW] into [planes, OD, OH, OW], each bin KD×KH×KW (IH = OH·KH,
    IW = OW·KW; a plane below 2^24 elements). A cube a plane (grid y wrapping into x); R
    output rows (od, oh) a pass, their column results in shared memory; a column's KD·KH
    taps STEP at a time (unrolled), STEP dividing KD·KH; a bin's columns merged unrolled or,
    LOOPED, in a loop (few bins a pass: the loop over the units then stays scalar, where
    vectorised every masked unit would still issue its merge's gathers). Launched with IW
    units a cube."""
    t = kd.unit_pos_x()
    BX = kd.cube_dim_x()
    p, ok = plane_of(planes)
    if ok:
        best = kd.shared(kd.f32, R * IW)
        where = kd.shared(kd.f32, R * IW)
        rows = OD * OH
        base = kd.i64(p) * (OD * KD) * IH * IW
        first = kd.i64(p) * rows * OW
        for r0 in range(0, rows, R):
            for rr in range(R):
                r = r0 + rr
                if r < rows:
                    od = r // OH
                    oh = r - od * OH
                    m = kd.f32(-kd.inf)
                    q = kd.f32((od * KD * IH + oh * KH) * IW + t)
                    for j0 in range(0, KD * KH, STEP):   # (uniform: the units' loop stays innermost)
                        w = kd.unit_pos_x()   # (read here: from before the loop it is a per-unit array)
                        for jj in kd.unroll(STEP):
                            a = (j0 + jj) // KH
                            row = ((od * KD + a) * IH + oh * KH + (j0 + jj - a * KH)) * IW
                            m, q, _ = fold_tap(kd.f32(x[(base + row) + kd.i64(w)]), True, kd.f32(row + w), m, q,
                                               kd.f32(0), True)
                    best[rr * IW + t] = m
                    where[rr * IW + t] = q
            kd.sync_cube()
            for o0 in range(0, R * OW, BX):
                o = o0 + t
                ro = o // OW    # (not `rr`: that name must stay uniform, for the loops above)
                ow = o - ro * OW
                if o < R * OW and r0 + ro < rows:
                    at = ro * IW + ow * KW
                    m = best[at]
                    q = where[at]
                    if LOOPED:   # (a loop: the units' loop around it stays scalar, see the docstring)
                        for c in range(1, KW):
                            m, q = merge(best[at + c], where[at + c], m, q)
                    else:
                        for c in kd.unroll(1, KW):
                            m, q = merge(best[at + c], where[at + c], m, q)
                    e = first + (r0 + ro) * OW + ow
                    out[e] = m
                    indices[e] = kd.i64(q)
            kd.sync_cube()
