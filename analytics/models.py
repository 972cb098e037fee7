"""Rollups of the delivery log, and the record of each rollup run, of the log's offsets it read up to, and of the
processes that write the log.

Every number is a sum that later rows add to (docs/analytics.md); a row is added once: the offsets each run read
up to (`LogOffset`) are written in the same transaction as the sums it added.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class RouteMinute(models.Model):
    """What one route delivered from one topic in one minute, summed over every process and node."""

    route = models.CharField(max_length=100)
    topic = models.CharField(max_length=249)
    minute = models.DateTimeField(help_text="The minute's start (UTC).")
    events = models.BigIntegerField(default=0, help_text="Events written, one per client that got it.")
    bytes = models.BigIntegerField(default=0)
    writes = models.BigIntegerField(default=0)
    catchup_events = models.BigIntegerField(
        default=0, help_text="Of the events, those written while their stream was catching up (not live)."
    )
    streams_opened = models.IntegerField(default=0)
    streams_closed = models.IntegerField(default=0)
    fresh_starts = models.IntegerField(default=0)
    resumes = models.IntegerField(default=0, help_text="Streams that resumed from a Last-Event-ID.")
    malformed_ids = models.IntegerField(default=0, help_text="Streams whose Last-Event-ID could not be read.")
    since_starts = models.IntegerField(default=0)
    replayed = models.BigIntegerField(default=0, help_text="Events read from before the cache window.")
    slow_closes = models.IntegerField(default=0, help_text="Streams closed for falling too far behind.")
    token_expiries = models.IntegerField(default=0)
    route_changes = models.IntegerField(default=0)
    streams_gone = models.IntegerField(
        default=0,
        help_text="Streams of processes whose reports stopped, counted as closed in this minute "
        "(negative when such a process reported again).",
    )

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["route", "topic", "minute"], name="route_minute_key")
        ]
        indexes: ClassVar[list[models.Index]] = [models.Index(fields=["minute"])]

    def __str__(self) -> str:
        return f"{self.route} {self.topic} {self.minute:%Y-%m-%d %H:%M}"


class HistogramBucket(models.Model):
    """Events of a route, topic and minute that fell in one bucket of a histogram (the delivery log's buckets,
    streams/telemetry/delivery_schema.py)."""

    route = models.CharField(max_length=100)
    topic = models.CharField(max_length=249)
    minute = models.DateTimeField()
    bucket = models.SmallIntegerField()
    count = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class LatencyBucket(HistogramBucket):
    """Live events of a route, topic and minute whose latency (Kafka timestamp to write) fell in one bucket."""

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["route", "topic", "minute", "bucket"], name="latency_bucket_key")
        ]
        indexes: ClassVar[list[models.Index]] = [models.Index(fields=["minute"])]

    def __str__(self) -> str:
        return f"{self.route} {self.minute:%H:%M} bucket {self.bucket}"


class CatchupAgeBucket(HistogramBucket):
    """Catch-up events of a route, topic and minute whose age at their write fell in one bucket."""

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["route", "topic", "minute", "bucket"], name="catchup_age_bucket_key")
        ]
        indexes: ClassVar[list[models.Index]] = [models.Index(fields=["minute"])]

    def __str__(self) -> str:
        return f"{self.route} {self.minute:%H:%M} catch-up bucket {self.bucket}"


class RefusalMinute(models.Model):
    """Requests refused with one status and reason in one minute ("" route: no route matched)."""

    route = models.CharField(max_length=100, blank=True)
    minute = models.DateTimeField()
    status = models.SmallIntegerField()
    reason = models.CharField(max_length=40)
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["route", "minute", "status", "reason"], name="refusal_minute_key")
        ]
        indexes: ClassVar[list[models.Index]] = [models.Index(fields=["minute"])]

    def __str__(self) -> str:
        return f"{self.route or '(no route)'} {self.minute:%H:%M} {self.status} {self.reason}"


class IdentityMinute(models.Model):
    """Events and streams of one (hashed) identity on a route, by the minute its streams closed."""

    route = models.CharField(max_length=100)
    minute = models.DateTimeField()
    identity = models.CharField(max_length=64)
    events = models.BigIntegerField(default=0)
    sessions = models.IntegerField(default=0)

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["route", "minute", "identity"], name="identity_minute_key")
        ]
        indexes: ClassVar[list[models.Index]] = [models.Index(fields=["minute"])]

    def __str__(self) -> str:
        return f"{self.route} {self.minute:%H:%M} {self.identity}"


class RollupRun(models.Model):
    """One run of the rollup: what it read and wrote, how long it took, how it ended."""

    class Status(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        SKIPPED = "skipped"  # another run held the lock

    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    trigger = models.CharField(max_length=20, default="schedule", help_text="schedule, command or test.")
    messages = models.IntegerField(default=0, help_text="Delivery-log messages read from Kafka.")
    rows_in = models.BigIntegerField(default=0)
    rows_out = models.BigIntegerField(default=0)
    duration_s = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-started_at"]

    def __str__(self) -> str:
        return f"rollup {self.started_at:%Y-%m-%d %H:%M:%S} {self.status}"


class LogOffset(models.Model):
    """Where the next run reads a partition of the delivery log's topic: every offset before it is in the sums."""

    topic = models.CharField(max_length=249)
    partition = models.IntegerField()
    offset = models.BigIntegerField()

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["topic", "partition"], name="log_offset_key")
        ]

    def __str__(self) -> str:
        return f"{self.topic} [{self.partition}] @ {self.offset}"


class LogProcess(models.Model):
    """A web process that wrote the delivery log: when it was last heard of, and whether it is presumed gone (no
    report for two of its report intervals; its open streams then stop counting)."""

    process = models.CharField(max_length=300, unique=True)
    node = models.CharField(max_length=255)
    pid = models.IntegerField()
    last_seen = models.DateTimeField(help_text="Its newest report or stream row.")
    report_interval_s = models.FloatField(null=True, blank=True)
    gone_at = models.DateTimeField(null=True, blank=True, help_text="When its first missed report was due.")

    def __str__(self) -> str:
        return self.process


class ProcessStreams(models.Model):
    """One process's streams of a route and topic: open (opened minus closed) and counted as open in the minutes
    (`open` while the process is alive, 0 once it is gone)."""

    process = models.CharField(max_length=300)
    route = models.CharField(max_length=100)
    topic = models.CharField(max_length=249)
    open = models.IntegerField(default=0)
    counted = models.IntegerField(default=0)

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["process", "route", "topic"], name="process_streams_key")
        ]

    def __str__(self) -> str:
        return f"{self.process} {self.route} {self.topic}"
