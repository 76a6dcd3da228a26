"""Every public operator, called as benchmarks/host_overhead.py calls it (tiny shapes), gives
the same results replayed (kerneldsl/replay.py: recorded once, then replayed three times,
reusing the kept buffer) as run directly with KERNELDSL_REPLAY=0. A replay that skips a
zero fill, writes a fill to the wrong place or reads a stale kept buffer fails here."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import replay

pytestmark = [pytest.mark.feature("replay"),
              pytest.mark.skipif(replay.envflags.interpret(), reason="KERNELDSL_INTERPRET is set: nothing is replayed")]


def _arrays(result) -> list:
    """The result's tensors as float64 arrays, in a fixed order. Rows grouped by expert come in
    any order within an expert (SPEC §2), so a DispatchedTokens' rows are compared sorted."""
    from rudnn import moe
    if isinstance(result, kd.Tensor):
        return [result.numpy().astype(np.float64)]
    if isinstance(result, (tuple, list)):
        return [a for r in result for a in _arrays(r)]
    if dataclasses.is_dataclass(result):
        return [a for f in dataclasses.fields(result) for a in _arrays(getattr(result, f.name))]
    if isinstance(result, moe.RoutingPlan):
        return _arrays((result.expert_indices(), result.weights()))
    if isinstance(result, moe.DispatchedTokens):
        values = result.values().numpy().astype(np.float64)
        rows = np.concatenate([result.row_experts().numpy()[:, None].astype(np.float64), values], axis=1)
        return [rows[np.lexsort(rows.T[::-1])], result.expert_offsets().numpy().astype(np.float64)]
    if result is None:
        return []
    if hasattr(result, "__dict__"):  # another result object (a paged-attention DevicePlan): its tensors
        return [a for k, v in sorted(vars(result).items()) if isinstance(v, kd.Tensor) for a in _arrays(v)]
    raise TypeError(f"no comparison for a {type(result).__name__} result")


def _cases(runtime) -> list:
    from benchmarks import host_overhead as H
    inputs = H.Inputs(runtime, None)
    return [(f"{family}.{op}", call) for family, make in H.FAMILIES.items() if family != "kernel"
            for op, (call, _) in make(inputs).items()]


def test_every_operator_replays_what_a_direct_call_gives(runtime, monkeypatch):
    if runtime.name == "cpu-p8":
        pytest.skip("the plane width changes no replay bookkeeping: the cpu runtime covers it")
    for name, call in _cases(runtime):
        monkeypatch.setenv("KERNELDSL_REPLAY", "1")
        replay.clear()
        results = [call() for _ in range(4)]  # recorded, then replayed three times (the last ones reuse memory)
        got = [_arrays(r) for r in results[1:]]
        monkeypatch.setenv("KERNELDSL_REPLAY", "0")
        want = _arrays(call())
        for replayed in got:
            assert len(replayed) == len(want), name
            for a, b in zip(replayed, want):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=name)
