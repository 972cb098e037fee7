"""daphne with write flow control: the app learns when a client's transport is full.

Stock daphne's `send()` never waits for the socket: bytes for a client that stops reading pile up in
Twisted's transport buffer without bound. Twisted computes pause/resume for every connection but daphne
registers nobody to hear it; `FlowControlServer` registers a push producer (`Flow`) on each HTTP request and
hands it to the app as `scope["extensions"]["sse.flow"]`. Streams then stop writing to a paused client, and
close it past a bound (it resumes from its Last-Event-ID). Why, and which Twisted internals this relies on:
docs/decisions/0001-daphne-with-write-flow-control.md.

Run with `python -m streams.server` and daphne's usual arguments.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import daphne.server  # noqa: F401  (installs the asyncio reactor before anything imports twisted's)
from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet import tcp
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from config.logs import log_access

FLOW_EXTENSION = "sse.flow"
# Twisted internals `Flow.write` reads. They are not public API: pyproject.toml bounds Twisted's version, and
# tests/test_twisted_internals.py fails, naming what is gone, when a release drops one.
TRANSPORT_INTERNALS = ("TLS", "connected", "socket", "dataBuffer", "offset", "_tempDataLen", "_writeDisconnected")
REQUEST_INTERNALS = ("startedWriting", "chunked", "finished", "sentLength", "_disconnected")
# How many connections a listening port may accept in one turn of the loop (it stops sooner when none is waiting).
ACCEPTS_PER_TURN = 1000


@implementer(IPushProducer)
class Flow:
    """Twisted's pause/resume signal for one HTTP response, readable from asyncio (same thread)."""

    def __init__(self, request: Any) -> None:
        self.request = request
        self.paused = False
        self.closed = False
        self._writable = asyncio.Event()
        self._writable.set()

    # IPushProducer: Twisted calls these on the loop thread (daphne runs the asyncio reactor).
    def pauseProducing(self) -> None:
        self.paused = True
        self._writable.clear()

    def resumeProducing(self) -> None:
        self.paused = False
        self._writable.set()

    def stopProducing(self) -> None:
        self.closed = True
        self._writable.set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def write(self, data: bytes) -> None:
        """Write body bytes, skipping the ASGI send path (the headers went out through it already).

        When the connection has nothing buffered, the chunk goes to the socket at once: Twisted's own path
        would register the socket for writability, send on the next loop turn and unregister it, two
        `epoll_ctl` calls for every write, most of the cost of a fan-out to many clients. Whatever the kernel
        does not take is left to Twisted, whose buffer then drives pause/resume as before. TLS and HTTP/2
        connections always take Twisted's path.
        """
        if self.closed or not data:
            return
        request = self.request
        transport: Any = getattr(getattr(request, "channel", None), "transport", None)
        if not self._can_send_now(request, transport):
            request.write(data)
            return
        request.sentLength += len(data)
        head, tail = b"%x\r\n" % len(data), b"\r\n"
        try:
            sent = transport.socket.sendmsg([head, data, tail])
        except BlockingIOError:
            sent = 0
        except OSError:
            sent = 0  # Twisted notices the broken connection on its next write and cleans up
        total = len(head) + len(data) + len(tail)
        if sent < total:
            transport.write((head + data + tail)[sent:])

    @staticmethod
    def _can_send_now(request: Any, transport: Any) -> bool:
        return bool(
            isinstance(transport, tcp.Connection)
            and not transport.TLS
            and transport.connected
            and not transport._writeDisconnected
            and not transport._tempDataLen
            and len(transport.dataBuffer) == transport.offset
            and request.startedWriting
            and request.chunked
            and not request.finished
            and not request._disconnected
        )

    def abort(self) -> None:
        """Drop the connection at once, buffered bytes and all."""
        self.closed = True
        transport = getattr(self.request, "transport", None) or getattr(self.request.channel, "transport", None)
        if transport is not None:
            transport.abortConnection()


class FlowControlServer(Server):  # type: ignore[misc]
    def run(self) -> None:
        # What is loaded by now (Django, Twisted, the application: most of the process's objects) lives as long
        # as the process. Frozen, it is left out of the cyclic collector's full passes, which otherwise scan it all
        # every few seconds under load: measured at 1000 clients x 100 msg/s, passes of 210-220 ms, each one a
        # pause of the event loop that set the p99 delivery latency.
        gc.freeze()
        super().run()

    def listen_success(self, port: Any) -> None:
        super().listen_success(port)
        if isinstance(port, tcp.Port):
            accept_eagerly(port)

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
        if scope.get("type") == "http" and hasattr(protocol, "registerProducer"):
            flow = Flow(protocol)
            protocol.registerProducer(flow, True)
            scope.setdefault("extensions", {})[FLOW_EXTENSION] = flow
        return super().create_application(protocol, scope)

    async def handle_reply(self, protocol: Any, message: dict[str, Any]) -> None:
        ending = message.get("type") == "http.response.body" and not message.get("more_body", False)
        if ending and getattr(protocol, "producer", None) is not None:
            # Unregister before the response ends, or Twisted logs "Producer was not unregistered".
            protocol.unregisterProducer()
        await super().handle_reply(protocol, message)


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
    server_class = FlowControlServer


def main() -> None:
    FlowControlCLI.entrypoint()


if __name__ == "__main__":
    main()
