"""Running a cpu launch's cubes on worker threads, so that Ctrl-C can stop it.

A compiled kernel runs the cube ids [first, end) it is given (ctypes releases the GIL). A
launch is cut into chunks of cube ids that worker threads take from a shared counter. The
main thread never runs a chunk itself: it waits in short timed waits, so Python's signal
handlers run. On Ctrl-C it sets the launch's cancel flag, which the kernel reads before every
cube, waits for the workers to stop and lets KeyboardInterrupt through; the runtime stays
usable. A cube that never finishes cannot be stopped: after a grace period its launch is
abandoned (its threads and the memory they touch are kept, never reused) and the runtime
carries on with fresh threads. Other threads' launches run a share of the chunks themselves.
(Small launches that cannot turn long skip all this and run on the calling thread:
runtime.py's `CpuRuntime.launch`.)
"""
from __future__ import annotations

import itertools
import queue
import threading

from .abi import CANCEL_SLOT

WAIT_SLICE_S = 0.05  # how long the main thread blocks between chances to run signal handlers
GRACE_S = 2.0  # how long a cancelled launch may take to reach its next cube boundary


class CubeLaunch:
    """One launch in flight: the chunks of cube ids left, the threads running them, errors.

    `keep` holds everything the kernel reads or writes (argument slots, control record,
    tensor buffers), so an abandoned launch never sees its memory freed or reused."""

    def __init__(self, fn, argp: int, ncubes: int, parts: int, control, keep):
        self.fn = fn
        self.argp = argp
        self.bounds = [ncubes * i // parts for i in range(parts + 1)]
        self.parts = parts
        self.counter = itertools.count()
        self.control = control
        self.keep = keep
        self.errors: list = []
        self.abandoned = False
        self._lock = threading.Lock()
        self._done = threading.Lock()
        self._done.acquire()  # released when the last running thread leaves with no chunk left
        self._active = 0
        self._closed = False

    def cancel(self):
        self.control[CANCEL_SLOT] = 1

    def run(self):
        """Run chunks until none is left or the launch is cancelled; any number of threads
        may call this, before or after the others have finished."""
        with self._lock:
            if self._closed:
                return
            self._active += 1
        try:
            while not self.control[CANCEL_SLOT]:
                i = next(self.counter)
                if i >= self.parts:
                    break
                self.fn(self.argp, self.bounds[i], self.bounds[i + 1])
        except BaseException as e:  # noqa: BLE001  (re-raised by the waiting caller)
            self.errors.append(e)
            self.cancel()
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0 and not self._closed:
                    self._closed = True
                    self._done.release()

    def wait(self, interruptible: bool):
        """Return once every chunk ran (re-raising a worker's error); when `interruptible`,
        an exception raised by a signal handler meanwhile (KeyboardInterrupt) cancels the
        launch, waits up to GRACE_S for the workers to stop, and propagates."""
        if not interruptible:
            self._done.acquire()
        else:
            try:
                while not self._done.acquire(timeout=WAIT_SLICE_S):
                    pass
            except BaseException:
                self.cancel()
                try:
                    self.abandoned = not self._done.acquire(timeout=GRACE_S)
                except BaseException:  # a second Ctrl-C: stop waiting
                    self.abandoned = True
                raise
        if self.errors:
            raise self.errors[0]


class CubeWorkers:
    """Persistent daemon threads that run the CubeLaunch entries queued to them."""

    def __init__(self, count: int):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = []
        for _ in range(count):
            self.threads.append(threading.Thread(target=self._serve, args=(self._queue,), daemon=True,
                                                 name="kd-cpu"))
        for th in self.threads:
            th.start()

    @staticmethod
    def _serve(jobs: queue.SimpleQueue):
        while True:
            job = jobs.get()
            if job is None:
                return
            job.run()
            del job  # (held until the next job came, it kept the finished launch's buffers alive)

    def submit(self, job: CubeLaunch, copies: int):
        """Let `copies` threads work on `job` (each takes chunks until none is left)."""
        for _ in range(copies):
            self._queue.put(job)

    def retire(self):
        """Let the threads end once they are free (a stuck one never is)."""
        for _ in self.threads:
            self._queue.put(None)


def run_on_threads(job: CubeLaunch, workers: int, stack_size: int) -> None:
    """Run `job` on `workers` threads started for it with `stack_size` bytes of stack each
    (kernels whose frames do not fit an ordinary thread's stack), waiting as `CubeLaunch.wait`."""
    with _STACK_LOCK:
        old = threading.stack_size(stack_size)
        try:
            threads = [threading.Thread(target=job.run, name="kd-cpu-big", daemon=True) for _ in range(workers)]
            for th in threads:
                th.start()
        finally:
            threading.stack_size(old)
    job.wait(interruptible=threading.current_thread() is threading.main_thread())


_STACK_LOCK = threading.Lock()
