"""The front end's handlers for `kd.*` builtins (positions, memory, plane ops,
atomics, math, the matrix primitive, printing). Each `bi_<name>` method is
attached to `Frontend` and called with the AST node and the evaluated args."""
from __future__ import annotations

import math as pymath

from . import ir
from .dtypes import DType, VecType, f16, bf16, f32, f64, i32, u32, i64, boolean, as_dtype
from .frontend import FragRef, Frontend, SharedRef, TensorRef, TileRef, _is_ct
from .types import arith_type, coerce, extract, is_weak, literal, make_const, promote


def builtin(fn):
    setattr(Frontend, "bi_" + fn.__name__, fn)
    return fn


# ------------------------------------------------------------------ positions
def _position(kind, axis):
    def handler(self, node):
        return ir.Position(i32, kind=kind, axis=axis, loc=self.loc(node))
    return handler


for _axis, _c in enumerate("xyz"):
    setattr(Frontend, f"bi_cube_pos_{_c}", _position("cube_pos", _axis))
    setattr(Frontend, f"bi_cube_count_{_c}", _position("cube_count", _axis))
    setattr(Frontend, f"bi_cube_dim_{_c}", lambda self, node, _a=_axis: self.spec.cube_dim[_a])


def _unit_pos(axis):
    def handler(self, node):
        dx, dy, dz = self.spec.cube_dim
        if (axis == 1 and dy == 1) or (axis == 2 and dz == 1):
            return 0
        if axis == 0 and dy == 1 and dz == 1:
            return ir.Position(i32, kind="unit_flat", axis=0, loc=self.loc(node))
        return ir.Position(i32, kind="unit_pos", axis=axis, loc=self.loc(node))
    return handler


for _axis, _c in enumerate("xyz"):
    setattr(Frontend, f"bi_unit_pos_{_c}", _unit_pos(_axis))


@builtin
def unit_pos(self, node):
    return ir.Position(i32, kind="unit_flat", axis=0, loc=self.loc(node))


@builtin
def cube_units(self, node):
    x, y, z = self.spec.cube_dim
    return x * y * z


@builtin
def plane_pos(self, node):
    return ir.Position(i32, kind="plane_pos", axis=0, loc=self.loc(node))


@builtin
def lane_pos(self, node):
    return ir.Position(i32, kind="lane_pos", axis=0, loc=self.loc(node))


@builtin
def plane_count(self, node):
    x, y, z = self.spec.cube_dim
    return -(-(x * y * z) // self.spec.plane_dim)


# ------------------------------------------------------------------ memory
@builtin
def shared(self, node, dtype, size):
    dtype = as_dtype(self.ct(dtype, node, "shared dtype"))
    size = self.ct(size, node, "shared array size")
    shape = tuple(int(s) for s in size) if isinstance(size, tuple) else (int(size),)
    total = 1
    for s in shape:
        total *= s
    if total <= 0:
        raise self.error(node, f"shared array size must be positive, got {size}")
    limit = self.spec.caps.max_shared_bytes
    used = sum(d.dtype.itemsize * d.size for d in self.shared.values())
    if used + total * dtype.itemsize > limit:
        raise self.error(node, f"shared memory of {used + total * dtype.itemsize} bytes exceeds the device's "
                               f"{limit} bytes per cube")
    name = self.fresh("sh")
    self.shared[name] = ir.SharedDecl(name=name, dtype=dtype, size=total, loc=self.loc(node))
    return SharedRef(name, dtype, shape)


@builtin
def sync_cube(self, node):
    self.emit(ir.Barrier(loc=self.loc(node)))


@builtin
def load_vec(self, node, tensor, offset, lanes):
    lanes = self.ct(lanes, node, "vector lanes")
    if not isinstance(tensor, TensorRef):
        raise self.error(node, "kd.load_vec needs a tensor")
    if lanes not in (2, 4, 8):
        raise self.error(node, f"vector lanes must be 2, 4 or 8, got {lanes}")
    off = coerce(self.to_expr(offset, node), i64)
    return ir.Load(VecType(tensor.dtype, lanes), tensor=tensor.name, offset=off,
                   checked=self.spec.bounds_check, loc=self.loc(node))


@builtin
def store_vec(self, node, tensor, offset, value):
    if not isinstance(tensor, TensorRef):
        raise self.error(node, "kd.store_vec needs a tensor")
    v = self.to_expr(value, node)
    if not isinstance(v.dtype, VecType):
        raise self.error(node, "kd.store_vec needs a vector value")
    v = coerce(v, VecType(tensor.dtype, v.dtype.lanes))
    off = coerce(self.to_expr(offset, node), i64)
    self.emit(ir.Store(tensor=tensor.name, offset=off, value=v, checked=self.spec.bounds_check, loc=self.loc(node)))


@builtin
def async_copy(self, node, dst, dst_offset, src, src_offset, lanes, pred=True):
    """Native (ir.AsyncCopy) where the device has hardware async copies; elsewhere the
    plain copy it means: load the elements (when pred holds) and store them, or zeros."""
    lanes = self.ct(lanes, node, "kd.async_copy lanes")
    if not isinstance(dst, SharedRef):
        raise self.error(node, f"kd.async_copy copies into a shared array, got {self._describe(dst)} as dst")
    if not isinstance(src, TensorRef):
        raise self.error(node, f"kd.async_copy copies from a tensor, got {self._describe(src)} as src")
    if src.dtype != dst.dtype:
        raise self.error(node, f"kd.async_copy: src is {src.dtype} but dst is {dst.dtype}")
    if lanes not in (1, 2, 4, 8) or lanes * src.dtype.itemsize not in (4, 8, 16):
        raise self.error(node, f"kd.async_copy moves 4, 8 or 16 bytes: {lanes} lanes of {src.dtype} is "
                               f"{lanes * src.dtype.itemsize}")
    loc = self.loc(node)
    doff = self.temp(coerce(self.to_expr(dst_offset, node), i64), "ad")
    soff = self.temp(coerce(self.to_expr(src_offset, node), i64), "as")
    cond = None if pred is True else self.temp(coerce(self.to_expr(pred, node), boolean), "ap")
    if self.spec.caps.async_copy:
        self.emit(ir.AsyncCopy(dst=dst.name, dst_offset=doff, src=src.name, src_offset=soff, lanes=lanes,
                               pred=cond, dtype=src.dtype, checked=self.spec.bounds_check, loc=loc))
        return
    checked = self.spec.bounds_check
    vt = src.dtype if lanes == 1 else VecType(src.dtype, lanes)
    val = ir.Load(vt, tensor=src.name, offset=soff, checked=checked, loc=loc)

    def stores(lane_value):
        return [ir.SharedStore(array=dst.name, offset=doff if i == 0 else ir.BinOp(i64, op="+", a=doff,
                                                                                    b=make_const(i, i64, loc), loc=loc),
                               value=lane_value(i), checked=checked, loc=loc) for i in range(lanes)]

    name = self.fresh("av")
    self.var_types[name] = vt
    v = ir.Var(vt, name=name, loc=loc)
    copy = [ir.Assign(name=name, value=val, loc=loc)]
    copy += stores(lambda i: v if lanes == 1 else ir.VecExtract(src.dtype, a=v, lane=i, loc=loc))
    if cond is None:
        for st in copy:
            self.emit(st)
        return
    zero = stores(lambda i: self.store_value(literal(0), src.dtype, node))
    self.emit(ir.If(cond=cond, then=copy, orelse=zero, loc=loc))


@builtin
def async_commit(self, node):
    if self.spec.caps.async_copy:
        self.emit(ir.AsyncCommit(loc=self.loc(node)))


@builtin
def async_wait(self, node, pending=0):
    pending = self.ct(pending, node, "kd.async_wait pending groups")
    if not isinstance(pending, int) or not 0 <= pending <= 7:
        raise self.error(node, f"kd.async_wait: pending must be a compile-time int in 0..7, got {pending!r}")
    if self.spec.caps.async_copy:
        self.emit(ir.AsyncWait(pending=pending, loc=self.loc(node)))


@builtin
def splat(self, node, value, lanes):
    lanes = self.ct(lanes, node, "vector lanes")
    e = self.to_expr(value, node)
    if is_weak(e):
        e = coerce(e, e.dtype)
    return ir.VecMake(VecType(e.dtype, lanes), elems=[e] * lanes, loc=self.loc(node))


@builtin
def make_vec(self, node, *values):
    es = [self.to_expr(v, node) for v in values]
    if len(es) not in (2, 4, 8):
        raise self.error(node, "kd.make_vec takes 2, 4 or 8 values")
    t = es[0].dtype
    for e in es[1:]:
        t = promote(t, False, e.dtype, is_weak(e)) if t != e.dtype else t
    return ir.VecMake(VecType(t, len(es)), elems=[coerce(e, t) for e in es], loc=self.loc(node))


def _vec_reduce(kind):
    def handler(self, node, v):
        e = self.to_expr(v, node)
        if not isinstance(e.dtype, VecType):
            raise self.error(node, f"kd.vec_{kind} needs a vector")
        acc = extract(e, 0)
        for i in range(1, e.dtype.lanes):
            acc = self.binop("+", acc, extract(e, i), node) if kind == "sum" else self.math2(kind, acc, extract(e, i), node)
        return acc
    return handler


for _k in ("sum", "max", "min"):
    setattr(Frontend, f"bi_vec_{_k}", _vec_reduce(_k))


@builtin
def cast(self, node, value, dtype):
    dtype = self.ct(dtype, node, "cast dtype")
    if not isinstance(dtype, (DType, VecType)):
        dtype = as_dtype(dtype)
    if _is_ct(value) and isinstance(dtype, DType):
        return make_const(value, dtype, self.loc(node))
    e = self.to_expr(value, node)
    if isinstance(dtype, DType) and isinstance(e.dtype, VecType):
        dtype = VecType(dtype, e.dtype.lanes)
    if e.dtype == dtype:
        return e if not is_weak(e) else coerce(make_const(e.value, dtype), dtype)
    if isinstance(dtype, VecType):
        if not isinstance(e.dtype, VecType):
            return coerce(e, dtype)
        return ir.VecMake(dtype, elems=[self.bi_cast(node, extract(e, i), dtype.elem) for i in range(dtype.lanes)],
                          loc=self.loc(node))
    if dtype.is_bool:
        return self.cond_expr(e, node)
    return ir.Cast(dtype, a=e, loc=self.loc(node))


@builtin
def bitcast(self, node, value, dtype):
    dtype = as_dtype(self.ct(dtype, node, "bitcast dtype"))
    e = self.to_expr(value, node)
    if is_weak(e):
        e = coerce(e, e.dtype)
    if isinstance(e.dtype, VecType) or e.dtype.itemsize != dtype.itemsize or dtype.is_bool or e.dtype.is_bool:
        raise self.error(node, f"kd.bitcast needs types of one size, got {e.dtype} -> {dtype}")
    return ir.Bitcast(dtype, a=e, loc=self.loc(node))


@builtin
def select(self, node, cond, a, b):
    if _is_ct(cond):
        return a if cond else b
    return Frontend.select(self, cond, a, b, node)


@builtin
def unroll(self, node, *args):
    raise self.error(node, "kd.unroll(...) can only be used as a for-loop iterator")


@builtin
def static_assert(self, node, cond, message="static assertion failed"):
    if not _is_ct(cond):
        raise self.error(node, "kd.static_assert needs a compile-time condition")
    if not cond:
        raise self.error(node, str(message))


# ------------------------------------------------------------------ plane operations
def _plane_value(self, node, x, what):
    e = self.to_expr(x, node)
    if isinstance(e.dtype, VecType):
        raise self.error(node, f"{what} works on scalars, not vectors")
    if is_weak(e):
        e = coerce(e, e.dtype)
    t = arith_type(e.dtype) if not e.dtype.is_bool else boolean
    return coerce(e, t)


def _plane_op(op):
    def handler(self, node, *args):
        caps = self.spec.caps
        if op not in caps.plane_ops:
            raise self.error(node, f"plane operation {op} is unavailable on {caps.device_name}")
        value = arg = None
        if op == "elect":
            if args:
                raise self.error(node, "kd.plane_elect() takes no arguments")
            dtype = boolean
        elif op in ("ballot", "all", "any"):
            if len(args) != 1:
                raise self.error(node, f"kd.plane_{op}(pred) takes one argument")
            value = self.cond_expr(self.to_expr(args[0], node), node)
            dtype = u32 if op == "ballot" else boolean
            if op == "ballot" and self.spec.plane_dim > 32:
                raise self.error(node, f"kd.plane_ballot needs PLANE_DIM <= 32, the runtime has {self.spec.plane_dim}")
        else:
            want = 2 if op in ("broadcast", "shuffle", "shuffle_xor") else 1
            if len(args) != want:
                raise self.error(node, f"kd.plane_{op} takes {want} argument(s)")
            value = _plane_value(self, node, args[0], f"kd.plane_{op}")
            if value.dtype.is_bool and op not in ("broadcast", "shuffle", "shuffle_xor"):
                raise self.error(node, f"kd.plane_{op} needs a number, got bool")
            dtype = value.dtype
            if want == 2:
                a = self.to_expr(args[1], node)
                if not (isinstance(a.dtype, DType) and a.dtype.is_int):
                    raise self.error(node, f"kd.plane_{op}: lane argument must be an integer")
                arg = self.temp(coerce(a, i32), "pa")
        if value is not None:
            value = self.temp(value, "pv")
        dst = self.fresh("pr")
        self.var_types[dst] = dtype
        self.emit(ir.PlaneOp(dst=dst, op=op, value=value, arg=arg, dtype=dtype, loc=self.loc(node)))
        return ir.Var(dtype, name=dst, loc=self.loc(node))
    return handler


for _op in ir.PLANE_OPS:
    setattr(Frontend, f"bi_plane_{_op}", _plane_op(_op))


# ------------------------------------------------------------------ atomics
def _atomic(op):
    def handler(self, node, target, index, *rest):
        if op == "cas":
            if len(rest) != 2:
                raise self.error(node, "kd.atomic_cas(target, index, compare, value)")
            compare, value = rest
        else:
            if len(rest) != 1:
                raise self.error(node, f"kd.atomic_{op}(target, index, value)")
            compare, value = None, rest[0]
        if isinstance(target, TensorRef):
            space = "global"
        elif isinstance(target, SharedRef):
            space = "shared"
        else:
            raise self.error(node, f"kd.atomic_{op} needs a tensor or shared array, got {self._describe(target)}")
        dtype = target.dtype
        allowed = self.spec.caps.atomics.get(op, ())
        if dtype not in allowed:
            raise self.error(node, f"kd.atomic_{op} on {dtype} is unavailable on {self.spec.caps.device_name} "
                                   f"(supported: {', '.join(d.name for d in allowed) or 'none'})")
        off = self.offset_of(target, index, node)
        v = coerce(self.to_expr(value, node), dtype)
        c = coerce(self.to_expr(compare, node), dtype) if compare is not None else None
        dst = self.fresh("at")
        self.var_types[dst] = dtype
        self.emit(ir.Atomic(dst=dst, op=op, space=space, target=target.name, offset=off, value=v, compare=c,
                            dtype=dtype, checked=self.spec.bounds_check, loc=self.loc(node)))
        return ir.Var(dtype, name=dst, loc=self.loc(node))
    return handler


for _op in ir.ATOMIC_OPS:
    setattr(Frontend, f"bi_atomic_{_op}" if _op != "exchange" else "bi_atomic_exchange", _atomic(_op))


# ------------------------------------------------------------------ math
@builtin
def pow(self, node, x, y):  # noqa: A001
    return self.math2("pow", x, y, node)


@builtin
def min(self, node, a, b):  # noqa: A001
    return self.math2("min", a, b, node)


@builtin
def max(self, node, a, b):  # noqa: A001
    return self.math2("max", a, b, node)


@builtin
def clamp(self, node, x, lo, hi):
    return self.math2("min", self.math2("max", x, lo, node), hi, node)


@builtin
def abs(self, node, x):  # noqa: A001
    if _is_ct(x):
        return x if x >= 0 else -x
    e = self.to_expr(x, node)
    if isinstance(e.dtype, VecType):
        return ir.VecMake(e.dtype, elems=[self.bi_abs(node, extract(e, i)) for i in range(e.dtype.lanes)])
    t = arith_type(e.dtype)
    if t.is_bool:
        t = i32
    return ir.Math(t, fn="abs", args=[coerce(e, t)], loc=self.loc(node))


@builtin
def fma(self, node, a, b, c):
    es = [self.to_expr(v, node) for v in (a, b, c)]
    t = f32
    if any((not is_weak(e)) and arith_type(e.dtype) is f64 for e in es):
        t = f64
    return ir.Math(t, fn="fma", args=[coerce(e, t) for e in es], loc=self.loc(node))


def _classify(fn):
    def handler(self, node, x):
        if _is_ct(x):
            return pymath.isnan(x) if fn == "isnan" else pymath.isinf(x)
        e = self.to_expr(x, node)
        if not e.dtype.is_float:
            return False
        t = arith_type(e.dtype)
        return ir.Math(boolean, fn=fn, args=[coerce(e, t)], loc=self.loc(node))
    return handler


Frontend.bi_isnan = _classify("isnan")
Frontend.bi_isinf = _classify("isinf")


# ------------------------------------------------------------------ matrix primitive
def _fragment(role):
    def handler(self, node, *args, layout="row"):
        caps = self.spec.caps
        if role == "acc":
            if len(args) != 3:
                raise self.error(node, "kd.fragment_acc(m, n, k)")
            dtype, (m, n, k) = f32, args
        else:
            if len(args) != 4:
                raise self.error(node, f"kd.fragment_{role}(dtype, m, n, k, layout='row')")
            dtype, m, n, k = args
            dtype = as_dtype(self.ct(dtype, node, "fragment dtype"))
        m, n, k = (int(self.ct(v, node, "fragment shape")) for v in (m, n, k))
        layout = self.ct(layout, node, "fragment layout")
        if layout not in ("row", "col"):
            raise self.error(node, f"fragment layout must be 'row' or 'col', got {layout!r}")
        if role != "acc" and dtype not in caps.mma_dtypes:
            raise self.error(node, f"matrix fragments of {dtype} are unavailable on {caps.device_name} "
                                   f"(supported: {', '.join(d.name for d in caps.mma_dtypes)})")
        if (m, n, k) not in caps.mma_shapes:
            raise self.error(node, f"matrix shape m{m}n{n}k{k} is unavailable on {caps.device_name} "
                                   f"(supported: {', '.join(f'm{a}n{b}k{c}' for a, b, c in caps.mma_shapes)})")
        name = self.fresh("fr")
        ft = ir.FragType(role, dtype, m, n, k, layout)
        self.frags[name] = ft
        return FragRef(name, ft)
    return handler


Frontend.bi_fragment_a = _fragment("a")
Frontend.bi_fragment_b = _fragment("b")
Frontend.bi_fragment_acc = _fragment("acc")


def _need_frag(self, node, f, roles, what, scopes=("plane", "group")):
    if not isinstance(f, FragRef) or f.ftype.role not in roles:
        raise self.error(node, f"{what} needs a {' or '.join(roles)} fragment, got {self._describe(f)}")
    if f.ftype.scope not in scopes:
        hint = ("group fragments are filled, converted, used element by element and multiplied by kd.group_mma"
                if f.ftype.group else "plane fragments are multiplied by kd.mma")
        raise self.error(node, f"{what} takes {' or '.join(scopes)} fragments, got a {f.ftype.scope} fragment "
                               f"({hint})")
    return f


def _mem_target(self, node, t, what):
    if isinstance(t, TensorRef):
        return "global", t.name, t.dtype
    if isinstance(t, SharedRef):
        return "shared", t.name, t.dtype
    raise self.error(node, f"{what} needs a tensor or shared array, got {self._describe(t)}")


@builtin
def fill_fragment(self, node, frag, value):
    f = _need_frag(self, node, frag, ("a", "b", "acc"), "kd.fill_fragment")
    v = self.temp(coerce(self.to_expr(value, node), f32), "fv")
    self.emit(ir.FragFill(frag=f.name, value=v, loc=self.loc(node)))


@builtin
def load_fragment(self, node, frag, src, offset, stride):
    f = _need_frag(self, node, frag, ("a", "b", "acc"), "kd.load_fragment", ("plane",))
    space, name, dtype = _mem_target(self, node, src, "kd.load_fragment")
    want = f.ftype.dtype
    if dtype != want:
        raise self.error(node, f"kd.load_fragment: a {want} fragment cannot load from {dtype} memory")
    off = self.temp(coerce(self.to_expr(offset, node), i64), "fo")
    st = self.temp(coerce(self.to_expr(stride, node), i64), "fs")
    self.emit(ir.FragLoad(frag=f.name, space=space, src=name, offset=off, stride=st, checked=self.spec.bounds_check,
                          loc=self.loc(node)))


@builtin
def store_fragment(self, node, dst, offset, frag, stride):
    f = _need_frag(self, node, frag, ("acc",), "kd.store_fragment", ("plane",))
    space, name, dtype = _mem_target(self, node, dst, "kd.store_fragment")
    if not dtype.is_float:
        raise self.error(node, f"kd.store_fragment needs float memory, got {dtype}")
    off = self.temp(coerce(self.to_expr(offset, node), i64), "fo")
    st = self.temp(coerce(self.to_expr(stride, node), i64), "fs")
    self.emit(ir.FragStore(frag=f.name, space=space, dst=name, offset=off, stride=st, checked=self.spec.bounds_check,
                           loc=self.loc(node)))


@builtin
def mma(self, node, acc, a, b):
    acc = _need_frag(self, node, acc, ("acc",), "kd.mma (first argument)", ("plane",))
    a = _need_frag(self, node, a, ("a",), "kd.mma (second argument)", ("plane",))
    b = _need_frag(self, node, b, ("b",), "kd.mma (third argument)", ("plane",))
    if a.ftype.dtype != b.ftype.dtype:
        raise self.error(node, f"kd.mma: a is {a.ftype.dtype} but b is {b.ftype.dtype}")
    shapes = {(x.ftype.m, x.ftype.n, x.ftype.k) for x in (acc, a, b)}
    if len(shapes) != 1:
        raise self.error(node, f"kd.mma: fragment shapes differ: {sorted(shapes)}")
    self.emit(ir.FragMma(acc=acc.name, a=a.name, b=b.name, loc=self.loc(node)))


# ------------------------------------------------------------------ group matrix primitive
# A group is GROUP_PLANES consecutive planes (a warpgroup on CUDA) sharing a 64-row tile;
# kd.group_mma reads its B operand (and A, unless A is a group a fragment) from shared
# memory in the layout of kd.tile_offset (wgmma's 32-byte swizzle): wgmma on sm_90, mma.sync
# plane by plane on other CUDA devices, an exact emulation elsewhere.
GROUP_M = 64


def _group_shape(self, node, what, m, n, step):
    m, n = (self.ct(v, node, f"{what} shape") for v in (m, n))
    if m != GROUP_M:
        raise self.error(node, f"{what}: group fragments have {GROUP_M} rows, got {m!r}")
    if not isinstance(n, int) or n <= 0 or n % step or n > 256:
        raise self.error(node, f"{what}: the second size must be a multiple of {step} in {step}..256, got {n!r}")
    P = self.spec.plane_dim
    units = self.bi_cube_units(node)
    if units % (ir.GROUP_PLANES * P):
        raise self.error(node, f"{what}: group fragments need whole groups of {ir.GROUP_PLANES} planes "
                               f"({ir.GROUP_PLANES * P} units), got {units} units per cube")
    return m, n


@builtin
def group_fragment_acc(self, node, m, n):
    """A 64 x n f32 accumulator shared by a group of planes (n a multiple of 8, at most 256)."""
    m, n = _group_shape(self, node, "kd.group_fragment_acc", m, n, 8)
    name = self.fresh("gf")
    ft = ir.FragType("acc", f32, m, n, 16, "row", "group")
    self.frags[name] = ft
    return FragRef(name, ft)


@builtin
def group_fragment_a(self, node, dtype, m, k):
    """A 64 x k f16/bf16 A operand held in the group's registers (k a multiple of 16)."""
    dtype = as_dtype(self.ct(dtype, node, "fragment dtype"))
    caps = self.spec.caps
    if dtype not in caps.mma_dtypes:
        raise self.error(node, f"matrix fragments of {dtype} are unavailable on {caps.device_name} "
                               f"(supported: {', '.join(d.name for d in caps.mma_dtypes)})")
    m, k = _group_shape(self, node, "kd.group_fragment_a", m, k, 16)
    name = self.fresh("gf")
    ft = ir.FragType("a", dtype, m, 16, k, "row", "group")
    self.frags[name] = ft
    return FragRef(name, ft)


@builtin
def shared_tile(self, node, smem, offset, rows, cols, transposed=False):
    """A rows x cols operand of kd.group_mma in `smem` from element `offset` (a multiple of
    128), stored in the layout of kd.tile_offset as a rows x cols matrix, or as its
    transpose (`transposed=True`); the stored matrix has a multiple of 8 rows and of 16 columns."""
    if not isinstance(smem, SharedRef) or smem.dtype not in (f16, bf16):
        raise self.error(node, f"kd.shared_tile needs an f16 or bf16 shared array, got {self._describe(smem)}")
    rows, cols = (self.ct(v, node, "kd.shared_tile shape") for v in (rows, cols))
    transposed = bool(self.ct(transposed, node, "kd.shared_tile transposed"))
    for what, v in (("rows", rows), ("cols", cols)):
        if not isinstance(v, int) or v <= 0 or v % 8:
            raise self.error(node, f"kd.shared_tile: {what} must be a positive multiple of 8, got {v!r}")
    stored_cols = rows if transposed else cols
    if stored_cols % 16:
        what = "rows of a transposed" if transposed else "cols of a"
        raise self.error(node, f"kd.shared_tile: the {what} tile are its stored columns and must be a multiple "
                               f"of 16, got {stored_cols}")
    size = 1
    for d in smem.shape:
        size *= d
    if rows * cols > size:
        raise self.error(node, f"kd.shared_tile: a {rows} x {cols} tile needs {rows * cols} elements; shared array "
                               f"{smem.name} has {size}")
    if _is_ct(offset) and isinstance(offset, int) and (offset % 128 or offset < 0 or offset + rows * cols > size):
        raise self.error(node, f"kd.shared_tile: offset {offset} must be a multiple of 128 with the tile inside "
                               f"{smem.name} ({size} elements)")
    off = self.temp(coerce(self.to_expr(offset, node), i32), "to")
    return TileRef(ir.SharedTile(smem.name, off, rows, cols, transposed), smem.dtype)


@builtin
def tile_offset(self, node, row, col, rows):
    """Element offset of (row, col) in a matrix of `rows` rows (compile-time, a multiple of 8)
    stored in the group primitive's layout: columns in bands of 16 (32 bytes of 16-bit
    elements), band after band; in a band, row after row, the two 8-element halves of a row
    swapped in rows 4-7 of every 8 (wgmma's 32-byte swizzle: conflict-free reads, and each
    row's 32 bytes in one piece, as a copy from a row-major tensor brings them)."""
    rows = self.ct(rows, node, "kd.tile_offset rows")
    if not isinstance(rows, int) or rows <= 0 or rows % 8:
        raise self.error(node, f"kd.tile_offset: rows must be a positive multiple of 8, got {rows!r}")
    r = coerce(self.to_expr(row, node), i32)
    c = coerce(self.to_expr(col, node), i32)
    k = lambda v: make_const(v, i32, self.loc(node))  # noqa: E731
    op = lambda o, a, b: ir.BinOp(i32, op=o, a=a, b=b)  # noqa: E731
    band = op("*", op("/", c, k(16)), k(rows * 16))
    half = op("^", op("%", op("/", c, k(8)), k(2)), op("%", op("/", r, k(4)), k(2)))
    inner = op("+", op("*", half, k(8)), op("%", c, k(8)))
    return op("+", band, op("+", op("*", r, k(16)), inner))


@builtin
def group_mma(self, node, acc, a, b, accumulate=True):
    """acc += a · b for a group (acc = a · b with accumulate=False): acc 64 x n (group acc
    fragment), a 64 x k (group a fragment or shared tile), b k x n (shared tile).
    Asynchronous: read acc after kd.group_wait."""
    accumulate = self.ct(accumulate, node, "kd.group_mma accumulate")
    if not isinstance(accumulate, bool):
        raise self.error(node, f"kd.group_mma: accumulate must be a compile-time bool, got {accumulate!r}")
    acc = _need_frag(self, node, acc, ("acc",), "kd.group_mma (first argument)", ("group",))
    if not isinstance(b, TileRef):
        raise self.error(node, f"kd.group_mma: b must be a kd.shared_tile, got {self._describe(b)}")
    if isinstance(a, TileRef):
        a_name, a_tile, a_rows, k, a_dt = "", a.tile, a.tile.rows, a.tile.cols, a.dtype
    else:
        f = _need_frag(self, node, a, ("a",), "kd.group_mma (second argument)", ("group",))
        a_name, a_tile, a_rows, k, a_dt = f.name, None, f.ftype.m, f.ftype.k, f.ftype.dtype
    if a_dt != b.dtype:
        raise self.error(node, f"kd.group_mma: a is {a_dt} but b is {b.dtype}")
    n = acc.ftype.n
    if a_rows != GROUP_M or k % 16 or (b.tile.rows, b.tile.cols) != (k, n):
        raise self.error(node, f"kd.group_mma: shapes do not chain: acc 64 x {n}, a {a_rows} x {k}, "
                               f"b {b.tile.rows} x {b.tile.cols} (need a 64 x k with k a multiple of 16, b k x {n})")
    self.emit(ir.GroupMma(acc=acc.name, a=a_name, a_tile=a_tile, b_tile=b.tile, k=k, accumulate=accumulate,
                          loc=self.loc(node)))


@builtin
def group_wait(self, node, pending=0):
    """Wait until at most `pending` (compile-time) of this group's kd.group_mma are unfinished."""
    pending = self.ct(pending, node, "kd.group_wait pending")
    if not isinstance(pending, int) or not 0 <= pending <= 7:
        raise self.error(node, f"kd.group_wait: pending must be a compile-time int in 0..7, got {pending!r}")
    self.emit(ir.GroupWait(pending=pending, loc=self.loc(node)))


# ------------------------------------------------------------------ fragment elements
# A lane's share of an acc fragment, element by element (FlashAttention-style softmax on
# the accumulators). The layout is the back end's: the tensor-core one where the primitive
# is native (lane = 4 g + t holds rows g and g + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9),
# element lane + i * PLANE_DIM of the row-major tile where it is emulated. Kernels read it
# through fragment_row/col, fragment_row_slot and fragment_row_lanes, never assume it.
def _element_frag(self, node, frag, what, roles=("acc",)):
    f = _need_frag(self, node, frag, roles, what)
    ft = f.ftype
    if not ft.group and ft.rows * ft.cols != 256:
        raise self.error(node, f"{what} takes 16 x 16 plane fragments or group fragments, got {ft.rows} x {ft.cols}")
    if not _native(self, ft):
        P = self.spec.plane_dim
        if (ft.rows * ft.cols) % P or self.spec.cube_dim[0] * self.spec.cube_dim[1] * self.spec.cube_dim[2] % P:
            raise self.error(node, f"{what} needs whole planes of a size dividing {ft.rows * ft.cols} (PLANE_DIM {P}, "
                                   f"{self.bi_cube_units(node)} units per cube)")
    return f


def _native(self, ft) -> bool:
    """Whether the fragment lives in the tensor-core register layout (else the emulated one)."""
    return self.spec.caps.mma_native  # group fragments too: wgmma and mma.sync share the m16n8 layout


def _fragment_len(self, ft) -> int:
    """Elements of the tile each lane holds: the plane's rows x cols over its lanes."""
    lanes = 32 if _native(self, ft) else self.spec.plane_dim
    return ft.rows * ft.cols // lanes


def _element_index(self, node, f, i, what) -> int:
    i = self.ct(i, node, f"{what} element")
    n = _fragment_len(self, f.ftype)
    if not isinstance(i, int) or not 0 <= i < n:
        raise self.error(node, f"{what}: element must be a compile-time int in 0..{n - 1}, got {i!r}")
    return i


@builtin
def fragment_len(self, node, frag):
    f = _element_frag(self, node, frag, "kd.fragment_len", ("acc", "a"))
    return _fragment_len(self, f.ftype)


def _row_col(self, node, frag, i, what):
    f = _element_frag(self, node, frag, what)
    i = _element_index(self, node, f, i, what)
    lane = self.bi_lane_pos(node)
    c = lambda v: make_const(v, i32, self.loc(node))  # noqa: E731
    if _native(self, f.ftype):  # m16n8 blocks side by side: element i in block i // 4
        g = ir.BinOp(i32, op="/", a=lane, b=c(4))
        t = ir.BinOp(i32, op="%", a=lane, b=c(4))
        row = ir.BinOp(i32, op="+", a=g, b=c(8 * ((i & 3) >> 1)))
        col = ir.BinOp(i32, op="+", a=ir.BinOp(i32, op="*", a=t, b=c(2)), b=c((i & 1) + 8 * (i >> 2)))
    else:
        e = ir.BinOp(i32, op="+", a=lane, b=c(i * self.spec.plane_dim))
        cols = f.ftype.cols
        row, col = ir.BinOp(i32, op="/", a=e, b=c(cols)), ir.BinOp(i32, op="%", a=e, b=c(cols))
    if f.ftype.group:  # the g-th plane of a group holds rows 16g .. 16g + 15
        g = ir.BinOp(i32, op="%", a=self.bi_plane_pos(node), b=c(ir.GROUP_PLANES))
        row = ir.BinOp(i32, op="+", a=row, b=ir.BinOp(i32, op="*", a=g, b=c(f.ftype.rows)))
    return row, col


@builtin
def fragment_row(self, node, frag, i):
    return _row_col(self, node, frag, i, "kd.fragment_row")[0]


@builtin
def fragment_col(self, node, frag, i):
    return _row_col(self, node, frag, i, "kd.fragment_col")[1]


def _slot_frag(self, node, frag, what):
    """An acc fragment whose emulated layout groups rows by lanes: the tile's columns must
    divide PLANE_DIM or be a multiple of it (any columns where the layout is native)."""
    f = _element_frag(self, node, frag, what)
    cols, P = f.ftype.cols, self.spec.plane_dim
    if not _native(self, f.ftype) and P % cols and cols % P:
        raise self.error(node, f"{what}: where the matrix primitive is emulated, row slots need the tile's "
                               f"columns ({cols}) to divide PLANE_DIM ({P}) or be a multiple of it")
    return f


@builtin
def fragment_row_slot(self, node, frag, i):
    """Compile-time: elements of a lane with the same slot lie in the same tile row."""
    f = _slot_frag(self, node, frag, "kd.fragment_row_slot")
    i = _element_index(self, node, f, i, "kd.fragment_row_slot")
    if _native(self, f.ftype):
        return (i >> 1) & 1
    P, cols = self.spec.plane_dim, f.ftype.cols
    return i if P >= cols else i // (cols // P)


@builtin
def fragment_row_slots(self, node, frag):
    """Compile-time: how many row slots a lane's elements fall in."""
    f = _slot_frag(self, node, frag, "kd.fragment_row_slots")
    if _native(self, f.ftype):
        return 2
    P, cols = self.spec.plane_dim, f.ftype.cols
    n = _fragment_len(self, f.ftype)
    return n if P >= cols else n // (cols // P)


@builtin
def fragment_row_lanes(self, node, frag):
    """Compile-time tuple of xor masks: the lanes holding a row are lane ^ (any mix of them)."""
    f = _slot_frag(self, node, frag, "kd.fragment_row_lanes")
    if _native(self, f.ftype):
        return (1, 2)
    n = self.spec.plane_dim if self.spec.plane_dim < f.ftype.cols else f.ftype.cols
    return tuple(1 << b for b in range(n.bit_length() - 1))


@builtin
def fragment_get(self, node, frag, i):
    f = _element_frag(self, node, frag, "kd.fragment_get")
    i = _element_index(self, node, f, i, "kd.fragment_get")
    return ir.FragGet(f32, frag=f.name, elem=i, loc=self.loc(node))


@builtin
def fragment_set(self, node, frag, i, value):
    f = _element_frag(self, node, frag, "kd.fragment_set")
    i = _element_index(self, node, f, i, "kd.fragment_set")
    v = coerce(self.to_expr(value, node), f32)
    self.emit(ir.FragSet(frag=f.name, elem=i, value=v, loc=self.loc(node)))


@builtin
def fragment_convert(self, node, dst, src):
    d = _element_frag(self, node, dst, "kd.fragment_convert (dst)", ("a",))
    s_ = _element_frag(self, node, src, "kd.fragment_convert (src)", ("acc",))
    if d.ftype.layout != "row" or (d.ftype.m, d.ftype.k, d.ftype.scope) != (s_.ftype.m, s_.ftype.n, s_.ftype.scope):
        raise self.error(node, "kd.fragment_convert needs a row-layout a fragment of the acc fragment's m x n shape "
                               "and scope")
    self.emit(ir.FragConvert(dst=d.name, src=s_.name, loc=self.loc(node)))


# ------------------------------------------------------------------ printing
@builtin
def print(self, node, fmt="", *args):  # noqa: A001
    if not isinstance(fmt, str):
        args = (fmt,) + args
        fmt = " ".join(["{}"] * len(args))
    pieces = fmt.split("{}")
    if len(pieces) - 1 != len(args):
        raise self.error(node, f"kd.print: {len(pieces) - 1} '{{}}' placeholders for {len(args)} values")
    parts = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append(piece)
        if i < len(args):
            a = args[i]
            if _is_ct(a):
                parts.append(str(a))
                continue
            e = self.to_expr(a, node)
            if isinstance(e.dtype, VecType):
                raise self.error(node, "kd.print takes scalars")
            if is_weak(e):
                e = coerce(e, e.dtype)
            if e.dtype in (f16, bf16):
                e = coerce(e, f32)
            parts.append(e)
    self.emit(ir.Print(parts=parts, loc=self.loc(node)))
