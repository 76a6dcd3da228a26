"""Arrival barriers: phase counters in shared memory that units arrive at and bulk copies
complete (`kd.bulk_copy`), so a pipeline's stages are handed over without a cube barrier.

Native (`mbarrier` objects) where the device has bulk tensor copies (`caps.bulk_copy`);
elsewhere an exact emulation in a shared i32 array, written here with atomics, where copies
complete at once and `kd.barrier_wait` is a cube barrier.

A barrier counts down `count` arrivals plus the bytes announced by `kd.barrier_expect`
(minus those copies delivered); when both reach zero its phase completes and it rearms.
`kd.barrier_wait(bars, i, parity)` returns once the phase of that parity (0 for the first,
1 for the second, 0 again for the third ...) has completed.
"""
from __future__ import annotations

from .. import ir
from ..dtypes import boolean, i32, i64
from ..frontend_values import BarrierRef
from ..types import coerce, make_const
from .registry import builtin

WORDS = 4  # emulated barrier: [pending arrivals + bytes, completed phases, arrival count, unused]
MAX_BARRIERS = 64


def _native(fe) -> bool:
    return fe.spec.caps.bulk_copy


def _need_barriers(fe, node, bars, what) -> BarrierRef:
    if not isinstance(bars, BarrierRef):
        raise fe.error(node, f"{what} takes the array kd.arrival_barriers made, got {fe.describe(bars)}")
    return bars


def _index(fe, node, bars: BarrierRef, index, what) -> ir.Expr:
    """The barrier index as an i32 operand; a compile-time one is checked against the array."""
    if isinstance(index, int) and not isinstance(index, bool):
        if not 0 <= index < bars.count:
            raise fe.error(node, f"{what}: barrier {index} is outside the {bars.count} barriers of the array")
    return fe.temp(coerce(fe.to_expr(index, node), i32), "bi")


def _word(fe, node, bars, i: ir.Expr, word: int) -> ir.Expr:
    """Offset (i64) of word `word` of emulated barrier `i`."""
    loc = fe.loc(node)
    base = ir.BinOp(i64, op="*", a=coerce(i, i64), b=make_const(WORDS, i64, loc), loc=loc)
    return fe.temp(ir.BinOp(i64, op="+", a=base, b=make_const(word, i64, loc), loc=loc), "bw")


def _atomic_add(fe, node, bars, offset, value: ir.Expr) -> ir.Var:
    dst = fe.fresh("ba")
    fe.var_types[dst] = i32
    fe.emit(ir.Atomic(dst=dst, op="add", space="shared", target=bars.name, offset=offset,
                      value=fe.temp(coerce(value, i32), "bv"), dtype=i32, loc=fe.loc(node)))
    return ir.Var(i32, name=dst, loc=fe.loc(node))


def emulated_count_down(fe, node, bars: BarrierRef, i: ir.Expr, amount: ir.Expr):
    """Take `amount` off emulated barrier i's pending count; the unit that brings it to zero
    completes the phase: one more completed phase, and the count rearmed for the next."""
    loc = fe.loc(node)
    amount = fe.temp(coerce(amount, i32), "bn")
    pending = _word(fe, node, bars, i, 0)
    old = _atomic_add(fe, node, bars, pending, ir.UnOp(i32, op="neg", a=amount, loc=loc))
    fe.blocks.append([])
    _atomic_add(fe, node, bars, _word(fe, node, bars, i, 1), make_const(1, i32, loc))
    count = ir.SharedLoad(i32, array=bars.name, offset=_word(fe, node, bars, i, 2), loc=loc)
    _atomic_add(fe, node, bars, pending, count)
    done = fe.blocks.pop()
    fe.emit(ir.If(cond=ir.Cmp(boolean, op="==", a=old, b=amount, loc=loc), then=done, loc=loc))


@builtin("An array of `n` (compile-time) arrival barriers in shared memory.")
def arrival_barriers(fe, node, n):
    """Each must be set up by one unit with kd.barrier_init, then a kd.sync_cube(), before use."""
    n = fe.ct(n, node, "kd.arrival_barriers count")
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_BARRIERS:
        raise fe.error(node, f"kd.arrival_barriers: the count must be a compile-time int in 1..{MAX_BARRIERS}, "
                             f"got {n!r}")
    name = fe.fresh("bar")
    if _native(fe):
        decl = ir.SharedDecl(name=name, dtype=i64, size=n, shape=(n,), loc=fe.loc(node))
    else:
        decl = ir.SharedDecl(name=name, dtype=i32, size=WORDS * n, shape=(WORDS * n,), loc=fe.loc(node))
    fe.shared[name] = decl
    ref = BarrierRef(name, n)
    fe.barrier_arrays.append(ref)
    return ref


@builtin("Set barrier i up for `count` arrivals a phase (one unit; kd.sync_cube() before any use).")
def barrier_init(fe, node, bars, index, count):
    bars = _need_barriers(fe, node, bars, "kd.barrier_init")
    i = _index(fe, node, bars, index, "kd.barrier_init")
    if isinstance(count, int) and not 1 <= count <= 1024:
        raise fe.error(node, f"kd.barrier_init: count must be in 1..1024 arrivals, got {count}")
    count = fe.temp(coerce(fe.to_expr(count, node), i32), "bc")
    loc = fe.loc(node)
    if _native(fe):
        fe.emit(ir.BarrierInit(array=bars.name, index=i, count=count, loc=loc))
        return
    for word, value in ((0, count), (1, make_const(0, i32, loc)), (2, count)):
        fe.emit(ir.SharedStore(array=bars.name, offset=_word(fe, node, bars, i, word), value=value, loc=loc))


@builtin("Arrive at barrier i (one of the phase's `count` arrivals).")
def barrier_arrive(fe, node, bars, index):
    bars = _need_barriers(fe, node, bars, "kd.barrier_arrive")
    i = _index(fe, node, bars, index, "kd.barrier_arrive")
    bars.used.add("arrive")
    loc = fe.loc(node)
    if _native(fe):
        fe.emit(ir.BarrierArrive(array=bars.name, index=i, loc=loc))
        return
    emulated_count_down(fe, node, bars, i, make_const(1, i32, loc))


@builtin("Arrive at barrier i and announce `nbytes` that bulk copies will deliver to it this phase.")
def barrier_expect(fe, node, bars, index, nbytes):
    bars = _need_barriers(fe, node, bars, "kd.barrier_expect")
    i = _index(fe, node, bars, index, "kd.barrier_expect")
    if isinstance(nbytes, int) and not 0 <= nbytes < (1 << 20):
        raise fe.error(node, f"kd.barrier_expect: nbytes must be in 0..{(1 << 20) - 1}, got {nbytes}")
    bars.used.add("arrive")
    nbytes = fe.temp(coerce(fe.to_expr(nbytes, node), i32), "bb")
    loc = fe.loc(node)
    if _native(fe):
        fe.emit(ir.BarrierArrive(array=bars.name, index=i, nbytes=nbytes, loc=loc))
        return
    # one arrival and -nbytes: the copies' bytes are added back as they land
    emulated_count_down(fe, node, bars, i, ir.BinOp(i32, op="-", a=make_const(1, i32, loc), b=nbytes, loc=loc))


@builtin("Wait until barrier i's phase of parity `parity` (0 or 1) has completed (every unit).")
def barrier_wait(fe, node, bars, index, parity):
    """Reached by every unit (uniform control flow) outside roles: where the barriers are
    emulated the wait is a cube barrier, and copies have already landed. Inside a kd.role it
    waits for the role's units alone (emulated: roles run in program order, so the phase is
    complete already; the interpreter checks it)."""
    bars = _need_barriers(fe, node, bars, "kd.barrier_wait")
    i = _index(fe, node, bars, index, "kd.barrier_wait")
    if isinstance(parity, int) and parity not in (0, 1):
        raise fe.error(node, f"kd.barrier_wait: parity is 0 or 1, got {parity}")
    bars.waits.append(fe.loc(node))
    loc = fe.loc(node)
    if _native(fe) or fe.role is not None:
        par = fe.temp(coerce(ir.BinOp(i32, op="&", a=coerce(fe.to_expr(parity, node), i32),
                                      b=make_const(1, i32, loc), loc=loc), i32), "bp")
        if _native(fe):
            fe.emit(ir.BarrierWait(array=bars.name, index=i, parity=par, loc=loc))
        elif fe.spec.caps.interpreted:
            # roles run in program order here (builtins/roles.py): the phase must be complete
            fe.emit(ir.PhaseCheck(array=bars.name, index=i, parity=par, loc=loc))
        return
    fe.emit(ir.Barrier(origin="kd.barrier_wait()", loc=loc))
