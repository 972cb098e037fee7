"""Against a live server: a stream is one task, its request's, and it ends at once, with its reason, however it
ends: its client goes (over HTTP/1.1, or over HTTP/2 by resetting the stream or dropping the connection), its
route changes, its token is revoked."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from bindings.services import do_put_guard, do_put_route, do_revoke
from tests.conftest import unique, wait_until
from tests.e2e.test_http2 import web_with_https
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.streams.edge.test_metrics import scrape, value
from tests.support.h2client import H2Client, Pumping
from tests.support.jwt_keys import guard_fields, token
from tests.support.rawsse import RawStream
from tests.support.servers import DaphneServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.beside]

STREAMS = 12
PROMPTLY_S = 3.0  # well under daphne's application_close_timeout (10 s), after which it cancels what is left


class Probed:
    """The server, run with the probe that counts its pending asyncio tasks (tests/support/gc_probe.py)."""

    def __init__(self, server: DaphneServer, out: Path) -> None:
        self.server, self.out = server, out
        self.url, self.port = server.url, server.port

    def tasks(self) -> int:
        self.out.unlink(missing_ok=True)
        os.kill(self.server.process.pid, signal.SIGUSR1)
        wait_until(self.out.exists, timeout=30)
        count: int = json.loads(self.out.read_text())["tasks"]
        return count


@pytest.fixture
def server(tmp_path: Path, django_db_setup: None) -> Iterator[Probed]:
    out = tmp_path / "probe.json"
    env = {
        "GC_PROBE_OUT": str(out), "LOG_FORMAT": "json",
        "SSE_MAX_STREAMS_PER_CLIENT": "0", "SSE_MAX_CONNECTIONS_PER_CLIENT": "0",
    }  # fmt: skip
    started = start_daphne(env, module="tests.support.gc_probe", log_name=unique("test-daphne-ends"))
    yield Probed(started, out)
    started.stop()


def health(url: str) -> dict[str, int]:
    body: dict[str, int] = httpx.get(f"{url}/-/health", timeout=5, verify=False).json()  # noqa: S501  (self-signed)
    return body


def closed(url: str, path: str, reason: str) -> float:
    return value(scrape(url), "sse_streams_closed_total", route=path[1:], reason=reason)


def registered(stream: RawStream, marker: str) -> bool:
    """Whether `stream` has received the event `marker` (so it is registered and parked), reading meanwhile."""
    stream.pump(0.1)
    return any(event.text == marker for event in stream.events())


def ended(stream: RawStream) -> bool:
    """Whether the server has ended `stream`'s response, reading what arrives meanwhile."""
    stream.pump(0.1)
    return stream.closed


def opened(server: Probed, path: str, produce: Callable[[bytes], object], n: int) -> list[RawStream]:
    streams = [RawStream(server.port, path) for _ in range(n)]
    marker = unique("mark")
    produce(marker.encode())
    for stream in streams:
        wait_until(lambda stream=stream: registered(stream, marker), timeout=15)  # type: ignore[misc]
    return streams


def test_a_stream_is_one_task_and_ends_at_once_when_its_client_goes(
    server: Probed, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    path = route(topic)
    # The hub and its tasks start with the first stream, and stay.
    for stream in opened(server, path, lambda data: produce(topic, data), 1):
        stream.close()
    wait_until(lambda: health(server.url)["streams"] == 0, timeout=PROMPTLY_S)
    idle = server.tasks()  # the process's own

    streams = opened(server, path, lambda data: produce(topic, data), STREAMS)
    assert health(server.url)["streams"] == STREAMS
    # One task per stream, the one daphne made for its request (it used to be three).
    wait_until(lambda: server.tasks() == idle + STREAMS, timeout=10)

    streams.pop().close()
    wait_until(lambda: health(server.url)["streams"] == STREAMS - 1, timeout=PROMPTLY_S)
    for stream in streams:
        stream.close()
    wait_until(lambda: health(server.url)["streams"] == 0, timeout=PROMPTLY_S)
    wait_until(lambda: server.tasks() == idle, timeout=PROMPTLY_S)
    assert closed(server.url, path, "client_gone") == STREAMS + 1

    records = [json.loads(line) for line in server.server.log_path.read_text().splitlines() if line.startswith("{")]
    ends = [r.get("end") for r in records if r["logger"] == "access" and r.get("path") == path]
    assert ends == ["client_gone"] * (STREAMS + 1)


def test_a_stream_ended_by_its_route_or_its_revoked_token_ends_with_that_reason(
    server: Probed, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    changing = route(topic)
    guard, guarded = unique("jwt"), "/" + unique("guarded")
    do_put_guard(**guard_fields(guard))
    do_put_route(name=guarded[1:], path=guarded, topic=topic, guarded={guard: ["read"]})
    marker = unique("mark")
    on_route = RawStream(server.port, changing)
    revoked = RawStream(server.port, guarded, headers={"authorization": f"Bearer {token('alice')}"})
    produce(topic, marker.encode())
    for stream in (on_route, revoked):
        wait_until(lambda stream=stream: registered(stream, marker), timeout=15)  # type: ignore[misc]
    during = server.tasks()

    do_put_route(name=changing[1:], paths=[changing], topic=topic, filters=[{"key": "k"}])
    wait_until(lambda: ended(on_route), timeout=10)
    do_revoke(guard=guard, identity="alice", until=timezone.now() + timedelta(hours=1), reason="left")
    wait_until(lambda: ended(revoked), timeout=10)
    assert revoked.events()[-1].event == "revoked"  # its farewell, last

    wait_until(lambda: health(server.url)["streams"] == 0, timeout=PROMPTLY_S)
    assert closed(server.url, changing, "route_changed") == 1
    assert closed(server.url, guarded, "revoked") == 1
    wait_until(lambda: server.tasks() == during - 2, timeout=PROMPTLY_S)  # they leave no task behind
    for stream in (on_route, revoked):
        stream.close()


def test_an_http2_stream_ends_at_once_when_its_client_resets_it_or_drops_the_connection(
    new_topic: Callable[..., str], produce: Produce
) -> None:
    with web_with_https() as web:
        topic = new_topic()
        path = route(topic)
        client = H2Client(web.tls_port)
        streams = [client.get(path) for _ in range(3)]
        pumping = Pumping(client)
        try:
            marker = unique("mark")
            produce(topic, marker.encode())
            wait_until(lambda: all(client.events(s) for s in streams), timeout=15)
            assert web.health()["streams"] == 3
            client.cancel(streams[0])
            wait_until(lambda: web.health()["streams"] == 2, timeout=PROMPTLY_S)
            assert closed(f"http://127.0.0.1:{web.port}", path, "client_gone") == 1
        finally:
            pumping.stop()
            client.close()
        wait_until(lambda: web.health()["streams"] == 0, timeout=PROMPTLY_S)
        assert closed(f"http://127.0.0.1:{web.port}", path, "client_gone") == 3


def test_an_http2_stream_the_server_resets_for_falling_behind_ends_as_a_slow_client(
    new_topic: Callable[..., str], produce: Produce
) -> None:
    """The reset tells the flow its client is gone from within the stream's own task, while its pump is closing
    it: the stream ends as the pump says, not as a client that left."""
    with web_with_https(SSE_MAX_PENDING_BYTES=str(64 * 1024), SSE_STALL_GRACE_MS="200") as web:
        topic = new_topic()
        path = route(topic)
        client = H2Client(web.tls_port)
        stalled = client.get(path)
        client.stall(stalled)
        pumping = Pumping(client)
        try:
            wait_until(lambda: web.health()["streams"] == 1, timeout=15)
            for index in range(64):  # 2 MiB: far more than its window, its queue and the bound
                produce(topic, b'{"i": %d, "pad": "%s"}' % (index, b"x" * 32 * 1024))
            # The worker closes it; the edge, which cannot finish its body, lets it go.
            wait_until(lambda: stalled in client.reset | client.ended, timeout=30)
            wait_until(lambda: web.health()["streams"] == 0, timeout=PROMPTLY_S)
            metrics = f"http://127.0.0.1:{web.port}"
            assert closed(metrics, path, "slow_client") == 1
            assert closed(metrics, path, "client_gone") == 0
            assert not client.lost  # its connection stayed up
        finally:
            pumping.stop()
            client.close()
