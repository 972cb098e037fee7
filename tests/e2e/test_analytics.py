"""Delivery analytics end to end, on the real services: two platform/web.py nodes, sharing nothing but Kafka and
Postgres, send the delivery log to its topic while clients stream; one rollup turns it into Postgres rows that
match what the clients got. A worker killed without warning stops counting its streams as open once its reports
stop. Then the same rollup run by a real Celery worker and beat on the database schedule, and by a Spark
standalone master and worker reading Kafka."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from django.apps import apps as django_apps
from django.conf import settings
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from analytics import queries
from analytics.jobs.rollup import rollup
from analytics.jobs.source import LogFrames
from analytics.jobs.spark import spark_session
from analytics.models import CatchupAgeBucket, LatencyBucket, LogProcess, RefusalMinute, RollupRun, RouteMinute
from analytics.queries import Range, series
from analytics.rollups import log_range, run_rollup
from bindings.services import do_put_route
from streams.telemetry.delivery_schema import BOUNDS, DELIVERIES, REPORTS, SESSIONS, bucket
from tests.analytics.test_rollup import MINUTE, delivery, known_logs, write
from tests.conftest import unique, wait_until
from tests.support.delivery_log import log_rows
from tests.support.servers import (
    HOST,
    ROOT,
    VAR,
    children,
    free_port,
    start_daphne,
    url_of_test_database,
    web_started,
    workers_of,
)
from tests.support.sse_client import EventStream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.beside]


def stop_gracefully(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to platform/web.py: its workers close their streams and send the rest of their log."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        for pid in children(process.pid):
            os.kill(pid, signal.SIGKILL)
        process.kill()
        process.wait()
        pytest.fail("platform/web.py did not stop within 30 s of SIGTERM")


class LoggedNodes:
    """How the test's web processes hand their delivery log to the rollup, in one place: the settings a node is
    started with (a log topic of the test's own), the rows it has sent so far, and one rollup run over them."""

    def __init__(self, topic: str) -> None:
        self.topic = topic

    @property
    def env(self) -> dict[str, str]:
        return {"DELIVERY_LOG_TOPIC": self.topic, "DELIVERY_LOG_FLUSH_S": "1"}

    def rows(self, table: str) -> list[dict[str, Any]]:
        return log_rows(self.topic, table)

    def roll_up(self) -> RollupRun:
        return run_rollup(trigger="test", topic=self.topic, master="local[1]")


@pytest.fixture
def delivery_log(new_topic: Callable[..., str]) -> LoggedNodes:
    return LoggedNodes(new_topic(partitions=2))


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


def test_two_nodes_rolled_up_once_give_what_their_clients_received(
    new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], spark: Any
) -> None:
    topic, log_topic = new_topic(partitions=2), new_topic(partitions=4)
    route = unique("logged")
    do_put_route(name=route, path=f"/{route}", topic=topic)
    for index in range(6):
        produce(topic, f"v{index}".encode(), partition=index % 2)
    env = {"DELIVERY_LOG_TOPIC": log_topic, "DELIVERY_LOG_FLUSH_S": "1", "DELIVERY_LOG_REPORT_S": "1"}
    nodes = [web_started(processes=1, **env), web_started(processes=1, **env)]
    received = 0
    try:
        # Node one serves two fresh streams, node two one fresh and one with a Last-Event-ID it cannot read.
        plan = [(0, {}), (0, {}), (1, {}), (1, {"last-event-id": "not-an-id"})]
        for node, headers in plan:
            with EventStream(f"http://{HOST}:{nodes[node][1]}/{route}", headers=headers, timeout=20) as stream:
                received += len(stream.events(6))  # the topic holds six: all that can be sent
        assert httpx.get(f"http://{HOST}:{nodes[1][1]}/{route}-nowhere", timeout=5).status_code == 404
    finally:
        for process, _ in nodes:
            stop_gracefully(process)
    assert len({row["node"] + str(row["pid"]) for row in log_rows(log_topic, SESSIONS)}) == 2  # both nodes logged

    run = run_rollup(trigger="test", topic=log_topic, master="local[1]")
    assert run.status == RollupRun.Status.DONE
    rows = RouteMinute.objects.filter(route=route)
    assert sum(row.events for row in rows) == received == 24
    assert sum(row.streams_opened for row in rows) == 4 == sum(row.streams_closed for row in rows)
    assert (sum(row.fresh_starts for row in rows), sum(row.malformed_ids for row in rows)) == (3, 1)
    assert {row.topic for row in rows} == {topic}
    assert sum(row.count for row in RefusalMinute.objects.filter(route="", status=404, reason="no_route")) == 1

    again = run_rollup(trigger="test", topic=log_topic, master="local[1]")
    assert (again.status, again.messages, again.rows_in) == (RollupRun.Status.DONE, 0, 0)
    assert sum(row.events for row in RouteMinute.objects.filter(route=route)) == 24

    # A row for a minute already rolled up, sent late (a node that could not reach Kafka for a while).
    first = rows.order_by("minute").first()
    assert first is not None
    old_second = int(first.minute.timestamp()) + 1
    write(log_topic, DELIVERIES, [{**delivery(old_second, 0, [3, 3, 3]), "route": route, "topic": topic}], "late")
    late = run_rollup(trigger="test", topic=log_topic, master="local[1]")
    assert (late.messages, late.rows_in) == (1, 1)
    first.refresh_from_db()
    assert sum(row.events for row in RouteMinute.objects.filter(route=route)) == 24 + 3
    assert RouteMinute.objects.filter(route=route).count() == rows.count()  # merged into its minute, no new row


def streams_open(route: str, minute: datetime) -> int:
    (point,) = series(Range(minute, minute + timedelta(minutes=1)), route)
    return int(point["streams_open"])


def test_a_killed_workers_streams_stop_counting_within_two_report_intervals(
    new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]], spark: Any
) -> None:
    interval = 2
    topic, log_topic = new_topic(), new_topic(partitions=2)
    route = unique("killed")
    do_put_route(name=route, path=f"/{route}", topic=topic)
    produce(topic, b"v0")
    env = {"DELIVERY_LOG_TOPIC": log_topic, "DELIVERY_LOG_FLUSH_S": "1", "DELIVERY_LOG_REPORT_S": str(interval)}
    supervisor, port = web_started(processes=1, **env)
    streams = [EventStream(f"http://{HOST}:{port}/{route}", timeout=20) for _ in range(3)]
    try:
        for stream in streams:
            stream.events(1)
        wait_until(lambda: [row["open"] for row in log_rows(log_topic, REPORTS)][-1:] == [3], timeout=20)
        (worker,) = workers_of(supervisor.pid)
        os.kill(worker, signal.SIGKILL)
        killed = time.time()
        alive = run_rollup(trigger="test", topic=log_topic, master="local[1]")
        assert alive.status == RollupRun.Status.DONE
        # Its last report is less than two intervals old when the run starts: not presumed gone yet.
        assert streams_open(route, datetime.now(tz=UTC).replace(second=0, microsecond=0)) == 3
        assert LogProcess.objects.get(pid=worker).gone_at is None

        time.sleep(max(0.0, killed + 2 * interval + 0.5 - time.time()))
        assert run_rollup(trigger="test", topic=log_topic, master="local[1]").status == RollupRun.Status.DONE
    finally:
        for stream in streams:
            stream.close()
        stop_gracefully(supervisor)
    gone = LogProcess.objects.get(pid=worker)
    assert gone.gone_at is not None
    assert gone.gone_at.timestamp() <= killed + interval + 1  # its first missed report, give or take a flush
    gone_minute = gone.gone_at.replace(second=0, microsecond=0)
    assert streams_open(route, gone_minute) == 3  # open until then (the opening minute's running sum)
    assert streams_open(route, gone_minute + timedelta(minutes=1)) == 0  # and counted as open no longer
    minutes = RouteMinute.objects.filter(route=route)
    assert (sum(m.streams_opened for m in minutes), sum(m.streams_closed for m in minutes)) == (3, 0)
    assert sum(m.streams_gone for m in minutes) == 3


@pytest.fixture
def rollup_schedule() -> PeriodicTask:
    """The migration's schedule (made again by the migration's own code: transactional tests empty the tables
    between tests)."""
    migration = importlib.import_module("analytics.migrations.0002_rollup_schedule")
    migration.create_schedule(django_apps, None)
    return PeriodicTask.objects.get(task="analytics.tasks.rollup_delivery_log")


@pytest.fixture
def rollup_every_2_s(rollup_schedule: PeriodicTask) -> Iterator[None]:
    """The migration's schedule, run every 2 s for the test."""
    task = rollup_schedule
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


def celery_environment(log_topic: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": url_of_test_database(),
        # A Redis database of the test's own: tasks beat sends after the worker stops stay out of `make run`'s.
        "REDIS_URL": settings.REDIS_URL.rsplit("/", 1)[0] + "/15",
        "KAFKA_BOOTSTRAP_SERVERS": settings.KAFKA.bootstrap_servers,
        "DELIVERY_LOG_TOPIC": log_topic,
        "SPARK_MASTER": "local[1]",
    }


@contextlib.contextmanager
def worker_and_beat(env: dict[str, str], schedule: Path) -> Iterator[None]:
    """A Celery worker and beat as `make run` starts them (platform/Procfile); stopped at the end."""
    worker = celery(
        ["worker", "--pool=solo", "--purge", f"--hostname=test-{os.getpid()}@%h"], "test-celery-worker", env
    )
    beat = celery(
        ["beat", "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler", "--schedule", str(schedule)],
        "test-celery-beat",
        env,
    )
    try:
        yield
    finally:
        for process in (beat, worker):
            process.terminate()
        for process in (beat, worker):
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


def test_make_runs_dashboards_show_a_streams_traffic_within_two_minutes(
    tmp_path: Path,
    new_topic: Callable[..., str],
    produce: Callable[..., tuple[int, int]],
    rollup_schedule: PeriodicTask,
) -> None:
    """The processes of `make run` on the migration's own schedule (every ANALYTICS_ROLLUP_EVERY_S, 60 s): a page's
    stream, opened as they start, is in the rollup tables the dashboards read within two minutes."""
    assert rollup_schedule.interval.every == settings.ANALYTICS_ROLLUP_EVERY_S == 60
    topic, log_topic = new_topic(), new_topic(partitions=2)
    route = unique("demo")
    do_put_route(name=route, path=f"/{route}", topic=topic)
    started = time.monotonic()
    supervisor, port = web_started(processes=1, DELIVERY_LOG_TOPIC=log_topic)  # the default flush interval
    try:
        with (
            worker_and_beat(celery_environment(log_topic), tmp_path / "celerybeat-schedule"),
            EventStream(f"http://{HOST}:{port}/{route}", timeout=20) as stream,
        ):
            for index in range(3):  # as the demo producer sends, one a second
                produce(topic, f"v{index}".encode())
                time.sleep(1)
            assert len(stream.events(3)) == 3

            def shown() -> bool:
                rows = RouteMinute.objects.filter(route=route)
                return sum(row.events for row in rows) == 3 and sum(row.streams_opened for row in rows) == 1

            wait_until(shown, timeout=max(1.0, 120 - (time.monotonic() - started)), interval=1)
    finally:
        stop_gracefully(supervisor)
    assert time.monotonic() - started < 120


def test_a_real_celery_worker_and_beat_run_the_scheduled_rollup(
    tmp_path: Path, new_topic: Callable[..., str], rollup_every_2_s: None
) -> None:
    log_topic = new_topic(partitions=2)
    known_logs(log_topic)
    with worker_and_beat(celery_environment(log_topic), tmp_path / "celerybeat-schedule"):
        wait_until(
            lambda: RollupRun.objects.filter(trigger="schedule", status=RollupRun.Status.DONE, messages__gt=0).exists(),
            timeout=120,
            interval=0.5,
        )
        wait_until(lambda: RollupRun.objects.filter(trigger="schedule").count() >= 2, timeout=30, interval=0.5)
    first = RouteMinute.objects.get(route="items", minute=datetime.fromtimestamp(MINUTE, tz=UTC))
    assert (first.events, first.streams_opened) == (2000, 3)  # the later runs found nothing new to add
    assert not RollupRun.objects.filter(status=RollupRun.Status.FAILED).exists()


def spark_class(*arguments: str, log_name: str) -> subprocess.Popen[bytes]:
    import pyspark  # noqa: PLC0415

    script = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_HOME": str(script.parent.parent), "SPARK_LOCAL_IP": HOST, "SPARK_NO_DAEMONIZE": "1"}
    with (VAR / f"{log_name}.log").open("wb") as log:
        return subprocess.Popen([str(script), *arguments], env=env, stdout=log, stderr=subprocess.STDOUT)


def test_the_same_job_reads_kafka_on_a_spark_standalone_cluster(
    new_topic: Callable[..., str], spark_for_the_run: None
) -> None:
    log_topic = new_topic(partitions=2)
    known_logs(log_topic)
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
        started = time.monotonic()
        frames = LogFrames(spark_session(f"spark://{HOST}:{port}"), log_range(settings.KAFKA, log_topic))
        result = rollup(frames.tables)
        frames.release()
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
    assert result.refusals[("items", MINUTE, 401, "unauthorized")] == 5
