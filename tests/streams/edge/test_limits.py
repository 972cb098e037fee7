"""Limits an operator sets: each one reached, refused with its documented problem and `retry-after`, counted in
the metrics, and freeing nothing it should not: the streams already open keep receiving, and a place given back
is taken by the next client."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.test import override_settings

from bindings.services import do_put_endpoint, do_put_guard, do_put_route
from streams.codecs.event_id import encode_progress
from streams.edge.limits import RATE_WINDOW_S, RateLimit
from tests.conftest import unique, wait_until
from tests.streams.edge.test_metrics import scrape, value
from tests.support.jwt_keys import guard_fields, token
from tests.support.rawsse import RawStream
from tests.support.servers import DaphneServer, start_daphne
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)


def refused(response: httpx.Response, status: int, retry_after: range = range(5, 6)) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert int(response.headers["retry-after"]) in retry_after
    body: dict[str, object] = response.json()
    assert body["status"] == status
    return body


def route_on(topic: str, **endpoint: object) -> str:
    """A route under an endpoint of its own, with the endpoint settings given."""
    name = unique("lim")
    do_put_endpoint(name=name, **endpoint)  # type: ignore[arg-type]
    do_put_route(name=name, path=f"/{name}", topic=topic, endpoint=name)
    return f"/{name}"


@pytest.fixture
def server_of_two_streams() -> Iterator[DaphneServer]:
    server = start_daphne({"SSE_MAX_STREAMS": "2"}, log_name="test-daphne-limits")
    try:
        yield server
    finally:
        server.stop()


def test_past_the_process_limit_a_stream_is_a_503_and_a_closed_stream_makes_room(
    server_of_two_streams: DaphneServer, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    url = server_of_two_streams.url
    topic = new_topic()
    path = route_on(topic)
    first, second = EventStream(url + path), EventStream(url + path)
    try:
        for stream in (first, second):
            assert stream.next_block().retry is not None
        body = refused(httpx.get(url + path, timeout=10), 503)
        assert body["title"] == "Server busy"
        assert "2 streams" in str(body["detail"])
        produce(topic, b"after the refusal")
        assert first.next_event().text == second.next_event().text == "after the refusal"
        first.close()
        with EventStream(url + path) as third:  # the place first gave back
            assert third.next_event().text == "after the refusal"
    finally:
        first.close()
        second.close()
    samples = scrape(url)
    assert value(samples, "sse_refusals_total", route=path[1:], status="503", reason="max_streams") == 1


def test_an_endpoint_limits_streams_per_client_address(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    topic = new_topic()
    path = route_on(topic, max_streams_per_client=2)
    other = route_on(topic)  # another endpoint: counted apart
    streams = [EventStream(daphne_url + path), EventStream(daphne_url + path), EventStream(daphne_url + other)]
    try:
        for stream in streams:
            assert stream.next_block().retry is not None
        body = refused(httpx.get(daphne_url + path, timeout=10), 429)
        assert body["title"] == "Too many streams"
        produce(topic, b"still flowing")
        assert [stream.next_event().text for stream in streams] == ["still flowing"] * 3
        streams[0].close()
        wait_until(lambda: httpx.head(daphne_url + path, timeout=10).status_code == 200, timeout=10)
    finally:
        for stream in streams:
            stream.close()


def test_an_endpoint_limits_streams_per_guard_identity(
    daphne_url: str, new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    guard = unique("jwt")
    do_put_guard(**guard_fields(guard))
    name = unique("lim")
    do_put_endpoint(name=name, max_streams_per_identity=1)
    topic = new_topic()
    do_put_route(name=name, path=f"/{name}", topic=topic, endpoint=name, guarded={guard: ["read"]})
    url = f"{daphne_url}/{name}"
    alice = {"authorization": f"Bearer {token('alice')}"}
    bob = {"authorization": f"Bearer {token('bob')}"}
    with EventStream(url, headers=alice) as alices, EventStream(url, headers=bob) as bobs:
        assert alices.next_block().retry is not None
        assert bobs.next_block().retry is not None
        body = refused(httpx.get(url, headers=alice, timeout=10), 429)
        assert "identity" in str(body["detail"])
        produce(topic, b"both still read")
        assert alices.next_event().text == bobs.next_event().text == "both still read"


def test_past_the_historical_reader_limit_a_replay_is_a_503_until_the_reader_is_free(
    new_topic: Callable[..., str], produce: Callable[..., tuple[int, int]]
) -> None:
    """One reader of history per process: a stalled client replaying 8 MB holds it; another replay is refused
    while a live stream keeps receiving; once the stalled client leaves, the replay is served."""
    server = start_daphne({"SSE_MAX_HISTORICAL_READERS": "1"}, log_name="test-daphne-history-limit")
    try:
        topic = new_topic()
        for n in range(80):
            produce(topic, bytes([65 + n % 26]) * 100_000)
        live_from = produce(topic, b"the window starts here")[1]
        path = route_on(topic)
        from_start = {"Last-Event-ID": encode_progress({0: 0})}
        with EventStream(server.url + path, headers={"Last-Event-ID": encode_progress({0: live_from})}) as live:
            assert live.next_event().text == "the window starts here"
            stalled = RawStream(server.port, path, headers=from_start, rcvbuf=4096)
            try:
                time.sleep(1)  # it opened its reader and filled its connection
                body = refused(httpx.get(server.url + path, headers=from_start, timeout=10), 503)
                assert "older records" in str(body["detail"])
                produce(topic, b"live goes on")
                assert live.next_event().text == "live goes on"
            finally:
                stalled.close()
            with EventStream(server.url + path, headers=from_start) as replay:
                wait_until(lambda: replay.next_event().text.startswith("A"), timeout=15)
        samples = scrape(server.url)
        assert value(samples, "sse_refusals_total", route=path[1:], status="503", reason="max_historical_readers") == 1
        assert value(samples, "sse_cache_starts_total", result="miss") >= 2
    finally:
        server.stop()


def test_challenge_responses_past_the_rate_are_429_and_a_body_over_the_bound_413() -> None:
    server = start_daphne({"SSE_MAX_CHALLENGE_RESPONSES_PER_MIN": "2"}, log_name="test-daphne-challenge-rate")
    try:
        post = {"content-type": "application/x-challenge-response"}
        path = "/" + unique("anything")
        for _ in range(2):
            assert httpx.post(server.url + path, headers=post, timeout=10).status_code == 204
        body = refused(httpx.post(server.url + path, headers=post, timeout=10), 429, retry_after=range(50, 61))
        assert "challenge responses" in str(body["detail"])
        too_big = httpx.post(server.url + path, headers=post, content=b"x" * 5000, timeout=10)
        assert too_big.status_code == 413
        assert too_big.json()["title"] == "Content too large"
    finally:
        server.stop()


OTHER_ISSUER = "https://other-idp.example.com"


def two_guards_on_one_endpoint(topic: str, **endpoint: object) -> tuple[str, str]:
    """Routes under one endpoint, guarded by two guards of two identity providers that both know an "alice"."""
    ours, theirs = unique("jwt"), unique("jwt")
    do_put_guard(**guard_fields(ours))
    do_put_guard(**guard_fields(theirs, issuer=OTHER_ISSUER))
    name = unique("lim")
    do_put_endpoint(name=name, **endpoint)  # type: ignore[arg-type]
    for suffix, guard in (("ours", ours), ("theirs", theirs)):
        do_put_route(
            name=f"{name}-{suffix}", path=f"/{name}/{suffix}", topic=topic, endpoint=name, guarded={guard: ["read"]}
        )
    return f"/{name}/ours", f"/{name}/theirs"


def bearer(jwt: str) -> dict[str, str]:
    return {"authorization": f"Bearer {jwt}"}


def test_the_identity_limit_counts_per_guard_and_a_token_without_identity_as_its_own(
    daphne_url: str, new_topic: Callable[..., str]
) -> None:
    """Two identity providers' "alice" are two users; a token without `sub` is limited, not let through."""
    ours, theirs = two_guards_on_one_endpoint(new_topic(), max_streams_per_identity=1)
    alice, other_alice = token("alice"), token("alice", issuer=OTHER_ISSUER)
    anonymous, another_anonymous = token(None), token(None, jti="another")
    with (
        EventStream(daphne_url + ours, headers=bearer(alice)) as first,
        EventStream(daphne_url + theirs, headers=bearer(other_alice)) as second,
        EventStream(daphne_url + ours, headers=bearer(anonymous)) as third,
        EventStream(daphne_url + ours, headers=bearer(another_anonymous)) as fourth,
    ):
        for stream in (first, second, third, fourth):
            assert stream.next_block().retry is not None
        body = refused(httpx.get(daphne_url + ours, headers=bearer(alice), timeout=10), 429)
        assert "This identity of guard" in str(body["detail"])
        body = refused(httpx.get(daphne_url + ours, headers=bearer(anonymous), timeout=10), 429)
        assert "This token (it has no identity) of guard" in str(body["detail"])


def test_challenge_responses_are_counted_per_guard_identity_and_per_token_without_one(
    new_topic: Callable[..., str],
) -> None:
    server = start_daphne({"SSE_MAX_CHALLENGE_RESPONSES_PER_MIN": "2"}, log_name="test-daphne-challenge-guards")
    try:
        ours, _ = two_guards_on_one_endpoint(new_topic())
        post = {"content-type": "application/x-challenge-response"}

        def answer(jwt: str) -> int:
            return httpx.post(server.url + ours, headers={**post, **bearer(jwt)}, timeout=10).status_code

        alice, anonymous = token("alice"), token(None)
        assert [answer(alice), answer(alice), answer(alice)] == [204, 204, 429]
        assert answer(token("alice", issuer=OTHER_ISSUER)) == 204, "another provider's alice has her own rate"
        assert [answer(anonymous), answer(anonymous), answer(anonymous)] == [204, 204, 429]
        assert answer(token(None, jti="another")) == 204, "another token without identity has its own rate"
    finally:
        server.stop()


class CountingKeys(OrderedDict[str, Any]):
    """A rate limit's bookkeeping that counts the keys every look over it visits."""

    visited = 0

    def __iter__(self) -> Iterator[str]:
        for key in super().__iter__():
            self.visited += 1
            yield key

    def items(self) -> Any:
        for item in super().items():
            self.visited += 1
            yield item

    def keys(self) -> Any:
        return list(self)

    def values(self) -> Any:
        return [value for _, value in self.items()]


@override_settings(SSE_MAX_CHALLENGE_RESPONSES_PER_MIN=2)
def test_the_rate_limit_visits_a_bounded_number_of_keys_per_call_at_any_number_of_keys() -> None:
    """Past 10 000 keys, every call looked at every key for those to forget: 10 000 clients in a minute made each
    challenge response cost a scan of all of them. Counted, not timed: each key is looked at about once when
    counted and once when forgotten, however many there are."""
    limit = RateLimit("SSE_MAX_CHALLENGE_RESPONSES_PER_MIN")
    seen = limit.seen = CountingKeys()
    calls = 0
    for n in range(20_000):  # all within one window
        assert limit.take(f"client:{n}", now=n / 1000) == 0.0
        calls += 1
        assert seen.visited <= 2 * calls, f"{seen.visited} keys visited in {calls} calls, at {len(seen)} keys"
    assert limit.take("client:7", now=30.0) == 0.0  # its second
    assert limit.take("client:7", now=30.0) == pytest.approx(RATE_WINDOW_S - 30 + 0.007)  # its third, refused
    assert len(seen) == 20_000

    limit.take("client:late", now=RATE_WINDOW_S + 25.0)  # a window after all but one key's last event
    assert list(seen) == ["client:7", "client:late"]
    assert seen.visited <= 2 * (calls + 3)
