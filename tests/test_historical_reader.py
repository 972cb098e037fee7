"""The short-lived reader of what the cache no longer holds, against the real broker: its close is safe to repeat
(a stream cancelled while closing it is closed again by its cleanup)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from django.conf import settings

from streams.kafka import HistoricalReader, ReaderStats
from tests.inprocess import LoopThread
from tests.test_zilla_scenarios import Produce


def test_a_historical_reader_closes_once_however_often_it_is_closed(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    produce(topic, b"x")
    before = ReaderStats.historical_readers

    async def scenario() -> None:
        reader = HistoricalReader(settings.KAFKA, topic)
        await reader.start({0: 0})
        assert ReaderStats.historical_readers == before + 1
        polling = asyncio.ensure_future(reader.poll(0.5))
        closing = asyncio.ensure_future(reader.close())
        await asyncio.sleep(0)
        closing.cancel()  # a stream cancelled while its reader closes, then closed again by its cleanup
        await asyncio.gather(closing, polling, return_exceptions=True)
        await asyncio.gather(reader.close(), reader.close())
        await reader.close()
        assert ReaderStats.historical_readers == before
        with pytest.raises(RuntimeError, match="is closed"):
            await reader.poll(0.1)
        never_started = HistoricalReader(settings.KAFKA, topic)
        await never_started.close()
        await never_started.close()

    loop_thread.run(scenario())
    assert ReaderStats.historical_readers == before
