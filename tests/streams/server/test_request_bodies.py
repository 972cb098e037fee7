"""Against a worker, over raw sockets: a request body past the bound is refused while it arrives, and the
connection closed, with a JSON problem (streams/server/bodies.py); so is a body not complete in time (408), and a
new body while the process holds its most of them (503). These are what reaches a worker behind the edge, which
refuses what a request declares (tests/deployment/test_edge.py) but passes a body of no declared length and holds
at most 16 KiB of one against its deadline.

Before: daphne read a 16 MiB chunked body to the end and then answered, and waited for all of a declared 64 MiB API
body, spooling it to a temporary file, before the app saw the request. A body within its bound had no deadline: the
headers of `POST /admin/login/`, then a byte now and then, held a request (and what had come of its body) for as
long as the client liked, and any number of them at once.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import unique, wait_until
from tests.e2e.test_http2 import Web, web_with_https
from tests.streams.edge.test_metrics import scrape, value
from tests.support.h2client import H2Client
from tests.support.servers import HOST, DaphneServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.beside]
MiB = 1024 * 1024
API_MAX_BODY = 64 * 1024
# What a refused client may still get to send: its own send buffer and the server's receive buffer, which the
# server does not read. Generous: the kernel sizes them, a few hundred KiB here. A body read to the end is 16 MiB.
KERNEL_BUFFERS = 4 * MiB
PIECE = 64 * 1024
BODY_TIMEOUT_S = 2
PATIENCE_S = 30.0  # the longest a test waits for the server: far past every bound above
HELD_BODIES = 2 * API_MAX_BODY  # on `web`: two bodies of the largest size
EDGE_BUFFER = 20 * 1024  # more than the edge holds of a body before it hands the request on (16 KiB)


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: object) -> Iterator[DaphneServer]:
    env = {
        "HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "API_MAX_BODY_BYTES": str(API_MAX_BODY),
    }
    started = start_daphne(env, log_name=unique("test-daphne-bounds"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def web(django_db_setup: None, django_db_blocker: object) -> Iterator[Web]:
    """platform/web.py with its edge, HTTPS and HTTP/2 offered: one worker, the same bound as `server` but the body
    deadline (the default, far past what a test takes), and room for `HELD_BODIES` bytes of bodies."""
    env = {
        "API_MAX_BODY_BYTES": str(API_MAX_BODY),
        "HTTP_BODIES_MAX_BYTES": str(HELD_BODIES),
    }
    with web_with_https(**env) as started:
        yield started


@dataclass
class Sent:
    answer: bytes  # what the server answered, status line first; b"" for nothing
    body_bytes: int  # body bytes (chunk framing included) the client got to send
    closed: bool  # the server closed the connection

    @property
    def status(self) -> int:
        return int(self.answer.split(b" ", 2)[1]) if self.answer.startswith(b"HTTP/1.1 ") else 0

    def header(self, name: bytes) -> bytes | None:
        head = self.answer.partition(b"\r\n\r\n")[0]
        for line in head.split(b"\r\n")[1:]:
            field, _, value = line.partition(b":")
            if field.strip().lower() == name:
                return value.strip()
        return None

    def problem(self) -> dict[str, object]:
        head, _, body = self.answer.partition(b"\r\n\r\n")
        assert b"content-type: application/problem+json" in head.lower()
        parsed: dict[str, object] = json.loads(body)
        return parsed


def connect(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PIECE)  # keep what the kernel takes for us small
    return sock


def send_body(port: int, head: bytes, size: int, *, chunked: bool) -> Sent:
    """Send `head`, then a body of `size` bytes until the server answers and closes or all of it went."""
    sock = connect(port)
    sock.sendall(head)
    sock.setblocking(False)
    piece = (b"%x\r\n" % PIECE) + b"x" * PIECE + b"\r\n" if chunked else b"x" * PIECE
    pieces = size // PIECE
    pending, sent, answer, closed = b"", 0, b"", False
    started = time.monotonic()
    while not closed and time.monotonic() - started < PATIENCE_S:
        if not pending and pieces:
            pending, pieces = piece, pieces - 1
        elif not pending and chunked and pieces == 0:
            pending, pieces = b"0\r\n\r\n", -1
        readable, writable, _ = select.select([sock], [sock] if pending else [], [], 0.5)
        if readable:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            answer += data
            closed = not data
        if writable and not closed:
            try:
                taken = sock.send(pending)
            except BlockingIOError:
                continue
            except OSError:  # reset or broken pipe: the server closed
                closed = True
                continue
            sent += taken
            pending = pending[taken:]
    sock.close()
    return Sent(answer, sent, closed)


def request_head(method: str, path: str, *framing: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", "Content-Type: application/json", *framing]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_declared_api_body_over_the_bound_is_refused_before_any_of_it_is_sent(server: DaphneServer) -> None:
    sock = connect(server.port)
    sock.sendall(request_head("POST", "/api/v1/routes/", f"Content-Length: {64 * MiB}"))
    sock.settimeout(PATIENCE_S)
    answer = b""
    while chunk := sock.recv(65536):  # until the server closes: it must, having answered
        answer += chunk
    sent = Sent(answer, 0, True)
    assert sent.status == 413
    assert sent.problem()["title"] == "Content too large"
    sock.close()


@pytest.mark.parametrize("path", ["/api/v1/routes/", "/items"])
def test_a_chunked_body_is_refused_once_past_the_bound_and_one_within_it_reaches_the_api(
    server: DaphneServer, path: str
) -> None:
    """What daphne's own factory would read to the end: `BoundedRequest`, which it builds in place of daphne's
    request (docs/decisions/0013, item 2), refuses it at its first bytes past the bound."""
    head = request_head("POST", path, "Transfer-Encoding: chunked")
    over = send_body(server.port, head, 16 * MiB, chunked=True)
    assert over.status == 413
    assert over.closed
    assert over.body_bytes < API_MAX_BODY + KERNEL_BUFFERS, f"the client got {over.body_bytes} bytes in"
    assert value(scrape(server.url), "sse_connections_cut_total", reason="body_too_large") >= 1
    head = request_head("POST", "/api/v1/routes/", "Transfer-Encoding: chunked")

    body = json.dumps({"name": "x", "path": "/x", "topic": "x"}).encode()
    sock = connect(server.port)
    sock.sendall(head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    sock.settimeout(PATIENCE_S)
    within = Sent(sock.recv(65536), len(body), False)
    sock.close()
    assert within.status in {401, 403}  # the API read it: without a token, it refuses it for that


def pumped(client: H2Client) -> bool:
    client.pump(0.2)
    return True


def post(client: H2Client, path: str, *, content_length: int, body: bytes = b"") -> int:
    """Open a stream with a POST of `path` declaring `content_length`, `body` sent and the stream left open unless
    that is all of it."""
    stream: int = client.conn.get_next_available_stream_id()
    headers = [(":method", "POST"), (":path", path), (":scheme", "https"), (":authority", HOST),
               ("content-length", str(content_length))]  # fmt: skip
    client.conn.send_headers(stream, headers)
    if body:
        client.conn.send_data(stream, body, end_stream=len(body) == content_length)
    client.sock.sendall(client.conn.data_to_send())
    return stream


def trickle(sock: socket.socket, piece: bytes, every_s: float, patience_s: float) -> Sent:
    """Send `piece` every `every_s` until the server answers and closes, or for `patience_s`."""
    sock.setblocking(False)
    answer, sent, closed = b"", 0, False
    started = time.monotonic()
    next_piece = started
    while not closed and time.monotonic() - started < patience_s:
        readable, _, _ = select.select([sock], [], [], max(0.0, next_piece - time.monotonic()))
        if readable:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            answer += data
            closed = not data
        elif time.monotonic() >= next_piece:
            try:
                sent += sock.send(piece)
            except OSError:  # the server closed, and said so with a reset
                closed = True
            next_piece += every_s
    return Sent(answer, sent, closed)


def body_bytes_held(url: str) -> int:
    held: int = httpx.get(f"{url}/-/health", timeout=10).json()["request_body_bytes_held"]
    return held


@pytest.mark.parametrize(
    ("framing", "piece"),
    [("Content-Length: 10000", b"x"), ("Transfer-Encoding: chunked", b"1\r\nx\r\n")],
    ids=["content-length", "chunked"],
)
def test_a_body_trickled_past_its_deadline_is_refused_408_and_let_go(
    server: DaphneServer, framing: str, piece: bytes
) -> None:
    """The body deadline does not move for bytes that keep coming: a byte every 200 ms is cut at it."""
    sock = connect(server.port)
    started = time.monotonic()
    sock.sendall(request_head("POST", "/admin/login/", framing))
    sent = trickle(sock, piece, every_s=0.2, patience_s=5 * BODY_TIMEOUT_S)
    cut_after = time.monotonic() - started
    sock.close()

    assert sent.status == 408, f"after {cut_after:.1f} s, {sent.body_bytes} bytes sent: {sent.answer[:200]!r}"
    assert sent.problem()["title"] == "Request timeout"
    assert sent.closed
    assert BODY_TIMEOUT_S - 0.05 <= cut_after < 4 * BODY_TIMEOUT_S, f"cut after {cut_after:.1f} s"
    assert wait_until(lambda: body_bytes_held(server.url) == 0)
    assert value(scrape(server.url), "sse_connections_cut_total", reason="body_timeout") >= 1


def test_past_the_process_bound_on_held_bodies_a_new_body_is_refused_503_until_one_is_let_go(web: Web) -> None:
    """Two requests that declared bodies of the largest size hold all the process may hold, however little of them
    came (past the edge's buffer: the edge hands a request on once it holds 16 KiB of its body): a third body is
    refused at once, not held; once a client goes, its room is another's."""
    url = f"http://{HOST}:{web.port}"
    holders = [connect(web.port) for _ in range(2)]
    try:
        for holder in holders:
            head = request_head("POST", "/admin/login/", f"Content-Length: {API_MAX_BODY}")
            holder.sendall(head + b"x" * EDGE_BUFFER)
        assert wait_until(lambda: body_bytes_held(url) == HELD_BODIES)

        sock = connect(web.port)
        sock.sendall(request_head("POST", "/api/v1/routes/", "Content-Length: 1000") + b"x" * 1000)
        refused = trickle(sock, b"", every_s=PATIENCE_S, patience_s=PATIENCE_S)  # until the answer and the close
        sock.close()
        assert refused.status == 503, refused.answer[:300]
        assert refused.problem()["title"] == "Server busy"
        assert refused.header(b"retry-after") == b"5"
        assert refused.closed
        client = H2Client(web.tls_port)
        try:
            over_http2 = post(client, "/api/v1/routes/", content_length=1000, body=b"x" * 1000)
            wait_until(lambda: pumped(client) and over_http2 in client.ended | client.reset, timeout=PATIENCE_S)
            assert client.status.get(over_http2) == 503
        finally:
            client.close()
        assert body_bytes_held(url) == HELD_BODIES

        holders.pop().close()
        assert wait_until(lambda: body_bytes_held(url) == API_MAX_BODY)
        body = json.dumps({"name": "x", "path": "/x", "topic": "x"}).encode()
        sock = connect(web.port)
        sock.sendall(request_head("POST", "/api/v1/routes/", f"Content-Length: {len(body)}") + body)
        sock.settimeout(PATIENCE_S)
        admitted = Sent(sock.recv(65536), len(body), False)
        sock.close()
        assert admitted.status in {401, 403}  # the API read it
    finally:
        for holder in holders:
            holder.close()
    assert wait_until(lambda: body_bytes_held(url) == 0)
    assert value(scrape(url), "sse_connections_cut_total", reason="bodies_held_full") >= 2
