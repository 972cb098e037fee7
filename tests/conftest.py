"""Fixtures over the real services: Postgres (pytest-django), the Kafka-protocol broker, a live daphne, a schema
registry."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from django.conf import settings
from django.db.backends.postgresql.operations import DatabaseOperations

from streams.kafka.admin import ensure_topic
from tests.support.flush import retrying_deadlocks
from tests.support.inprocess import LoopThread
from tests.support.servers import start_daphne, start_schema_registry, stop_web, web_started

ROOT = Path(__file__).resolve().parent.parent

# A transactional test's flush may deadlock with a live server's reload of the same database: run it again.
DatabaseOperations.execute_sql_flush = retrying_deadlocks(DatabaseOperations.execute_sql_flush)  # type: ignore[method-assign,assignment]


def wait_until(condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.05) -> object:
    """Poll `condition` until it returns something truthy; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def delete_topics(topics: list[str]) -> None:
    """Delete `topics` (those already gone too) and wait until Kafka no longer lists them."""
    if not topics:
        return
    admin = AdminClient(settings.KAFKA.admin_config())
    for future in admin.delete_topics(topics).values():
        with contextlib.suppress(KafkaException):  # deleted already (a test of deletion)
            future.result(timeout=10)

    def gone() -> bool:
        listed = admin.list_topics(timeout=5).topics
        return not any(topic in listed and listed[topic].error is None for topic in topics)

    wait_until(gone, timeout=10)


def listed(topic: str, partitions: int) -> None:
    """Wait until the broker's metadata lists `topic` with its partitions: Kafka acknowledges a topic once its
    controller made it, and a broker answers for it a moment later. A stream opened in between is a 404 (an
    unknown topic, docs/contract.md §2), which a test opening one at once would see by chance."""
    admin = AdminClient(settings.KAFKA.admin_config())

    def found() -> bool:
        metadata = admin.list_topics(topic, timeout=5).topics.get(topic)
        return metadata is not None and metadata.error is None and len(metadata.partitions) == partitions

    wait_until(found, timeout=10)


@pytest.fixture
def created_topics() -> Iterator[list[str]]:
    """Topics a test made, deleted at its end: a server streaming one then ends those streams (docs/contract.md
    §2), and the broker holds only the topics of the tests that run."""
    created: list[str] = []
    yield created
    delete_topics(created)


@pytest.fixture
def new_topic(created_topics: list[str]) -> Callable[..., str]:
    """Create topics with unique names, deleted at the end of the test."""

    def make(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique("t")
        ensure_topic(settings.KAFKA, name, partitions=partitions, config=config)
        created_topics.append(name)
        listed(name, partitions)
        return name

    return make


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    """An event loop in a thread of its own, for the data plane run in the test process (tests/support/inprocess.py)."""
    runner = LoopThread()
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def producer() -> Iterator[Producer]:
    instance = Producer({**settings.KAFKA.producer_config(), "linger.ms": 1, "message.max.bytes": 8 * 1024 * 1024})
    yield instance
    instance.flush(10)


@pytest.fixture
def produce(producer: Producer) -> Callable[..., tuple[int, int]]:
    """Produce one record and wait for its delivery report; returns (partition, offset)."""

    def send(
        topic: str,
        value: bytes | None,
        *,
        partition: int = 0,
        key: bytes | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> tuple[int, int]:
        delivered: list[tuple[int, int]] = []
        errors: list[object] = []

        def report(err: object, msg: object) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

        producer.produce(topic, value=value, key=key, partition=partition, headers=headers, on_delivery=report)
        producer.flush(10)
        assert not errors, errors
        assert delivered, "no delivery report"
        return delivered[0]

    return send


@pytest.fixture(scope="session")
def daphne_url(django_db_setup: None, django_db_blocker: object) -> Iterator[str]:
    """daphne serving the platform on a free port, on the test database; yields its base URL. Every test's client
    comes from 127.0.0.1, so the per-address limits are off here (tests of the limits start servers of their own)."""
    unlimited = {"SSE_MAX_STREAMS_PER_CLIENT": "0", "SSE_MAX_CONNECTIONS_PER_CLIENT": "0"}
    server = start_daphne(unlimited, log_name="test-daphne")
    try:
        yield server.url
    finally:
        server.stop()


def health(daphne_url: str) -> dict[str, int]:
    body: dict[str, int] = httpx.get(f"{daphne_url}/-/health", timeout=5).json()
    return body


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[str]:
    """A real Confluent-compatible schema registry for the run, started on first use: the URL of its API."""
    registry = start_schema_registry()
    try:
        yield registry.url
    finally:
        registry.stop()


@pytest.fixture
def confluent_registry(schema_registry: str) -> Iterator[Any]:
    """confluent-kafka's own client of the tests' registry, for its serializers; closed at the end of the test."""
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415  (only the tests that ask)

    with SchemaRegistryClient({"url": schema_registry}) as client:
        yield client


@pytest.fixture(scope="session")
def spark_for_the_run() -> Iterator[None]:
    """One warm Spark JVM for the whole run, as a worker keeps one; stopped at the end."""
    from analytics.jobs.spark import stop_session  # noqa: PLC0415  (a JVM only when asked for)

    yield
    stop_session()


@pytest.fixture
def spark(spark_for_the_run: None) -> Any:
    """The local Spark session (one core); a test that moved to another master gets it back."""
    from analytics.jobs.spark import spark_session  # noqa: PLC0415

    return spark_session("local[1]")


@pytest.fixture
def web() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """platform/web.py with two workers behind its edge: the supervisor and the port; all killed at the end."""
    process, port = web_started()
    try:
        yield process, port
    finally:
        stop_web(process)


@pytest.fixture
def web_without_edge() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """platform/web.py with two workers on its port and no edge (`WEB_EDGE=off`): a client's connection is a
    worker's, and a client that closes it is heard at once."""
    process, port = web_started(WEB_EDGE="off", WEB_TLS_PORT="off")
    try:
        yield process, port
    finally:
        stop_web(process)
