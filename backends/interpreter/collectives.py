"""What a plane computes when all its lanes reach a plane operation or a fragment operation:
the semantics of the compiled runtimes' emulations (tests/reference/planes.py for plane
operations; backends/clike/fragments.py for fragments: a plane's tile is row-major f32, element
e handled by lane e % lanes), computed once for the plane."""
from __future__ import annotations

import numpy as np

from kerneldsl import ir, tile_layout

from .numerics import math_max, math_min


def plane_op(s: ir.PlaneOp, values: list, args: list, plane_dim: int) -> list:
    """The result of each lane (in lane order) of plane operation `s` given each lane's
    value and argument."""
    n = len(values)
    op = s.op
    if op == "elect":
        return [np.bool_(lane == 0) for lane in range(n)]
    t = s.dtype.np.type
    if op in ir.PLANE_REDUCE_OPS:
        acc = values[0]
        for v in values[1:]:
            acc = _combine(op, acc, v)
        return [t(acc)] * n
    if op in ("inclusive_sum", "exclusive_sum"):
        out, acc = [], t(0)
        for v in values:
            if op == "exclusive_sum":
                out.append(acc)
            acc = t(acc + v)
            if op == "inclusive_sum":
                out.append(acc)
        return out
    if op == "ballot":
        bits = sum(1 << lane for lane, v in enumerate(values) if v)
        return [np.uint32(bits)] * n
    if op in ("all", "any"):
        r = np.bool_(all(bool(v) for v in values) if op == "all" else any(bool(v) for v in values))
        return [r] * n
    out = []
    for lane, a in enumerate(args):
        a = int(a)
        if op == "broadcast":
            src = a if 0 <= a < n else 0
        elif op == "shuffle":
            src = a % plane_dim
            src = src if src < n else lane
        else:  # shuffle_xor
            x = a ^ lane
            src = x if 0 <= x < n else lane
        out.append(values[src])
    return out


def _combine(op, a, b):
    if op == "sum":
        return a + b
    if op == "prod":
        return a * b
    return math_min(a, b) if op == "min" else math_max(a, b)


class FragmentOps:
    """Fragment operations and group products of one plane (its lanes' units `units`), on the
    plane's tiles `tiles` (name -> f32 array, row-major); `memory` maps tensor and shared
    array names to their accessors."""

    def __init__(self, kir: ir.KernelIR, memory: dict):
        self.k = kir
        self.memory = memory

    def run(self, s, plane: int, units: list, tiles: dict, operands: list, line: int):
        if isinstance(s, ir.FragFill):
            tile = tiles[s.frag]
            vals = np.array([np.float32(o[0]) for o in operands], np.float32)
            tile[:] = vals[np.arange(len(tile)) % len(units)]
        elif isinstance(s, (ir.FragLoad, ir.FragStore)):
            self._load_store(s, units, tiles, operands, line)
        elif isinstance(s, ir.FragMma):
            ft = self.k.frags[s.acc]
            a = tiles[s.a].reshape(ft.m, ft.k)
            b = tiles[s.b].reshape(ft.k, ft.n)
            tiles[s.acc][:] = self._product(tiles[s.acc].reshape(ft.m, ft.n), a, b).reshape(-1)
        elif isinstance(s, ir.GroupMma):
            self._group_mma(s, plane, units, tiles, operands[0], line)

    @staticmethod
    def _product(acc, a, b):
        """acc + a · b with f32 products summed in order of k (as the emulations do)."""
        out = acc.astype(np.float32, copy=True)
        for kk in range(a.shape[1]):
            out = out + np.outer(a[:, kk], b[kk, :]).astype(np.float32)
        return out

    def _load_store(self, s, units, tiles, operands, line):
        name = s.frag
        ft = self.k.frags[name]
        mem = self.memory[s.src if isinstance(s, ir.FragLoad) else s.dst]
        tile = tiles[name]
        lanes = len(units)
        for e in range(len(tile)):
            lane = e % lanes
            off, stride = int(operands[lane][0]), int(operands[lane][1])
            r, c = divmod(e, ft.cols)
            if isinstance(s, ir.FragLoad) and ft.layout == "col" and ft.role != "acc":
                r, c = c, r
            at = off + r * stride + c
            if isinstance(s, ir.FragLoad):
                tile[e] = np.float32(mem.read_at(at, units[lane], line))
            else:
                mem.write_at(at, tile[e], units[lane], line)

    def _group_mma(self, s: ir.GroupMma, plane: int, units: list, tiles: dict, offsets, line):
        ft = self.k.frags[s.acc]
        rows, n, k = ft.rows, ft.n, s.k
        unit = units[0]
        if s.a_tile is None:
            a = tiles[s.a].reshape(rows, k)
        else:
            g = plane % ir.GROUP_PLANES
            a = self._tile(s.a_tile, int(offsets[0]), range(g * rows, g * rows + rows), range(k), unit, line)
        b = self._tile(s.b_tile, int(offsets[1]), range(k), range(n), unit, line)
        acc = tiles[s.acc].reshape(rows, n) if s.accumulate else np.zeros((rows, n), np.float32)
        tiles[s.acc][:] = self._product(acc, a, b).reshape(-1)

    def _tile(self, t: ir.SharedTile, offset: int, rows, cols, unit: int, line: int):
        """Elements (rows x cols) of a shared tile in kd.tile_offset's layout, as f32."""
        mem = self.memory[t.src]
        out = np.empty((len(rows), len(cols)), np.float32)
        for i, r in enumerate(rows):
            for j, c in enumerate(cols):
                sr, sc = (c, r) if t.transposed else (r, c)
                at = offset + tile_layout.offset(sr, sc, t.stored_rows, t.swizzle)
                out[i, j] = np.float32(mem.read_at(at, unit, line))
        return out
