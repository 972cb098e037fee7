"""What one client address can hold of a node (the edge and a worker), with the settings a user gets: streams that
wait on a shut HTTP/2 window cost no CPU while they wait, and are reset once they took nothing for the edge's client
timeout; a reader that takes a trickle is closed once it fails to catch up in SSE_CATCH_UP_S; streams and
connections per address are capped, HTTP/2 included.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.exceptions
import h2.settings
import pytest
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame

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
    try:
        sock = socket.create_connection((HOST, port), timeout=5)
    except OSError:  # refused as soon as accepted, even before the connect returned
        return False
    with sock:
        try:
            sock.sendall(b"GET /-/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False


def tls_handshake_succeeds(port: int) -> bool:
    """Whether a TLS handshake completes on a new connection. The handshake runs over memory buffers: wrapping the
    socket itself reads from it at once, and a connection the server reset by then raised out of `wrap_socket`,
    leaving the half-built TLS socket's descriptor open."""
    try:
        raw = socket.create_connection((HOST, port), timeout=5)
    except OSError:  # refused as soon as accepted, even before the connect returned
        return False
    with raw:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = tls_context(["h2"]).wrap_bio(incoming, outgoing, server_hostname="localhost")
        try:
            while True:
                try:
                    tls.do_handshake()
                    return True
                except ssl.SSLWantReadError:
                    raw.sendall(outgoing.read())
                    data = raw.recv(65536)
                    if not data:
                        return False
                    incoming.write(data)
        except (OSError, ssl.SSLError):
            return False


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
            assert wait_until(lambda: tls_handshake_succeeds(web.tls_port))  # on either port
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
            while time.monotonic() - started < 30 and stream not in client.reset | client.ended and not client.lost:
                client.pump(timeout=0.1)
                with contextlib.suppress(h2.exceptions.StreamClosedError):
                    client.open_window(stream, 64 * 1024)
            closed_after = time.monotonic() - started
            # Let go: the worker closed it; the edge, which cannot finish its body, ends or resets its stream.
            let_go = client.reset | client.ended
            assert stream in let_go, f"open after {closed_after:.1f} s, {client.received.get(stream)} bytes read"
            assert closed_after < 15, f"closed after {closed_after:.1f} s"
            assert client.received[stream] < 640 * 32 * 1024
            assert not client.lost  # the stream is reset, not its connection
            assert web.health()["closed_slow"] == 1
            wait_until(lambda: web.health()["historical_readers"] == 0)  # the reader of history it held is given back
        finally:
            client.close()


def test_a_refusal_held_by_a_shut_http2_window_is_let_go_after_the_client_timeout() -> None:
    """A response that has ended, but whose body waits for a window the client never opens, held its stream, request
    and queue for as long as the connection lived: 100 streams per connection, 100 connections per address. The
    edge lets such a stream go once it took nothing for its client timeout (HTTP_HEADER_TIMEOUT_S): it ends it
    short of its body (HAProxy 2.6 sends an empty last DATA frame), and the connection goes on."""
    with web_with_https(HTTP_HEADER_TIMEOUT_S="2") as web:
        raw = socket.create_connection((HOST, web.tls_port), timeout=5)
        sock = tls_context(["h2"]).wrap_socket(raw, server_hostname="localhost")
        try:
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
            streams = list(range(1, 21, 2))  # ten client streams
            for stream in streams:
                conn.send_headers(stream, request_headers("/no-such-route"), end_stream=True)
            sock.sendall(conn.data_to_send())
            frames = FrameReader(sock)
            started = time.monotonic()
            wait_until(lambda: frames.read() and frames.ended >= set(streams), timeout=20)
            let_go_after = time.monotonic() - started
            assert set(frames.status) == set(streams)  # the headers went out; the problem bodies waited
            assert all(frames.data.get(stream, 0) == 0 for stream in streams)
            assert let_go_after >= 1.5, f"let go after {let_go_after:.1f} s"
            assert not frames.goaway
            assert not frames.closed
        finally:
            sock.close()


def request_headers(path: str) -> list[tuple[str, str]]:
    return [(":method", "GET"), (":path", path), (":scheme", "https"), (":authority", HOST)]


class FrameReader:
    """HTTP/2 frames as they come, read without a client's state machine (h2 refuses a stream ended short of its
    content-length, which is what this reads)."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock, self.buffer = sock, b""
        self.status: dict[int, int] = {}
        self.data: dict[int, int] = {}
        self.ended: set[int] = set()
        self.goaway = self.closed = False
        sock.settimeout(0.1)

    def read(self) -> bool:
        try:
            received = self.sock.recv(65536)
        except TimeoutError:
            return True
        self.closed = not received
        self.buffer += received
        while len(self.buffer) >= FRAME_HEADER:
            frame, length = Frame.parse_frame_header(memoryview(self.buffer[:FRAME_HEADER]))
            if len(self.buffer) < FRAME_HEADER + length:
                break
            frame.parse_body(memoryview(self.buffer[FRAME_HEADER : FRAME_HEADER + length]))
            self.buffer = self.buffer[FRAME_HEADER + length :]
            self.take(frame)
        return True

    def take(self, frame: Frame) -> None:
        if isinstance(frame, HeadersFrame):
            self.status[frame.stream_id] = 0
        elif isinstance(frame, DataFrame):
            self.data[frame.stream_id] = self.data.get(frame.stream_id, 0) + len(frame.data)
        elif isinstance(frame, GoAwayFrame):
            self.goaway = True
        if isinstance(frame, RstStreamFrame) or "END_STREAM" in frame.flags:
            self.ended.add(frame.stream_id)


FRAME_HEADER = 9
