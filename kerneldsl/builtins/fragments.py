"""The plane matrix primitive: fragments (plane-owned m16n16k16 tiles), fill, load, store
and multiply-accumulate. Tensor cores on CUDA, an exact emulation elsewhere; the shapes
and dtypes a device offers are in its capabilities (`mma_shapes`, `mma_dtypes`)."""
from __future__ import annotations

from .. import ir
from ..dtypes import as_dtype, f32, i64
from ..frontend_values import FragRef, SharedRef, TensorRef
from ..types import coerce
from .registry import builtin


def _new_fragment(fe, node, role, dtype, m, n, k, layout):
    caps = fe.spec.caps
    if role != "acc":
        dtype = as_dtype(fe.ct(dtype, node, "fragment dtype"))
    m, n, k = (int(fe.ct(v, node, "fragment shape")) for v in (m, n, k))
    layout = fe.ct(layout, node, "fragment layout")
    if layout not in ("row", "col"):
        raise fe.error(node, f"fragment layout must be 'row' or 'col', got {layout!r}")
    if role != "acc" and dtype not in caps.mma_dtypes:
        raise fe.error(node, f"matrix fragments of {dtype} are unavailable on {caps.device_name} "
                             f"(supported: {', '.join(d.name for d in caps.mma_dtypes)})")
    if (m, n, k) not in caps.mma_shapes:
        raise fe.error(node, f"matrix shape m{m}n{n}k{k} is unavailable on {caps.device_name} "
                             f"(supported: {', '.join(f'm{a}n{b}k{c}' for a, b, c in caps.mma_shapes)})")
    name = fe.fresh("fr")
    ft = ir.FragType(role, dtype, m, n, k, layout)
    fe.frags[name] = ft
    return FragRef(name, ft)


@builtin("A plane-owned m×k input tile (f16/bf16).")
def fragment_a(fe, node, dtype, m, n, k, layout="row"):
    return _new_fragment(fe, node, "a", dtype, m, n, k, layout)


@builtin("A plane-owned k×n input tile (f16/bf16).")
def fragment_b(fe, node, dtype, m, n, k, layout="row"):
    return _new_fragment(fe, node, "b", dtype, m, n, k, layout)


@builtin("A plane-owned m×n f32 accumulator tile.")
def fragment_acc(fe, node, m, n, k, layout="row"):
    return _new_fragment(fe, node, "acc", f32, m, n, k, layout)


def need_frag(fe, node, f, roles, what, scopes=("plane", "group")):
    """`f` when it is a fragment of one of `roles` and `scopes`, else a compile error."""
    if not isinstance(f, FragRef) or f.ftype.role not in roles:
        raise fe.error(node, f"{what} needs a {' or '.join(roles)} fragment, got {fe.describe(f)}")
    if f.ftype.scope not in scopes:
        hint = ("group fragments are filled, converted, used element by element and multiplied by kd.group_mma"
                if f.ftype.group else "plane fragments are multiplied by kd.mma")
        raise fe.error(node, f"{what} takes {' or '.join(scopes)} fragments, got a {f.ftype.scope} fragment "
                             f"({hint})")
    return f


def _mem_target(fe, node, t, what):
    if isinstance(t, TensorRef):
        return "global", t.name, t.dtype
    if isinstance(t, SharedRef):
        return "shared", t.name, t.dtype
    raise fe.error(node, f"{what} needs a tensor or shared array, got {fe.describe(t)}")


def _offset_and_stride(fe, node, offset, stride):
    """The i64 offset and row stride of a fragment load or store, each in a variable."""
    off = fe.temp(coerce(fe.to_expr(offset, node), i64), "fo")
    return off, fe.temp(coerce(fe.to_expr(stride, node), i64), "fs")


@builtin("Set every element of a tile.")
def fill_fragment(fe, node, frag, value):
    f = need_frag(fe, node, frag, ("a", "b", "acc"), "kd.fill_fragment")
    v = fe.temp(coerce(fe.to_expr(value, node), f32), "fv")
    fe.emit(ir.FragFill(frag=f.name, value=v, loc=fe.loc(node)))


@builtin("Load a tile from a tensor or shared array.")
def load_fragment(fe, node, frag, src, offset, stride):
    f = need_frag(fe, node, frag, ("a", "b", "acc"), "kd.load_fragment", ("plane",))
    space, name, dtype = _mem_target(fe, node, src, "kd.load_fragment")
    want = f.ftype.dtype
    if dtype != want:
        raise fe.error(node, f"kd.load_fragment: a {want} fragment cannot load from {dtype} memory")
    off, st = _offset_and_stride(fe, node, offset, stride)
    fe.emit(ir.FragLoad(frag=f.name, space=space, src=name, offset=off, stride=st, checked=fe.spec.bounds_check,
                        loc=fe.loc(node)))


@builtin("Store an accumulator tile row-major.")
def store_fragment(fe, node, dst, offset, frag, stride):
    f = need_frag(fe, node, frag, ("acc",), "kd.store_fragment", ("plane",))
    space, name, dtype = _mem_target(fe, node, dst, "kd.store_fragment")
    if not dtype.is_float:
        raise fe.error(node, f"kd.store_fragment needs float memory, got {dtype}")
    off, st = _offset_and_stride(fe, node, offset, stride)
    fe.emit(ir.FragStore(frag=f.name, space=space, dst=name, offset=off, stride=st, checked=fe.spec.bounds_check,
                         loc=fe.loc(node)))


@builtin("acc += a · b (f32 accumulate).")
def mma(fe, node, acc, a, b):
    acc = need_frag(fe, node, acc, ("acc",), "kd.mma (first argument)", ("plane",))
    a = need_frag(fe, node, a, ("a",), "kd.mma (second argument)", ("plane",))
    b = need_frag(fe, node, b, ("b",), "kd.mma (third argument)", ("plane",))
    if a.ftype.dtype != b.ftype.dtype:
        raise fe.error(node, f"kd.mma: a is {a.ftype.dtype} but b is {b.ftype.dtype}")
    shapes = {(x.ftype.m, x.ftype.n, x.ftype.k) for x in (acc, a, b)}
    if len(shapes) != 1:
        raise fe.error(node, f"kd.mma: fragment shapes differ: {sorted(shapes)}")
    fe.emit(ir.FragMma(acc=acc.name, a=a.name, b=b.name, loc=fe.loc(node)))
