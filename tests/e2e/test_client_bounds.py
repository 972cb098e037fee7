"""What one client address can hold of a node (the edge and a worker), with the settings a user gets: streams that
wait on a shut HTTP/2 window cost no CPU while they wait, and are reset once they took nothing for the edge's client
timeout; a reader that takes a trickle is closed once it fails to catch up in SSE_CATCH_UP_S; streams and
connections per address are capped, HTTP/2 included.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import h2.exceptions
import pytest

from bindings.selectors import START_LIVE
from tests.conftest import wait_until
from tests.e2e.test_http2 import SMALL_BUFFERS, value, web_with_https
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.streams.edge.test_limits import route_on
from tests.support.h2client import H2Client, tls_context
from tests.support.servers import HOST

pytestmark = pytest.mark.django_db(transaction=True)
DEFAULT_STREAMS_PER_CLIENT = 100  # SSE_MAX_STREAMS_PER_CLIENT's default
DEFAULT_CONNECTIONS_PER_CLIENT = 100  # SSE_MAX_CONNECTIONS_PER_CLIENT's default


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_zero_window_streams(port: int, path: str, connections: int, per_connection: int) -> list[H2Client]:
    """Clients that offer each stream a window of 0 bytes and never open it: the server can send response headers
    only. Returns them once every stream has its status."""
    clients = [H2Client(port, window=0) for _ in range(connections)]
    for client in clients:
        for _ in range(per_connection):
            client.get(path)

    def answered() -> bool:
        for client in clients:
            client.pump(timeout=0.05)
        return sum(len(client.status) for client in clients) == connections * per_connection

    wait_until(answered, timeout=30)
    return clients


def statuses(clients: list[H2Client]) -> list[int]:
    return sorted(status for client in clients for status in client.status.values())


def test_http2_streams_waiting_on_a_shut_window_cost_no_cpu(new_topic: Callable[..., str]) -> None:
    """Before, each paused stream re-armed a 20 ms timer and its pump woke every 250 ms, and once its keep-alive was
    due its timer fired on every turn of the loop: 100 such streams kept a worker busy. Now a paused stream is
    woken by its window opening, or when one of its bounds is due. The keep-alive comes every second here, so
    that the measurement sees many of them."""
    with web_with_https() as web:
        path = route_on(new_topic(), keepalive_s=1)
        clients = open_zero_window_streams(web.tls_port, path, connections=2, per_connection=50)
        try:
            assert statuses(clients) == [200] * 100
            wait_until(lambda: web.health()["streams"] == 100)
            time.sleep(1)  # the streams' first writes, held by the window, have paused them all
            before = sum(cpu_seconds(pid) for pid in web.pids())
            time.sleep(5)
            spent = sum(cpu_seconds(pid) for pid in web.pids()) - before
            assert web.health()["streams"] == 100  # all held open all along
        finally:
            for client in clients:
                client.close()
    assert spent < 0.15, f"{spent:.2f} s of CPU in 5 s for 100 waiting streams"  # before: 0.30-0.32 s (worker)


def test_http2_streams_past_the_per_address_cap_are_refused(new_topic: Callable[..., str]) -> None:
    with web_with_https() as web:
        clients = open_zero_window_streams(web.tls_port, route(new_topic()), connections=2, per_connection=75)
        try:
            assert statuses(clients) == [200] * DEFAULT_STREAMS_PER_CLIENT + [429] * 50
            assert web.health()["streams"] == DEFAULT_STREAMS_PER_CLIENT
        finally:
            for client in clients:
                client.close()


def answered_over_http1(port: int) -> bool:
    """Whether the plain port answers a request on a new connection (a refused one is closed unanswered)."""
    with socket.create_connection((HOST, port), timeout=5) as sock:
        try:
            sock.sendall(b"GET /-/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False


def tls_handshake_succeeds(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=5) as raw:
            tls_context(["h2"]).wrap_socket(raw, server_hostname="localhost").close()
    except OSError:
        return False
    return True


def test_connections_past_the_per_address_cap_are_closed_on_either_port() -> None:
    with web_with_https() as web:
        port = int(web.port)
        held = [socket.create_connection((HOST, port), timeout=5) for _ in range(DEFAULT_CONNECTIONS_PER_CLIENT - 1)]
        tls = H2Client(web.tls_port)  # the last one this address may hold, over TLS: the ports share one count
        try:
            tls.get("/-/health")

            def tls_answered() -> bool:
                tls.pump(0.1)
                return bool(tls.status)

            wait_until(tls_answered)
            assert not answered_over_http1(port)
            assert not tls_handshake_succeeds(web.tls_port)
            held.pop().close()
            assert wait_until(lambda: answered_over_http1(port))  # a connection closed makes room for another
        finally:
            tls.close()
            for sock in held:
                sock.close()


def test_a_reader_that_takes_a_trickle_is_closed_once_it_fails_to_catch_up(
    new_topic: Callable[..., str], produce: Produce
) -> None:
    """A reader that takes a little at a time never stays full for long: the stall clock, which restarted on every
    drain, never closed it, and it held a reader of history for as long as it liked."""
    with web_with_https(**SMALL_BUFFERS, SSE_CATCH_UP_S="3") as web:
        topic = new_topic()
        for index in range(640):  # 20 MiB, more than the cache (4 MiB): the stream replays it through Kafka
            produce(topic, value(index, 32 * 1024))
        client = H2Client(web.tls_port)
        client.get(route(topic, start=START_LIVE))  # brings the topic into the cache from its end
        wait_until(lambda: web.health().get("cached_topics") == 1)
        stream = client.get(route(topic))  # from the earliest offset, long gone from the cache
        client.stall(stream)
        started = time.monotonic()
        try:
            wait_until(lambda: web.health()["historical_readers"] == 1)
            # 64 KiB every 100 ms: the stream's queue empties within a second each time it fills, but 20 MiB take
            # half a minute.
            while time.monotonic() - started < 30 and stream not in client.reset and not client.lost:
                client.pump(timeout=0.1)
                with contextlib.suppress(h2.exceptions.StreamClosedError):
                    client.open_window(stream, 64 * 1024)
            closed_after = time.monotonic() - started
            assert stream in client.reset, f"open after {closed_after:.1f} s, {client.received.get(stream)} bytes read"
            assert closed_after < 15, f"closed after {closed_after:.1f} s"
            assert client.received[stream] < 640 * 32 * 1024
            assert not client.lost  # the stream is reset, not its connection
            assert web.health()["closed_slow"] == 1
            wait_until(lambda: web.health()["historical_readers"] == 0)  # the reader of history it held is given back
        finally:
            client.close()


def test_a_refusal_held_by_a_shut_http2_window_is_reset_after_the_client_timeout() -> None:
    """A response that has ended, but whose body waits for a window the client never opens, held its stream, request
    and queue for as long as the connection lived: 100 streams per connection, 100 connections per address. The
    edge resets such a stream once it took nothing for its client timeout (HTTP_HEADER_TIMEOUT_S)."""
    with web_with_https(HTTP_HEADER_TIMEOUT_S="2") as web:
        (client,) = open_zero_window_streams(web.tls_port, "/no-such-route", connections=1, per_connection=10)
        try:
            assert statuses([client]) == [404] * 10  # the headers go out; the problem body waits for the window

            def all_reset() -> bool:
                client.pump(timeout=0.1)
                return len(client.reset) == 10

            wait_until(all_reset, timeout=20)
            assert not client.lost  # the streams are reset, not the connection
        finally:
            client.close()
