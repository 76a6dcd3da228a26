"""`assert_runtimes_agree`: run one kernel or one function of tensors on every runtime from
the same host inputs, and check that every output matches the first runtime's (or a reference)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .choices import RuntimeChoice, RuntimeSelectionError, runtime_choices
from .compare import assert_close, to_host


def _is_tensor(value) -> bool:
    from kerneldsl.tensor import Tensor
    return isinstance(value, Tensor)


def _host_inputs(args) -> list:
    """Each tensor argument as a host array (downloaded once), so every runtime starts from the
    same bits; numpy arrays stay; anything else (scalars, options) passes through."""
    out = []
    for a in args:
        if _is_tensor(a):
            out.append(_HostTensor(a.numpy(), a.dtype))
        elif isinstance(a, np.ndarray):
            out.append(_HostTensor(a, None))
        else:
            out.append(a)
    return out


class _HostTensor:
    """A host array to upload on each runtime, with the kd dtype it had (None: from numpy)."""

    def __init__(self, array: np.ndarray, dtype):
        self.array, self.dtype = array, dtype

    def upload(self, rt):
        return rt.tensor(self.array, dtype=self.dtype)  # an upload copies


def _arg_names(fn, n: int) -> list:
    params = getattr(fn, "params", None)  # a kd.Kernel's (name, kind, info) per parameter
    if params and len(params) == n:
        return [p[0] for p in params]
    return [f"arg {i}" for i in range(n)]


def _named_results(result) -> dict:
    """A function's return value as {name: value}: 'output', 'output[i]' or the dict's keys."""
    if result is None:
        return {}
    if isinstance(result, Mapping):
        return {str(k): v for k, v in result.items()}
    if isinstance(result, (tuple, list)):
        return {f"output[{i}]": v for i, v in enumerate(result)}
    return {"output": result}


def _run_on(choice: RuntimeChoice, launch: Callable, names: list, inputs: list) -> dict:
    """Runs once on `choice`; returns {name: host array} for every tensor argument afterwards
    and every tensor or array the call returned."""
    rt = choice.open()
    args = [a.upload(rt) if isinstance(a, _HostTensor) else a for a in inputs]
    try:
        result = launch(rt, args)
    except Exception as e:
        if hasattr(e, "add_note"):  # Python 3.11+: say where it failed without changing the error
            e.add_note(f"(raised on runtime {choice.id} by kd.testing.assert_runtimes_agree)")
        raise
    outputs = {name: a.numpy() for name, a in zip(names, args) if _is_tensor(a)}
    for name, value in _named_results(result).items():
        if _is_tensor(value) or isinstance(value, np.ndarray):
            outputs[name] = to_host(value)
    return outputs


def _choices(runtimes) -> list:
    if runtimes is None:
        return runtime_choices()
    out = []
    for r in runtimes:
        if isinstance(r, RuntimeChoice):
            out.append(r)
        elif isinstance(r, str):
            out.append(RuntimeChoice(r, r, {}))
        else:  # a runtime object the caller opened, perhaps with options
            out.append(RuntimeChoice(repr(r), r.name, {}, opened=r))
    return out


def _reference_by_name(reference, output_names: list) -> dict:
    if reference is None:
        return {}
    ref = dict(reference) if isinstance(reference, Mapping) else _named_results(reference)
    unknown = [k for k in ref if k not in output_names]
    if unknown:
        raise ValueError(f"reference names {unknown}, but the outputs are {output_names}")
    return {k: to_host(v) for k, v in ref.items()}


def assert_runtimes_agree(fn, *args, rtol: float | None = None, atol: float | None = None,
                          reference=None, runtimes: Sequence | None = None) -> dict:
    """Run `fn` on every runtime from the same host inputs and assert the outputs agree.

        kd.testing.assert_runtimes_agree(kernel, grid, block, *args)   # a @kd.kernel
        kd.testing.assert_runtimes_agree(function, *args)              # e.g. an operator call

    Tensor and numpy-array arguments are uploaded afresh on each runtime; other arguments pass
    unchanged (bind keyword arguments with a lambda). The outputs are every tensor argument
    after the call (a kernel's by parameter name, else 'arg i') and what a function returns
    (a tensor 'output', a tuple 'output[i]', a dict by key). Each output is compared with the
    first runtime's, or, where `reference` gives it, with the reference (one array for
    'output', a sequence for 'output[i]', or a dict by output name). Tolerances left out
    follow the dtype (`kd.testing.tolerance`). `runtimes` (names, runtime objects) replaces
    the default: every available runtime, the cpu at two plane sizes, narrowed by
    $KERNELDSL_RUNTIMES. Raises AssertionError naming each disagreeing runtime, output and
    worst element; returns {runtime id: {output name: array}}."""
    from kerneldsl.kernel import Kernel
    if isinstance(fn, Kernel):
        if len(args) < 2:
            raise TypeError(f"assert_runtimes_agree({fn.__name__}, grid, block, *args): grid and block are missing")
        grid, block, args = args[0], args[1], args[2:]

        def launch(rt, call_args):
            return fn[grid, block](*call_args, runtime=rt)
    elif callable(fn):
        def launch(rt, call_args):
            return fn(*call_args)
    else:
        raise TypeError(f"assert_runtimes_agree: fn must be a kd.kernel or a callable, got {type(fn).__name__}")
    choices = _choices(runtimes)
    if len(choices) < (1 if reference is not None else 2):
        raise RuntimeSelectionError(f"assert_runtimes_agree compares runtimes: it needs two, or a reference, "
                                    f"but has {[c.id for c in choices]}")
    inputs = _host_inputs(args)
    names = _arg_names(fn, len(args))
    results = {c.id: _run_on(c, launch, names, inputs) for c in choices}
    first = choices[0].id
    expected = _reference_by_name(reference, list(results[first]))
    failures = []
    for choice in choices:
        got = results[choice.id]
        if set(got) != set(results[first]):
            failures.append(f"{choice.id} gave outputs {sorted(got)}, {first} gave {sorted(results[first])}")
            continue
        for name, value in got.items():
            if name in expected:
                want, against = expected[name], "the reference"
            elif choice.id != first:
                want, against = results[first][name], first
            else:
                continue
            try:
                assert_close(value, want, rtol=rtol, atol=atol, name=f"runtime {choice.id}, {name} (against {against})")
            except AssertionError as e:
                failures.append(str(e))
    if failures:
        raise AssertionError("runtimes disagree:\n  " + "\n  ".join(failures))
    return results
