"""Twisted's HTTP/2 connection, told of what it does for each stream, so that a paused stream is woken, not polled.

Two moments decide when a stream whose peer's window is used up may go on, and Twisted's `H2Connection` tells its
streams of neither:
- a frame left a stream's queue (the send loop took it): once the queue is empty, a stream paused for what it
  queued may resume, and one Twisted paused looks again at its window;
- a WINDOW_UPDATE opened a window: Twisted puts a stream with bytes queued back in the send loop's turns, but does
  not wake the loop if it sleeps, having found nothing to send.

`WindowAwareH2Connection` hears both, and also keeps a stream that has bytes queued and no window out of the send
loop: Twisted's loop would otherwise take it on every turn, find nothing it may send, and turn over at once, a busy
loop for as long as the peer keeps the window shut (measured: 60 % of a core), whatever the stream's producer, so
a refusal answered to a peer that never opens its window is held as cheaply as a stream. The stream's producer
hears of each frame through `frame_sent()`, when it has one (`StreamFlow` in streams/server/daphne.py). A response
that has ended but still waits for a window that never opens is reset after a while (`reset_if_unsent`).

`install()` makes Twisted's HTTP channel build this connection when a TLS client chooses `h2`. What it relies on
(`_requestReceived`, `_sendPrioritisedData`, `_handleWindowUpdate`, `_outboundStreamQueues`, `_sendingDeferred`,
`priority`) is checked by tests/streams/server/test_twisted_internals.py.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

from h2.exceptions import H2Error
from twisted.web import http
from twisted.web._http2 import H2Connection

CONNECTION_HOOKS = ("_requestReceived", "_sendPrioritisedData", "_handleWindowUpdate")


class StreamQueue(deque[Any]):
    """A stream's queue of unsent bytes that tells its connection which stream the send loop took a frame from."""

    def __init__(self, connection: WindowAwareH2Connection, stream_id: int) -> None:
        super().__init__()
        self.connection, self.stream_id = connection, stream_id

    def popleft(self) -> Any:
        self.connection.sending_from = self.stream_id
        return super().popleft()


class WindowAwareH2Connection(H2Connection):
    """`H2Connection` that parks a stream without window, wakes its send loop when a window opens, and tells each
    stream's producer when a frame of the stream was sent."""

    sending_from: int | None = None  # the stream whose queue the send loop took from on this turn

    def _requestReceived(self, event: Any) -> None:
        super()._requestReceived(event)  # type: ignore[no-untyped-call]
        stream_id = event.stream_id
        if stream_id in self._outboundStreamQueues:
            self._outboundStreamQueues[stream_id] = StreamQueue(self, stream_id)

    def _sendPrioritisedData(self, *args: Any) -> None:
        self.sending_from = None
        super()._sendPrioritisedData(*args)  # type: ignore[no-untyped-call]
        stream_id, self.sending_from = self.sending_from, None
        if stream_id is not None and stream_id in self.streams:
            self._after_frame(stream_id)

    def _after_frame(self, stream_id: int) -> None:
        if self._outboundStreamQueues[stream_id] and self.conn.local_flow_control_window(stream_id) <= 0:
            # Out of the loop's turns until a WINDOW_UPDATE, when Twisted's `_handleWindowUpdate` puts it back.
            self.priority.block(stream_id)
        frame_sent = getattr(self.streams[stream_id].producer, "frame_sent", None)
        if frame_sent is not None:
            frame_sent()

    def _handleWindowUpdate(self, event: Any) -> None:
        super()._handleWindowUpdate(event)  # type: ignore[no-untyped-call]
        if self._sendingDeferred is not None and any(self._outboundStreamQueues.values()):
            # Twisted unblocked the streams with bytes queued; the loop sleeps, having found none: wake it. With
            # nothing it may send yet, it finds none again and sleeps.
            waiting, self._sendingDeferred = self._sendingDeferred, None
            waiting.callback(event.stream_id)


def reset_if_unsent(stream: Any, delay_s: float) -> None:
    """A response that has ended while bytes of it still wait for the peer's window (a refusal answered to a client
    that never opens it) holds its stream, request and queue until the peer takes them: reset it if it still waits
    after `delay_s`, so a client cannot pile up finished responses by the thousand."""
    connection, stream_id = stream._conn, stream.streamID
    if not connection._outboundStreamQueues.get(stream_id):
        return

    def reset() -> None:
        if connection.streams.get(stream_id) is stream:
            with contextlib.suppress(H2Error, KeyError):
                stream.abortConnection()

    connection._reactor.callLater(delay_s, reset)


def install() -> None:
    """Have Twisted's HTTP channel build `WindowAwareH2Connection` for each HTTP/2 client from now on."""
    http.H2Connection = WindowAwareH2Connection  # type: ignore[attr-defined]
