"""daphne with write flow control: the app learns when a client's transport is full.

Stock daphne's `send()` never waits for the socket: bytes for a client that stops reading pile up in
Twisted's transport buffer without bound. Twisted computes pause/resume for every connection but daphne
registers nobody to hear it; `FlowControlServer` registers a push producer (`Flow`) on each HTTP request and
hands it to the app as `scope["extensions"]["sse.flow"]`. Streams then stop writing to a paused client, and
close it past a bound (it resumes from its Last-Event-ID). See shared/reference/daphne-flow-control.md.

Run with `python -m streams.server` and daphne's usual arguments.
"""

from __future__ import annotations

import asyncio
from typing import Any

import daphne.server  # noqa: F401  (installs the asyncio reactor before anything imports twisted's)
from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

FLOW_EXTENSION = "sse.flow"


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
        """Write body bytes straight to the transport, skipping the ASGI send path (headers already sent)."""
        if not self.closed:
            self.request.write(data)

    def abort(self) -> None:
        """Drop the connection at once, buffered bytes and all."""
        self.closed = True
        transport = getattr(self.request, "transport", None) or getattr(self.request.channel, "transport", None)
        if transport is not None:
            transport.abortConnection()


class FlowControlServer(Server):  # type: ignore[misc]
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


class FlowControlCLI(CommandLineInterface):  # type: ignore[misc]
    server_class = FlowControlServer


def main() -> None:
    FlowControlCLI.entrypoint()


if __name__ == "__main__":
    main()
