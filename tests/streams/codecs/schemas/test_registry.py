"""The registry client against the real registry, one that went away, and ports that speak something else."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from streams.codecs.schemas import DecodeError, Reason
from streams.codecs.schemas.registry import RegistryClient
from tests.conftest import unique
from tests.support.servers import start_schema_registry

ITEM = {"type": "record", "name": "Item", "fields": [{"name": "id", "type": "string"}]}


def register(confluent_registry, subject: str, schema: Any) -> int:
    from confluent_kafka.schema_registry import Schema  # noqa: PLC0415

    schema_id: int = confluent_registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    return schema_id


def reason(call) -> Reason:
    with pytest.raises(DecodeError) as error:
        call()
    return error.value.reason


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def silent_port() -> Iterator[tuple[str, list[bytes]]]:
    """A port that reads what it is sent and closes without an answer: a service that is not a registry. It lists
    the requests it heard."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # closing a socket does not wake its accept(): the loop looks at `stop` instead
    accepted: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                connection.settimeout(2)
                accepted.append(connection.recv(65536))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    stop.set()
    thread.join(5)
    listener.close()


def test_it_reads_a_schema_by_id_and_by_subject_version(confluent_registry, schema_registry) -> None:
    subject = f"{unique('t')}-value"
    first = register(confluent_registry, subject, ITEM)
    client = RegistryClient(schema_registry)

    by_id = client.by_id(first)
    latest = client.by_subject(subject, "latest")

    assert (by_id.format, json.loads(by_id.text), by_id.id) == ("avro", ITEM, first)
    assert (latest.id, latest.version, latest.subject) == (first, 1, subject)
    assert client.by_subject(subject, 1).id == first


def test_it_tells_an_unknown_schema_from_an_unavailable_registry(schema_registry) -> None:
    client = RegistryClient(schema_registry)

    assert reason(lambda: client.by_id(987654)) is Reason.UNKNOWN_SCHEMA
    assert reason(lambda: client.by_subject(unique("none"), "latest")) is Reason.UNKNOWN_SCHEMA
    assert reason(lambda: client.by_subject(unique("none"), 3)) is Reason.UNKNOWN_SCHEMA
    assert client.last_failure is None


def test_it_finds_a_closed_port_unavailable_within_its_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()

    assert reason(lambda: RegistryClient(f"http://127.0.0.1:{port}").by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("service", ["redis", "kafka"])
def test_it_finds_a_port_that_speaks_another_protocol_unavailable(service: str) -> None:
    address = (
        urlsplit(settings.REDIS_URL).netloc if service == "redis" else settings.KAFKA.bootstrap_servers.split(",")[0]
    )
    client = RegistryClient(f"http://{address}", timeout_s=2)

    assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    assert client.last_failure


def test_it_waits_after_a_failure_before_it_asks_again(silent_port) -> None:
    url, accepted = silent_port
    clock = Clock()
    client = RegistryClient(url, clock=clock)

    assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    for _ in range(100):
        assert reason(lambda: client.by_id(2)) is Reason.REGISTRY_UNAVAILABLE
    assert len(accepted) == 1
    clock.now += 0.6
    assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    clock.now += 0.6  # the wait doubled to a second
    assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    assert len(accepted) == 2


def test_it_keeps_serving_cached_schemas_once_the_registry_went_away(confluent_registry) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: PLC0415

    second = start_schema_registry()
    try:
        with SchemaRegistryClient({"url": second.url}) as writer:
            subject = f"{unique('t')}-value"
            schema_id = writer.register_schema(subject, Schema(json.dumps(ITEM), "AVRO"))
        clock = Clock()
        client = RegistryClient(second.url, max_age_s=10, clock=clock)
        assert client.by_id(schema_id).id == schema_id
        assert client.by_subject(subject, "latest").id == schema_id
    finally:
        second.stop()

    clock.now += 60  # past max-age: the client asks, fails, and keeps what it had
    assert json.loads(client.by_id(schema_id).text) == ITEM
    assert client.by_subject(subject, "latest").id == schema_id
    assert client.last_failure
    assert reason(lambda: client.by_id(schema_id + 1)) is Reason.REGISTRY_UNAVAILABLE


def test_it_sends_the_catalogs_authorization_header(silent_port) -> None:
    url, heard = silent_port

    reason(lambda: RegistryClient(url + "/apis/ccompat/v7", auth="Basic dTpw").by_subject("a b/c", 2))

    request = heard[0].split(b"\r\n")
    assert request[0] == b"GET /apis/ccompat/v7/subjects/a%20b%2Fc/versions/2 HTTP/1.1"
    assert b"Authorization: Basic dTpw" in request
