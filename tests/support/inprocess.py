"""The data plane in the test process: a real hub, fetcher, cache and broker; a fake client connection.

The event loop runs in a thread of its own, as daphne's does, so the (blocking) tests drive it with `run()`.
Streams are opened as the endpoint opens them (positions, subscription, pump) and write into a `FakeFlow`
whose fullness the test sets.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings

from bindings.selectors import START_HISTORICAL
from streams.codecs.event_id import parse_id
from streams.events.subscription import Subscription, SubscriptionOptions
from streams.hub.hub import Hub
from streams.routes.filters import CompiledFilter
from streams.stream.pump import Pump
from streams.telemetry.delivery_log import DeliveryLog
from tests.support.sse_client import Event, parse_block

T = TypeVar("T")


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class FakeFlow:
    """A client connection: takes every write unless the test marks it full (`paused`)."""

    def __init__(self) -> None:
        self.paused = False
        self.closed = False
        self.data = bytearray()
        self._writable = asyncio.Event()
        self._writable.set()

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.data += data

    def pause(self) -> None:
        self.paused = True
        self._writable.clear()

    def resume(self) -> None:
        self.paused = False
        self._writable.set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def abort(self) -> None:
        self.closed = True
        self._writable.set()

    def events(self) -> list[Event]:
        blocks = bytes(self.data).split(b"\n\n")
        return [event for event in (parse_block(block) for block in blocks[:-1]) if event.is_event]


@dataclass
class OpenStream:
    pump: Pump
    flow: FakeFlow
    task: asyncio.Task[None]
    opened: list[str] = field(default_factory=list)  # what the test expects it to see, filled by the test

    @property
    def events(self) -> list[Event]:
        return self.flow.events()

    @property
    def values(self) -> list[str]:
        return [event.text for event in self.events]

    @property
    def last_id(self) -> str | None:
        events = self.events
        return events[-1].id if events else None


def new_hub(loop: asyncio.AbstractEventLoop, **options: Any) -> Hub:
    """A hub like the server's, with its settings overridden by `options` (idle_s, stall_s, ...)."""
    return Hub(
        settings.KAFKA,
        loop,
        **{"cache_bytes": settings.SSE_CACHE_MAX_BYTES, "idle_s": 60.0, "coalesce_s": 0.0, **options},
    )


async def open_stream(
    hub: Hub,
    topic: str,
    *,
    start: str = START_HISTORICAL,
    last_event_id: str | None = None,
    filters: tuple[CompiledFilter, ...] = (),
    keepalive: int = 0,
    conflate: bool = False,
    log: DeliveryLog | None = None,
) -> OpenStream:
    """Open a stream the way the endpoint does, on a fake connection."""
    state = await hub.topic(topic)
    resumed = parse_id(last_event_id) if last_event_id else None
    positions = await hub.positions(state, resumed=resumed, start=start, since_ms=None)
    options = SubscriptionOptions(filters=filters, compacted=state.info.compacted)
    subscription = Subscription(
        positions.plan.progress, ends=positions.ends, starts=positions.starts, options=options, log_batches=bool(log)
    )
    flow = FakeFlow()
    flow.write(subscription.preamble(positions.plan.resets))
    pump = Pump(
        hub, state, subscription, positions.starts,
        send=_no_send, flow=flow, conflate=conflate, label=f"test:{topic}", log=log,  # type: ignore[arg-type]
    )  # fmt: skip
    task = asyncio.get_running_loop().create_task(pump.run(keepalive))
    return OpenStream(pump, flow, task)


async def close_stream(stream: OpenStream) -> None:
    stream.task.cancel()
    await asyncio.gather(stream.task, return_exceptions=True)
    await stream.pump.close()


async def _no_send(message: dict[str, Any]) -> None:
    raise AssertionError(f"a pump with a flow writes through it, not through send: {message}")
