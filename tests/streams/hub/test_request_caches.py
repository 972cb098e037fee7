"""What keeps a flood of requests from becoming a flood of queries: unknown paths share rate-limited route-table
reads, and `?since=` lookups are shared and kept. The route table reads the real Postgres; the `?since=` cache asks
the real broker, through a wrapper that counts the lookups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from django.conf import settings as django_settings
from django.db import connection

from bindings.services import do_put_route
from streams.hub.cache import Cache
from streams.hub.start_finder import StartFinder
from streams.kafka.client import KafkaUnavailableError, Metadata
from streams.routes.table import OpenStreams, RouteTable
from tests.conftest import unique, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.asyncio
async def test_unknown_paths_share_one_route_table_read_per_gap_and_a_new_route_is_still_found(
    settings: Any,
) -> None:
    settings.SSE_UNKNOWN_PATH_RELOAD_MS = 400
    loop = asyncio.get_running_loop()
    # One thread for the table's queries, so the test can close its database connection at the end.
    database_thread = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(database_thread)
    try:
        table = RouteTable(OpenStreams())
        await table.candidates("/warm-up-" + unique("p"))  # the first read (the table answers for this request)

        # Fifty misses: the first reads at once; the others arrived after that read began, so they wait for the
        # next one, a gap later, and share it. Nobody is answered from a read that began before it arrived. Fifty
        # more right after: the gap has not passed, so all of them wait for one read.
        for reads in (2, 1):
            before, started = table.reloads, loop.time()
            found = await asyncio.gather(*(table.candidates(f"/{unique('nothing')}") for _ in range(50)))
            assert found == [[]] * 50
            assert table.reloads - before == reads
            assert loop.time() - started >= 0.35

        # A route committed now is found by the next request, though the gap has not passed: it waits for a read.
        name = unique("fresh")
        await asyncio.to_thread(do_put_route, name=name, path=f"/{name}", topic="t")
        matched = await table.candidates(f"/{name}")
        assert [m.route.name for m in matched] == [name]
    finally:
        await loop.run_in_executor(None, lambda: connection.close())  # noqa: PLW0108  (resolved in that thread)
        database_thread.shutdown()


class CountingMetadata:
    """The platform's `Metadata` over the real broker, its time lookups counted (and failed, when told to)."""

    def __init__(self) -> None:
        self.real = Metadata(django_settings.KAFKA)
        self.calls = 0
        self.failing = False
        self.delay = 0.0  # seconds added to each lookup: a loaded broker

    async def offsets_for_time(self, topic: str, partitions: list[int], epoch_ms: int) -> dict[int, int]:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.failing:
            raise KafkaUnavailableError("the broker is unreachable")
        return await self.real.offsets_for_time(topic, partitions, epoch_ms)


def finder(metadata: CountingMetadata, topic: str) -> tuple[StartFinder, Any]:
    state = SimpleNamespace(name=topic, info=SimpleNamespace(partitions=[0, 1]))
    return StartFinder(metadata, Cache(1 << 20), asyncio.get_running_loop()), state  # type: ignore[arg-type]


def timed_topic(new_topic: Callable[..., str]) -> tuple[str, int]:
    """A two-partition topic whose records are stamped 1 000 ms apart from a base time; returns (topic, base).

    The base is an hour ago: records stamped older than the topic's retention (7 days) would be deleted within a
    second by the broker's retention check. An idempotent producer of its own, and a wait for all six at the end
    of their partitions: a retry may not reorder them, and a lookup may not come before they are all there."""
    topic, base = new_topic(partitions=2), int(time.time() * 1000) - 3_600_000
    producer = Producer({**django_settings.KAFKA.producer_config(), "enable.idempotence": True})
    for index in range(6):  # partition 0: base, +2 s, +4 s; partition 1: +1 s, +3 s, +5 s
        producer.produce(topic, value=b"v%d" % index, partition=index % 2, timestamp=base + 1000 * index)
    assert producer.flush(10) == 0
    admin = AdminClient(django_settings.KAFKA.admin_config())
    ends = {TopicPartition(topic, p): OffsetSpec.latest() for p in (0, 1)}  # type: ignore[no-untyped-call]

    def all_there() -> bool:
        return all(f.result(timeout=10).offset == 3 for f in admin.list_offsets(ends).values())

    wait_until(all_there)
    return topic, base


@pytest.mark.asyncio
async def test_since_lookups_are_shared_and_kept_for_the_setting(settings: Any, new_topic: Callable[..., str]) -> None:
    settings.SSE_SINCE_CACHE_S = 3  # seconds: longer than a lookup takes on a loaded machine
    topic, base = await asyncio.to_thread(timed_topic, new_topic)
    metadata = CountingMetadata()
    starts, state = finder(metadata, topic)
    answers = await asyncio.gather(*(starts._offsets_for_time(state, base + 1500) for _ in range(20)))
    assert answers == [{0: 1, 1: 1}] * 20  # +2 s on partition 0, +3 s on partition 1
    assert metadata.calls == 1  # twenty streams asking together: one lookup
    await starts._offsets_for_time(state, base + 1500)
    assert metadata.calls == 1  # kept
    assert await starts._offsets_for_time(state, base + 2500) == {0: 2, 1: 1}
    assert metadata.calls == 2  # another time, another lookup
    await asyncio.sleep(3.1)
    await starts._offsets_for_time(state, base + 1500)
    assert metadata.calls == 3  # older than SSE_SINCE_CACHE_S: asked again


@pytest.mark.asyncio
async def test_a_since_lookup_slower_than_the_setting_is_kept_from_its_answer(
    settings: Any, new_topic: Callable[..., str]
) -> None:
    settings.SSE_SINCE_CACHE_S = 0.5
    topic, base = await asyncio.to_thread(timed_topic, new_topic)
    metadata = CountingMetadata()
    metadata.delay = 1.0  # the lookup outlasts the setting
    starts, state = finder(metadata, topic)
    assert await starts._offsets_for_time(state, base + 1500) == {0: 1, 1: 1}
    assert await starts._offsets_for_time(state, base + 1500) == {0: 1, 1: 1}
    assert metadata.calls == 1  # the answer is fresh, though the question is older than the setting
    await asyncio.sleep(0.6)
    await starts._offsets_for_time(state, base + 1500)
    assert metadata.calls == 2


@pytest.mark.asyncio
async def test_a_since_answer_of_no_record_yet_or_a_failure_is_not_kept(
    settings: Any, new_topic: Callable[..., str]
) -> None:
    settings.SSE_SINCE_CACHE_S = 60
    topic, base = await asyncio.to_thread(timed_topic, new_topic)
    metadata = CountingMetadata()
    starts, state = finder(metadata, topic)
    # After +4 s, partition 1 still has a record (+5 s) but partition 0 has none yet: one may come.
    assert await starts._offsets_for_time(state, base + 4500) == {0: -1, 1: 2}
    await starts._offsets_for_time(state, base + 4500)
    assert metadata.calls == 2

    metadata.failing = True
    for _ in range(2):
        with pytest.raises(KafkaUnavailableError):
            await starts._offsets_for_time(state, base + 1500)
    assert metadata.calls == 4
