"""Deterministic scatter-add of the input gradient: contributions are added as 64-bit
fixed-point integers (a u32 low word and an i32 high word, the carry passed on by hand),
and integer addition gives the same sum in any order, so the gradient never depends on
launch order although its target pixels depend on the grid.

The scale is a power of two 2^k fixed per call from max |out_grad| (found first, an
order-free maximum) and `HEADROOM`, log2 of a bound on how many unit-weight contributions
one pixel can receive, so no sum can overflow: every contribution keeps at least
62 − HEADROOM bits below max |out_grad| (about 1e-12 of it for a 2048² grid). A
contribution v counts as trunc(v·2^k) (`fixed_of`), computed in F32: scaling by powers of
two is exact there (the product stays under 2^63, and one under 1 in magnitude truncates to
0 however it was rounded), so every kernel and back end gets the same integer, with one
conversion (rounding in F64 took three on the GPU). Non-finite
contributions set flag bits that make the pixel NaN or ±inf, as a float sum would."""
from __future__ import annotations

import kerneldsl as kd

from .gate import gate_open

NAN_BIT = 1
POS_INF_BIT = 2
NEG_INF_BIT = 4
HUGE = 2.0 ** 127  # |out_grad| from here on may give a non-finite contribution (a tap weight a bit over 1)


@kd.func
def track_abs_max(m, bad, v):
    """(the largest finite |v| so far, 1 once some |v| is not finite or reaches HUGE): the
    per-element step of abs_max_bits (and of the channels-last copy that does its work)."""
    a = kd.abs(kd.f32(v))
    return (kd.max(m, kd.select(a < kd.inf, a, 0.0)), kd.max(bad, kd.select(a < HUGE, 0, 1)))


@kd.func
def publish_max(out, m, bad):
    """The cube's largest m (its bits, one atomic max) and any unit's bad (an atomic or) into
    out[0] and out[1]: the end of abs_max_bits, once track_abs_max has seen each unit's share."""
    m = kd.cube_max(m)
    if kd.unit_pos() == 0:
        kd.atomic_max(out, 0, kd.bitcast(m, kd.u32))
    if bad != 0:   # rare: one atomic a unit that saw one
        kd.atomic_or(out, 1, kd.u32(1))


@kd.kernel
def abs_max_bits(g: kd.Tensor, out: kd.Tensor[kd.u32, 1], total: kd.i32, BX: kd.Const[int],
                 gate: kd.Tensor[kd.u32, 1], limit: kd.i32, WHEN: kd.Const[int]):
    """out[0] = the bits of max |g| over g's finite elements (positive floats order as u32):
    each cube strides over the tensor, reduces, and makes one atomic. out[1] becomes nonzero
    where some |g| is not finite or at least HUGE (its contributions may be non-finite).
    gate, limit, WHEN: gate.py."""
    if gate_open(gate, limit, WHEN):   # (gate.py: the other form of the call was chosen)
        m = kd.f32(0)
        bad = 0
        step = kd.cube_count_x() * BX
        for e in range(kd.cube_pos_x() * BX + kd.unit_pos_x(), total, step):
            m, bad = track_abs_max(m, bad, g[e])
        publish_max(out, m, bad)


@kd.kernel
def clear_words(lo: kd.Tensor[kd.u32, 1], hi: kd.Tensor[kd.i32, 1], flags: kd.Tensor[kd.u32, 1], total: kd.i32,
                BX: kd.Const[int]):
    e = kd.cube_pos_x() * BX + kd.unit_pos_x()
    if e < total:
        lo[e] = kd.u32(0)
        hi[e] = 0
        flags[e] = kd.u32(0)


@kd.func
def scale_exponent(max_bits, HEADROOM):
    """k: contributions are counted in units of 2^-k (|max| < 2^(E − 126), E its exponent field)."""
    e = kd.i32((max_bits >> 23) & 255)
    return 188 - HEADROOM - e


@kd.func
def power_of_two(k):
    """2^k as an F32 built from its exponent field (k in [−126, 127]: exact on every back end)."""
    return kd.bitcast(kd.u32(k + 127) << 23, kd.f32)


@kd.func
def fixed_scale(max_bits, HEADROOM):
    """(s1, s2): F32 powers of two with s1·s2 = 2^k (k as scale_exponent, which may pass 127
    for tiny gradients), for fixed_of."""
    k = scale_exponent(max_bits, HEADROOM)
    k1 = kd.max(kd.min(k, 127), -126)
    return (power_of_two(k1), power_of_two(k - k1))


@kd.func
def fixed_of(v, scale):
    """The integer a finite F32 contribution v counts as: trunc(v·2^k), scale = fixed_scale(...)."""
    return kd.i64((v * scale[0]) * scale[1])


@kd.func
def add_fixed(lo, hi, flags, at, v, scale):
    """Adds F32 v to pixel `at` as fixed_of(v, scale)."""
    if kd.abs(v) < kd.inf:
        q = fixed_of(v, scale)
        low = kd.u32(q & 4294967295)
        old = kd.atomic_add(lo, at, low)
        high = kd.i32(q >> 32) + kd.select(old + low < old, 1, 0)
        if high != 0:  # most small contributions, of either sign, leave the high word as it is
            kd.atomic_add(hi, at, high)
    else:
        bit = kd.select(v != v, NAN_BIT, kd.select(v > 0.0, POS_INF_BIT, NEG_INF_BIT))
        kd.atomic_or(flags, at, kd.u32(bit))


@kd.kernel
def finish(lo: kd.Tensor[kd.u32, 1], hi: kd.Tensor[kd.i32, 1], flags: kd.Tensor[kd.u32, 1],
           max_bits: kd.Tensor[kd.u32, 1], dx: kd.Tensor, total: kd.i32, HEADROOM: kd.Const[int], BX: kd.Const[int]):
    """dx = the fixed-point sums as floats, NaN/±inf where a non-finite value was added."""
    e = kd.cube_pos_x() * BX + kd.unit_pos_x()
    if e < total:
        k = scale_exponent(max_bits[0], HEADROOM)
        q = kd.i64(hi[e]) * 4294967296 + kd.i64(lo[e])
        v = kd.f32(kd.f64(q) * kd.exp2(kd.f64(-k)))
        f = flags[e]
        if f != 0:
            pos = (f & POS_INF_BIT) != 0
            neg = (f & NEG_INF_BIT) != 0
            v = kd.select((f & NAN_BIT) != 0 or (pos and neg), kd.nan, kd.select(pos, kd.inf, -kd.inf))
        dx[e] = v
