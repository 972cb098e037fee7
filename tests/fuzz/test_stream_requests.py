"""Hostile requests to the stream endpoint, in process over the real routes and broker (tests/support/fuzz.py).

What a request contains (its path and percent-escapes, `lastEventId`, `since`, `access_token`, its headers in any
bytes, repeated or huge) never gets a 5xx: it streams, or gets a 4xx with a problem body (docs/contract.md §2).
A topic name Kafka would refuse is a 404 before the broker is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bindings.patterns import is_topic_name
from bindings.services import do_put_route
from streams.codecs.event_id import etag_id, key_id
from streams.hub.hub import current_hub
from tests.conftest import unique
from tests.support.fuzz import REQUESTS, Endpoint, assert_not_a_server_error, endpoint

__all__ = ["endpoint"]  # the fixture, imported for pytest

pytestmark = pytest.mark.django_db(transaction=True)

# Bytes a header value can hold on the wire: no CR, LF or NUL (daphne refuses those), anything else.
header_bytes = st.binary(max_size=300).map(lambda b: b.translate(None, b"\r\n\x00"))
# A raw path segment: printable ASCII with valid, truncated and invalid percent-escapes.
escape = st.sampled_from(["%", "%2", "%zz", "%2F", "%2E", "%2E%2E", "%C3", "%C3%28", "%FF", "%00", "%0A", "%25"])
segment = st.lists(
    st.one_of(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/?#%"), max_size=8),
              escape),
    max_size=4,
).map("".join)  # fmt: skip
# A query string as a client may send it: key=value pairs, each part percent-encoded from any text, or raw ASCII.
query_names = st.sampled_from(["since", "lastEventId", "access_token", "x"])
query_text = st.one_of(
    st.lists(st.tuples(query_names, st.text(max_size=40)), max_size=4).map(
        lambda pairs: "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in pairs)
    ),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60),
)


@pytest.fixture
def stream_path(new_topic: Callable[..., str]) -> str:
    """A plain route to a real (empty) topic."""
    path = "/" + unique("fz")
    do_put_route(name=path[1:], path=path, topic=new_topic())
    return path


@REQUESTS
@given(segments=st.lists(segment, max_size=4), under_route=st.booleans(), method=st.sampled_from(["GET", "HEAD"]))
@example(segments=["%C3%28"], under_route=False, method="GET")
@example(segments=["", ""], under_route=True, method="GET")
def test_no_path_is_a_server_error(
    endpoint: Endpoint, stream_path: str, segments: list[str], under_route: bool, method: str
) -> None:
    prefix = stream_path if under_route else "/" + unique("fz")
    path = "/".join([prefix, *segments]) if segments else prefix
    response = endpoint.call(path.encode("ascii"), method=method)
    assert_not_a_server_error(response)
    if response.status != 200:
        assert response.status == 404
        assert response.problem()["title"] == "No route"


# A topic name: Kafka's characters, the two names it forbids, names past 249 characters, and other characters.
topic_names = st.one_of(
    st.sampled_from(["", ".", "..", "x" * 250, "a b", "a/b", "é", "a\x00b", "a%b", "${params.t}"]),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=20),
    st.text(st.sampled_from("ab.-_/ \\:é\x00"), min_size=1, max_size=12),
    st.integers(min_value=250, max_value=600).map(lambda n: "t" * n),
)


@REQUESTS
@given(name=topic_names.filter(lambda name: not is_topic_name(name)))
@example(name=".")
@example(name="..")
@example(name="t" * 250)
def test_a_topic_name_kafka_refuses_is_a_404_before_the_broker_is_asked(endpoint: Endpoint, name: str) -> None:
    prefix = "/" + unique("fz")
    do_put_route(name=prefix[1:], path=f"{prefix}/{{t}}", topic="${params.t}")
    response = endpoint.call(f"{prefix}/{quote(name, safe='')}".encode("ascii"))
    if name == "":
        assert response.status == 404  # an empty segment matches no {param}
        assert response.problem()["title"] == "No route"
        return
    assert response.status == 404, response
    body = response.problem()
    assert body["title"] == "Unknown topic"
    assert body["topic"] == name
    assert endpoint.loop_thread.run(_hub_started()) is False  # refused before the hub (and Kafka) was asked


async def _hub_started() -> bool:
    return current_hub() is not None


def last_event_id_headers() -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    """One or more Last-Event-ID headers, any bytes (invalid UTF-8 too), up to past the 4096-byte limit."""
    value = st.one_of(
        header_bytes,
        st.integers(min_value=4000, max_value=20000).map(lambda n: b"A" * n),
        st.sampled_from([b"AQQABAIC", b'["a2V5","AQQABAIC"]', b"[", b'[null,"\xff"]', b"AQ==/\xff\xfe"]),
    )
    return st.lists(st.tuples(st.sampled_from([b"last-event-id", b"Last-Event-ID"]), value), min_size=1, max_size=3)


@REQUESTS
@given(headers=last_event_id_headers())
@example(headers=[(b"last-event-id", b"\xff\xfe\xfd")])
@example(headers=[(b"last-event-id", b"A" * 4097)])
@example(headers=[(b"last-event-id", b"AQQABAIC"), (b"last-event-id", b"A" * 5000)])
@example(headers=[(b"last-event-id", b"[" * 4000)])  # nested past the JSON parser's limit: was a 500
def test_any_last_event_id_header_streams_or_is_a_400(
    endpoint: Endpoint, stream_path: str, headers: list[tuple[bytes, bytes]]
) -> None:
    response = endpoint.call(stream_path.encode(), headers=headers)
    assert_not_a_server_error(response)
    last = headers[-1][1]  # the last one wins, as in Zilla
    if len(last) > 4096:
        assert response.status == 400
        assert "Last-Event-ID" in response.problem()["detail"]
    else:
        assert response.status == 200
        assert response.body.startswith(b"retry:")


@REQUESTS
@given(
    progress=st.dictionaries(
        st.integers(0, 2**31 - 1), st.integers(-(2**63), 2**63 - 1) | st.sampled_from([-2, -1, 0, 1]), max_size=4
    ),
    key=st.none() | st.binary(max_size=8),
    where=st.sampled_from(["header", "query"]),
)
@example(progress={0: 2**63 - 1}, key=None, where="header")  # past the end: a reset, from the earliest
@example(progress={0: -(2**63), 7: 5}, key=b"k", where="query")  # before the start; a partition the topic lacks
def test_a_well_formed_id_at_any_offset_resumes(
    endpoint: Endpoint, stream_path: str, progress: dict[int, int], key: bytes | None, where: str
) -> None:
    """Offsets the topic never had, partitions it lacks: the stream still opens (docs/contract.md §4, §7)."""
    text = (key_id(key, progress) if key is not None else etag_id(progress)).decode()
    if where == "header":
        response = endpoint.call(stream_path.encode(), headers=[(b"last-event-id", text.encode())])
    else:
        response = endpoint.call(stream_path.encode(), query=b"lastEventId=" + quote(text, safe="").encode())
    assert response.status == 200, response
    assert response.body.startswith(b"retry:")


@REQUESTS
@given(query=query_text)
@example(query="since=%C2%B2")  # a digit to str.isdigit() but not to int()
@example(query="since=" + "9" * 5000)
@example(query="since=99999999999999999999")  # past Kafka's 64-bit timestamps
@example(query="since=0001-01-01")  # before 1970: a negative timestamp, which Kafka refuses
@example(query="since=1969-12-31T23:59:59.999Z")  # -1, which Kafka reads as "the end"
@example(query="lastEventId=%FF%FE&since=9999-12-31")
@example(query="lastEventId=" + "%5B" * 4000)
def test_any_query_string_streams_or_is_a_400(endpoint: Endpoint, stream_path: str, query: str) -> None:
    response = endpoint.call(stream_path.encode(), query=query.encode("ascii"))
    assert_not_a_server_error(response)
    assert response.status in {200, 400}, response
    if response.status == 400:
        assert response.problem()["detail"].startswith("since=")


@REQUESTS
@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from([b"authorization", b"cookie", b"origin", b"content-type", b"user-agent", b"x-any"]),
            header_bytes,
        ),
        max_size=6,
    ),
    method=st.sampled_from(["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH", "BREW"]),
    body=st.sampled_from([b"", b"x", b"\xff" * 100]),
)
@example(headers=[(b"content-type", b"application/x-challenge-response"), (b"authorization", b"Bearer \xff")],
         method="POST", body=b"")  # fmt: skip
def test_any_headers_method_and_body_on_an_unguarded_stream(
    endpoint: Endpoint, stream_path: str, headers: list[tuple[bytes, bytes]], method: str, body: bytes
) -> None:
    response = endpoint.call(stream_path.encode(), method=method, headers=headers, body=body)
    assert_not_a_server_error(response)
