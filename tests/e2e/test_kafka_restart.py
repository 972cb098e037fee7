"""`make run` stopped and started again: a client resumes across the restart with nothing lost or repeated.

A one-node Apache Kafka of the test's own, its data on disk, and daphne serving the platform on it. The client
reads part of what was produced; then daphne and Kafka stop as `make run` stops them (SIGTERM: Kafka shuts down
cleanly and keeps its log), both start again on the same data and port, more is produced, and the client
resumes with the id of the last event it got: it receives every other record, each once, in partition order.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import Producer

from config.kafka_settings import KafkaSettings
from streams.kafka.admin import ensure_topic
from tests.conftest import unique
from tests.e2e.test_zilla_scenarios import route
from tests.support.servers import KafkaCluster, kafka_cluster, start_daphne
from tests.support.sse_client import Event, EventStream

pytestmark = pytest.mark.django_db(transaction=True)
PARTITIONS = 2


@pytest.fixture
def cluster() -> Iterator[KafkaCluster]:
    started = kafka_cluster(unique("test-kafka-restart"))
    try:
        yield started
    finally:
        started.stop()


def produce(producer: Producer, topic: str, values: list[str]) -> None:
    """One record per value, to partition `index % PARTITIONS` of its index, each acknowledged before the next."""
    reports: list[object] = []
    for index, value in enumerate(values):
        producer.produce(
            topic, value.encode(), partition=index % PARTITIONS, on_delivery=lambda e, _: reports.append(e)
        )
        producer.flush(10)
    assert reports == [None] * len(values), reports


def read_until_closed(stream: EventStream) -> list[Event]:
    """What arrives until the server closes the response (it stops)."""
    events = []
    try:
        while True:
            events.append(stream.next_event(30))
    except (StopIteration, httpx.RemoteProtocolError, httpx.ReadError):
        return events


def in_partition_order(values: list[str], produced: list[str]) -> bool:
    """`values` keep the order they were produced in within each partition."""
    for partition in range(PARTITIONS):
        mine = [value for value in values if produced.index(value) % PARTITIONS == partition]
        if mine != sorted(mine, key=produced.index):
            return False
    return True


def test_a_client_resumes_across_a_restart_of_the_web_server_and_kafka_with_nothing_lost(
    cluster: KafkaCluster,
) -> None:
    kafka = KafkaSettings(bootstrap_servers=cluster.bootstrap)
    topic = unique("t-restart")
    ensure_topic(kafka, topic, partitions=PARTITIONS)
    path = route(topic)
    environment = {"KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap}
    producer = Producer({**kafka.producer_config(), "linger.ms": 1})
    before, after = [f"before {n}" for n in range(8)], [f"after {n}" for n in range(8)]
    ends = [f"end {partition}" for partition in range(PARTITIONS)]  # one last record in each partition
    produced = [*before, *after]
    produce(producer, topic, before)

    server = start_daphne(environment, log_name=unique("test-daphne-restart"))
    try:
        with EventStream(server.url + path) as stream:
            events = stream.events(5)  # the client handles these; the rest of `before` is still on its way
            server.stop()  # as make run's Ctrl-C: SIGTERM
            read_until_closed(stream)  # the rest: lost with the connection, as far as the client knows
        received = [event.text for event in events]
        last_id = events[-1].id
        assert last_id is not None
        cluster.kill(1, signal.SIGTERM)  # Kafka's controlled shutdown, as `make run` stops it

        cluster.start(1)  # the same node: its data directory, its port
        # Started while Kafka still starts (its JVM takes seconds): the web server does not need it to start.
        server = start_daphne(environment, port=server.port, log_name=unique("test-daphne-restarted"))
        cluster.wait_ready()
        produce(producer, topic, after)
        with EventStream(server.url + path, headers={"Last-Event-ID": last_id}) as resumed:
            missing = [value for value in produced if value not in received]
            received += [event.text for event in resumed.events(len(missing), timeout=20)]
            assert sorted(received, key=produced.index) == produced  # every record, once
            assert in_partition_order(received, produced)
            produce(producer, topic, ends)
            # Each partition's next event is its last record: nothing is still to come twice.
            assert sorted(event.text for event in resumed.events(PARTITIONS)) == ends
    finally:
        server.stop()
        producer.flush(10)
