"""Running the rollup: which delivery-log files are new, the Spark job over them, and the sums into Postgres.

One run at a time (a Postgres advisory lock: a second run while one holds it is recorded as skipped). The sums
and the record of the files they came from are written in one transaction, adding to what earlier runs wrote,
so a run that fails leaves nothing behind and its retry adds each file exactly once.
"""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from analytics.jobs.rollup import SESSION_COUNTS, TRAFFIC, Rollup, rollup
from analytics.jobs.spark import spark_session
from analytics.models import (
    CatchupAgeBucket,
    IdentityMinute,
    LatencyBucket,
    RefusalMinute,
    RolledUpFile,
    RollupRun,
    RouteMinute,
)
from streams.telemetry.delivery_schema import TABLES

log = logging.getLogger(__name__)

LOCK_KEY = 0x53534B41  # the rollup's advisory lock ("SSKA")


def new_files(directory: Path) -> dict[str, list[Path]]:
    """Complete files of each table not rolled up yet (files being written start with "." and are skipped)."""
    done = set(RolledUpFile.objects.values_list("path", flat=True))
    found: dict[str, list[Path]] = {}
    for table in TABLES:
        paths = sorted(
            path
            for path in (directory / table).rglob("*.parquet")
            if not path.name.startswith((".", "_")) and str(path.relative_to(directory)) not in done
        )
        if paths:
            found[table] = paths
    return found


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


def run_rollup(*, trigger: str = "schedule", directory: Path | None = None, master: str | None = None) -> RollupRun:
    """Roll up every new file once; returns the run's record (done, skipped or, having raised, failed)."""
    directory = Path(directory or settings.DELIVERY_LOG_DIR)
    with exclusive() as got:
        if not got:
            return RollupRun.objects.create(
                trigger=trigger, status=RollupRun.Status.SKIPPED, finished_at=timezone.now(), duration_s=0
            )
        run = RollupRun.objects.create(trigger=trigger)
        started = time.monotonic()
        try:
            files = new_files(directory)
            result = Rollup()
            if files:
                job_input = {table: [str(path) for path in paths] for table, paths in files.items()}
                result = rollup(spark_session(master or settings.SPARK_MASTER), job_input)
            with transaction.atomic():
                write(result)
                RolledUpFile.objects.bulk_create(
                    RolledUpFile(
                        path=str(path.relative_to(directory)),
                        table=table,
                        rows=pq.ParquetFile(path).metadata.num_rows,
                        run=run,
                    )
                    for table, paths in files.items()
                    for path in paths
                )
                run.files = sum(len(paths) for paths in files.values())
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


def write(result: Rollup) -> None:
    """Add `result` to the rollup tables (insert, or add to the row already there)."""
    counts = (*TRAFFIC, *SESSION_COUNTS)
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
