"""The contract where only a real Kafka broker can show it, end to end (docs/contract.md §4, §5, §7).

Timestamp lookups (`?since=`), records gone from the start of a partition (deleted, or past retention), and
the log cleaner's gaps and tombstones; transactions are in tests/e2e/test_kafka_transactions.py. Each test reads a
live daphne's streams and checks that a client gets what it should exactly once: nothing lost, nothing
repeated, and ids that resume where they say.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
)
from django.conf import settings

from streams.codecs.event_id import encode_progress, parse_id
from streams.hub.start_finder import WATERMARKS_REUSE_S
from tests.conftest import health, wait_until
from tests.e2e.test_zilla_scenarios import Produce, route, stream
from tests.support.sse_client import Event, EventStream

pytestmark = pytest.mark.django_db(transaction=True)

HOUR_MS = 3_600_000
# A record stamped more than segment.ms after the first one of the active segment starts a new segment: records
# stamped a second apart are a segment each, which the cleaner and retention may then take.
ROLLING = {"segment.ms": "100"}


# --- helpers ----------------------------------------------------------------------------------------------


@functools.cache
def kafka_admin() -> AdminClient:
    return AdminClient(settings.KAFKA.admin_config())


def log_start(topic: str, partition: int = 0) -> int:
    """The earliest offset Kafka holds in the partition now."""
    where = TopicPartition(topic, partition)
    earliest: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    return int(kafka_admin().list_offsets({where: earliest})[where].result(timeout=10).offset)


def held_offsets(topic: str, partition: int = 0) -> list[int]:
    """The offsets of the records the partition holds now, read by a consumer of the test's own."""
    consumer = Consumer({**settings.KAFKA.consumer_config(), "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        offsets: list[int] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                return offsets
            if error is not None:
                raise KafkaException(error)
            offsets.append(message.offset() or 0)
        pytest.fail(f"no end of {topic}[{partition}] within 10 s")
    finally:
        consumer.close()


def send(
    producer: Producer,
    topic: str,
    value: bytes | None,
    *,
    timestamp_ms: int,
    partition: int = 0,
    key: bytes | None = None,
) -> int:
    """Produce one record with an explicit timestamp; returns its offset."""
    offsets: list[int] = []
    errors: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())  # type: ignore[attr-defined]

    producer.produce(topic, value, key=key, partition=partition, timestamp=timestamp_ms, on_delivery=report)
    producer.flush(10)
    assert not errors, errors
    assert offsets, "no delivery report"
    return offsets[0]


def until_caught_up(s: EventStream) -> list[Event]:
    """The events before `caught-up` (which fails the test if it never comes), and `caught-up` itself last."""
    events = []
    while True:
        event = s.next_event()
        events.append(event)
        if event.event == "caught-up":
            return events


def offset_of(event: Event, partition: int) -> int:
    """The next offset to read in `partition`, as the event's id says."""
    progress = parse_id(event.id)
    assert progress is not None, event.id
    return progress[partition]


# --- ?since= by record timestamps (§5) --------------------------------------------------------------------


def produce_a_second_apart(producer: Producer, topic: str, base_ms: int) -> dict[str, tuple[int, int]]:
    """Twelve records `s0`..`s11`, `sN` stamped base + N seconds, on partition N % 3: value -> (partition, offset)."""
    placed = {}
    for second in range(12):
        value, partition = f"s{second}", second % 3
        offset = send(producer, topic, value.encode(), partition=partition, timestamp_ms=base_ms + second * 1000)
        placed[value] = (partition, offset)
    return placed


@pytest.mark.parametrize(
    ("since_s", "first"),
    [(4.5, 5), (4.0, 4)],
    ids=["between-records-as-iso-8601", "at-a-record-as-epoch-ms"],
)
def test_since_starts_each_partition_at_its_first_record_at_or_after_the_time(
    daphne_url: str, new_topic: Callable[..., str], producer: Producer, since_s: float, first: int
) -> None:
    topic = new_topic(partitions=3)
    base_ms = (int(time.time()) - 3600) * 1000
    placed = produce_a_second_apart(producer, topic, base_ms)
    since_ms = base_ms + int(since_s * 1000)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since_ms // 1000)) + f".{since_ms % 1000:03d}Z"
    query = since if since_ms % 1000 else str(since_ms)  # both forms of the parameter
    with stream(f"{daphne_url}{route(topic, caught_up=True)}?since={query}") as s:
        *history, caught_up = until_caught_up(s)
        send(producer, topic, b"live", partition=0, timestamp_ms=int(time.time() * 1000))
        live = s.next_event()
    # Partition 0 holds s0, s3, s6, s9; 1 holds s1, s4, s7, s10; 2 holds s2, s5, s8, s11.
    assert sorted(e.text for e in history) == sorted(f"s{n}" for n in range(first, 12))
    for event in history:
        partition, offset = placed[event.text]
        assert offset_of(event, partition) == offset + 1  # in partition order, each id just past its record
    assert caught_up.id == encode_progress({0: 4, 1: 4, 2: 4})
    assert (live.text, live.id) == ("live", encode_progress({0: 5, 1: 4, 2: 4}))


def test_since_after_the_last_record_gives_only_new_records(
    daphne_url: str, new_topic: Callable[..., str], producer: Producer
) -> None:
    topic = new_topic(partitions=3)
    base_ms = (int(time.time()) - 3600) * 1000
    produce_a_second_apart(producer, topic, base_ms)
    with stream(f"{daphne_url}{route(topic, caught_up=True)}?since={base_ms + 60_000}") as s:
        caught_up = s.next_event()
        send(producer, topic, b"new", partition=1, timestamp_ms=int(time.time() * 1000))
        new = s.next_event()
    assert (caught_up.event, caught_up.id) == ("caught-up", encode_progress({0: 4, 1: 4, 2: 4}))
    assert (new.text, new.id) == ("new", encode_progress({0: 4, 1: 5, 2: 4}))


# --- resuming below the log start (§7 reset) --------------------------------------------------------------


def resumed_after_loss(
    daphne_url: str, topic: str, path: str, last_id: str, produce: Produce, *, requested: int, earliest: int
) -> list[Event]:
    """Resume with `last_id` once partition 0 starts at `earliest`: checks the reset notice, returns the rest of
    the history (caught-up last) and one live record of partition 0."""
    progress = parse_id(last_id)
    assert progress is not None
    with stream(daphne_url + path, **{"Last-Event-ID": last_id}) as s:
        reset = s.next_event()
        history = until_caught_up(s)
        produce(topic, b"live", partition=0)
        live = s.next_event()
    assert reset.event == "reset"
    assert json.loads(reset.text) == {"partitions": [{"partition": 0, "requested": requested, "earliest": earliest}]}
    assert reset.id == encode_progress({**progress, 0: earliest})
    return [*history, live]


@contextlib.contextmanager
def left_alone(daphne_url: str) -> Iterator[None]:
    """Wait, after the block, until the server has seen its streams leave and a new stream's lookup of where the
    partitions start could not be one shared with them (streams opening together share one,
    streams/hub/start_finder.py): the next stream then finds the topic as a client coming back later would."""
    before = health(daphne_url)["subscriptions"]
    yield
    left = time.monotonic()  # after the streams' lookups: each was made before its response began
    wait_until(lambda: health(daphne_url)["subscriptions"] == before)
    wait_until(lambda: time.monotonic() > left + WATERMARKS_REUSE_S)


def first_event(url: str, last_id: str) -> Event:
    with stream(url, **{"Last-Event-ID": last_id}) as s:
        return s.next_event()


@pytest.mark.parametrize("watched", [False, True], ids=["idle-topic", "topic-another-stream-reads"])
def test_a_resume_below_deleted_records_gets_reset_then_everything_after(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce, watched: bool
) -> None:
    topic = new_topic(partitions=2)
    for n in range(6):
        produce(topic, f"a{n}".encode(), partition=0)
    for n in range(3):
        produce(topic, f"b{n}".encode(), partition=1)
    path = route(topic, caught_up=True)
    with left_alone(daphne_url), stream(daphne_url + path) as s:
        history = until_caught_up(s)
    read_a2 = next(e for e in history if e.text == "a2")  # a client that read up to a2, then left
    assert read_a2.id is not None
    b_from = max(0, offset_of(read_a2, 1))
    with contextlib.ExitStack() as watching:
        if watched:  # the process keeps fetching the topic, from its cache, while its records go
            until_caught_up(watching.enter_context(stream(daphne_url + path)))
        where = TopicPartition(topic, 0, 4)
        kafka_admin().delete_records([where])[where].result(timeout=10)
        assert log_start(topic) == 4
        if watched:
            # The process learns Kafka's new start from its fetch responses, about every second.
            wait_until(lambda: first_event(daphne_url + path, read_a2.id or "").event == "reset", timeout=5)
        *rest, caught_up, live = resumed_after_loss(
            daphne_url, topic, path, read_a2.id, produce, requested=3, earliest=4
        )
        with stream(daphne_url + path) as s:
            *fresh, _ = until_caught_up(s)
    assert caught_up.event == "caught-up"
    assert sorted(e.text for e in rest) == sorted(["a4", "a5", *(f"b{n}" for n in range(b_from, 3))])
    assert [e.text for e in rest if e.text.startswith("a")] == ["a4", "a5"]
    assert (live.text, live.id) == ("live", encode_progress({0: 7, 1: 3}))
    # A new stream starts where Kafka now does, though the process may still hold the deleted records.
    assert sorted(e.text for e in fresh) == ["a4", "a5", "b0", "b1", "b2", "live"]


def test_a_resume_below_what_retention_deleted_gets_reset_then_everything_after(
    daphne_url: str, new_topic: Callable[..., str], producer: Producer, produce: Produce
) -> None:
    topic = new_topic(config=ROLLING)
    old_ms = int(time.time() * 1000) - 2 * HOUR_MS
    for n in range(3):
        send(producer, topic, f"a{n}".encode(), timestamp_ms=old_ms + n * 1000)  # a segment each (see ROLLING)
    path = route(topic, caught_up=True)
    with left_alone(daphne_url), stream(daphne_url + path) as s:
        history = until_caught_up(s)
    last_id = encode_progress({0: 1})
    assert (history[0].text, history[0].id) == ("a0", last_id)  # a client that read a0, then left
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("retention.ms", str(HOUR_MS), incremental_operation=AlterConfigOpType.SET)],
    )
    kafka_admin().incremental_alter_configs([resource])[resource].result(timeout=10)
    produce(topic, b"a3")  # rolls the segment of a2: every segment before this one is now past retention
    wait_until(lambda: log_start(topic) == 3, timeout=15)
    *rest, caught_up, live = resumed_after_loss(daphne_url, topic, path, last_id, produce, requested=1, earliest=3)
    assert [(e.text, e.id) for e in rest] == [("a3", encode_progress({0: 4}))]
    assert caught_up.event == "caught-up"
    assert (live.text, live.id) == ("live", encode_progress({0: 5}))


def test_a_stream_of_a_topic_left_idle_is_caught_up_only_past_records_written_meanwhile(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    # The process stops fetching a topic nobody reads: what it last saw of the end is no end any more.
    topic = new_topic()
    produce(topic, b"a0")
    path = route(topic, caught_up=True)
    with left_alone(daphne_url), stream(daphne_url + path) as s:
        assert [e.text for e in until_caught_up(s)] == ["a0", ""]
    produce(topic, b"a1")
    with stream(daphne_url + path) as s:
        events = until_caught_up(s)
    assert [(e.text, e.id) for e in events] == [
        ("a0", encode_progress({0: 1})),
        ("a1", encode_progress({0: 2})),
        ("", encode_progress({0: 2})),
    ]


def test_records_deleted_past_where_an_idle_topics_fetch_stopped_lose_nothing_after_them(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    # The process's fetch of a topic nobody reads stops where it was; when it goes on, Kafka's start may lie past
    # that position. It must go on from Kafka's first record, not from its last.
    topic = new_topic()
    for n in range(2):
        produce(topic, f"a{n}".encode())
    path = route(topic, caught_up=True)
    with left_alone(daphne_url), stream(daphne_url + path) as s:
        assert [e.text for e in until_caught_up(s)] == ["a0", "a1", ""]
    for n in range(2, 6):
        produce(topic, f"a{n}".encode())
    where = TopicPartition(topic, 0, 4)
    kafka_admin().delete_records([where])[where].result(timeout=10)
    with stream(daphne_url + path) as s:
        *history, caught_up = until_caught_up(s)
        produce(topic, b"live")
        live = s.next_event()
    assert [(e.text, e.id) for e in history] == [("a4", encode_progress({0: 5})), ("a5", encode_progress({0: 6}))]
    assert caught_up.event == "caught-up"
    assert (live.text, live.id) == ("live", encode_progress({0: 7}))


# --- compacted topics after the cleaner ran (§3, §5) ------------------------------------------------------

COMPACTED = {
    **ROLLING,
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": str(HOUR_MS),  # tombstones stay for the test
}
# offset: (key, value). The cleaner keeps 0, 4, 6 and 7 (the tombstone); 8 is in the active segment.
WRITES = [
    (b"x", b"x1"),
    (b"a", b"a1"),
    (b"a", b"a2"),
    (b"b", b"b1"),
    (b"a", b"a3"),
    (b"b", b"b2"),
    (b"y", b"y1"),
    (b"b", None),
    (b"z", b"z1"),
]
CLEANED = [0, 4, 6, 7, 8]


def test_a_compacted_topic_after_cleaning_gives_latest_values_and_resumes_across_gaps(
    daphne_url: str, new_topic: Callable[..., str], producer: Producer, produce: Produce
) -> None:
    topic = new_topic(config=COMPACTED)
    old_ms = int(time.time() * 1000) - HOUR_MS
    for n, (key, value) in enumerate(WRITES):
        send(producer, topic, value, key=key, timestamp_ms=old_ms + n * 1000)
    wait_until(lambda: held_offsets(topic) == CLEANED, timeout=20, interval=0.3)
    path = route(topic, caught_up=True)
    tombstone = base64.urlsafe_b64encode(b"b").decode()
    latest = [
        (None, "x1", encode_progress({0: 1})),
        (None, "a3", encode_progress({0: 5})),
        (None, "y1", encode_progress({0: 7})),
        ("delete", tombstone, encode_progress({0: 8})),
        (None, "z1", encode_progress({0: 9})),
    ]
    with stream(daphne_url + path) as s:
        *snapshot, caught_up = until_caught_up(s)
    assert [(e.event, e.text, e.id) for e in snapshot] == latest
    assert caught_up.id == encode_progress({0: 9})
    # Ids a client got before the gaps 1-3 and 5: a resume continues with the next record the topic holds.
    for last_id, after in ((encode_progress({0: 1}), latest[1:]), (encode_progress({0: 5}), latest[2:])):
        with stream(daphne_url + path, **{"Last-Event-ID": last_id}) as s:
            *resumed, _ = until_caught_up(s)
            assert [(e.event, e.text, e.id) for e in resumed] == after
    with stream(daphne_url + path, **{"Last-Event-ID": encode_progress({0: 9})}) as s:
        assert s.next_event().event == "caught-up"
        produce(topic, b"z2", key=b"z")
        produce(topic, None, key=b"y")
        updates = s.events(2)
    assert [(e.event, e.text, e.id) for e in updates] == [
        (None, "z2", encode_progress({0: 10})),
        ("delete", base64.urlsafe_b64encode(b"y").decode(), encode_progress({0: 11})),
    ]
