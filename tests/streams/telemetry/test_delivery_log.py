"""The delivery log's tallies: rows in, Kafka messages out (keyed by process, in order) through its writer
(tests/streams/telemetry/test_log_writer.py), bounded, and what the pumps and the fan-out count."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import pytest

from streams.stream.pump import Phase
from streams.telemetry.delivery_log import DeliveryLog, user_agent_family
from streams.telemetry.delivery_schema import (
    BOUNDS,
    BUCKETS,
    DELIVERIES,
    HEADER,
    REFUSALS,
    REPORTS,
    SCHEMA_VERSION,
    SESSIONS,
    End,
    Start,
    bucket,
    header_value,
)
from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import Produce
from tests.streams.hub.test_hub_lifecycle import running_hub
from tests.support.delivery_log import log_messages, log_rows, record, stream_row, topic_log
from tests.support.inprocess import LoopThread

LIVE = "live"


def test_buckets_are_ordered_and_each_is_at_most_19_percent_wide() -> None:
    assert bucket(-5) == bucket(0) == 0
    assert bucket(1) == 1
    assert [bucket(ms) for ms in range(10_000)] == sorted(bucket(ms) for ms in range(10_000))
    assert bucket(2**20) == bucket(10**9) == BUCKETS - 1
    for lower, upper in itertools.pairwise(BOUNDS):
        assert upper / lower == pytest.approx(2**0.25)
    for ms in (1, 7, 100, 999, 4095, 4096, 123_456):  # the fast table and the search agree with the bounds
        index = bucket(ms)
        assert BOUNDS[index - 1] <= ms < BOUNDS[index]


def test_a_flush_sends_each_table_keyed_by_the_process(new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    log = topic_log(topic)
    opened = stream_row(identity=log.keyed_hash("alice"), start=Start.RESUMED)
    log.opened(opened)
    batch = [(record(0, 1), 100), (record(0, 2), 120), (record(1, 7, age_ms=300), 90)]
    log.delivered("items", "items", batch, live=True)
    log.delivered("items", "items", [(record(0, 3), 110)], clients=4, live=True)  # a fan-out group of four
    log.refused("items", 401, "unauthorized")
    log.refused("items", 401, "unauthorized")
    log.refused("", 404, "no_route")
    opened.events, opened.bytes, opened.replayed = 3, 310, 1
    log.closed(opened, End.CLIENT_GONE)
    assert log.flush() == 2 + 2 + 2 + 1  # sessions, deliveries (2 partitions), refusals (2 keys), the report
    log.close()

    messages = log_messages(topic)
    assert len({partition for partition, *_ in messages}) == 1  # one process: one partition, in order
    assert {key for _, key, _, _ in messages} == {log.topic.process.encode()}  # type: ignore[union-attr]
    assert [headers[HEADER] for _, _, headers, _ in messages][-1] == header_value(REPORTS)  # the report last
    sessions = log_rows(topic, SESSIONS)
    assert [(row["event"], row["end"], row["events"], row["bytes"]) for row in sessions] == [
        ("opened", None, 0, 0),
        ("closed", "client_gone", 3, 310),
    ]
    assert {row["session"] for row in sessions} == {opened.stream_id}
    assert sessions[0]["identity"] == log.keyed_hash("alice") != "alice"
    first = sessions[0]
    assert (first["schema_version"], first["node"], first["start"]) == (SCHEMA_VERSION, "n1", "resumed")

    deliveries = {row["partition"]: row for row in log_rows(topic, DELIVERIES)}
    assert (deliveries[0]["events"], deliveries[0]["bytes"], deliveries[0]["writes"]) == (2 + 4, 220 + 440, 1 + 4)
    assert (deliveries[1]["events"], deliveries[1]["bytes"], deliveries[1]["writes"]) == (1, 90, 1)
    assert sum(deliveries[0]["latency"].values()) == 6
    assert (deliveries[0]["catchup_events"], deliveries[0]["catchup_age"]) == (0, {})
    ((slow_bucket, slow_count),) = deliveries[1]["latency"].items()
    assert slow_count == 1
    assert BOUNDS[int(slow_bucket) - 1] <= 300 < BOUNDS[int(slow_bucket)] * 1.1  # about 300 ms (the clock moved)

    refusals = {(row["route"], row["status"], row["reason"]): row["count"] for row in log_rows(topic, REFUSALS)}
    assert refusals == {("items", 401, "unauthorized"): 2, ("", 404, "no_route"): 1}
    reports = log_rows(topic, REPORTS)  # the first flush's, and the last one's at close
    assert [(row["open"], row["interval_ms"]) for row in reports] == [(0, 15_000), (0, 15_000)]


def test_catch_up_events_are_counted_apart_from_the_live_latency(new_topic: Callable[..., str]) -> None:
    """A catching-up write's events are in `events` and `bytes`, and in the catch-up count and age histogram;
    never in `latency`, which holds the live writes only."""
    topic = new_topic(partitions=2)
    log = topic_log(topic)
    log.delivered("items", "items", [(record(0, 10), 100)], clients=2, live=True)
    replay = [(record(0, offset, age_ms=3_600_000), 100) for offset in range(3)]  # an hour old
    log.delivered("items", "items", replay, clients=5, live=False)  # a shared catch-up read taken by five
    log.delivered("items", "items", [(record(0, 11, age_ms=40_000), 100)], live=False)
    log.close()
    written = log_rows(topic, DELIVERIES)  # one row, or two if the writes straddled a second

    def total(column: str) -> int:
        return sum(row[column] for row in written)

    def histogram(column: str) -> dict[int, int]:
        found: Counter[int] = Counter()
        for row in written:
            found.update({int(index): n for index, n in row[column].items()})  # Avro map keys are strings
        return dict(found)

    assert (total("events"), total("bytes"), total("writes")) == (2 + 15 + 1, 1800, 2 + 5 + 1)
    assert total("catchup_events") == 16
    assert sum(histogram("latency").values()) == 2
    assert max(histogram("latency")) < bucket(1000)  # milliseconds, not an hour
    assert histogram("catchup_age") == {bucket(3_600_000): 15, bucket(40_000): 1}


def test_a_full_buffer_drops_rows_and_counts_them(new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    log = topic_log(topic, max_rows=2)
    log.refused("a", 404, "no_route")
    log.refused("b", 404, "no_route")
    log.refused("a", 404, "no_route")  # an existing row still counts
    log.refused("c", 404, "no_route")  # a third row does not fit
    log.opened(stream_row())
    assert log.dropped == 2
    log.close()
    assert {row["route"]: row["count"] for row in log_rows(topic, REFUSALS)} == {"a": 2, "b": 1}
    assert log.stats()["delivery_log_dropped"] == 2


def test_logging_off_sends_nothing() -> None:
    log = DeliveryLog(None, salt=b"s")
    log.opened(stream_row())
    log.delivered("r", "t", [(record(0, 1), 10)], live=True)
    log.refused("r", 404, "no_route")
    assert log.flush() == 0
    assert log.writer is None  # no thread


@pytest.mark.parametrize(
    ("agent", "family"),
    [
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36", "chrome"),
        ("Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36 Chrome/131.0 Safari/537.36 Edg/131.0", "edge"),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", "firefox"),
        ("Mozilla/5.0 (Macintosh) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15", "safari"),
        ("curl/8.5.0", "curl"),
        ("python-httpx/0.28", "python"),
        ("", "none"),
        ("Lynx/2.9", "other"),
    ],
)
def test_user_agents_are_reduced_to_a_family(agent: str, family: str) -> None:
    assert user_agent_family(agent) == family


def test_the_fan_out_counts_a_group_write_once_for_all_its_clients(
    loop_thread: LoopThread, new_topic: Callable[..., str], produce: Produce
) -> None:
    """Three streams in one position: one encodes and counts the batch for three, as live; a fourth, filtered out,
    adds nothing; a stream that reads on its own counts its own writes, as catch-up (it started behind)."""
    topic = new_topic()
    log_topic = new_topic(partitions=2)
    log = topic_log(log_topic)
    with running_hub(loop_thread) as (_hub, streams):
        same = [streams(topic, start=LIVE, log=log) for _ in range(3)]
        produce(topic, b"first")
        wait_until(lambda: all(stream.values == ["first"] for stream in same))
        wait_until(lambda: all(stream.pump.phase is Phase.PARKED for stream in same))
        for value in (b"second", b"third"):
            produce(topic, value)
        wait_until(lambda: all(stream.values == ["first", "second", "third"] for stream in same))
        late = streams(topic, log=log)  # from the start: reads the three on its own
        wait_until(lambda: late.values == ["first", "second", "third"])
    log.close()
    delivered = log_rows(log_topic, DELIVERIES)
    assert {row["route"] for row in delivered} == {f"test:{topic}"}
    assert sum(row["events"] for row in delivered) == 3 * 3 + 3
    assert sum(count for row in delivered for count in row["latency"].values()) == 3 * 3
    assert sum(row["catchup_events"] for row in delivered) == 3
    assert sum(count for row in delivered for count in row["catchup_age"].values()) == 3
    total_bytes = sum(row["bytes"] for row in delivered)
    event_bytes = sum(len(stream.flow.data) for stream in [*same, late])
    assert 0 < total_bytes <= event_bytes  # events only: not the retry line or comments
    assert [stream.pump.written for stream in same] == [len(stream.flow.data) for stream in same]
