"""The Twisted internals that body bounds and connection deadlines read (streams/server/bodies.py,
streams/server/deadlines.py) are still there.

They are not public API, so a Twisted release may drop or rename one; then this test names it, instead of the
bounds quietly failing on live connections.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import twisted
from django.conf import settings
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web import http
from twisted.web._http2 import H2Connection, H2Stream

from streams.server import bodies, deadlines


def test_twisted_still_has_the_internals_the_bounds_read() -> None:
    channel: Any = http.HTTPChannel()  # type: ignore[no-untyped-call]
    channel.makeConnection(StringTransport())  # type: ignore[no-untyped-call]
    channel.dataReceived(b"POST /api/ HTTP/1.1\r\n")  # the request line only: headers still to come
    switch = getattr(http, "_GenericHTTPChannelProtocol", None)
    connection: Any = H2Connection(reactor=Clock())  # type: ignore[no-untyped-call]
    connection.transport = StringTransport()  # type: ignore[no-untyped-call]
    headers = [(b":method", b"GET"), (b":path", b"/")]
    stream: Any = H2Stream(1, connection, headers, http.Request, None, None)  # type: ignore[no-untyped-call]

    missing = [f"HTTPChannel.{name}" for name in bodies.CHANNEL_INTERNALS if not hasattr(channel, name)]
    missing += [f"H2Stream.{name}" for name in bodies.STREAM_INTERNALS if not hasattr(stream, name)]
    missing += [f"H2Connection.{name}" for name in bodies.CONNECTION_INTERNALS if not hasattr(connection, name)]
    missing += [f"H2Connection.{name}" for name in deadlines.HTTP2_INTERNALS if not hasattr(connection, name)]
    if switch is None:
        missing.append("http._GenericHTTPChannelProtocol")
    else:
        wrapped = switch(http.HTTPChannel())  # type: ignore[no-untyped-call]
        missing += [f"_GenericHTTPChannelProtocol.{name}" for name in deadlines.SWITCH_INTERNALS
                    if not hasattr(wrapped, name)]  # fmt: skip
    assert not missing, f"Twisted {twisted.__version__} no longer has what the bounds read: {missing}"
    assert (channel._command, channel._path) == (b"POST", b"/api/")


def test_a_connection_arms_its_header_deadline_and_no_timer_of_twisteds(monkeypatch: Any) -> None:
    """Twisted's 12-hour idle timer was armed, restarted and stopped at every request: three timer operations per
    stream's open for a bound the channel's own deadlines keep tighter."""
    clock = Clock()
    monkeypatch.setattr(deadlines, "reactor", clock)
    factory = deadlines.BoundedHTTPFactory(None)
    protocol: Any = factory.buildProtocol(None)
    protocol.callLater = clock.callLater  # where Twisted's timer would be armed
    protocol._channel.callLater = clock.callLater
    protocol.makeConnection(StringTransport())  # type: ignore[no-untyped-call]
    calls: Sequence[Any] = clock.getDelayedCalls()
    armed = [call.getTime() for call in calls]
    protocol.dataReceived(b"GET /-/hea")  # restarted Twisted's timer; the request line is not complete
    after_bytes = len(clock.getDelayedCalls())
    protocol.connectionLost(None)

    assert armed == [settings.HTTP_HEADER_TIMEOUT_S]
    assert after_bytes == 1
    assert protocol._channel.isSecure() is False
