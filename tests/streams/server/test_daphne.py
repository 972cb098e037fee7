"""`Flow` and `FlowControlServer` (streams/server/daphne.py) on real Twisted objects: a flow hears Twisted's pause
and resume through the public producer API only, and writes nothing once its client is gone or its response ended.

No reactor runs: a TCP connection over a socket pair, with just enough of a reactor to register it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet import protocol, tcp
from twisted.internet.address import IPv4Address
from twisted.web import http

from streams.server.daphne import EDGE_SEND_BUFFER, Flow, accept_eagerly, hold_send_buffer


class _Reactor:
    """Just enough of a reactor for a connection (nothing runs): what it registers for writing is recorded."""

    def __init__(self) -> None:
        self.writers: list[object] = []

    def addReader(self, reader: object) -> None: ...

    def removeReader(self, reader: object) -> None: ...

    def addWriter(self, writer: object) -> None:
        self.writers.append(writer)

    def removeWriter(self, writer: object) -> None:
        if writer in self.writers:
            self.writers.remove(writer)


@pytest.fixture
def pair() -> Iterator[tuple[tcp.Connection, http.Request, socket.socket]]:
    """A started chunked response on Twisted's HTTP channel over a socket pair, and the client's end."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    make_connection: Any = tcp.Connection  # no protocol and no running reactor: typed for neither
    transport = make_connection(ours, None, reactor=_Reactor())
    transport.getPeer = lambda: IPv4Address("TCP", "127.0.0.1", 40000)
    transport.getHost = lambda: IPv4Address("TCP", "127.0.0.1", 8000)
    channel: Any = http.HTTPChannel()  # type: ignore[no-untyped-call]
    channel.timeOut = None
    channel.makeConnection(transport)  # registers the channel as the transport's producer
    transport.connected = 1
    request: Any = http.Request(channel)
    channel.requests.append(request)
    request.clientproto, request.method = b"HTTP/1.1", b"GET"
    request.write(b"")  # the status line and headers: the response is chunked from here
    yield transport, request, theirs
    ours.close()
    theirs.close()


def drain_until_resumed(flow: Flow, transport: tcp.Connection, client: socket.socket) -> None:
    """The client reads everything while Twisted sends what it buffered, as the reactor would, until `flow` resumes."""
    client.setblocking(False)
    for _ in range(10_000):
        try:
            while client.recv(1 << 20):
                pass
        except BlockingIOError:
            pass
        transport.doWrite()  # type: ignore[no-untyped-call]
        if not flow.paused:
            return
    pytest.fail("the flow was never resumed")


def test_a_flow_is_paused_while_twisteds_buffer_is_full_and_resumed_once_it_drained(
    pair: tuple[tcp.Connection, http.Request, socket.socket],
) -> None:
    transport, request, client = pair
    flow = Flow(request)
    request.registerProducer(flow, True)  # type: ignore[no-untyped-call]
    flow.write(b"x" * 200_000)  # more than the socket takes and than Twisted buffers before it pauses its producer
    assert flow.paused
    drain_until_resumed(flow, transport, client)


def test_a_flow_writes_nothing_once_its_client_is_gone_or_its_response_ended(
    pair: tuple[tcp.Connection, http.Request, socket.socket],
) -> None:
    _transport, request, _client = pair
    lost, stopped = Flow(request), Flow(request)
    lost.write(b"12345")
    assert request.sentLength == 5
    lost.client_lost()
    lost.write(b"after")
    stopped.stopProducing()
    stopped.write(b"after")
    assert request.sentLength == 5
    request.finish()  # type: ignore[no-untyped-call]
    Flow(request).write(b"after the end")  # Twisted would raise for a write after `finish`
    assert request.sentLength == 5


def flush_head(transport: tcp.Connection, client: socket.socket) -> bytes:
    """Twisted sends the status line and headers it buffered, as the reactor would; the client reads them."""
    transport.doWrite()  # type: ignore[no-untyped-call]
    client.settimeout(2)
    return client.recv(65536)


def test_a_write_goes_straight_to_the_socket_while_twisted_holds_nothing(
    pair: tuple[tcp.Connection, http.Request, socket.socket],
) -> None:
    """Twisted's own path registers the socket for writing and sends on the next turn of the loop: two
    `epoll_ctl` calls per write, 2.5 times a fan-out's CPU. A Twisted release that changed its write buffer would
    fail this (docs/decisions/0013, item 3)."""
    transport, request, client = pair
    reactor: Any = transport.reactor
    assert flush_head(transport, client).startswith(b"HTTP/1.1 200 OK")
    assert reactor.writers == []  # nothing buffered: Twisted unregistered the socket
    flow = Flow(request)
    flow.write(b"hello")
    flow.write(b"again")
    assert client.recv(100) == b"5\r\nhello\r\n5\r\nagain\r\n"  # sent at once, no turn of the loop
    assert reactor.writers == []
    flow.client_lost()
    assert request.sentLength == len("hello") + len("again")  # counted for daphne's access line


def test_after_a_write_the_socket_took_in_part_the_next_waits_behind_twisteds_buffer(
    pair: tuple[tcp.Connection, http.Request, socket.socket],
) -> None:
    transport, request, client = pair
    head = flush_head(transport, client)
    flow = Flow(request)
    big = b"x" * 1_000_000  # more than the kernel takes: the rest is Twisted's
    flow.write(big)
    flow.write(b"last")  # the socket may have room by now, but the rest of `big` goes first
    received = b""
    client.setblocking(False)
    for _ in range(100_000):
        try:
            while chunk := client.recv(1 << 20):
                received += chunk
        except BlockingIOError:
            pass
        transport.doWrite()  # type: ignore[no-untyped-call]
        if received.endswith(b"4\r\nlast\r\n"):
            break
    assert head
    assert received == b"%x\r\n%s\r\n4\r\nlast\r\n" % (len(big), big)


def test_a_wait_for_room_returns_once_the_connection_resumes_or_closes_and_holds_nothing_after(
    pair: tuple[tcp.Connection, http.Request, socket.socket],
) -> None:
    _transport, request, _client = pair

    async def scenario() -> list[bool]:
        resumed, stopped = Flow(request), Flow(request)
        await asyncio.wait_for(resumed.wait_writable(), 1)  # not paused: at once
        resumed.pauseProducing()
        stopped.pauseProducing()
        with contextlib.suppress(TimeoutError):  # a wait given up (the slow-client policy's clock) changes nothing
            await asyncio.wait_for(resumed.wait_writable(), 0.01)
        waits = [asyncio.ensure_future(flow.wait_writable()) for flow in (resumed, stopped)]
        await asyncio.sleep(0.01)
        waited = not any(wait.done() for wait in waits)
        resumed.resumeProducing()
        stopped.stopProducing()
        await asyncio.wait_for(asyncio.gather(*waits), 1)
        # Nothing is kept between waits: an idle stream's flow holds no future.
        return [waited, resumed._writable is None, stopped._writable is None]

    assert asyncio.run(scenario()) == [True, True, True]


def test_a_flow_whose_client_went_mid_response_lets_go_of_its_request(
    pair: tuple[tcp.Connection, http.Request, socket.socket],
) -> None:
    _transport, request, _client = pair
    flow = Flow(request)
    request.registerProducer(flow, True)  # type: ignore[no-untyped-call]
    flow.write(b"12345")
    flow.client_lost()  # Twisted never unregisters a producer whose connection was lost: the request keeps it
    assert request.producer is flow
    # No cycle between them: both go by reference counting, not at the collector's next review.
    assert request not in gc.get_referents(flow)
    assert request.sentLength == 5  # what went out directly was counted first
    flow.abort()  # nothing to drop any more, and no error


def reply(request: Any, message: dict[str, Any]) -> None:
    """`message` through `FlowControlServer`'s reply path alone (no port), as daphne hands it an application's."""
    from streams.server.daphne import FlowControlServer  # noqa: PLC0415  (settings are read at its first use)

    server: Any = FlowControlServer.__new__(FlowControlServer)
    server.connections = {request: {}}
    asyncio.run(server.handle_reply(request, message))


def test_a_stream_lets_go_of_its_header_tables_once_they_went_out_and_goes_on(
    pair: tuple[tcp.Connection, http.Request, socket.socket],
) -> None:
    """What a stream holds for as long as it lasts: not the request's headers (the scope has them) nor the response's
    (sent). The response goes on and ends as chunked HTTP/1.1 after that."""
    transport, started, client = pair
    request: Any = started  # daphne's WebRequest has `handle_reply` besides: given below
    request.requestHeaders.addRawHeader(b"user-agent", b"a browser")
    request.responseHeaders.addRawHeader(b"content-type", b"text/event-stream")
    replies: list[dict[str, Any]] = []
    request.handle_reply = replies.append  # daphne's WebRequest takes the message here: what it writes is below

    reply(request, {"type": "http.response.body", "body": b"", "more_body": True})
    assert len(replies) == 1
    assert list(request.requestHeaders.getAllRawHeaders()) == []
    assert list(request.responseHeaders.getAllRawHeaders()) == []

    request.write(b"data: 1\n\n")
    request.finish()
    transport.doWrite()  # type: ignore[no-untyped-call]
    client.setblocking(False)
    sent = client.recv(1 << 16)
    assert sent.endswith(b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"), sent


def test_a_response_that_has_not_written_keeps_its_headers(
    pair: tuple[tcp.Connection, http.Request, socket.socket],
) -> None:
    request: Any = pair[1]
    request.startedWriting = 0  # as before daphne's first write
    request.responseHeaders.addRawHeader(b"content-type", b"text/event-stream")
    request.handle_reply = lambda message: None
    reply(request, {"type": "http.response.start", "status": 200, "headers": []})
    assert request.responseHeaders.getRawHeaders(b"content-type") == [b"text/event-stream"]


class _ListeningReactor:
    """Just enough of a reactor for a listening port and the connections it accepts (nothing runs)."""

    def addReader(self, reader: object) -> None: ...

    def removeReader(self, reader: object) -> None: ...

    def addWriter(self, writer: object) -> None: ...

    def removeWriter(self, writer: object) -> None: ...


def test_a_port_accepts_every_waiting_connection_in_one_turn() -> None:
    """A reconnect storm through the edge queues thousands of connections at once: Twisted alone would take 1 of
    them on its first turn after a quiet spell (then 21, 41...), and the kernel would drop what overflows."""
    accepted: list[protocol.Protocol] = []

    class Counted(protocol.Protocol):
        def connectionMade(self) -> None:
            accepted.append(self)

    factory: Any = protocol.Factory.forProtocol(Counted)
    port: Any = tcp.Port(0, factory, backlog=1024, interface="127.0.0.1", reactor=_ListeningReactor())
    port.startListening()
    clients: list[socket.socket] = []
    try:
        clients += [socket.create_connection(("127.0.0.1", port.getHost().port), timeout=5) for _ in range(300)]
        port.numberAccepts = 1  # as Twisted leaves it after a quiet spell
        accept_eagerly(port)
        port.doRead()
        assert len(accepted) == 300
        port.doRead()  # nothing waits: the turn ends at once
        assert len(accepted) == 300
    finally:
        for client in clients:
            client.close()
        for made in accepted:
            transport: Any = made.transport
            transport.socket.close()
        port.socket.close()


class _Handled:
    """A transport as far as `hold_send_buffer` reads it: its socket, through the public `getHandle()`."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def getHandle(self) -> socket.socket:
        return self.sock


def test_a_connection_from_the_edge_holds_a_small_send_buffer_and_a_tcp_one_keeps_the_kernels() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX)
    tcp_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with ours, theirs, tcp_sock:
        tcp_before = tcp_sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * EDGE_SEND_BUFFER)  # as large as a kernel's default
        hold_send_buffer(_Handled(ours))
        hold_send_buffer(_Handled(tcp_sock))
        assert ours.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * EDGE_SEND_BUFFER  # doubled, as Linux does
        assert tcp_sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == tcp_before
