"""A stack sampler weighted by the main thread's CPU time, wrapped around a server process (bench/open_cost.py).

    PYTHONPATH=bench OPEN_COST_MODULE=streams.server OPEN_COST_OUT=/tmp/p.json \\
        python -m open_cost_sampler -e tcp:port=8000 config.asgi:application

It runs `OPEN_COST_MODULE` (default `streams.server`) as `__main__` with the same arguments, and does nothing else
until told: SIGUSR1 starts sampling, SIGUSR2 stops it and writes what it saw to `OPEN_COST_OUT` as JSON.

While sampling, `ITIMER_REAL` fires a SIGALRM every `OPEN_COST_INTERVAL_S` (default 1 ms) of wall time: a
high-resolution timer, where `ITIMER_PROF` (CPU time) ticks with the kernel's clock, every 4 ms or so, and a
storm of a few seconds would get a few hundred samples. Python runs the handler in the main thread (the event
loop's: daphne runs Twisted's asyncio reactor there) at its next bytecode boundary, with the frame it
interrupted. The handler charges that frame's stack with the main thread's CPU time since the previous sample
(`time.thread_time()`), not with one count: a sample taken while the loop sleeps in epoll, or after a tick
that other threads (the fetcher's pipe reader, librdkafka) used, weighs what the loop actually spent, so the
weights add up to the main thread's CPU over the window. A C call (a socket send, a JSON dump, the C step of
an asyncio task) is charged to the Python frame it returns to. The handler's own time is left out of the
weights and reported apart (`sampler_s`), so its overhead stays visible.

Only the main thread is sampled: CPU of other threads is what bench/open_cost.py reads from /proc beside it.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
from types import CodeType, FrameType

MODULE = os.environ.get("OPEN_COST_MODULE", "streams.server")
OUT = os.environ.get("OPEN_COST_OUT", "open-cost-profile.json")
INTERVAL_S = float(os.environ.get("OPEN_COST_INTERVAL_S", "0.001"))


class Sampler:
    """Stacks (root first, as code objects) -> main-thread CPU seconds; started and stopped by signals."""

    def __init__(self) -> None:
        self.stacks: dict[tuple[CodeType, ...], float] = {}
        self.samples = 0
        self.own_s = 0.0  # the handler's own CPU, left out of the weights
        self.last = 0.0
        self.started_cpu = 0.0
        self.started_wall = 0.0
        self.busy = False  # a SIGALRM during the handler: skipped, or its interval would be counted twice
        self.skipped = 0

    def start(self, signum: int, frame: FrameType | None) -> None:
        self.stacks.clear()
        self.samples = self.skipped = 0
        self.own_s = 0.0
        self.started_wall = time.monotonic()
        self.started_cpu = self.last = time.thread_time()
        signal.signal(signal.SIGALRM, self.sample)
        signal.setitimer(signal.ITIMER_REAL, INTERVAL_S, INTERVAL_S)

    def sample(self, signum: int, frame: FrameType | None) -> None:
        if self.busy:
            self.skipped += 1
            return
        self.busy = True
        entered = time.thread_time()
        weight = entered - self.last
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

    def stop(self, signum: int, frame: FrameType | None) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        report = {
            "module": MODULE,
            "interval_s": INTERVAL_S,
            "samples": self.samples,
            "skipped": self.skipped,
            "wall_s": time.monotonic() - self.started_wall,
            "main_thread_cpu_s": time.thread_time() - self.started_cpu,
            "sampler_s": self.own_s,
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


def main() -> None:
    sampler = Sampler()
    signal.signal(signal.SIGUSR1, sampler.start)
    signal.signal(signal.SIGUSR2, sampler.stop)
    sys.path.insert(0, os.getcwd())  # the checkout the server runs from (its cwd), before bench/ on PYTHONPATH
    sys.argv = [MODULE, *sys.argv[1:]]
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
