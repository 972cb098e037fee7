"""What the dashboards and the analytics API show, read from the rollup tables only (so they work while Spark is
down). A range is [start, end) in whole minutes; a series has one point per minute or hour, zeros included.

Latency percentiles (`p50_ms`, ...) are of live events only, written while their stream stood at the live end;
catch-up events (history, resumes, shared catch-up reads) have their count (`catchup_events`, also in `events`)
and their age's percentiles (`catchup_age_p50_ms`, ...) apart (docs/analytics.md).

Streams open: a stream counts in every minute from the one it opened in to the one it closed in, so the number
open during a minute is every opening up to and including it minus every closing before it (a running sum over
the whole history, started from what the rows before the range add up to). The streams of a process presumed
gone (its reports stopped) count as closed in the minute its first missed report was due (`streams_gone`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, QuerySet, Sum

from analytics.models import (
    CatchupAgeBucket,
    HistogramBucket,
    IdentityMinute,
    LatencyBucket,
    RefusalMinute,
    RollupRun,
    RouteMinute,
)
from analytics.percentiles import QUANTILES, percentiles

STEPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1)}
COUNTS = (
    "events",
    "catchup_events",
    "bytes",
    "streams_opened",
    "streams_closed",
    "resumes",
    "fresh_starts",
    "malformed_ids",
    "since_starts",
    "slow_closes",
    "token_expiries",
)
# Each histogram's percentiles, named by its prefix: `p95_ms` (live latency), `catchup_age_p95_ms` (catch-up age).
PERCENTILES: dict[type[HistogramBucket], str] = {LatencyBucket: "", CatchupAgeBucket: "catchup_age_"}


def _named(prefix: str, found: dict[float, float | None]) -> dict[str, float | None]:
    return {f"{prefix}p{int(quantile * 100)}_ms": value for quantile, value in found.items()}


PERCENTILE_NAMES = tuple(name for prefix in PERCENTILES.values() for name in _named(prefix, dict.fromkeys(QUANTILES)))


@dataclass(frozen=True)
class Range:
    start: datetime
    end: datetime
    step: str = "minute"

    def __post_init__(self) -> None:
        if self.step not in STEPS:
            raise ValueError(f"step is minute or hour, not {self.step!r}")
        if self.end <= self.start:
            raise ValueError("the range ends before it starts")

    def points(self) -> list[datetime]:
        width = STEPS[self.step]
        first = _floor(self.start, self.step)
        count = -(-(self.end - first) // width)  # every step that starts before the end
        return [first + width * index for index in range(count)]


def _floor(moment: datetime, step: str) -> datetime:
    moment = moment.replace(second=0, microsecond=0)
    return moment.replace(minute=0) if step == "hour" else moment


def _minutes(model: Any, window: Range, route: str | None) -> QuerySet[Any]:
    rows: QuerySet[Any] = model.objects.filter(minute__gte=window.start, minute__lt=window.end)
    return rows if route is None else rows.filter(route=route)


def series(window: Range, route: str | None = None) -> list[dict[str, Any]]:
    """One point per step: the counts, refusals, streams open and latency percentiles."""
    points: dict[datetime, dict[str, Any]] = {
        point: {"time": point, **dict.fromkeys(COUNTS, 0), "refusals": 0, "streams_open": 0}
        for point in window.points()
    }
    per_minute: dict[datetime, list[int]] = defaultdict(lambda: [0, 0])  # minute -> [opened, closed]
    for row in _minutes(RouteMinute, window, route).values("minute", "streams_gone", *COUNTS):
        point = points.get(_floor(row["minute"], window.step))
        if point is not None:
            for name in COUNTS:
                point[name] += row[name]
        per_minute[row["minute"]][0] += row["streams_opened"]
        per_minute[row["minute"]][1] += row["streams_closed"] + row["streams_gone"]
    _streams_open(points, per_minute, window, route)
    for row in _minutes(RefusalMinute, window, route).values("minute", "count"):
        point = points.get(_floor(row["minute"], window.step))
        if point is not None:
            point["refusals"] += row["count"]
    for model, prefix in PERCENTILES.items():
        histograms: dict[datetime, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for row in _minutes(model, window, route).values("minute", "bucket", "count"):
            histograms[_floor(row["minute"], window.step)][row["bucket"]] += row["count"]
        for time, point in points.items():
            point.update(_named(prefix, percentiles(histograms.get(time, {}))))
    return list(points.values())


def _streams_open(
    points: dict[datetime, dict[str, Any]], per_minute: dict[datetime, list[int]], window: Range, route: str | None
) -> None:
    before = RouteMinute.objects.filter(minute__lt=window.start)
    if route is not None:
        before = before.filter(route=route)
    sums = before.aggregate(opened=Sum("streams_opened"), closed=Sum("streams_closed"), gone=Sum("streams_gone"))
    open_now = (sums["opened"] or 0) - (sums["closed"] or 0) - (sums["gone"] or 0)
    minute, closed_before = window.start.replace(second=0, microsecond=0), 0
    while minute < window.end:
        opened, closed = per_minute.get(minute, (0, 0))
        open_now += opened - closed_before
        closed_before = closed
        point = points.get(_floor(minute, window.step))
        if point is not None:
            point["streams_open"] = max(point["streams_open"], open_now)
        minute += STEPS["minute"]


def totals(window: Range, route: str | None = None) -> dict[str, Any]:
    """The range's sums, its live latency and catch-up age percentiles, and its refusals by reason."""
    sums = _minutes(RouteMinute, window, route).aggregate(**{name: Sum(name) for name in COUNTS})
    found: dict[str, Any] = {name: sums[name] or 0 for name in COUNTS}
    for model, prefix in PERCENTILES.items():
        histogram: dict[int, int] = defaultdict(int)
        for row in _minutes(model, window, route).values("bucket").annotate(n=Sum("count")):
            histogram[row["bucket"]] += row["n"]
        found.update(_named(prefix, percentiles(histogram)))
    reasons = _minutes(RefusalMinute, window, route).values("status", "reason").annotate(n=Sum("count")).order_by("-n")
    found["refusals_by_reason"] = [{"status": r["status"], "reason": r["reason"], "count": r["n"]} for r in reasons]
    found["refusals"] = sum(item["count"] for item in found["refusals_by_reason"])
    return found


def top_routes(window: Range, limit: int = 10) -> list[dict[str, Any]]:
    rows = (
        _minutes(RouteMinute, window, None)
        .values("route")
        .annotate(events=Sum("events"), bytes=Sum("bytes"), streams_opened=Sum("streams_opened"))
        .order_by("-events", "route")[:limit]
    )
    return list(rows)


def route_names(window: Range) -> list[str]:
    return sorted(set(_minutes(RouteMinute, window, None).values_list("route", flat=True)))


def top_identities(window: Range, route: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    rows = (
        _minutes(IdentityMinute, window, route)
        .values("identity")
        .annotate(events=Sum("events"), sessions=Sum("sessions"))
        .order_by("-events", "identity")[:limit]
    )
    return list(rows)


def freshness() -> dict[str, Any]:
    """The last rollup run and the newest minute the rollups hold: how current the numbers are."""
    last = RollupRun.objects.exclude(status=RollupRun.Status.SKIPPED).first()
    newest = RouteMinute.objects.aggregate(newest=Max("minute"))["newest"]
    return {
        "last_run": None
        if last is None
        else {
            "started_at": last.started_at,
            "status": last.status,
            "messages": last.messages,
            "rows_in": last.rows_in,
            "duration_s": last.duration_s,
            "error": last.error.splitlines()[-1] if last.error else "",
        },
        "newest_minute": newest,
    }


def csv_rows(points: Iterable[dict[str, Any]]) -> Iterable[list[Any]]:
    columns = ["time", *COUNTS, "refusals", "streams_open", *PERCENTILE_NAMES]
    yield columns
    for point in points:
        yield [point["time"].isoformat() if column == "time" else point[column] for column in columns]
