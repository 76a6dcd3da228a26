"""rudnn.paged_attention next to PyTorch on the runtimes this machine has.

    python -m benchmarks.paged_attention [--quick] [--reps N] [--runtimes cpu,cuda]

cuda (torch with CUDA): bf16, pages shuffled in the pool.
  - GQA decode: B 64, Hq 32, Hkv 8, L 4096, D 128, page 16, next to torch's sdpa on the
    equivalent dense cache (cuDNN backend, enable_gqa=True) and to "gather pages + sdpa"
    (index the pages into a dense cache, then sdpa), both of which read the same KV bytes.
  - mixed batch: 32 decode rows (L 2048) and 4 prefill sequences of 512 tokens in one call,
    next to the same two sdpa calls (decode batch; causal prefill batch), dense and gathered.
  - MLA decode: B 32, 128 heads, R 512, P 64, L 4096, page 64, next to unfused PyTorch on the
    dense latent cache (bmm -> softmax -> bmm).
  GB/s counts the KV bytes each call must read once (the cache rows the queries see).
cpu: f32 GQA decode (B 4, Hq 32, Hkv 8, L 1024, D 128, page 16) next to torch's CPU sdpa on
the dense cache (enable_gqa=True). Every row checks our result against the baseline.
--mla-sweep (cuda): the MLA decode case over the launch shapes of the kernel tuning.py picks for it.
--mla-only (cuda): the MLA decode case alone (for a profiler).
--mla-kernels mla_roles,mla_group (cuda): the MLA decode case on each named kernel (forced) and
unfused PyTorch, alternating, --rounds rounds of medians of --reps: ranges over the rounds.
--gqa-only (cuda): the GQA decode case alone (for a profiler). --kernel NAME: force a kernel for attention.
--sweep (cuda): the GQA decode case over the launch shapes of the kernel tuning.py picks for it
(decode_mma.py: planes, ring stages, split waves; decode_kernel.py: KV heads per cube, lanes per
token, vector bytes, tokens in flight, planes, split waves), to pick tuning.py's defaults.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import kerneldsl as kd
from rudnn.paged_attention import DevicePlan, HostPlan, tuning
from rudnn.paged_attention.problem import validate_attention, validate_mla

from .common import best_time, machine, median_device_time, median_torch_cuda_time, table


def torch_or_none():
    # torch's OpenMP threads otherwise spin after each call and take the cores from the cpu
    # runtime's workers timed next (interleaved timing; as benchmarks/ctc.py)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch
    except ImportError:
        return None
    return torch


def decode_plan(rng, B, L, page, extra=0):
    """B sequences of L tokens on shuffled pages (plus `extra` spare pages); one decode row each."""
    per = -(-L // page)
    order = rng.permutation(B * per + extra)
    tables = [[int(x) for x in order[b * per:(b + 1) * per]] for b in range(B)]
    return HostPlan(page, B * per + extra, tables, [L] * B, list(range(B)), [L - 1] * B)


def dense_index(host, B):
    """Page ids [B, pages per sequence] of the plan's first B sequences (all of equal table length)."""
    return np.array([host.tables[b] for b in range(B)], np.int64)


def row(name, shape, t, base, kv_bytes, err, extra=()):
    cells = [name, shape, f"{t * 1e3:.3f}"]
    for b in base:
        cells.append(f"{b * 1e3:.3f}" if b else "-")
    for b in base:
        cells.append(f"{b / t:.2f}" if b else "-")
    return tuple(cells) + (f"{kv_bytes / t / 1e9:.0f}", f"{err:.1e}") + tuple(extra)


# ------------------------------------------------------------------ cuda
def bench_cuda(rt, quick, reps, gqa_only=False, mla_only=False):
    torch = torch_or_none()
    if torch is None or not torch.cuda.is_available():
        print("\ncuda runtime present but torch has no CUDA: skipping the GPU table")
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    tt = lambda fn: median_torch_cuda_time(torch, fn, reps)  # noqa: E731
    rng = np.random.default_rng(0)
    dev, bf = "cuda", torch.bfloat16

    def cudnn(fn):
        try:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return tt(fn)
        except RuntimeError as e:
            print(f"  cuDNN sdpa unavailable: {str(e).splitlines()[0]}")
            return None

    def to_kd(*xs):
        torch.cuda.synchronize()  # kerneldsl runs on its own stream: inputs must be ready
        return [kd.from_dlpack(x) for x in xs]

    def ours_time(fn):
        t = median_device_time(rt, fn, reps)
        out = fn()
        rt.synchronize()
        return t, torch.from_dlpack(out).float()

    if mla_only:  # one case: what a profiler run (ncu -k regex:mla) needs
        bench_mla(torch, rng, quick, tt, ours_time)
        return

    # GQA decode
    B, Hq, Hkv, L, D, page = (8, 32, 8, 1024, 128, 16) if quick else (64, 32, 8, 4096, 128, 16)
    host = decode_plan(rng, B, L, page)
    kp = torch.randn(host.pages, page, Hkv, D, device=dev, dtype=bf)
    vp = torch.randn(host.pages, page, Hkv, D, device=dev, dtype=bf)
    q = torch.randn(B, Hq, D, device=dev, dtype=bf)
    idx = torch.from_numpy(dense_index(host, B)).to(dev)

    def gather(pages):
        return pages[idx].reshape(B, -1, Hkv, D)[:, :L].transpose(1, 2)  # [B, Hkv, L, D]

    kd_, vd_ = gather(kp).contiguous(), gather(vp).contiguous()
    scale = D ** -0.5
    want = sdpa(q[:, :, None], kd_, vd_, scale=scale, enable_gqa=True)[:, :, 0].float()
    tq, tk, tv = to_kd(q, kp, vp)
    plan = DevicePlan.upload(host, tq)
    t, got = ours_time(lambda: plan.attention(tq, tk, tv, scale, True))
    dense = cudnn(lambda: sdpa(q[:, :, None], kd_, vd_, scale=scale, enable_gqa=True))
    gathered = tt(lambda: sdpa(q[:, :, None], gather(kp), gather(vp), scale=scale, enable_gqa=True))
    kv = 2 * B * L * Hkv * D * 2
    rows = [row("GQA decode", f"B{B} Hq{Hq} Hkv{Hkv} L{L} D{D} p{page}", t, (dense, gathered), kv,
                (got - want).abs().max().item(), (f"{kv / t / 3.4e12:.0%}",))]
    if gqa_only:  # one case: what a profiler run (ncu -k regex:decode) needs
        print(table(rows, ["case", "shape", "ours ms", "sdpa dense (cuDNN) ms", "gather+sdpa ms", "x dense",
                           "x gather", "KV GB/s", "err", "of 3.4 TB/s"]))
        return

    # mixed prefill + decode
    Bd, Ld, Bp, Lp = (4, 512, 2, 128) if quick else (32, 2048, 4, 512)
    perd, perp = Ld // page, Lp // page
    order = rng.permutation(Bd * perd + Bp * perp)
    tables = [[int(x) for x in order[b * perd:(b + 1) * perd]] for b in range(Bd)]
    base = Bd * perd
    tables += [[int(x) for x in order[base + b * perp:base + (b + 1) * perp]] for b in range(Bp)]
    seq = list(range(Bd)) + [Bd + b for b in range(Bp) for _ in range(Lp)]
    pos = [Ld - 1] * Bd + [p for _ in range(Bp) for p in range(Lp)]
    mixed = HostPlan(page, len(order), tables, [Ld] * Bd + [Lp] * Bp, seq, pos)
    kp2 = torch.randn(mixed.pages, page, Hkv, D, device=dev, dtype=bf)
    vp2 = torch.randn(mixed.pages, page, Hkv, D, device=dev, dtype=bf)
    q2 = torch.randn(len(seq), Hq, D, device=dev, dtype=bf)
    idx_d = torch.tensor(tables[:Bd], device=dev)
    idx_p = torch.tensor(tables[Bd:], device=dev)

    def pages_to_dense(pages, ix, n, S):
        return pages[ix].reshape(n, S, Hkv, D).transpose(1, 2)

    def baseline(dense_kv):
        kd_d, vd_d, kd_p, vd_p = dense_kv()
        a = sdpa(q2[:Bd, :, None], kd_d, vd_d, scale=scale, enable_gqa=True)
        qp_ = q2[Bd:].reshape(Bp, Lp, Hq, D).transpose(1, 2)
        b = sdpa(qp_, kd_p, vd_p, scale=scale, is_causal=True, enable_gqa=True)
        return a, b

    gathered_kv = lambda: (pages_to_dense(kp2, idx_d, Bd, Ld), pages_to_dense(vp2, idx_d, Bd, Ld),  # noqa: E731
                           pages_to_dense(kp2, idx_p, Bp, Lp), pages_to_dense(vp2, idx_p, Bp, Lp))
    fixed = [x.contiguous() for x in gathered_kv()]
    a, b = baseline(lambda: fixed)
    want2 = torch.cat([a[:, :, 0], b.transpose(1, 2).reshape(Bp * Lp, Hq, D)]).float()
    tq2, tk2, tv2 = to_kd(q2, kp2, vp2)
    plan2 = DevicePlan.upload(mixed, tq2)
    t, got = ours_time(lambda: plan2.attention(tq2, tk2, tv2, scale, True))
    dense = cudnn(lambda: baseline(lambda: fixed))
    gathered = tt(lambda: baseline(gathered_kv))
    kv = 2 * (Bd * Ld + Bp * Lp) * Hkv * D * 2
    rows.append(row("mixed prefill+decode", f"{Bd}x dec L{Ld} + {Bp}x pre {Lp}", t, (dense, gathered), kv,
                    (got - want2).abs().max().item(), ("",)))
    print(f"\ncuda runtime: {rt.capabilities.device_name}; torch {torch.__version__}; bf16; medians of {reps}; "
          f"target: GQA decode >= 3.4 TB/s of KV read")
    print(table(rows, ["case", "shape", "ours ms", "sdpa dense (cuDNN) ms", "gather+sdpa ms", "x dense",
                       "x gather", "KV GB/s", "err", "of 3.4 TB/s"]))

    bench_mla(torch, rng, quick, tt, ours_time)


def bench_mla(torch, rng, quick, tt, ours_time):
    """The MLA decode row: ours (the kernel tuning.py picks) next to unfused PyTorch."""
    case = MlaCase(torch, rng, quick)
    want = case.unfused().float()
    torch.cuda.synchronize()
    t, got = ours_time(case.ours)
    base = tt(case.unfused)
    print(f"\nMLA decode (target: >= 2x unfused PyTorch; kernel {case.kernel})")
    print(table([row("MLA decode", case.shape, t, (base,), case.kv, (got - want).abs().max().item())],
                ["case", "shape", "ours ms", "unfused torch ms", "x unfused", "KV GB/s", "err"]))


class MlaCase:
    """The MLA decode case (B 32, 128 heads, R 512, P 64, L 4096, page 64; smaller with
    --quick) on shuffled pages: our call, unfused PyTorch on the dense latent cache (bmm ->
    softmax -> bmm), the KV bytes read once."""

    def __init__(self, torch, rng, quick):
        B, H, R, P, L, page = (4, 128, 512, 64, 1024, 64) if quick else (32, 128, 512, 64, 4096, 64)
        dev, bf = "cuda", torch.bfloat16
        host = decode_plan(rng, B, L, page)
        lat = torch.randn(host.pages, page, 1, R, device=dev, dtype=bf)
        kpe = torch.randn(host.pages, page, 1, P, device=dev, dtype=bf)
        q = torch.randn(B, H, R, device=dev, dtype=bf)
        qp = torch.randn(B, H, P, device=dev, dtype=bf)
        idx = torch.from_numpy(dense_index(host, B)).to(dev)
        self.lat_d = lat[idx].reshape(B, L, R).contiguous()
        self.kv_d = torch.cat([self.lat_d, kpe[idx].reshape(B, L, P)], dim=2).contiguous()  # [B, L, R + P]
        self.qcat = torch.cat([q, qp], dim=2)
        self.scale = (128 + 64) ** -0.5
        self.torch = torch
        torch.cuda.synchronize()  # kerneldsl runs on its own stream: inputs must be ready
        self.args = [kd.from_dlpack(x) for x in (q, qp, lat, kpe)]
        self.plan = DevicePlan.upload(host, self.args[0])
        self.shape = f"B{B} H{H} R{R} P{P} L{L} p{page}"
        self.kv = B * L * (R + P) * 2
        self.kernel = tuning.kernel_for(validate_mla(self.plan, *self.args, self.scale, True))

    def ours(self):
        return self.plan.mla(*self.args, self.scale, True)

    def unfused(self):
        torch = self.torch
        s = torch.bmm(self.qcat, self.kv_d.transpose(1, 2)) * self.scale
        return torch.bmm(torch.softmax(s.float(), dim=-1).to(torch.bfloat16), self.lat_d)


MLA_KERNELS = ("mla_roles", "mla_group", "mla_mma", "general")  # what --mla-kernels may force


def bench_mla_kernels(rt, quick, reps, kernels, rounds):
    """The MLA decode case on each kernel of `kernels` (tuning.kernel_for forced; a kernel whose
    launch does not fit says so) and unfused PyTorch, in alternation, `rounds` rounds of medians
    of `reps`: min..max of the rounds, the ratio of the medians, the error against torch."""
    torch = torch_or_none()
    if torch is None or not torch.cuda.is_available():
        print("\ncuda runtime present but torch has no CUDA: no MLA kernel comparison")
        return
    case = MlaCase(torch, np.random.default_rng(0), quick)
    want = case.unfused().float()
    saved = tuning.kernel_for
    times = {k: [] for k in kernels}
    errs, base = {}, []
    try:
        for _ in range(rounds):
            for k in kernels:
                tuning.kernel_for = lambda p, k=k: k
                try:
                    times[k].append(median_device_time(rt, case.ours, reps))
                    got = case.ours()
                    rt.synchronize()  # torch reads the result on its own stream
                    errs[k] = (torch.from_dlpack(got).float() - want).abs().max().item()
                except Exception as e:  # noqa: BLE001 - reported, the others still run
                    errs[k] = f"failed: {str(e).splitlines()[0][:100]}"
            base.append(median_torch_cuda_time(torch, case.unfused, reps))
    finally:
        tuning.kernel_for = saved
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    rows = [("unfused torch", f"{min(base) * 1e3:.3f}..{max(base) * 1e3:.3f}", "1.00", "-", "-")]
    for k in kernels:
        if not times[k]:
            rows.append((k, "-", "-", "-", errs.get(k, "-")))
            continue
        t = med(times[k])
        rows.append((k, f"{min(times[k]) * 1e3:.3f}..{max(times[k]) * 1e3:.3f}", f"{med(base) / t:.2f}",
                     f"{case.kv / t / 1e9:.0f}", f"{errs[k]:.1e}" if isinstance(errs[k], float) else errs[k]))
    print(f"\nMLA decode kernels: {case.shape} bf16, {rounds} rounds of medians of {reps} (alternating); "
          f"default choice {case.kernel}")
    print(table(rows, ["kernel", "ms (min..max)", "x unfused (medians)", "KV GB/s", "err"]))


def sweep_knobs(knobs, shapes, measure) -> list:
    """Rows (*shape, *measure()) with tuning's `knobs` set to each shape in turn (restored
    afterwards), printed as they come; a shape that fails to compile or launch (registers,
    shared memory) is a printed line, not the end of the sweep."""
    saved = [getattr(tuning, n) for n in knobs]
    rows = []
    try:
        for shape in shapes:
            for n, value in zip(knobs, shape):
                setattr(tuning, n, value)
            try:
                rows.append((*shape, *measure()))
            except Exception as e:  # noqa: BLE001 - reported, and the sweep goes on
                print("  ", shape, f"failed: {str(e).splitlines()[0][:120]}", flush=True)
                continue
            print("  ", rows[-1], flush=True)
    finally:
        for n, value in zip(knobs, saved):
            setattr(tuning, n, value)
    return rows


def sweep_mla(rt, quick, reps):
    """The MLA decode case on the kernel tuning.py picks for it over its launch shapes
    (mla_roles.py: tokens a step, ring stages, split waves; mla_group.py: R slices at least
    and at most, tokens per step, ring stages, split waves;
    mla_mma.py: head groups, R parts, tiles per step, ring stages, split waves): device time,
    KV GB/s, and the error against the unfused PyTorch result."""
    torch = torch_or_none()
    if torch is None or not torch.cuda.is_available():
        print("\ncuda runtime present but torch has no CUDA: no sweep")
        return
    case = MlaCase(torch, np.random.default_rng(0), quick)
    want = case.unfused().float()
    base = median_torch_cuda_time(torch, case.unfused, reps)
    if case.kernel == "mla_roles":
        knobs = ("MLA_ROLES_TOKENS", "MLA_ROLES_STAGES", "MLA_ROLES_WAVES")
        shapes = [(32, 4, 1), (32, 3, 1), (64, 2, 1), (32, 2, 1), (16, 6, 1), (16, 4, 1), (32, 4, 2)]
    elif case.kernel == "mla_group":
        knobs = ("MLA_GROUP_MIN_GROUPS", "MLA_GROUP_MAX_GROUPS", "MLA_GROUP_TOKENS", "MLA_GROUP_STAGES",
                 "MLA_GROUP_WAVES")
        shapes = [(1, 2, 16, 4, 1), (4, 4, 16, 4, 1), (4, 4, 16, 3, 1), (4, 4, 32, 3, 1), (1, 2, 16, 6, 1),
                  (4, 4, 16, 4, 2), (1, 2, 32, 3, 1)]
    else:
        knobs = ("MLA_HEAD_GROUPS", "MLA_R_PARTS", "MLA_TILES", "MLA_STAGES", "MLA_WAVES")
        shapes = [(2, 4, 2, 3, 2), (2, 4, 1, 3, 1), (2, 4, 1, 4, 2), (2, 4, 2, 2, 2), (1, 4, 1, 4, 4), (4, 4, 1, 2, 2)]

    def measure():
        t = median_device_time(rt, case.ours, reps)
        err = (torch.from_dlpack(case.ours()).float() - want).abs().max().item()
        return f"{t * 1e3:.3f}", f"{base / t:.2f}", f"{case.kv / t / 1e9:.0f}", f"{err:.1e}"

    rows = sweep_knobs(knobs, shapes, measure)
    rows.sort(key=lambda r: float(r[len(knobs)]))
    print(f"\nMLA kernel sweep ({case.kernel}): {case.shape} bf16, unfused torch {base * 1e3:.3f} ms, "
          f"medians of {reps}")
    print(table(rows, [n.removeprefix("MLA_").lower() for n in knobs] + ["ms", "x unfused", "KV GB/s", "err"]))


def sweep_decode(rt, quick, reps):
    """The GQA decode case on the decode kernel for each (KV heads per cube, lanes per token,
    vector bytes, tokens per step, planes, waves of the automatic split): device time and KV GB/s."""
    torch = torch_or_none()
    if torch is None or not torch.cuda.is_available():
        print("\ncuda runtime present but torch has no CUDA: no sweep")
        return
    rng = np.random.default_rng(0)
    B, Hq, Hkv, L, D, page = (8, 32, 8, 1024, 128, 16) if quick else (64, 32, 8, 4096, 128, 16)
    host = decode_plan(rng, B, L, page)
    bf = torch.bfloat16
    kp = torch.randn(host.pages, page, Hkv, D, device="cuda", dtype=bf)
    vp = torch.randn(host.pages, page, Hkv, D, device="cuda", dtype=bf)
    q = torch.randn(B, Hq, D, device="cuda", dtype=bf)
    torch.cuda.synchronize()
    tq, tk, tv = (kd.from_dlpack(x) for x in (q, kp, vp))
    plan = DevicePlan.upload(host, tq)
    scale = D ** -0.5
    ref = plan.attention(tq, tk, tv, scale, True).numpy().astype(np.float32)
    kv = 2 * B * L * Hkv * D * 2
    if tuning.kernel_for(validate_attention(plan, tq, tk, tv, scale, True)) == "decode_mma":
        knobs = ("DECODE_MMA_PLANES", "DECODE_MMA_STAGES", "DECODE_MMA_WAVES")
        shapes = [(1, None, 4), (1, 5, 4), (1, 4, 4), (1, 3, 4), (1, 2, 4), (1, 6, 4), (1, 4, 8), (1, 5, 8),
                  (2, 2, 4), (2, 3, 4), (2, 4, 4), (2, 4, 8), (4, 2, 4), (4, 2, 8)]
    else:
        knobs = ("DECODE_HEAD_BLOCK", "DECODE_MAX_LANES", "DECODE_VECTOR_BYTES", "DECODE_TOKENS_PER_STEP",
                 "DECODE_PLANES", "DECODE_WAVES")
        shapes = [(1, 16, 16, 2, 8, 2), (8, 16, 16, 2, 8, 2), (8, 16, 16, 2, 8, 3), (8, 16, 16, 2, 8, 4),
                  (8, 8, 16, 4, 8, 2), (8, 16, 16, 4, 8, 2), (8, 16, 16, 1, 8, 2), (8, 32, 8, 4, 8, 2),
                  (8, 32, 8, 4, 8, 3), (8, 16, 16, 2, 16, 2), (2, 16, 16, 2, 8, 2), (4, 16, 16, 2, 8, 2)]

    def measure():
        t = median_device_time(rt, lambda: plan.attention(tq, tk, tv, scale, True), reps)
        err = float(np.abs(plan.attention(tq, tk, tv, scale, True).numpy().astype(np.float32) - ref).max())
        return f"{t * 1e3:.3f}", f"{kv / t / 1e9:.0f}", f"{err:.1e}"

    rows = sweep_knobs(knobs, shapes, measure)
    rows.sort(key=lambda r: float(r[len(knobs)]))
    print(f"\ndecode kernel sweep: B{B} Hq{Hq} Hkv{Hkv} L{L} D{D} p{page} bf16, medians of {reps}")
    print(table(rows, [n.removeprefix("DECODE_").lower() for n in knobs] + ["ms", "KV GB/s", "err vs default"]))


# ------------------------------------------------------------------ cpu
def bench_cpu(rt, quick, reps):
    torch = torch_or_none()
    rng = np.random.default_rng(0)
    B, Hq, Hkv, L, D, page = (2, 8, 2, 256, 64, 16) if quick else (4, 32, 8, 1024, 128, 16)
    host = decode_plan(rng, B, L, page)
    kp = rng.standard_normal((host.pages, page, Hkv, D)).astype(np.float32)
    vp = rng.standard_normal((host.pages, page, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((B, Hq, D)).astype(np.float32)
    idx = dense_index(host, B)
    kd_ = np.ascontiguousarray(kp[idx].reshape(B, L, Hkv, D).transpose(0, 2, 1, 3))
    vd_ = np.ascontiguousarray(vp[idx].reshape(B, L, Hkv, D).transpose(0, 2, 1, 3))
    scale = D ** -0.5
    tq, tk, tv = rt.tensor(q), rt.tensor(kp), rt.tensor(vp)
    plan = DevicePlan.upload(host, tq)
    fns = {"ours": lambda: plan.attention(tq, tk, tv, scale, True).numpy()}
    got = fns["ours"]()
    err = float("nan")
    if torch is not None:
        sdpa = torch.nn.functional.scaled_dot_product_attention
        a, b, c = torch.from_numpy(q)[:, :, None], torch.from_numpy(kd_), torch.from_numpy(vd_)
        fns["torch"] = lambda: sdpa(a, b, c, scale=scale, enable_gqa=True)
        err = float(np.abs(got - fns["torch"]()[:, :, 0].numpy()).max())
    # ours and torch in turn, best of each: on a shared machine both get the quiet moments
    best = {key: float("inf") for key in fns}
    for _ in range(reps):
        for key, fn in fns.items():
            best[key] = min(best[key], best_time(fn, 1, 0))
    t, base = best["ours"], best.get("torch")
    kv = 2 * B * L * Hkv * D * 4
    print(f"\ncpu runtime: {rt.capabilities.device_name}; {machine()}; torch threads: "
          f"{torch.get_num_threads() if torch else '-'}; best of {reps}, interleaved; target >= 0.7x torch sdpa")
    print(table([row("GQA decode f32", f"B{B} Hq{Hq} Hkv{Hkv} L{L} D{D} p{page}", t, (base,), kv, err)],
                ["case", "shape", "ours ms", "torch sdpa (dense) ms", "x torch", "KV GB/s", "err"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes: a quick check that everything runs")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sweep", action="store_true", help="cuda: the decode kernel over launch shapes")
    ap.add_argument("--mla-sweep", action="store_true", help="cuda: the MLA decode kernel over launch shapes")
    ap.add_argument("--mla-only", action="store_true", help="cuda: only the MLA decode case (for profiling)")
    ap.add_argument("--mla-kernels", default=None,
                    help="cuda: the MLA case on each of these kernels (comma-separated, e.g. mla_roles,mla_group)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --mla-kernels")
    ap.add_argument("--gqa-only", action="store_true", help="cuda: only the GQA decode case (for profiling)")
    ap.add_argument("--kernel", choices=("decode_mma", "decode", "decode_lanes", "general"), default=None,
                    help="force this kernel for attention (default: tuning.kernel_for's choice)")
    ap.add_argument("--runtimes", default=None, help="comma-separated subset of the available runtimes")
    args = ap.parse_args(argv)
    if args.kernel:
        tuning.kernel_for = lambda p, kind=args.kernel: kind if p.P == 0 else "general"
    mla_kernels = [k.strip() for k in (args.mla_kernels or "").split(",") if k.strip()]
    unknown = [k for k in mla_kernels if k not in MLA_KERNELS]
    if unknown:
        ap.error(f"--mla-kernels: unknown {unknown}; MLA kernels: {', '.join(MLA_KERNELS)}")
    avail = kd.available_runtimes()
    names = [n.strip() for n in args.runtimes.split(",")] if args.runtimes else avail
    t0 = time.perf_counter()
    for name in names:
        if name.split(":")[0] not in avail:
            print(f"{name}: not available here ({avail})")
        elif name.startswith("cuda") and args.mla_kernels:
            bench_mla_kernels(kd.runtime(name), args.quick, args.reps, mla_kernels, args.rounds)
        elif name.startswith("cuda") and args.mla_sweep:
            sweep_mla(kd.runtime(name), args.quick, args.reps)
        elif name.startswith("cuda") and args.sweep:
            sweep_decode(kd.runtime(name), args.quick, args.reps)
        elif name.startswith("cuda"):
            bench_cuda(kd.runtime(name), args.quick, args.reps, args.gqa_only, args.mla_only)
        elif name.startswith("cpu"):
            bench_cpu(kd.runtime(name), args.quick, args.reps)
        else:
            print(f"\n{name}: no paged-attention table for this runtime (the cpu and cuda tables cover the targets)")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
