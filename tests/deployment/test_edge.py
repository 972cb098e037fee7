"""The edge (platform/edge/haproxy.cfg, run by platform/web.py) against raw sockets and HTTP/2 clients: headers
and TLS handshakes have a deadline that trickled bytes do not extend, a kept-alive connection with no request in
flight is closed while a stream in flight, however quiet, stays open; bodies are refused on what they declare, and
late ones at their deadline. What reaches the workers behind it is bounded by them too
(tests/streams/server/test_request_bodies.py).

Before the edge, the workers did all of this themselves, in code that replaced parts of Twisted's HTTP/1.1 and
HTTP/2 channels (docs/decisions/0013).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from bindings.services import do_put_endpoint, do_put_route
from tests.conftest import unique, wait_until
from tests.e2e.test_http2 import Web, web_with_https
from tests.e2e.test_zilla_scenarios import Produce, route
from tests.streams.server.test_request_bodies import (
    KERNEL_BUFFERS,
    MiB,
    Sent,
    connect,
    post,
    pumped,
    request_head,
    send_body,
    trickle,
)
from tests.support.h2client import H2Client
from tests.support.servers import HOST
from tests.support.sse_client import EventStream

pytestmark = pytest.mark.django_db(transaction=True)
HEADER_TIMEOUT_S = 2
IDLE_TIMEOUT_S = 3
BODY_TIMEOUT_S = 2
API_MAX_BODY = 64 * 1024
PATIENCE_S = 30.0  # the longest a test waits for the edge: far past every bound above


@pytest.fixture(scope="module")
def web(django_db_setup: None, django_db_blocker: object) -> Iterator[Web]:
    env = {
        "HTTP_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "HTTP_IDLE_TIMEOUT_S": str(IDLE_TIMEOUT_S),
        "HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "API_MAX_BODY_BYTES": str(API_MAX_BODY),
    }
    with web_with_https(**env) as started:
        yield started


def closed_within(sock: socket.socket, seconds: float, *, trickle: bytes = b"") -> float | None:
    """How long until the edge closes `sock` (None: not within `seconds`), sending a byte of `trickle` every
    half second meanwhile and dropping whatever the edge sends."""
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


# --- deadlines -------------------------------------------------------------------------------------------------


def test_headers_trickled_a_byte_at_a_time_are_cut_off_at_the_deadline(web: Web) -> None:
    sock = connect(web.port)
    sock.sendall(b"GET /-/health HTTP/1.1\r\n")
    elapsed = closed_within(sock, PATIENCE_S, trickle=b"X-Slow: " + b"a" * 200)
    sock.close()
    assert elapsed is not None, f"a header trickle still held its connection after {PATIENCE_S} s"
    assert elapsed >= HEADER_TIMEOUT_S - 1  # not before the deadline (it counts from the accept)


def test_a_tls_handshake_trickled_a_byte_at_a_time_is_cut_off_at_the_header_deadline(web: Web) -> None:
    sock = connect(web.tls_port)
    # The start of a TLS record announcing a 512-byte handshake message, then its bytes one by one.
    elapsed = closed_within(sock, PATIENCE_S, trickle=b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 200)
    sock.close()
    assert elapsed is not None, f"a trickled TLS handshake still held its connection after {PATIENCE_S} s"


def test_an_idle_kept_alive_connection_is_closed_while_a_quiet_stream_stays_open(
    web: Web, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic()
    path = route(topic)
    with EventStream(f"http://{HOST}:{web.port}{path}") as stream:
        sock = connect(web.port)
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


def test_a_client_that_closes_its_connection_ends_its_stream_at_once(web: Web, new_topic: Callable[..., str]) -> None:
    """Over HTTP/1.1 a client's FIN only says, strictly, that it sends nothing more; HTTP-compliant, HAProxy would
    keep the stream until its next write failed (a keep-alive later, or never on a quiet route without them).
    `option abortonclose` has it end the stream, and close the worker's connection, at once."""
    name = unique("edge-fin")
    do_put_endpoint(name=name, keepalive_s=30)
    do_put_route(name=name, path=f"/{name}", topic=new_topic(), endpoint=name)
    stream = EventStream(f"http://{HOST}:{web.port}/{name}")
    assert stream.next_block().retry is not None
    wait_until(lambda: web.health()["streams"] == 1)
    stream.close()  # everything read: a FIN, no reset
    wait_until(lambda: web.health()["streams"] == 0, timeout=3)


# --- bodies -----------------------------------------------------------------------------------------------------


def test_a_chunked_body_on_a_stream_path_is_refused_at_once_and_the_connection_closed(web: Web) -> None:
    sent = send_body(web.port, request_head("GET", "/items", "Transfer-Encoding: chunked"), 16 * MiB, chunked=True)
    assert sent.status == 400
    assert sent.problem()["detail"] == "A stream request has no body."
    assert sent.closed
    assert sent.body_bytes < KERNEL_BUFFERS, f"the client got {sent.body_bytes} bytes in before the refusal"


@pytest.mark.parametrize(
    ("path", "declared", "detail"),
    [
        ("/items", 4097, "The request body is over 4096 bytes."),  # a challenge response has no body
        ("/api/v1/routes/", 64 * MiB, "The request body is larger than this server takes."),
    ],
    ids=["challenge", "api"],
)
def test_a_declared_body_over_its_paths_bound_is_refused_before_any_of_it_is_sent(
    web: Web, path: str, declared: int, detail: str
) -> None:
    sock = connect(web.port)
    sock.sendall(request_head("POST", path, f"Content-Length: {declared}"))
    sock.settimeout(PATIENCE_S)
    answer = b""
    while chunk := sock.recv(65536):  # until the edge closes: it must, having answered
        answer += chunk
    sock.close()
    sent = Sent(answer, 0, True)
    assert sent.status == 413
    assert sent.problem()["detail"] == detail


def test_a_chunked_api_body_past_the_bound_gets_its_413_through_the_edge(web: Web) -> None:
    """The edge cannot count a body of no declared length: the worker refuses it at its first byte past the bound,
    and its answer must reach the client, not be lost to a reset while the body still comes."""
    head = request_head("POST", "/api/v1/routes/", "Transfer-Encoding: chunked")
    over = send_body(web.port, head, 16 * MiB, chunked=True)
    assert over.status == 413, over.answer[:300]
    assert over.problem()["title"] == "Content too large"
    assert over.closed


def test_an_api_body_within_the_bound_reaches_the_api(web: Web) -> None:
    body = json.dumps({"name": "x", "path": "/x", "topic": "x"}).encode()
    sock = connect(web.port)
    sock.sendall(request_head("POST", "/api/v1/routes/", f"Content-Length: {len(body)}") + body)
    sock.settimeout(PATIENCE_S)
    within = Sent(sock.recv(65536), len(body), False)
    sock.close()
    assert within.status in {401, 403}  # the API read it: without a token, it refuses it for that


def test_over_http2_a_body_past_the_bound_is_refused_on_its_stream_alone(web: Web) -> None:
    client = H2Client(web.tls_port)
    try:
        declared = post(client, "/api/v1/routes/", content_length=64 * MiB)
        on_stream = post(client, "/items", content_length=16384)  # a challenge response has no body
        answered = {declared, on_stream}
        wait_until(lambda: pumped(client) and answered <= client.ended | client.reset, timeout=PATIENCE_S)
        assert client.status.get(declared) == 413
        assert client.status.get(on_stream) == 413
        health = client.get("/-/health")  # the connection goes on
        wait_until(lambda: pumped(client) and health in client.ended, timeout=PATIENCE_S)
        assert client.status[health] == 200
        assert not client.lost
    finally:
        client.close()


def test_a_body_trickled_past_its_deadline_is_refused_408(web: Web) -> None:
    """The deadline does not move for bytes that keep coming: a byte every 200 ms is cut at it."""
    sock = connect(web.port)
    started = time.monotonic()
    sock.sendall(request_head("POST", "/admin/login/", "Content-Length: 10000"))
    sent = trickle(sock, b"x", every_s=0.2, patience_s=5 * BODY_TIMEOUT_S)
    cut_after = time.monotonic() - started
    sock.close()
    assert sent.status == 408, f"after {cut_after:.1f} s, {sent.body_bytes} bytes sent: {sent.answer[:200]!r}"
    assert sent.closed
    assert BODY_TIMEOUT_S - 0.05 <= cut_after < 4 * BODY_TIMEOUT_S, f"cut after {cut_after:.1f} s"
