"""kerneldsl.autotune: choices by timing (a fake clock makes them deterministic), failing and
unavailable candidates never chosen, persistence beside the kernel cache across processes,
corrupted files ignored; and rudnn.attention's Autotune strategy on top of it."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl import autotune

pytestmark = pytest.mark.feature("autotune")

ROOT = Path(__file__).resolve().parent.parent


class FakeClock:
    """A clock that only moves when a candidate says how long it 'took'."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def work(self, seconds):
        def run():
            self.now += seconds
        return run


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELDSL_CACHE", str(tmp_path))
    return tmp_path


def test_bucket_and_device_key():
    assert [autotune.bucket(n) for n in (0, 1, 2, 3, 100, 128, 129)] == [0, 1, 2, 4, 128, 128, 256]
    key = autotune.device_key(kd.runtime("cpu"))
    assert key.startswith("cpu:") and key.endswith(":p32")
    assert autotune.device_key(kd.runtime("cpu", plane_dim=8)).endswith(":p8")


def test_picks_fastest_and_remembers(cache_dir, capsys):
    clock = FakeClock()
    calls = {"slow": 0, "fast": 0}

    def cand(name, seconds):
        step = clock.work(seconds)

        def run():
            calls[name] += 1
            step()
        return run

    t = autotune.Tuner("fam", clock=clock)
    cands = {"slow": cand("slow", 0.003), "fast": cand("fast", 0.001)}
    assert t.choose(("k", 1), cands, label="demo") == "fast"
    err = capsys.readouterr().err
    assert err.startswith("tuning fam [demo]: ") and "slow 3.00 ms" in err and "fast 1.00 ms" in err
    assert err.rstrip().endswith("-> fast")
    assert calls == {"slow": 4, "fast": 4}  # one warm-up, three timed runs each
    assert t.choose(("k", 1), cands) == "fast"
    assert calls == {"slow": 4, "fast": 4} and capsys.readouterr().err == ""  # remembered, nothing timed
    data = json.loads(autotune.path("fam").read_text())
    entry = data["choices"]["k|1"]
    assert data["format"] == autotune.FORMAT and entry["choice"] == "fast"
    assert entry["times_ms"] == {"slow": 3.0, "fast": 1.0}


def test_candidates_are_timed_in_turn_with_no_recording(cache_dir):
    """Each candidate is warmed up, then they are timed in turn, round after round (a slow
    spell of a shared machine falls on each alike). A replayed call that tunes is not recorded,
    its candidates run with no recording active (a record would keep their launches and
    buffers, and its bookkeeping would be timed), and the recording resumes after."""
    from kerneldsl.replay import active, replayable
    clock = FakeClock()
    order, during, after = [], [], []

    def cand(name, seconds):
        step = clock.work(seconds)

        def run():
            order.append(name)
            during.append(active())
            step()
        return run

    t = autotune.Tuner("turns", clock=clock, quiet=True)

    @replayable
    def op(x):
        t.choose(("k", x.shape), {"a": cand("a", 2.0), "b": cand("b", 1.0)})
        after.append(active())
        return x.runtime.empty(x.shape)

    x = kd.runtime("cpu").zeros(4)
    op(x)
    assert order == ["a", "b"] + ["a", "b"] * 3 and during == [None] * 8
    assert after[0] is not None   # (the call was being recorded around the tuning)
    assert list(op.replay_refusals.values()) == ["autotuning"] and not op.replay_records
    op(x)   # the choice is remembered: nothing timed, the call recorded
    assert len(order) == 8 and after[1] is not None and len(op.replay_records) == 1


def test_waited_candidates_wait_for_their_runtime():
    """autotune.waited: the candidate runs its work, then waits for the runtime (its time then
    holds the work, not only the enqueueing)."""
    seen = []

    class Runtime:
        def synchronize(self):
            seen.append("wait")

    candidate = autotune.waited(Runtime(), lambda: seen.append("run"))
    assert seen == []
    candidate()
    candidate()
    assert seen == ["run", "wait", "run", "wait"]


def test_failing_and_unavailable_candidates_are_never_chosen(cache_dir, capsys):
    from rudnn.attention import AttentionSetupError
    clock = FakeClock()

    def unavailable():
        raise AttentionSetupError("FlashBlackboxAccelerated is unavailable for f32 input")

    def broken():
        raise RuntimeError("kernel exploded")

    t = autotune.Tuner("fam2", clock=clock)
    choice = t.choose("key", {"accel": unavailable, "broken": broken, "slow": clock.work(1.0)})
    assert choice == "slow"
    err = capsys.readouterr().err
    assert "accel unavailable" in err and "broken failed (RuntimeError: kernel exploded)" in err
    with pytest.raises(AttentionSetupError, match="unavailable"):
        t.choose("other", {"accel": unavailable})
    with pytest.raises(ValueError, match="no candidates"):
        t.choose("other", {})


def test_stored_choice_must_still_be_a_candidate(cache_dir):
    clock = FakeClock()
    t = autotune.Tuner("fam3", clock=clock, quiet=True)
    assert t.choose("k", {"a": clock.work(1), "b": clock.work(2)}) == "a"
    assert t.choose("k", {"b": clock.work(2), "c": clock.work(3)}) == "b"  # "a" is gone: tuned again
    assert t.tuned == 2


def test_persists_across_tuners_and_ignores_corrupted_files(cache_dir):
    clock = FakeClock()
    first = autotune.Tuner("fam4", clock=clock, quiet=True)
    assert first.choose("k", {"a": clock.work(2), "b": clock.work(1)}) == "b"
    fresh = autotune.Tuner("fam4", clock=clock, quiet=True)
    assert fresh.lookup("k") == "b"
    assert fresh.choose("k", {"a": clock.work(2), "b": clock.work(1)}) == "b" and fresh.tuned == 0

    for garbage in ("{not json", "[1, 2]", '{"format": 999, "choices": {}}', '{"format": 1, "choices": 3}'):
        autotune.path("fam4").write_text(garbage)
        t = autotune.Tuner("fam4", clock=clock, quiet=True)
        assert t.lookup("k") is None
        assert t.choose("k", {"a": clock.work(1), "b": clock.work(2)}) == "a" and t.tuned == 1
        assert json.loads(autotune.path("fam4").read_text())["choices"]["k"]["choice"] == "a"


def test_writes_merge_with_other_processes(cache_dir):
    clock = FakeClock()
    one = autotune.Tuner("fam5", clock=clock, quiet=True)
    two = autotune.Tuner("fam5", clock=clock, quiet=True)
    one.choose("x", {"a": clock.work(1)})
    two.choose("y", {"b": clock.work(1)})  # two never saw x, but must not drop it
    assert set(json.loads(autotune.path("fam5").read_text())["choices"]) == {"x", "y"}


def test_memory_only_without_a_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELDSL_CACHE", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    clock = FakeClock()
    t = autotune.Tuner("fam6", clock=clock, quiet=True)
    assert t.choose("k", {"a": clock.work(1)}) == "a"
    assert t.lookup("k") == "a"
    assert not any(tmp_path.rglob("*.json"))


_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import kerneldsl as kd
    import rudnn
    rt = kd.runtime("cpu")
    rng = np.random.default_rng(0)
    q = rt.tensor(rng.standard_normal((1, 2, 9, 16)).astype(np.float32))
    k = rt.tensor(rng.standard_normal((1, 1, 20, 16)).astype(np.float32))
    out = rudnn.attention.attention(q, k, k, options=rudnn.attention.AttentionModuleOptions(is_causal=True))
    out = rudnn.attention.attention(q, k, k, options=rudnn.attention.AttentionModuleOptions(is_causal=True))
    np.save(sys.argv[1], out.numpy())
""")


def _child(cache, out):
    env = dict(os.environ, KERNELDSL_CACHE=str(cache), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(out)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr, np.load(out)


def test_attention_autotune_persists_across_processes(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from reference.attention import attention as reference
    cache = tmp_path / "cache"
    err1, out1 = _child(cache, tmp_path / "a.npy")
    assert err1.count("tuning attention [f32, B*H~2, Sq~16, Skv~32, D=16, causal]:") == 1  # tuned once, not twice
    assert "FlashUnit" in err1 and "Fallback" in err1
    file = cache / "autotune" / "attention.json"
    choice = next(iter(json.loads(file.read_text())["choices"].values()))["choice"]
    assert choice in ("FlashUnit", "Fallback")
    err2, out2 = _child(cache, tmp_path / "b.npy")
    assert "tuning" not in err2  # the second process reads the choice
    np.testing.assert_array_equal(out1, out2)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 9, 16)).astype(np.float32)
    k = rng.standard_normal((1, 1, 20, 16)).astype(np.float32)
    np.testing.assert_allclose(out1, reference(q, k, k, causal=True), rtol=2e-5, atol=2e-5)
    file.write_text("\x00garbage")  # corrupted: ignored, tuned again, rewritten
    err3, out3 = _child(cache, tmp_path / "c.npy")
    assert err3.count("tuning attention") == 1
    assert json.loads(file.read_text())["format"] == autotune.FORMAT
    np.testing.assert_allclose(out3, out1, rtol=1e-6, atol=1e-6)


def test_attention_autotune_candidates_per_device():
    from rudnn.attention import AttentionModuleOptions, tuning
    from rudnn.attention.problem import validate
    rt = kd.runtime("cpu")
    x = rt.zeros((1, 1, 4, 16), "bf16")
    p = validate(x, x, x, None, None, AttentionModuleOptions())
    # the cpu emulates the matrix primitive: timing it would only cost time
    assert set(tuning.candidates(p)) == {"FlashUnit", "Fallback"}
    assert tuning.key(p)[1:] == ("bf16", 1, 1, 4, 4, 16, 16, False, False, False, False)
