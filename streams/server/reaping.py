"""Reaping finished connections when they change, not by walking all of them every second.

daphne keeps a dict of its connections and, once a second, walks every one of them: it cancels an application
that outlived its client by `application_close_timeout`, reports an application that raised, and forgets a
connection whose client is gone and whose application is done. With 10 000 streams open that walk took about a
tenth of a core, all the time, and a reconnect storm paid it while every core was short
(docs/benchmarks.md, "Reconnect storms").

Nothing in that walk can change for a connection unless its application finishes or its client goes, and both
are events: `ReapOnChange` notes the connection then (a done callback on the application, daphne's
`protocol_disconnected`, and once more when the close timeout has passed) and the once-a-second check looks at
the noted connections only, with the same rules. The close timeout's timer is armed only for an application
found still running after its client went, and cancelled when that application finishes: armed at every
disconnect, or left to run out, it held each request, its scope and its application for
`application_close_timeout` (10 s) after they were done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from twisted.internet import reactor as installed_reactor

reactor: Any = installed_reactor  # twisted's stubs type the module attribute as the interface, self included

log = logging.getLogger("daphne.server")  # where daphne reports these
CLOSE_CHECK = "sse.close_check"  # in daphne's record of a connection: its close timeout's timer, once armed


class ServerConnections:
    """The connections daphne tracks in this process, for `/-/health` (`server_connections`): one per request in
    flight and per client gone whose application is still finishing. A count that only grows is a leak."""

    server: Any = None  # the process's server, set when it is made (daphne makes its table when it runs)

    @classmethod
    def count(cls) -> int:
        return len(getattr(cls.server, "connections", ()))


class Noted:
    """An application's done callback: its connection is noted as changed. An object with slots, not a closure:
    every open stream's application holds one."""

    __slots__ = ("protocol", "server")

    def __init__(self, server: ReapOnChange, protocol: Any) -> None:
        self.server, self.protocol = server, protocol

    def __call__(self, _done: object) -> None:
        self.server._changed.add(self.protocol)


class ReapOnChange:
    """Mixed into daphne's `Server` (before it): the per-second `application_checker` over changed connections."""

    connections: dict[Any, dict[str, Any]]
    application_close_timeout: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._changed: set[Any] = set()
        ServerConnections.server = self

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        queue = super().create_application(protocol, scope)  # type: ignore[misc]
        instance = self.connections.get(protocol, {}).get("application_instance")
        if instance is not None:
            instance.add_done_callback(Noted(self, protocol))
        return queue

    def protocol_disconnected(self, protocol: Any) -> None:
        super().protocol_disconnected(protocol)  # type: ignore[misc]
        self._changed.add(protocol)

    def application_checker(self) -> None:
        changed, self._changed = self._changed, set()
        for protocol in changed:
            self.reap(protocol)
        reactor.callLater(1, self.application_checker)

    def reap(self, protocol: Any) -> None:
        details = self.connections.get(protocol)
        if details is None:
            return
        disconnected = details.get("disconnected")
        instance = details.get("application_instance")
        if disconnected and instance is not None and not instance.done():
            left = disconnected + self.application_close_timeout - time.time()
            if left < 0:
                log.warning(
                    "Application instance %r for connection %r took too long to shut down and was killed.",
                    instance,
                    protocol,
                )
                instance.cancel()  # its done callback notes the connection again
            elif CLOSE_CHECK not in details:
                # Looked at again once the close timeout has passed, unless it finishes first (its done callback).
                details[CLOSE_CHECK] = reactor.callLater(left + 0.5, self._changed.add, protocol)
            return
        if instance is not None and instance.done():
            self.report(protocol, instance, disconnected=bool(disconnected))
            del details["application_instance"]
            instance = None
        if instance is None and disconnected:
            del self.connections[protocol]
            timer = details.get(CLOSE_CHECK)
            if timer is not None and timer.active():
                # The application finished after its client went: its timer would hold the request, its scope
                # and all they refer to until the close timeout, 10 s after it could go (in a reconnect storm,
                # every stream that was open).
                timer.cancel()

    def report(self, protocol: Any, instance: asyncio.Future[Any], *, disconnected: bool) -> None:
        """What daphne does with an application that raised: stop on KeyboardInterrupt, else log it and answer
        the client with an error if it is still there."""
        if instance.cancelled():
            return
        exception = instance.exception()
        if exception is None:
            return
        if isinstance(exception, KeyboardInterrupt):
            self.stop()  # type: ignore[attr-defined]
            return
        log.error("Exception inside application: %s", exception, exc_info=exception)
        if not disconnected:
            protocol.handle_exception(exception)
