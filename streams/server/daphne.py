"""daphne with write flow control: the app learns when a client's transport is full.

Stock daphne's `send()` never waits for the socket: bytes for a client that stops reading pile up in
Twisted's transport buffer without bound. Twisted computes pause/resume for every connection but daphne
registers nobody to hear it; `FlowControlServer` registers a push producer (`Flow`) on each HTTP request and
hands it to the app as `scope["extensions"]["sse.flow"]`. Streams then stop writing to a paused client, and
close it past a bound (it resumes from its Last-Event-ID). Why, and which Twisted internals this relies on:
docs/decisions/0001-daphne-with-write-flow-control.md.

A `Flow` also tells its stream when the client is gone (`on_lost`), as daphne puts `http.disconnect` on the
app's queue: a stream then needs no task of its own reading that queue (docs/request-lifecycle.md, step 14).

Over HTTP/2 a response is one stream of a shared connection: `StreamFlow` pauses and closes that stream alone
(docs/request-lifecycle.md, "HTTP/2"), woken by its connection (streams/server/http2.py), never by a timer. Each
client address holds at most `SSE_MAX_CONNECTIONS_PER_CLIENT` connections (streams/server/peers.py).

Its connections come from `BoundedHTTPFactory`: request bodies bounded per path, refused as they arrive
(streams/server/bodies.py), and deadlines for headers and idle connections (streams/server/deadlines.py).

Run with `python -m streams.server` and daphne's usual arguments; `--tls-fd`, `--tls-cert` and `--tls-key` add
HTTPS, with HTTP/2, on an inherited listening socket (streams/server/tls.py), as platform/web.py starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import daphne.server  # noqa: F401  (installs the asyncio reactor before anything imports twisted's)
from daphne import http_protocol
from daphne.cli import CommandLineInterface
from daphne.server import Server
from django.conf import settings
from h2.exceptions import H2Error
from twisted.internet import reactor, tcp
from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import IPushProducer
from twisted.python import deprecate
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web._http2 import H2Stream
from zope.interface import implementer

from config.logs import log_access
from streams.server import collector, deadlines, http2
from streams.server.deadlines import BoundedHTTPFactory
from streams.server.forwarded import ClientOrigin, parse_networks
from streams.server.peers import PeerConnections
from streams.server.reaping import ReapOnChange
from streams.server.tls import TlsError, TlsListener, certificate_options, listen_tls

FLOW_EXTENSION = "sse.flow"
# Twisted internals `Flow.write` reads. They are not public API: the lock files pin Twisted's release, and
# tests/streams/server/test_twisted_internals.py fails, naming what is gone, when a release drops one.
TRANSPORT_INTERNALS = (
    "TLS", "connected", "disconnecting", "socket", "dataBuffer", "offset", "_tempDataLen", "_writeDisconnected"
)  # fmt: skip
REQUEST_INTERNALS = ("startedWriting", "chunked", "finished", "sentLength", "_disconnected")
STREAM_BUFFER = 64 * 1024  # as on HTTP/1.1, where Twisted pauses a response past 64 KiB in its buffer
# ...and, over HTTP/2, the ones `StreamFlow` reads.
STREAM_INTERNALS = ("_conn", "streamID")
CONNECTION_INTERNALS = ("_outboundStreamQueues", "_sendingDeferred", "priority", "conn", "streams", "_reactor")
CONNECTION_HOOKS = http2.CONNECTION_HOOKS  # ...and the methods `WindowAwareH2Connection` extends
# How many connections a listening port may accept in one turn of the loop (it stops sooner when none is waiting).
ACCEPTS_PER_TURN = 1000


@implementer(IPushProducer)
class Flow:
    """Twisted's pause/resume signal for one HTTP response, readable from asyncio (same thread); and whether its
    client is gone (`lost`), with `on_lost`, set by the response's reader, called once when it goes."""

    # No dict of its own: a fan-out reads every client's flow at every batch, one memory load less each.
    __slots__ = ("_direct", "_sock", "_uncounted", "_writable", "closed", "lost", "on_lost", "paused", "request")

    def __init__(self, request: Any) -> None:
        self.request = request
        self.paused = False
        self.closed = False
        self.lost = False
        self.on_lost: Callable[[], None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._direct: Any = None  # the TCP transport, once a write went straight to its socket
        # Its socket, while nothing but this flow's whole writes has touched the transport since the last look at
        # Twisted's state (`_clear`): writes then go straight to it, reaching neither the request nor the
        # transport. Dropped by anything that may change that state: a partial write, a pause, the end of the
        # response or of the connection, a write through the ASGI path (`FlowControlServer.handle_reply`).
        self._sock: Any = None
        self._uncounted = 0  # bytes written straight to the socket, not yet in the request's `sentLength`

    # IPushProducer: Twisted calls these on the loop thread (daphne runs the asyncio reactor).
    def pauseProducing(self) -> None:
        self.paused = True
        self._writable.clear()
        self.settle()

    def resumeProducing(self) -> None:
        self.paused = False
        self._writable.set()

    def stopProducing(self) -> None:
        self.closed = True
        self._writable.set()
        self.settle()

    def settle(self) -> None:
        """Look at Twisted's state again before the next direct write, and count what went out directly in the
        request's `sentLength` (daphne's access line reads it when the response ends)."""
        self._sock = None
        if self._uncounted:
            self.request.sentLength += self._uncounted
            self._uncounted = 0

    def client_lost(self) -> None:
        """The client is gone (its connection dropped, its HTTP/2 stream was reset) or the response has ended:
        daphne has just put `http.disconnect` on the app's queue. Called on the loop's thread, possibly from
        within the app's own task (`StreamFlow.abort` resets the stream there and then)."""
        if self.lost:
            return
        self.lost = True
        self.settle()
        if self.on_lost is not None:
            self.on_lost()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def write(self, data: bytes) -> None:
        """Write body bytes, skipping the ASGI send path (the headers went out through it already).

        When the connection has nothing buffered, the chunk goes to the socket at once: Twisted's own path
        would register the socket for writability, send on the next loop turn and unregister it, two
        `epoll_ctl` calls for every write, most of the cost of a fan-out to many clients. Whatever the kernel
        does not take is left to Twisted, whose buffer then drives pause/resume as before. TLS and HTTP/2
        connections always take Twisted's path.

        A fan-out writes the same bytes to many clients: the chunk is framed once for all of them (`_framed`),
        and what never changes for a connection (plain TCP, chunked, headers sent) is looked up once. After a
        whole write, the next one skips the look at Twisted's state (`_sock`): a fan-out's write to a client
        then reaches only this flow and the socket.
        """
        sock = self._sock
        if sock is None:
            if self.closed or not data or not self._may_send(data):
                return
            sock = self._sock = self._direct.socket
        elif not data:
            return
        framed = _framed(data)
        self._uncounted += len(data)
        try:
            sent = sock.send(framed)
        except OSError:  # full (BlockingIOError), or broken: Twisted notices on its next write and cleans up
            sent = 0
        if sent < len(framed):
            self.settle()  # Twisted holds the rest now: its state decides the next write
            self._direct.write(framed[sent:])

    def _may_send(self, data: bytes) -> bool:
        """Whether the socket may be written to directly now; if not, `data` went through Twisted's request."""
        request, transport = self.request, self._direct
        if transport is None:
            transport = getattr(getattr(request, "channel", None), "transport", None)
            if not self._can_send_now(request, transport):
                request.write(data)
                return False
            self._direct = transport
        elif not self._clear(request, transport):
            request.write(data)
            return False
        return True

    @staticmethod
    def _can_send_now(request: Any, transport: Any) -> bool:
        return bool(
            isinstance(transport, tcp.Connection)
            and not transport.TLS
            and request.startedWriting
            and request.chunked
            and Flow._clear(request, transport)
        )

    @staticmethod
    def _clear(request: Any, transport: Any) -> bool:
        """The part of `_can_send_now` that changes while the response goes on: nothing buffered, nothing ended."""
        return bool(
            transport.connected
            and not transport._writeDisconnected
            and not transport._tempDataLen
            and len(transport.dataBuffer) == transport.offset
            and not request.finished
            and not request._disconnected
        )

    def abort(self) -> None:
        """Drop the connection at once, buffered bytes and all."""
        self.closed = True
        self.settle()
        transport = getattr(self.request, "transport", None) or getattr(self.request.channel, "transport", None)
        if transport is not None:
            transport.abortConnection()


_last_chunk: tuple[bytes, bytes] = (b"", b"")


def _framed(data: bytes) -> bytes:
    """`data` as one chunk of a chunked body; the last one framed is kept, as a fan-out writes it to many."""
    global _last_chunk  # noqa: PLW0603  (one entry, replaced by the next chunk)
    if _last_chunk[0] is data:
        return _last_chunk[1]
    framed = b"%x\r\n%s\r\n" % (len(data), data)
    _last_chunk = (data, framed)
    return framed


def is_http2(request: Any) -> bool:
    return isinstance(getattr(request, "channel", None), H2Stream)


class StreamFlow(Flow):
    """`Flow` for a response on an HTTP/2 stream: paused while the peer's window is used up (Twisted's signal)
    or while too much waits in the stream's queue (ours); `abort()` resets the stream, not the connection.

    Nothing here runs while the stream waits: its connection (`WindowAwareH2Connection`, streams/server/http2.py)
    calls `frame_sent` when a frame of the stream was sent, and Twisted calls `resumeProducing` when a
    WINDOW_UPDATE gives the stream room."""

    def __init__(self, request: Any) -> None:
        super().__init__(request)
        self.stream: Any = request.channel
        self._blocked = False  # Twisted paused us: the peer's flow-control window is used up
        self._backlogged = False  # more than STREAM_BUFFER bytes of ours wait to be sent
        # H2Stream never calls stopProducing on its producer when the stream or its connection ends.
        request.notifyFinish().addBoth(self._finished)

    def pauseProducing(self) -> None:
        self._blocked = True
        self._sync()

    def resumeProducing(self) -> None:
        self._blocked = False
        self._sync()

    def _finished(self, _result: object) -> None:
        self.stopProducing()  # and swallow the failure of a lost connection: it is expected, not an error

    def _sync(self) -> None:
        if self.closed:
            return
        if self._blocked or self._backlogged:
            super().pauseProducing()
        else:
            super().resumeProducing()

    def write(self, data: bytes) -> None:
        if self.closed or not data or self.request._disconnected:
            return
        self.request.write(data)
        if not self._backlogged and self.queued() > STREAM_BUFFER:
            self._backlogged = True
            self._sync()

    def queued(self) -> int:
        """Bytes of this stream waiting in the connection's queue (sent frames have left it)."""
        queue = self.stream._conn._outboundStreamQueues.get(self.stream.streamID)
        return sum(len(chunk) for chunk in queue if isinstance(chunk, bytes)) if queue else 0

    def frame_sent(self) -> None:
        """A frame of this stream left its queue: while paused, resume once the queue is empty and the window has
        room.

        Twisted pauses a stream when the window minus what is queued is used up, but looks again only when a
        WINDOW_UPDATE arrives; a peer that already has what it needs sends none (it waits for half its window to
        be used), so after the queue drained into a window with room the stream would stay paused for good. Its
        `windowUpdated` makes Twisted look again, and resume us if there is room now.
        """
        if self.closed or not (self._blocked or self._backlogged):
            return
        if self.queued():
            return
        self._backlogged = False
        if self._blocked:
            self.stream.windowUpdated()  # calls resumeProducing (so _sync) when the window has room
        self._sync()

    def abort(self) -> None:
        """Reset this stream (RST_STREAM) and drop what waits for it; the connection's other streams go on."""
        self.closed = True
        request = self.request
        if request._disconnected:
            return
        stream = self.stream
        # As Twisted does when the peer resets a stream: the request learns first (daphne then tells the app),
        # then the stream's state and queue go.
        reason = Failure(ConnectionLost("stream reset: the client fell too far behind"))  # type: ignore[no-untyped-call]
        stream.connectionLost(reason)
        with contextlib.suppress(H2Error, KeyError):
            stream.abortConnection()


class FlowControlServer(ReapOnChange, Server):  # type: ignore[misc]
    def __init__(self, *args: Any, tls: TlsListener | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tls = tls
        self.peers = PeerConnections(settings.SSE_MAX_CONNECTIONS_PER_CLIENT)
        self._http_factory: BoundedHTTPFactory | None = None

    @property
    def http_factory(self) -> BoundedHTTPFactory | None:
        return self._http_factory

    @http_factory.setter
    def http_factory(self, _daphnes: Any) -> None:
        # daphne's `run` builds its factory inline and listens with it at once: ours goes in its place, with
        # request bodies bounded per path and connections on a header deadline (streams/server/deadlines.py).
        self._http_factory = BoundedHTTPFactory(self)
        # Built after daphne loaded the application, so Django's settings are there (streams/server/forwarded.py).
        self.client_origin = ClientOrigin(
            parse_networks(settings.TRUSTED_PROXIES),
            root_path=self.root_path,
            address_header=self.proxy_forwarded_address_header,
            port_header=self.proxy_forwarded_port_header,
            proto_header=self.proxy_forwarded_proto_header,
        )

    def run(self) -> None:
        http2.install()
        read_http_unwrapped()
        if self.tls is not None:
            try:
                options = certificate_options(self.tls.cert, self.tls.key)
            except TlsError as exc:
                sys.exit(f"streams.server: {exc}")
            reactor.callWhenRunning(self._listen_tls, self.tls, options)
        # What is loaded by now (Django, Twisted, the application) lives as long as the process, and so does what
        # a stream allocates as long as its client: frozen after each full pass (streams/server/collector.py).
        collector.tune()
        cast(Any, reactor).callLater(collector.REVIEW_EVERY_S, self.review_garbage)
        super().run()

    def review_garbage(self) -> None:
        collector.review()
        cast(Any, reactor).callLater(collector.REVIEW_EVERY_S, self.review_garbage)

    def listen_success(self, port: Any) -> None:
        super().listen_success(port)
        if isinstance(port, tcp.Port):
            accept_eagerly(port)
        if hasattr(port, "factory"):
            self.peers.limit(port)

    def _listen_tls(self, tls: TlsListener, options: Any) -> None:
        # Called once the reactor runs, when daphne's `run` has built the HTTP factory the TLS one wraps.
        port = listen_tls(reactor, tls, self.http_factory, options)
        self.listen_success(port)

    def log_action(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        """daphne's access line, through logging (so LOG_FORMAT applies and the request id is on it) and without
        the query string, which may hold a token (`access_token`). Off as daphne's is, with `-v 0`."""
        if protocol != "http" or action != "complete":
            super().log_action(protocol, action, details)
            return
        if self.action_logger is None:
            return
        log_access(
            method=details.get("method"),
            path=str(details.get("path", "")).split("?", 1)[0],
            status=details.get("status"),
            bytes=details.get("size"),
            duration_ms=round(float(details.get("time_taken") or 0) * 1000, 1),
            client=details.get("client"),
        )

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        if scope.get("type") == "http":
            peer: Any = getattr(protocol, "client", None)  # an IPv4Address, or None when Twisted knows no peer
            address = (str(peer.host), int(peer.port)) if hasattr(peer, "host") and hasattr(peer, "port") else None
            self.client_origin.rewrite(scope, address, secure=bool(protocol.isSecure()))
            protocol.client_addr = scope["client"]  # what daphne's access line names
        if scope.get("type") == "http" and hasattr(protocol, "registerProducer"):
            flow = StreamFlow(protocol) if is_http2(protocol) else Flow(protocol)
            protocol.registerProducer(flow, True)
            scope.setdefault("extensions", {})[FLOW_EXTENSION] = flow
            queue = super().create_application(protocol, scope)
            details = self.connections.get(protocol)
            if details is not None and details.get("disconnected"):
                flow.client_lost()  # gone before its application was made: daphne will not say it again
            elif details is not None:
                # Kept with daphne's record of the connection, not on the request, which the flow holds: no cycle.
                details[FLOW_EXTENSION] = flow
            return queue
        return super().create_application(protocol, scope)

    def protocol_disconnected(self, protocol: Any) -> None:
        """daphne calls this when the request's connection is lost (over HTTP/2: its stream is reset or its
        connection drops, `H2Stream.connectionLost`) and when its response ends, each time just after it put
        `http.disconnect` on the app's queue: the response's flow hears it too."""
        super().protocol_disconnected(protocol)
        flow = self.connections.get(protocol, {}).pop(FLOW_EXTENSION, None)
        if flow is not None:
            flow.client_lost()

    async def handle_reply(self, protocol: Any, message: dict[str, Any]) -> None:
        producer = getattr(protocol, "producer", None)
        if isinstance(producer, Flow):
            producer.settle()  # the request writes to the transport now: the next direct write looks first
        ending = message.get("type") == "http.response.body" and not message.get("more_body", False)
        if ending and producer is not None and protocol.channel is not None:
            # Unregister before the response ends, or Twisted logs "Producer was not unregistered".
            protocol.unregisterProducer()
        stream = protocol.channel if ending and is_http2(protocol) else None
        transport = None if ending or not isinstance(producer, Flow) else idle_tcp(protocol)
        if transport is None:
            await super().handle_reply(protocol, message)
        else:
            # What the reply writes (a stream's status line, headers and opening) is sent here and now, as
            # `Flow.write` sends: Twisted's own path registers the socket for writing, sends on the next turn of
            # the loop and unregisters it, two `epoll_ctl` calls and a turn for each stream's open. daphne's reply
            # writes without awaiting anything, so nothing else sees the method shadowed.
            transport.startWriting = _write_after_reply
            try:
                await super().handle_reply(protocol, message)
            finally:
                del transport.startWriting
                # The rest, an error, or a close asked for meanwhile (daphne's own error reply) are Twisted's, on
                # its usual path.
                if transport.disconnecting or (
                    transport._tempDataLen and (transport.doWrite() is not None or transport.dataBuffer)
                ):
                    transport.startWriting()
        if stream is not None:
            http2.reset_if_unsent(stream, settings.SSE_CATCH_UP_S)


def _write_after_reply() -> None:
    """`startWriting` while a reply is written: `FlowControlServer.handle_reply` sends once the reply is done."""


def idle_tcp(request: Any) -> Any:
    """The plain TCP transport of an HTTP/1.1 request, if it is connected with nothing waiting to be sent."""
    transport = getattr(getattr(request, "channel", None), "transport", None)
    if (
        isinstance(transport, tcp.Connection)
        and not transport.TLS
        and not transport.disconnecting
        and Flow._clear(request, transport)
    ):
        return transport
    return None


def read_http_unwrapped() -> None:
    """Have daphne and our channel read `twisted.web.http` itself, not the proxy Twisted puts in its place.

    One attribute of the module is deprecated, so Twisted wraps it in a proxy whose every attribute read runs
    Python to check for it: daphne reads the module at every connection and every reply it writes, 8 µs of a
    stream's open in a reconnect storm. The module behind is the same one (what is set through the proxy, such
    as `http2.install`'s connection class, is set on it).
    """
    module = unwrapped(http)
    http_protocol.http = module
    deadlines.http = module  # type: ignore[attr-defined]


def unwrapped(module: Any) -> Any:
    if isinstance(module, deprecate._ModuleProxy):
        return object.__getattribute__(module, "_module")
    return module


def accept_eagerly(port: tcp.Port) -> None:
    """Let `port` empty the kernel's accept queue on every turn of the loop.

    Twisted accepts at most `numberAccepts` connections per turn, and after a quiet spell that is 1, growing by
    20 per turn. When thousands of clients reconnect at once (a network blip), the loop is busy with them and
    the accept queue (the listen backlog, capped by `net.core.somaxconn`) fills: the kernel then drops the
    handshakes it has no room for, and those clients try again only after 1, 3, 7, 15 s (SYN retransmission
    backoff). Accepting everything waiting keeps the queue short, so every client is served on its first try.
    """
    read = port.doRead

    def do_read() -> None:
        port.numberAccepts = ACCEPTS_PER_TURN
        read()  # type: ignore[no-untyped-call]

    port.doRead = do_read  # type: ignore[method-assign]


class FlowControlCLI(CommandLineInterface):  # type: ignore[misc]
    """daphne's command line, plus HTTPS on a listening socket handed over by descriptor (streams/server/tls.py)."""

    server_class: Any = FlowControlServer

    def __init__(self) -> None:
        super().__init__()
        tls = self.parser.add_argument_group("HTTPS (HTTP/2 through ALPN) on an inherited listening socket")
        tls.add_argument("--tls-fd", type=int, default=None, help="the listening socket's file descriptor")
        tls.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate (and chain)")
        tls.add_argument("--tls-key", type=Path, default=None, help="PEM private key")

    def run(self, args: list[str]) -> None:
        parsed = self.parser.parse_args(args)
        if parsed.tls_fd is not None:
            if parsed.tls_cert is None or parsed.tls_key is None:
                self.parser.error("--tls-fd needs --tls-cert and --tls-key")
            listener = TlsListener(parsed.tls_fd, parsed.tls_cert, parsed.tls_key)
            self.server_class = functools.partial(FlowControlServer, tls=listener)
        super().run(args)


def main() -> None:
    FlowControlCLI.entrypoint()


if __name__ == "__main__":
    main()
