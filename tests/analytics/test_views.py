"""The analytics dashboards and API read the rollup tables: known rows give known pages, series and CSV; bad ranges
are clear errors; and in Chromium the overview's chart shows the database's numbers."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page

from analytics.models import CatchupAgeBucket, IdentityMinute, LatencyBucket, RefusalMinute, RollupRun, RouteMinute
from analytics.queries import Range, series
from streams.telemetry.delivery_schema import bucket, bucket_upper_ms
from tests.browser.test_demo import in_browser
from tests.conftest import unique
from tests.support.servers import VAR

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-long-analytics-test-password"


def minute_ago(minutes: int) -> datetime:
    return timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes)


def known_rollups(route: str) -> None:
    """Ten minutes of a route: 600 events a minute, two streams opened at 9 minutes ago, one closed at 5. Of the
    events, 600 were catch-up (a replay 9 minutes ago, about two minutes old)."""
    for ago in range(1, 11):
        catchup = 600 if ago == 9 else 0
        RouteMinute.objects.create(
            route=route, topic="items", minute=minute_ago(ago), events=600, bytes=60_000, writes=60,
            streams_opened=2 if ago == 9 else 0, streams_closed=1 if ago == 5 else 0,
            resumes=1 if ago == 9 else 0, fresh_starts=1 if ago == 9 else 0, catchup_events=catchup,
        )  # fmt: skip
        if catchup:
            CatchupAgeBucket.objects.create(
                route=route, topic="items", minute=minute_ago(ago), bucket=bucket(120_000), count=catchup
            )
            continue
        LatencyBucket.objects.create(route=route, topic="items", minute=minute_ago(ago), bucket=bucket(20), count=570)
        LatencyBucket.objects.create(route=route, topic="items", minute=minute_ago(ago), bucket=bucket(900), count=30)
    RefusalMinute.objects.create(route=route, minute=minute_ago(3), status=401, reason="unauthorized", count=4)
    IdentityMinute.objects.create(route=route, minute=minute_ago(5), identity="abc123", events=3000, sessions=1)
    RollupRun.objects.create(status=RollupRun.Status.DONE, messages=3, finished_at=timezone.now(), duration_s=1.5)


@pytest.fixture
def staff() -> Client:
    user = User.objects.create_user(unique("analyst"), password=PASSWORD, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_route"))  # the API's analytics need it
    client = Client()
    client.force_login(user)
    return client


def test_the_series_counts_streams_open_from_their_intervals() -> None:
    route = unique("r")
    known_rollups(route)
    points = series(Range(minute_ago(12), minute_ago(0)), route)
    open_by_minute = {point["time"]: point["streams_open"] for point in points}
    assert open_by_minute[minute_ago(10)] == 0
    assert open_by_minute[minute_ago(9)] == 2  # both opened
    assert open_by_minute[minute_ago(5)] == 2  # one closes in this minute: it was open during it
    assert open_by_minute[minute_ago(4)] == 1
    assert [point["events"] for point in points if point["events"]] == [600] * 10
    busy = next(point for point in points if point["events"])
    assert busy["p50_ms"] is not None
    assert busy["p50_ms"] < 30  # 95 % of events took about 20 ms...
    assert busy["p99_ms"] > 800  # ...and 5 % about 900 ms
    assert busy["catchup_events"] == 0
    assert busy["catchup_age_p95_ms"] is None
    replay = next(point for point in points if point["time"] == minute_ago(9))
    assert (replay["events"], replay["catchup_events"]) == (600, 600)
    assert replay["p95_ms"] is None  # no live event that minute: no live latency, however old the replay
    assert 120_000 <= replay["catchup_age_p95_ms"] <= 120_000 * 1.19


def test_the_overview_and_route_pages_show_the_rollups(staff: Client) -> None:
    route = unique("r")
    known_rollups(route)
    overview = staff.get("/analytics/?range=1h")
    assert overview.status_code == 200
    page = overview.content.decode()
    assert route in page
    assert 'id="total-events">6000<' in page
    assert 'id="catchup-events">600<' in page
    assert "live p95 latency" in page
    live_p95 = bucket_upper_ms(bucket(20))  # the live events' p95 (with the replay in, it would be 2 minutes)
    assert f'id="live-p95">{live_p95:.0f} ms<' in page
    detail = staff.get(f"/analytics/routes/{route}/?range=1h").content.decode()
    assert "unauthorized" in detail
    assert "abc123" in detail
    assert 'id="total-opened">2<' in detail
    assert 'id="catchup-events">600<' in detail
    assert 'id="catchup-percentiles">' in detail


def test_the_csv_download_has_a_row_per_minute(staff: Client) -> None:
    route = unique("r")
    known_rollups(route)
    response = staff.get(f"/analytics/routes/{route}/?range=1h&format=csv")
    assert response["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert sum(int(row["events"]) for row in rows) == 6000
    assert sum(int(row["catchup_events"]) for row in rows) == 600
    assert {"p95_ms", "catchup_age_p95_ms"} <= rows[0].keys()
    assert len(rows) in {60, 61}


@pytest.mark.parametrize(
    "query",
    [
        "range=2y",
        "from=yesterday",
        "from=2026-01-01T00:00:00Z&to=2025-01-01T00:00:00Z",
        "step=second",
        # At the ends of Python's years these were 500s: shown in the server's zone, a step added, or an offset
        # Postgres refuses.
        "from=0001-01-01T00:00%2B01:00&to=0001-01-02T00:00%2B01:00",
        "from=9999-12-30&to=9999-12-31T23:59:59",
        "from=0001-01-01T00:00-23:59&to=0001-01-01T01:00-23:59",
    ],
)
def test_a_bad_range_is_a_clear_400(staff: Client, query: str) -> None:
    page = staff.get(f"/analytics/?{query}")
    assert page.status_code == 400
    assert 'id="message"' in page.content.decode()
    api = staff.get(f"/api/v1/analytics/routes/x/?{query}")
    assert api.status_code == 400
    assert api.json()["errors"]["range"]


def test_a_route_filter_holding_a_nul_is_a_400(staff: Client) -> None:
    page = staff.get("/analytics/?route=a%00b")  # was a 500: Postgres refuses a NUL in a query
    assert page.status_code == 400
    assert "NUL" in page.content.decode()


def test_the_dashboards_are_for_staff_only() -> None:
    assert Client().get("/analytics/").status_code == 302  # to the admin's login
    assert Client().get("/api/v1/analytics/routes/").status_code == 401


def test_the_api_gives_the_numbers_the_dashboards_show(staff: Client) -> None:
    route = unique("r")
    known_rollups(route)
    listed = staff.get("/api/v1/analytics/routes/?range=1h").json()
    mine = next(item for item in listed if item["route"] == route)
    assert (mine["totals"]["events"], mine["totals"]["refusals"]) == (6000, 4)
    start = minute_ago(10).isoformat()
    end = minute_ago(0).isoformat()
    body = staff.get(f"/api/v1/analytics/routes/{route}/", {"from": start, "to": end, "step": "minute"}).json()
    assert body["totals"]["events"] == 6000
    assert body["totals"]["streams_opened"] == 2
    assert body["totals"]["refusals_by_reason"] == [{"status": 401, "reason": "unauthorized", "count": 4}]
    assert body["totals"]["catchup_events"] == 600
    assert body["totals"]["p95_ms"] == bucket_upper_ms(bucket(20))  # of the live events only
    assert body["totals"]["catchup_age_p95_ms"] >= 120_000
    assert [point["catchup_events"] for point in body["series"]] == [0] * 1 + [600] + [0] * 8
    assert len(body["series"]) == 10
    assert [point["events"] for point in body["series"]] == [600] * 10
    hourly = staff.get(f"/api/v1/analytics/routes/{route}/?range=24h&step=hour").json()
    assert sum(point["events"] for point in hourly["series"]) == 6000
    schema = staff.get("/api/v1/schema/?format=json").json()
    assert "/api/v1/analytics/routes/{name}/" in schema["paths"]


@pytest.mark.browser
def test_the_overview_chart_shows_the_databases_numbers(daphne_url: str) -> None:
    route = unique("r")
    known_rollups(route)
    name = unique("analyst")
    User.objects.create_user(name, password=PASSWORD, is_staff=True)
    screenshot = VAR / "test-analytics-overview.png"

    def scenario(page: Page) -> tuple[float, str, int]:
        page.goto(f"{daphne_url}/admin/login/?next=/analytics/%3Froute%3D{route}%26range%3D1h")
        page.fill("#id_username", name)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_selector("#events-chart .main-svg", timeout=15_000)
        per_second = page.evaluate(
            "document.getElementById('events-chart').data[0].y.reduce((a, b) => a + (b || 0), 0)"
        )
        page.screenshot(path=str(screenshot), full_page=True)
        return per_second, page.inner_text("#total-events"), len(page.query_selector_all(".chart.js-plotly-plot"))

    per_second, total, charts = in_browser(scenario)
    database = sum(RouteMinute.objects.filter(route=route).values_list("events", flat=True))
    assert per_second * 60 == pytest.approx(database) == 6000  # the chart plots events/s per minute
    assert total == "6000"
    assert charts == 5
    image = Path(screenshot).read_bytes()
    assert image[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(image) > 20_000  # a page with five drawn charts, not a blank one
