"""A Kafka topic deleted while streams read it, against a live server and the real broker (Apache Kafka).

The fetcher's consumer has its partitions assigned, in no group: librdkafka keeps Kafka's answers to a fetch of
a deleted topic (`UNKNOWN_TOPIC_OR_PART`, then `UNKNOWN_TOPIC_ID`) to itself and waits for the topic to come
back, so no error ever reaches the platform. The hub's topic watch (streams/hub/topic_watch.py) describes the topics
with streams every few seconds and drops one that is gone: its streams end, a new request for it is a 404, and
every other stream goes on with nothing lost or repeated, in a worker that keeps its pid. Twice, with the topic
created again in between, whose new streams read the new topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from django.conf import settings

from streams.kafka.admin import ensure_topic
from tests.conftest import health, unique, wait_until
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.support.servers import DaphneServer, start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)
END_S = 10.0  # the deleted topic's stream ends within this: the topic watch looks every 2 s (measured 1.2-1.5 s)


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: object) -> Iterator[DaphneServer]:
    started = start_daphne({}, log_name=unique("test-daphne-topic-deletion"))
    yield started
    started.stop()


def delete(topic: str) -> None:
    admin = AdminClient(settings.KAFKA.admin_config())
    admin.delete_topics([topic])[topic].result(timeout=10)

    def gone() -> bool:
        found = admin.list_topics(timeout=5).topics.get(topic)
        return found is None or found.error is not None

    wait_until(gone, timeout=10)


def ends(stream: EventStream) -> list[str]:
    """The events the server sends until it ends the response; fails unless it ends within END_S."""
    events = []
    deadline = time.monotonic() + END_S
    try:
        while True:
            events.append(stream.next_event(max(0.01, deadline - time.monotonic())).text)
    except StopIteration:
        return events
    except (TimeoutError, httpx.ReadTimeout):
        pytest.fail(f"the deleted topic's stream did not end within {END_S} s")


def test_a_deleted_topic_ends_its_streams_and_spares_the_worker_and_the_others(
    server: DaphneServer, new_topic: Callable[..., str], produce: Produce
) -> None:
    pid = server.process.pid
    kept = new_topic(partitions=2)
    doomed = unique("t-doomed")
    kept_path, doomed_path = route(kept), route(doomed)
    produced: list[str] = []

    def produce_kept(label: str) -> None:
        for partition in (0, 1):
            value = f"{label}-p{partition}"
            produce(kept, value.encode(), partition=partition)
            produced.append(value)

    with EventStream(server.url + kept_path) as other:
        received: list[str] = []
        produce_kept("before")
        received += [other.next_event().text for _ in range(2)]
        try:
            for round_ in range(2):  # created, deleted, created again under the same name, deleted again
                ensure_topic(settings.KAFKA, doomed, partitions=2)
                produce(doomed, f"doomed {round_}".encode())
                with EventStream(server.url + doomed_path) as reading:
                    assert reading.next_event().text == f"doomed {round_}"
                    wait_until(lambda: health(server.url)["fetch_streams"] == 4)
                    delete(doomed)
                    assert ends(reading) == []

                assert server.process.poll() is None, "the web worker died"
                assert server.process.pid == pid
                answer = httpx.get(server.url + doomed_path, timeout=10)
                assert answer.status_code == 404
                assert answer.headers["content-type"] == "application/problem+json"
                assert answer.json()["title"] == "Unknown topic"
                assert answer.json()["topic"] == doomed

                produce_kept(f"after deletion {round_}")
                received += [other.next_event(END_S).text for _ in range(2)]
        finally:
            if doomed in AdminClient(settings.KAFKA.admin_config()).list_topics(timeout=5).topics:
                delete(doomed)
        produce_kept("last")
        received += [other.next_event(END_S).text for _ in range(2)]

    by_partition = {p: [value for value in received if value.endswith(f"-p{p}")] for p in (0, 1)}
    assert by_partition == {p: [value for value in produced if value.endswith(f"-p{p}")] for p in (0, 1)}
    assert len(received) == len(produced)  # nothing lost, nothing repeated
    assert health(server.url)["topics_deleted"] == 2
    wait_until(lambda: health(server.url)["fetch_streams"] == 0)


def test_the_platforms_clients_never_create_a_topic_by_naming_it(new_topic: Callable[..., str]) -> None:
    """The broker of the tests creates topics on demand (Apache Kafka's default), as many do: a client that names
    a topic must not bring it back after its deletion, nor create one a stream asked for."""
    absent, deleted = unique("t-never"), new_topic()
    delete(deleted)
    producer = Producer({**settings.KAFKA.producer_config(), "message.timeout.ms": 2000})
    admin = AdminClient(settings.KAFKA.admin_config())
    for name in (absent, deleted):
        producer.list_topics(name, timeout=5)
        admin.list_topics(name, timeout=5)
        producer.produce(name, b"x")
    producer.flush(3)
    time.sleep(1)  # a creation would have been done by now; nothing to poll for when nothing should happen
    topics = admin.list_topics(timeout=5).topics
    assert absent not in topics
    assert deleted not in topics
