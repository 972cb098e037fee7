"""Connections that must get on with it: headers within a deadline, and no idling between requests.

Twisted's only clock on a connection is an idle timer that restarts on every byte, so a client sending one byte
of headers every 20 s held its socket for hours. `DeadlineChannel` (HTTP/1.1) keeps a clock that bytes do not
restart: the request's headers must be complete `HTTP_HEADER_TIMEOUT_S` after the connection was accepted (on
the HTTPS port the TLS handshake counts too), and a kept-alive connection must have the next request's headers
in `HTTP_IDLE_TIMEOUT_S` after the last response ended, or it is closed. While a request is in flight the clock
is off: an SSE stream with nothing to send is never closed for being "idle" (its keep-alive comments are its
business, streams/stream/pump.py).

A connection handed over to HTTP/2 after the TLS handshake (ALPN) keeps the same clock, with a looser reading as
the request count of a shared connection is what moves: when it falls due, the connection is closed (GOAWAY) if
it has no stream open and opened none since it was last looked at; otherwise it is looked at again one idle bound
later. Twisted's own HTTP/2 idle timer restarts on every frame, a PING included.

`BoundedHTTPFactory` is the factory daphne listens with (streams/server/daphne.py): its connections use this
channel and their requests are `BoundedRequest`s (streams/server/bodies.py).
"""

from __future__ import annotations

import logging
from typing import Any

from daphne.http_protocol import HTTPFactory
from django.conf import settings
from twisted.internet import reactor as twisted_reactor
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web import http

from streams.server import collector
from streams.server.bodies import CUT, HTTP2_REQUESTS_SEEN, BoundedRequest

# Twisted internals read here; not public API (tests/streams/server/test_bounds_internals.py names what is gone).
SWITCH_INTERNALS = ("_channel",)  # the HTTP/1.1-or-HTTP/2 switch, `http._GenericHTTPChannelProtocol`
HTTP2_INTERNALS = ("_stillProducing", "streams", "timeoutConnection")

log = logging.getLogger(__name__)
reactor: Any = twisted_reactor  # typed loosely: its interface types `callLater` poorly


class DeadlineChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 channel with a header deadline and an idle bound that trickled bytes do not extend."""

    _deadline: Any = None  # an IDelayedCall
    _http2_seen = 0  # requests the HTTP/2 connection this one became had seen at the last look
    _secure: bool | None = None  # whether the transport is TLS, once asked

    def connectionMade(self) -> None:
        super().connectionMade()  # type: ignore[no-untyped-call]
        self._arm(settings.HTTP_HEADER_TIMEOUT_S, "header_timeout")

    def isSecure(self) -> bool:
        # Asked twice per request (daphne's scope, ClientOrigin), each time an interface lookup on the transport,
        # which is the same for the connection's life.
        if self._secure is None:
            self._secure = bool(super().isSecure())  # type: ignore[no-untyped-call]
        return self._secure

    def allHeadersReceived(self) -> None:
        self._disarm()
        super().allHeadersReceived()  # type: ignore[no-untyped-call]

    def requestDone(self, request: Any) -> None:
        if self.persistent:
            # Armed before Twisted parses a pipelined request it kept, whose headers then disarm it.
            self._arm(settings.HTTP_IDLE_TIMEOUT_S, "idle")
        super().requestDone(request)  # type: ignore[no-untyped-call]

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._disarm()
        super().connectionLost(reason)  # type: ignore[no-untyped-call]

    def _arm(self, seconds: float, why: str) -> None:
        self._disarm()
        self._deadline = reactor.callLater(seconds, self._expire, why)

    def _disarm(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _expire(self, why: str) -> None:
        self._deadline = None
        transport: Any = self.transport
        if transport is None:
            return
        successor = self._successor()
        if successor is not None:
            self._watch_http2(successor)
            return
        peer = transport.getPeer()
        log.info("closing a connection from %s: %s", getattr(peer, "host", peer), why)
        CUT.labels(why).inc()
        # Nothing is owed to a client that sent no complete request: drop it, buffered bytes and all.
        transport.abortConnection()

    def _successor(self) -> Any:
        """The HTTP/2 channel this connection was handed to (TLS with ALPN `h2`), if it was."""
        switch = getattr(self.transport, "wrappedProtocol", None) or getattr(self.transport, "protocol", None)
        current = getattr(switch, "_channel", self)
        return None if current is self else current

    def _watch_http2(self, connection: Any) -> None:
        """The same bounds on an HTTP/2 connection, looked at when they fall due: closed (GOAWAY) when it has no
        stream open and opened none since the last look; looked at again one idle bound later otherwise."""
        if not connection._stillProducing:
            return  # lost meanwhile
        seen = getattr(connection, HTTP2_REQUESTS_SEEN, 0)
        if connection.streams or seen != self._http2_seen:
            self._http2_seen = seen
            self._arm(settings.HTTP_IDLE_TIMEOUT_S, "idle")
            return
        why = "idle" if seen else "header_timeout"
        log.info("closing an HTTP/2 connection: %s", why)
        CUT.labels(why).inc()
        connection.timeoutConnection()


def _deadline_channel_protocol(factory: http.HTTPFactory) -> Any:
    # As twisted.web.http's own protocol factory, with our channel behind the HTTP/1.1-or-HTTP/2 switch.
    return http._GenericHTTPChannelProtocol(DeadlineChannel())  # type: ignore[no-untyped-call]


class BoundedHTTPFactory(HTTPFactory):  # type: ignore[misc]
    """daphne's HTTP factory, building `DeadlineChannel`s that make `BoundedRequest`s."""

    protocol = _deadline_channel_protocol

    def __init__(self, server: Any) -> None:
        super().__init__(server)
        # Twisted's idle timer (12 h) is armed at every connection, restarted at every read and stopped at every
        # request, three timer operations per stream's open for a bound the channel's own clock keeps tighter.
        self.timeOut = None

    def buildProtocol(self, addr: Any) -> Any:
        collector.connection_accepted()  # a burst of them makes the collector freeze sooner
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol
