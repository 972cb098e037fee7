"""Streams opening together are served in the order they came: at most `SSE_OPENS_AT_ONCE` at a time.

A stream's open (route, guard, topic, start positions, headers, the catch-up to the live end) takes several turns
of the event loop: it waits for a shared watermark lookup, its headers' send, its reader. When thousands open
together (a reconnect storm: the edge hands a worker every resuming client within a second), each of them advances
one step per turn among all the others, so all of them get their headers and first events near the end of the
storm, the first to come as late as the last. Here the first `at_once` go through while the others wait, in the
order they came, for one of them to be done: early clients are served early, and the last as late as before.

A stream holds its place from the start of its request until its pump first has nothing more to write (it is
caught up, or waits for records), or its request ends (a problem response, the client gone), or `hold_s` has
passed, whichever comes first: a stream whose open waits on a slow broker keeps the others waiting `hold_s` at most.
"""

from __future__ import annotations

import asyncio
from collections import deque

from django.conf import settings

OPENING_HOLD_S = 1.0  # the longest a stream keeps its place, so one slow open holds up the others that long at most


class Place:
    """A stream's place among those opening; `leave()` gives it to the next waiting, once."""

    __slots__ = ("openings", "timer")

    def __init__(self, openings: Openings | None, timer: asyncio.TimerHandle | None = None) -> None:
        self.openings = openings
        self.timer = timer

    def leave(self) -> None:
        openings, self.openings = self.openings, None
        if openings is not None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            openings.vacate()


UNLIMITED = Place(None)  # the place of every stream when nothing is limited: leaving it does nothing


class Openings:
    """The streams of one process that are opening: at most `at_once` (0: no limit), the others in a queue."""

    def __init__(self, at_once: int | None = None, hold_s: float = OPENING_HOLD_S) -> None:
        self.at_once = settings.SSE_OPENS_AT_ONCE if at_once is None else at_once
        self.hold_s = hold_s
        self.busy = 0  # places taken, handed over ones included
        self.queue: deque[asyncio.Future[None]] = deque()
        self.waited = 0  # streams that waited for a place, since start (`/-/health`)

    async def enter(self) -> Place:
        """A place among the streams opening, as soon as one is free and everyone who came before has one."""
        if self.at_once <= 0:
            return UNLIMITED
        if self.busy < self.at_once and not self.queue:
            self.busy += 1
        else:
            turn = asyncio.get_running_loop().create_future()
            self.queue.append(turn)
            self.waited += 1
            try:
                await turn  # `vacate` handed a place over: it is counted in `busy` already
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self.vacate()  # handed over just as the stream went: the next one takes it
                else:
                    self.queue.remove(turn)
                raise
        place = Place(self)
        place.timer = asyncio.get_running_loop().call_later(self.hold_s, place.leave)
        return place

    def vacate(self) -> None:
        """A place was left: the first stream still waiting takes it, or it is free."""
        while self.queue:
            turn = self.queue.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.busy -= 1
