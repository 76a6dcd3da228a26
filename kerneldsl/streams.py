"""Streams and events: ordered queues of a runtime's work, and points in them to wait for.

`rt.stream()` makes a stream, `rt.external_stream(handle)` wraps another library's,
`with rt.use_stream(s):` sends this thread's launches, copies and operators to `s`
(`rt.current_stream()`; `rt.default_stream()` outside any `use_stream`). Work on one
stream runs in order; work on two streams is unordered unless one waits for an event of
the other (`s2.wait_event(s1.record_event())`), as in CUDA.

A back end subclasses `Stream` and `Event` (a CUDA stream and event, an OpenCL in-order
queue and marker). `HostStream` is the stream of runtimes whose launches finish before
they return (cpu): its work is always done, so its events are complete when recorded.
"""
from __future__ import annotations

import itertools


class Event:
    """A point in a stream's queue: done once everything queued on the stream before it is."""

    __slots__ = ("stream", "handle", "__weakref__")

    def __init__(self, stream: "Stream", handle):
        self.stream = stream
        self.handle = handle  # the back end's event (CUevent, pyopencl.Event, or None)

    @property
    def runtime(self):
        return self.stream.runtime

    def synchronize(self) -> None:
        """Block the calling thread until the event is done."""
        raise NotImplementedError

    def query(self) -> bool:
        """Whether the event is done (never blocks)."""
        raise NotImplementedError

    def __repr__(self):
        return f"<kd.Event of {self.stream!r}>"


class Stream:
    """An ordered queue of one runtime's work; `handle` is the back end's object (an int
    CUstream on CUDA, a pyopencl.CommandQueue on OpenCL, an id on cpu)."""

    def __init__(self, runtime, handle, external: bool = False, default: bool = False):
        self.runtime = runtime
        self.handle = handle
        self.external = external  # wraps another library's stream (not destroyed by us)
        self.default = default

    def synchronize(self) -> None:
        """Block the calling thread until all work queued on the stream is done."""
        raise NotImplementedError

    def record_event(self) -> Event:
        """An event marking the work queued on this stream so far."""
        raise NotImplementedError

    def wait_event(self, event: Event) -> None:
        """Make work queued on this stream from now on wait until `event` is done (the calling
        thread does not wait)."""
        raise NotImplementedError

    def wait_stream(self, other: "Stream") -> None:
        """Make later work on this stream wait for the work queued on `other` so far."""
        self.wait_event(other.record_event())

    def query(self) -> bool:
        """Whether all work queued on the stream is done."""
        return self.record_event().query()

    def _check_event(self, event) -> None:
        """Validate `event` for wait_event: an Event of this stream's runtime."""
        if not isinstance(event, Event):
            raise TypeError(f"wait_event takes a kd.Event (from stream.record_event()), got {type(event).__name__}")
        if event.runtime is not self.runtime:
            raise ValueError(f"wait_event: the event was recorded on {event.runtime!r}, and this stream belongs to "
                             f"{self.runtime!r}; a stream waits only for events of its own runtime")

    def __repr__(self):
        kind = "default stream" if self.default else "external stream" if self.external else "stream"
        return f"<kd.Stream: {kind} {self.handle!r} of {self.runtime.name}>"


class HostEvent(Event):
    """An event of a HostStream: complete when recorded."""

    __slots__ = ()

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class HostStream(Stream):
    """A stream of a runtime whose launches and copies finish before they return (cpu): its
    queue is executed in order on the calling thread, so there is never anything to wait for."""

    _ids = itertools.count()

    def __init__(self, runtime, default: bool = False):
        super().__init__(runtime, next(HostStream._ids), default=default)

    def synchronize(self) -> None:
        return None

    def record_event(self) -> HostEvent:
        return HostEvent(self, None)

    def wait_event(self, event: Event) -> None:
        self._check_event(event)


__all__ = ["Stream", "Event", "HostStream", "HostEvent"]
