"""rudnn.paged_attention (SPEC §4) on every runtime: the worked case of the issue, random plans
(ragged lengths, empty sequences, shared pages, page sizes 1/4/16, GQA ratios 1/4/8, large
D and P) against the float64 reference, MLA, split == unsplit, the automatic split, append
writing exactly its slots, PyTorch's SDPA on the dense cache, each kernel forced on small odd
plans (the decode kernels, the MLA kernels on the matrix primitive and on roles) and the
launch choices;
the plan/error rules are in test_paged_attention_errors.py."""
import numpy as np
import pytest

import kerneldsl as kd
from rudnn.paged_attention import DevicePlan, HostPlan, SplitWorkspace
from rudnn.paged_attention import tuning

from reference import paged_attention as ref

pytestmark = pytest.mark.feature("paged_attention")

TOL = {"f32": (2e-5, 2e-5), "f16": (4e-3, 4e-3), "bf16": (3e-2, 3e-2)}


def random_plan(rng, page_size, sequences=4, max_len=40, prefill=5):
    """A plan dict: ragged lengths (sequence 1 empty), sequence 2 sharing sequence 0's first
    pages, a spare trailing table entry here and there, physical pages shuffled; rows: a
    decode row per sequence plus `prefill` consecutive rows of sequence 0."""
    lengths = [int(x) for x in rng.integers(1, max_len, sequences)]
    lengths[1] = 0
    need = [-(-n // page_size) for n in lengths]
    total = sum(need) + sequences
    ids = iter(int(x) for x in rng.permutation(total))
    tables = []
    for s in range(sequences):
        shared = min(need[0], need[s]) // 2 if s == 2 else 0
        tables.append((tables[0][:shared] if shared else []) + [next(ids) for _ in range(need[s] - shared + (s % 2))])
    seq_ids, positions = [], []
    for s, n in enumerate(lengths):
        seq_ids.append(s)
        positions.append(max(n - 1, 0) if n else 3)
    p0 = max(lengths[0] - prefill, 0)
    seq_ids += [0] * (lengths[0] - p0)
    positions += list(range(p0, lengths[0]))
    return dict(page_size=page_size, pages=total, tables=tables, lengths=lengths, sequence_ids=seq_ids,
                positions=positions)


def upload(plan: dict, like) -> DevicePlan:
    return DevicePlan.upload(HostPlan(**plan), like)


def tensors(runtime, rng, dtype, *shapes):
    npd = kd.as_dtype(dtype).np
    arrays = [rng.standard_normal(s).astype(npd) for s in shapes]
    return arrays, [runtime.tensor(a) for a in arrays]


def assert_matches(out, expected, dtype):
    rtol, atol = TOL[dtype]
    got = out.numpy().astype(np.float64)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------- the worked case
WORKED = dict(page_size=4, pages=4, tables=[[3, 0], [2]], lengths=[6, 2], sequence_ids=[0, 1, 0],
              positions=[4, 1, 5])


def worked_inputs(runtime, dtype="f32"):
    slots = np.arange(16, dtype=np.float32).reshape(4, 4, 1, 1)  # v = physical slot index page*4 + slot
    q = runtime.tensor(np.zeros((3, 2, 3), np.float32), dtype)
    k = runtime.tensor(np.zeros((4, 4, 1, 3), np.float32), dtype)
    v = runtime.tensor(np.broadcast_to(slots, (4, 4, 1, 2)).copy(), dtype)
    return q, k, v


def test_worked_case(runtime):
    q, k, v = worked_inputs(runtime)
    plan = upload(WORKED, q)
    want = np.array([10.8, 8.5, 55 / 6])
    out = plan.attention(q, k, v, 0.1, True).numpy()
    assert out.shape == (3, 2, 2)
    np.testing.assert_allclose(out, np.broadcast_to(want[:, None, None], out.shape), rtol=1e-6)
    for splits in (2, 3, 8, 32):
        split = plan.attention_with_workspace(q, k, v, 0.1, True, SplitWorkspace(q, 3, 2, 2, splits)).numpy()
        np.testing.assert_allclose(split, out, rtol=1e-6, atol=1e-6)
    full = plan.attention(q, k, v, 0.1, False).numpy()[:, 0, 0]  # not causal: every token of the sequence
    np.testing.assert_allclose(full, [(12 + 13 + 14 + 15 + 0 + 1) / 6, 8.5, (12 + 13 + 14 + 15 + 0 + 1) / 6],
                               rtol=1e-6)


# ---------------------------------------------------------------------------- random plans
@pytest.mark.parametrize("page_size,hq,hkv,d,dv,dtype", [(1, 3, 3, 8, 5, "f32"), (4, 8, 2, 16, 16, "f16"),
                                                         (16, 8, 1, 24, 8, "bf16"), (4, 12, 3, 7, 9, "f32")])
def test_random_plans(runtime, rng, page_size, hq, hkv, d, dv, dtype):
    plan = random_plan(rng, page_size)
    Q = len(plan["positions"])
    (q, k, v), (tq, tk, tv) = tensors(runtime, rng, dtype, (Q, hq, d), (plan["pages"], page_size, hkv, d),
                                      (plan["pages"], page_size, hkv, dv))
    dev = upload(plan, tq)
    for causal in (True, False):
        out = dev.attention(tq, tk, tv, 0.3, causal)
        assert out.shape == (Q, hq, dv) and out.dtype is kd.as_dtype(dtype)
        assert_matches(out, ref.paged_attention(plan, q, k, v, 0.3, causal), dtype)


def test_large_head_dims(runtime, rng):
    """D = Dv = 1024 (the SPEC's limit) with a GQA ratio of 8: few heads fit a cube's shared memory."""
    plan = random_plan(rng, 4, sequences=2, max_len=12, prefill=2)
    Q = len(plan["positions"])
    (q, k, v), (tq, tk, tv) = tensors(runtime, rng, "f32", (Q, 8, 1024), (plan["pages"], 4, 1, 1024),
                                      (plan["pages"], 4, 1, 1024))
    out = upload(plan, tq).attention(tq, tk, tv, 0.05, True)
    assert_matches(out, ref.paged_attention(plan, q, k, v, 0.05, True), "f32")


@pytest.mark.parametrize("h,r,p,dtype", [(16, 32, 8, "f32"), (5, 64, 16, "bf16"), (4, 16, 256, "f32")])
def test_mla(runtime, rng, h, r, p, dtype):
    plan = random_plan(rng, 4, max_len=30)
    Q = len(plan["positions"])
    (q, qp, lat, kp), (tq, tqp, tlat, tkp) = tensors(runtime, rng, dtype, (Q, h, r), (Q, h, p),
                                                     (plan["pages"], 4, 1, r), (plan["pages"], 4, 1, p))
    dev = upload(plan, tq)
    out = dev.mla(tq, tqp, tlat, tkp, 0.1, True)
    assert out.shape == (Q, h, r)
    expected = ref.paged_mla(plan, q, qp, lat, kp, 0.1, True)
    assert_matches(out, expected, dtype)
    split = dev.mla_with_workspace(tq, tqp, tlat, tkp, 0.1, True, SplitWorkspace(tq, Q, h, r, 3))
    assert_matches(split, expected, dtype)


@pytest.mark.parametrize("splits", [2, 3, 8, 32])
def test_split_equals_unsplit(runtime, rng, splits):
    plan = random_plan(rng, 4, max_len=60)
    Q = len(plan["positions"])
    (q, k, v), (tq, tk, tv) = tensors(runtime, rng, "f32", (Q, 4, 16), (plan["pages"], 4, 1, 16),
                                      (plan["pages"], 4, 1, 12))
    dev = upload(plan, tq)
    ws = SplitWorkspace(tq, Q, 4, 12, splits)
    for causal in (True, False):
        whole = dev.attention(tq, tk, tv, 0.2, causal).numpy()
        split = dev.attention_with_workspace(tq, tk, tv, 0.2, causal, ws).numpy()  # the workspace is reused
        np.testing.assert_allclose(split, whole, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(split, ref.paged_attention(plan, q, k, v, 0.2, causal), rtol=2e-5, atol=2e-5)


def test_long_rows_split_automatically(runtime, rng, monkeypatch):
    """A single long decode row with no workspace takes the split path (counted launches of
    the merge kernel) and still matches the reference."""
    from rudnn.paged_attention import device_plan
    plan = dict(page_size=16, pages=40, tables=[list(range(39, -1, -1))], lengths=[630], sequence_ids=[0],
                positions=[629])
    (q, k, v), (tq, tk, tv) = tensors(runtime, rng, "f32", (1, 2, 8), (40, 16, 1, 8), (40, 16, 1, 8))
    merges = []
    real = device_plan.merge_kernel

    class Counting:
        def __getitem__(self, launch):
            merges.append(launch)
            return real[launch]

    monkeypatch.setattr(device_plan, "merge_kernel", Counting())
    out = upload(plan, tq).attention(tq, tk, tv, 0.3, True)
    assert len(merges) == 1
    assert_matches(out, ref.paged_attention(plan, q, k, v, 0.3, True), "f32")


def test_auto_split_choice():
    """Few cubes and long rows split (up to 32, >= 256 tokens a split); many cubes or short rows do not."""
    class Caps:
        compute_units = 132

    class P:
        queries, Hkv = 4, 8
        runtime = type("Rt", (), {"capabilities": Caps})()

    lay = tuning.Launch(64, 4, 4, 1)
    assert tuning.auto_splits(P, lay, 4096) == 9  # 32 cubes, 264 wanted
    assert tuning.auto_splits(P, lay, 300) == 1
    P.queries = 64
    assert tuning.auto_splits(P, lay, 4096) == 1
    P.queries, P.Hkv = 1, 1
    assert tuning.auto_splits(P, lay, 100000) == 32


# ---------------------------------------------------------------------------- append
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_append_writes_exactly_its_slots(runtime, rng, dtype):
    plan = dict(page_size=4, pages=8, tables=[[5, 1, 7], [2], [6, 0]], lengths=[10, 3, 5], sequence_ids=[0, 1, 2, 0],
                positions=[9, 2, 4, 8])
    (nk, nv, kc, vc), (tnk, tnv, tkc, tvc) = tensors(runtime, rng, dtype, (4, 2, 6), (4, 2, 3), (8, 4, 2, 6),
                                                     (8, 4, 2, 3))
    dev = upload(plan, tnk)
    rk, rv = dev.append(tnk, tnv, tkc, tvc)
    assert rk is tkc and rv is tvc
    np.testing.assert_array_equal(tkc.numpy(), ref.append(plan, nk, kc))
    np.testing.assert_array_equal(tvc.numpy(), ref.append(plan, nv, vc))


def test_decode_after_append_sees_the_new_token(runtime, rng):
    """Append a token, then attend causally from its position: the new K/V take part."""
    plan = dict(page_size=4, pages=3, tables=[[2, 0]], lengths=[6], sequence_ids=[0], positions=[5])
    (q, nk, nv, kc, vc), (tq, tnk, tnv, tkc, tvc) = tensors(runtime, rng, "f32", (1, 2, 8), (1, 1, 8), (1, 1, 8),
                                                           (3, 4, 1, 8), (3, 4, 1, 8))
    dev = upload(plan, tq)
    dev.append(tnk, tnv, tkc, tvc)
    expected = ref.paged_attention(plan, q, ref.append(plan, nk, kc), ref.append(plan, nv, vc), 0.4, True)
    assert_matches(dev.attention(tq, tkc, tvc, 0.4, True), expected, "f32")


# ---------------------------------------------------------------------------- zero rows, inputs unchanged
def test_zero_queries_return_empty(runtime):
    plan = dict(page_size=4, pages=2, tables=[[0, 1]], lengths=[5], sequence_ids=[], positions=[])
    q = runtime.zeros((0, 2, 8))
    dev = upload(plan, q)
    k = runtime.zeros((2, 4, 1, 8))
    out = dev.attention(q, k, k, 1.0, True)
    assert out.shape == (0, 2, 8)
    assert dev.mla(q, runtime.zeros((0, 2, 3)), k, runtime.zeros((2, 4, 1, 3)), 1.0, False).shape == (0, 2, 8)
    new = runtime.zeros((0, 1, 8))
    assert dev.append(new, new, k, k) == (k, k)


def test_zero_query_heads_return_empty_without_launching(runtime, monkeypatch):
    """Hq = 0 (a multiple of any Hkv): empty results, as for no queries, and nothing launched."""
    from family_checks import refuse_launches
    plan = dict(page_size=4, pages=2, tables=[[0, 1]], lengths=[5], sequence_ids=[0, 0, 0], positions=[2, 3, 4])
    dev = upload(plan, runtime.zeros((1,)))
    k = runtime.zeros((2, 4, 1, 8))
    refuse_launches(monkeypatch)
    assert dev.attention(runtime.zeros((3, 0, 8)), k, runtime.zeros((2, 4, 1, 6)), 1.0, True).shape == (3, 0, 6)
    assert dev.mla(runtime.zeros((3, 0, 8)), runtime.zeros((3, 0, 3)), k, runtime.zeros((2, 4, 1, 3)), 1.0,
                   False).shape == (3, 0, 8)


def test_inputs_unchanged(runtime, rng):
    plan = random_plan(rng, 4)
    Q = len(plan["positions"])
    (q, k, v), ts = tensors(runtime, rng, "f16", (Q, 2, 8), (plan["pages"], 4, 1, 8), (plan["pages"], 4, 1, 8))
    upload(plan, ts[0]).attention(*ts, 0.5, True)
    for before, t in zip((q, k, v), ts):
        np.testing.assert_array_equal(t.numpy().view(np.uint16), before.view(np.uint16))


# ---------------------------------------------------------------------------- PyTorch on the dense cache
def test_matches_torch_sdpa_on_dense_cache(runtime, rng):
    torch = pytest.importorskip("torch", reason="PyTorch (the oracle extra) is not installed")
    F = torch.nn.functional
    B, Hq, Hkv, L, D, ps = 3, 8, 2, 21, 16, 4
    per = -(-L // ps)
    order = rng.permutation(B * per)
    plan = dict(page_size=ps, pages=B * per, tables=[[int(x) for x in order[b * per:(b + 1) * per]] for b in range(B)],
                lengths=[L] * B, sequence_ids=list(range(B)), positions=[L - 1] * B)
    (q, k, v), (tq, tk, tv) = tensors(runtime, rng, "f32", (B, Hq, D), (B * per, ps, Hkv, D), (B * per, ps, Hkv, D))
    dense_k = np.stack([k[plan["tables"][b]].reshape(per * ps, Hkv, D)[:L] for b in range(B)])  # [B, L, Hkv, D]
    dense_v = np.stack([v[plan["tables"][b]].reshape(per * ps, Hkv, D)[:L] for b in range(B)])
    want = F.scaled_dot_product_attention(torch.from_numpy(q)[:, :, None], torch.from_numpy(dense_k).transpose(1, 2),
                                          torch.from_numpy(dense_v).transpose(1, 2), scale=0.25, enable_gqa=True)
    out = upload(plan, tq).attention(tq, tk, tv, 0.25, True)
    np.testing.assert_allclose(out.numpy(), want[:, :, 0].numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_wide_key_loads(runtime, rng, monkeypatch, dtype):
    """The vector-load path for K and kp (what GPUs take), forced on every runtime, so it is
    checked here and compiled for CUDA by the codegen check too."""
    monkeypatch.setattr(tuning, "vector_width", lambda p, keys, dim: 8 if dim % 8 == 0 and dim else 1)
    plan = random_plan(rng, 4, max_len=20)
    Q = len(plan["positions"])
    (q, qp, lat, kp), ts = tensors(runtime, rng, dtype, (Q, 4, 16), (Q, 4, 8), (plan["pages"], 4, 1, 16),
                                   (plan["pages"], 4, 1, 8))
    out = upload(plan, ts[0]).mla(*ts, 0.2, True)
    assert_matches(out, ref.paged_mla(plan, q, qp, lat, kp, 0.2, True), dtype)


# ---------------------------------------------------------------------------- the decode kernel, forced
DECODE_CASES = [(4, 4, 64, 64, "f32"), (8, 2, 128, 128, "bf16"), (8, 1, 64, 64, "f16"), (6, 3, 7, 9, "f32")]
# tuning never picks the decode kernel where units are SIMD lanes (the cpu runtime), and the
# cpu compiles its unrolled form in 10-80 s a shape: two shapes and two knobs there; all on the others
SIMD_LANES_SKIP = ("units are SIMD lanes here: the decode kernel runs two of its shapes and two of its launch "
                   "knobs on this runtime (each compiles for 10-80 s); every case runs on the other runtimes")


@pytest.mark.parametrize("hq,hkv,d,dv,dtype", DECODE_CASES)
def test_decode_kernel(runtime, rng, monkeypatch, hq, hkv, d, dv, dtype):
    """decode_kernel.py on every runtime (where tuning would not pick it too): GQA ratios 1, 2,
    4 and 8, D 64/128 and odd, ragged lengths with an empty sequence, causal or not, unsplit
    and split over workspaces of 2 and 5 splits."""
    if runtime.capabilities.units_are_simd_lanes and (hq, hkv, d, dv, dtype) not in DECODE_CASES[:2]:
        pytest.skip(SIMD_LANES_SKIP)
    monkeypatch.setattr(tuning, "kernel_for", lambda p: "decode")
    check_forced_kernel(runtime, rng, hq, hkv, d, dv, dtype, (2, 5))


def check_forced_kernel(runtime, rng, hq, hkv, d, dv, dtype, split_counts):
    """The kernel tuning.kernel_for is patched to give, on a random plan of page size 4,
    causal or not, unsplit and over workspaces of `split_counts` splits; returns the plan
    and its tensors."""
    plan = random_plan(rng, 4, max_len=70, prefill=3)
    Q = len(plan["positions"])
    (q, k, v), (tq, tk, tv) = tensors(runtime, rng, dtype, (Q, hq, d), (plan["pages"], 4, hkv, d),
                                      (plan["pages"], 4, hkv, dv))
    dev = upload(plan, tq)
    for causal in (True, False):
        expected = ref.paged_attention(plan, q, k, v, 0.3, causal)
        assert_matches(dev.attention(tq, tk, tv, 0.3, causal), expected, dtype)
        for splits in split_counts:
            ws = SplitWorkspace(tq, Q, hq, dv, splits)
            assert_matches(dev.attention_with_workspace(tq, tk, tv, 0.3, causal, ws), expected, dtype)
    return plan, dev, (q, k, v), (tq, tk, tv)


@pytest.mark.parametrize("knob,value", [("DECODE_PREFETCH", True), ("DECODE_REGISTER_FLOATS", 16),
                                        ("DECODE_PLANES", 1), ("DECODE_PLANES", 6), ("DECODE_TOKENS_PER_STEP", 1),
                                        ("DECODE_HEAD_BLOCK", 1)])
def test_decode_kernel_shapes(runtime, rng, monkeypatch, knob, value):
    """The decode kernel's other launch shapes: K/V loaded a step ahead, query heads in chunks
    (a small register budget), one plane per KV head, three per KV head, one token a step, one
    KV head per cube."""
    if runtime.capabilities.units_are_simd_lanes and knob not in ("DECODE_PLANES", "DECODE_TOKENS_PER_STEP"):
        pytest.skip(SIMD_LANES_SKIP)
    monkeypatch.setattr(tuning, "kernel_for", lambda p: "decode")
    monkeypatch.setattr(tuning, knob, value)
    check_one_knob(runtime, rng, 0.25)


def check_one_knob(runtime, rng, scale):
    """A random GQA plan (ratio 4, D 32, page 16), causal unsplit and non-causal split over 3,
    against the reference: what a forced kernel with one knob changed must still give."""
    plan = random_plan(rng, 16, max_len=60)
    Q = len(plan["positions"])
    (q, k, v), (tq, tk, tv) = tensors(runtime, rng, "f32", (Q, 8, 32), (plan["pages"], 16, 2, 32),
                                      (plan["pages"], 16, 2, 32))
    dev = upload(plan, tq)
    assert_matches(dev.attention(tq, tk, tv, scale, True), ref.paged_attention(plan, q, k, v, scale, True), "f32")
    ws = SplitWorkspace(tq, Q, 8, 32, 3)
    assert_matches(dev.attention_with_workspace(tq, tk, tv, scale, False, ws),
                   ref.paged_attention(plan, q, k, v, scale, False), "f32")


# ---------------------------------------------------------------------------- the decode kernel on SIMD lanes, forced
@pytest.mark.parametrize("hq,hkv,d,dv,dtype", [(8, 2, 64, 64, "f32"), (6, 3, 7, 9, "f32"), (8, 1, 32, 16, "bf16")])
def test_decode_lanes_kernel(runtime, rng, monkeypatch, hq, hkv, d, dv, dtype):
    """decode_lanes.py (tuning's choice where units are SIMD lanes) on every runtime: GQA ratio
    4 with a block of 2 KV heads a cube, odd dims (one lane, a head a chunk, a block of 3 KV
    heads), ratio 8 in bf16 with Dv < D; causal or not, unsplit and split over 2 and 5."""
    monkeypatch.setattr(tuning, "kernel_for", lambda p: "decode_lanes")
    check_forced_kernel(runtime, rng, hq, hkv, d, dv, dtype, (2, 5))


@pytest.mark.parametrize("kind", ["decode_lanes", "general"])
def test_host_kernels_loop_to_the_plans_longest_share(rng, monkeypatch, kind):
    """The kernels the cpu runtime runs (decode_lanes.py, and paged_kernel.py for MLA and as the
    general kernel) step through tokens up to the plan's longest share, an argument, each row
    skipping the steps past its own: their work is fixed by their arguments, so a small launch
    may run on the calling thread (kerneldsl/loop_bounds.py). Ragged rows (one empty), causal
    or not, unsplit and split over 3, against the reference."""
    from rudnn.paged_attention import decode_lanes, paged_kernel
    monkeypatch.setattr(tuning, "kernel_for", lambda p: kind)
    check_forced_kernel(kd.runtime("cpu"), rng, 4, 2, 16, 8, "f32", (3,))
    kernel = decode_lanes.decode_lanes_kernel if kind == "decode_lanes" else paged_kernel.paged_kernel
    plans = list(kernel._plans.values())
    assert plans and all(p.binary.info.argument_bound for p in plans)


@pytest.mark.parametrize("knob,value", [("LANES_QUERY_FLOATS", 4), ("LANES_MAX_UNITS", 4)])
def test_decode_lanes_shapes(runtime, rng, monkeypatch, knob, value):
    """decode_lanes.py's other shapes: query heads in chunks of one (a small register budget,
    16 tokens a step where lanes are 16), four lanes (a 4-lane tree per score); scores large
    enough (scale 2) that the running max moves after the first step."""
    monkeypatch.setattr(tuning, "kernel_for", lambda p: "decode_lanes")
    monkeypatch.setattr(tuning, knob, value)
    check_one_knob(runtime, rng, 2.0)


# ---------------------------------------------------------------------------- the decode kernel on the matrix primitive, forced
MMA_CASES = [(8, 2, 128, 128, "bf16"), (8, 1, 64, 64, "f16"), (6, 3, 24, 40, "bf16"), (36, 2, 32, 16, "f16")]
MMA_SKIP = ("the matrix primitive is emulated plane-collectively here: one case of decode_mma.py (D 64) on this runtime "
            "(compile time); the others but D 128 run where units are threads, every case where it is native")
MMA_WIDE_SKIP = ("the matrix primitive is emulated here: D 128 (60 s to compile on OpenCL) runs where it is "
                 "native; the emulation runs the other cases (D 64, D and Dv not multiples of 16, two head chunks)")


@pytest.mark.parametrize("hq,hkv,d,dv,dtype", MMA_CASES)
def test_decode_mma_kernel(runtime, rng, monkeypatch, hq, hkv, d, dv, dtype):
    """decode_mma.py on every runtime (tensor cores on CUDA, the emulation elsewhere): GQA
    ratios 4, 8, 2 and 18 (two head chunks, the second partial), D and Dv multiples of 8 but
    not of 16, page size 4 (a 16-token tile spans pages), ragged lengths with an empty
    sequence, causal or not, unsplit and split; then one plane and a two-slot ring."""
    if runtime.capabilities.units_are_simd_lanes and (hq, hkv, d, dv, dtype) != MMA_CASES[1]:
        pytest.skip(MMA_SKIP)
    if not runtime.capabilities.mma_native and (hq, hkv, d, dv, dtype) == MMA_CASES[0]:
        pytest.skip(MMA_WIDE_SKIP)
    monkeypatch.setattr(tuning, "kernel_for", lambda p: "decode_mma")
    plan, dev, (q, k, v), (tq, tk, tv) = check_forced_kernel(runtime, rng, hq, hkv, d, dv, dtype, (3,))
    if not runtime.capabilities.units_are_simd_lanes:
        monkeypatch.setattr(tuning, "DECODE_MMA_PLANES", 1)
        monkeypatch.setattr(tuning, "DECODE_MMA_STAGES", 2)
        assert_matches(dev.attention(tq, tk, tv, 0.3, True), ref.paged_attention(plan, q, k, v, 0.3, True), dtype)


def test_mma_launch_choice(runtime):
    """decode_mma.py takes f16/bf16 attention with rows of whole 16-byte chunks, where the
    matrix primitive runs on hardware; f32, D % 8 != 0 and MLA go elsewhere."""
    plan = upload(dict(page_size=4, pages=2, tables=[[0, 1]], lengths=[5], sequence_ids=[0], positions=[4]),
                  runtime.zeros((1, 1)))
    from rudnn.paged_attention.problem import validate_attention
    for dtype, d, fits in (("bf16", 64, True), ("f16", 24, True), ("f32", 64, False), ("bf16", 12, False)):
        p = validate_attention(plan, runtime.zeros((1, 8, d), dtype), runtime.zeros((2, 4, 2, d), dtype),
                               runtime.zeros((2, 4, 2, d), dtype), 1.0, True)
        lay = tuning.mma_decode_launch(p)
        assert (lay is not None) == fits
        if fits:
            assert (lay.heads, lay.chunks) == (4, 1)
            assert tuning.mma_shared_bytes(p, lay.planes, lay.heads, lay.stages) <= runtime.capabilities.max_shared_bytes
        native = runtime.capabilities.mma_native and fits
        assert (tuning.kernel_for(p) == "decode_mma") == native


def test_mma_ring_depth():
    """The ring is as deep as keeps every cube of an unsplit launch resident (H200-like
    numbers: 132 units of 227 KiB); with more cubes than any depth allows, the default."""
    caps = type("Caps", (), {"compute_units": 132, "max_shared_bytes": 227 * 1024})()
    dt = type("Dt", (), {"itemsize": 2})()

    class P:
        queries, Hkv, D, Dv, dtype, runtime = 64, 8, 128, 128, dt, type("Rt", (), {"capabilities": caps})()

    def resident(stages):
        return 132 * (caps.max_shared_bytes // (tuning.mma_shared_bytes(P, 1, 4, stages) + tuning.SHARED_RESERVED))

    stages = tuning.mma_stages(P, 1, 4, 1)  # 512 cubes
    assert resident(stages) >= 512 and (stages == tuning.DECODE_MMA_MAX_STAGES or resident(stages + 1) < 512)
    assert stages == 5
    P.queries = 8  # 64 cubes: the deepest ring
    assert tuning.mma_stages(P, 1, 4, 1) == tuning.DECODE_MMA_MAX_STAGES
    P.queries = 4096  # 32768 cubes: many waves whatever the depth
    assert tuning.mma_stages(P, 1, 4, 1) == tuning.DECODE_MMA_DEFAULT_STAGES


def test_decode_split_choice():
    """The decode kernel splits long rows as far as DECODE_WAVES cubes per compute unit allow
    (rounded down), each split >= 256 tokens; enough cubes or short rows: no split."""
    class P:
        queries, Hkv, runtime = 64, 8, type("Rt", (), {"capabilities": type("Caps", (), {"compute_units": 132})})()

    lay = tuning.DecodeLaunch(8, 4, 16, 8, 2, 1, False, 8)  # one cube per row
    assert tuning.decode_splits(P, lay, 4096) == 4  # 64 cubes, 264 wanted: 256
    assert tuning.decode_splits(P, lay, 300) == 1
    P.queries = 4
    assert tuning.decode_splits(P, lay, 4096) == 16  # 4096 / 256 tokens
    P.queries = 512
    assert tuning.decode_splits(P, lay, 100000) == 1


def test_kernel_choice(runtime):
    """Attention takes the decode kernel where units are hardware threads, decode_lanes.py
    where they are vector lanes (the cpu runtime; the general kernel for odd head dims there);
    MLA never takes either."""
    plan = upload(dict(page_size=4, pages=2, tables=[[0, 1]], lengths=[5], sequence_ids=[0], positions=[4]),
                  runtime.zeros((1, 1)))
    q = runtime.zeros((1, 8, 64))
    cache = runtime.zeros((2, 4, 2, 64))
    from rudnn.paged_attention.problem import validate_attention, validate_mla
    p = validate_attention(plan, q, cache, cache, 1.0, True)
    lanes = runtime.capabilities.units_are_simd_lanes
    assert tuning.kernel_for(p) == ("decode_lanes" if lanes else "decode")
    odd = runtime.zeros((2, 4, 2, 7))
    if lanes:
        assert tuning.kernel_for(validate_attention(plan, runtime.zeros((1, 8, 7)), odd, odd, 1.0, True)) == "general"
    lat = runtime.zeros((2, 4, 1, 64))
    m = validate_mla(plan, q, runtime.zeros((1, 8, 8)), lat, runtime.zeros((2, 4, 1, 8)), 1.0, True)
    assert tuning.kernel_for(m) not in ("decode", "decode_lanes")


# ---------------------------------------------------------------------------- MLA on the matrix primitive, forced
# (heads, R, P, dtype, page size, head groups, tiles per step): two head chunks (the second partial)
# and two tiles a step, one chunk with 11 rows past the heads, R of three tiles (three R parts),
# page sizes 1/4/16/64
MLA_MMA_CASES = [(20, 64, 8, "f16", 1, 1, 2), (5, 32, 16, "bf16", 4, 1, 1), (24, 48, 24, "bf16", 16, 2, 1),
                 (3, 16, 64, "f16", 64, 1, 1)]
MLA_EMULATED_SKIP = ("the matrix primitive is emulated here and tuning picks {} only where it is native: its first "
                     "case runs on emulating runtimes whose units are threads (compile time: 5-20 s a case), every "
                     "case where the primitive is native")


def emulated_skip(runtime, case, cases, kernel):
    """Skip all but the first case where the matrix primitive is emulated, and that one too
    where units are SIMD lanes (the cpu runtime: the slowest to compile)."""
    caps = runtime.capabilities
    if not caps.mma_native and (case != cases[0] or caps.units_are_simd_lanes):
        pytest.skip(MLA_EMULATED_SKIP.format(kernel))


@pytest.mark.parametrize("h,r,p,dtype,page_size,groups,tiles", MLA_MMA_CASES)
def test_mla_mma_kernel(runtime, rng, monkeypatch, h, r, p, dtype, page_size, groups, tiles):
    """mla_mma.py (tensor cores on CUDA, the emulation elsewhere): see check_forced_mla."""
    emulated_skip(runtime, (h, r, p, dtype, page_size, groups, tiles), MLA_MMA_CASES, "mla_mma.py")
    monkeypatch.setattr(tuning, "kernel_for", lambda prob: "mla_mma")
    monkeypatch.setattr(tuning, "MLA_HEAD_GROUPS", groups)
    monkeypatch.setattr(tuning, "MLA_TILES", tiles)
    check_forced_mla(runtime, rng, h, r, p, dtype, page_size)


def check_forced_mla(runtime, rng, h, r, p, dtype, page_size):
    """The MLA kernel tuning.kernel_for is patched to give, on a random plan of `page_size`
    (ragged lengths, an empty sequence, prefill rows), causal or not, unsplit and over a
    workspace of 3 splits (some empty), against the float64 reference."""
    plan = random_plan(rng, page_size, max_len=50, prefill=3)
    Q = len(plan["positions"])
    (q, qp, lat, kp), (tq, tqp, tlat, tkp) = tensors(runtime, rng, dtype, (Q, h, r), (Q, h, p),
                                                     (plan["pages"], page_size, 1, r), (plan["pages"], page_size, 1, p))
    dev = upload(plan, tq)
    for causal in (True, False):
        expected = ref.paged_mla(plan, q, qp, lat, kp, 0.2, causal)
        assert_matches(dev.mla(tq, tqp, tlat, tkp, 0.2, causal), expected, dtype)
        ws = SplitWorkspace(tq, Q, h, r, 3)
        assert_matches(dev.mla_with_workspace(tq, tqp, tlat, tkp, 0.2, causal, ws), expected, dtype)


# (heads, R, P, dtype, page size, R slices at least, ring stages): two head chunks (the second
# partial), two R slices (and score partials), a four-slot ring; one chunk with 59 rows past the
# heads; page sizes 1/4/16/64
MLA_GROUP_CASES = [(70, 64, 8, "bf16", 4, 2, 4), (5, 64, 16, "bf16", 1, 1, 3), (40, 64, 24, "f16", 64, 2, 3),
                   (3, 128, 64, "f16", 16, 2, 4)]


@pytest.mark.parametrize("h,r,p,dtype,page_size,groups,stages", MLA_GROUP_CASES)
def test_mla_group_kernel(runtime, rng, monkeypatch, h, r, p, dtype, page_size, groups, stages):
    """mla_group.py (wgmma on the H200, mma.sync on other CUDA devices, the emulation
    elsewhere): see check_forced_mla."""
    emulated_skip(runtime, (h, r, p, dtype, page_size, groups, stages), MLA_GROUP_CASES, "mla_group.py")
    monkeypatch.setattr(tuning, "kernel_for", lambda prob: "mla_group")
    monkeypatch.setattr(tuning, "MLA_GROUP_MIN_GROUPS", groups)
    monkeypatch.setattr(tuning, "MLA_GROUP_STAGES", stages)
    check_forced_mla(runtime, rng, h, r, p, dtype, page_size)


# (heads, R, P, dtype, page size, tokens a step): one head chunk, pages of 64 tokens with 32-token
# steps (two steps a page: boxes from the middle of a page), P narrower than its 64-column box
# (zeros from outside the tensor); two head chunks, R of 8 bands, two pages a step (pages of 16;
# test_mla_roles_barrier_order has those on the interpreter)
MLA_ROLES_CASES = [(40, 128, 8, "bf16", 64, 32), (70, 512, 64, "bf16", 16, 32)]


@pytest.mark.parametrize("h,r,p,dtype,page_size,tokens", MLA_ROLES_CASES)
def test_mla_roles_kernel(runtime, rng, monkeypatch, h, r, p, dtype, page_size, tokens):
    """mla_roles.py (a producer role's bulk copies, two consumers' group products; emulated in
    program order where not native): see check_forced_mla. The first case runs everywhere."""
    caps = runtime.capabilities
    if (h, r, p, dtype, page_size, tokens) != MLA_ROLES_CASES[0] and not caps.mma_native:
        pytest.skip("the roles kernel is emulated here (tuning picks it only where bulk copies are native): "
                    "its first case covers the emulation (compile time: 1-3 min a runtime)")
    if caps.units_are_simd_lanes and caps.plane_dim > 8:
        pytest.skip("on SIMD lanes the emulation compiles in 3.5 min with the default planes (it passes: "
                    "benchmarks/RESULTS.md, issue 16 on roles); planes of 8 (cpu-p8) cover it in 40 s")
    monkeypatch.setattr(tuning, "kernel_for", lambda prob: "mla_roles")
    monkeypatch.setattr(tuning, "MLA_ROLES_TOKENS", tokens)
    check_forced_mla(runtime, rng, h, r, p, dtype, page_size)


@pytest.mark.interpreter
def test_mla_roles_barrier_order(runtime, rng, monkeypatch):
    """mla_roles.py on the interpreter, which raises DivergenceError at an arrival-barrier wait
    whose phase program order has not completed: two sequences of 40 and 20 tokens (two 32-token
    steps, the second partial; one step) over pages of 16, a causal prefill row, unsplit and
    over 3 splits, against the float64 reference."""
    if runtime.name != "interpreter":
        pytest.skip("the compiled runtimes run test_mla_roles_kernel (a larger plan)")
    monkeypatch.setattr(tuning, "kernel_for", lambda prob: "mla_roles")
    monkeypatch.setattr(tuning, "MLA_ROLES_TOKENS", 32)
    plan = dict(page_size=16, pages=6, tables=[[3, 0, 5], [1, 2]], lengths=[40, 20], sequence_ids=[0, 1, 0],
                positions=[39, 19, 30])
    (q, qp, lat, kp), (tq, tqp, tlat, tkp) = tensors(runtime, rng, "bf16", (3, 8, 128), (3, 8, 8),
                                                     (6, 16, 1, 128), (6, 16, 1, 8))
    dev = upload(plan, tq)
    assert_matches(dev.mla(tq, tqp, tlat, tkp, 0.2, True), ref.paged_mla(plan, q, qp, lat, kp, 0.2, True), "bf16")
    ws = SplitWorkspace(tq, 3, 8, 128, 3)
    assert_matches(dev.mla_with_workspace(tq, tqp, tlat, tkp, 0.2, False, ws),
                   ref.paged_mla(plan, q, qp, lat, kp, 0.2, False), "bf16")


def test_mla_roles_launch_choice(runtime):
    """mla_roles.py takes R in an even number of 64-column bands (at most 8), R and P multiples
    of 8, pages that divide a step or hold whole steps (boxes of at least 8 rows); it runs
    where bulk copies and group products are native and the copy engine reads the operands."""
    caps = runtime.capabilities
    from rudnn.paged_attention.problem import validate_mla
    for page, h, r, p, ok in ((64, 128, 512, 64, True), (16, 8, 128, 8, True), (4, 8, 128, 8, False),
                              (24, 8, 128, 8, False), (64, 8, 192, 64, False), (64, 8, 1024, 64, False),
                              (64, 8, 128, 12, False)):
        plan = upload(dict(page_size=page, pages=2, tables=[[0, 1]], lengths=[5], sequence_ids=[0], positions=[4]),
                      runtime.zeros((1, 1)))
        m = validate_mla(plan, runtime.zeros((1, h, r), "bf16"), runtime.zeros((1, h, p), "bf16"),
                         runtime.zeros((2, page, 1, r), "bf16"), runtime.zeros((2, page, 1, p), "bf16"), 1.0, True)
        lay = tuning.mla_roles_launch(m)
        fits = 12 * caps.plane_dim <= caps.max_cube_units and (caps.mma_native or 32 % caps.plane_dim == 0)
        assert (lay is not None) == (ok and fits and "bf16" in [d.name for d in caps.mma_dtypes])
        if lay is not None:
            assert lay.chunks == -(-h // 64) and lay.box == min(page, lay.tokens) and lay.stages >= 2
            assert tuning.mla_roles_shared_bytes(m, lay.tokens, lay.stages) <= caps.max_shared_bytes
        native = caps.bulk_copy and caps.group_mma_native
        assert (tuning.kernel_for(m) == "mla_roles") == (lay is not None and native)


def test_mla_launch_choice(runtime):
    """MLA in f16/bf16 with R and P whole 16-byte chunks has launch shapes on the matrix
    primitive (mla_mma.py: R parts dividing R's tiles of 16; mla_group.py: R in the fewest
    slices of <= 256 columns, at most two, whole planes wide where the primitive is
    emulated); it runs on mla_group.py where group products are native, else on mla_mma.py
    where the matrix primitive is; f32, odd widths and the rest go to the general kernel."""
    plan = upload(dict(page_size=4, pages=2, tables=[[0, 1]], lengths=[5], sequence_ids=[0], positions=[4]),
                  runtime.zeros((1, 1)))
    caps = runtime.capabilities
    from rudnn.paged_attention.problem import validate_mla
    for dtype, h, r, p, parts, groups in (("bf16", 128, 512, 64, 4, 2), ("f16", 8, 48, 8, 3, 1),
                                          ("bf16", 70, 1024, 16, 4, None), ("f32", 8, 64, 16, None, None),
                                          ("bf16", 8, 64, 12, None, None), ("bf16", 8, 20, 16, None, None)):
        m = validate_mla(plan, runtime.zeros((1, h, r), dtype), runtime.zeros((1, h, p), dtype),
                         runtime.zeros((2, 4, 1, r), dtype), runtime.zeros((2, 4, 1, p), dtype), 1.0, True)
        lay = tuning.mla_mma_launch(m)
        assert (lay is None) == (parts is None)
        if lay is not None:
            assert lay.r_parts == min(parts, caps.max_cube_units // caps.plane_dim)
            assert lay.chunks == -(-h // (16 * lay.head_groups))
            assert tuning.mla_shared_bytes(m, lay.head_groups, lay.r_parts, lay.tiles, lay.stages) \
                <= caps.max_shared_bytes
        if groups is not None and not caps.mma_native and (r // groups) % caps.plane_dim:
            groups = None
        group = tuning.mla_group_launch(m)
        assert (group and group.groups) == groups
        if group is not None:
            assert group.chunks == -(-h // 64)
            assert tuning.mla_group_shared_bytes(m, group.groups, group.tokens, group.stages) <= caps.max_shared_bytes
        want = "general"
        if caps.bulk_copy and caps.group_mma_native and tuning.mla_roles_launch(m) is not None:
            want = "mla_roles"
        elif caps.group_mma_native and group is not None:
            want = "mla_group"
        elif caps.mma_native and lay is not None:
            want = "mla_mma"
        assert tuning.kernel_for(m) == want
