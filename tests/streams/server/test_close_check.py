"""The close timeout's timer of `ReapOnChange` (streams/server/reaping.py) is armed only for an application still
running after its client went, and let go of once that application finishes: a request whose application is done is
forgotten with no timer holding it, so a closed stream's memory goes at once, not `application_close_timeout`
later."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from twisted.internet import reactor as installed_reactor

from streams.server.reaping import ReapOnChange

reactor: Any = installed_reactor  # twisted's stubs type the module attribute as the interface, self included


class _Server:
    def __init__(self) -> None:
        self.connections: dict[Any, dict[str, Any]] = {}
        self.application_close_timeout = 10.0

    def protocol_disconnected(self, protocol: Any) -> None:
        self.connections[protocol].setdefault("disconnected", time.time())


class _Reaping(ReapOnChange, _Server):
    pass


def timers_holding(protocol: object) -> int:
    return sum(1 for call in reactor.getDelayedCalls() if protocol in call.args)


def test_only_an_application_running_past_its_clients_going_gets_a_timer_and_just_one() -> None:
    loop = asyncio.new_event_loop()
    try:
        server = _Reaping()
        done, running = object(), object()
        for protocol in (done, running):
            server.connections[protocol] = {"application_instance": loop.create_future()}
        server.connections[done]["application_instance"].set_result(None)
        for protocol in (done, running):
            server.protocol_disconnected(protocol)
            server.reap(protocol)
            server.reap(protocol)  # looked at again before its application finished: no second timer
        assert done not in server.connections  # forgotten at once
        assert timers_holding(done) == 0
        assert running in server.connections
        assert timers_holding(running) == 1
    finally:
        for call in reactor.getDelayedCalls():
            if running in call.args:
                call.cancel()
        loop.close()


def test_an_application_that_finishes_after_its_client_went_takes_its_timer_with_it() -> None:
    # A reconnect storm's usual case: thousands of clients go at once, the once-a-second check finds most of their
    # applications still ending, and each gets a timer; they finish within the second.
    loop = asyncio.new_event_loop()
    try:
        server = _Reaping()
        running = object()
        server.connections[running] = {"application_instance": loop.create_future()}
        server.protocol_disconnected(running)
        server.reap(running)
        assert timers_holding(running) == 1
        server.connections[running]["application_instance"].set_result(None)
        server.reap(running)  # as its done callback has it noted
        assert running not in server.connections
        assert timers_holding(running) == 0  # nothing holds the request until the close timeout
    finally:
        for call in reactor.getDelayedCalls():
            if running in call.args:
                call.cancel()
        loop.close()
