"""How a stream ends: its pump, its client's disconnect and `stop` race, in the stream's one task.

The pump runs inline, in the task daphne made for the request. The client's going and `stop` (the route changed,
the token expired or was revoked, the topic was deleted: `Stream.end`) interrupt it by callbacks, which cancel
that task while the pump runs, and only then: an `Interruption` tells the cancellation it caused from any other
(daphne's own, when it stops or gives up on an application), which it lets through. The client's going comes from
the connection's `Flow` (`on_lost`, streams/server/daphne.py); a server that hands over no flow gets a task
reading `receive()` until `http.disconnect` instead, which calls the same callback.

A stream used to run as three tasks (daphne's, its pump's and a watcher of `receive()`, joined by
`asyncio.wait`): in a reconnect storm, their steps and the wait were much of the event loop's share of a stream's
open, a fifth of it (docs/benchmarks.md, "Reconnect storms").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from streams.access.revocations import REVOKED_EVENT
from streams.codecs.asgi import Receive, Send
from streams.server.daphne import Flow
from streams.telemetry.delivery_schema import End

log = logging.getLogger(__name__)


class Interruption:
    """Interrupts `task` while it runs a stream's pump. `interrupt` is the callback of the client's going and of
    `stop`: it cancels the task if the pump still runs (`running`, set false as soon as the pump returns or
    raises), so a late call cancels nothing after it. Called from within the task itself (an HTTP/2 stream reset
    by the pump), it cancels on the loop's next turn, once the task waits, and not at all if the pump has ended
    by then: a cancellation asked for while the task runs would hit whatever it awaits next."""

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.running = True
        self.cancelled = False  # this interruption cancelled the task

    def interrupt(self) -> None:
        if not self.running or self.cancelled:
            return
        if asyncio.current_task() is self.task:
            self.task.get_loop().call_soon(self.interrupt)
            return
        self.cancelled = True
        self.task.cancel()

    def stopped(self, _stop: asyncio.Future[End]) -> None:
        self.interrupt()

    def ours(self) -> bool:
        """Whether a cancellation the task received is this interruption's alone; if it is, it is taken back."""
        return self.cancelled and self.task.uncancel() == 0


async def watch_disconnect(receive: Receive, gone: Callable[[], None]) -> None:
    """Without a flow: read the request's messages until the client's disconnect, then call `gone`."""
    while (await receive())["type"] != "http.disconnect":
        pass
    gone()


async def race(
    pump: Coroutine[Any, Any, None],
    stop: asyncio.Future[End],
    *,
    flow: Flow | None,
    receive: Receive,
    send: Send,
    topic: str,
) -> End:
    """Run `pump` in this task until it ends, the client goes or `stop` resolves. Returns how the stream ended:
    the reason `stop` resolved with (a `REVOKED` stream gets `event:revoked` last), `FAILED` if the pump raised
    (logged), `SLOW_CLIENT` if it returned by itself (it closed a slow client), else `CLIENT_GONE`. A cancellation
    of this task from elsewhere propagates."""
    task = asyncio.current_task()
    assert task is not None  # noqa: S101  (a coroutine of the event loop)
    interruption = Interruption(task)
    stop.add_done_callback(interruption.stopped)
    watcher: asyncio.Task[None] | None = None
    if flow is not None:
        flow.on_lost = interruption.interrupt
        if flow.lost:  # gone while the stream was set up
            interruption.interrupt()
    else:
        watcher = asyncio.create_task(watch_disconnect(receive, interruption.interrupt), name="disconnect")
    returned, failure = False, None
    try:
        try:
            await pump
            returned = True
        finally:
            interruption.running = False
    except asyncio.CancelledError:
        if not interruption.ours():
            raise
    except Exception as exc:  # whatever the pump raised ends the stream as failed, logged below
        failure = exc
    finally:
        stop.remove_done_callback(interruption.stopped)
        if flow is not None:
            flow.on_lost = None
        if watcher is not None:
            watcher.cancel()
    if interruption.cancelled and (returned or failure is not None):
        interruption.task.uncancel()  # the pump took the cancellation without raising it
    stopped = stop.done() and not stop.cancelled()
    stop.cancel()  # a later `Stream.end` finds the stream ended
    if failure is not None:
        log.error("stream on %s failed", topic, exc_info=failure)
    if failure is not None or stopped:
        farewell = REVOKED_EVENT if stopped and stop.result() is End.REVOKED else b""
        await send({"type": "http.response.body", "body": farewell, "more_body": False})
    if failure is not None:
        return End.FAILED
    if stopped:
        return stop.result()
    # The pump returns by itself only when it closed a slow client.
    return End.SLOW_CLIENT if returned else End.CLIENT_GONE
