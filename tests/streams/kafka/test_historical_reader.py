"""The short-lived reader of what the cache no longer holds, against the real broker: its close is safe to repeat
(a stream cancelled while closing it is closed again by its cleanup)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient
from django.conf import settings

from streams.kafka.admin import ensure_topic
from streams.kafka.client import HistoricalReader, ReaderStats
from streams.kafka.consumer_host import ConsumerLost
from tests.conftest import unique
from tests.e2e.test_zilla_scenarios import Produce
from tests.support.inprocess import LoopThread


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


def test_a_topic_deleted_under_a_historical_reader_spares_the_process(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """A topic deleted under a historical reader spares the process and the next reader. Kafka answers the fetch
    with UNKNOWN_TOPIC_ID; a broker whose answer crashes librdkafka 2.16 (decision 0008) ends only the readers'
    child process: the reader's poll raises ConsumerLost, and the next reader gets a new process."""
    doomed, other = unique("t-doomed"), new_topic()
    ensure_topic(settings.KAFKA, doomed)
    for topic in (doomed, other):
        produce(topic, b"x")

    async def read_one(topic: str) -> list[bytes | None]:
        reader = HistoricalReader(settings.KAFKA, topic)
        try:
            await reader.start({0: 0})
            for _ in range(100):
                batch = await reader.poll(0.1)
                if batch.records:
                    return [record.value for record in batch.records]
            return []
        finally:
            await reader.close()

    async def scenario() -> None:
        reader = HistoricalReader(settings.KAFKA, doomed)
        await reader.start({0: 0})
        try:
            assert [r.value for r in (await reader.poll(5)).records] == [b"x"]
            await asyncio.to_thread(delete_topic, doomed)
            with contextlib.suppress(ConsumerLost):  # only if librdkafka crashed in the child
                for _ in range(30):
                    await reader.poll(0.1)
        finally:
            await reader.close()
        assert await read_one(other) == [b"x"]

    loop_thread.run(scenario())


def delete_topic(topic: str) -> None:
    admin = AdminClient(settings.KAFKA.admin_config())  # kept until the answer: its futures die with it
    admin.delete_topics([topic])[topic].result(timeout=10)
