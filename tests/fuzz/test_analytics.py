"""Hostile time ranges on the analytics dashboards and API (docs/analytics.md): any `from`/`to` at any offset across
Python's whole calendar, any `range`, `step`, `route` and `format`. A page or an answer, or a 400; never a 500."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import example, given
from hypothesis import strategies as st

from tests.support.fuzz import REQUESTS

pytestmark = pytest.mark.django_db

offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
    lambda minutes: datetime.timezone(datetime.timedelta(minutes=minutes))
)
instants = st.one_of(
    st.datetimes(timezones=st.one_of(st.none(), offsets)).map(lambda moment: moment.isoformat()),
    st.sampled_from(["0001-01-01T00:00+01:00", "9999-12-31T23:59:59.999999-23:59", "2026-11-22T10:00:00Z", ""]),
    st.text(max_size=12),
)
queries = st.fixed_dictionaries(
    {},
    optional={
        "from": instants,
        "to": instants,
        "range": st.one_of(st.sampled_from(["1h", "24h", "7d", "", "2y"]), st.text(max_size=4)),
        "step": st.one_of(st.sampled_from(["minute", "hour", ""]), st.text(max_size=4)),
        "route": st.one_of(st.just("a\x00b"), st.text(max_size=8)),
        "format": st.sampled_from(["csv", "json", "yaml", "\x00"]),
    },
)


@pytest.fixture
def staff(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("fuzz", "fuzz@example.com", "a-long-test-password"))
    return client


@REQUESTS
@given(
    url=st.sampled_from(
        ["/analytics/", "/analytics/routes/x/", "/api/v1/analytics/routes/", "/api/v1/analytics/routes/x/"]
    ),
    query=queries,
)
@example(url="/analytics/", query={"from": "0001-01-01T00:00+01:00", "to": "0001-01-02T00:00+01:00"})
@example(url="/api/v1/analytics/routes/", query={"from": "0001-01-01T00:00-23:59", "to": "0001-01-01T01:00-23:59"})
@example(url="/api/v1/analytics/routes/x/", query={"from": "9999-12-30", "to": "9999-12-31T23:59:59.999999"})
@example(url="/analytics/", query={"route": "a\x00b"})
def test_any_range_is_a_page_or_a_400(staff: Client, url: str, query: dict[str, str]) -> None:
    response = staff.get(url, query)
    assert response.status_code < 500, response.content[:300]
    assert response.status_code in {200, 400, 404, 406}, response.status_code
