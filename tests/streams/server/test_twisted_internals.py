"""The Twisted internals daphne's write flow control reads (streams/server/daphne.py) are still there.

They are not public API, so a Twisted release may drop or rename one; then this test names it, instead of
flow control quietly degrading. See docs/decisions/0001-daphne-with-write-flow-control.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import twisted
from daphne import http_protocol
from daphne.http_protocol import WebRequest
from twisted.internet import protocol, tcp
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python import deprecate
from twisted.web import http
from twisted.web._http2 import H2Connection, H2Stream

from streams.server import deadlines
from streams.server.daphne import (
    CONNECTION_HOOKS,
    CONNECTION_INTERNALS,
    REQUEST_INTERNALS,
    STREAM_INTERNALS,
    TRANSPORT_INTERNALS,
    Flow,
    FlowControlServer,
    accept_eagerly,
    read_http_unwrapped,
)


@pytest.fixture
def connection() -> Iterator[tuple[tcp.Connection, http.Request]]:
    """A real TCP connection object and an HTTP request on it (no reactor runs: nothing is sent)."""
    ours, theirs = socket.socketpair()
    yield request_on(ours, reactor=object())
    ours.close()
    theirs.close()


def request_on(sock: socket.socket, reactor: object) -> tuple[tcp.Connection, http.Request]:
    """Twisted's TCP connection over `sock`, and an HTTP request on it."""
    make_connection: Any = tcp.Connection  # no protocol and no running reactor: typed for neither
    transport = make_connection(sock, None, reactor=reactor)
    transport.getPeer = lambda: IPv4Address("TCP", "127.0.0.1", 40000)
    transport.getHost = lambda: IPv4Address("TCP", "127.0.0.1", 8000)
    channel: Any = http.HTTPChannel()  # type: ignore[no-untyped-call]
    channel.transport = transport
    return transport, http.Request(channel)


def test_twisted_still_has_the_internals_flow_control_reads(connection: tuple[tcp.Connection, http.Request]) -> None:
    transport, request = connection
    missing = [f"tcp.Connection.{name}" for name in TRANSPORT_INTERNALS if not hasattr(transport, name)]
    missing += [f"http.Request.{name}" for name in REQUEST_INTERNALS if not hasattr(request, name)]
    missing += [f"http.Request.{name}" for name in ("registerProducer", "unregisterProducer")
                if not hasattr(request, name)]  # fmt: skip
    assert not missing, f"Twisted {twisted.__version__} no longer has what streams/server/daphne.py reads: {missing}"


def test_twisted_still_has_the_http2_internals_stream_flow_control_reads() -> None:
    connection: Any = H2Connection(reactor=Clock())  # type: ignore[no-untyped-call]
    connection.transport = StringTransport()  # type: ignore[no-untyped-call]
    headers = [(b":method", b"GET"), (b":path", b"/")]
    stream: Any = H2Stream(1, connection, headers, http.Request, None, None)  # type: ignore[no-untyped-call]
    missing = [f"H2Stream.{name}" for name in STREAM_INTERNALS if not hasattr(stream, name)]
    missing += [f"H2Connection.{name}" for name in CONNECTION_INTERNALS if not hasattr(connection, name)]
    missing += [f"H2Stream.{name}" for name in ("windowUpdated", "abortConnection", "connectionLost")
                if not hasattr(stream, name)]  # fmt: skip
    missing += [f"H2Connection.{name}" for name in CONNECTION_HOOKS if not callable(getattr(connection, name, None))]
    if getattr(http, "H2Connection", None) is not H2Connection:  # what `http2.install()` replaces
        missing.append("twisted.web.http.H2Connection")
    assert not missing, f"Twisted {twisted.__version__} no longer has what streams/server/daphne.py reads: {missing}"


def test_flow_writes_to_the_socket_directly_only_on_an_idle_chunked_response(
    connection: tuple[tcp.Connection, http.Request],
) -> None:
    transport, request = connection
    assert Flow._can_send_now(request, transport) is False  # nothing written yet: headers go through Twisted
    request.startedWriting, request.chunked, transport.connected = 1, 1, 1
    assert Flow._can_send_now(request, transport) is True
    transport.dataBuffer = b"pending"  # Twisted holds bytes for this client: they go first
    assert Flow._can_send_now(request, transport) is False


def test_a_write_the_socket_took_in_part_sends_the_next_after_the_rest_not_before() -> None:
    """A write the kernel took only in part leaves its rest to Twisted; the next waits its turn there, though the
    socket would take it, and goes straight to the socket again only once Twisted's buffer is empty."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport, request = request_on(ours, reactor=_Reactor())
    request.startedWriting, request.chunked, transport.connected = 1, 1, 1
    flow = Flow(request)
    try:
        flow.write(b"first")
        assert theirs.recv(100) == b"5\r\nfirst\r\n"  # straight to the socket
        flow.write(b"x" * 1_000_000)  # more than the kernel takes: the rest is left to Twisted
        assert transport.dataBuffer or transport._tempDataLen
        write_waits_behind_twisted(flow, transport, theirs, b"last")
        transport.dataBuffer, transport.offset, transport._tempDataBuffer, transport._tempDataLen = b"", 0, [], 0
        flow.write(b"again")  # Twisted's buffer empty (as once it drained): straight to the socket again
        assert theirs.recv(100) == b"5\r\nagain\r\n"
    finally:
        ours.close()
        theirs.close()


def reply_server() -> Any:
    server: Any = FlowControlServer.__new__(FlowControlServer)  # nothing but its replies: no listening
    server.connections, server.server_name = {}, b""
    return server


def web_request(server: Any, transport: tcp.Connection) -> Any:
    channel: Any = http.HTTPChannel()  # type: ignore[no-untyped-call]
    channel.transport, channel.factory = transport, SimpleNamespace(server=server)
    request: Any = WebRequest(channel)
    request.clientproto, request.method = b"HTTP/1.1", b"GET"
    transport.connected = 1
    request.producer = Flow(request)
    return request


def test_a_write_through_the_asgi_path_sends_the_next_direct_write_after_it() -> None:
    """After a whole direct write, a flow writes straight to the socket without looking at Twisted's state again;
    a body sent through daphne's ASGI path (into Twisted's buffer) makes it look again, so the next direct write
    waits its turn behind those bytes. What went out directly is in the request's byte count by then."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    server = reply_server()
    transport, _ = request_on(ours, reactor=_Reactor())
    request = web_request(server, transport)
    request.startedWriting, request.chunked = 1, 1
    request._response_started = True
    flow = request.producer
    try:
        flow.write(b"first")
        flow.write(b"second")
        assert theirs.recv(100) == b"5\r\nfirst\r\n6\r\nsecond\r\n"  # straight to the socket
        body = {"type": "http.response.body", "body": b"x" * 1_000_000, "more_body": True}
        asyncio.run(server.handle_reply(request, body))  # more than the kernel takes: Twisted holds the rest
        assert transport.dataBuffer or transport._tempDataLen
        write_waits_behind_twisted(flow, transport, theirs, b"last")
        assert request.sentLength == len("first") + len("second") + 1_000_000 + len("last")
    finally:
        ours.close()
        theirs.close()


@contextlib.contextmanager
def started_reply(send_buffer: int | None = None) -> Iterator[tuple[Any, Any, tcp.Connection, _Reactor, socket.socket]]:
    """A stream's request on a socket pair whose response daphne has started (status and headers set, nothing
    written): the server, the request, its transport, the reactor it registers with, and the client's socket."""
    ours, theirs = socket.socketpair()
    if send_buffer is not None:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    theirs.settimeout(2)
    reactor = _Reactor()
    server = reply_server()
    transport, _ = request_on(ours, reactor=reactor)
    request = web_request(server, transport)
    try:
        asyncio.run(server.handle_reply(request, {"type": "http.response.start", "status": 200, "headers": []}))
        yield server, request, transport, reactor, theirs
    finally:
        ours.close()
        theirs.close()


def test_a_streams_headers_and_first_events_are_sent_during_the_reply_without_registering_the_socket() -> None:
    """Twisted's own path registers the socket for writing, sends on the next turn and unregisters it: two
    `epoll_ctl` calls and a turn of the loop for each stream's open. Only what the socket does not take, and a
    reply that ends the response (which may close the connection), go that way."""
    with started_reply() as (server, request, transport, reactor, theirs):
        asyncio.run(server.handle_reply(request, {"type": "http.response.body", "body": b"hello", "more_body": True}))
        received = theirs.recv(1000)
        assert received.startswith(b"HTTP/1.1 200 OK\r\n"), received
        assert received.endswith(b"\r\n\r\n5\r\nhello\r\n"), received
        assert reactor.writers == []
        assert not transport.dataBuffer
        assert not transport._tempDataLen


def test_what_the_socket_does_not_take_of_a_reply_is_left_to_twisted() -> None:
    with started_reply(send_buffer=4096) as (server, request, transport, reactor, theirs):
        body = {"type": "http.response.body", "body": b"x" * 1_000_000, "more_body": True}
        asyncio.run(server.handle_reply(request, body))
        assert theirs.recv(100).startswith(b"HTTP/1.1 200 OK")  # the start went out at once...
        assert transport.dataBuffer  # ...the rest waits in Twisted's buffer,
        assert reactor.writers == [transport]  # which sends it when the socket has room


def test_what_a_flow_wrote_directly_is_counted_when_its_client_leaves_or_it_stops(
    connection: tuple[tcp.Connection, http.Request],
) -> None:
    """daphne's access line reads the request's `sentLength`: the direct writes are in it once the response
    is over, however it ends."""
    transport, request = connection
    request.startedWriting, request.chunked, transport.connected = 1, 1, 1
    left, stopped = Flow(request), Flow(request)
    left.write(b"12345")
    left.write(b"678")
    left.client_lost()
    assert request.sentLength == 8
    stopped.write(b"abc")
    stopped.stopProducing()
    assert request.sentLength == 11
    stopped.write(b"after")  # a stopped flow writes nothing more
    assert request.sentLength == 11


def write_waits_behind_twisted(flow: Flow, transport: tcp.Connection, client: socket.socket, data: bytes) -> None:
    """With bytes in Twisted's buffer, `data` is written behind them, though the socket would take it now."""
    while select.select([client], [], [], 0.05)[0]:  # the client reads what the kernel took: it has room
        client.recv(1 << 20)
    flow.write(data)
    assert not select.select([client], [], [], 0.05)[0]
    buffered = bytes(transport.dataBuffer) + b"".join(transport._tempDataBuffer)
    assert buffered.endswith(b"%x\r\n%s\r\n" % (len(data), data))


class _Reactor:
    """Just enough of a reactor for a listening port and its accepted connections (nothing runs)."""

    def addReader(self, reader: object) -> None: ...

    def removeReader(self, reader: object) -> None: ...

    def __init__(self) -> None:
        self.writers: list[object] = []  # added as writers, in order

    def addWriter(self, writer: object) -> None:
        self.writers.append(writer)

    def removeWriter(self, writer: object) -> None: ...


def test_an_eager_port_accepts_every_waiting_connection_in_one_turn() -> None:
    accepted: list[protocol.Protocol] = []

    class Counted(protocol.Protocol):
        def connectionMade(self) -> None:
            accepted.append(self)

    factory: Any = protocol.Factory.forProtocol(Counted)
    port: Any = tcp.Port(0, factory, backlog=1024, interface="127.0.0.1", reactor=_Reactor())
    port.startListening()
    clients: list[socket.socket] = []
    try:
        clients += [socket.create_connection(("127.0.0.1", port.getHost().port), timeout=5) for _ in range(250)]
        assert port.numberAccepts < 250  # Twisted's own first turn would leave most of them in the queue
        accept_eagerly(port)
        port.doRead()
        assert len(accepted) == 250
        port.doRead()  # none waiting: the turn ends at once
        assert len(accepted) == 250
    finally:
        for client in clients:
            client.close()
        for proto in accepted:
            proto.transport.socket.close()  # type: ignore[union-attr]
        port.socket.close()


def test_daphne_and_the_channel_read_twisteds_http_module_without_its_deprecation_proxy() -> None:
    assert isinstance(http, deprecate._ModuleProxy), "Twisted no longer wraps twisted.web.http: drop the unwrapping"
    channel_module: Any = deadlines  # its `http` is an import, not an export
    before = http_protocol.http, channel_module.http
    try:
        read_http_unwrapped()
        assert type(http_protocol.http) is type(deprecate)  # a plain module
        assert channel_module.http is http_protocol.http
        assert http_protocol.http.Request is http.Request
    finally:
        http_protocol.http, channel_module.http = before
