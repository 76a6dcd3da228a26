"""Helpers every family's error tests share: counting kernel launches (validation must fail
before any; conftest's `launches` fixture) and a stand-in second runtime for mixed-runtime
errors on a machine with one."""
import kerneldsl as kd


def on_launch(monkeypatch, watch) -> None:
    """Patch kd.Kernel.launch_with (every launch passes through it) to call `watch(kernel)`
    before each launch."""
    real = kd.Kernel.launch_with

    def watched(self, grid, block, args, runtime=None):
        watch(self)
        return real(self, grid, block, args, runtime)

    monkeypatch.setattr(kd.Kernel, "launch_with", watched)


def count_launches(monkeypatch) -> list:
    """Count kernel launches; returns the one-element counter."""
    count = [0]

    def counting(kernel):
        count[0] += 1
    on_launch(monkeypatch, counting)
    return count


def refuse_launches(monkeypatch) -> None:
    """Any kernel launch fails the test (for zero-size inputs and validation errors)."""
    def refuse(kernel):
        raise AssertionError(f"kernel {kernel.__name__} launched")
    on_launch(monkeypatch, refuse)


class OtherRuntime:
    """Stands in for a second runtime when this machine has only one."""
    name = "other"
    device_key = "other-device"


def foreign(t: kd.Tensor) -> kd.Tensor:
    """A tensor that claims to live on OtherRuntime (its buffer is never read)."""
    return kd.Tensor(OtherRuntime(), t.buffer, t.shape, t.dtype)


def assert_each_rejected(bad_calls, error) -> None:
    """Every `(needle, call)` of `bad_calls` raises the family error `error`, whose message holds
    `needle` (the argument and what is wrong); `error` is a rudnn.RudnnError and a ValueError,
    importable from `rudnn` under its own name (SPEC §0)."""
    import pytest

    import rudnn
    assert issubclass(error, rudnn.RudnnError) and issubclass(error, ValueError)
    assert getattr(rudnn, error.__name__) is error
    for needle, call in bad_calls:
        with pytest.raises(error) as info:
            call()
        assert needle in str(info.value), str(info.value)
