"""The queue an application reads its request's messages from (`receive`), lighter than daphne's.

daphne gives every request an `asyncio.Queue`: three `collections.deque`s (its items, its getters, its putters),
each allocating a block of 64 slots at once, 2.3 KB per request, held as long as the request is, so by every
open stream, which after its first `receive()` reads the queue no more (its client's going comes from its
`Flow`, streams/server/daphne.py). An `Inbox` holds nothing while it is empty and nobody waits: its items and
its waiters exist only while there are some (bench/stream_census.py, docs/benchmarks.md "Memory per idle
stream").

`Inboxes`, mixed into daphne's `Server` (before it), makes them: its `create_application` is daphne's, with an
`Inbox` in place of the `asyncio.Queue`. daphne uses the queue it gets back through `put_nowait` and its truth
(an `Inbox` is always true, as a queue is), and the application through `get`, its `receive`.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any


class Inbox:
    """A first-in first-out queue with no bound, for one request: `put_nowait` (daphne) and `get` (the app)."""

    __slots__ = ("_items", "_waiters")

    def __init__(self) -> None:
        self._items: list[Any] | None = None  # None while empty
        self._waiters: list[asyncio.Future[None]] | None = None  # the getters waiting, None while none

    def __bool__(self) -> bool:
        return True  # daphne asks `if self.application_queue:` for "made already"

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items) if self._items else 0

    def put_nowait(self, item: Any) -> None:
        if self._items is None:
            self._items = [item]
        else:
            self._items.append(item)
        self._wake_next()

    def get_nowait(self) -> Any:
        items = self._items
        if not items:
            raise asyncio.QueueEmpty
        item = items.pop(0)
        if not items:
            self._items = None
        return item

    async def get(self) -> Any:
        while not self._items:
            waiter = asyncio.get_running_loop().create_future()
            if self._waiters is None:
                self._waiters = [waiter]
            else:
                self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                self._forget(waiter)
                if self._items and not waiter.cancelled():
                    self._wake_next()  # woken for an item this getter will not take: the next one takes it
                raise
            self._forget(waiter)
        return self.get_nowait()

    def _wake_next(self) -> None:
        for waiter in self._waiters or ():
            if not waiter.done():
                waiter.set_result(None)
                return

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        waiters = self._waiters
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                self._waiters = None


class Inboxes:
    """daphne's `create_application` with an `Inbox` for the queue (the module's docstring says why)."""

    connections: dict[Any, dict[str, Any]]
    application: Any
    handle_reply: Any

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Inbox | None:
        assert "application_instance" not in self.connections[protocol]  # noqa: S101  (daphne's check)
        inbox = Inbox()
        scope.setdefault("asgi", {"version": "3.0"})
        instance = self.application(scope=scope, receive=inbox.get, send=partial(self.handle_reply, protocol))
        if protocol not in self.connections:
            return None
        self.connections[protocol]["application_instance"] = asyncio.ensure_future(instance)
        return inbox
