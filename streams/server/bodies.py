"""Request bodies bounded per path, refused while they arrive: nothing past the bound is read or kept.

daphne builds a request only once its whole body is in (spooled to a temporary file past 100 kB), so a refusal by
the app came after the last byte: a 16 MiB chunked body on a stream path was read to the end, then answered 400.
`BoundedRequest` learns the path and the declared length with the headers (`gotLength`, on HTTP/1.1 and HTTP/2)
and counts what arrives (`handleContentChunk`); past the path's bound it answers a problem and closes the
connection (HTTP/1.1) or resets the stream (HTTP/2, whose other streams go on). The app never sees the request.

The bounds (`body_bound`): a stream path takes no body, except a challenge response (POST), which has none by
contract but may carry `CHALLENGE_BODY_BYTES`; the paths Django serves (the reserved prefixes but `/-/`) take
`DATA_UPLOAD_MAX_MEMORY_SIZE`. Whatever is admitted stays in memory, so it is bounded in time and in total too:

- a body must be complete `HTTP_BODY_TIMEOUT_S` after its request's headers (a clock trickled bytes do not
  restart, armed only for a request that has a body); a late one is answered 408 and what came of it dropped;
- the bodies of all requests of the process together hold at most `HTTP_BODIES_MAX_BYTES` (`HeldBodies`), from
  their arrival (a declared `Content-Length` counts whole at once, a chunked body as it comes) until the response
  ends or the client goes; a body that would pass it is refused with a 503 and `retry-after`, not held.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from typing import Any
from urllib.parse import unquote

from daphne.http_protocol import WebRequest
from django.conf import settings
from h2.errors import ErrorCodes
from h2.exceptions import H2Error
from prometheus_client import Counter
from twisted.internet import reactor as twisted_reactor
from twisted.internet.error import ConnectionLost
from twisted.python.failure import Failure
from twisted.web._http2 import H2Stream

log = logging.getLogger(__name__)
reactor: Any = twisted_reactor  # typed loosely: its interface types `callLater` poorly

# A challenge response's body is empty by contract (streams/edge/side_requests.py reads up to this much).
CHALLENGE_BODY_BYTES = 4096
# Counted on each HTTP/2 connection, for its idle bound (streams/server/deadlines.py).
HTTP2_REQUESTS_SEEN = "sse_requests_seen"
# The app never sees these requests, so they are not among its refusals (`sse_refusals_total`): counted here.
CUT = Counter(
    "sse_connections_cut",
    "Requests and connections the server cut before the app saw a request, by reason.",
    ["reason"],
)
# Twisted internals read here; not public API (tests/streams/server/test_bounds_internals.py names what is gone).
CHANNEL_INTERNALS = ("_command", "_path")  # HTTP/1.1: the request line, known before `gotLength`
STREAM_INTERNALS = ("_conn", "streamID", "command", "path")
CONNECTION_INTERNALS = ("conn", "streams", "_tryToWriteControlData", "_requestDone")
# How `sse_connections_cut_total` names each refusal of a body.
CUT_REASONS = {400: "body_not_allowed", 408: "body_timeout", 413: "body_too_large", 503: "bodies_held_full"}
REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large", 503: b"Service Unavailable"}
Headers = tuple[tuple[bytes, bytes], ...]


class HeldBodies:
    """Request body bytes the process holds, all requests together (`HTTP_BODIES_MAX_BYTES`; `/-/health`)."""

    held = 0


def is_django_path(path: str) -> bool:
    """As streams/edge/endpoint.py routes: `/` and the reserved prefixes but `/-/` go to Django."""
    return path == "/" or any(path.startswith(p) for p in settings.SSE_RESERVED_PREFIXES if p != "/-/")


def body_bound(method: bytes, target: bytes) -> int:
    """The most body bytes a request for `target` (a request-target, query and all) may carry."""
    try:
        path = unquote(target.split(b"?", 1)[0].decode("ascii"))
    except UnicodeDecodeError:
        return 0  # daphne answers 400 for such a path, body or not
    if is_django_path(path):
        return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return CHALLENGE_BODY_BYTES if method.upper() == b"POST" else 0


def refusal(bound: int, declared: int | None) -> tuple[int, dict[str, Any]]:
    """The status and problem body for a body past `bound` (`declared`: its Content-Length, if it said one)."""
    if bound == 0:
        detail = "A stream request has no body."
        return 400, {"type": "about:blank", "title": "Bad request", "status": 400, "detail": detail}
    said = f" ({declared} bytes declared)" if declared is not None else ""
    detail = f"The request body is over {bound} bytes{said}."
    return 413, {"type": "about:blank", "title": "Content too large", "status": 413, "detail": detail}


class BoundedRequest(WebRequest):  # type: ignore[misc]
    """daphne's request, refusing a body past its path's bound as soon as the headers or the bytes say so, a body
    late past its deadline, and a body the process has no room left for."""

    bound: int | None = None  # known once the headers are in
    received = 0
    held = 0  # body bytes this request counts in `HeldBodies`
    refused = False
    _body_deadline: Any = None  # an IDelayedCall, while a body is awaited

    def gotLength(self, length: int | None) -> None:
        self._let_go()  # told twice (an HTTP/2 request with two Content-Lengths): the last one counts
        if self.refused:
            return
        self.content = io.BytesIO()  # never a temporary file: what is admitted is bounded
        if isinstance(self.channel, H2Stream):
            connection = self.channel._conn
            setattr(connection, HTTP2_REQUESTS_SEEN, getattr(connection, HTTP2_REQUESTS_SEEN, 0) + 1)
        method, target = self._method_and_target()
        self.bound = body_bound(method, target)
        if length is not None and length > self.bound:
            self._refuse(*refusal(self.bound, length))
            return
        if length == 0:
            return  # no body follows: nothing to wait for (every stream's GET)
        if length is not None and not self._hold(length):
            return
        self._body_deadline = reactor.callLater(settings.HTTP_BODY_TIMEOUT_S, self._body_late)

    def handleContentChunk(self, data: bytes) -> None:
        if self.refused:
            return
        self.received += len(data)
        if self.bound is not None and self.received > self.bound:
            self._refuse(*refusal(self.bound, None))
            return
        if self.received > self.held and not self._hold(self.received - self.held):
            return
        self.content.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        self._stop_body_clock()
        if not self.refused:
            super().requestReceived(command, path, version)

    def finish(self) -> None:
        self._let_go()
        super().finish()

    def connectionLost(self, reason: Failure) -> None:
        self._let_go()
        super().connectionLost(reason)

    def _hold(self, more: int) -> bool:
        """Count `more` body bytes in `HeldBodies`, or refuse the request (503) if the process has no room."""
        most = settings.HTTP_BODIES_MAX_BYTES
        if HeldBodies.held + more > most:
            detail = f"This server holds its maximum of {most} bytes of request bodies; retry in a moment."
            problem = {"type": "about:blank", "title": "Server busy", "status": 503, "detail": detail}
            retry = b"%d" % settings.SSE_LIMIT_RETRY_AFTER_S
            self._refuse(503, problem, headers=((b"retry-after", retry),))
            return False
        HeldBodies.held += more
        self.held += more
        return True

    def _body_late(self) -> None:
        self._body_deadline = None
        if self.refused:
            return
        seconds = settings.HTTP_BODY_TIMEOUT_S
        detail = f"The request body was not complete {seconds} s after its headers ({self.received} bytes came)."
        self._refuse(408, {"type": "about:blank", "title": "Request timeout", "status": 408, "detail": detail})

    def _stop_body_clock(self) -> None:
        if self._body_deadline is not None:
            if self._body_deadline.active():
                self._body_deadline.cancel()
            self._body_deadline = None

    def _let_go(self) -> None:
        """Give back what this request holds of the process's bound; its body's clock stops."""
        self._stop_body_clock()
        if self.held:
            HeldBodies.held -= self.held
            self.held = 0

    def _method_and_target(self) -> tuple[bytes, bytes]:
        channel = self.channel
        if isinstance(channel, H2Stream):  # its pseudo-headers come first, so they are known by now
            return channel.command or b"", channel.path or b""
        return getattr(channel, "_command", b""), getattr(channel, "_path", b"")

    def _refuse(self, status: int, problem: dict[str, Any], headers: Headers = ()) -> None:
        self.refused = True
        self._let_go()
        self.content = io.BytesIO()  # what came of the body is dropped now, not when the connection goes
        # Twisted would answer `Expect: 100-continue` right after the headers: the client must not send.
        self.requestHeaders.removeHeader(b"expect")
        CUT.labels(CUT_REASONS[status]).inc()
        body = json.dumps(problem).encode()
        log.info("request body refused: %s, %s (bound %s bytes)", status, CUT_REASONS[status], self.bound)
        if isinstance(self.channel, H2Stream):
            # Inside the stream's constructor its connection does not know it yet: answer on the next turn.
            reactor.callLater(0, refuse_stream, self.channel, status, body, headers)
        else:
            refuse_connection(self.channel, status, body, headers)


def refuse_connection(channel: Any, status: int, body: bytes, headers: Headers = ()) -> None:
    """Answer on an HTTP/1.1 connection whose request never reached the app, and close it."""
    if channel is None or channel.transport is None:
        return
    head = b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status])
    head += b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers)
    head += b"Content-Type: application/problem+json\r\nContent-Length: %d\r\n" % len(body)
    head += b"Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    channel.transport.write(head + body)
    channel.persistent = False
    channel.loseConnection()


def refuse_stream(stream: H2Stream, status: int, body: bytes, headers: Headers = ()) -> None:
    """Answer on an HTTP/2 stream and reset it (NO_ERROR: "stop sending", RFC 9113 §8.1); the connection stays."""
    connection: Any = stream._conn
    stream_id = stream.streamID
    if stream_id not in connection.streams:
        return
    h2 = connection.conn
    head = [(b":status", b"%d" % status), *headers]
    described = [*head, (b"content-type", b"application/problem+json"),
                 (b"content-length", b"%d" % len(body)), (b"cache-control", b"no-store")]  # fmt: skip
    with contextlib.suppress(H2Error, KeyError):
        fits = h2.local_flow_control_window(stream_id) >= len(body) and h2.max_outbound_frame_size >= len(body)
        h2.send_headers(stream_id, described if fits else head, end_stream=not fits)
        if fits:
            h2.send_data(stream_id, body, end_stream=True)
    with contextlib.suppress(H2Error, KeyError):
        h2.reset_stream(stream_id, ErrorCodes.NO_ERROR)
    if connection._tryToWriteControlData() and stream_id in connection.streams:
        stream.connectionLost(Failure(ConnectionLost("request body refused")))  # type: ignore[no-untyped-call]
        connection._requestDone(stream_id)
