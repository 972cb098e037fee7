"""The rollup on a real Spark session (local[1]) reading a real Kafka topic: known delivery logs give known sums, a
second run adds nothing, late rows merge, a failed run leaves nothing, and two runs never overlap."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from pyspark.sql import functions as F

from analytics.jobs import rollup as rollup_job
from analytics.jobs.rollup import rollup
from analytics.jobs.source import LogFrames
from analytics.models import (
    CatchupAgeBucket,
    IdentityMinute,
    LatencyBucket,
    LogOffset,
    RefusalMinute,
    RollupRun,
    RouteMinute,
)
from analytics.percentiles import percentiles
from analytics.rollups import LOCK_KEY, log_range, run_rollup
from streams.telemetry.delivery_schema import BOUNDS, DELIVERIES, HEADER, REFUSALS, SESSIONS, bucket
from streams.telemetry.log_writer import LogTopic

MINUTE = int(datetime(2026, 11, 22, 10, 0, tzinfo=UTC).timestamp())  # 10:00 UTC


def write(topic: str, table: str, rows: list[dict[str, Any]], node: str) -> None:
    """Rows sent to the log's topic as a web process on `node` sends them (each call: another process)."""
    log = LogTopic(settings.KAFKA, topic, partitions=2, node=node)
    assert log.send({table: rows}) == (len(rows), 0)
    log.close(timeout_s=20)
    assert (log.rows_sent, log.rows_lost) == (len(rows), 0)


def delivery(
    second: int,
    partition: int,
    latencies: list[int],
    *,
    route: str = "items",
    size: int = 100,
    catchup_ages: Sequence[int] = (),
) -> dict[str, Any]:
    """A deliveries row: live events of the given latencies, catch-up events of the given ages (ms)."""
    events = len(latencies) + len(catchup_ages)
    return {
        "second": second * 1000, "route": route, "topic": "items", "partition": partition,
        "events": events, "bytes": size * events, "writes": 1, "latency": histogram_of(latencies),
        "catchup_events": len(catchup_ages), "catchup_age": histogram_of(catchup_ages),
    }  # fmt: skip


def histogram_of(values: Sequence[int]) -> dict[str, int]:
    """A histogram column as the topic carries it: bucket index (as a string: Avro map keys are) -> count."""
    histogram: dict[str, int] = {}
    for value in values:
        index = str(bucket(value))
        histogram[index] = histogram.get(index, 0) + 1
    return histogram


def session(at: int, event: str, **fields: Any) -> dict[str, Any]:
    row = {
        "session": fields.pop("session", f"s{at}"), "event": event, "at": at * 1000, "opened_at": at * 1000,
        "route": "items", "endpoint": "default", "topic": "items", "path": "/items", "identity": None,
        "client": "c", "user_agent": "chrome", "start": "fresh", "end": None, "events": 0, "bytes": 0,
        "replayed": 0, "resets": 0,
    }  # fmt: skip
    return {**row, **fields}


def known_logs(topic: str) -> list[int]:
    """Two processes' logs over two minutes; returns the latencies delivered in the first minute."""
    rng = random.Random(7)
    latencies = [int(rng.lognormvariate(3, 1)) for _ in range(2000)]
    write(topic, DELIVERIES, [
        delivery(MINUTE + 1, 0, latencies[:700]),
        delivery(MINUTE + 30, 1, latencies[700:1000]),
        delivery(MINUTE + 65, 0, [5, 5, 5], catchup_ages=[90_000] * 40 + [600_000] * 10),  # a replay
        delivery(MINUTE + 10, 0, [1], route="orders"),
    ], "n1-1-a")  # fmt: skip
    write(topic, DELIVERIES, [delivery(MINUTE + 59, 2, latencies[1000:])], "n2-1-a")
    write(topic, SESSIONS, [
        session(MINUTE + 1, "opened", session="a", identity="alice"),
        session(MINUTE + 2, "opened", session="b", start="resumed"),
        session(MINUTE + 3, "opened", session="c", start="malformed"),
        session(MINUTE + 50, "closed", session="a", identity="alice", end="client_gone", events=40),
        session(MINUTE + 70, "closed", session="b", end="slow_client", events=7, replayed=3),
    ], "n1")  # fmt: skip
    write(topic, REFUSALS, [
        {"second": (MINUTE + 5) * 1000, "route": "items", "status": 401, "reason": "unauthorized", "count": 3},
        {"second": (MINUTE + 6) * 1000, "route": "items", "status": 401, "reason": "unauthorized", "count": 2},
        {"second": (MINUTE + 6) * 1000, "route": "", "status": 404, "reason": "no_route", "count": 1},
    ], "n1")  # fmt: skip
    return latencies


@pytest.fixture
def log_topic(new_topic: Callable[..., str]) -> str:
    """A delivery-log topic of the test's own, made as the platform makes it."""
    return new_topic(partitions=2)


pytestmark = pytest.mark.django_db(transaction=True)


def test_known_logs_give_known_sums(log_topic: str, spark: Any) -> None:
    latencies = known_logs(log_topic)
    frames = LogFrames(spark, log_range(settings.KAFKA, log_topic))
    result = rollup(frames.tables)
    frames.release()

    first = result.minutes[("items", "items", MINUTE)]
    assert (first["events"], first["bytes"], first["writes"]) == (2000, 200_000, 3)
    assert (first["streams_opened"], first["streams_closed"]) == (3, 1)
    assert (first["fresh_starts"], first["resumes"], first["malformed_ids"]) == (1, 1, 1)
    assert first["catchup_events"] == 0
    second = result.minutes[("items", "items", MINUTE + 60)]
    assert (second["events"], second["streams_closed"], second["slow_closes"], second["replayed"]) == (53, 1, 1, 3)
    assert second["catchup_events"] == 50
    live = {index: n for (_, _, minute, index), n in result.latency.items() if minute == MINUTE + 60}
    assert live == {bucket(5): 3}  # the replay is not in the live latency...
    catchup = {index: n for (_, _, minute, index), n in result.catchup_age.items() if minute == MINUTE + 60}
    assert catchup == {bucket(90_000): 40, bucket(600_000): 10}  # ...but in the catch-up age
    assert not [key for key in result.catchup_age if key[2] == MINUTE]
    assert result.minutes[("orders", "items", MINUTE)]["events"] == 1
    assert result.refusals == {("items", MINUTE, 401, "unauthorized"): 5, ("", MINUTE, 404, "no_route"): 1}
    assert result.identities == {("items", MINUTE, "alice"): (40, 1)}
    assert result.rows_in == 5 + 5 + 3

    histogram = {
        index: n for (route, _, minute, index), n in result.latency.items() if (route, minute) == ("items", MINUTE)
    }
    assert sum(histogram.values()) == 2000
    ordered = sorted(latencies)
    for quantile, found in percentiles(histogram).items():
        true = ordered[int(quantile * len(ordered)) - 1]
        assert found is not None
        assert BOUNDS[bucket(true) - 1] <= found <= BOUNDS[bucket(true)] * 2**0.25  # within one bucket


def test_routes_whose_keys_collide_are_summed_apart(
    log_topic: str, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Histograms are grouped by a hash of route and topic; should two pairs share one, the pass is made again by
    their names, and nothing of either is added to the other."""
    known_logs(log_topic)
    frames = LogFrames(spark, log_range(settings.KAFKA, log_topic))
    monkeypatch.setattr(rollup_job, "_pair_key", lambda route, topic: F.lit(7).cast("long"))
    result = rollup({DELIVERIES: frames.tables[DELIVERIES]})
    frames.release()

    assert {key for key in result.latency if key[0] == "orders"} == {("orders", "items", MINUTE, bucket(1))}
    assert sum(n for key, n in result.latency.items() if key[0] == "items") == 2003
    assert result.catchup_age == {
        ("items", "items", MINUTE + 60, bucket(90_000)): 40,
        ("items", "items", MINUTE + 60, bucket(600_000)): 10,
    }
    assert (result.minutes[("orders", "items", MINUTE)]["events"], result.rows_in) == (1, 5)


def test_a_second_run_adds_nothing_and_late_rows_merge(log_topic: str, spark: Any) -> None:
    known_logs(log_topic)
    first = run_rollup(trigger="test", topic=log_topic, master="local[1]")
    assert (first.status, first.messages, first.rows_in) == (RollupRun.Status.DONE, 4, 13)
    row = RouteMinute.objects.get(route="items", minute=datetime.fromtimestamp(MINUTE, tz=UTC))
    assert (row.events, row.streams_opened) == (2000, 3)

    again = run_rollup(trigger="test", topic=log_topic, master="local[1]")
    assert (again.status, again.messages, again.rows_in) == (RollupRun.Status.DONE, 0, 0)
    row.refresh_from_db()
    assert row.events == 2000

    write(log_topic, DELIVERIES, [delivery(MINUTE + 20, 3, [2, 2])], "n3")  # a node that sent late
    late = run_rollup(trigger="test", topic=log_topic, master="local[1]")
    assert (late.messages, late.rows_in) == (1, 1)
    row.refresh_from_db()
    assert (row.events, row.writes) == (2002, 4)
    assert sum(LatencyBucket.objects.filter(route="items", minute=row.minute).values_list("count", flat=True)) == 2002
    replay = RouteMinute.objects.get(route="items", minute=datetime.fromtimestamp(MINUTE + 60, tz=UTC))
    assert (replay.events, replay.catchup_events) == (53, 50)
    ages = CatchupAgeBucket.objects.filter(route="items", minute=replay.minute)
    assert {age.bucket: age.count for age in ages} == {bucket(90_000): 40, bucket(600_000): 10}
    assert RefusalMinute.objects.get(route="items").count == 5
    assert IdentityMinute.objects.get().events == 40
    assert sum(LogOffset.objects.filter(topic=log_topic).values_list("offset", flat=True)) == 5


def test_a_failed_run_writes_nothing_and_its_retry_adds_each_row_once(
    log_topic: str, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    known_logs(log_topic)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the database went away mid-write")

    monkeypatch.setattr(LogOffset.objects, "update_or_create", broken)
    with pytest.raises(RuntimeError):
        run_rollup(trigger="test", topic=log_topic, master="local[1]")
    failed = RollupRun.objects.get()
    assert failed.status == RollupRun.Status.FAILED
    assert "went away" in failed.error
    assert not RouteMinute.objects.exists()  # the sums written before the failure were rolled back

    monkeypatch.undo()
    assert not LogOffset.objects.exists()
    retry = run_rollup(trigger="test", topic=log_topic, master="local[1]")
    assert retry.messages == 4
    assert RouteMinute.objects.get(route="items", minute=datetime.fromtimestamp(MINUTE, tz=UTC)).events == 2000


def test_a_run_while_another_holds_the_lock_is_skipped(log_topic: str) -> None:
    settings = connection.settings_dict
    other = psycopg.connect(
        dbname=settings["NAME"], user=settings["USER"], password=settings["PASSWORD"] or None,
        host=settings["HOST"], port=settings["PORT"],
    )  # fmt: skip
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
        skipped = run_rollup(trigger="test", topic=log_topic, master="local[1]")
        assert skipped.status == RollupRun.Status.SKIPPED
        # Released here, answered before the next run asks: a close alone is noticed by the server a moment later.
        other.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    finally:
        other.close()
    assert run_rollup(trigger="test", topic=log_topic, master="local[1]").status == RollupRun.Status.DONE


def test_messages_of_another_schema_are_skipped_and_the_rest_rolled_up(
    log_topic: str, spark: Any, producer: Any
) -> None:
    """A process of another version (other columns) during an upgrade: its rows are never decoded with the
    wrong schema, and they do not stop the rollup."""
    write(log_topic, DELIVERIES, [delivery(MINUTE + 1, 0, [4, 4])], "n1")
    producer.produce(log_topic, b"\x02\x04not-this-schema", key=b"old", headers={HEADER: b"deliveries/1/000000000000"})
    producer.flush(10)
    run = run_rollup(trigger="test", topic=log_topic, master="local[1]")
    assert (run.status, run.messages, run.rows_in) == (RollupRun.Status.DONE, 2, 1)
    assert RouteMinute.objects.get().events == 2
