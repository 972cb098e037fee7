"""The thin data path over HTTP: a live daphne, the real broker, Postgres routes."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from bindings.services import do_put_route
from streams.codecs.event_id import OFFSET_EARLIEST, encode_progress
from tests.conftest import health, unique, wait_until
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


def route_to(topic: str) -> str:
    path = "/" + unique("s")
    do_put_route(name=path[1:], path=path, topic=topic)
    return path


def test_it_streams_a_two_partition_topic_with_zilla_ids(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic(partitions=2)
    sent = {b"m1": produce(topic, b"m1", partition=0), b"m2": produce(topic, b"m2", partition=1)}
    sent[b"m3"] = produce(topic, b"m3", partition=0)
    assert sent == {b"m1": (0, 0), b"m2": (1, 0), b"m3": (0, 1)}
    path = route_to(topic)

    with EventStream(daphne_url + path) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"] == "text/event-stream"
        assert stream.response.headers["cache-control"] == "no-cache"
        assert stream.next_block().retry == 2000
        events = stream.events(3)

    # Each id is the progress after that event: every partition, next offset to read, -2 before any.
    progress = {0: OFFSET_EARLIEST, 1: OFFSET_EARLIEST}
    for event in events:
        partition, offset = sent[event.text.encode()]
        progress[partition] = offset + 1
        assert event.id == encode_progress(progress)
    assert [e.text for e in events if e.text != "m2"] == ["m1", "m3"]  # partition order kept
    assert events[-1].id == "AQQABAIC"  # Zilla's vector for {0:2, 1:1}


def test_it_resumes_after_the_second_event_with_only_the_third(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic(partitions=2)
    for value, partition in ((b"m1", 0), (b"m2", 1), (b"m3", 0)):
        produce(topic, value, partition=partition)
    path = route_to(topic)
    with EventStream(daphne_url + path) as stream:
        events = stream.events(3)

    with EventStream(daphne_url + path, headers={"Last-Event-ID": events[1].id or ""}) as resumed:
        assert resumed.next_event().text == events[2].text
        # A sentinel produced now must be the very next event: nothing else was replayed in between.
        produce(topic, b"m4", partition=1)
        fourth = resumed.next_event()
        assert fourth.text == "m4"
        assert fourth.id == encode_progress({0: 2, 1: 2})


def test_it_resumes_from_the_last_event_id_query_parameter(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic(partitions=1)
    for value in (b"a", b"b"):
        produce(topic, value)
    path = route_to(topic)
    with EventStream(f"{daphne_url}{path}?lastEventId={encode_progress({0: 1})}") as stream:
        assert stream.next_event().text == "b"


def test_it_answers_404_with_a_problem_for_an_unknown_path(daphne_url: str) -> None:
    response = httpx.get(f"{daphne_url}/{unique('nowhere')}", timeout=5)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["title"] == "No route"


def test_a_disconnect_ends_the_stream_task_and_frees_its_subscription(
    daphne_url: str, new_topic: Callable[..., str]
) -> None:
    path = route_to(new_topic(partitions=3))
    before = health(daphne_url)
    stream = EventStream(daphne_url + path)
    stream.next_block()  # the retry line: the stream is running
    during = health(daphne_url)
    assert during["streams"] == before["streams"] + 1
    assert during["subscriptions"] == before["subscriptions"] + 1
    assert during["fetch_streams"] == before["fetch_streams"] + 3
    stream.close()
    # The task ends, the subscription goes, and nobody reading the topic any more, its partitions are paused.
    wait_until(lambda: health(daphne_url)["streams"] == before["streams"], timeout=5)
    after = health(daphne_url)
    assert after["subscriptions"] == before["subscriptions"]
    assert after["fetch_streams"] == before["fetch_streams"]


def test_a_changed_route_takes_effect_for_new_streams_without_a_restart(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    first, second = new_topic(), new_topic()
    produce(first, b"from the first topic")
    produce(second, b"from the second topic")
    path = route_to(first)
    with EventStream(daphne_url + path) as stream:
        assert stream.next_event().text == "from the first topic"
    reloads = health(daphne_url)["route_reloads"]
    do_put_route(name=path[1:], path=path, topic=second)  # the path still matches: only the announcement tells

    def streams_the_second() -> bool:
        with EventStream(daphne_url + path) as stream:
            return stream.next_event().text == "from the second topic"

    wait_until(streams_the_second, timeout=2)
    assert health(daphne_url)["route_reloads"] > reloads


@pytest.mark.parametrize("segment", ["%2E", "%2E%2E"])
def test_a_topic_name_kafka_forbids_is_a_404_at_once(daphne_url: str, segment: str) -> None:
    """`.` and `..` fit Kafka's character set but not its rules: refused before asking the broker (slow)."""
    name = unique("dots")
    do_put_route(name=name, path=f"/{name}/{{t}}", topic="${params.t}")
    started = time.monotonic()
    response = httpx.get(f"{daphne_url}/{name}/{segment}", timeout=10)
    assert time.monotonic() - started < 2
    assert response.status_code == 404
    assert response.json()["title"] == "Unknown topic"
    assert response.json()["topic"] in {".", ".."}
