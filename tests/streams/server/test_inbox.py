"""`Inbox` (streams/server/inbox.py): the request's queue as daphne fills it and the application reads it, in the
order put, with nothing lost to a reader that gave up; and holding next to nothing while empty, as every open
stream's does."""

from __future__ import annotations

import asyncio
import tracemalloc

import pytest

from streams.server.inbox import Inbox


def test_it_hands_out_what_was_put_in_order_and_a_reader_waits_for_the_next() -> None:
    async def scenario() -> list[object]:
        inbox = Inbox()
        assert inbox  # daphne asks for its truth: "made already"
        inbox.put_nowait("request")
        first = await inbox.get()
        reader = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        assert not reader.done()
        inbox.put_nowait("disconnect")
        inbox.put_nowait("later")
        return [first, await reader, await inbox.get(), inbox.empty()]

    assert asyncio.run(scenario()) == ["request", "disconnect", "later", True]


def test_a_reader_cancelled_once_woken_leaves_its_message_to_the_next() -> None:
    async def scenario() -> object:
        inbox = Inbox()
        gives_up, waits = asyncio.ensure_future(inbox.get()), asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        inbox.put_nowait("disconnect")  # wakes the first reader...
        gives_up.cancel()  # ...which is cancelled before it runs
        return await asyncio.wait_for(waits, 1)

    assert asyncio.run(scenario()) == "disconnect"


def test_get_nowait_on_an_empty_inbox_raises_as_a_queue_does() -> None:
    with pytest.raises(asyncio.QueueEmpty):
        Inbox().get_nowait()


def test_an_inbox_read_and_empty_holds_a_small_part_of_an_asyncio_queue() -> None:
    async def held(make: type) -> float:
        queues = []
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(200):
                queue = make()
                queue.put_nowait({"type": "http.request"})
                await queue.get()
                queues.append(queue)
            return (tracemalloc.get_traced_memory()[0] - before) / len(queues)
        finally:
            tracemalloc.stop()

    inbox, queue = asyncio.run(held(Inbox)), asyncio.run(held(asyncio.Queue))
    assert inbox < 100  # bytes per request held: about 48
    assert queue > 2000  # about 2 300
