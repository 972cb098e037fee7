"""daphne with write flow control: the app learns when a client's connection is full.

Stock daphne's `send()` never waits for the socket: bytes for a client that stops reading pile up in Twisted's
transport buffer without bound. Twisted computes pause and resume for every connection, but daphne registers nobody
to hear them; `FlowControlServer` registers a push producer (`Flow`) on each HTTP request (`registerProducer`, the
public producer API) and hands it to the app as `scope["extensions"]["sse.flow"]`. Streams then stop writing to a
paused client, and close it past a bound (it resumes from its Last-Event-ID). Why: docs/decisions/0001.

A `Flow` also tells its stream when the client is gone (`on_lost`), as daphne puts `http.disconnect` on the app's
queue: a stream then needs no task of its own reading that queue (docs/request-lifecycle.md, step 14).

The workers speak HTTP/1.1 to the edge in front of them (platform/edge/haproxy.cfg), which terminates TLS and
HTTP/2 and applies the connection-level policy; `ClientOrigin` (streams/server/forwarded.py) believes the forwarded
headers of the edge alone. Request bodies are still bounded here as they arrive (streams/server/bodies.py). What
this server touches of daphne and Twisted beyond their public API, and why: docs/decisions/0013.

Run with `python -m streams.server` and daphne's usual arguments, as platform/web.py starts it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from typing import Any, cast

import daphne.server  # noqa: F401  (installs the asyncio reactor before anything imports twisted's)
from daphne.cli import CommandLineInterface
from daphne.server import Server
from django.conf import settings
from twisted.internet import reactor, tcp
from twisted.internet.interfaces import IPushProducer
from twisted.web.http_headers import Headers
from zope.interface import implementer

from config.env import envint
from config.logs import log_access
from streams.server import collector
from streams.server.bodies import BoundedHTTPFactory
from streams.server.forwarded import ClientOrigin, parse_networks
from streams.server.inbox import Inboxes
from streams.server.reaping import ReapOnChange

FLOW_EXTENSION = "sse.flow"
# How many connections a listening port may accept in one turn of the loop (it stops sooner when none is waiting):
# what the kernel may queue for it (the listen backlog, 4096 by default, capped by net.core.somaxconn).
ACCEPTS_PER_TURN = 4096
DEFAULT_BACKLOG = 4096  # platform/web.py's default WEB_BACKLOG, which it hands its workers
# What a connection from the edge may hold unsent (the kernel doubles it for its bookkeeping), `hold_send_buffer`.
EDGE_SEND_BUFFER = 65536


@implementer(IPushProducer)
class Flow:
    """Twisted's pause/resume signal for one HTTP response, readable from asyncio (same thread); and whether its
    client is gone (`lost`), with `on_lost`, set by the response's reader, called once when it goes."""

    # No dict of its own: a fan-out reads every client's flow at every batch, one memory load less each.
    # A held stream's flow holds no future, event or buffer of its own: `_writable` is made by a wait on a paused
    # connection, and let go once it has room (docs/benchmarks.md, "Memory per idle stream").
    __slots__ = ("_sock", "_transport", "_uncounted", "_writable", "closed", "lost", "on_lost", "paused", "request")

    def __init__(self, request: Any) -> None:
        self.request = request
        self.paused = False
        self.closed = False
        self.lost = False
        self.on_lost: Callable[[], None] | None = None
        self._writable: asyncio.Future[None] | None = None  # what `wait_writable` waits on, while one waits
        self._transport: Any = None  # the connection's, once a write could go straight to its socket
        # Its socket, while nothing but this flow's whole writes has touched the transport since the last look at
        # Twisted's buffer (`_may_send`); dropped by anything that may change it (`settle`).
        self._sock: Any = None
        self._uncounted = 0  # bytes written straight to the socket, not yet in the request's `sentLength`

    # IPushProducer: Twisted calls these on the loop thread (daphne runs the asyncio reactor).
    def pauseProducing(self) -> None:
        self.paused = True
        self.settle()

    def resumeProducing(self) -> None:
        self.paused = False
        self._wake()

    def stopProducing(self) -> None:
        self.closed = True
        self._wake()
        self.settle()

    def _wake(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def settle(self) -> None:
        """Look at Twisted's buffer again before the next direct write, and count what went out directly in the
        request's `sentLength` (daphne's access line reads it when the response ends)."""
        self._sock = None
        if self._uncounted:
            self.request.sentLength += self._uncounted
            self._uncounted = 0

    def client_lost(self) -> None:
        """The client is gone (its connection dropped) or the response has ended: daphne has just put
        `http.disconnect` on the app's queue. Called on the loop's thread, possibly from within the app's own task."""
        if self.lost:
            return
        self.lost = True
        self.settle()
        # Nothing more is written: let go of the request, which holds this flow as its producer when its client
        # went mid-response (Twisted then never unregisters it). Kept, the two made a cycle that held the request,
        # its transport and its headers until the collector's next review (streams/server/collector.py).
        self.request = self._transport = None
        if self.on_lost is not None:
            self.on_lost()

    async def wait_writable(self) -> None:
        """Return once the connection has room (or is closed): at once if it has."""
        while self.paused and not self.closed:
            writable = self._writable
            if writable is None:
                writable = self._writable = asyncio.get_running_loop().create_future()
            await asyncio.shield(writable)  # a waiter given up (a timeout) leaves it to the others

    def write(self, data: bytes) -> None:
        """Write body bytes, skipping daphne's ASGI send path (the headers went out through it already).

        When Twisted holds nothing for the connection, the chunk goes to its socket at once: Twisted's own path
        registers the socket for writability, sends on the next turn of the loop and unregisters it, two
        `epoll_ctl` calls per write, which made a fan-out to 1 000 clients cost 2.5 times the CPU
        (docs/benchmarks.md, "The edge"). Whatever the kernel does not take is left to Twisted, whose buffer then
        drives pause and resume. This reads Twisted's write buffer (docs/decisions/0013, item 3).
        """
        sock = self._sock
        if sock is None:
            if self.closed or self.lost or not data or self.request.finished or not self._may_send(data):
                return
            sock = self._sock = self._transport.getHandle()
        elif not data:
            return
        framed = _framed(data)
        self._uncounted += len(data)
        try:
            sent = sock.send(framed)
        except OSError:  # full (BlockingIOError), or broken: Twisted notices on its next write and cleans up
            sent = 0
        if sent < len(framed):
            self.settle()  # Twisted holds the rest now: its buffer decides the next write
            self._transport.write(framed[sent:])

    def _may_send(self, data: bytes) -> bool:
        """Whether the socket may be written to now; if not, `data` went through Twisted's request."""
        request, transport = self.request, self._transport
        if transport is None:
            transport = getattr(getattr(request, "channel", None), "transport", None)
            if not (isinstance(transport, tcp.Connection) and request.startedWriting and request.chunked):
                request.write(data)
                return False
            self._transport = transport
        if not buffers_nothing(transport):
            request.write(data)
            return False
        return True

    def abort(self) -> None:
        """Drop the connection at once, buffered bytes and all (nothing once its client is gone)."""
        self.closed = True
        self.settle()
        channel = getattr(self.request, "channel", None)
        transport = getattr(channel, "transport", None)
        if transport is not None:
            transport.abortConnection()


# Twisted's write buffer, not public API: what `buffers_nothing` reads (docs/decisions/0013, item 3).
TRANSPORT_BUFFER = ("dataBuffer", "offset", "_tempDataLen")


def buffers_nothing(transport: tcp.Connection) -> bool:
    """Whether Twisted holds no byte for `transport` and it is open for writing."""
    state: Any = transport  # typed loosely: Twisted's stubs do not declare its buffer
    return bool(
        state.connected and not state.disconnecting and not state._tempDataLen and len(state.dataBuffer) == state.offset
    )


_last_chunk: tuple[bytes, bytes] = (b"", b"")


def _framed(data: bytes) -> bytes:
    """`data` as one chunk of a chunked body; the last one framed is kept, as a fan-out writes it to many."""
    global _last_chunk  # noqa: PLW0603  (one entry, replaced by the next chunk)
    if _last_chunk[0] is data:
        return _last_chunk[1]
    framed = b"%x\r\n%s\r\n" % (len(data), data)
    _last_chunk = (data, framed)
    return framed


class FlowControlServer(ReapOnChange, Inboxes, Server):  # type: ignore[misc]
    """daphne's server, registering a `Flow` on every HTTP request and setting its client from the edge."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # daphne's command line loads the application (and so Django's settings) before it builds the server.
        self.client_origin = ClientOrigin(
            parse_networks(settings.TRUSTED_PROXIES),
            root_path=self.root_path,
            address_header=self.proxy_forwarded_address_header,
            port_header=self.proxy_forwarded_port_header,
            proto_header=self.proxy_forwarded_proto_header,
            edge_token=settings.SSE_EDGE_TOKEN,
        )
        self._http_factory: BoundedHTTPFactory | None = None

    @property
    def http_factory(self) -> BoundedHTTPFactory | None:
        return self._http_factory

    @http_factory.setter
    def http_factory(self, _daphnes: Any) -> None:
        # daphne's `run` builds its HTTP factory and listens with it at once: ours takes its place, so that every
        # request bounds its body as it arrives (streams/server/bodies.py; docs/decisions/0013, item 2).
        self._http_factory = BoundedHTTPFactory(self)

    def run(self) -> None:
        # What is loaded by now (Django, Twisted, the application) lives as long as the process, and so does what
        # a stream allocates as long as its client: frozen after each full pass (streams/server/collector.py).
        collector.tune()
        cast(Any, reactor).callLater(collector.REVIEW_EVERY_S, self.review_garbage)
        super().run()

    def listen_success(self, port: Any) -> None:
        super().listen_success(port)
        if isinstance(port, tcp.Port):
            keep_backlog(port)
            accept_eagerly(port)

    def review_garbage(self) -> None:
        collector.review()
        cast(Any, reactor).callLater(collector.REVIEW_EVERY_S, self.review_garbage)

    def protocol_connected(self, protocol: Any) -> None:
        collector.request_started()  # a burst of them makes the collector freeze sooner
        super().protocol_connected(protocol)

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
        if scope.get("type") != "http":
            return super().create_application(protocol, scope)
        peer: Any = getattr(protocol, "client", None)  # an IPv4Address, or None when Twisted knows no peer
        address = (str(peer.host), int(peer.port)) if hasattr(peer, "host") and hasattr(peer, "port") else None
        self.client_origin.rewrite(scope, address, secure=bool(protocol.isSecure()))
        protocol.client_addr = scope["client"]  # what daphne's access line names
        flow = Flow(protocol)
        hold_send_buffer(protocol.transport)  # before the flow can be paused by what the socket holds
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

    def protocol_disconnected(self, protocol: Any) -> None:
        """daphne calls this when the request's connection is lost and when its response ends, each time just
        after it put `http.disconnect` on the app's queue: the response's flow hears it too."""
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
        await super().handle_reply(protocol, message)
        if message.get("type") == "http.response.body" and not ending and protocol.startedWriting:
            release_header_tables(protocol)


def release_header_tables(request: Any) -> None:
    """A response under way has sent its headers: Twisted reads its table of them at the first write only, and the
    request's (whose names and values the ASGI scope has) before the application starts. A stream would hold both,
    about 2 KB, for as long as it lasts (docs/benchmarks.md, "Memory per idle stream"): empty ones take their place,
    `requestHeaders` and `responseHeaders` being the request's public attributes."""
    request.requestHeaders = Headers()
    request.responseHeaders = Headers()


def hold_send_buffer(transport: Any) -> None:
    """Keep the send buffer of a connection from the edge (a Unix socket, platform/web.py) at `EDGE_SEND_BUFFER`.

    A stream whose client stops reading then fills it soon, and its flow pauses (`Flow`), where the kernel's default
    (net.core.wmem_default, 208 KiB here) would hold four times as much per stalled stream before the worker hears of
    it. A Unix socket's connections do not take their listening socket's buffer size, as TCP's do: so it is set on
    each, through the transport's public `getHandle()`.
    """
    sock = transport.getHandle()
    if sock.family == socket.AF_UNIX:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, EDGE_SEND_BUFFER)


def keep_backlog(port: tcp.Port) -> None:
    """Give a Unix socket handed over by the supervisor (platform/web.py) its queue back: `WEB_BACKLOG` long.

    Twisted listens again on a Unix socket it adopts, with its own default queue (50), where it leaves a TCP one as
    it came; a reconnect storm then found the edge's connects refused past 4 x 51 (haproxy.cfg). Through a copy of
    the port's descriptor (its public `fileno()`); listening again only sets the queue's length.
    """
    descriptor: int = port.fileno()  # type: ignore[no-untyped-call]
    with socket.socket(fileno=os.dup(descriptor)) as sock:
        if sock.family == socket.AF_UNIX:
            sock.listen(envint("WEB_BACKLOG", DEFAULT_BACKLOG, minimum=1))


def accept_eagerly(port: tcp.Port) -> None:
    """Let `port` empty the kernel's accept queue on every turn of the loop.

    Twisted accepts at most `numberAccepts` connections per turn: 1 after a quiet spell, growing by 20 per turn.
    In a reconnect storm the edge hands a worker thousands of connections within a second (it accepts its clients
    at once, and opens a connection to the workers for each), the worker's loop is busy with the first ones, and
    the accept queue overflows: the kernel drops the handshakes it has no room for, and the edge tries each again
    only after 1, 3, 7, 15, 31 s (the SYN-ACK retransmission backoff). With 9 991 resumes on one worker the kernel
    counted 5 000-37 000 overflows per storm and the last clients waited a minute while the worker used a third of a
    core (docs/benchmarks.md, "Storms on `make run`"). This reads and sets `numberAccepts`, not public API
    (docs/decisions/0013, item 4).
    """
    read = port.doRead

    def do_read() -> None:
        port.numberAccepts = ACCEPTS_PER_TURN
        read()  # type: ignore[no-untyped-call]

    port.doRead = do_read  # type: ignore[method-assign]


class FlowControlCLI(CommandLineInterface):  # type: ignore[misc]
    """daphne's command line, serving with `FlowControlServer`."""

    server_class: Any = FlowControlServer


def main() -> None:
    FlowControlCLI.entrypoint()


if __name__ == "__main__":
    main()
