"""The grouped cube order the benchmark GEMMs share: consecutive cubes walk GROUP row tiles
down one column tile, then the next, so a column tile of B is reused from L2 by GROUP cubes."""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def grouped_tile(pid, M, N, BM, BN, GROUP):
    """(first row, first column) of cube `pid`'s BM x BN tile of an M x N product."""
    tiles_m = M // BM
    width = GROUP * (N // BN)
    first = (pid // width) * GROUP
    rows_here = kd.min(tiles_m - first, GROUP)
    return (first + (pid % width) % rows_here) * BM, ((pid % width) // rows_here) * BN
