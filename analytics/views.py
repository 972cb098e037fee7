"""The analytics dashboards (`/analytics/`, staff only): an overview and a page per route, each with a time range,
a route filter, auto-refresh and a CSV download. They read the rollup tables only (analytics/queries.py)."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils import timezone

from analytics import queries

RANGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}
DEFAULT_RANGE = "1h"
REFRESH_S = 60
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)  # what `from` and `to` may be


class BadRange(ValueError):
    """A time range that cannot be read; its message says why."""


def parse_range(params: Any, *, now: datetime | None = None) -> tuple[queries.Range, str]:
    """(range, its name) from `?range=1h|24h|7d` or `?from=&to=` (ISO 8601), and `?step=minute|hour` (default:
    minutes up to six hours, hours beyond)."""
    now = (now or timezone.now()).replace(second=0, microsecond=0) + timedelta(minutes=1)
    given_from, given_to = params.get("from"), params.get("to")
    if given_from or given_to:
        start, end = _instant("from", given_from, now - RANGES["24h"]), _instant("to", given_to, now)
        name = "custom"
    else:
        name = params.get("range") or DEFAULT_RANGE
        if name not in RANGES:
            raise BadRange(f"range is one of {', '.join(RANGES)}, or give from and to; not {name!r}")
        start, end = now - RANGES[name], now
    if end - start > timedelta(days=92):
        raise BadRange("a range spans at most 92 days")
    step = params.get("step") or ("minute" if end - start <= timedelta(hours=6) else "hour")
    try:
        return queries.Range(start, end, step), name
    except ValueError as exc:
        raise BadRange(str(exc)) from None


def _instant(name: str, value: str | None, default: datetime) -> datetime:
    if not value:
        return default
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        # In UTC, as Postgres compares it; a time at the ends of Python's years overflows here, not later.
        moment = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise BadRange(f"{name} is an ISO 8601 time, e.g. 2026-11-22T10:00:00Z; not {value!r}") from None
    if not EARLIEST <= moment <= LATEST:
        # Past these, a step added or a time shown in the server's zone overflows Python's year 9999 (a 500).
        raise BadRange(f"{name} is a time between {EARLIEST:%Y} and {LATEST:%Y}; not {value!r}")
    return moment


def _csv(points: list[dict[str, Any]], filename: str) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
    writer = csv.writer(response)
    for row in queries.csv_rows(points):
        writer.writerow(row)
    return response


def _page(request: HttpRequest, template: str, route: str | None) -> HttpResponse:
    try:
        window, range_name = parse_range(request.GET)
    except BadRange as exc:
        return render(request, "analytics/bad_range.html", {"message": str(exc)}, status=400)
    points = queries.series(window, route)
    if request.GET.get("format") == "csv":
        return _csv(points, f"analytics-{route or 'all'}-{window.start:%Y%m%dT%H%M}")
    on_route_page = template.endswith("route.html")
    context = {
        "route": route,
        "routes": queries.route_names(window),
        "window": window,
        "range_name": range_name,
        "ranges": list(RANGES),
        "totals": queries.totals(window, route),
        "top_routes": [] if on_route_page else queries.top_routes(window),  # the overview's table only
        "route_page": on_route_page,
        "top_identities": queries.top_identities(window, route),
        "freshness": queries.freshness(),
        "series": points,
        "refresh_s": REFRESH_S,
        "query": request.GET.urlencode(),
    }
    return render(request, template, context)


@staff_member_required
def overview(request: HttpRequest) -> HttpResponse:
    route = request.GET.get("route") or None
    if route is not None and "\x00" in route:  # Postgres refuses it in a query (a 500); no route name has one
        return HttpResponseBadRequest(
            "route is a route's name, which holds no NUL character.", content_type="text/plain"
        )
    return _page(request, "analytics/overview.html", route)


@staff_member_required
def route_page(request: HttpRequest, name: str) -> HttpResponse:
    return _page(request, "analytics/route.html", name)
