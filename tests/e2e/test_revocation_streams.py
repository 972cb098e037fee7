"""Revocations on the data plane, across the two workers of platform/web.py: the streams of a revoked identity, or
of a revoked token id, end within 5 s on both workers with `event:revoked`, while other streams go on; new requests
get the 401 of a revoked token; a revocation past its `until` refuses nothing, without a restart. A process that
cannot hear the change event (Redis cut) still applies a revocation, at its next periodic read."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from bindings.models import Change
from bindings.services import do_put_guard, do_put_route, do_revoke
from streams.access.guards import REVOKED_TITLE, REVOKED_TYPE
from streams.access.revocations import REFRESH_S
from tests.conftest import unique, wait_until
from tests.e2e.test_redis_outage import behind_a_cuttable_redis
from tests.e2e.test_worker_killed import read_until, serving_pid
from tests.support.jwt_keys import guard_fields, token
from tests.support.rawsse import RawStream
from tests.support.servers import HOST, DaphneServer, TcpProxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.beside]
__all__ = ["behind_a_cuttable_redis"]  # the fixture, imported for pytest

MAX_STREAMS = 24  # opened until both workers hold some, for each kind of token


@pytest.fixture
def guarded(new_topic: Callable[..., str]) -> tuple[str, str, str]:
    """A guard and a route it guards: (guard, path, topic)."""
    guard, topic = unique("jwt"), new_topic()
    do_put_guard(**guard_fields(guard))
    path = "/" + unique("rev")
    do_put_route(name=path[1:], path=path, topic=topic, guarded={guard: ["read"]})
    return guard, path, topic


class Streams:
    """The test's raw streams, closed at the end."""

    def __init__(self, port: int, path: str) -> None:
        self.port, self.path = port, path
        self.opened: list[RawStream] = []

    def open(self, bearer: str) -> RawStream:
        stream = RawStream(self.port, self.path, headers={"authorization": f"Bearer {bearer}"})
        self.opened.append(stream)
        return stream

    def on_both_workers(self, bearers: Callable[[], str], produce: Callable[[bytes], object]) -> list[RawStream]:
        """Streams with the tokens `bearers` gives, opened until both workers serve some; each has read one event
        (so it is registered in its worker)."""
        streams: list[RawStream] = []
        pids: set[int] = set()
        while len(pids) < 2:
            assert len(streams) < MAX_STREAMS, "every stream landed on one worker"
            stream = self.open(bearers())
            wait_until(lambda stream=stream: answered(stream), timeout=15)  # type: ignore[misc]
            assert stream.status == 200
            pids.add(serving_pid(self.port, stream))
            streams.append(stream)
        marker = unique("mark").encode()
        produce(marker)
        for stream in streams:
            wait_until(lambda stream=stream: has(stream, marker.decode()), timeout=15)  # type: ignore[misc]
        return streams

    def close(self) -> None:
        for stream in self.opened:
            stream.close()


def answered(stream: RawStream) -> int:
    """The response's status once its headers arrived, else 0."""
    stream.pump(0.1)
    return stream.status


def has(stream: RawStream, text: str) -> bool:
    """Whether `stream` has received an event of `text`, reading what arrives meanwhile."""
    stream.pump(0.1)
    return any(event.text == text for event in stream.events())


@pytest.fixture
def streams(web_without_edge: tuple[subprocess.Popen[bytes], int], guarded: tuple[str, str, str]) -> Iterator[Streams]:
    # Which worker serves a stream is read from its socket: no edge between them.
    opened = Streams(web_without_edge[1], guarded[1])
    yield opened
    opened.close()


def ended_revoked(stream: RawStream) -> bool:
    stream.pump(0.1)
    return stream.closed and bool(stream.events()) and stream.events()[-1].event == "revoked"


def assert_refused_as_revoked(port: int, path: str, bearer: str) -> None:
    response = httpx.get(f"http://{HOST}:{port}{path}", headers={"authorization": f"Bearer {bearer}"}, timeout=5)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert "revoked" in response.headers["www-authenticate"]
    problem = response.json()
    assert (problem["type"], problem["title"], problem["status"]) == (REVOKED_TYPE, REVOKED_TITLE, 401)


def test_revoking_an_identity_ends_its_streams_on_both_workers_and_refuses_it(
    web_without_edge: tuple[subprocess.Popen[bytes], int],
    guarded: tuple[str, str, str],
    streams: Streams,
    produce: Callable[..., tuple[int, int]],
) -> None:
    guard, path, topic = guarded
    port = web_without_edge[1]
    alice = streams.on_both_workers(lambda: token("alice"), lambda value: produce(topic, value))
    bob = streams.on_both_workers(lambda: token("bob"), lambda value: produce(topic, value))
    revocation = do_revoke(guard=guard, identity="alice", until=timezone.now() + timedelta(hours=1), reason="fired")
    for stream in alice:
        wait_until(lambda stream=stream: ended_revoked(stream), timeout=5)  # type: ignore[misc]
    revoked = alice[0].events()[-1]
    assert json.loads(revoked.text)["type"] == REVOKED_TYPE
    assert Change.objects.filter(kind="revocation", name=str(revocation.pk), action="create").exists()
    for _ in range(4):  # whichever worker takes the request
        assert_refused_as_revoked(port, path, token("alice"))
    produce(topic, b"after")
    for stream in bob:
        wait_until(lambda stream=stream: has(stream, "after"), timeout=15)  # type: ignore[misc]
        assert not stream.closed
    fresh = streams.open(token("bob"))
    read_until(fresh, 1)
    assert fresh.status == 200


def test_revoking_a_token_id_ends_only_its_streams_until_it_lapses(
    web_without_edge: tuple[subprocess.Popen[bytes], int],
    guarded: tuple[str, str, str],
    streams: Streams,
    produce: Callable[..., tuple[int, int]],
) -> None:
    guard, path, topic = guarded
    port = web_without_edge[1]
    leaked, kept = token("carol", jti="leaked"), token("carol", jti="kept")
    leaked_streams = streams.on_both_workers(lambda: leaked, lambda value: produce(topic, value))
    kept_streams = streams.on_both_workers(lambda: kept, lambda value: produce(topic, value))
    do_revoke(guard=guard, jti="leaked", until=timezone.now() + timedelta(seconds=15))
    for stream in leaked_streams:
        wait_until(lambda stream=stream: ended_revoked(stream), timeout=5)  # type: ignore[misc]
    assert_refused_as_revoked(port, path, leaked)
    produce(topic, b"after")
    for stream in kept_streams:
        wait_until(lambda stream=stream: has(stream, "after"), timeout=15)  # type: ignore[misc]
        assert not stream.closed

    def status() -> int:  # a stream's response headers, then the stream is left
        headers = {"authorization": f"Bearer {leaked}"}
        with httpx.stream("GET", f"http://{HOST}:{port}{path}", headers=headers, timeout=5) as response:
            return response.status_code

    # Past `until`, with no restart and no write: served again, by whichever worker takes the request.
    wait_until(lambda: all(status() == 200 for _ in range(4)), timeout=30, interval=0.5)


def test_a_process_that_cannot_hear_redis_applies_a_revocation_within_its_refresh(
    behind_a_cuttable_redis: tuple[DaphneServer, TcpProxy],
    guarded: tuple[str, str, str],
    produce: Callable[..., tuple[int, int]],
) -> None:
    server, proxy = behind_a_cuttable_redis
    guard, path, topic = guarded
    stream = RawStream(server.port, path, headers={"authorization": f"Bearer {token('alice')}"})
    try:
        produce(topic, b"one")
        read_until(stream, 1)
        proxy.cut()
        do_revoke(guard=guard, identity="alice", until=timezone.now() + timedelta(hours=1))  # announced unheard
        wait_until(lambda: ended_revoked(stream), timeout=REFRESH_S + 5)
        assert_refused_as_revoked(server.port, path, token("alice"))
    finally:
        stream.close()
