"""A pump's wake-up: what `asyncio.Event` does for the one task that waits on it, holding no future while
nobody waits.

Every open stream has one, mostly waited on by its parked pump; an `asyncio.Event` allocates a deque of 64 slots
for its waiters at once (760 bytes) and keeps it for good, and its `wait` is a coroutine, one more frame held
while the pump waits (docs/benchmarks.md, "Memory per idle stream"). This holds a flag and, while its task waits,
one future, which its `wait` returns to be awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator


class Wakeup:
    """Set, clear, wait: `asyncio.Event`'s interface, for one waiting task at a time (a pump's own)."""

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    def wait(self) -> Awaitable[None]:
        """What to await until it is set: a future, not a coroutine, so no frame of this method is held while the
        pump waits."""
        if self._flag:
            return _SET
        waiter = self._waiter
        if waiter is None or waiter.done():  # a wait cancelled cancelled its future: a new one
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        return waiter


class _Set:
    """Awaited, done at once."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # a generator that yields nothing


_SET = _Set()
