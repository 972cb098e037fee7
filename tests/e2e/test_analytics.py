"""Delivery analytics end to end, on the real services: a live daphne writes the delivery log while clients
stream; the rollup turns it into Postgres rows that match what the clients got. Then the same rollup run by a
real Celery worker and beat on the database schedule, and by a Spark standalone master and worker."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from django.apps import apps as django_apps
from django.conf import settings
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from analytics import queries
from analytics.jobs.rollup import rollup
from analytics.jobs.spark import spark_session
from analytics.models import CatchupAgeBucket, LatencyBucket, RefusalMinute, RollupRun, RouteMinute
from analytics.queries import Range
from analytics.rollups import run_rollup
from bindings.services import do_put_route
from streams.telemetry.delivery_schema import BOUNDS, DELIVERIES, SESSIONS, bucket
from tests.analytics.test_rollup import MINUTE, known_logs
from tests.conftest import unique, wait_until
from tests.support.servers import HOST, ROOT, VAR, free_port, start_daphne, url_of_test_database
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


def log_files(directory: Path, table: str) -> list[Path]:
    """The table's finished files: one being written is named `.<name>` until it is renamed, so it may be gone by
    the time it would be read (Spark skips such names too)."""
    return [path for path in (directory / table).rglob("*.parquet") if not path.name.startswith(".")]


def log_rows(directory: Path, table: str) -> list[dict[str, Any]]:
    return [row for path in log_files(directory, table) for row in pq.read_table(path).to_pylist()]


class LoggedNodes:
    """How the test's web processes hand their delivery log to the rollup, in one place: the settings a node is
    started with, the rows it has logged so far, and one rollup run over them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def env(self) -> dict[str, str]:
        return {"DELIVERY_LOG_DIR": str(self.directory), "DELIVERY_LOG_FLUSH_S": "1"}

    def rows(self, table: str) -> list[dict[str, Any]]:
        return log_rows(self.directory, table)

    def roll_up(self) -> RollupRun:
        return run_rollup(trigger="test", directory=self.directory, master="local[1]")


@pytest.fixture
def delivery_log(tmp_path: Path) -> LoggedNodes:
    return LoggedNodes(tmp_path)


HISTORY = 400  # records ten minutes old when the storm begins
STORM = 40  # clients resuming far behind the live end...
FROM_START = 10  # ...and from the topic's start
LIVE_CLIENTS = 5
LIVE_EVENTS = 40


def storm(url: str, produce: Callable[[bytes], object]) -> int:
    """Live clients at the live end, then a storm of clients resuming far behind it, while events are produced;
    returns the events the clients received, each checked."""
    streams: list[EventStream] = []
    try:
        first = EventStream(url)  # the route starts at the topic's start: the history, then live
        streams.append(first)
        history = first.events(HISTORY)
        received = len(history)
        streams += [EventStream(url, headers={"last-event-id": history[-1].id or ""}) for _ in range(LIVE_CLIENTS - 1)]
        live = list(streams)
        for stream in live[1:]:
            assert stream.next_block().retry is not None  # open at the live end
        behind = [EventStream(url, headers={"last-event-id": history[0].id or ""}) for _ in range(STORM)]
        behind += [EventStream(url) for _ in range(FROM_START)]
        streams += behind
        for index in range(LIVE_EVENTS):  # live traffic during the storm and after it
            produce(f"l{index}".encode())
            time.sleep(0.02)
        for stream in live:
            got = stream.events(LIVE_EVENTS)
            assert [event.text for event in got] == [f"l{index}" for index in range(LIVE_EVENTS)]
            received += len(got)
        for index, stream in enumerate(behind):
            replay = HISTORY - 1 if index < STORM else HISTORY
            got = stream.events(replay + LIVE_EVENTS, timeout=30)
            assert got[-1].text == f"l{LIVE_EVENTS - 1}"
            received += len(got)
        return received
    finally:
        for stream in streams:
            stream.close()


def test_a_reconnect_storm_leaves_the_live_latency_live_and_counts_the_replay_as_catch_up(
    delivery_log: LoggedNodes, new_topic: Callable[..., str], producer: Producer, produce: Callable[..., Any]
) -> None:
    """Clients at the live end get events as they are produced, while a storm of clients resume from far behind
    (a Last-Event-ID ten minutes old, or the topic's start) on the same server. The rollup's live latency is the
    live clients' milliseconds; the replay is all in the catch-up count, with its ten-minute age."""
    topic = new_topic(partitions=1)
    route = unique("storm")
    do_put_route(name=route, path=f"/{route}", topic=topic)
    ten_minutes_ago = int(time.time() * 1000) - 600_000
    for index in range(HISTORY):
        producer.produce(topic, value=f"h{index}".encode(), partition=0, timestamp=ten_minutes_ago + index)
    producer.flush(10)
    server = start_daphne(delivery_log.env, log_name="test-daphne-storm")
    try:
        received = storm(f"{server.url}/{route}", lambda value: produce(topic, value))
        wait_until(lambda: sum(row["events"] for row in delivery_log.rows(DELIVERIES)) >= received, timeout=20)
    finally:
        server.stop()

    assert delivery_log.roll_up().status == RollupRun.Status.DONE
    replayed = HISTORY + STORM * (HISTORY - 1) + FROM_START * HISTORY
    window = Range(timezone.now() - timedelta(minutes=10), timezone.now() + timedelta(minutes=2))
    totals = queries.totals(window, route)
    assert totals["events"] == received
    # Every event of the history, and nothing else that old, is catch-up; so are the live events a storm client
    # got while it was catching up (at most all of them).
    assert replayed <= totals["catchup_events"] <= replayed + (STORM + FROM_START) * LIVE_EVENTS
    ages = CatchupAgeBucket.objects.filter(route=route).values_list("bucket", "count")
    assert sum(count for index, count in ages if index >= bucket(540_000)) == replayed
    assert BOUNDS[bucket(600_000) - 1] <= totals["catchup_age_p50_ms"] <= BOUNDS[bucket(600_000) + 2]
    # The live clients' events are all live, and none of the live latency is ten minutes old: its p95 is the
    # live figure (milliseconds on an idle machine), not the replay's.
    live_events = totals["events"] - totals["catchup_events"]
    assert live_events >= LIVE_CLIENTS * LIVE_EVENTS
    latency = LatencyBucket.objects.filter(route=route).values_list("bucket", "count")
    assert sum(count for _, count in latency) == live_events
    assert max(index for index, count in latency if count) < bucket(60_000)
    assert totals["p95_ms"] is not None
    assert totals["p95_ms"] < 1000


def test_the_rollup_of_a_live_servers_log_matches_what_its_clients_received(
    tmp_path: Path, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], spark: Any
) -> None:
    topic = new_topic(partitions=2)
    route = unique("logged")
    do_put_route(name=route, path=f"/{route}", topic=topic)
    for index in range(6):
        produce(topic, f"v{index}".encode(), partition=index % 2)
    server = start_daphne(
        {"DELIVERY_LOG_DIR": str(tmp_path), "DELIVERY_LOG_FLUSH_S": "1"}, log_name="test-daphne-analytics"
    )
    received = 0
    try:
        for headers in ({}, {}, {"last-event-id": "not-an-id"}):  # each reads all six; the third starts malformed
            with EventStream(f"{server.url}/{route}", headers=headers, timeout=20) as stream:
                received += len(stream.events(6))  # the topic holds six: all that can be sent
        assert httpx.get(f"{server.url}/{route}-nowhere", timeout=5).status_code == 404
        wait_until(lambda: len([r for r in log_rows(tmp_path, SESSIONS) if r["event"] == "closed"]) == 3, timeout=20)
        wait_until(lambda: sum(r["events"] for r in log_rows(tmp_path, DELIVERIES)) >= received, timeout=20)
    finally:
        server.stop()

    run = run_rollup(trigger="test", directory=tmp_path, master="local[1]")
    assert run.status == RollupRun.Status.DONE
    rows = RouteMinute.objects.filter(route=route)
    assert sum(row.events for row in rows) == received == 18
    assert sum(row.streams_opened for row in rows) == 3
    assert sum(row.streams_closed for row in rows) == 3
    assert (sum(row.fresh_starts for row in rows), sum(row.malformed_ids for row in rows)) == (2, 1)
    assert {row.topic for row in rows} == {topic}
    refused = RefusalMinute.objects.filter(route="", status=404, reason="no_route")
    assert sum(row.count for row in refused) == 1


@pytest.fixture
def rollup_every_2_s() -> Iterator[None]:
    """The migration's schedule (made again by the migration's own code: transactional tests empty the tables
    between tests), run every 2 s for the test."""
    migration = importlib.import_module("analytics.migrations.0002_rollup_schedule")
    migration.create_schedule(django_apps, None)
    task = PeriodicTask.objects.get(task="analytics.tasks.rollup_delivery_log")
    assert task.enabled
    assert task.interval.every == settings.ANALYTICS_ROLLUP_EVERY_S
    before = task.interval
    task.interval = IntervalSchedule.objects.get_or_create(every=2, period=IntervalSchedule.SECONDS)[0]
    task.save()
    yield
    task.interval = before
    task.save()


def celery(arguments: list[str], log_name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with (VAR / f"{log_name}.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", *arguments, "--loglevel=INFO"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def test_a_real_celery_worker_and_beat_run_the_scheduled_rollup(tmp_path: Path, rollup_every_2_s: None) -> None:
    known_logs(tmp_path)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": url_of_test_database(),
        # A Redis database of the test's own: tasks beat sends after the worker stops stay out of `make run`'s.
        "REDIS_URL": settings.REDIS_URL.rsplit("/", 1)[0] + "/15",
        "KAFKA_BOOTSTRAP_SERVERS": settings.KAFKA.bootstrap_servers,
        "DELIVERY_LOG_DIR": str(tmp_path),
        "SPARK_MASTER": "local[1]",
    }
    schedule = tmp_path / "celerybeat-schedule"
    worker = celery(
        ["worker", "--pool=solo", "--purge", f"--hostname=test-{os.getpid()}@%h"], "test-celery-worker", env
    )
    beat = celery(
        ["beat", "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler", "--schedule", str(schedule)],
        "test-celery-beat",
        env,
    )
    try:
        wait_until(
            lambda: RollupRun.objects.filter(trigger="schedule", status=RollupRun.Status.DONE, files__gt=0).exists(),
            timeout=120,
            interval=0.5,
        )
        wait_until(lambda: RollupRun.objects.filter(trigger="schedule").count() >= 2, timeout=30, interval=0.5)
    finally:
        for process in (beat, worker):
            process.terminate()
        for process in (beat, worker):
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
    first = RouteMinute.objects.get(route="items", minute=datetime.fromtimestamp(MINUTE, tz=UTC))
    assert (first.events, first.streams_opened) == (2000, 3)  # the later runs found nothing new to add
    assert not RollupRun.objects.filter(status=RollupRun.Status.FAILED).exists()


def spark_class(*arguments: str, log_name: str) -> subprocess.Popen[bytes]:
    import pyspark  # noqa: PLC0415

    script = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_HOME": str(script.parent.parent), "SPARK_LOCAL_IP": HOST, "SPARK_NO_DAEMONIZE": "1"}
    with (VAR / f"{log_name}.log").open("wb") as log:
        return subprocess.Popen([str(script), *arguments], env=env, stdout=log, stderr=subprocess.STDOUT)


def test_the_same_job_runs_unchanged_on_a_spark_standalone_cluster(tmp_path: Path, spark_for_the_run: None) -> None:
    known_logs(tmp_path)
    port = free_port()
    master = spark_class(
        "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port), "--webui-port", str(free_port()),
        log_name="test-spark-master",
    )  # fmt: skip
    worker = spark_class(
        "org.apache.spark.deploy.worker.Worker", f"spark://{HOST}:{port}", "--cores", "1", "--memory", "1g",
        "--webui-port", str(free_port()), log_name="test-spark-worker",
    )  # fmt: skip
    try:
        wait_until(lambda: "Registering worker" in (VAR / "test-spark-master.log").read_text(), timeout=60)
        files = {table: [str(p) for p in log_files(tmp_path, table)] for table in ("deliveries", "sessions")}
        started = time.monotonic()
        result = rollup(spark_session(f"spark://{HOST}:{port}"), files)
        assert time.monotonic() - started < 120
        executors = spark_session(f"spark://{HOST}:{port}").sparkContext._jsc.sc().getExecutorMemoryStatus().size()
        assert executors >= 2  # the driver and the standalone worker's executor: the job ran on the cluster
    finally:
        spark_session("local[1]")  # back to the local session the other tests use
        for process in (worker, master):
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
    assert result.minutes[("items", "items", MINUTE)]["events"] == 2000
    assert result.minutes[("items", "items", MINUTE)]["streams_opened"] == 3
