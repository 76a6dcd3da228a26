"""8 × 8 blocks of values as vectors, for the kernels of devices whose units are SIMD lanes
(lanes_last.to_rows, lanes_scatter.scatter_planes): a block read as 8 vectors along one axis
leaves as 8 vectors along the other."""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def transpose8(vs):
    """The transpose of 8 vectors of 8 lanes: vector j of the result holds lane j of each of
    vs, in order (kd.make_vec; on the cpu LLVM turns it into shuffles)."""
    out = ()
    for j in kd.unroll(8):
        out = out + (kd.make_vec(vs[0][j], vs[1][j], vs[2][j], vs[3][j], vs[4][j], vs[5][j], vs[6][j], vs[7][j]),)
    return out
