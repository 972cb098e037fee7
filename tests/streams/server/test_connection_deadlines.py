"""Against a live server, over raw sockets: headers have a deadline that trickled bytes do not extend, and a
kept-alive connection with no request in flight is closed, over HTTP/1.1 and HTTP/2, while a stream in flight,
however quiet, stays open (streams/server/deadlines.py).

Before, Twisted's only clock on a connection restarted on every byte (every frame over HTTP/2, a PING included),
and ran for 60 s: a header trickle of one byte every 20 s held its socket for hours.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest

from tests.conftest import wait_until
from tests.e2e.test_http2 import Web
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.streams.edge.test_metrics import scrape, value
from tests.streams.server.test_request_bodies import (
    HEADER_TIMEOUT_S,
    IDLE_TIMEOUT_S,
    PATIENCE_S,
    connect,
    pumped,
    server,
    web,
)
from tests.support.h2client import H2Client
from tests.support.servers import HOST, DaphneServer
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["server", "web"]  # the live servers, as fixtures


def closed_within(sock: socket.socket, seconds: float, *, trickle: bytes = b"") -> float | None:
    """How long until the server closes `sock` (None: not within `seconds`), sending a byte of `trickle` every
    half second meanwhile and dropping whatever the server sends."""
    started = time.monotonic()
    sock.settimeout(0.5)
    while (elapsed := time.monotonic() - started) < seconds:
        try:
            if trickle:
                sock.send(trickle[:1])
                trickle = trickle[1:]
            if sock.recv(65536) == b"":
                return elapsed
        except TimeoutError:
            continue
        except OSError:
            return elapsed
    return None


def test_headers_trickled_a_byte_at_a_time_are_cut_off_at_the_deadline(server: DaphneServer) -> None:
    sock = connect(server.port)
    sock.sendall(b"GET /-/health HTTP/1.1\r\n")
    elapsed = closed_within(sock, PATIENCE_S, trickle=b"X-Slow: " + b"a" * 200)
    sock.close()
    assert elapsed is not None, f"a header trickle still held its connection after {PATIENCE_S} s"
    assert elapsed >= HEADER_TIMEOUT_S - 1  # not before the deadline (it counts from the accept)
    assert value(scrape(server.url), "sse_connections_cut_total", reason="header_timeout") >= 1


def test_an_idle_kept_alive_connection_is_closed_while_a_quiet_stream_stays_open(
    server: DaphneServer, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    path = route(topic)
    with EventStream(server.url + path) as stream:
        sock = connect(server.port)
        sock.sendall(f"GET /-/health HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        elapsed = closed_within(sock, PATIENCE_S)
        sock.close()
        assert elapsed is not None, f"an idle kept-alive connection was still open after {PATIENCE_S} s"
        time.sleep(IDLE_TIMEOUT_S)  # the stream has now been quiet for twice the idle bound
        produce(topic, b"still here")
        assert stream.next_event(10).text == "still here"


def test_over_http2_connections_with_no_request_or_left_idle_are_closed_but_not_one_with_a_stream(
    web: Web, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    silent = H2Client(web.tls_port)  # the preface and settings, then nothing but PINGs
    idle = H2Client(web.tls_port)
    streaming = H2Client(web.tls_port)
    try:
        done = idle.get("/-/health")
        stream = streaming.get(route(topic))
        started = time.monotonic()
        while not silent.lost and time.monotonic() - started < PATIENCE_S:
            silent.conn.ping(b"12345678")
            silent.sock.sendall(silent.conn.data_to_send())
            silent.pump(0.5)
            idle.pump(0.1)
        assert silent.lost, f"an HTTP/2 connection that made no request was still open after {PATIENCE_S} s"
        wait_until(lambda: pumped(idle) and idle.lost, timeout=PATIENCE_S)
        assert idle.status[done] == 200
        produce(topic, b"still here")  # the stream has been quiet for many idle bounds by now
        wait_until(lambda: pumped(streaming) and streaming.events(stream), timeout=PATIENCE_S)
        assert [event.text for event in streaming.events(stream)] == ["still here"]
        assert not streaming.lost
    finally:
        silent.close()
        idle.close()
        streaming.close()


def test_a_tls_handshake_trickled_a_byte_at_a_time_is_cut_off_at_the_header_deadline(web: Web) -> None:
    sock = connect(web.tls_port)
    # The start of a TLS record announcing a 512-byte handshake message, then its bytes one by one.
    elapsed = closed_within(sock, PATIENCE_S, trickle=b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 200)
    sock.close()
    assert elapsed is not None, f"a trickled TLS handshake still held its connection after {PATIENCE_S} s"
