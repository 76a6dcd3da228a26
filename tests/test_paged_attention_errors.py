"""Every rule of SPEC §4 as a PagedAttentionError naming the argument and the offending value
(which table, which entry) before any launch: HostPlan, validate_writes, DevicePlan.upload,
attention / mla / the workspace calls / append, SplitWorkspace, and plans used on another runtime."""
import math

import numpy as np
import pytest

import kerneldsl as kd
import rudnn
from rudnn.paged_attention import DevicePlan, HostPlan, PagedAttentionError, SplitWorkspace

pytestmark = pytest.mark.feature("paged_attention: errors")

GOOD = dict(page_size=4, pages=6, tables=[[3, 0], [2], []], lengths=[6, 2, 0], sequence_ids=[0, 1, 0, 2],
            positions=[4, 1, 5, 0])


def plan_with(**changes):
    return HostPlan(**{**GOOD, **changes})


def raises(match, fn, *args):
    with pytest.raises(PagedAttentionError, match=match) as info:
        fn(*args)
    assert isinstance(info.value, rudnn.RudnnError) and isinstance(info.value, ValueError)
    assert rudnn.PagedAttentionError is PagedAttentionError


# ---------------------------------------------------------------------------- HostPlan
@pytest.mark.parametrize("changes,match", [
    (dict(page_size=0), r"page_size must be >= 1, got 0"),
    (dict(page_size=2.0), r"page_size must be an int, got 2.0"),
    (dict(page_size=True), r"page_size must be an int, got True"),
    (dict(pages=0), r"pages must be >= 1, got 0"),
    (dict(tables=[], lengths=[]), r"tables must be a non-empty list"),
    (dict(tables=5), r"tables must be a non-empty list of page lists, got 5"),
    (dict(tables=[[3, 0], "ab", []]), r"tables\[1\] must be a sequence of ints"),
    (dict(tables=[[3, 0.5], [2], []]), r"tables\[0\]\[1\] must be an int, got 0.5"),
    (dict(lengths=[6, 2]), r"lengths must have one entry per table \(3\), got 2"),
    (dict(positions=[4, 1, 5]), r"positions must have one entry per query row .*4.*got 3"),
    (dict(lengths=[6, -1, 0]), r"lengths\[1\] must be >= 0, got -1"),
    (dict(tables=[[3], [2], []]), r"tables\[0\] must have at least ceil\(lengths\[0\] / page_size\) = 2 entries"),
    (dict(tables=[[3, 6], [2], []]), r"tables\[0\]\[1\] must be between 0 and pages - 1 \(5\), got 6"),
    (dict(tables=[[3, 0], [2], [9]]), r"tables\[2\]\[0\] must be between 0 and pages - 1 \(5\), got 9"),
    (dict(tables=[[3, -1], [2], []]), r"tables\[0\]\[1\] must be between 0 and pages - 1 \(5\), got -1"),
    (dict(tables=[[3, 3], [2], []]), r"tables\[0\]\[1\] repeats page 3 of tables\[0\]\[0\]"),
    (dict(sequence_ids=[0, 1, 3, 2]), r"sequence_ids\[2\] must be between 0 and len\(tables\) - 1 \(2\), got 3"),
    (dict(sequence_ids=[0, -1, 0, 2]), r"sequence_ids\[1\] must be between 0 and"),
    (dict(positions=[4, 2, 5, 0]), r"positions\[1\] must be < lengths\[1\] \(2\) of its sequence 1, got 2"),
    (dict(positions=[4, 1, -5, 0]), r"positions\[2\] must be >= 0, got -5"),
])
def test_host_plan_rules(changes, match):
    with pytest.raises(PagedAttentionError, match=match):
        plan_with(**changes)


def test_host_plan_accepts_what_the_spec_allows():
    """Empty sequences at any position, shared pages across sequences, repeated unused entries,
    numpy integers; counts as SPEC names them."""
    host = plan_with(tables=[[3, 0, 5, 5], [3], [4]], positions=[4, 1, 5, 17], sequence_ids=np.array([0, 1, 0, 2]))
    assert host.query_count() == 4 and host.sequence_count() == 3
    assert plan_with(sequence_ids=[], positions=[]).query_count() == 0


@pytest.mark.parametrize("changes,match", [
    (dict(), r"positions\[3\] must be < lengths\[2\] \(0\) to be written, got 0"),
    (dict(sequence_ids=[0, 1, 0], positions=[4, 1, 5], tables=[[3, 0], [2, 0], []]),
     r"query row 0 writes page 0 \(tables\[0\]\[1\]\), which sequences \[0, 1\] all reference"),
    (dict(sequence_ids=[0, 1, 0], positions=[4, 1, 4]), r"query rows 0 and 2 both write slot 0 of page 0"),
])
def test_validate_writes_rules(changes, match):
    host = plan_with(**changes)  # a valid plan for attention ...
    with pytest.raises(PagedAttentionError, match=match):  # ... that append must refuse
        host.validate_writes()


def test_validate_writes_accepts_distinct_slots():
    plan_with(sequence_ids=[0, 1, 0], positions=[4, 1, 5]).validate_writes()


# ---------------------------------------------------------------------------- calls
def setup(runtime, dtype="f32", D=8, Dv=5, Hq=4, Hkv=2):
    host = plan_with(sequence_ids=[0, 1, 0], positions=[4, 1, 5])
    z = runtime.zeros
    q, k, v = z((3, Hq, D), dtype), z((6, 4, Hkv, D), dtype), z((6, 4, Hkv, Dv), dtype)
    return DevicePlan.upload(host, q), q, k, v


def test_attention_shapes_and_ranks(runtime, launches):
    plan, q, k, v = setup(runtime)
    z = runtime.zeros
    raises(r"attention: q must have rank 3, got rank 4", plan.attention, z((3, 4, 8, 1)), k, v, 1.0, True)
    raises(r"attention: k must have rank 4, got rank 3", plan.attention, q, z((6, 4, 16)), v, 1.0, True)
    raises(r"attention: v must have rank 4", plan.attention, q, k, z((6, 4, 10)), 1.0, True)
    raises(r"q must have one row per query of the plan \(3\), got 2", plan.attention, z((2, 4, 8)), k, v, 1.0, True)
    raises(r"k must have shape \[pages=6, page_size=4, Hkv, D\], got \[5, 4, 2, 8\]", plan.attention, q,
           z((5, 4, 2, 8)), v, 1.0, True)
    raises(r"v must have shape \[pages=6, page_size=4, Hkv, Dv\], got \[6, 8, 2, 5\]", plan.attention, q, k,
           z((6, 8, 2, 5)), 1.0, True)
    raises(r"v must have k's KV heads \(2\) on axis 2, got 1", plan.attention, q, k, z((6, 4, 1, 5)), 1.0, True)
    raises(r"k must have q's head dimension D = 8 on axis 3, got 7", plan.attention, q, z((6, 4, 2, 7)), v, 1.0,
           True)
    raises(r"q's heads \(4\) must be a multiple of k's KV heads \(3\)", plan.attention, q, z((6, 4, 3, 8)),
           z((6, 4, 3, 5)), 1.0, True)
    raises(r"D \(q's axis 2\) must be between 1 and 1024, got 1025", plan.attention, z((3, 4, 1025)),
           z((6, 4, 2, 1025)), v, 1.0, True)
    raises(r"Dv \(v's axis 3\) must be between 1 and 1024, got 1025", plan.attention, q, k, z((6, 4, 2, 1025)),
           1.0, True)
    assert launches[0] == 0


def test_attention_dtypes_layout_and_arguments(runtime, launches):
    plan, q, k, v = setup(runtime)
    z = runtime.zeros
    raises(r"q must be F32, F16 or BF16, got I32", plan.attention, z((3, 4, 8), "i32"), k, v, 1.0, True)
    raises(r"k must have the dtype of q \(F32\), got F16", plan.attention, q, z((6, 4, 2, 8), "f16"), v, 1.0, True)
    raises(r"v must have the dtype of q \(F32\), got BF16", plan.attention, q, k, z((6, 4, 2, 5), "bf16"), 1.0,
           True)
    raises(r"q must be a kerneldsl tensor, got a ndarray", plan.attention, np.zeros((3, 4, 8)), k, v, 1.0, True)
    raises(r"k must be a kerneldsl tensor", plan.attention, q, None, v, 1.0, True)
    raises(r"q must be contiguous", plan.attention, z((3, 8, 4)).transpose(1, 2), k, v, 1.0, True)
    raises(r"k must be contiguous", plan.attention, q, z((6, 4, 8, 2)).transpose(2, 3), v, 1.0, True)
    raises(r"v must be contiguous", plan.attention, q, k, z((6, 4, 2, 10))[..., ::2], 1.0, True)
    for bad in (0.0, -1.0, math.inf, math.nan):
        raises(r"scale must be a finite number > 0", plan.attention, q, k, v, bad, True)
    raises(r"scale must be a number, got '1'", plan.attention, q, k, v, "1", True)
    raises(r"causal must be a bool, got 1", plan.attention, q, k, v, 1.0, 1)
    assert launches[0] == 0


def test_mla_rules(runtime, launches):
    host = plan_with(sequence_ids=[0, 1, 0], positions=[4, 1, 5])
    z = runtime.zeros
    q, qp, lat, kp = z((3, 4, 16)), z((3, 4, 4)), z((6, 4, 1, 16)), z((6, 4, 1, 4))
    plan = DevicePlan.upload(host, q)
    raises(r"mla: qp must have shape \[3, 4, P\]", plan.mla, q, z((3, 2, 4)), lat, kp, 1.0, True)
    raises(r"mla: latent must have shape \[6, 4, 1, R=16\], got \[6, 4, 2, 16\]", plan.mla, q, qp,
           z((6, 4, 2, 16)), kp, 1.0, True)
    raises(r"latent must have shape \[6, 4, 1, R=16\], got \[6, 4, 1, 8\]", plan.mla, q, qp, z((6, 4, 1, 8)), kp,
           1.0, True)
    raises(r"kp must have shape \[6, 4, 1, P=4\], got \[6, 4, 1, 5\]", plan.mla, q, qp, lat, z((6, 4, 1, 5)),
           1.0, True)
    raises(r"kp must have shape \[pages=6, page_size=4, 1, P\], got \[6, 3, 1, 4\]", plan.mla, q, qp, lat,
           z((6, 3, 1, 4)), 1.0, True)
    raises(r"P \(qp's axis 2\) must be between 1 and 256, got 257", plan.mla, q, z((3, 4, 257)), lat,
           z((6, 4, 1, 257)), 1.0, True)
    raises(r"qp must have the dtype of q \(F32\), got F16", plan.mla, q, z((3, 4, 4), "f16"), lat, kp, 1.0, True)
    raises(r"latent must be contiguous", plan.mla, q, qp, z((6, 4, 1, 32))[..., ::2], kp, 1.0, True)
    raises(r"mla: scale must be a finite number > 0", plan.mla, q, qp, lat, kp, -2.0, True)
    assert launches[0] == 0


def test_workspace_rules(runtime, launches):
    plan, q, k, v = setup(runtime)
    raises(r"SplitWorkspace: splits must be between 2 and 32, got 1", SplitWorkspace, q, 3, 4, 5, 1)
    raises(r"SplitWorkspace: splits must be between 2 and 32, got 33", SplitWorkspace, q, 3, 4, 5, 33)
    raises(r"SplitWorkspace: like must be a kerneldsl tensor", SplitWorkspace, np.zeros(3), 3, 4, 5, 2)
    raises(r"SplitWorkspace: heads must be >= 1, got 0", SplitWorkspace, q, 3, 0, 5, 2)
    raises(r"F32 \[512, 32, 32, 33\] needs 69206016 bytes, more than the 64 MiB allowed", SplitWorkspace, q, 512, 32,
           31, 32)
    ws = SplitWorkspace(q, 3, 4, 6, 2)
    raises(r"attention_with_workspace: workspace must be made for \(queries, heads, value_dim\) = \(3, 4, 5\), "
           r"got \(3, 4, 6\)", plan.attention_with_workspace, q, k, v, 1.0, True, ws)
    raises(r"workspace must be a SplitWorkspace, got None", plan.attention_with_workspace, q, k, v, 1.0, True, None)
    raises(r"mla_with_workspace: workspace must be a SplitWorkspace", DevicePlan.mla_with_workspace, plan, q,
           runtime.zeros((3, 4, 2)), runtime.zeros((6, 4, 1, 8)), runtime.zeros((6, 4, 1, 2)), 1.0, True, "ws")
    assert launches[0] == 0


def test_append_rules(runtime, launches):
    plan, q, k, v = setup(runtime)
    z = runtime.zeros
    nk, nv = z((3, 2, 8)), z((3, 2, 5))
    raises(r"append: new_k must have shape \[3, 2, 8\] \(queries, k_cache's Hkv and D\), got \[3, 2, 7\]",
           plan.append, z((3, 2, 7)), nv, k, v)
    raises(r"append: new_v must have shape \[3, 2, 5\]", plan.append, nk, z((2, 2, 5)), k, v)
    raises(r"append: new_k must have rank 3", plan.append, z((3, 16)), nv, k, v)
    raises(r"append: v_cache must have the dtype of k_cache \(F32\), got F16",
           plan.append, nk, nv, k, z((6, 4, 2, 5), "f16"))
    raises(r"append: k_cache must be contiguous", plan.append, nk, nv, z((6, 4, 8, 2)).transpose(2, 3), v)
    raises(r"append: k_cache must have shape \[pages=6, page_size=4, Hkv, D\]", plan.append, nk, nv,
           z((6, 2, 2, 8)), v)
    shared = DevicePlan.upload(plan_with(sequence_ids=[0, 1, 0], positions=[4, 1, 5], tables=[[3, 0], [2, 0], []]), q)
    raises(r"validate_writes: query row 0 writes page 0", shared.append, nk, nv, k, v)
    assert launches[0] == 0


def test_upload_rules(runtime):
    q = runtime.zeros((3, 4, 8))
    raises(r"DevicePlan.upload: host must be a HostPlan, got a dict", DevicePlan.upload, dict(GOOD), q)
    raises(r"DevicePlan.upload: like must be a kerneldsl tensor, got 'cpu'", DevicePlan.upload, plan_with(), "cpu")


def other_runtime(runtime):
    others = [n for n in kd.available_runtimes() if kd.runtime(n).device_key != runtime.device_key]
    if not others:
        pytest.skip("needs a second runtime on another device (only one device here)")
    return kd.runtime(others[0])


def test_plan_uploaded_for_another_runtime(runtime, launches):
    other = other_runtime(runtime)
    plan, q, k, v = setup(runtime)
    oq, ok, ov = (other.zeros(t.shape, "f32") for t in (q, k, v))
    raises(rf"the plan was uploaded for runtime '{runtime.name}' but q is on '{other.name}'", plan.attention,
           oq, ok, ov, 1.0, True)
    raises(r"the plan was uploaded for runtime", plan.append, other.zeros((3, 2, 8)), other.zeros((3, 2, 5)), ok, ov)
    raises(r"k is on runtime .* but q is on .*: all tensors of one call must share a runtime", plan.attention,
           q, ok, v, 1.0, True)
    raises(r"workspace is on runtime", plan.attention_with_workspace, q, k, v, 1.0, True,
           SplitWorkspace(oq, 3, 4, 5, 2))
    assert launches[0] == 0
    assert DevicePlan.upload(plan.host(), oq).attention(oq, ok, ov, 1.0, True).shape == (3, 4, 5)  # re-uploaded
