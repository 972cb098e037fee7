"""An idle web process gives memory back (streams/edge/memory.py, docs/operations.md "Memory").

While no stream is open, the process runs a full garbage collection and hands glibc's free pages back to the
kernel; while streams are open, it leaves both alone.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Callable, Iterator

import pytest

from streams.edge.memory import MALLOC_TRIM, Reclaimer
from tests.support.servers import ROOT


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    """Garbage in cycles stays until someone collects it: here, only the reclaimer."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_reclaimer(idle: Callable[[], bool], until: Callable[[Reclaimer], bool]) -> tuple[bool, int]:
    """A reclaimer checking every 10 ms, over a garbage cycle, until `until(reclaimer)` (at most 5 s); returns
    whether the cycle was collected and how many times the reclaimer ran."""

    async def scenario() -> tuple[bool, int]:
        gone = weakref.ref(Cycle())
        reclaimer = Reclaimer(idle, 0.01)
        reclaimer.start()
        for _ in range(500):
            if until(reclaimer):
                break
            await asyncio.sleep(0.01)
        return gone() is None, reclaimer.runs

    return asyncio.run(asyncio.wait_for(scenario(), 10))


@pytest.mark.usefixtures("no_automatic_collection")
def test_an_idle_process_collects_its_garbage_cycles() -> None:
    collected, runs = run_reclaimer(lambda: True, until=lambda reclaimer: reclaimer.runs > 0)
    assert runs >= 1
    assert collected


@pytest.mark.usefixtures("no_automatic_collection")
def test_a_process_with_streams_open_is_left_alone() -> None:
    asked: list[bool] = []

    def busy() -> bool:
        asked.append(True)
        return False

    collected, runs = run_reclaimer(busy, until=lambda _: len(asked) >= 3)
    assert runs == 0
    assert not collected


def test_interval_zero_never_starts() -> None:
    async def scenario() -> bool:
        reclaimer = Reclaimer(lambda: True, 0)
        reclaimer.start()
        return reclaimer._task is None

    assert asyncio.run(scenario())


# Allocates ~200 MB in 1 KiB blocks (glibc's heap, not Python's small-object arenas), frees all but every 64th, so
# the heap cannot shrink from its top by itself; then reclaims. Prints RSS in MB before and after.
FRAGMENTED_HEAP = textwrap.dedent("""
    import asyncio
    from streams.edge.memory import Reclaimer

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024

    blocks = [bytes(1024) + bytes([n % 256]) for n in range(200_000)]
    kept = blocks[::64]
    del blocks
    before = rss()
    asyncio.run(Reclaimer(lambda: True, 1).reclaim())
    print(before, rss(), len(kept))
""")


def test_freed_heap_memory_goes_back_to_the_kernel() -> None:
    assert MALLOC_TRIM is not None  # glibc, as on Debian and in the Docker image
    result = subprocess.run(
        [sys.executable, "-c", FRAGMENTED_HEAP], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    before, after, _ = (int(value) for value in result.stdout.split())
    assert before - after > 100, result.stdout  # of ~200 MB freed, most was still resident before the trim
