"""Between torch tensors and kd tensors: the runtime a torch tensor lives on, zero-copy
conversion both ways through DLPack, and torch's current CUDA stream for our launches.

torch's device names are kerneldsl's runtime names (a CPU tensor's device prints as the
cpu runtime's name, a CUDA tensor's as `cuda:<index>`), so `runtime_of` asks kd for the
runtime of that name. Every custom op body runs inside `session(tensor)`, which yields
that runtime, entered on torch's current stream when the tensor is on a CUDA device."""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch

import kerneldsl as kd

OpTensor = Optional[torch.Tensor]


def runtime_of(t: torch.Tensor):
    """The kd runtime holding `t`'s memory (`str(t.device)`: cpu, or cuda with its index)."""
    return kd.runtime(str(t.device))


@contextlib.contextmanager
def on_torch_stream(rt, t: torch.Tensor) -> Iterator[None]:
    """Runs the body's launches on torch's current stream of `t`'s device (nothing to do for
    a host tensor). Uses the runtime's `external_stream`/`use_stream`; a kerneldsl without
    them gets the safe ordering instead: torch's stream is drained before and ours after."""
    if not t.is_cuda:
        yield
        return
    handle = torch.cuda.current_stream(t.device).cuda_stream
    if hasattr(rt, "use_stream") and hasattr(rt, "external_stream"):
        with rt.use_stream(_external_stream(rt, handle)):
            yield
        return
    torch.cuda.current_stream(t.device).synchronize()
    yield
    rt.synchronize()


_STREAMS: dict = {}


def _external_stream(rt, handle: int):
    """One wrapper per (runtime, foreign stream handle), made on first use."""
    key = (id(rt), handle)
    s = _STREAMS.get(key)
    if s is None:
        s = _STREAMS[key] = rt.external_stream(handle)
    return s


@contextlib.contextmanager
def session(first: torch.Tensor) -> Iterator[object]:
    """The runtime of `first`, with its launches on torch's current stream, for one op body."""
    rt = runtime_of(first)
    with on_torch_stream(rt, first):
        yield rt


def to_kd(rt, t: OpTensor):
    """A kd tensor on `rt` sharing `t`'s memory (strided views keep their strides); None stays None.
    A host tensor of a dtype numpy has goes through `Tensor.numpy()` (a view, a third of
    DLPack's import time); the rest through DLPack."""
    if t is None:
        return None
    t = t.detach()
    if not t.is_cuda and t.dtype in _NUMPY_DTYPES and hasattr(rt, "wrap"):  # (rt's memory is host memory)
        return rt.wrap(t.numpy())
    return kd.from_dlpack(t, rt)


_HOST_VIEW_DTYPES = {"f32", "f16", "f64", "i32", "i64", "u8"}
_NUMPY_DTYPES = {torch.float32, torch.float16, torch.float64, torch.int32, torch.int64, torch.uint8, torch.bool}


def to_kd_u32(rt, t: torch.Tensor):
    """An int32 torch tensor of ids seen as kd U32 (the dtype our index tensors use), no copy."""
    return to_kd(rt, t.to(torch.int32).view(torch.uint32))


def to_torch(x) -> torch.Tensor:
    """A torch tensor sharing the kd tensor's memory; U32 comes back as int32 (same bits). Host
    memory of a dtype numpy has goes through the runtime's `host_view` (faster than DLPack)."""
    if x.dtype.name in _HOST_VIEW_DTYPES and hasattr(x.runtime, "host_view"):
        return torch.from_numpy(x.runtime.host_view(x))
    y = torch.from_dlpack(x)
    return y.view(torch.int32) if y.dtype == torch.uint32 else y


def needs_grad(*ts: OpTensor) -> bool:
    """Whether autograd would record a call on these tensors."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def enum_member(enum_type, name: str, arg: str):
    """The member of `enum_type` called `name` (as the family spells it), or a ValueError
    naming the argument and the choices."""
    try:
        return enum_type[name]
    except KeyError:
        choices = ", ".join(m.name for m in enum_type)
        raise ValueError(f"{arg} must be one of {choices}, got {name!r}") from None


def spatial_tuple(value, n: int, arg: str) -> list:
    """An int or a length-n sequence of ints as a list of n ints (the int broadcast)."""
    if isinstance(value, int):
        return [value] * n
    out = [int(v) for v in value]
    if len(out) != n:
        raise ValueError(f"{arg} must be an int or {n} ints, got {value!r}")
    return out
