"""Beyond Zilla, end to end (docs/contract.md §5, §7): live start, since, compaction, reset, caught-up, value
filters, CORS."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import httpx
import pytest

from bindings.services import do_put_endpoint
from streams.codecs.event_id import encode_progress
from tests.e2e.test_zilla_scenarios import Produce, route, stream
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_live_route_starts_at_the_end(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic()
    produce(topic, b"old")
    with stream(daphne_url + route(topic, start="live")) as s:
        s.next_block()  # retry: subscribed
        produce(topic, b"new")
        event = s.next_event()
    assert (event.text, event.id) == ("new", encode_progress({0: 2}))


def test_a_bad_since_is_a_400_naming_the_value(daphne_url: str, new_topic: Callable[..., str]) -> None:
    response = httpx.get(f"{daphne_url}{route(new_topic())}?since=yesterday", timeout=5)
    assert response.status_code == 400
    assert "since='yesterday'" in response.json()["detail"]


def test_since_streams_from_the_broker_answer(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    # A time before every record starts at the first; times between records and after the last, on several
    # partitions: tests/e2e/test_kafka_contract.py.
    topic = new_topic()
    produce(topic, b"a")
    with stream(f"{daphne_url}{route(topic)}?since=2020-01-01T00:00:00Z") as s:
        assert s.next_event().text == "a"


def test_a_compacted_topic_gives_a_new_subscriber_the_latest_per_key_then_live_updates(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(partitions=2, config={"cleanup.policy": "compact"})
    for version in range(3):
        for key in range(100):
            produce(topic, f"{key}:v{version}".encode(), key=f"k{key}".encode(), partition=key % 2)
    for key in range(10):
        produce(topic, None, key=f"k{key}".encode(), partition=key % 2)
    with stream(daphne_url + route(topic)) as s:
        snapshot = s.events(100)
        produce(topic, b"5:v3", key=b"k5", partition=1)
        produce(topic, b"50:v3", key=b"k50", partition=0)
        live = s.events(2)
    values = sorted(e.text for e in snapshot if e.event is None)
    deletes = sorted(e.text for e in snapshot if e.event == "delete")
    assert values == sorted(f"{key}:v2" for key in range(10, 100))
    assert deletes == sorted(base64.urlsafe_b64encode(f"k{key}".encode()).decode() for key in range(10))
    assert sorted(e.text for e in live) == sorted(["5:v3", "50:v3"])


def test_a_resume_past_what_the_partition_holds_sends_reset_then_replays(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    # A resume past the end (the topic was re-created) gets the reset of a resume below the log start, which
    # tests/e2e/test_kafka_contract.py shows after records are deleted and after retention.
    topic = new_topic()
    produce(topic, b"a")
    with stream(daphne_url + route(topic), **{"Last-Event-ID": encode_progress({0: 999})}) as s:
        reset, first = s.events(2)
    assert reset.event == "reset"
    assert json.loads(reset.text) == {"partitions": [{"partition": 0, "requested": 999, "earliest": 0}]}
    assert reset.id == encode_progress({0: 0})
    assert (first.text, first.id) == ("a", encode_progress({0: 1}))


def test_caught_up_marks_the_end_of_history(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic(partitions=2)
    produce(topic, b"h1", partition=0)
    produce(topic, b"h2", partition=1)
    with stream(daphne_url + route(topic, caught_up=True)) as s:
        history = s.events(3)
        produce(topic, b"live", partition=0)
        live = s.next_event()
    assert sorted(e.text for e in history[:2]) == ["h1", "h2"]
    assert (history[2].event, history[2].id) == ("caught-up", "AQQAAgIC")
    assert (live.event, live.text) == (None, "live")


def test_caught_up_is_opt_in(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic()
    produce(topic, b"h1")
    with stream(daphne_url + route(topic)) as s:
        assert s.next_event().text == "h1"
        produce(topic, b"live")
        assert s.next_event().text == "live"


def test_value_filters_stream_only_matching_json(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for item in ({"id": 1, "status": "open"}, {"id": 2, "status": "closed"}, {"id": 3, "status": "open"}):
        produce(topic, json.dumps(item).encode())
    produce(topic, b"not json")
    prefix = route(topic, "/{status}", filters=[{"value": {"path": "status", "equals": "${params.status}"}}])
    with stream(f"{daphne_url}{prefix}/open") as s:
        assert [json.loads(e.text)["id"] for e in s.events(2)] == [1, 3]
        produce(topic, json.dumps({"id": 4, "status": "open"}).encode())
        assert json.loads(s.next_event().text)["id"] == 4


def test_cors_allows_configured_origins_only(daphne_url: str, new_topic: Callable[..., str]) -> None:
    do_put_endpoint(name="cors", cors_origins=["https://app.example.com"], cors_credentials=True)
    url = daphne_url + route(new_topic(), endpoint="cors")
    with EventStream(url, headers={"Origin": "https://app.example.com"}) as s:
        assert s.response.headers["access-control-allow-origin"] == "https://app.example.com"
        assert s.response.headers["access-control-allow-credentials"] == "true"
    with EventStream(url, headers={"Origin": "https://evil.example.com"}) as s:
        assert "access-control-allow-origin" not in s.response.headers
    preflight = httpx.options(
        url,
        headers={
            "Origin": "https://app.example.com",
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "last-event-id",
        },
        timeout=5,
    )
    assert preflight.status_code == 204
    # POST: a browser answers a guard's challenge with a POST to the stream's path.
    assert preflight.headers["access-control-allow-methods"] == "GET, HEAD, OPTIONS, POST"
    assert preflight.headers["access-control-allow-headers"] == "last-event-id"


def test_head_answers_the_headers_only(daphne_url: str, new_topic: Callable[..., str]) -> None:
    response = httpx.head(daphne_url + route(new_topic()), timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
