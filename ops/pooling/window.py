"""Window geometry on one spatial axis, shared by the forward and backward kernels
(`@kd.func`s, inlined). Pooling windows start at o·stride - padding and take `kernel`
taps `dilation` apart; adaptive windows are [floor(o·I/O), ceil((o+1)·I/O)). All
positions are per-plane offsets along the axis; nothing here reads memory."""
import kerneldsl as kd


@kd.func
def quotient(a, b, F64):
    """a // b for 0 <= a < 2^31 and 0 < b < 2^31; F64 (compile-time): through one f64
    division, truncated, which is exact there (a/b = k + f with f = 0 or f >= 1/b, and
    1/b exceeds half an ulp of k < 2^31/b) and is a vector instruction on the cpu runtime,
    where an integer division is a scalar instruction a lane."""
    return kd.i32(kd.f64(a) / kd.f64(b)) if F64 else a // b


@kd.func
def span(o, size, out, K, S, P, D, ADAPTIVE, WIDE, ON=True, F64=False):
    """(first, count): the first input position of output o's window inside the input and
    the number of its taps there (taps are D apart; D is 1 for adaptive windows). WIDE:
    adaptive products o·size need 64 bits (i64 division is slow: only when needed). ON
    (compile-time) False: an axis a 1- or 2-D call lacks (size 1, one tap). F64: adaptive
    bins divide through f64 (`quotient`) unless WIDE."""
    if not ON:
        first = o
        count = 1
    elif ADAPTIVE:
        first = 0
        count = size  # one bin (global pooling): no division
        if out != 1:
            if F64 and not WIDE:
                first = quotient(o * size, out, True)
                count = quotient((o + 1) * size + out - 1, out, True) - first
            else:
                first = kd.i32(wide(o, WIDE) * size // out)
                count = kd.i32((wide(o + 1, WIDE) * size + out - 1) // out) - first
    else:
        start = o * S - P
        if D == 1:
            k0 = kd.max(-start, 0)
            k1 = kd.min(K, size - start)
        else:
            k0 = (kd.max(-start, 0) + D - 1) // D
            k1 = kd.min(K, (size - start + D - 1) // D)
        first = start + k0 * D
        count = k1 - k0
    return first, count


@kd.func
def wide(v, WIDE):
    """v as i64 when WIDE, else as it is (i32)."""
    return kd.i64(v) if WIDE else v


@kd.func
def padded_extent(o, size, K, S, P):
    """torch's pool size of an average window on one axis: the window clipped to the
    padded input (what count_include_pad divides by)."""
    start = o * S - P
    return kd.min(start + K, size + P) - start


@kd.func
def candidates(i, size, out, K, S, P, D, ADAPTIVE, WIDE, ON=True):
    """(lo, n): the outputs whose windows may hold input position i are lo .. lo + n - 1
    (n may be <= 0: none); with dilation, `candidate` tells which of them hold it. ON as
    in `span`."""
    if not ON:
        lo = i
        n = 1
    elif ADAPTIVE:
        lo = 0
        n = 1     # one bin (global pooling): no division
        if out != 1:
            lo = kd.i32(wide(i, WIDE) * out // size)
            n = kd.i32((wide(i + 1, WIDE) * out - 1) // size) - lo + 1
    else:
        lo = (kd.max(i + P - (K - 1) * D, 0) + S - 1) // S
        n = kd.min(out - 1, (i + P) // S) - lo + 1
    return lo, n


@kd.func
def candidate(j, i, lo, S, P, D, ADAPTIVE):
    """(o, valid): candidate j of input position i (from `candidates`), in increasing o;
    valid when a tap of o's window lands on i (always, without dilation)."""
    o = lo + j
    if ADAPTIVE:
        valid = True
    else:
        valid = D == 1 or (i + P - o * S) % D == 0
    return o, valid


@kd.func
def taps_to_outputs(i, out, K, S, P, D):
    """For each tap k of a window (K, S compile-time), from the last tap to the first:
    (outputs o, whether valid) such that tap k of output o's window lands on input i;
    o is clamped into [0, out) so that an invalid one can still be read."""
    outs = ()
    oks = ()
    for j in kd.unroll(K):
        t = i + P - (K - 1 - j) * D
        o = t // S
        outs = outs + (kd.clamp(o, 0, out - 1),)
        oks = oks + (t >= 0 and t % S == 0 and o < out,)
    return outs, oks
