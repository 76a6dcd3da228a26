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
- after a barrier, each bin's column results are merged in halves across the cube.
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


@kd.func
def merge_in_halves(best, where, N, KW):
    """Every group of KW consecutive (best, where) slots of the N in shared memory merged into
    its first, across the cube's units: n slots a group become ceil(n/2), slot c taking slot
    c + ceil(n/2), a barrier a level. Each level reads and writes consecutive slots (vectors
    where units are SIMD lanes). A unit merging a whole group instead makes KW - 1 gathers
    across the units, and where a pass has few groups its masked units still issue theirs:
    a global max of [64, 256, 56²] took 22-23 ms that way, 8-9 in halves (RESULTS.md)."""
    for level in kd.unroll(7):   # (KW <= 64 = 2^6: at most 6 levels do anything)
        n = (KW + (1 << level) - 1) >> level
        if n > 1:
            h = (n + 1) // 2
            for i0 in range(0, N, kd.cube_dim_x()):
                i = i0 + kd.unit_pos_x()
                c = i % KW
                if i < N and c < n - h:
                    m, q = merge(best[i + h], where[i + h], best[i], where[i])
                    best[i] = m
                    where[i] = q
            kd.sync_cube()


@kd.kernel
def max_bins_columns(x: kd.Tensor, out: kd.Tensor, indices: kd.Tensor[kd.i64, 1], planes: kd.i32,
                     OD: kd.i32, OH: kd.i32, IH: kd.i32,
                     IW: kd.Const[int], OW: kd.Const[int], KD: kd.Const[int], KH: kd.Const[int], KW: kd.Const[int],
                     R: kd.Const[int], STEP: kd.Const[int]):
    """out and indices (flat positions in a plane) of adaptive max pooling of
    x [planes, OD·KD, IH, IW] into [planes, OD, OH, OW], each bin KD×KH×KW (IH = OH·KH,
    IW = OW·KW; a plane below 2^24 elements). A cube a plane (grid y wrapping into x); R
    output rows (od, oh) a pass, their column results in shared memory; a column's KD·KH
    taps STEP at a time (unrolled), STEP dividing KD·KH; the bins' columns merged in halves
    (merge_in_halves). Launched with IW units a cube."""
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
            merge_in_halves(best, where, R * IW, KW)
            for o0 in range(0, R * OW, BX):
                o = o0 + t
                if o < R * OW and r0 * OW + o < rows * OW:
                    e = first + r0 * OW + o
                    out[e] = best[o * KW]
                    indices[e] = kd.i64(where[o * KW])
            kd.sync_cube()
