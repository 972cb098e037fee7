"""Against a live server: a stream that ends leaves nothing for the cyclic collector, whether it started fresh,
resumed with a Last-Event-ID or was refused. Its objects go as soon as it ends, by reference counting.

Before, each one left about 42 objects in reference cycles (the stream and its pump through the pump's
`on_gone`, the pump and its keep-alive timer, a connection's own `connectionLost` put back on it), freed only by
a full collection: 10 000 clients reconnecting at once left 420 000 behind, and every full collection of a worker
with 10 000 streams open scanned them (docs/benchmarks.md, "Reconnect storms").
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import unique, wait_until
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.support.servers import HOST, DaphneServer, start_daphne

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = 100  # of each kind
# A stream's own objects, and its connection's. (A reload of the route table, which the test's routes set off in
# the background, leaves its model instances in cycles: once per reload, not per stream.)
PLATFORM = ("streams.", "daphne.", "twisted.", "channels.")
ONCE_PER_PROCESS = 10  # fewer of one type than this is not per request (there are 100 of each kind)


@pytest.fixture
def probed(tmp_path: Path, django_db_setup: None) -> Iterator[tuple[DaphneServer, Path]]:
    out = tmp_path / "garbage.json"
    env = {"GC_PROBE_OUT": str(out), "SSE_MAX_STREAMS_PER_CLIENT": "0", "SSE_MAX_CONNECTIONS_PER_CLIENT": "0"}
    server = start_daphne(env, module="tests.support.gc_probe", log_name=unique("test-daphne-garbage"))
    yield server, out
    server.stop()


def garbage(server: DaphneServer, out: Path) -> dict[str, int]:
    """What a full collection of the server finds now, by type."""
    out.unlink(missing_ok=True)
    os.kill(server.process.pid, signal.SIGUSR1)
    wait_until(out.exists, timeout=30)
    found: dict[str, int] = json.loads(out.read_text())["types"]
    return found


def request(port: int, path: str, last_id: str | None = None) -> tuple[socket.socket, bytes]:
    """A stream's request; the socket and what came first (status line, headers, maybe events)."""
    sock = socket.create_connection((HOST, port), timeout=10)
    resume = f"Last-Event-ID: {last_id}\r\n" if last_id else ""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/event-stream\r\n{resume}\r\n".encode())
    return sock, sock.recv(65536)


def request_status(port: int, path: str) -> bytes:
    sock, received = request(port, path)
    sock.close()
    return received[9:12]


def first_id(sock: socket.socket, received: bytes) -> str:
    while b"\nid:" not in received and not received.startswith(b"id:"):
        received += sock.recv(65536)
    line = received.split(b"id:", 1)[1].split(b"\n", 1)[0]
    return line.strip().decode()


def tracked(server: DaphneServer) -> int:
    count: int = httpx.get(f"{server.url}/-/health", timeout=5).json()["server_connections"]
    return count - 1  # less the request asking


def test_ended_streams_leave_no_cyclic_garbage(
    probed: tuple[DaphneServer, Path], new_topic: Callable[..., str], produce: Produce
) -> None:
    server, out = probed
    topic = new_topic()
    path = route(topic, start="historical")
    missing = route(unique("no-such-topic"))
    for index in range(3):
        produce(topic, b'{"n":%d}' % index)
    sock, received = request(server.port, path)
    last_id = first_id(sock, received)
    sock.close()
    wait_until(lambda: request_status(server.port, missing) == b"404", timeout=30)
    wait_until(lambda: tracked(server) == 0, timeout=30)
    garbage(server, out)  # whatever start-up left, collected before the streams

    socks: list[socket.socket] = []
    try:
        for _ in range(STREAMS):
            for last in (None, last_id):
                sock, received = request(server.port, path, last)
                assert received.startswith(b"HTTP/1.1 200"), received[:200]
                socks.append(sock)
            sock, received = request(server.port, missing)
            assert received.startswith(b"HTTP/1.1 404"), received[:200]
            socks.append(sock)
    finally:
        for sock in socks:
            sock.close()
    wait_until(lambda: tracked(server) == 0, timeout=30)

    found = garbage(server, out)
    # A few of Twisted's logging objects, once per process: start-up replaces them after the collector froze them.
    ours = {name: count for name, count in found.items() if name.startswith(PLATFORM) and count >= ONCE_PER_PROCESS}
    assert ours == {}, f"objects of the platform's stack left in cycles by {3 * STREAMS} requests: {ours}"
    # What is left is not per request (a reload of the route table, the describes of the unknown topic shared by
    # the requests naming it, kept from the collector while it froze during the requests' burst): fewer of each
    # type than one per stream of a kind, where there were about 42 per stream.
    per_request = {name: count for name, count in found.items() if count >= STREAMS}
    assert per_request == {}, json.dumps(found)
