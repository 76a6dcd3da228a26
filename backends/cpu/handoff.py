"""A cheap handoff of one-worker cpu launches from the main thread to a worker thread.

A small launch (one worker's worth of cubes) still runs off the main thread, so that Ctrl-C
can stop it or, if a cube never ends, abandon it (launcher.py). Handing it over through a
Python queue and lock costs two thread wake-ups per launch (tens of µs on a busy machine).
Here the handoff is a mailbox of int64 slots that both sides poll in a few JIT'd native
functions, without the GIL:

    main thread                                 worker (`FastWorker`)
    write fn, argp, ncubes; post seq  ------->  spins on `posted` (up to SERVE_SPIN_S after
    spin on `done` (up to WAIT_SPIN_S)          its last job), runs fn(argp, 0, ncubes),
       <---------------------------------------  stores `done` = seq
    then sleep on a lock the worker releases    (and, if the main thread sleeps, wakes it)

A worker idle for SERVE_SPIN_S parks on a queue (the next launch wakes it); a main thread
whose launch outlasts WAIT_SPIN_S sets `sleeping` and blocks on a lock in short timed waits,
so signal handlers (KeyboardInterrupt) run as before.
"""
from __future__ import annotations

import array
import ctypes
import functools
import queue
import threading
import time

import llvmlite.binding as llvm

from . import compiler

POSTED, DONE, FN, ARGP, NCUBES, SLEEPING = range(6)
MAILBOX_SLOTS = 8
SERVE_SPIN_S = 200e-6  # how long an idle worker polls for the next launch before it parks
WAIT_SPIN_S = 50e-6  # how long the main thread polls for the end of a launch before it sleeps
YIELD_EVERY = 16  # polls between sched_yield calls (a power of two)
WAIT_SLICE_S = 0.05  # longest sleep of a waiting main thread between chances to run signal handlers

_IR = """
declare void @llvm.x86.sse2.pause()
declare i32 @sched_yield()

; one poll's pause; every {YIELD_EVERY}th poll gives the core away instead (on a machine with
; more busy threads than cores, the thread polled for may be waiting for this very core)
define internal void @relax(i64 %k) {{
entry:
  %low = and i64 %k, {YIELD_MASK}
  %give = icmp eq i64 %low, {YIELD_MASK}
  br i1 %give, label %yield, label %spin
yield:
  %r = call i32 @sched_yield()
  ret void
spin:
  {relax}
  ret void
}}

; poll *p up to `spins` times until (*p == v) is `equal`; whether it came to be (1) or not (0)
define internal i64 @await(i64* %p, i64 %v, i1 %equal, i64 %spins) {{
entry:
  br label %poll
poll:
  %k = phi i64 [0, %entry], [%k1, %relaxed]
  %now = load atomic i64, i64* %p acquire, align 8
  %same = icmp eq i64 %now, %v
  %met = icmp eq i1 %same, %equal
  br i1 %met, label %yes, label %relaxed
relaxed:
  call void @relax(i64 %k)
  %k1 = add i64 %k, 1
  %more = icmp ult i64 %k1, %spins
  br i1 %more, label %poll, label %no
yes:
  ret i64 1
no:
  ret i64 0
}}

; worker: wait for a posted launch, run it, publish it done; returns the last seq run once idle
; for `spins` polls, -1 when asked to quit (fn = 0), or -2 - seq after a launch whose end the
; sleeping main thread must be woken for
define i64 @kd_serve(i64* %mail, i64 %last, i64 %spins) {{
entry:
  %posted = getelementptr i64, i64* %mail, i64 {POSTED}
  %done = getelementptr i64, i64* %mail, i64 {DONE}
  %fnp = getelementptr i64, i64* %mail, i64 {FN}
  %argpp = getelementptr i64, i64* %mail, i64 {ARGP}
  %np = getelementptr i64, i64* %mail, i64 {NCUBES}
  %sleepp = getelementptr i64, i64* %mail, i64 {SLEEPING}
  br label %idle
idle:
  %seen = phi i64 [%last, %entry], [%cur, %ran]
  %got = call i64 @await(i64* %posted, i64 %seen, i1 0, i64 %spins)
  %new = icmp ne i64 %got, 0
  br i1 %new, label %take, label %park
park:
  ret i64 %seen
take:
  %cur = load atomic i64, i64* %posted acquire, align 8
  %fn = load i64, i64* %fnp, align 8
  %quit = icmp eq i64 %fn, 0
  br i1 %quit, label %leave, label %run
leave:
  ret i64 -1
run:
  %argp = load i64, i64* %argpp, align 8
  %n = load i64, i64* %np, align 8
  %f = inttoptr i64 %fn to void (i64, i64, i64)*
  call void %f(i64 %argp, i64 0, i64 %n)
  store atomic i64 %cur, i64* %done seq_cst, align 8
  %sleeping = load atomic i64, i64* %sleepp seq_cst, align 8
  %wake = icmp ne i64 %sleeping, 0
  br i1 %wake, label %woken, label %ran
woken:
  %code = sub i64 -2, %cur
  ret i64 %code
ran:
  br label %idle
}}

; a launch sequence as one handed-over "kernel": entries [start, end) of the table at %table,
; each three words (fn, argp, ncubes), run in order as fn(argp, 0, ncubes)
define void @kd_run_sequence(i64 %table, i64 %start, i64 %end) {{
entry:
  %t = inttoptr i64 %table to i64*
  br label %loop
loop:
  %i = phi i64 [%start, %entry], [%i1, %body]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %at = mul i64 %i, 3
  %fp = getelementptr i64, i64* %t, i64 %at
  %fn = load i64, i64* %fp, align 8
  %ap = getelementptr i64, i64* %fp, i64 1
  %argp = load i64, i64* %ap, align 8
  %np = getelementptr i64, i64* %fp, i64 2
  %n = load i64, i64* %np, align 8
  %f = inttoptr i64 %fn to void (i64, i64, i64)*
  call void %f(i64 %argp, i64 0, i64 %n)
  %i1 = add i64 %i, 1
  br label %loop
done:
  ret void
}}

; main thread: post launch `seq`, then poll up to `spins` times for it to be done (1) or not (0)
define i64 @kd_post_wait(i64* %mail, i64 %seq, i64 %spins) {{
entry:
  %posted = getelementptr i64, i64* %mail, i64 {POSTED}
  store atomic i64 %seq, i64* %posted seq_cst, align 8
  %r = call i64 @kd_wait(i64* %mail, i64 %seq, i64 %spins)
  ret i64 %r
}}

define i64 @kd_wait(i64* %mail, i64 %seq, i64 %spins) {{
entry:
  %done = getelementptr i64, i64* %mail, i64 {DONE}
  %r = call i64 @await(i64* %done, i64 %seq, i1 1, i64 %spins)
  ret i64 %r
}}

; main thread, about to sleep: announce it, then whether launch `seq` finished meanwhile (1)
define i64 @kd_sleep_check(i64* %mail, i64 %seq) {{
entry:
  %sleepp = getelementptr i64, i64* %mail, i64 {SLEEPING}
  %done = getelementptr i64, i64* %mail, i64 {DONE}
  store atomic i64 1, i64* %sleepp seq_cst, align 8
  %d = load atomic i64, i64* %done seq_cst, align 8
  %fin = icmp eq i64 %d, %seq
  %r = zext i1 %fin to i64
  ret i64 %r
}}
"""

_MAIL_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_CHECK_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)


class _Native:
    """The JIT'd mailbox functions (one engine per process) and how many polls fill a time."""

    def __init__(self):
        tm = compiler.new_target_machine()
        x86 = llvm.get_process_triple().startswith(("x86_64", "i686", "i386"))
        source = _IR.format(relax="call void @llvm.x86.sse2.pause()" if x86 else "", YIELD_EVERY=YIELD_EVERY,
                            YIELD_MASK=YIELD_EVERY - 1, POSTED=POSTED, DONE=DONE, FN=FN, ARGP=ARGP, NCUBES=NCUBES,
                            SLEEPING=SLEEPING)
        mod = llvm.parse_assembly(source)
        mod.verify()
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        address = self.engine.get_function_address
        self.serve = _MAIL_FN(address("kd_serve"))
        self.post_wait = _MAIL_FN(address("kd_post_wait"))
        self.wait = _MAIL_FN(address("kd_wait"))
        self.sleep_check = _CHECK_FN(address("kd_sleep_check"))
        self.run_sequence = address("kd_run_sequence")  # handed over as a kernel (CpuLaunchSequence)
        self.polls_per_s = self._calibrate()

    def _calibrate(self) -> float:
        """Polls per second of `kd_wait` on a launch that never ends (the pause instruction's
        latency differs tenfold between CPUs)."""
        mail = array.array("q", [0] * MAILBOX_SLOTS)
        addr = mail.buffer_info()[0]
        polls, best = 20000, float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            self.wait(addr, 1, polls)
            best = min(best, time.perf_counter() - t0)
        return polls / max(best, 1e-7)

    def polls(self, seconds: float) -> int:
        return max(1, int(seconds * self.polls_per_s))


@functools.lru_cache(maxsize=None)
def native() -> _Native:
    return _Native()


class FastWorker:
    """One daemon thread that runs the main thread's one-worker launches, handed over through
    a mailbox (module docstring). Only one thread (the main one) may call `start`."""

    def __init__(self):
        self._native = native()
        self._mail = array.array("q", [0] * MAILBOX_SLOTS)
        self._addr = self._mail.buffer_info()[0]
        self._seq = 0
        self._serve_polls = self._native.polls(SERVE_SPIN_S)
        self._wait_polls = self._native.polls(WAIT_SPIN_S)
        self._parked = False
        self._wake = queue.SimpleQueue()
        self._finished = threading.Lock()  # released by the worker for a sleeping main thread
        self._finished.acquire()
        self.thread = threading.Thread(target=self._serve, daemon=True, name="kd-cpu-fast")
        self.thread.start()

    def _serve(self):
        native, mail, addr, last = self._native, self._mail, self._addr, 0
        while True:
            r = native.serve(addr, last, self._serve_polls)
            if r == -1:
                return
            if r <= -2:  # a launch ended while the main thread slept: wake it
                last = -2 - r
                try:
                    self._finished.release()
                except RuntimeError:  # already released for a wake-up it did not need
                    pass
                continue
            last = r
            self._parked = True
            if mail[POSTED] != last:  # a launch came in meanwhile
                self._parked = False
                continue
            self._wake.get()

    def _unpark(self):
        if self._parked:
            self._parked = False
            self._wake.put(None)

    def start(self, fn_address: int, argp: int, ncubes: int) -> int:
        """Hand over `fn(argp, 0, ncubes)`; returns the launch's sequence number for `wait`."""
        mail = self._mail
        mail[FN] = fn_address
        mail[ARGP] = argp
        mail[NCUBES] = ncubes
        self._seq += 1
        return self._seq

    def run(self, seq: int) -> bool:
        """Post launch `seq` and poll briefly for its end: whether it finished."""
        if self._parked:
            native = self._native
            native.post_wait(self._addr, seq, 0)
            self._unpark()
            return bool(native.wait(self._addr, seq, self._wait_polls))
        return bool(self._native.post_wait(self._addr, seq, self._wait_polls))

    def sleep_until_done(self, seq: int, timeout: float | None = None) -> bool:
        """Block (in timed waits, so signal handlers run) until launch `seq` is done or
        `timeout` seconds passed; whether it is done."""
        native, mail = self._native, self._mail
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not native.sleep_check(self._addr, seq):
                self._unpark()
                left = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
                if left <= 0:
                    return False
                self._finished.acquire(timeout=left)
        finally:
            mail[SLEEPING] = 0
        return True
