"""The registry client against the real registry, one that went away, ports that speak something else, and what
may stand between it and the registry (a gateway that refuses, a redirect to a third party)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from streams.codecs.schemas import DecodeError, Reason
from streams.codecs.schemas.registry import Limits, RegistryClient
from tests.conftest import unique
from tests.support.http_stubs import dripping, gateway, recorder, redirector
from tests.support.servers import start_schema_registry

ITEM = {"type": "record", "name": "Item", "fields": [{"name": "id", "type": "string"}]}
CONFLUENT_API = "/apis/ccompat/v7"
XSD = '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"><xs:element name="a" type="xs:string"/></xs:schema>'


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


def test_it_backs_off_per_lookup_not_for_the_whole_client(silent_port) -> None:
    url, accepted = silent_port
    clock = Clock()
    client = RegistryClient(url, clock=clock)

    assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    for _ in range(100):
        assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    assert len(accepted) == 1
    assert reason(lambda: client.by_id(2)) is Reason.REGISTRY_UNAVAILABLE  # another lookup is asked at once
    assert len(accepted) == 2
    clock.now += 0.6
    assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    clock.now += 0.6  # the wait of id 1 doubled to a second
    assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
    assert len(accepted) == 3


def test_it_makes_at_most_its_lookups_per_second(schema_registry) -> None:
    clock = Clock()
    client = RegistryClient(schema_registry, clock=clock)  # 20 a second by default
    unseen = [2**30 + number for number in range(25)]

    assert [reason(lambda i=i: client.by_id(i)) for i in unseen] == [Reason.UNKNOWN_SCHEMA] * 20 + [
        Reason.REGISTRY_UNAVAILABLE
    ] * 5
    clock.now += 0.1  # two more
    assert [reason(lambda i=i: client.by_id(i)) for i in unseen[20:]] == [Reason.UNKNOWN_SCHEMA] * 2 + [
        Reason.REGISTRY_UNAVAILABLE
    ] * 3
    assert client.requests == 22


def test_it_forgets_the_least_recently_used_answers_past_its_bounds(confluent_registry, schema_registry) -> None:
    doc = "d" * 10_000  # each schema counts for about 10 kB
    ids = [
        register(confluent_registry, f"{unique('t')}-value", {**ITEM, "name": f"Item{number}", "doc": doc})
        for number in range(3)
    ]
    by_entries = RegistryClient(schema_registry, limits=Limits(cache_entries=2))
    for schema_id in ids:
        by_entries.by_id(schema_id)
    by_entries.by_id(ids[2])
    assert (by_entries.cached[0], by_entries.requests) == (2, 3)
    by_entries.by_id(ids[0])  # the least recently used was forgotten: asked again
    assert by_entries.requests == 4
    for unknown in (2**30 + 1, 2**30 + 2, 2**30 + 3):  # a miss takes an entry too
        reason(lambda unknown=unknown: by_entries.by_id(unknown))
    assert by_entries.cached[0] == 2

    by_bytes = RegistryClient(schema_registry, limits=Limits(cache_bytes=15_000))
    by_bytes.by_id(ids[0])
    by_bytes.by_id(ids[1])
    assert by_bytes.cached[1] <= 15_000
    by_bytes.by_id(ids[0])
    assert by_bytes.requests == 3


@pytest.fixture
def refused(request, confluent_registry, schema_registry) -> Iterator[tuple[str, int, int]]:
    """A registry URL, an id of a schema it keeps refusing (as `request.param` says), and an id it gives."""
    good = register(confluent_registry, f"{unique('t')}-value", {**ITEM, "name": unique("Good").replace("-", "_")})
    if request.param == "403":
        bad = register(confluent_registry, f"{unique('t')}-value", {**ITEM, "name": unique("Bad").replace("-", "_")})
        with gateway(schema_registry, {bad}) as url:
            yield url, bad, good
    elif request.param == "over 4 MiB":
        big = {**ITEM, "name": unique("Big").replace("-", "_"), "doc": "x" * (4 * 1024 * 1024)}
        yield schema_registry, register(confluent_registry, f"{unique('big')}-value", big), good
    else:  # a type Apicurio holds and Confluent's API does not know: an XML Schema
        yield schema_registry, register_xsd(schema_registry), good


def register_xsd(schema_registry: str) -> int:
    """An XML Schema registered through Apicurio's own API: its id in the Confluent-compatible API."""
    body = {
        "artifactId": unique("xsd"),
        "artifactType": "XSD",
        "firstVersion": {"content": {"content": XSD, "contentType": "application/xml"}},
    }
    native = schema_registry.replace(CONFLUENT_API, "/apis/registry/v3/groups/default/artifacts")
    request = urllib.request.Request(
        native, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        content_id: int = json.loads(answer.read())["version"]["contentId"]
    return content_id


@pytest.mark.parametrize("refused", ["403", "over 4 MiB", "unknown type"], indirect=True)
def test_it_skips_a_schema_the_registry_keeps_refusing_after_a_bounded_wait(refused) -> None:
    url, bad, good = refused
    clock = Clock()
    client = RegistryClient(url, clock=clock)  # giving up after 60 s by default

    assert reason(lambda: client.by_id(bad)) is Reason.REGISTRY_UNAVAILABLE  # it may be passing: its records wait
    assert client.by_id(good).id == good  # and no other lookup waits with them
    clock.now += 59
    assert reason(lambda: client.by_id(bad)) is Reason.REGISTRY_UNAVAILABLE
    clock.now += 2
    assert reason(lambda: client.by_id(bad)) is Reason.UNKNOWN_SCHEMA  # given up: its records are skipped
    assert reason(lambda: client.by_id(bad)) is Reason.UNKNOWN_SCHEMA


def test_it_never_follows_a_redirect_so_no_third_party_gets_the_credentials() -> None:
    with recorder() as (third_party, heard), redirector(third_party) as registry:
        client = RegistryClient(registry + "/apis/ccompat/v7", auth="Basic c2VjcmV0")

        assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
        assert reason(lambda: client.by_subject("orders-value", "latest")) is Reason.REGISTRY_UNAVAILABLE

    assert heard == []
    assert "HTTP 302: a redirect, not followed" in (client.last_failure or "")


def test_it_neither_sends_nor_shows_the_user_info_of_its_url(silent_port) -> None:
    url, heard = silent_port
    client = RegistryClient(url.replace("http://", "http://ada:s3cret@"))

    with pytest.raises(DecodeError) as error:
        client.by_id(1)

    assert b"s3cret" not in heard[0]
    assert b"authorization" not in heard[0].lower()
    assert "s3cret" not in f"{error.value} {client.last_failure} {client!r}"
    assert "http://***@127.0.0.1" in (client.last_failure or "")


def test_it_waits_for_an_answer_no_longer_than_twice_its_timeout_however_slowly_it_comes() -> None:
    with dripping(seconds=20) as url:
        client = RegistryClient(url, timeout_s=0.5)
        started = time.monotonic()

        assert reason(lambda: client.by_id(1)) is Reason.REGISTRY_UNAVAILABLE
        assert time.monotonic() - started < 5


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
