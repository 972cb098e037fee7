"""A stack sampler weighted by the main thread's CPU time, wrapped around a server process (bench/open_cost.py).

    PYTHONPATH=bench OPEN_COST_MODULE=streams.server OPEN_COST_OUT=/tmp/p.json \\
        python -m open_cost_sampler -e tcp:port=8000 config.asgi:application

It runs `OPEN_COST_MODULE` (default `streams.server`) as `__main__` with the same arguments, and does nothing else
until told: SIGUSR1 starts sampling, SIGUSR2 stops it and writes what it saw to `OPEN_COST_OUT` as JSON.

While sampling, a POSIX timer sends the main thread a SIGALRM every `OPEN_COST_INTERVAL_S` (default 1 ms) of
wall time (`ThreadTimer`): a high-resolution clock, where `ITIMER_PROF` (CPU time) ticks with the kernel's
clock, every 4 ms or so, and a storm of a few seconds would get a few hundred samples. Python runs the handler
in the main thread (the event loop's: daphne runs Twisted's asyncio reactor there) at its next bytecode
boundary, with the frame it interrupted. The handler charges that frame's stack with the main thread's CPU
time since the previous sample (`time.thread_time()`), not with one count: a sample taken while the loop
sleeps in epoll weighs nothing, and the weights add up to the main thread's CPU over the window. A C call (a
socket send, a JSON dump, the C step of an asyncio task) is charged to the Python frame it returns to. The
handler's own time is left out of the weights and reported apart (`sampler_s`), so its overhead stays
visible; so is the garbage collector's (`gc_s`, from `gc.callbacks`), which would otherwise land on whichever
frame allocated when a collection fell due; a signal taken in the collector's callback is no sample.

Only the main thread is sampled: CPU of other threads is what bench/open_cost.py reads from /proc beside it.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import runpy
import signal
import sys
import threading
import time
from types import CodeType, FrameType

MODULE = os.environ.get("OPEN_COST_MODULE", "streams.server")
OUT = os.environ.get("OPEN_COST_OUT", "open-cost-profile.json")
INTERVAL_S = float(os.environ.get("OPEN_COST_INTERVAL_S", "0.001"))


CLOCK_MONOTONIC = 1
SIGEV_THREAD_ID = 4


class SigEvent(ctypes.Structure):
    """`struct sigevent` on Linux (64 bytes): the signal, and the thread it goes to."""

    _fields_ = (
        ("value", ctypes.c_void_p),
        ("signo", ctypes.c_int),
        ("notify", ctypes.c_int),
        ("thread_id", ctypes.c_int),
        ("pad", ctypes.c_int * 11),
    )


class TimeSpec(ctypes.Structure):
    _fields_ = (("sec", ctypes.c_long), ("nsec", ctypes.c_long))


class ITimerSpec(ctypes.Structure):
    _fields_ = (("interval", TimeSpec), ("value", TimeSpec))


class ThreadTimer:
    """A POSIX timer whose signal goes to one thread (`SIGEV_THREAD_ID`), not to the process.

    `setitimer`'s signal goes to any thread of the process, and when one of the server's other threads (the
    fetcher's pipe reader, librdkafka's) takes it, CPython 3.11 does not wake the main thread's eval loop: the
    handler waits until the main thread next switches the GIL or calls into Python from C, so the samples would
    fall on I/O calls and allocations rather than at random."""

    def __init__(self, signo: int, thread_id: int) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.create, self.settime = libc.timer_create, libc.timer_settime
        self.timer = ctypes.c_void_p()
        event = SigEvent(signo=signo, notify=SIGEV_THREAD_ID, thread_id=thread_id)
        if self.create(CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(self.timer)) != 0:
            raise OSError(ctypes.get_errno(), "timer_create")

    def set(self, interval_s: float) -> None:
        sec, nsec = int(interval_s), int((interval_s % 1) * 1e9)
        spec = ITimerSpec(interval=TimeSpec(sec, nsec), value=TimeSpec(sec, nsec))
        if self.settime(self.timer, 0, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timer_settime")


class Sampler:
    """Stacks (root first, as code objects) -> main-thread CPU seconds; started and stopped by signals."""

    def __init__(self) -> None:
        self.stacks: dict[tuple[CodeType, ...], float] = {}
        self.samples = 0
        self.own_s = 0.0  # the handler's own CPU, left out of the weights
        self.last = 0.0
        self.started_cpu = 0.0
        self.started_wall = 0.0
        self.gc_s = 0.0  # the collector's CPU, charged to no stack
        self.gc_pending = 0.0  # collector time not yet taken out of a sample's interval
        self.gc_started = 0.0
        self.timer = ThreadTimer(signal.SIGALRM, threading.get_native_id())  # made in the main thread
        self.busy = False  # a SIGALRM during the handler: skipped, or its interval would be counted twice
        self.skipped = 0

    def start(self, signum: int, frame: FrameType | None) -> None:
        self.stacks.clear()
        self.samples = self.skipped = 0
        self.own_s = self.gc_s = self.gc_pending = 0.0
        self.started_wall = time.monotonic()
        self.started_cpu = self.last = time.thread_time()
        signal.signal(signal.SIGALRM, self.sample)
        self.timer.set(INTERVAL_S)

    def sample(self, signum: int, frame: FrameType | None) -> None:
        if frame is not None and frame.f_code is ON_GC_CODE:
            return  # taken as a collection starts or ends: the next sample takes the interval, less the collection
        if self.busy:
            self.skipped += 1
            return
        self.busy = True
        entered = time.thread_time()
        weight = max(0.0, entered - self.last - self.gc_pending)
        self.gc_pending = 0.0
        codes: list[CodeType] = []
        while frame is not None and frame.f_code is SAMPLE_CODE:
            frame = frame.f_back  # a signal taken as the handler was entered: the stack under it is the sample
        while frame is not None:
            codes.append(frame.f_code)
            frame = frame.f_back
        codes.reverse()
        key = tuple(codes)
        self.stacks[key] = self.stacks.get(key, 0.0) + weight
        self.samples += 1
        self.last = time.thread_time()
        self.own_s += self.last - entered
        self.busy = False

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        """A collection is charged to no stack: it runs when an allocation crosses a threshold, wherever that
        is, and a pause of tens of ms with many objects alive would land on one arbitrary frame."""
        if phase == "start":
            self.gc_started = time.thread_time()
        else:
            spent = time.thread_time() - self.gc_started
            self.gc_s += spent
            self.gc_pending += spent

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.timer.set(0.0)
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        report = {
            "module": MODULE,
            "interval_s": INTERVAL_S,
            "samples": self.samples,
            "skipped": self.skipped,
            "wall_s": time.monotonic() - self.started_wall,
            "main_thread_cpu_s": time.thread_time() - self.started_cpu,
            "sampler_s": self.own_s,
            "gc_s": self.gc_s,
            "stacks": [
                [[[code.co_filename, code.co_qualname] for code in stack], weight]
                for stack, weight in self.stacks.items()
                if weight > 0
            ],
        }
        partial = OUT + ".partial"
        with open(partial, "w") as out:
            json.dump(report, out)
        os.replace(partial, OUT)


SAMPLE_CODE = Sampler.sample.__code__
ON_GC_CODE = Sampler.on_gc.__code__


def main() -> None:
    sampler = Sampler()
    signal.signal(signal.SIGUSR1, sampler.start)
    signal.signal(signal.SIGUSR2, sampler.stop)
    gc.callbacks.append(sampler.on_gc)
    sys.path.insert(0, os.getcwd())  # the checkout the server runs from (its cwd), before bench/ on PYTHONPATH
    sys.argv = [MODULE, *sys.argv[1:]]
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
