"""The rollup on a real Spark session (local[1]): known delivery logs give known sums, a second run adds nothing,
late files merge, a failed run leaves nothing, and two runs never overlap."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.db import connection

from analytics.jobs.rollup import rollup
from analytics.models import (
    CatchupAgeBucket,
    IdentityMinute,
    LatencyBucket,
    RefusalMinute,
    RolledUpFile,
    RollupRun,
    RouteMinute,
)
from analytics.percentiles import percentiles
from analytics.rollups import LOCK_KEY, run_rollup
from streams.telemetry.delivery_schema import BOUNDS, DELIVERIES, REFUSALS, SCHEMAS, SESSIONS, bucket

MINUTE = int(datetime(2026, 11, 22, 10, 0, tzinfo=UTC).timestamp())  # 10:00 UTC
COMMON = {"schema_version": 1, "node": "n1", "pid": 1}


def write(directory: Path, table: str, rows: list[dict[str, Any]], name: str) -> Path:
    """A delivery-log file as a web process writes it (the hour folder of the first row)."""
    column = "at" if table == SESSIONS else "second"
    hour = datetime.fromtimestamp(rows[0][column] / 1000, tz=UTC)
    folder = directory / table / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist([{**COMMON, **row} for row in rows], schema=SCHEMAS[table]), path)
    return path


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


def histogram_of(values: Sequence[int]) -> list[tuple[int, int]]:
    histogram: dict[int, int] = {}
    for value in values:
        histogram[bucket(value)] = histogram.get(bucket(value), 0) + 1
    return sorted(histogram.items())


def session(at: int, event: str, **fields: Any) -> dict[str, Any]:
    row = {
        "session": fields.pop("session", f"s{at}"), "event": event, "at": at * 1000, "opened_at": at * 1000,
        "route": "items", "endpoint": "default", "topic": "items", "path": "/items", "identity": None,
        "client": "c", "user_agent": "chrome", "start": "fresh", "end": None, "events": 0, "bytes": 0,
        "replayed": 0, "resets": 0,
    }  # fmt: skip
    return {**row, **fields}


def known_logs(directory: Path) -> list[int]:
    """Two processes' logs over two minutes; returns the latencies delivered in the first minute."""
    rng = random.Random(7)
    latencies = [int(rng.lognormvariate(3, 1)) for _ in range(2000)]
    write(directory, DELIVERIES, [
        delivery(MINUTE + 1, 0, latencies[:700]),
        delivery(MINUTE + 30, 1, latencies[700:1000]),
        delivery(MINUTE + 65, 0, [5, 5, 5], catchup_ages=[90_000] * 40 + [600_000] * 10),  # a replay
        delivery(MINUTE + 10, 0, [1], route="orders"),
    ], "n1-1-a")  # fmt: skip
    write(directory, DELIVERIES, [delivery(MINUTE + 59, 2, latencies[1000:])], "n2-1-a")
    write(directory, SESSIONS, [
        session(MINUTE + 1, "opened", session="a", identity="alice"),
        session(MINUTE + 2, "opened", session="b", start="resumed"),
        session(MINUTE + 3, "opened", session="c", start="malformed"),
        session(MINUTE + 50, "closed", session="a", identity="alice", end="client_gone", events=40),
        session(MINUTE + 70, "closed", session="b", end="slow_client", events=7, replayed=3),
    ], "n1-1-s")  # fmt: skip
    write(directory, REFUSALS, [
        {"second": (MINUTE + 5) * 1000, "route": "items", "status": 401, "reason": "unauthorized", "count": 3},
        {"second": (MINUTE + 6) * 1000, "route": "items", "status": 401, "reason": "unauthorized", "count": 2},
        {"second": (MINUTE + 6) * 1000, "route": "", "status": 404, "reason": "no_route", "count": 1},
    ], "n1-1-r")  # fmt: skip
    return latencies


def test_known_logs_give_known_sums(tmp_path: Path, spark: Any) -> None:
    latencies = known_logs(tmp_path)
    files = {
        table: [str(p) for p in (tmp_path / table).rglob("*.parquet")] for table in (DELIVERIES, SESSIONS, REFUSALS)
    }
    result = rollup(spark, files)

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


def test_rows_written_before_the_catch_up_columns_count_as_live(tmp_path: Path, spark: Any) -> None:
    """Files of a process from before catch-up was told apart have neither column: their events are all in
    `latency`, and the rollup counts no catch-up for them rather than failing."""
    old_schema = pa.schema([f for f in SCHEMAS[DELIVERIES] if not f.name.startswith("catchup")])
    folder = tmp_path / DELIVERIES / "date=2026-11-22" / "hour=10"
    folder.mkdir(parents=True)
    row = {k: v for k, v in delivery(MINUTE + 1, 0, [5, 5, 900]).items() if not k.startswith("catchup")}
    pq.write_table(pa.Table.from_pylist([{**COMMON, **row}], schema=old_schema), folder / "old.parquet")
    result = rollup(spark, {DELIVERIES: [str(folder / "old.parquet")]})
    assert (result.minutes[("items", "items", MINUTE)]["events"], result.catchup_age) == (3, {})
    assert result.minutes[("items", "items", MINUTE)]["catchup_events"] == 0
    assert sum(result.latency.values()) == 3


pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_run_adds_nothing_and_late_files_merge(tmp_path: Path, spark: Any) -> None:
    known_logs(tmp_path)
    first = run_rollup(trigger="test", directory=tmp_path, master="local[1]")
    assert (first.status, first.files, first.rows_in) == (RollupRun.Status.DONE, 4, 13)
    row = RouteMinute.objects.get(route="items", minute=datetime.fromtimestamp(MINUTE, tz=UTC))
    assert (row.events, row.streams_opened) == (2000, 3)

    again = run_rollup(trigger="test", directory=tmp_path, master="local[1]")
    assert (again.status, again.files, again.rows_in) == (RollupRun.Status.DONE, 0, 0)
    row.refresh_from_db()
    assert row.events == 2000

    write(tmp_path, DELIVERIES, [delivery(MINUTE + 20, 3, [2, 2])], "n3-1-late")  # a node that flushed late
    late = run_rollup(trigger="test", directory=tmp_path, master="local[1]")
    assert late.files == 1
    row.refresh_from_db()
    assert (row.events, row.writes) == (2002, 4)
    assert sum(LatencyBucket.objects.filter(route="items", minute=row.minute).values_list("count", flat=True)) == 2002
    replay = RouteMinute.objects.get(route="items", minute=datetime.fromtimestamp(MINUTE + 60, tz=UTC))
    assert (replay.events, replay.catchup_events) == (53, 50)
    ages = CatchupAgeBucket.objects.filter(route="items", minute=replay.minute)
    assert {age.bucket: age.count for age in ages} == {bucket(90_000): 40, bucket(600_000): 10}
    assert RefusalMinute.objects.get(route="items").count == 5
    assert IdentityMinute.objects.get().events == 40
    assert RolledUpFile.objects.count() == 5


def test_a_failed_run_writes_nothing_and_its_retry_adds_each_file_once(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    known_logs(tmp_path)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the database went away mid-write")

    monkeypatch.setattr(RolledUpFile.objects, "bulk_create", broken)
    with pytest.raises(RuntimeError):
        run_rollup(trigger="test", directory=tmp_path, master="local[1]")
    failed = RollupRun.objects.get()
    assert failed.status == RollupRun.Status.FAILED
    assert "went away" in failed.error
    assert not RouteMinute.objects.exists()  # the sums written before the failure were rolled back

    monkeypatch.undo()
    retry = run_rollup(trigger="test", directory=tmp_path, master="local[1]")
    assert retry.files == 4
    assert RouteMinute.objects.get(route="items", minute=datetime.fromtimestamp(MINUTE, tz=UTC)).events == 2000


def test_a_run_while_another_holds_the_lock_is_skipped(tmp_path: Path) -> None:
    settings = connection.settings_dict
    other = psycopg.connect(
        dbname=settings["NAME"], user=settings["USER"], password=settings["PASSWORD"] or None,
        host=settings["HOST"], port=settings["PORT"],
    )  # fmt: skip
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
        skipped = run_rollup(trigger="test", directory=tmp_path, master="local[1]")
        assert skipped.status == RollupRun.Status.SKIPPED
        # Released here, answered before the next run asks: a close alone is noticed by the server a moment later.
        other.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    finally:
        other.close()
    assert run_rollup(trigger="test", directory=tmp_path, master="local[1]").status == RollupRun.Status.DONE
