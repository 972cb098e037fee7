"""The pump: moves one stream's records from the cache, or from a historical reader for what the cache no longer
holds, to its client, with flow control and the route's slow-client policy (docs/data-plane.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

from django.conf import settings

from streams import sse
from streams.asgi import Send
from streams.hub import Hub, TopicState
from streams.kafka import HistoricalReader, Record
from streams.server import Flow
from streams.stats import StreamStats
from streams.subscription import Subscription

log = logging.getLogger(__name__)

HISTORY_POLL_S = 0.05
CHUNK_BYTES = 256 * 1024  # at most this much per write, so no connection's buffer holds more


class Pump:
    """Moves one stream's records from the cache (or, for what it no longer holds, a historical reader) to the
    client: everything ready goes out in one write. A full connection is not written to; then, by the route's
    slow-client policy, the client is closed once more than SSE_MAX_PENDING_BYTES behind (it resumes with
    nothing lost), or, conflating, it is sent only the latest pending value per key when it drains."""

    def __init__(
        self,
        hub: Hub,
        state: TopicState,
        subscription: Subscription,
        starts: dict[int, int],
        *,
        send: Send,
        flow: Flow | None,
        conflate: bool = False,
        label: str = "",
    ) -> None:
        self.hub, self.state, self.subscription = hub, state, subscription
        self.label = label  # the route, for logs
        self.cursors = dict(starts)  # next offset to read, per partition
        self.send, self.flow = send, flow
        self.conflate = conflate
        self.behind = False  # conflating: the connection was full, so the next read conflates what is pending
        self.waiter = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.idle = False  # the task is parked waiting: `notify` may write
        self.shared_delivered = 0
        self.shared_pending = False
        self.keepalive = 0
        self.keepalive_due = False
        self.last_write = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None
        self.history: HistoricalReader | None = None
        self.max_pending = settings.SSE_MAX_PENDING_BYTES
        self.stall_grace_s = settings.SSE_STALL_GRACE_MS / 1000
        self.backlog: list[Record] = []  # records from the historical reader not written yet
        self.history_partitions: set[int] = set()
        self.injected = b""
        self.stopped = False
        self.state = hub.attach(state, starts, self)

    def inject(self, data: bytes) -> None:
        """Send `data` (an event of the stream's own, such as a challenge) with the next write."""
        self.injected += data
        self.waiter.set()

    async def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.hub.detach(self.state, self)
        await self.close_history()

    async def close_history(self) -> None:
        """Close the historical reader, if any; it is let go first, so a cancelled close is never repeated."""
        history, self.history, self.backlog = self.history, None, []
        if history is not None:
            await history.close()

    def receiving(self) -> bool:
        """The client takes what is written: the stream goes on and its connection is not full."""
        flow = self.flow
        return not self.stopped and (flow is None or not (flow.paused or flow.closed))

    async def write(self, data: bytes) -> None:
        if self.stopped:
            return
        if self.flow is not None:
            self.flow.write(data)
        else:
            await self.send({"type": "http.response.body", "body": data, "more_body": True})
        self.last_write = self.loop.time()

    def share_key(self) -> Hashable | None:
        """Pumps with equal keys write the same bytes for the next batch (None: this one cannot share now)."""
        flow = self.flow
        if (
            not self.idle
            or flow is None
            or flow.paused
            or flow.closed
            or self.injected
            or self.stopped
            or not self.subscription.settled
        ):
            return None
        return (
            self.subscription.options,
            tuple(self.cursors.items()),
            tuple(self.subscription.progress.items()),
        )

    def notify(self) -> bytes | None:
        """The hub's fan-out: while the task is parked and the connection has room, write here and now (no task
        switch per client per batch); anything else is the task's to do. Returns what it wrote."""
        flow = self.flow
        if not self.idle or flow is None or flow.paused or flow.closed or self.injected or self.stopped:
            self.waiter.set()
            return None
        before = self.subscription.delivered
        data = self.read_cache()
        if data:
            flow.write(data)
            self.last_write = self.loop.time()
        self.shared_pending = self.pending()
        if self.shared_pending or flow.paused:
            self.waiter.set()
        self.shared_delivered = self.subscription.delivered - before
        return data

    def adopt(self, leader: Pump, data: bytes) -> None:
        """Write what `leader`, whose share key equals this one's, just wrote, and take its position."""
        assert self.flow is not None  # noqa: S101  (share_key is None without a flow)
        self.cursors = dict(leader.cursors)
        self.subscription.adopt(leader.subscription, leader.shared_delivered)
        if data:
            self.flow.write(data)
            self.last_write = leader.last_write
        if leader.shared_pending or self.flow.paused:
            self.waiter.set()

    def _keepalive(self) -> None:
        if self.stopped:
            return
        idle_for = self.loop.time() - self.last_write
        if idle_for >= self.keepalive:
            if self.idle and self.flow is not None and not self.flow.paused:
                self.flow.write(sse.KEEPALIVE)
                self.last_write = self.loop.time()
            else:
                self.keepalive_due = True
                self.waiter.set()
        self.timer = self.loop.call_at(self.last_write + self.keepalive, self._keepalive)

    async def run(self, keepalive: int) -> None:
        self.keepalive = keepalive
        if keepalive:
            self.timer = self.loop.call_at(self.last_write + keepalive, self._keepalive)
        while True:
            self.waiter.clear()
            if not await self.writable():
                return
            data = await self.read_history() + self.read_cache()
            if self.injected:
                data, self.injected = self.injected + data, b""
            if self.keepalive_due and not data:
                data = sse.KEEPALIVE
            self.keepalive_due = False
            if data:
                await self.write(data)
            if self.history is not None or self.backlog or self.pending() or (self.flow and self.flow.paused):
                await asyncio.sleep(0)
                continue
            self.idle = True
            try:
                await self.waiter.wait()
            finally:
                self.idle = False

    def pending(self) -> bool:
        """Records are ready in the window, or a partition fell behind it (eviction overtook a slow reader, whose
        task must then read that part from Kafka)."""
        for partition, cursor in self.cursors.items():
            window = self.hub.cache.log(self.state.name, partition)
            if window is None:
                continue
            if cursor < window.start or (cursor < window.next_offset and window.read(cursor, 1)):
                return True
        return False

    async def writable(self) -> bool:
        """Wait while the client's connection is full; False (and the connection closed) once it is too far
        behind."""
        flow = self.flow
        paused_since = asyncio.get_running_loop().time()
        while flow is not None and flow.paused and not flow.closed:
            if self.conflate:
                self.behind = True
                await flow.wait_writable()
                continue
            # A pause alone is no stall (a replay fills the connection for a moment): close only a client that
            # has drained nothing for a while and is far behind.
            stalled = asyncio.get_running_loop().time() - paused_since >= self.stall_grace_s
            if stalled and self.lag_bytes() > self.max_pending:
                StreamStats.closed_slow += 1
                log.info("closing a slow client of %s: more than %d bytes behind", self.state.name, self.max_pending)
                flow.abort()
                return False
            try:
                await asyncio.wait_for(flow.wait_writable(), 0.25)
            except TimeoutError:
                continue
        return True

    def lag_bytes(self) -> int:
        total = 0
        for partition, cursor in self.cursors.items():
            window = self.hub.cache.log(self.state.name, partition)
            if window is not None:
                total += window.lag_bytes(max(cursor, window.start))
        return total

    def read_cache(self) -> bytes:
        records = []
        eof = []
        conflate, self.behind = self.behind, False
        budget = CHUNK_BYTES
        for partition in self.cursors:
            window = self.hub.cache.log(self.state.name, partition)
            if window is not None and conflate and self.cursors[partition] < window.start:
                # Conflating skips what the window no longer holds: a key updated only before it is not resent.
                self.cursors[partition] = window.start
            cursor = self.cursors[partition]
            if window is None or cursor < window.start:
                continue
            got = window.read(cursor, len(window)) if conflate else self._within_budget(window.read(cursor), budget)
            if got:
                records.extend(got)
                budget -= sum(record.size for record in got)
                self.cursors[partition] = got[-1].offset + 1
            elif partition in self.state.at_end:
                eof.append(partition)
        return self.subscription.feed(records, eof, conflate=conflate) if records or eof else b""

    @staticmethod
    def _within_budget(records: list[Record], budget: int) -> list[Record]:
        """The first records whose sizes fit in `budget` (at least one, so a big record still goes out), as a new
        list: callers remove what they took from `records`."""
        total = 0
        for index, record in enumerate(records):
            total += record.size
            if total > budget:
                return records[: max(index, 1)] if budget > 0 else []
        return records[:]

    async def read_history(self) -> bytes:
        """Records older than the cache window, from a short-lived reader that hands over to the window."""
        if self.behind:
            return b""  # a conflating client that fell behind skips to the window instead
        behind = {}
        for partition, cursor in self.cursors.items():
            window = self.hub.cache.log(self.state.name, partition)
            if window is not None and cursor < window.start:
                behind[partition] = cursor
        if not behind:
            await self.close_history()
            return b""
        if self.history is not None and not behind.keys() <= self.history_partitions:
            # Eviction put another partition behind the window: read it too, from where each one stands.
            await self.close_history()
        if self.history is None:
            self.history = HistoricalReader(self.hub.kafka, self.state.name)
            self.history_partitions = set(behind)
            await self.history.start(behind)
        if not self.backlog:
            self.backlog = (await self.history.poll(HISTORY_POLL_S)).records
        records = self._within_budget(self.backlog, CHUNK_BYTES)
        del self.backlog[: len(records)]
        records = [r for r in records if r.partition in behind and r.offset >= self.cursors[r.partition]]
        for record in records:
            self.cursors[record.partition] = record.offset + 1
        return self.subscription.feed(records) if records else b""
