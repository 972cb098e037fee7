"""`Wakeup` (streams/stream/wakeup.py), the pump's event: `asyncio.Event`'s behaviour for its one waiting task,
holding no future while nobody waits."""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc

from streams.stream.wakeup import Wakeup


def test_a_wait_returns_at_once_when_set_and_otherwise_when_set_later() -> None:
    async def scenario() -> list[bool]:
        wakeup = Wakeup()
        wakeup.set()
        await asyncio.wait_for(wakeup.wait(), 1)
        wakeup.clear()
        waiting = asyncio.ensure_future(wakeup.wait())
        await asyncio.sleep(0.01)
        still = not waiting.done()
        wakeup.set()
        await asyncio.wait_for(waiting, 1)
        return [still, wakeup.is_set()]

    assert asyncio.run(scenario()) == [True, True]


def test_a_cancelled_wait_leaves_the_next_one_to_work() -> None:
    async def scenario() -> bool:
        wakeup = Wakeup()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wakeup.wait(), 0.01)
        waiting = asyncio.ensure_future(wakeup.wait())
        await asyncio.sleep(0)
        wakeup.set()
        await asyncio.wait_for(waiting, 1)
        return waiting.done()

    assert asyncio.run(scenario())


def test_a_wakeup_nobody_waits_on_is_smaller_than_an_asyncio_event() -> None:
    def held(make: type) -> float:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            kept = [make() for _ in range(200)]
            return (tracemalloc.get_traced_memory()[0] - before) / len(kept)
        finally:
            tracemalloc.stop()

    assert held(Wakeup) < 100  # bytes: about 56
    assert held(asyncio.Event) > 700  # about 900, its waiters' deque most of it
