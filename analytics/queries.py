"""What the dashboards and the analytics API show, read from the rollup tables only (so they work while Spark is
down). A range is [start, end) in whole minutes; a series has one point per minute or hour, zeros included.

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

from analytics.models import IdentityMinute, LatencyBucket, RefusalMinute, RollupRun, RouteMinute
from analytics.percentiles import percentiles

STEPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1)}
COUNTS = (
    "events",
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
    histograms: dict[datetime, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for row in _minutes(LatencyBucket, window, route).values("minute", "bucket", "count"):
        histograms[_floor(row["minute"], window.step)][row["bucket"]] += row["count"]
    for time, point in points.items():
        found = percentiles(histograms.get(time, {}))
        point.update(p50_ms=found[0.5], p95_ms=found[0.95], p99_ms=found[0.99])
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
    """The range's sums, its latency percentiles and its refusals by reason."""
    sums = _minutes(RouteMinute, window, route).aggregate(**{name: Sum(name) for name in COUNTS})
    found: dict[str, Any] = {name: sums[name] or 0 for name in COUNTS}
    histogram: dict[int, int] = defaultdict(int)
    for row in _minutes(LatencyBucket, window, route).values("bucket").annotate(n=Sum("count")):
        histogram[row["bucket"]] += row["n"]
    found.update({f"p{int(q * 100)}_ms": value for q, value in percentiles(histogram).items()})
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
    columns = ["time", *COUNTS, "refusals", "streams_open", "p50_ms", "p95_ms", "p99_ms"]
    yield columns
    for point in points:
        yield [point["time"].isoformat() if column == "time" else point[column] for column in columns]
