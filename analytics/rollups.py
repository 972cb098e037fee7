"""Running the rollup: which range of the delivery log is new, the Spark job over it, and the sums into Postgres.

One run at a time (a Postgres advisory lock: a second run while one holds it is recorded as skipped). Each run
reads every partition of the log's topic from the offset the last successful run recorded up to the end it finds
when it starts; the sums and the new offsets are written in one transaction, adding to what earlier runs wrote,
so a run that fails leaves nothing behind and its retry adds each row exactly once.

Streams open: each process reports every few seconds; a process not heard of for two of its report intervals is
presumed gone, and its streams still open are counted closed (`streams_gone`) in the minute its first missed
report was due. A process presumed gone that reports again is counted back.
"""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Model, Q
from django.utils import timezone

from analytics.jobs.rollup import GONE, SESSION_COUNTS, TRAFFIC, Rollup, rollup
from analytics.jobs.source import LogFrames, LogRange
from analytics.jobs.spark import spark_session
from analytics.models import (
    CatchupAgeBucket,
    IdentityMinute,
    LatencyBucket,
    LogOffset,
    LogProcess,
    ProcessStreams,
    RefusalMinute,
    RollupRun,
    RouteMinute,
)
from config.kafka_settings import KafkaSettings
from streams.kafka.admin import ensure_topic

log = logging.getLogger(__name__)

LOCK_KEY = 0x53534B41  # the rollup's advisory lock ("SSKA")


def log_range(kafka: KafkaSettings, topic: str) -> LogRange:
    """Every partition of the topic, from the offset recorded by the last successful run (or the first offset
    Kafka still holds) to its end now. Creates the topic when it does not exist yet."""
    ensure_topic(
        kafka,
        topic,
        partitions=settings.DELIVERY_LOG_PARTITIONS,
        config={"retention.ms": str(settings.DELIVERY_LOG_RETENTION_H * 3600 * 1000)},
    )
    consumer = Consumer(kafka.consumer_config())
    try:
        metadata = consumer.list_topics(topic, timeout=kafka.metadata_timeout_s).topics[topic]
        if metadata.error is not None:
            raise RuntimeError(f"delivery log topic {topic}: {metadata.error}")
        recorded = dict(LogOffset.objects.filter(topic=topic).values_list("partition", "offset"))
        start, end = {}, {}
        for partition in sorted(metadata.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=kafka.metadata_timeout_s
            )
            start[partition] = max(recorded.get(partition, low), low)
            end[partition] = max(high, start[partition])
    finally:
        consumer.close()
    return LogRange(topic, start, end, {"bootstrap.servers": kafka.bootstrap_servers})


@contextlib.contextmanager
def exclusive() -> Iterator[bool]:
    """Hold the rollup's advisory lock for the block, if no other run holds it; yields whether it got it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        got = bool(cursor.fetchone()[0])
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])


def run_rollup(*, trigger: str = "schedule", topic: str | None = None, master: str | None = None) -> RollupRun:
    """Roll up every row the log gained since the last successful run, once; returns the run's record (done,
    skipped or, having raised, failed)."""
    topic = topic or settings.DELIVERY_LOG_TOPIC
    with exclusive() as got:
        if not got:
            return RollupRun.objects.create(
                trigger=trigger, status=RollupRun.Status.SKIPPED, finished_at=timezone.now(), duration_s=0
            )
        run = RollupRun.objects.create(trigger=trigger)
        started = time.monotonic()
        try:
            now = time.time()
            found = log_range(settings.KAFKA, topic)
            result = Rollup()
            if found.messages:
                frames = LogFrames(spark_session(master or settings.SPARK_MASTER), found)
                try:
                    result = rollup(frames.tables)
                finally:
                    frames.release()
                if frames.skipped:
                    log.warning("rollup: %d messages of another schema version skipped", frames.skipped)
            with transaction.atomic():
                track_processes(result, now)
                write(result)
                for partition, offset in found.end.items():
                    LogOffset.objects.update_or_create(topic=topic, partition=partition, defaults={"offset": offset})
                run.messages = found.messages
                run.rows_in, run.rows_out = result.rows_in, result.rows_out
                run.status, run.finished_at = RollupRun.Status.DONE, timezone.now()
                run.duration_s = time.monotonic() - started
                run.save()
        except Exception:
            run.status, run.finished_at = RollupRun.Status.FAILED, timezone.now()
            run.duration_s, run.error = time.monotonic() - started, traceback.format_exc()[-4000:]
            run.save()
            log.exception("rollup failed")
            raise
    return run


def track_processes(result: Rollup, now: float) -> None:
    """Record what the result says of each process, decide which are gone, and add to `result` the streams
    whose counting as open changes (`streams_gone`)."""
    for process, seen in result.processes.items():
        last_seen = datetime.fromtimestamp(seen.last_ms / 1000, tz=UTC)
        known, created = LogProcess.objects.get_or_create(
            process=process, defaults={"node": seen.node, "pid": seen.pid, "last_seen": last_seen}
        )
        if not created:
            known.last_seen = max(known.last_seen, last_seen)
        if seen.interval_ms is not None:
            known.report_interval_s = seen.interval_ms / 1000
        known.save()
    for (process, route, topic), delta in result.process_streams.items():
        row, _ = ProcessStreams.objects.get_or_create(process=process, route=route, topic=topic)
        ProcessStreams.objects.filter(pk=row.pk).update(open=F("open") + delta, counted=F("counted") + delta)
    # The processes still counted as alive, and those just heard of (one presumed gone may be back).
    for known in LogProcess.objects.filter(Q(gone_at__isnull=True) | Q(process__in=list(result.processes))):
        interval = timedelta(seconds=known.report_interval_s or settings.DELIVERY_LOG_REPORT_S)
        alive = datetime.fromtimestamp(now, tz=UTC) - known.last_seen <= 2 * interval
        if not alive and known.gone_at is None:
            known.gone_at = known.last_seen + interval
            known.save(update_fields=["gone_at"])
        elif alive and known.gone_at is not None:
            known.gone_at = None
            known.save(update_fields=["gone_at"])
        when = known.last_seen if known.gone_at is None else known.gone_at
        minute = int(when.timestamp()) // 60 * 60
        for streams in ProcessStreams.objects.filter(process=known.process):
            target = streams.open if known.gone_at is None else 0
            if streams.counted != target:
                result.minute(streams.route, streams.topic, minute)[GONE] += streams.counted - target
                streams.counted = target
                streams.save(update_fields=["counted"])


def write(result: Rollup) -> None:
    """Add `result` to the rollup tables (insert, or add to the row already there)."""
    counts = (*TRAFFIC, *SESSION_COUNTS, GONE)
    _add(
        RouteMinute,
        ("route", "topic", "minute"),
        counts,
        [
            (route, topic, _at(minute), *(sums[name] for name in counts))
            for (route, topic, minute), sums in result.minutes.items()
        ],
    )
    for model, histogram in ((LatencyBucket, result.latency), (CatchupAgeBucket, result.catchup_age)):
        _add(
            model,
            ("route", "topic", "minute", "bucket"),
            ("count",),
            [(route, topic, _at(minute), index, n) for (route, topic, minute, index), n in histogram.items()],
        )
    _add(
        RefusalMinute,
        ("route", "minute", "status", "reason"),
        ("count",),
        [(route, _at(minute), status, reason, n) for (route, minute, status, reason), n in result.refusals.items()],
    )
    _add(
        IdentityMinute,
        ("route", "minute", "identity"),
        ("events", "sessions"),
        [(route, _at(minute), identity, *sums) for (route, minute, identity), sums in result.identities.items()],
    )


def _add(model: type[Model], keys: Sequence[str], sums: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    if not rows:
        return
    table = model._meta.db_table
    columns = ", ".join((*keys, *sums))
    values = ", ".join(["%s"] * (len(keys) + len(sums)))
    added = ", ".join(f"{name} = {table}.{name} + EXCLUDED.{name}" for name in sums)
    sql = f"INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {added}"  # noqa: S608  (names from models)
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def _at(minute: int) -> datetime:
    return datetime.fromtimestamp(minute, tz=UTC)
