"""1×1 convolutions as plain matrix products: with a kernel of size 1, stride 1, no padding and
one group, a channels-last forward is y[B·P, K] = x[B·P, C]·w[K, C]ᵀ (+ bias), P the pixels.
Where the device has bulk copies and native group products (Hopper) it runs the roles GEMM of
the MoE experts (ops/moe/gemm_roles.py) as one expert: whole 128-byte tiles by the copy engine,
a producer role and two consumer groups, where the implicit-GEMM kernels stage the same
operands unit by unit (H200, 256 → 1024 channels at 56², N 64: 1.02 ms there, the cuDNN time
0.21 ms; the figures of this path are in benchmarks/RESULTS.md, session 20)."""
from __future__ import annotations

import numpy as np

from ..moe import gemm_roles

# the tile leaves through shared memory and bulk stores (element stores of a 1024-column
# bf16 output wrote 0.58 TB/s on the H200: 0.883 ms at 256 → 1024 channels, 56², N 64)
STAGED = True
MAX_KEPT = 64  # (runtime, rows) pairs whose offsets are kept
_TILE_OFFSETS: dict = {}  # (runtime id, rows) -> (offsets, tile offsets) of one expert of `rows` rows


def _matrix_view(t, rows: int, cols: int):
    """The [rows, cols] row-major matrix t's memory forms, or None: every axis of t of size > 1
    must have the stride the packed layout gives it (size-1 axes may have any stride)."""
    shape, strides = t.shape, t.strides
    order = sorted((i for i in range(len(shape)) if shape[i] > 1), key=lambda i: -strides[i])
    expect = 1
    for i in reversed(order):
        if strides[i] != expect:
            return None
        expect *= shape[i]
    if expect != rows * cols:
        return None
    return t._view((rows, cols), (cols, 1))


def _channels_last_matrix(t5, rows: int, cols: int):
    """[B, C, D, H, W] view t5 whose channels are innermost and pixels packed → [B·P, C]."""
    if t5.shape[1] > 1 and t5.strides[1] != 1:
        return None
    return _matrix_view(t5, rows, cols)


def operands(p, y5) -> tuple | None:
    """(x [B·P, C], w [K, C], y [B·P, K]) 2-D views when p is a 1×1, stride-1, unpadded,
    ungrouped forward on channels-last tensors that the roles GEMM reads, else None."""
    g = p.geo
    if g.taps != 1 or g.groups != 1 or any(s != 1 for s in g.stride) or any(g.pad):
        return None
    rows = g.B * g.pixels
    x2 = _channels_last_matrix(p.x, rows, g.C)
    y2 = _channels_last_matrix(y5, rows, g.K)
    w2 = _matrix_view(p.w, g.K, g.C)
    if x2 is None or y2 is None or w2 is None or rows >= 1 << 31:
        return None
    if not gemm_roles.usable(p.runtime, (x2, w2, y2)):
        return None
    return x2, w2, y2


def _tiles(rt, rows: int, bm: int) -> tuple:
    """One expert's row offsets [0, rows] and tile offsets [0, tiles] as device tensors, made
    once per (runtime, rows): an upload in every call would stop the call being replayed."""
    key = (id(rt), rows, bm)
    got = _TILE_OFFSETS.get(key)
    if got is None or got[0].runtime is not rt:
        got = (rt.tensor(np.array([0, rows], np.uint32)), rt.tensor(np.array([0, -(-rows // bm)], np.uint32)))
        if len(_TILE_OFFSETS) >= MAX_KEPT:  # a model's shapes repeat: keep the cache small
            _TILE_OFFSETS.clear()
        _TILE_OFFSETS[key] = got
    return got


def run_forward(p, views: tuple, dummy) -> None:
    """y = x·wᵀ (+ bias) on the roles GEMM; `views` from operands()."""
    x2, w2, y2 = views
    rt = p.runtime
    bn = gemm_roles.tile_shape(rt.capabilities)[1]
    stages = gemm_roles.tile_shape(rt.capabilities)[2]
    rows, n = y2.shape
    offsets, tiles = _tiles(rt, rows, gemm_roles.BM)
    row_tiles, cols = -(-rows // gemm_roles.BM), -(-n // bn)
    bias = p.bias if p.bias is not None else dummy
    gemm_roles.grouped_gemm_roles[row_tiles * cols, gemm_roles.UNITS_PLANES * rt.plane_dim](
        x2, w2, w2, y2, offsets, tiles, 1, n, row_tiles, cols, False, bn, stages, gemm_roles.GM, bias,
        p.bias is not None, STAGED)
