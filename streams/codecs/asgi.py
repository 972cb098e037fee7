"""ASGI types and request helpers shared by the stream endpoint and the guards."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]


def header(scope: Scope, name: bytes) -> bytes | None:
    """A request header by its lower-case name; the last one wins, as in Zilla."""
    found = None
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            found = bytes(value)
    return found


async def until_disconnect(
    work: Coroutine[Any, Any, None], receive: Receive, stop: asyncio.Future[Any], *, name: str
) -> asyncio.Task[None]:
    """Run `work` until it ends, the client disconnects or `stop` resolves: whichever comes first cancels the
    others, so a disconnect ends the work at once. Returns the work's task, done or cancelled."""

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    working = asyncio.create_task(work, name=name)
    watcher = asyncio.create_task(disconnected(), name="disconnect")
    try:
        await asyncio.wait({working, watcher, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (working, watcher):
            task.cancel()
        stop.cancel()
        await asyncio.gather(working, watcher, return_exceptions=True)
    return working
