"""The stall watch (streams/hub/watchdog.py), with a fake stream, cache and broker: a stream is stalled when it
stays put while Kafka's end moves past it at two checks in a row, and only then; nothing is repaired."""

from __future__ import annotations

import pytest

from streams.hub.topic_state import TopicState
from streams.hub.watchdog import StallWatch
from streams.kafka.client import TopicInfo, Watermarks

STALL_S = 30.0


class Stream:
    label = "/items"

    def __init__(self, cursor: int) -> None:
        self.cursors = {0: cursor}
        self.open = True

    def receiving(self) -> bool:
        return self.open


class EmptyCache:
    def log(self, topic: str, partition: int) -> None:
        return None


class Metadata:
    def __init__(self) -> None:
        self.high = 5

    async def watermarks(self, topic: str, partitions: list[int]) -> dict[int, Watermarks]:
        return {partition: Watermarks(0, self.high) for partition in partitions}


def topic(stream: Stream) -> TopicState:
    state = TopicState("items", TopicInfo([0], compacted=False), 0.0)
    state.subscribers.add(stream)  # type: ignore[arg-type]
    return state


async def check(
    watch: StallWatch, state: TopicState, metadata: Metadata, now: float, waiting: tuple[tuple[str, int], ...] = ()
) -> None:
    await watch.check([state], EmptyCache(), metadata, now, waiting)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_a_stream_that_stays_put_while_kafka_moves_on_is_noticed_once() -> None:
    watch, metadata, stream = StallWatch(STALL_S), Metadata(), Stream(cursor=5)
    state = topic(stream)
    await check(watch, state, metadata, 0)  # first seen
    await check(watch, state, metadata, STALL_S)  # quiet for long: Kafka's end noted
    metadata.high = 8
    await check(watch, state, metadata, STALL_S + 1)  # behind once
    assert watch.stalled == 0
    metadata.high = 9
    await check(watch, state, metadata, STALL_S + 2)  # behind twice in a row
    await check(watch, state, metadata, STALL_S + 3)
    assert (watch.stalled, watch.noticed) == (1, 1)

    stream.cursors = {0: 9}  # it moved: no longer stalled
    await check(watch, state, metadata, STALL_S + 4)
    assert (watch.stalled, watch.noticed) == (0, 1)


@pytest.mark.asyncio
async def test_a_stream_at_the_end_the_fetcher_reached_or_whose_client_is_full_is_not_stalled() -> None:
    watch, metadata = StallWatch(STALL_S), Metadata()
    at_end, full = Stream(cursor=5), Stream(cursor=5)
    full.open = False
    states = [topic(at_end), topic(full)]
    for now in (0, STALL_S, STALL_S + 1, STALL_S + 2, STALL_S + 3):
        metadata.high += 1  # with nothing to deliver (an aborted transaction's records and marker)...
        states[0].reached_end(0, now)  # ...which the fetcher read through, to Kafka's new end
        for state in states:
            await check(watch, state, metadata, now)
    assert (watch.stalled, watch.noticed) == (0, 0)


@pytest.mark.asyncio
async def test_a_stream_whose_fetcher_reached_the_end_before_kafka_moved_on_and_not_since_is_noticed() -> None:
    watch, metadata, stream = StallWatch(STALL_S), Metadata(), Stream(cursor=5)
    state = topic(stream)
    state.reached_end(0, 0.0)  # a live stream's usual place: at the end, waiting
    for now in (0, STALL_S, STALL_S + 1, STALL_S + 2, STALL_S + 3):
        metadata.high += 1  # records arrive in Kafka; the consumer fetches none and says nothing
        await check(watch, state, metadata, now)
    assert (watch.stalled, watch.noticed) == (1, 1)


@pytest.mark.asyncio
async def test_a_stream_whose_partition_waits_for_its_schema_registry_is_not_stalled() -> None:
    watch, metadata = StallWatch(STALL_S), Metadata()
    waiting, ordinary = Stream(cursor=5), Stream(cursor=5)
    states = [topic(waiting), topic(ordinary)]
    for now in (0, STALL_S, STALL_S + 1, STALL_S + 2, STALL_S + 3):
        metadata.high += 1
        await check(watch, states[0], metadata, now, waiting=(("items", 0),))
        await check(watch, states[1], metadata, now)
    assert (watch.stalled, watch.noticed) == (1, 1)  # the ordinary one only
