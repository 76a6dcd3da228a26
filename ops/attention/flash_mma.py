"""`FlashBlackboxAccelerated`: fused attention with the inner products on the matrix
primitive (m16n16k16 fragments, f16/bf16 in, f32 accumulate: tensor cores on CUDA, an
exact emulation elsewhere).

A cube of `num_planes` planes owns BQ = 16·seq_q·num_planes rows of the flattened
[group heads x Sq] query block of one KV head; each plane owns seq_q tiles of 16 rows.
Each step stages BK = 16·num_planes·seq_kv keys of K and V in shared memory (zero-padded
past the end and to whole 16-wide head chunks) and then:

1. S = Q·Kᵀ per plane on fragments (Q stays in fragments for the whole kernel), stored to
   shared f32;
2. one unit per row applies the shared logit rule (scale, softcap, mask, causal, bias),
   updates the row's running max m and sum l, and writes P = exp2(logit - m) in the input
   dtype. The max is updated lazily (as in FlashAttention-4): m only moves when the row
   max exceeds it by more than TAU (log2 units), so P <= 2^TAU and the output
   accumulators, which live in fragments, are rescaled only on those rare steps — by a
   round trip through shared memory, decided for the whole cube;
3. O += P·V on fragments.

At the end O goes through shared memory once more and is divided by l (rows with no
visible key give zeros). Fragment offsets and strides are multiples of 8 elements
(16-byte rows, `ldmatrix`-friendly), and shared rows are padded by 8 elements so the 16
rows of a tile fall in different banks.
"""
from __future__ import annotations

import kerneldsl as kd

from .options import AttentionSetupError, BlackboxAcceleratedStrategy
from .problem import Problem
from .scores import LOG2E, logit2

TAU = 8.0  # lazy rescale threshold in log2 units: P <= 256, safe in f16 and bf16


def _round16(n: int) -> int:
    return (n + 15) // 16 * 16


@kd.kernel
def flash_mma_kernel(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, out: kd.Tensor, mask: kd.Tensor, bias: kd.Tensor,
                     scale: kd.f32, softcap: kd.f32, causal: kd.i32, D: kd.Const[int], DV: kd.Const[int],
                     SQT: kd.Const[int], SKT: kd.Const[int], HAS_MASK: kd.Const[bool], HAS_BIAS: kd.Const[bool],
                     SOFTCAP: kd.Const[bool], HOLD: kd.Const[bool]):
    DT = q.dtype
    U = kd.cube_units()
    NP = kd.plane_count()
    t = kd.unit_pos_x()
    BQ = 16 * SQT * NP
    BK = 16 * NP * SKT
    DP = (D + 15) // 16 * 16
    DVP = (DV + 15) // 16 * 16
    KS = DP + 8    # row strides in shared memory (padded by 8 elements)
    VS = DVP + 8
    PS = BK + 8
    OS = DVP + 4
    FS = max(BK + 4, OS) if HOLD else BK + 4
    NDC = DP // 16
    NDV = DVP // 16
    NKT = BK // 16

    Hq = q.shape[1]
    Hkv = k.shape[1]
    G = Hq // Hkv
    Sq = q.shape[2]
    Skv = k.shape[2]
    b = kd.cube_pos_y() // Hkv
    hk = kd.cube_pos_y() % Hkv
    rows = G * Sq
    r0 = kd.cube_pos_x() * BQ
    prow = kd.plane_pos() * (16 * SQT)  # first row of this plane's tiles
    off = Skv - Sq

    if HOLD:
        kq_sh = kd.shared(DT, max(BQ, BK) * KS)  # the Q block first (into fragments), then each K tile
        q_sh = kq_sh
        f_sh = kd.shared(kd.f32, BQ * FS)        # scores, and O on its trips through memory
        o_sh = f_sh
    else:
        kq_sh = kd.shared(DT, BK * KS)
        q_sh = kd.shared(DT, BQ * KS)            # Q stays here; fragments reloaded per product
        f_sh = kd.shared(kd.f32, BQ * FS)
        o_sh = kd.shared(kd.f32, BQ * OS)        # O stays here
    v_sh = kd.shared(DT, BK * VS)
    p_sh = kd.shared(DT, BQ * PS)
    m_sh = kd.shared(kd.f32, BQ)
    l_sh = kd.shared(kd.f32, BQ)
    a_sh = kd.shared(kd.f32, BQ)
    flag_sh = kd.shared(kd.i32, 1)

    # ---- the Q block (zero rows past the end, zero columns past D), row statistics
    for e0 in range(0, BQ * DP, U):
        e = e0 + t
        r = e // DP
        d = e % DP
        rg = kd.min(r0 + r, rows - 1)
        x = kd.f32(q[b, hk * G + rg // Sq, rg % Sq, kd.min(d, D - 1)])
        if e < BQ * DP:
            q_sh[r * KS + d] = kd.select((r0 + r < rows) & (d < D), x, kd.f32(0))
    for r1 in range(0, BQ, U):
        if r1 + t < BQ:
            m_sh[r1 + t] = -kd.inf
            l_sh[r1 + t] = 0.0
            if not HOLD:
                for e in range(DVP):
                    o_sh[(r1 + t) * OS + e] = 0.0
    if t == 0:
        flag_sh[0] = 0
    kd.sync_cube()
    qf = ()
    of = ()
    if HOLD:
        for n in kd.unroll(SQT * NDC):
            qf = qf + (kd.fragment_a(DT, 16, 16, 16),)
        for n in kd.unroll(SQT * NDV):
            of = of + (kd.fragment_acc(16, 16, 16),)
        for qt in kd.unroll(SQT):
            for dc in kd.unroll(NDC):
                kd.load_fragment(qf[qt * NDC + dc], q_sh, (prow + qt * 16) * KS + dc * 16, KS)
            for dv in kd.unroll(NDV):
                kd.fill_fragment(of[qt * NDV + dv], 0.0)
    qa = kd.fragment_a(DT, 16, 16, 16)
    kf = kd.fragment_b(DT, 16, 16, 16, layout="col")
    sacc = kd.fragment_acc(16, 16, 16)
    pf = kd.fragment_a(DT, 16, 16, 16)
    vf = kd.fragment_b(DT, 16, 16, 16)
    kd.sync_cube()

    # keys any row of this cube can see: all, or up to the last visible one (causal)
    r_last = kd.min(r0 + BQ, rows) - 1
    i_max = kd.select(r0 // Sq == r_last // Sq, r_last % Sq, Sq - 1)
    kv_end = Skv
    if causal != 0:
        kv_end = kd.max(kd.min(i_max + off + 1, Skv), 0)

    for j0 in range(0, kv_end, BK):
        # ---- stage K and V tiles (zero past the end)
        for e0 in range(0, BK * DP, U):
            e = e0 + t
            r = e // DP
            d = e % DP
            x = kd.f32(k[b, hk, kd.min(j0 + r, Skv - 1), kd.min(d, D - 1)])
            if e < BK * DP:
                kq_sh[r * KS + d] = kd.select((j0 + r < Skv) & (d < D), x, kd.f32(0))
        for e0 in range(0, BK * DVP, U):
            e = e0 + t
            r = e // DVP
            d = e % DVP
            x = kd.f32(v[b, hk, kd.min(j0 + r, Skv - 1), kd.min(d, DV - 1)])
            if e < BK * DVP:
                v_sh[r * VS + d] = kd.select((j0 + r < Skv) & (d < DV), x, kd.f32(0))
        kd.sync_cube()

        # ---- S = Q·Kᵀ for this plane's rows (run-time loops over key tiles: compile time
        # stays flat in the tile size)
        for qt in kd.unroll(SQT):
            for kt in range(NKT):
                kd.fill_fragment(sacc, 0.0)
                if HOLD:
                    for dc in kd.unroll(NDC):
                        kd.load_fragment(kf, kq_sh, kt * 16 * KS + dc * 16, KS)
                        kd.mma(sacc, qf[qt * NDC + dc], kf)
                else:
                    for dc in range(NDC):
                        kd.load_fragment(qa, q_sh, (prow + qt * 16) * KS + dc * 16, KS)
                        kd.load_fragment(kf, kq_sh, kt * 16 * KS + dc * 16, KS)
                        kd.mma(sacc, qa, kf)
                kd.store_fragment(f_sh, (prow + qt * 16) * FS + kt * 16, sacc, FS)
        kd.sync_cube()

        # ---- logits, lazy running max, P (one unit per row)
        for r1 in range(0, BQ, U):
            r = r1 + t
            if r < BQ:
                rg = kd.min(r0 + r, rows - 1)
                h = hk * G + rg // Sq
                i = rg % Sq
                lim = Skv
                if causal != 0:
                    lim = i + off
                ctx = (mask, bias, b, h, i, lim, Skv, softcap, LOG2E)
                mx = -kd.inf
                for c in range(BK):
                    x = logit2(f_sh[r * FS + c] * scale, j0 + c, ctx, HAS_MASK, HAS_BIAS, SOFTCAP)
                    f_sh[r * FS + c] = x
                    mx = kd.max(mx, x)
                m_old = m_sh[r]
                m_new = kd.max(m_old, mx)
                m = m_old
                alpha = kd.f32(1)
                if m_old == -kd.inf:
                    m = m_new  # nothing accumulated yet: no rescale needed
                elif m_new > m_old + TAU:
                    m = m_new
                    alpha = kd.exp2(m_old - m_new)
                    if HOLD:
                        flag_sh[0] = 1
                    else:
                        for e in range(DVP):
                            o_sh[r * OS + e] = o_sh[r * OS + e] * alpha
                mu = kd.select(m == -kd.inf, kd.f32(0), m)
                total = kd.f32(0)
                for c in range(BK):
                    pv = kd.exp2(f_sh[r * FS + c] - mu)
                    p_sh[r * PS + c] = pv
                    total += pv
                l_sh[r] = l_sh[r] * alpha + total
                m_sh[r] = m
                a_sh[r] = alpha
        kd.sync_cube()

        if HOLD:
            # ---- rare: rescale the accumulators (the whole cube decides together)
            if flag_sh[0] != 0:
                for qt in kd.unroll(SQT):
                    for dv in kd.unroll(NDV):
                        kd.store_fragment(f_sh, (prow + qt * 16) * FS + dv * 16, of[qt * NDV + dv], FS)
                kd.sync_cube()
                if t == 0:
                    flag_sh[0] = 0
                for e0 in range(0, BQ * DVP, U):
                    e = e0 + t
                    if e < BQ * DVP:
                        r = e // DVP
                        f_sh[r * FS + e % DVP] = f_sh[r * FS + e % DVP] * a_sh[r]
                kd.sync_cube()
                for qt in kd.unroll(SQT):
                    for dv in kd.unroll(NDV):
                        kd.load_fragment(of[qt * NDV + dv], f_sh, (prow + qt * 16) * FS + dv * 16, FS)
            # ---- O += P·V
            for qt in kd.unroll(SQT):
                for kt in range(NKT):
                    kd.load_fragment(pf, p_sh, (prow + qt * 16) * PS + kt * 16, PS)
                    for dv in kd.unroll(NDV):
                        kd.load_fragment(vf, v_sh, kt * 16 * VS + dv * 16, VS)
                        kd.mma(of[qt * NDV + dv], pf, vf)
        else:
            # ---- O += P·V, the accumulator tile loaded from and stored back to shared memory
            for qt in kd.unroll(SQT):
                for dv in range(NDV):
                    kd.load_fragment(sacc, o_sh, (prow + qt * 16) * OS + dv * 16, OS)
                    for kt in range(NKT):
                        kd.load_fragment(pf, p_sh, (prow + qt * 16) * PS + kt * 16, PS)
                        kd.load_fragment(vf, v_sh, kt * 16 * VS + dv * 16, VS)
                        kd.mma(sacc, pf, vf)
                    kd.store_fragment(o_sh, (prow + qt * 16) * OS + dv * 16, sacc, OS)
        kd.sync_cube()

    # ---- out = O / l
    if HOLD:
        for qt in kd.unroll(SQT):
            for dv in kd.unroll(NDV):
                kd.store_fragment(o_sh, (prow + qt * 16) * FS + dv * 16, of[qt * NDV + dv], FS)
        kd.sync_cube()
    OST = FS if HOLD else OS
    for e0 in range(0, BQ * DV, U):
        e = e0 + t
        r = e // DV
        rg = r0 + r
        if (e < BQ * DV) & (rg < rows):
            lr = l_sh[r]
            out[b, hk * G + rg // Sq, rg % Sq, e % DV] = o_sh[r * OST + e % DV] * kd.select(lr > 0.0, 1.0 / lr, 0.0)


def hold_q(p: Problem) -> bool:
    """Keep Q and the output accumulators in fragments for the whole kernel (registers on
    tensor-core devices). Where the primitive is emulated both stay in shared memory and
    fragments are loaded per product in run-time loops: the emulation's code (and compile
    time) then stays small whatever the head dimension."""
    return bool(p.runtime.capabilities.mma_native)


def shared_bytes(p: Problem, tiling: BlackboxAcceleratedStrategy, hold: bool) -> int:
    """Shared memory the kernel declares for this problem and tiling."""
    isz = p.dtype.itemsize
    bq = 16 * tiling.seq_q * tiling.num_planes
    bk = 16 * tiling.num_planes * tiling.seq_kv
    dp, dvp = _round16(p.D), _round16(p.Dv)
    if hold:
        qk, f32s = max(bq, bk) * (dp + 8), bq * max(bk + 4, dvp + 4)
    else:
        qk, f32s = (bq + bk) * (dp + 8), bq * (bk + 4 + dvp + 4)
    return isz * (qk + bk * (dvp + 8) + bq * (bk + 8)) + 4 * (f32s + 3 * bq) + 4


def check(p: Problem, tiling: BlackboxAcceleratedStrategy) -> None:
    """Raise AttentionSetupError unless this runtime can run the strategy on p with `tiling`."""
    caps = p.runtime.capabilities
    if p.dtype.name not in ("f16", "bf16"):
        raise AttentionSetupError(f"FlashBlackboxAccelerated is unavailable for {p.dtype.name} input: the matrix "
                                  f"primitive takes F16/BF16 (use FlashUnit or Fallback for F32)")
    if p.dtype not in caps.mma_dtypes or (16, 16, 16) not in caps.mma_shapes:
        raise AttentionSetupError(f"FlashBlackboxAccelerated is unavailable on {caps.device_name}: no m16n16k16 "
                                  f"{p.dtype.name} matrix primitive")
    for field in ("num_planes", "seq_q", "seq_kv"):
        value = getattr(tiling, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise AttentionSetupError(f"BlackboxAcceleratedStrategy.{field} must be an int >= 1, got {value!r}")
    units = tiling.num_planes * caps.plane_dim
    if units > caps.max_cube_units:
        raise AttentionSetupError(f"BlackboxAcceleratedStrategy.num_planes={tiling.num_planes} needs {units} units "
                                  f"per cube; {caps.device_name} allows {caps.max_cube_units}")
    need = shared_bytes(p, tiling, hold_q(p))
    if need > caps.max_shared_bytes:
        raise AttentionSetupError(f"BlackboxAcceleratedStrategy{(tiling.num_planes, tiling.seq_q, tiling.seq_kv)} "
                                  f"with D={p.D}, Dv={p.Dv} needs {need} bytes of shared memory; "
                                  f"{caps.device_name} has {caps.max_shared_bytes}: use fewer planes or shorter tiles")


def default_tiling(p: Problem) -> BlackboxAcceleratedStrategy:
    """The tiling used for the plain enum member: 4 planes, 64-key steps, smaller when the
    head dimension makes the tiles too large for the device's shared memory."""
    caps = p.runtime.capabilities
    for tiling in (BlackboxAcceleratedStrategy(4, 1, 1), BlackboxAcceleratedStrategy(2, 1, 1),
                   BlackboxAcceleratedStrategy(1, 1, 1)):
        if shared_bytes(p, tiling, hold_q(p)) <= caps.max_shared_bytes:
            return tiling
    return BlackboxAcceleratedStrategy(1, 1, 1)


def run(p: Problem, out, dummy_mask, dummy_bias, tiling: BlackboxAcceleratedStrategy, hold: bool | None = None) -> None:
    """Launch the fused matrix-primitive kernel for a validated problem (check() first).
    `hold` overrides where Q lives (tests run both variants everywhere)."""
    plane = p.runtime.capabilities.plane_dim
    units = tiling.num_planes * plane
    bq = 16 * tiling.seq_q * tiling.num_planes
    rows = p.group * p.Sq
    grid = ((rows + bq - 1) // bq, p.B * p.Hkv)
    flash_mma_kernel[grid, units](
        p.q, p.k, p.v, out, p.mask if p.mask is not None else dummy_mask,
        p.bias if p.bias is not None else dummy_bias, p.scale, p.softcap or 1.0, int(p.causal), p.D, p.Dv,
        tiling.seq_q, tiling.seq_kv, p.mask is not None, p.bias is not None, p.softcap is not None,
        hold_q(p) if hold is None else bool(hold))
