"""Window geometry on one spatial axis, shared by the forward and backward kernels
(`@kd.func`s, inlined). Pooling windows start at o·stride - padding and take `kernel`
taps `dilation` apart; adaptive windows are [floor(o·I/O), ceil((o+1)·I/O)). All
positions are per-plane offsets along the axis; nothing here reads memory."""
import kerneldsl as kd


@kd.func
def span(o, size, out, K, S, P, D, ADAPTIVE):
    """(first, count): the first input position of output o's window inside the input and
    the number of its taps there (taps are D apart; D is 1 for adaptive windows)."""
    if ADAPTIVE:
        first = kd.i32(kd.i64(o) * size // out)
        count = kd.i32((kd.i64(o + 1) * size + out - 1) // out) - first
    else:
        start = o * S - P
        k0 = (kd.max(-start, 0) + D - 1) // D
        k1 = kd.min(K, (size - start + D - 1) // D)
        first = start + k0 * D
        count = k1 - k0
    return first, count


@kd.func
def padded_extent(o, size, K, S, P):
    """torch's pool size of an average window on one axis: the window clipped to the
    padded input (what count_include_pad divides by)."""
    start = o * S - P
    return kd.min(start + K, size + P) - start


@kd.func
def candidates(i, size, out, K, S, ADAPTIVE):
    """(lo, n): the outputs whose windows may hold input position i are candidate(j) for
    j in range(n); for pooling windows these are the K taps (some not valid)."""
    if ADAPTIVE:
        lo = kd.i32(kd.i64(i) * out // size)
        n = kd.i32((kd.i64(i + 1) * out - 1) // size) - lo + 1
    else:
        lo = 0
        n = K
    return lo, n


@kd.func
def candidate(j, i, lo, out, K, S, P, D, ADAPTIVE):
    """(o, valid): candidate j of input position i (from `candidates`), in increasing o.
    For pooling windows tap K-1-j of output o = (i + P - tap·D) / S, valid when that
    division is exact and o is an output."""
    if ADAPTIVE:
        o = lo + j
        valid = True
    else:
        t = i + P - (K - 1 - j) * D
        o = t // S
        valid = t >= 0 and t % S == 0 and o < out
    return o, valid
