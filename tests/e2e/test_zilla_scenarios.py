"""Zilla's binding-sse-kafka and binding-sse (server) scenarios that can be observed over HTTP.

Each test is named after the scenario of Zilla's own specification scripts (its `binding-sse-kafka` and
`binding-sse` test specs) it reproduces, and runs against a live daphne and the real broker. Where we differ
from Zilla (docs/contract.md, marked **differs**) the test asserts our behaviour and says so. Scenarios that
need JWT guards (handshake.my.stream, handshake.with.attributes, challenge/respond.to.challenge) come with the
guards; ones with nothing on the wire (server.sent.flush,
advise/flush) or no counterpart here (server.sent.abort/reset: a Kafka stream never ends or aborts;
data/valid|invalid: no validators; type/*: the only typed events are ours) have no test.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from bindings.selectors import EVENT_ID_KEY_AND_ETAG
from bindings.services import do_put_endpoint, do_put_route
from streams.codecs.event_id import encode_progress
from tests.conftest import health, unique, wait_until
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)

Produce = Callable[..., tuple[int, int]]


def route(topic: str, pattern: str | None = None, **options: object) -> str:
    """A route with a unique path (or the given pattern) to `topic`; returns the path prefix."""
    prefix = "/" + unique("z")
    do_put_route(name=prefix[1:], paths=[prefix + (pattern or "")], topic=topic, **options)  # type: ignore[arg-type]
    return prefix


def stream(url: str, **headers: str) -> EventStream:
    return EventStream(url, headers=headers)


# --- binding-sse-kafka ------------------------------------------------------------------------------------


def test_handshake(daphne_url: str, new_topic: Callable[..., str]) -> None:
    path = route(new_topic())
    with stream(daphne_url + path) as s:
        assert s.response.status_code == 200
        assert s.response.headers["content-type"] == "text/event-stream"
        assert s.next_block().retry == 2000  # differs: Zilla never sends retry


def test_handshake_with_filters(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic()
    filters = [{"key": "example-key", "headers": {"tag": "example-tag", "zone": "eu"}}]
    path = route(topic, filters=filters)
    produce(topic, b"no-key", headers=[("tag", b"example-tag"), ("zone", b"eu")])
    produce(topic, b"no-zone", key=b"example-key", headers=[("tag", b"example-tag")])
    produce(topic, b"match", key=b"example-key", headers=[("zone", b"eu"), ("tag", b"example-tag")])
    with stream(daphne_url + path) as s:
        event = s.next_event()
        assert (event.text, event.id) == ("match", encode_progress({0: 3}))


def test_handshake_with_dynamic_topic(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic()
    produce(topic, b"hello")
    prefix = route("${params.topic}", "/{topic}")
    with stream(f"{daphne_url}{prefix}/{topic}") as s:
        assert s.next_event().text == "hello"


def test_handshake_with_filters_dynamic(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic()
    prefix = route(topic, "/{key}/{tag}", filters=[{"key": "${params.key}", "headers": {"tag": "${params.tag}"}}])
    produce(topic, b"other", key=b"k 1", headers=[("tag", b"nope")])
    produce(topic, b"match", key=b"k 1", headers=[("tag", b"t/1")])
    with stream(f"{daphne_url}{prefix}/k%201/t%2F1") as s:  # params are percent-decoded (differs)
        assert s.next_event().text == "match"


def test_handshake_reconnect(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic(partitions=2)
    for value, partition in ((b"a", 0), (b"b", 0), (b"c", 1)):
        produce(topic, value, partition=partition)
    path = route(topic)
    with stream(daphne_url + path) as s:
        assert [e.id for e in s.events(3)][-1] == "AQQABAIC"
    with stream(daphne_url + path, **{"Last-Event-ID": "AQQABAIC"}) as s:
        produce(topic, b"next", partition=1)
        event = s.next_event()
        assert (event.text, event.id) == ("next", "AQQABAIE")


def test_handshake_reconnect_with_etag(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic(partitions=2)
    produce(topic, b"a", partition=0)
    produce(topic, b"b", partition=1)
    path = route(topic)
    with stream(daphne_url + path) as s:
        s.events(2)
        produce(topic, b"c", partition=0, headers=[("etag", b"revision=42")])
        assert s.next_event().id == "AQQABAIC/revision=42"
    with stream(daphne_url + path, **{"Last-Event-ID": "AQQABAIC/revision=42"}) as s:
        produce(topic, b"d", partition=0, headers=[("etag", b"revision=43")])
        event = s.next_event()
        assert (event.text, event.id) == ("d", "AQQABgIC/revision=43")


def test_handshake_reconnect_with_key_and_etag(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(partitions=2)
    for value, partition in ((b"a", 0), (b"b", 0), (b"c", 1)):
        produce(topic, value, partition=partition, key=b"key")
    produce(topic, b"next", partition=1, key=b"key")
    path = route(topic, event_id=EVENT_ID_KEY_AND_ETAG)
    for last_id in ('["a2V5","AQQABAIC/revision=42"]', '["a2V5","AQQABAIC"]'):  # differs: the second resumes too
        with stream(daphne_url + path, **{"Last-Event-ID": last_id}) as s:
            event = s.next_event()
            assert event.text == "next"
            assert json.loads(event.id or "") == ["a2V5", "AQQABAIE"]


def test_handshake_rejected(daphne_url: str) -> None:
    response = httpx.get(daphne_url + "/unexpected", timeout=5)
    assert response.status_code == 404
    assert response.json()["detail"] == "No route matches /unexpected."


def resumed_at_one_each(daphne_url: str, topic: str, produce: Produce, **options: object) -> EventStream:
    """Zilla's server.sent.* setup: one record in each of 2 partitions, a stream resumed just after both."""
    produce(topic, b"before", partition=0)
    produce(topic, b"before", partition=1)
    return stream(daphne_url + route(topic, None, **options), **{"Last-Event-ID": encode_progress({0: 1, 1: 1})})


def test_server_sent_messages(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic(partitions=2)
    with resumed_at_one_each(daphne_url, topic, produce) as s:
        produce(topic, b"Hello, world", partition=0)
        produce(topic, b"Hello, again", partition=0)
        first, second = s.events(2)
    assert (first.id, first.event, first.text) == ("AQQABAIC", None, "Hello, world")
    assert (second.id, second.event, second.text) == ("AQQABgIC", None, "Hello, again")
    assert first.raw == b"id:AQQABAIC\ndata:Hello, world"


def test_server_sent_messages_with_etag(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic(partitions=2)
    with resumed_at_one_each(daphne_url, topic, produce) as s:
        produce(topic, b"one", partition=0, headers=[("etag", b"revision=42")])
        produce(topic, b"two", partition=0, headers=[("etag", b"revision=43")])
        assert [e.id for e in s.events(2)] == ["AQQABAIC/revision=42", "AQQABgIC/revision=43"]


@pytest.mark.parametrize(
    ("key", "ids"),
    [
        (b"key", [["a2V5", "AQQABAIC/revision=42"], ["a2V5", "AQQABgIC/revision=43"]]),
        (None, [[None, "AQQABAIC/revision=42"], [None, "AQQABgIC/revision=43"]]),
    ],
    ids=["server.sent.messages.with.key.and.etag", "server.sent.messages.with.null.key"],
)
def test_server_sent_messages_with_key_form_ids(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce, key: bytes | None, ids: list[list[str]]
) -> None:
    topic = new_topic(partitions=2)
    with resumed_at_one_each(daphne_url, topic, produce, event_id=EVENT_ID_KEY_AND_ETAG) as s:
        produce(topic, b"one", partition=0, key=key, headers=[("etag", b"revision=42")])
        produce(topic, b"two", partition=0, key=key, headers=[("etag", b"revision=43")])
        assert [json.loads(e.id or "") for e in s.events(2)] == ids  # valid JSON (differs: Zilla does not escape)


def test_server_sent_null(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic(partitions=2)
    with resumed_at_one_each(daphne_url, topic, produce) as s:
        produce(topic, None, partition=0, key=b"key")
        produce(topic, None, partition=0)
        deleted, null_key = s.events(2)
    assert deleted.raw == b"id:AQQABAIC\nevent:delete\ndata:a2V5"
    assert null_key.raw == b"id:AQQABgIC\nevent:delete\ndata:"  # differs: Zilla sends no data line


@pytest.mark.parametrize("size", [100_000, 1024 * 1024], ids=["100k", "1MiB"])
def test_server_sent_100k_message(daphne_url: str, new_topic: Callable[..., str], produce: Produce, size: int) -> None:
    topic = new_topic(config={"max.message.bytes": str(4 * 1024 * 1024)})
    value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    produce(topic, value)
    with stream(daphne_url + route(topic)) as s:
        event = s.next_event()
    assert event.text.encode() == value


def test_client_sent_abort(daphne_url: str, new_topic: Callable[..., str]) -> None:
    path = route(new_topic())
    before = health(daphne_url)
    s = stream(daphne_url + path)
    s.next_block()
    assert health(daphne_url)["subscriptions"] == before["subscriptions"] + 1
    s.close()
    wait_until(lambda: health(daphne_url)["subscriptions"] == before["subscriptions"], timeout=5)


def test_client_sent_message(daphne_url: str, new_topic: Callable[..., str]) -> None:
    path = route(new_topic())
    response = httpx.request("GET", daphne_url + path, content=b"hello", timeout=5)
    assert response.status_code == 400  # differs: Zilla resets the stream
    assert response.json()["detail"] == "A stream request has no body."


# --- binding-sse, server ----------------------------------------------------------------------------------


def test_handshake_connection_succeeded_with_request_parameter(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    produce(topic, b"x")
    prefix = route(topic, "/{id}")
    with stream(f"{daphne_url}{prefix}/a8b7c6d5?.p=v") as s:
        assert s.next_event().text == "x"


def test_handshake_request_method_unsupported(daphne_url: str, new_topic: Callable[..., str]) -> None:
    response = httpx.post(daphne_url + route(new_topic()), timeout=5)
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD, OPTIONS"


def test_handshake_initial_comment(daphne_url: str, new_topic: Callable[..., str]) -> None:
    with stream(daphne_url + route(new_topic())) as s:
        assert next(s.response.iter_raw()).startswith(b"retry:2000\n\n")  # differs: retry, not a comment


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"Last-Event-ID": "100"}, ""),  # request.header.last.event.id
        ({"Last-Event-ID": ""}, ""),  # request.header.last.event.id.empty
        ({}, "?lastEventId=100"),  # request.parameter.last.event.id
        ({}, "?lastEventId="),  # request.parameter.last.event.id.empty
    ],
)
def test_handshake_request_last_event_id_that_is_no_position_starts_fresh(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce, headers: dict[str, str], query: str
) -> None:
    topic = new_topic()
    produce(topic, b"first")
    before = health(daphne_url)["malformed_ids"]
    with stream(daphne_url + route(topic) + query, **headers) as s:
        assert s.next_event().text == "first"
    counted = 1 if "100" in (headers.get("Last-Event-ID", "") + query) else 0
    assert health(daphne_url)["malformed_ids"] == before + counted  # recorded, never an error


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"Last-Event-ID": "A" * 4097}, ""),  # request.header.last.event.id.overflow, id/reject.header.length...
        ({"Last-Event-ID": "\U0001f600" * 1025}, ""),  # ...overflow.multibyte (4100 bytes)
        ({}, "?lastEventId=" + "A" * 4097),  # request.parameter.last.event.id.overflow, id/reject.query.param...
    ],
)
def test_handshake_request_last_event_id_overflow(
    daphne_url: str, new_topic: Callable[..., str], headers: dict[str, str], query: str
) -> None:
    encoded = [(k.encode(), v.encode()) for k, v in headers.items()]
    response = httpx.get(daphne_url + route(new_topic()) + query, headers=encoded, timeout=5)
    assert response.status_code == 400  # differs: the limit is 4096 bytes, not 254
    assert "4096" in response.json()["detail"]


def test_handshake_request_last_event_id_at_the_limit_is_accepted(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    produce(topic, b"first")
    with stream(daphne_url + route(topic), **{"Last-Event-ID": "A" * 4096}) as s:
        assert s.next_event().text == "first"


def test_handshake_request_parameter_last_event_id_url_encoded(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for value in (b"a", b"b"):
        produce(topic, value)
    encoded = "".join(f"%{ord(c):02X}" for c in encode_progress({0: 1}))
    with stream(f"{daphne_url}{route(topic)}?lastEventId={encoded}") as s:
        assert s.next_event().text == "b"


def test_reconnect_request_header_and_parameter_last_event_id(
    daphne_url: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    for value in (b"a", b"b", b"c"):
        produce(topic, value)
    url = f"{daphne_url}{route(topic)}?lastEventId={encode_progress({0: 1})}"
    with stream(url, **{"Last-Event-ID": encode_progress({0: 2})}) as s:
        assert s.next_event().text == "c"  # the header wins


@pytest.mark.parametrize(
    ("value", "lines"),
    [
        (b"", [""]),  # data/empty
        (b"Hello, world", ["Hello, world"]),  # data/non.empty
        (b"Hello\nworld\n", ["Hello", "world", ""]),  # data/multi.line
        (b"a\r\nb\rc", ["a", "b", "c"]),  # differs: CR and CRLF end lines too
    ],
    ids=["data.empty", "data.non.empty", "data.multi.line", "data.crlf"],
)
def test_data(daphne_url: str, new_topic: Callable[..., str], produce: Produce, value: bytes, lines: list[str]) -> None:
    topic = new_topic()
    produce(topic, value)
    with stream(daphne_url + route(topic)) as s:
        assert s.next_event().data == lines


def test_data_multiple_and_fragmented_10k(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic()
    big = b"x" * 10_240
    produce(topic, b"one")
    produce(topic, big)
    with stream(daphne_url + route(topic)) as s:
        assert [e.text.encode() for e in s.events(2)] == [b"one", big]


def test_data_that_is_not_utf8_passes_through(daphne_url: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic()
    produce(topic, b"caf\xe9 \xff")
    with stream(daphne_url + route(topic)) as s:
        assert s.next_event().raw.endswith(b"data:caf\xe9 \xff")


def test_timestamp_extension_is_not_offered(daphne_url: str, new_topic: Callable[..., str]) -> None:
    with stream(daphne_url + route(new_topic()), accept="text/event-stream;ext=timestamp") as s:
        assert s.response.headers["content-type"] == "text/event-stream"  # differs: Zilla changes it, sends none


def test_idle_comment(daphne_url: str, new_topic: Callable[..., str]) -> None:
    do_put_endpoint(name="fast-keepalive", keepalive_s=1)
    with stream(daphne_url + route(new_topic(), endpoint="fast-keepalive")) as s:
        s.next_block()  # retry
        assert s.next_block(timeout=3).comments == [""]
        assert s.next_block(timeout=3).comments == [""]
