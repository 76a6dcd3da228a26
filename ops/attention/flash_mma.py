"""`FlashBlackboxAccelerated`: fused attention with the inner products on the matrix
primitive (m16n16k16 fragments, f16/bf16 in, f32 accumulate: tensor cores on CUDA, an
exact emulation elsewhere).

A cube of `num_planes` planes owns BQ = 16·seq_q·num_planes rows of the flattened
[group heads x Sq] query block of one KV head; each plane owns seq_q tiles of 16 rows.
Each step stages BK = 16·num_planes·seq_kv keys of K and V in shared memory (zero-padded
past the end and to whole 16-wide head chunks; 16-byte vector copies where the layout
allows) and then:

1. S = Q·Kᵀ per plane on fragments, stored to shared f32;
2. each plane walks its own rows, lanes across keys: the shared logit rule (scale,
   softcap, mask, causal, bias), the row max (`plane_max`), P = exp2(logit - m) written in
   the input dtype, the row sum (`plane_sum`). The running max is updated lazily (as in
   FlashAttention-4): m only moves when the row max exceeds it by more than TAU (log2
   units), so P <= 2^TAU and the output accumulators are rescaled only on those rare steps;
3. O += P·V on fragments.

Where Q and O live is a compile-time choice (`hold_q`): on tensor-core devices they stay
in fragments (registers) for the whole kernel, and a rescale is a round trip of O through
shared memory decided for the whole cube; where the primitive is emulated they stay in
shared memory and fragments are loaded per product in run-time loops, which keeps the
emulation's code, and its compile time, small whatever D is.

At the end O is divided by l (rows with no visible key give zeros). Fragment offsets and
strides are multiples of 8 elements (16-byte rows, `ldmatrix`-friendly), and shared rows
are padded by 8 elements so the 16 rows of a tile fall in different banks.
"""
from __future__ import annotations

import kerneldsl as kd

from . import flash_group, flash_regs, flash_roles
from .blocks import cube_block, fetch_kv, fetch_rows, key_range
from .options import BlackboxAcceleratedStrategy
from .problem import AttentionSetupError, Problem
from .scores import LOG2E, logit2

TAU = 8.0  # lazy rescale threshold in log2 units: P <= 256, safe in f16 and bf16


def _round16(n: int) -> int:
    return (n + 15) // 16 * 16


@kd.func
def keep(x):
    """x materialised in a fresh local (a value that must not change when a name is reused)."""
    return x


@kd.kernel
def flash_mma_kernel(q: kd.Tensor, k: kd.Tensor, v: kd.Tensor, out: kd.Tensor, mask: kd.Tensor, bias: kd.Tensor,
                     scale: kd.f32, softcap: kd.f32, causal: kd.i32, D: kd.Const[int], DV: kd.Const[int],
                     SQT: kd.Const[int], SKT: kd.Const[int], HAS_MASK: kd.Const[bool], HAS_BIAS: kd.Const[bool],
                     SOFTCAP: kd.Const[bool], HOLD: kd.Const[bool], VEC: kd.Const[bool]):
    DT = q.dtype
    U = kd.cube_units()
    NP = kd.plane_count()
    t = kd.unit_pos_x()
    P = kd.PLANE_DIM
    lane = kd.lane_pos()
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
    NCH = (BK + P - 1) // P  # key chunks of a row per lane

    b, hk, G, Sq, Skv, rows, r0 = cube_block(q, k, BQ)
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
    fetch_rows(q_sh, 0, KS, q, b, hk, r0, rows, G, Sq, BQ, D, DP, False, True, 32)
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
    sf = ()
    pfs = ()
    if HOLD:
        for n in kd.unroll(SQT * NDC):
            qf = qf + (kd.fragment_a(DT, 16, 16, 16),)
        for n in kd.unroll(SQT * NDV):
            of = of + (kd.fragment_acc(16, 16, 16),)
        for n in kd.unroll(SQT):
            sf = sf + (kd.fragment_acc(16, 16, 16),)
            pfs = pfs + (kd.fragment_a(DT, 16, 16, 16),)
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
    kv_end = key_range(r0, BQ, rows, Sq, Skv, causal)[1]

    for j0 in range(0, kv_end, BK):
        # ---- stage K and V tiles (zero past the end)
        fetch_kv(kq_sh, 0, KS, k, b, hk, j0, Skv, BK, D, DP, VEC, 32)
        fetch_kv(v_sh, 0, VS, v, b, hk, j0, Skv, BK, DV, DVP, VEC, 32)
        kd.async_commit()
        kd.async_wait(0)
        kd.sync_cube()

        # ---- S = Q·Kᵀ for this plane's rows (run-time loops over key tiles: compile time
        # stays flat in the tile size)
        if HOLD:  # each K fragment serves all of the plane's query tiles
            for kt in range(NKT):
                for qt in kd.unroll(SQT):
                    kd.fill_fragment(sf[qt], 0.0)
                for dc in kd.unroll(NDC):
                    kd.load_fragment(kf, kq_sh, kt * 16 * KS + dc * 16, KS)
                    for qt in kd.unroll(SQT):
                        kd.mma(sf[qt], qf[qt * NDC + dc], kf)
                for qt in kd.unroll(SQT):
                    kd.store_fragment(f_sh, (prow + qt * 16) * FS + kt * 16, sf[qt], FS)
        else:
            for qt in kd.unroll(SQT):
                for kt in range(NKT):
                    kd.fill_fragment(sacc, 0.0)
                    for dc in range(NDC):
                        kd.load_fragment(qa, q_sh, (prow + qt * 16) * KS + dc * 16, KS)
                        kd.load_fragment(kf, kq_sh, kt * 16 * KS + dc * 16, KS)
                        kd.mma(sacc, qa, kf)
                    kd.store_fragment(f_sh, (prow + qt * 16) * FS + kt * 16, sacc, FS)
        kd.sync_cube()

        # ---- logits, lazy running max, P: each plane walks its own rows, lanes across keys
        for rr in range(16 * SQT):
            r = prow + rr
            rg = kd.min(r0 + r, rows - 1)
            h = hk * G + rg // Sq
            i = rg % Sq
            lim = Skv
            if causal != 0:
                lim = i + off
            ctx = (mask, bias, b, h, i, lim, Skv, softcap, LOG2E)
            xs = ()  # this lane's logits of the row, kept in registers between the two passes
            mx = -kd.inf
            for n in kd.unroll(NCH):
                xs = xs + (keep(logit2(f_sh[r * FS + kd.min(n * P + lane, BK - 1)] * scale,
                                       j0 + kd.min(n * P + lane, BK - 1), ctx, HAS_MASK, HAS_BIAS, SOFTCAP)),)
                mx = kd.max(mx, xs[n])
            mx = kd.plane_max(mx)
            m_old = m_sh[r]
            m_new = kd.max(m_old, mx)
            m = m_old
            alpha = kd.f32(1)
            if m_old == -kd.inf:
                m = m_new  # nothing accumulated yet: no rescale needed
            elif m_new > m_old + TAU:
                m = m_new
                alpha = kd.exp2_fast(m_old - m_new)
            mu = kd.select(m == -kd.inf, kd.f32(0), m)
            total = kd.f32(0)
            for n in kd.unroll(NCH):
                if n * P + lane < BK:
                    pv = kd.exp2_fast(xs[n] - mu)
                    p_sh[r * PS + n * P + lane] = pv
                    total += pv
            total = kd.plane_sum(total)
            if lane == 0:
                l_sh[r] = l_sh[r] * alpha + total
                m_sh[r] = m
                a_sh[r] = alpha
                if alpha != 1.0:
                    if HOLD:
                        flag_sh[0] = 1
            if not HOLD:
                if alpha != 1.0:
                    for e0 in range(0, DVP, P):
                        e = e0 + lane
                        if e < DVP:
                            o_sh[r * OS + e] = o_sh[r * OS + e] * alpha
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
            # ---- O += P·V (each V fragment serves all of the plane's query tiles)
            for kt in range(NKT):
                for qt in kd.unroll(SQT):
                    kd.load_fragment(pfs[qt], p_sh, (prow + qt * 16) * PS + kt * 16, PS)
                for dv in kd.unroll(NDV):
                    kd.load_fragment(vf, v_sh, kt * 16 * VS + dv * 16, VS)
                    for qt in kd.unroll(SQT):
                        kd.mma(of[qt * NDV + dv], pfs[qt], vf)
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


REGISTER_MAX_DIM = 128  # head dims up to this run the register-softmax kernel on tensor cores


def use_registers(p: Problem) -> bool:
    """Run the register-softmax kernel (flash_regs: S, P and O stay in fragments, tiles come
    by async copies) rather than this module's shared-memory one? Where the primitive is
    native and the head dims fit the registers (Q, O and S fragments of one plane grow with
    D and Dv: past 128 they would spill). Elsewhere this module's kernel with Q and O in
    shared memory keeps the emulation's code, and its compile time, small."""
    return bool(p.runtime.capabilities.mma_native) and max(p.D, p.Dv) <= REGISTER_MAX_DIM


def kernel_for(p: Problem, tiling: BlackboxAcceleratedStrategy) -> str:
    """Which kernel `run` launches: 'roles' (flash_roles: a producer group issuing bulk copies,
    consumer groups multiplying) where the device has bulk copies and native group products,
    the tiling has a producer and one or two consumer groups and the inputs suit the copy
    engine (flash_roles.usable); else 'group' (flash_group: the group primitive reads Q, K and
    V from shared memory itself) where the device's group products are native (wgmma) and
    the tiling has whole groups; else 'registers' (flash_regs) where the primitive is native
    and the head dims fit; else 'shared' (this module's kernel)."""
    if flash_roles.usable(p, tiling):
        return "roles"
    if p.runtime.capabilities.group_mma_native and flash_group.fits(p, tiling):
        return "group"
    return "registers" if use_registers(p) else "shared"


def needed_shared_bytes(p: Problem, tiling: BlackboxAcceleratedStrategy, kernel: str | None = None) -> int:
    """Shared memory of the kernel `run` launches for p with this tiling."""
    kernel = kernel or kernel_for(p, tiling)
    if kernel == "roles":
        return flash_roles.shared_bytes(p, tiling)
    if kernel == "group":
        return flash_group.shared_bytes(p, tiling)
    if kernel == "registers":
        return flash_regs.shared_bytes(p, tiling)
    return shared_bytes(p, tiling, hold_q(p))


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
    need = needed_shared_bytes(p, tiling)
    if need > caps.max_shared_bytes:
        raise AttentionSetupError(f"BlackboxAcceleratedStrategy{(tiling.num_planes, tiling.seq_q, tiling.seq_kv)} "
                                  f"with D={p.D}, Dv={p.Dv} needs {need} bytes of shared memory; "
                                  f"{caps.device_name} has {caps.max_shared_bytes}: use fewer planes or shorter tiles")


# the roles kernel's default: two consumer groups of 64 query rows and a producer, 128-key
# steps (FlashAttention-3's shape for head dim 128), and the head dims it is the default for.
# Measured on the H200 (bf16, events, session 19, benchmarks/RESULTS.md), x cuDNN, roles / group
# kernel: D 128 [4, 16, 4096] 0.92 / 0.72 full, 0.85 / 0.72 causal; [16, 16, 1024] 0.65 / 0.60,
# 0.60 / 0.61. D 64 [4, 32, 4096] 0.87 / 0.83, 0.81 / 0.82; [16, 32, 1024] 0.66 / 0.75, 0.57 / 0.71:
# D 64 keeps the group kernel (several of its small cubes share an SM). One consumer group,
# (8, 1, 1) or (8, 1, 2): 0.49-0.63x at S 4096
ROLES_TILING = BlackboxAcceleratedStrategy(12, 1, 1)
ROLES_DIMS = (128,)


def default_tiling(p: Problem) -> BlackboxAcceleratedStrategy:
    """The tiling used for the plain enum member. Measured on the H200 (benchmarks/RESULTS.md,
    session 18): with wgmma, (4, 1, 1), the group kernel with one group of 64 rows a cube and
    64-key steps, for every head dim it takes (Q, K and V tiles in the 128-byte layout where
    the dims are whole 64-column bands): 0.56-0.84x cuDNN over D 64/128, S 1024/4096, full
    and causal, ahead of (8, 1, 1) and of the register kernel in every case; else, where the
    register kernel runs, (4, 2, 2): 4 planes of two query tiles (32 rows each,
    FlashAttention-2's shape) and 64-key steps; else 4 planes and 64-key steps. Smaller when
    the tiles do not fit the device's shared memory. Where the roles kernel serves p (bulk
    copies, native group products, flash_roles.usable: issue 23), ROLES_TILING before all."""
    caps = p.runtime.capabilities
    first = [BlackboxAcceleratedStrategy(4, 2, 2)] if use_registers(p) else []
    if caps.group_mma_native and max(p.D, p.Dv) <= flash_group.MAX_DIM:
        first = [BlackboxAcceleratedStrategy(4, 1, 1)] + first
    if max(p.D, p.Dv) in ROLES_DIMS and flash_roles.usable(p, ROLES_TILING):
        first = [ROLES_TILING] + first
    for tiling in first + [BlackboxAcceleratedStrategy(4, 1, 1), BlackboxAcceleratedStrategy(2, 1, 1),
                           BlackboxAcceleratedStrategy(1, 1, 1)]:
        if needed_shared_bytes(p, tiling) <= caps.max_shared_bytes:
            return tiling
    return BlackboxAcceleratedStrategy(1, 1, 1)


def _vector_rows(t, dim: int) -> bool:
    """Rows of t can be copied as aligned 16-byte vectors of 8 elements."""
    if dim % 8 or (t.strides[3] != 1 and t.shape[3] > 1) or any(st % 8 for st in t.strides[:3]):
        return False
    raw = t.buffer.raw
    addr = raw if isinstance(raw, int) else getattr(getattr(raw, "ctypes", None), "data", None)
    return addr is None or (addr + t.offset * t.dtype.itemsize) % 16 == 0


def run(p: Problem, out, dummy_mask, dummy_bias, tiling: BlackboxAcceleratedStrategy, hold: bool | None = None,
        vec: bool | None = None, kernel: str | None = None) -> None:
    """Launch the fused matrix-primitive kernel for a validated problem (check() first).
    `kernel` ('roles', 'group', 'registers', 'shared'; see kernel_for), `hold` and `vec` override
    which kernel runs, where Q lives (shared-memory kernel) and how tiles are copied (tests
    run every variant on every runtime)."""
    if vec is None:
        vec = _vector_rows(p.k, p.D) and _vector_rows(p.v, p.Dv)
    kernel = kernel or kernel_for(p, tiling)
    if kernel == "roles":
        flash_roles.run(p, out, dummy_mask, dummy_bias, tiling)
        return
    if kernel == "group":
        flash_group.run(p, out, dummy_mask, dummy_bias, tiling, bool(vec and _vector_rows(p.q, p.D)))
        return
    if kernel == "registers":
        flash_regs.run(p, out, dummy_mask, dummy_bias, tiling, bool(vec and _vector_rows(p.q, p.D)))
        return
    plane = p.runtime.capabilities.plane_dim
    units = tiling.num_planes * plane
    bq = 16 * tiling.seq_q * tiling.num_planes
    rows = p.group * p.Sq
    grid = ((rows + bq - 1) // bq, p.B * p.Hkv)
    flash_mma_kernel[grid, units](
        p.q, p.k, p.v, out, p.mask if p.mask is not None else dummy_mask,
        p.bias if p.bias is not None else dummy_bias, p.scale, p.softcap or 1.0, int(p.causal), p.D, p.Dv,
        tiling.seq_q, tiling.seq_kv, p.mask is not None, p.bias is not None, p.softcap is not None,
        hold_q(p) if hold is None else bool(hold), bool(vec))
