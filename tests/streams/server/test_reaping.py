"""Against a live server: daphne's table of connections forgets each one once its client has gone and its
application has finished, now that it is reaped when that happens rather than by a walk over all of them every
second (streams/server/reaping.py). A connection left in the table would be a leak of its request, its scope
and its application's task, growing with every stream ever served."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e.test_zilla_scenarios import route
from tests.streams.server.test_request_bodies import PATIENCE_S, connect, server
from tests.support.servers import HOST, DaphneServer

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["server"]  # the live server, as a fixture

STREAMS = 40


def tracked(server: DaphneServer) -> int:
    """The server's `server_connections`, less the request asking for it."""
    count: int = httpx.get(f"{server.url}/-/health", timeout=5).json()["server_connections"]
    return count - 1


def open_stream(port: int, path: str) -> socket.socket:
    sock = connect(port)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/event-stream\r\n\r\n".encode())
    sock.settimeout(10)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    return sock


def test_streams_whose_clients_left_are_forgotten_and_the_others_kept(
    server: DaphneServer, new_topic: Callable[..., str]
) -> None:
    path = route(new_topic())
    wait_until(lambda: tracked(server) == 0, timeout=PATIENCE_S)  # earlier requests (readiness checks) reaped
    socks: list[socket.socket] = []
    try:
        socks += [open_stream(server.port, path) for _ in range(STREAMS)]
        wait_until(lambda: tracked(server) == STREAMS, timeout=PATIENCE_S)
        for sock in socks[: STREAMS // 2]:
            sock.close()
        wait_until(lambda: tracked(server) == STREAMS // 2, timeout=PATIENCE_S)
    finally:
        for sock in socks:
            sock.close()
    wait_until(lambda: tracked(server) == 0, timeout=PATIENCE_S)


def test_a_finished_response_on_a_connection_still_open_is_forgotten_when_the_connection_closes(
    server: DaphneServer,
) -> None:
    wait_until(lambda: tracked(server) == 0, timeout=PATIENCE_S)
    with connect(server.port) as sock:
        for _ in range(3):  # three requests on one kept-alive connection: three entries, each reaped when done
            sock.sendall(f"GET /-/health HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        wait_until(lambda: tracked(server) == 0, timeout=PATIENCE_S)
