"""Kafka unreachable, unknown topics and a broker outage mid-stream, against real processes.

The outage runs on an Apache Kafka of its own behind a `TcpProxy`: the broker advertises the proxy's address, so every
connection the platform and the producer make goes through it, and `cut()` takes the whole cluster away.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bindings.services import do_put_route
from streams.codecs.event_id import encode_progress
from tests.conftest import unique
from tests.support.servers import DaphneServer, KafkaCluster, TcpProxy, free_port, kafka_behind_proxy, start_daphne
from tests.support.sse_client import Event, EventStream

pytestmark = pytest.mark.django_db(transaction=True)

OUTAGE_S = 10.0  # long enough for a broker restart, not only a blip: librdkafka retries meanwhile


def route_to(topic: str) -> str:
    path = "/" + unique("s")
    do_put_route(name=path[1:], path=path, topic=topic)
    return path


@pytest.fixture
def daphne_without_kafka() -> Iterator[DaphneServer]:
    """daphne whose Kafka is a local port nobody listens on."""
    server = start_daphne(
        {"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}", "KAFKA_METADATA_TIMEOUT_MS": "1000"},
        log_name="test-daphne-no-kafka",
    )
    yield server
    server.stop()


def test_it_answers_503_with_retry_after_when_kafka_is_unreachable(daphne_without_kafka: DaphneServer) -> None:
    path = route_to(unique("t"))
    started = time.monotonic()
    response = httpx.get(daphne_without_kafka.url + path, timeout=10)
    assert response.status_code == 503
    assert time.monotonic() - started < 8  # bounded by the metadata timeout, not a hang
    assert int(response.headers["retry-after"]) > 0
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 503


def test_it_answers_404_naming_an_unknown_topic(daphne_url: str) -> None:
    topic = unique("missing")
    response = httpx.get(daphne_url + route_to(topic), timeout=10)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["topic"] == topic
    assert body["status"] == 404


@pytest.fixture
def cluster() -> Iterator[tuple[KafkaCluster, TcpProxy]]:
    """A one-node Apache Kafka of the test's own behind a cuttable proxy; stopped afterwards."""
    with kafka_behind_proxy() as (broker, proxy):
        yield broker, proxy


class AsyncProducer:
    """Produces through the proxy; delivery is awaited separately (it may be cut)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 1, "reconnect.backoff.max.ms": 500, "log_level": 0}
        )
        self.delivered: dict[bytes, tuple[int, int]] = {}
        self.errors: list[KafkaError] = []

    def produce(self, topic: str, value: bytes, partition: int) -> None:
        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                self.delivered[value] = (msg.partition() or 0, msg.offset() or 0)

        self.producer.produce(topic, value=value, partition=partition, on_delivery=report)
        self.producer.poll(0)

    def settle(self, *values: bytes, timeout: float = 15) -> dict[bytes, tuple[int, int]]:
        """Wait until every value in `values` is delivered; (partition, offset) of each."""
        deadline = time.monotonic() + timeout
        while not all(v in self.delivered for v in values):
            assert not self.errors, self.errors
            if time.monotonic() > deadline:
                pytest.fail(f"not delivered within {timeout} s: {[v for v in values if v not in self.delivered]}")
            self.producer.poll(0.05)
        return {v: self.delivered[v] for v in values}


def create_topic(bootstrap: str, partitions: int) -> str:
    name = unique("outage")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=10)
    return name


class BackgroundReader:
    """Reads a stream's SSE blocks on a thread of its own, so the test can watch a silence without ending it."""

    def __init__(self, stream: EventStream) -> None:
        self.stream = stream
        self.blocks: queue.Queue[Event | Exception] = queue.Queue()
        self.thread = threading.Thread(target=self._read, name="sse-reader", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                self.blocks.put(self.stream.next_block(timeout=3600))
        except Exception as exc:  # the stream ended: the next _take() reports it
            self.blocks.put(exc)

    def _take(self, timeout: float) -> Event | None:
        try:
            item = self.blocks.get(timeout=max(timeout, 0))
        except queue.Empty:
            return None
        if isinstance(item, Exception):
            pytest.fail(f"the stream ended: {item!r}")
        return item

    def next_event(self, timeout: float = 10) -> Event:
        deadline = time.monotonic() + timeout
        while (block := self._take(deadline - time.monotonic())) is None or not block.is_event:
            if time.monotonic() > deadline:
                pytest.fail(f"no event within {timeout} s")
        return block

    def assert_quiet_for(self, seconds: float) -> None:
        """For `seconds`: the response stays open and carries no event (comments, such as keep-alives, only)."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            block = self._take(remaining)
            assert block is None or not block.is_event, block.raw
        assert self.thread.is_alive()
        assert not self.stream.response.is_closed


def test_a_kafka_outage_mid_stream_keeps_the_stream_open_and_loses_nothing(
    cluster: tuple[KafkaCluster, TcpProxy],
) -> None:
    broker, proxy = cluster
    topic = create_topic(broker.bootstrap, partitions=2)
    producer = AsyncProducer(broker.bootstrap)
    path = route_to(topic)
    server = start_daphne({"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap}, log_name="test-daphne-outage")
    stream = EventStream(server.url + path, timeout=30)
    reader = BackgroundReader(stream)
    try:
        assert stream.response.status_code == 200
        producer.produce(topic, b"m1", partition=0)
        producer.settle(b"m1")
        assert reader.next_event().text == "m1"

        proxy.cut()
        producer.produce(topic, b"m2", partition=1)
        producer.produce(topic, b"m3", partition=0)
        # The cluster is gone for a while: the stream must neither end nor send anything but keep-alives.
        reader.assert_quiet_for(OUTAGE_S)
        assert not producer.delivered.keys() & {b"m2", b"m3"}  # really cut: nothing got through

        proxy.restore()
        assert producer.settle(b"m2", b"m3") == {b"m2": (1, 0), b"m3": (0, 1)}
        resumed = [reader.next_event(timeout=20) for _ in range(2)]
        assert sorted(e.text for e in resumed) == ["m2", "m3"]  # once each; one per partition, so in order

        # Nothing is replayed or duplicated: a sentinel produced now is the very next event.
        producer.produce(topic, b"m4", partition=1)
        producer.settle(b"m4")
        fourth = reader.next_event()
        assert fourth.text == "m4"
        assert fourth.id == encode_progress({0: 2, 1: 2})
    finally:
        server.stop()  # ends the response, so the reader thread sees the end of the stream and stops
        reader.thread.join(10)
        stream.close()
        producer.producer.flush(1)
