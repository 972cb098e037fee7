"""The reading half of a stream (streams/stream/reader.py): from the cache window through its cursors, in chunks a
connection can take, and from Kafka what the window no longer holds (a real historical reader on the real broker)."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings

from streams.codecs.event_id import etag_id
from streams.events.subscription import Subscription, SubscriptionOptions
from streams.hub.cache import Cache
from streams.hub.shared_reads import SharedReads
from streams.hub.topic_state import TopicState
from streams.kafka.client import Record, TopicInfo
from streams.stream.reader import CHUNK_BYTES, Source, StreamReader, start_source
from tests.e2e.test_zilla_scenarios import Produce
from tests.support.inprocess import LoopThread
from tests.support.sse_client import Event, parse_block

TOPIC = "items"


def records(partition: int, first: int, *values: bytes, key: bytes | None = None) -> list[Record]:
    return [Record(partition, first + index, key, value, ()) for index, value in enumerate(values)]


def reader_of(
    cache: Cache,
    starts: dict[int, int],
    *,
    topic: str = TOPIC,
    ends: dict[int, int] | None = None,
    options: SubscriptionOptions | None = None,
) -> StreamReader:
    state = TopicState(topic, TopicInfo(sorted(starts), compacted=False), described_at=0.0)
    subscription = Subscription(
        dict(starts), ends=ends or dict(starts), starts=starts, options=options or SubscriptionOptions()
    )
    return StreamReader(cache, settings.KAFKA, state, subscription, dict(starts))


def events(data: bytes) -> list[Event]:
    return [event for event in (parse_block(block) for block in data.split(b"\n\n")[:-1]) if event.is_event]


def texts(data: bytes) -> list[str]:
    return [event.text for event in events(data)]


def test_a_read_takes_each_partitions_window_from_its_cursor_and_moves_the_cursors() -> None:
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 0)
    cache.open(TOPIC, 1, 0)
    cache.append(TOPIC, 0, records(0, 0, b"a", b"b", b"c"))
    cache.append(TOPIC, 1, records(1, 0, b"x"))
    reader = reader_of(cache, {0: 1, 1: 0})
    data = reader.read_cache()
    assert texts(data) == ["b", "c", "x"]
    assert events(data)[-1].id == etag_id({0: 3, 1: 1}).decode()
    assert reader.cursors == {0: 3, 1: 1}
    assert reader.read_cache() == b""  # nothing new
    cache.append(TOPIC, 0, records(0, 3, b"d"))
    assert texts(reader.read_cache()) == ["d"]


def test_a_read_is_one_chunk_at_most_and_a_record_bigger_than_a_chunk_still_goes_out_alone() -> None:
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 0)
    cache.append(TOPIC, 0, records(0, 0, *(b"%d" % i + b"x" * 40_000 for i in range(10))))
    cache.append(TOPIC, 0, records(0, 10, b"big" + b"y" * CHUNK_BYTES, b"after"))
    reader = reader_of(cache, {0: 0})
    chunks = []
    while data := reader.read_cache():
        chunks.append(texts(data))
    assert [len(chunk) for chunk in chunks] == [3, 3, 3, 1, 1, 1]  # each 40 kB record takes about 80 kB of it
    assert chunks[-2][0].startswith("big")
    assert [text[0] for chunk in chunks[:4] for text in chunk] == list("0123456789")
    assert chunks[-1] == ["after"]


def test_pending_and_lag_say_what_the_window_holds_past_the_cursors() -> None:
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 0)
    reader = reader_of(cache, {0: 0})
    assert not reader.pending()
    assert not reader.busy()
    assert reader.lag_bytes() == 0
    cache.append(TOPIC, 0, records(0, 0, b"a", b"b"))
    assert reader.pending()
    assert reader.busy()
    assert reader.lag_bytes() == sum(record.size for record in records(0, 0, b"a", b"b"))
    reader.read_cache()
    assert not reader.pending()
    assert reader.lag_bytes() == 0
    behind = reader_of(cache, {0: 0})
    window = cache.log(TOPIC, 0)
    assert window is not None
    window.evict(1)  # eviction overtook that cursor: the window now starts past it
    assert window.start > 0
    assert behind.pending()  # it must read that part from Kafka


def test_a_partition_at_its_end_with_nothing_to_read_is_reached_and_caught_up_is_sent() -> None:
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 0)
    cache.append(TOPIC, 0, records(0, 0, b"a"))
    # Kafka's end was 3 at subscribe time; offsets 1 and 2 hold nothing to deliver (markers, compacted away).
    reader = reader_of(cache, {0: 0}, ends={0: 3}, options=SubscriptionOptions(caught_up=True))
    assert [event.event for event in events(reader.read_cache())] == [None]  # a record, not yet caught up
    assert reader.read_cache() == b""  # the fetcher has not said it reached the end
    reader.state.at_end.add(0)
    assert [event.event for event in events(reader.read_cache())] == ["caught-up"]


def test_streams_that_begin_in_one_place_share_their_cursors_until_one_reads_something() -> None:
    # Idle streams at a topic's end hold one cursors dict between them (docs/benchmarks.md, "Memory per idle stream").
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 0)
    cache.open(TOPIC, 1, 0)
    first, second = reader_of(cache, {0: 0, 1: 0}), reader_of(cache, {0: 0, 1: 0})
    assert first.cursors is second.cursors
    first.state.at_end.update({0, 1})
    first.read_cache()  # at the ends with nothing to read: nothing moves, nothing is copied
    assert first.cursors is second.cursors
    cache.append(TOPIC, 1, records(1, 0, b"x"))
    assert texts(first.read_cache()) == ["x"]
    assert (first.cursors, second.cursors) == ({0: 0, 1: 1}, {0: 0, 1: 0})
    assert reader_of(cache, {0: 0, 1: 0}).cursors == {0: 0, 1: 0}  # the shared beginning did not move
    assert texts(second.read_cache()) == ["x"]


def test_a_conflating_read_skips_what_the_window_lost_and_sends_the_latest_value_per_key() -> None:
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 5)  # records 0-4 are gone from the window
    cache.append(TOPIC, 0, [*records(0, 5, b"a1", key=b"a"), *records(0, 6, b"b1", key=b"b")])
    cache.append(TOPIC, 0, records(0, 7, b"a2", key=b"a"))
    reader = reader_of(cache, {0: 0})
    assert texts(reader.read_cache(conflate=True)) == ["b1", "a2"]
    assert reader.cursors == {0: 8}


def test_a_stream_in_the_same_position_takes_the_first_ones_read() -> None:
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 0)
    cache.append(TOPIC, 0, records(0, 0, b"a", b"b"))
    reads = SharedReads()
    first, second = reader_of(cache, {0: 0}, ends={0: 2}), reader_of(cache, {0: 0}, ends={0: 2})
    assert first.shared_key() == second.shared_key() is not None
    assert not second.subscription.reached_ends
    data = first.read_shared(reads, "route", now=1.0, log=None, live=False)
    assert second.read_shared(reads, "route", now=1.5, log=None, live=False) == data
    assert reads.hits == 1
    assert second.cursors == first.cursors == {0: 2}
    assert second.subscription.delivered == first.subscription.delivered == 2
    assert second.subscription.reached_ends  # it took what reaches Kafka's end as of its start, as if it read it
    cache.append(TOPIC, 0, records(0, 2, b"c"))
    assert texts(second.read_cache()) == ["c"]  # it reads on from where it took the read


def test_a_stream_takes_the_position_of_one_that_just_read_the_same() -> None:
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 0)
    cache.append(TOPIC, 0, records(0, 0, b"a", b"b"))
    leader, follower = reader_of(cache, {0: 0}), reader_of(cache, {0: 0})
    leader.read_cache()
    follower.take_position(leader.standpoint(), delivered=2)
    assert follower.cursors == {0: 2}
    assert follower.subscription.progress == leader.subscription.progress
    cache.append(TOPIC, 0, records(0, 2, b"c"))
    assert leader.read_cache() == follower.read_cache()  # the same bytes, ids included


def test_a_stream_that_took_a_position_moves_on_alone_and_leaves_the_other_where_it_stands() -> None:
    """Taking a position shares the other's dicts (a fan-out's followers copy nothing): whoever moves next,
    reading, growing or conflating, moves alone."""
    cache = Cache(10**8)
    for partition in (0, 1):
        cache.open(TOPIC, partition, 0)
    cache.append(TOPIC, 0, records(0, 0, b"a", b"b"))
    leader, follower = reader_of(cache, {0: 0, 1: 0}), reader_of(cache, {0: 0, 1: 0})
    leader.read_cache()
    follower.take_position(leader.standpoint(), delivered=2)
    leader_id = leader.subscription.event_id(None)
    cache.append(TOPIC, 1, records(1, 0, b"x"))
    assert texts(follower.read_cache()) == ["x"]
    assert follower.cursors == {0: 2, 1: 1}
    assert leader.cursors == {0: 2, 1: 0}
    assert leader.subscription.progress == {0: 2, 1: 0}
    assert leader.subscription.event_id(None) == leader_id
    assert texts(leader.read_cache()) == ["x"]  # the leader still has it to read
    # The other way round: the leader reads on, the one that took its position does not move.
    follower.take_position(leader.standpoint(), delivered=1)
    cache.append(TOPIC, 0, records(0, 2, b"c"))
    assert texts(leader.read_cache()) == ["c"]
    assert follower.cursors == {0: 2, 1: 1}
    assert follower.subscription.progress == {0: 2, 1: 1}
    # Growing one (partitions added to the topic) leaves the other as it is.
    follower.take_position(leader.standpoint(), delivered=1)
    cache.open(TOPIC, 2, 0)
    assert follower.grow({0: 0, 1: 0, 2: 0})
    assert (2 in follower.cursors, 2 in follower.subscription.progress) == (True, True)
    assert (2 in leader.cursors, 2 in leader.subscription.progress) == (False, False)


def test_where_a_new_streams_first_records_come_from() -> None:
    cache = Cache(10**8)
    cache.open(TOPIC, 0, 0)
    cache.open(TOPIC, 1, 10)
    assert start_source(cache, TOPIC, {0: 0, 1: 10}) is Source.CACHE
    assert start_source(cache, TOPIC, {0: 0, 1: 4}) is Source.HISTORY  # before partition 1's window
    assert start_source(cache, TOPIC, {0: 0, 2: 0}) is Source.FETCH  # partition 2 has no window yet


def test_history_older_than_the_window_is_read_from_kafka_and_handed_over_with_no_gap_or_repeat(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for index in range(6):
        produce(topic, b"%d" % index)
    cache = Cache(10**8)
    cache.open(topic, 0, 4)  # the window holds 4 and 5 only
    cache.append(topic, 0, records(0, 4, b"4", b"5"))
    reader = reader_of(cache, {0: 0}, topic=topic)
    assert reader.pending()

    async def read_all() -> list[str]:
        got: list[str] = []
        deadline = time.monotonic() + 20
        while reader.cursors[0] < 4 and time.monotonic() < deadline:
            got += texts(await reader.read_history())
        assert reader.replay.history is not None  # still open: it closes on the read that finds nothing behind
        assert await reader.read_history() == b""
        assert reader.replay.history is None
        return got + texts(reader.read_cache())

    try:
        assert loop_thread.run(read_all()) == ["0", "1", "2", "3", "4", "5"]
    finally:
        loop_thread.run(reader.close_history())
