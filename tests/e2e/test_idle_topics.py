"""Streams opened on a topic that went idle and was evicted from the process's cache get what the topic holds
and what is produced next, over HTTP against a live server whose topics are evicted after one idle second.

Before the fix a topic came back paused in the consumer (librdkafka keeps a pause across unassign and assign),
so the first streams after an eviction received only keep-alives, forever.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka.admin import AdminClient
from django.conf import settings

from bindings.selectors import START_LIVE
from streams.kafka.admin import ensure_topic
from tests.conftest import health, unique, wait_until
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.support.servers import DaphneServer, start_daphne
from tests.support.sse_client import Event, EventStream

pytestmark = pytest.mark.django_db(transaction=True)
FIRST_EVENT_S = 5.0  # a stranded stream never gets one; a working one within tens of ms


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: object) -> Iterator[DaphneServer]:
    started = start_daphne({"SSE_TOPIC_IDLE_S": "1", "SSE_STALL_NOTICE_S": "1"}, log_name=unique("test-daphne-idle"))
    yield started
    started.stop()


def read_then_leave(server: DaphneServer, path: str, count: int = 1) -> list[Event]:
    """A first client reads `count` events and leaves; then the topic idles until the process evicts it."""
    with EventStream(server.url + path) as first:
        events = first.events(count)
    wait_until(lambda: health(server.url)["cached_topics"] == 0, timeout=10)
    assert health(server.url)["fetch_streams"] == 0
    return events


def test_a_historical_stream_after_eviction_gets_the_history_then_live(
    server: DaphneServer, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    path = route(topic)
    produce(topic, b"one")
    read_then_leave(server, path)
    with EventStream(server.url + path) as again:
        assert again.next_event(FIRST_EVENT_S).text == "one"
        produce(topic, b"two")
        assert again.next_event(FIRST_EVENT_S).text == "two"
    assert health(server.url)["stalls_noticed"] == 0


def test_a_live_stream_after_eviction_gets_what_is_produced_next(
    server: DaphneServer, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    path = route(topic, start=START_LIVE)
    with EventStream(server.url + path) as first:
        produce(topic, b"one")
        assert first.next_event().text == "one"
    wait_until(lambda: health(server.url)["cached_topics"] == 0, timeout=10)
    with EventStream(server.url + path) as again:
        wait_until(lambda: health(server.url)["streams"] == 1)
        produce(topic, b"two")
        assert again.next_event(FIRST_EVENT_S).text == "two"


def test_a_resumed_stream_after_eviction_continues_where_it_left(
    server: DaphneServer, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(partitions=2)
    path = route(topic)
    produce(topic, b"one", partition=0)
    produce(topic, b"two", partition=1)
    seen = read_then_leave(server, path, count=2)
    produce(topic, b"three", partition=1)
    with EventStream(server.url + path, headers={"Last-Event-ID": seen[-1].id or ""}) as resumed:
        assert resumed.next_event(FIRST_EVENT_S).text == "three"
        produce(topic, b"four", partition=0)
        assert resumed.next_event(FIRST_EVENT_S).text == "four"


def test_a_filtered_stream_after_eviction_gets_its_matches(
    server: DaphneServer, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    prefix = route(topic, "/{key}", filters=[{"key": "${params.key}"}])
    produce(topic, b"mine", key=b"k1")
    read_then_leave(server, prefix + "/k1")
    with EventStream(server.url + prefix + "/k1") as again:
        assert again.next_event(FIRST_EVENT_S).text == "mine"
        produce(topic, b"theirs", key=b"k2")
        produce(topic, b"mine again", key=b"k1")
        assert again.next_event(FIRST_EVENT_S).text == "mine again"


def test_eight_streams_opened_at_once_after_eviction_all_receive(
    server: DaphneServer, new_topic: Callable[..., str], produce: Produce
) -> None:
    """As on the demo: four on a historical route, four on a live route to the same topic, opened together."""
    topic = new_topic(partitions=2)
    historical, live = route(topic), route(topic, start=START_LIVE)
    produce(topic, b"old", partition=0)
    read_then_leave(server, historical)

    def first_new_event(path: str) -> str:
        with EventStream(server.url + path) as stream:
            while True:
                event = stream.next_event(FIRST_EVENT_S * 2)
                if event.text != "old":
                    return event.text

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(first_new_event, path) for path in [historical] * 4 + [live] * 4]
        wait_until(lambda: health(server.url)["streams"] == 8, timeout=10)
        produce(topic, b"new", partition=1)
        assert [future.result() for future in futures] == ["new"] * 8
    assert health(server.url)["stalls_noticed"] == 0


def test_a_topic_deleted_and_created_again_while_evicted_is_read_afresh(
    server: DaphneServer, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    path = route(topic)
    for value in (b"old 1", b"old 2", b"old 3"):
        produce(topic, value)
    read_then_leave(server, path, count=3)
    admin = AdminClient(settings.KAFKA.admin_config())
    admin.delete_topics([topic])[topic].result(timeout=10)
    wait_until(lambda: topic not in admin.list_topics(timeout=5).topics, timeout=10)
    ensure_topic(settings.KAFKA, topic)
    produce(topic, b"new 1")
    with EventStream(server.url + path) as again:
        assert again.next_event(FIRST_EVENT_S).text == "new 1"
        produce(topic, b"new 2")
        assert again.next_event(FIRST_EVENT_S).text == "new 2"
