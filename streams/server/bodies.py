"""Request bodies bounded as they arrive: in size, in time, and all requests of a process together.

daphne builds a request only once its whole body is in (spooled to a temporary file past 100 kB). The edge refuses
what a request declares past its path's bound (platform/edge/haproxy.cfg), but a body of no declared length (a
chunked one, an HTTP/2 one without `content-length`) passes it, and the edge holds at most its buffer (16 KiB) of a
body against its deadline. So every request is bounded here too, on what arrives, by `BoundedRequest`:

- a body past `DATA_UPLOAD_MAX_MEMORY_SIZE` (API_MAX_BODY_BYTES, the largest that any path takes) is refused with a
  413 at its first byte past it, and the connection closed; the app never sees the request;
- a body must be complete `HTTP_BODY_TIMEOUT_S` after its request's headers (a clock trickled bytes do not
  restart, armed only for a request that has a body); a late one is answered 408 and what came of it dropped;
- the bodies of all requests of the process together hold at most `HTTP_BODIES_MAX_BYTES` (`HeldBodies`), from
  their arrival (a declared `Content-Length` counts whole at once, a chunked body as it comes) until the response
  ends or the client goes; a body that would pass it is refused with a 503 and `retry-after`, not held.

`BoundedRequest` overrides only what Twisted's `Request` documents for a body (`gotLength`, `handleContentChunk`,
`requestReceived`); `BoundedHTTPFactory` is daphne's HTTP factory building it (how daphne is made to use it:
docs/decisions/0013, item 2).
"""

from __future__ import annotations

import io
import json
import logging
from typing import Any

from daphne.http_protocol import HTTPFactory, WebRequest
from django.conf import settings
from prometheus_client import Counter
from twisted.internet import reactor as twisted_reactor
from twisted.python.failure import Failure

log = logging.getLogger(__name__)
reactor: Any = twisted_reactor  # typed loosely: its interface types `callLater` poorly

# How long a refused connection, closed for writing, still reads and drops what its peer sends before it is dropped.
LINGER_S = 2.0
# A challenge response's body is empty by contract: the edge refuses one that declares more than this, and
# streams/edge/side_requests.py reads no more of one.
CHALLENGE_BODY_BYTES = 4096
# The app never sees these requests, so they are not among its refusals (`sse_refusals_total`): counted here.
CUT = Counter("sse_connections_cut", "Requests the server cut before the app saw them, by reason.", ["reason"])
# How `sse_connections_cut_total` names each refusal of a body.
CUT_REASONS = {408: "body_timeout", 413: "body_too_large", 503: "bodies_held_full"}
REASONS = {408: b"Request Timeout", 413: b"Content Too Large", 503: b"Service Unavailable"}
Headers = tuple[tuple[bytes, bytes], ...]


class HeldBodies:
    """Request body bytes the process holds, all requests together (`HTTP_BODIES_MAX_BYTES`; `/-/health`)."""

    held = 0


def too_large(bound: int, declared: int | None) -> dict[str, Any]:
    """The problem body for a body past `bound` (`declared`: its Content-Length, if it said one)."""
    said = f" ({declared} bytes declared)" if declared is not None else ""
    detail = f"The request body is over {bound} bytes{said}."
    return {"type": "about:blank", "title": "Content too large", "status": 413, "detail": detail}


class BoundedRequest(WebRequest):  # type: ignore[misc]
    """daphne's request, refusing a body past the bound as soon as the headers or the bytes say so, a body late
    past its deadline, and a body the process has no room left for."""

    received = 0
    held = 0  # body bytes this request counts in `HeldBodies`
    refused = False
    _body_deadline: Any = None  # an IDelayedCall, while a body is awaited

    def gotLength(self, length: int | None) -> None:
        self._let_go()
        if self.refused:
            return
        self.content = io.BytesIO()  # never a temporary file: what is admitted is bounded
        bound = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        if length is not None and length > bound:
            self._refuse(413, too_large(bound, length))
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
        bound = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        if self.received > bound:
            self._refuse(413, too_large(bound, None))
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

    def _refuse(self, status: int, problem: dict[str, Any], headers: Headers = ()) -> None:
        self.refused = True
        self._let_go()
        self.content = io.BytesIO()  # what came of the body is dropped now, not when the connection goes
        # Twisted would answer `Expect: 100-continue` right after the headers: the client must not send.
        self.requestHeaders.removeHeader(b"expect")
        CUT.labels(CUT_REASONS[status]).inc()
        log.info("request body refused: %s, %s", status, CUT_REASONS[status])
        refuse_connection(self.channel, status, json.dumps(problem).encode(), headers)


def refuse_connection(channel: Any, status: int, body: bytes, headers: Headers = ()) -> None:
    """Answer on a connection whose request never reached the app, and close it.

    Closed for writing first, then dropped `LINGER_S` later: a connection closed outright while the peer still
    sends its body is reset, and a reset throws away the answer the peer had not read yet (the edge, which relays
    it, then has nothing to tell the client). Meanwhile nothing more is read: what the peer still sends waits in
    the kernel's buffers, and goes with the connection."""
    transport = None if channel is None else channel.transport
    if transport is None:
        return
    head = b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status])
    head += b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers)
    head += b"Content-Type: application/problem+json\r\nContent-Length: %d\r\n" % len(body)
    head += b"Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    transport.write(head + body)
    channel.persistent = False
    transport.pauseProducing()  # read no more of it
    transport.loseWriteConnection()
    reactor.callLater(LINGER_S, transport.abortConnection)


class BoundedHTTPFactory(HTTPFactory):  # type: ignore[misc]
    """daphne's HTTP factory, whose connections make `BoundedRequest`s."""

    def __init__(self, server: Any) -> None:
        super().__init__(server)
        # Twisted's idle timer (12 h) is armed at every connection, restarted at every read and stopped at every
        # request: the edge in front bounds idle connections (`timeout http-keep-alive`), tighter.
        self.timeOut = None

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol
