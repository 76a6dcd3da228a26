"""A lane's share of an acc fragment, element by element (FlashAttention-style softmax on
the accumulators).

The layout is the back end's: the tensor-core one where the primitive is native (lane =
4 g + t holds rows g and g + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9), element
lane + i * PLANE_DIM of the row-major tile where it is emulated. Kernels read it through
fragment_row/col, fragment_row_slot and fragment_row_lanes, never assume it.
"""
from __future__ import annotations

from .. import ir
from ..dtypes import f32, i32
from ..types import coerce, make_const
from .fragments import need_frag
from .positions import lane_pos, plane_pos, units_per_cube
from .registry import builtin


def _element_frag(fe, node, frag, what, roles=("acc",)):
    f = need_frag(fe, node, frag, roles, what)
    ft = f.ftype
    if not ft.group and ft.rows * ft.cols != 256:
        raise fe.error(node, f"{what} takes 16 x 16 plane fragments or group fragments, got {ft.rows} x {ft.cols}")
    if not _native(fe, ft):
        P = fe.spec.plane_dim
        if (ft.rows * ft.cols) % P or units_per_cube(fe) % P:
            raise fe.error(node, f"{what} needs whole planes of a size dividing {ft.rows * ft.cols} (PLANE_DIM {P}, "
                                 f"{units_per_cube(fe)} units per cube)")
    return f


def _native(fe, ft) -> bool:
    """Whether the fragment lives in the tensor-core register layout (else the emulated one)."""
    return fe.spec.caps.mma_native  # group fragments too: wgmma and mma.sync share the m16n8 layout


def _fragment_len(fe, ft) -> int:
    """Elements of the tile each lane holds: the plane's rows x cols over its lanes."""
    lanes = 32 if _native(fe, ft) else fe.spec.plane_dim
    return ft.rows * ft.cols // lanes


def _element_index(fe, node, f, i, what) -> int:
    i = fe.ct(i, node, f"{what} element")
    n = _fragment_len(fe, f.ftype)
    if not isinstance(i, int) or not 0 <= i < n:
        raise fe.error(node, f"{what}: element must be a compile-time int in 0..{n - 1}, got {i!r}")
    return i


@builtin("Elements of an acc (or a) fragment each lane holds (compile-time).")
def fragment_len(fe, node, frag):
    f = _element_frag(fe, node, frag, "kd.fragment_len", ("acc", "a"))
    return _fragment_len(fe, f.ftype)


def _row_col(fe, node, frag, i, what):
    f = _element_frag(fe, node, frag, what)
    i = _element_index(fe, node, f, i, what)
    lane = fe.call_builtin(lane_pos, node)
    c = lambda v: make_const(v, i32, fe.loc(node))  # noqa: E731
    if _native(fe, f.ftype):  # m16n8 blocks side by side: element i in block i // 4
        g = ir.BinOp(i32, op="/", a=lane, b=c(4))
        t = ir.BinOp(i32, op="%", a=lane, b=c(4))
        row = ir.BinOp(i32, op="+", a=g, b=c(8 * ((i & 3) >> 1)))
        col = ir.BinOp(i32, op="+", a=ir.BinOp(i32, op="*", a=t, b=c(2)), b=c((i & 1) + 8 * (i >> 2)))
    else:
        e = ir.BinOp(i32, op="+", a=lane, b=c(i * fe.spec.plane_dim))
        cols = f.ftype.cols
        row, col = ir.BinOp(i32, op="/", a=e, b=c(cols)), ir.BinOp(i32, op="%", a=e, b=c(cols))
    if f.ftype.group:  # the g-th plane of a group holds rows 16g .. 16g + 15
        g = ir.BinOp(i32, op="%", a=fe.call_builtin(plane_pos, node), b=c(ir.GROUP_PLANES))
        row = ir.BinOp(i32, op="+", a=row, b=ir.BinOp(i32, op="*", a=g, b=c(f.ftype.rows)))
    return row, col


@builtin("Tile row of this lane's element i (i32).")
def fragment_row(fe, node, frag, i):
    return _row_col(fe, node, frag, i, "kd.fragment_row")[0]


@builtin("Tile column of this lane's element i (i32).")
def fragment_col(fe, node, frag, i):
    return _row_col(fe, node, frag, i, "kd.fragment_col")[1]


def _slot_frag(fe, node, frag, what):
    """An acc fragment whose emulated layout groups rows by lanes: the tile's columns must
    divide PLANE_DIM or be a multiple of it (any columns where the layout is native)."""
    f = _element_frag(fe, node, frag, what)
    cols, P = f.ftype.cols, fe.spec.plane_dim
    if not _native(fe, f.ftype) and P % cols and cols % P:
        raise fe.error(node, f"{what}: where the matrix primitive is emulated, row slots need the tile's "
                             f"columns ({cols}) to divide PLANE_DIM ({P}) or be a multiple of it")
    return f


@builtin("Compile-time: a lane's elements with equal slots share a tile row.")
def fragment_row_slot(fe, node, frag, i):
    f = _slot_frag(fe, node, frag, "kd.fragment_row_slot")
    i = _element_index(fe, node, f, i, "kd.fragment_row_slot")
    if _native(fe, f.ftype):
        return (i >> 1) & 1
    P, cols = fe.spec.plane_dim, f.ftype.cols
    return i if P >= cols else i // (cols // P)


@builtin("Compile-time: the number of row slots (see fragment_row_slot).")
def fragment_row_slots(fe, node, frag):
    f = _slot_frag(fe, node, frag, "kd.fragment_row_slots")
    if _native(fe, f.ftype):
        return 2
    P, cols = fe.spec.plane_dim, f.ftype.cols
    n = _fragment_len(fe, f.ftype)
    return n if P >= cols else n // (cols // P)


@builtin("Compile-time xor masks linking the lanes that hold one tile row.")
def fragment_row_lanes(fe, node, frag):
    f = _slot_frag(fe, node, frag, "kd.fragment_row_lanes")
    if _native(fe, f.ftype):
        return (1, 2)
    n = fe.spec.plane_dim if fe.spec.plane_dim < f.ftype.cols else f.ftype.cols
    return tuple(1 << b for b in range(n.bit_length() - 1))


@builtin("Element i (compile-time) of this lane's share of an acc fragment, f32.")
def fragment_get(fe, node, frag, i):
    f = _element_frag(fe, node, frag, "kd.fragment_get")
    i = _element_index(fe, node, f, i, "kd.fragment_get")
    return ir.FragGet(f32, frag=f.name, elem=i, loc=fe.loc(node))


@builtin("Set element i of this lane's share of an acc fragment.")
def fragment_set(fe, node, frag, i, value):
    f = _element_frag(fe, node, frag, "kd.fragment_set")
    i = _element_index(fe, node, f, i, "kd.fragment_set")
    v = coerce(fe.to_expr(value, node), f32)
    fe.emit(ir.FragSet(frag=f.name, elem=i, value=v, loc=fe.loc(node)))


@builtin("dst (a fragment, f16/bf16) = src (acc fragment), element by element, rounded.")
def fragment_convert(fe, node, dst, src):
    d = _element_frag(fe, node, dst, "kd.fragment_convert (dst)", ("a",))
    s_ = _element_frag(fe, node, src, "kd.fragment_convert (src)", ("acc",))
    if d.ftype.layout != "row" or (d.ftype.m, d.ftype.k, d.ftype.scope) != (s_.ftype.m, s_.ftype.n, s_.ftype.scope):
        raise fe.error(node, "kd.fragment_convert needs a row-layout a fragment of the acc fragment's m x n shape "
                             "and scope")
    fe.emit(ir.FragConvert(dst=d.name, src=s_.name, loc=fe.loc(node)))
