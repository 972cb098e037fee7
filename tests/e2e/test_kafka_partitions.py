"""Partitions added to a topic while streams read it (docs/contract.md §4), against a live server and Apache Kafka.

Open streams begin reading the new partitions within seconds (the hub's topic watch describes the topics with
streams every 2 s) and their ids name them from then on; a client resuming with an id from before the partitions
existed reads them from their start, on a `live` route too. Each client gets every record once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from django.conf import settings

from bindings.selectors import START_LIVE
from streams.codecs.event_id import OFFSET_EARLIEST, parse_id
from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.support.sse_client import Event, EventStream

pytestmark = pytest.mark.django_db(transaction=True)
GROWN_S = 10.0  # open streams read a new partition's first record within this of its creation (measured 1.5-1.9 s)


def add_partitions(topic: str, total: int, producer: Producer) -> None:
    """Grow `topic` to `total` partitions; return once Kafka describes them and the producer knows them too."""
    admin = AdminClient(settings.KAFKA.admin_config())
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=10)

    def known() -> bool:
        return len(producer.list_topics(topic, timeout=5).topics[topic].partitions) == total

    wait_until(known, timeout=10)


def progress(event: Event) -> dict[int, int]:
    assert event.id is not None
    found = parse_id(event.id)
    assert found is not None, event.id
    return found


def read(stream: EventStream, count: int, timeout: float = 10.0) -> list[Event]:
    return [stream.next_event(timeout) for _ in range(count)]


def test_open_streams_read_partitions_added_to_their_topic_and_resumes_read_them_from_the_start(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce, producer: Producer
) -> None:
    topic = new_topic(partitions=2)
    historical, live = daphne_url + route(topic), daphne_url + route(topic, start=START_LIVE)
    produce(topic, b"a0", partition=0)
    produce(topic, b"a1", partition=1)
    with EventStream(historical) as first, EventStream(live) as from_the_end:
        before = read(first, 2)
        assert sorted(event.text for event in before) == ["a0", "a1"]
        assert progress(before[-1]) == {0: 1, 1: 1}
        old_id = before[-1].id  # a resume id from before the topic grew
        produce(topic, b"a1 live", partition=1)
        assert [event.text for event in read(from_the_end, 1)] == ["a1 live"]
        later_id = read(first, 1)[0].id  # {0: 1, 1: 2}, from before the topic grew too

        add_partitions(topic, 4, producer)
        grown_at = time.monotonic()
        produce(topic, b"b2", partition=2)
        got = first.next_event(GROWN_S)
        within = time.monotonic() - grown_at
        assert got.text == "b2"
        assert within <= GROWN_S
        assert progress(got) == {0: 1, 1: 2, 2: 1, 3: OFFSET_EARLIEST}  # the ids name the new partitions
        got_live = from_the_end.next_event(GROWN_S)
        assert got_live.text == "b2"
        assert progress(got_live) == {0: 1, 1: 2, 2: 1, 3: OFFSET_EARLIEST}

        produce(topic, b"c0", partition=0)
        produce(topic, b"d3", partition=3)
        after = read(first, 2)
        assert sorted(event.text for event in after) == ["c0", "d3"]
        assert progress(after[-1]) == {0: 2, 1: 2, 2: 1, 3: 1}
        assert sorted(event.text for event in read(from_the_end, 2)) == ["c0", "d3"]

    # Resumed with ids that do not list partitions 2 and 3: those are read from their start, and nothing else
    # is repeated. On a live route as well, whose fresh streams start each partition at its end.
    assert old_id is not None
    assert later_id is not None
    with (
        EventStream(historical, headers={"Last-Event-ID": old_id}) as resumed,
        EventStream(live, headers={"Last-Event-ID": later_id}) as resumed_live,
    ):
        for stream, expected in ((resumed, ["a1 live", "b2", "c0", "d3"]), (resumed_live, ["b2", "c0", "d3"])):
            events = read(stream, len(expected))
            assert sorted(event.text for event in events) == expected
            assert progress(events[-1]) == {0: 2, 1: 2, 2: 1, 3: 1}
        produce(topic, b"e2", partition=2)
        assert resumed.next_event().text == "e2"  # and nothing before it: every record once
        assert resumed_live.next_event().text == "e2"
