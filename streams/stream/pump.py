"""The pump: the writing half of a stream. Its `Intake` (streams/stream/intake.py) chooses what goes out next from
what its reader (streams/stream/reader.py) has ready, and the pump writes it to the client in one chunk, with flow
control, the route's slow-client policy and keep-alives (docs/data-plane.md). The hub writes to a parked pump's
client directly (`DirectWrites`), sharing one encoding among pumps in the same position.

Every write, whoever makes it (the pump's task, the hub, the keep-alive), goes out through the stream's one
`Output`, which stamps and counts it: the keep-alive's clock and the delivery log's byte count see them all.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Protocol

from streams.codecs import sse
from streams.codecs.asgi import Send
from streams.events.subscription import Subscription
from streams.hub.hub import Hub
from streams.hub.topic_state import TopicState
from streams.server.daphne import Flow
from streams.stream.intake import Intake, Standing
from streams.stream.reader import ReaderStandpoint, StreamReader
from streams.stream.slow_client import Drained, SlowClientPolicy
from streams.stream.wakeup import Wakeup
from streams.telemetry.counters import StreamStats
from streams.telemetry.delivery_log import DeliverySink

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    """Where a pump stands. Transitions:

        WORKING --nothing more to read or write, at the live end (`Standing.LIVE`)--> PARKED
        WORKING --nothing more to read or write, still catching up--> WAITING
        PARKED or WAITING --woken: records arrived, an event was injected, a keep-alive is due--> WORKING
        any --stop(): the route changed, the token expired; or the stream closed--> STOPPED

    Only a PARKED pump is written to by the hub directly (`notify`, `share`); a WORKING or WAITING one is only
    woken (a WAITING one's task then reads and counts what arrived as catch-up, until it parks at the live end),
    and a STOPPED one writes nothing more, from anywhere.
    """

    WORKING = "working"
    PARKED = "parked"
    WAITING = "waiting"
    STOPPED = "stopped"


class Output:
    """The client's end of a stream, and the one place that writes to it: every write (the task's, the hub's
    direct and shared ones, a keep-alive) goes out here, stamped with its time and counted in bytes. It goes
    through the connection's `Flow` when the server hands one over (written at once), else through ASGI `send`."""

    __slots__ = ("flow", "last_write", "loop", "send", "written")  # as `DirectWrites`' (below)

    def __init__(self, send: Send, flow: Flow | None, loop: asyncio.AbstractEventLoop) -> None:
        self.send, self.flow, self.loop = send, flow, loop
        self.last_write = loop.time()
        self.written = 0  # bytes

    def write_now(self, data: bytes, at: float | None = None) -> None:
        """Write through the flow, here and now (the hub's writes and the keep-alive's, which never wait),
        stamped `at` the time of the write it copies (a fan-out's follower), else now."""
        self.flow.write(data)  # type: ignore[union-attr]  # only a connection with a flow is written to directly
        self.last_write = self.loop.time() if at is None else at
        self.written += len(data)

    async def write(self, data: bytes) -> None:
        """The pump's task's write."""
        if self.flow is not None:
            self.write_now(data)
            return
        await self.send({"type": "http.response.body", "body": data, "more_body": True})
        self.last_write = self.loop.time()
        self.written += len(data)


class DirectWrites:
    """The hub's writes to a pump's client (the pump's `Subscriber` hooks, a base of `Pump`): while the pump is
    parked and its connection has room, the fan-out writes to it here and now, one encoding shared by every pump
    in the same position; anything else is left to the pump's task, which is woken. Given the pump's output,
    intake and reader, and how to wake it; it holds the pump's phase, which says when it may write.

    This is the fan-out's hot path, run for every stream at every batch (1 000 streams at 100 batches/s is
    100 000 calls a second). What it costs there is mostly memory, not instructions: between two batches the
    kernel's socket work evicts the streams' objects from the CPU's caches, so each object a stream's share key
    or write reaches is a cache miss. Hence the slots (the fields sit in the pump itself, no dict beside it),
    the flow kept here rather than reached through the output, a follower's write stamped with its leader's
    time, and a follower's position taken only when it is next needed (`lead`): a follower's turn reaches
    the pump, its output, its flow and the socket, not its reader or subscription."""

    __slots__ = ("_phase", "flow", "intake", "key", "lead", "out", "owed", "reader", "wake")

    def __init__(self, out: Output, intake: Intake, reader: StreamReader, *, wake: Callable[[], None]) -> None:
        self.out, self.intake, self.reader, self.wake = out, intake, reader, wake
        self.flow = out.flow  # the connection's, for good
        self._phase = Phase.WORKING
        # The share key of where the pump stands, kept while only the hub's writes move it: each fan-out then
        # builds one key per group (its leader's), not one per stream. Dropped when the phase changes (the
        # task ran, or will) or the reader grows.
        self.key: Hashable | None = None
        # Where the leader of its last shared writes stood after them, not yet taken by the reader (`catch_up`),
        # and the events those writes delivered: kept while the pump is parked, taken before anything reads
        # the reader or the subscription (the phase changes, it leads a write, it grows).
        self.lead: ReaderStandpoint | None = None
        self.owed = 0

    @property
    def phase(self) -> Phase:
        return self._phase

    @phase.setter
    def phase(self, phase: Phase) -> None:
        self._phase, self.key = phase, None
        self.catch_up()

    def catch_up(self) -> None:
        """Take the position the shared writes left it in (`share`), if they left one not taken yet."""
        if (lead := self.lead) is not None:
            self.lead = None
            self.reader.take_position(lead, self.owed)
            self.owed = 0

    def share_key(self) -> Hashable | None:
        """Pumps with equal keys write the same bytes for the next batch (None: this one cannot share now)."""
        if self._flow() is None:
            return None
        if self.key is None:
            self.catch_up()
            self.key = self.intake.share_key()
        return self.key

    def _flow(self) -> Flow | None:
        """The connection, when the hub may write to it here and now: the pump is parked (so no event of the
        stream's own waits to go first: `Pump.inject` wakes it) and the connection has room."""
        flow = self.flow
        if self._phase is not Phase.PARKED or flow is None or flow.paused or flow.closed:
            return None
        return flow

    def notify(self) -> bytes | None:
        """Write here and now (no task switch per client per batch), or wake the task. Returns what it wrote."""
        flow = self._flow()
        if flow is None:
            self.wake()
            return None
        self.catch_up()
        data = self.intake.lead()
        self.key = self.intake.share_key()  # where it stands now, as do the pumps that take this write
        if data:
            self.out.write_now(data)
        if self.intake.shared_pending or flow.paused:
            self.wake()
        return data

    def share(self, followers: list[Pump], data: bytes) -> None:
        """Write what this pump just wrote (`notify`) to `followers`, pumps whose share key equals this one's,
        and give each this pump's position: its share key, and its standpoint (cursors and subscription state,
        never changed in place, so shared), which the follower's reader takes when it is next needed
        (`catch_up`); each is woken if the window holds more, or its connection is full.

        One loop over the group, with what the followers take looked up once; each write is stamped with this
        pump's time."""
        lead, key = self.reader.standpoint(), self.key
        delivered, pending, at = self.intake.shared_delivered, self.intake.shared_pending, self.out.last_write
        for follower in followers:
            follower.lead = lead
            follower.owed += delivered
            follower.key = key
            if data:
                follower.out.write_now(data, at)
            if pending or follower.flow.paused:  # type: ignore[union-attr]  # it shares a key: it has a flow
                follower.wake()


class PumpOwner(Protocol):
    """What a pump tells the stream it serves (an object, not callbacks: none are made per stream)."""

    def topic_gone(self) -> None:
        """The topic was deleted: how the stream ends."""

    def opened(self) -> None:
        """The pump rested for the first time: it has nothing more to write (caught up, or waiting)."""


class Pump(DirectWrites):
    """Moves one stream's records to its client: everything its intake has ready goes out in one write. A full
    connection is not written to; its slow-client policy decides what happens while it is full. It is the stream
    as the hub sees it (a `Subscriber`); the hub's writes to it while it is parked are its `DirectWrites`, which
    it is (not has: the fan-out then finds the hooks on the class and their state in the pump itself, with no
    object between, for every stream at every batch)."""

    # One per open stream, as long as its client: no dict (docs/benchmarks.md, "Memory per idle stream").
    __slots__ = ("hub", "keepalive", "label", "loop", "owner", "policy", "settled", "state", "subscription", "waiter")  # fmt: skip  # noqa: E501

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
        stats: StreamStats | None = None,
        log: DeliverySink | None = None,
        owner: PumpOwner | None = None,
    ) -> None:
        self.hub, self.subscription = hub, subscription
        self.owner = owner  # the stream: told when the topic is deleted, and when the pump first rests
        self.settled = False  # whether it rested once (and told its owner)
        self.label = label  # the route, for logs and the delivery log
        self.loop = loop = asyncio.get_running_loop()
        self.policy = SlowClientPolicy(conflate=conflate, stats=stats or StreamStats())
        self.waiter = Wakeup()
        reader = StreamReader(hub.cache, hub.kafka, state, subscription, starts)
        intake = Intake(reader, label, log if log is not None and log.enabled else None, loop)
        intake.wake = wake = self.waiter.set  # one bound method for both
        super().__init__(Output(send, flow, loop), intake, reader, wake=wake)
        self.keepalive: KeepAlive | None = None
        self.state = self.reader.state = hub.attach(state, starts, self)

    @property
    def cursors(self) -> dict[int, int]:
        """Next offset to read, per partition: where the last write left the stream (shared or its own)."""
        return self.reader.cursors if self.lead is None else self.lead[0]

    @property
    def delivered(self) -> int:
        """Events written to the client."""
        return self.subscription.delivered + self.owed

    @property
    def written(self) -> int:
        """Bytes written to the client."""
        return self.out.written

    @property
    def replayed(self) -> int:
        """Events read from before the cache window."""
        return self.intake.replayed

    @property
    def standing(self) -> Standing:
        """Live or catching up: how its writes are counted."""
        return self.intake.standing

    def inject(self, data: bytes) -> None:
        """Send `data` (an event of the stream's own, such as a challenge) with the next write."""
        self.intake.injected += data
        if self.phase is Phase.PARKED:  # woken: the hub writes no more to it directly, so the event goes first
            self.phase = Phase.WORKING
        self.waiter.set()

    def stop(self) -> None:
        """Nothing more goes out, not even from the hub's direct writes or a keep-alive."""
        self.phase = Phase.STOPPED
        self.intake.stop()
        if self.keepalive is not None:
            self.keepalive.cancel()

    def gone(self) -> None:
        """The topic was deleted: nothing more goes out, and the stream ends."""
        self.stop()
        if self.owner is not None:
            self.owner.topic_gone()

    def grow(self, starts: Mapping[int, int]) -> None:
        """Partitions were added to the topic: read them from `starts`, and list them in the ids from now on."""
        self.catch_up()
        if self.reader.grow(starts):
            self.key = None
            self.waiter.set()  # their windows may hold records already, which no fan-out will announce

    async def close(self) -> None:
        self.stop()
        self.keepalive = None  # it holds `_idle`, a method of this pump: freed without the collector
        self.hub.detach(self.state, self)
        await self.reader.close_history()

    def receiving(self) -> bool:
        """The client takes what is written: the stream goes on and its connection is not full."""
        flow = self.out.flow
        return self.phase is not Phase.STOPPED and (flow is None or not (flow.paused or flow.closed))

    def account(self, clients: int) -> None:
        self.intake.account(clients)

    async def run(self, keepalive: int) -> None:
        if keepalive:
            self.keepalive = KeepAlive(self.out, keepalive, self._idle)
        flow = self.out.flow
        while True:
            self.waiter.clear()
            if flow is not None and flow.paused:
                drained = await self.policy.wait(flow, self.reader)
                if drained is Drained.CLOSED:
                    return
                self.intake.behind = drained is Drained.BEHIND
            data = await self.intake.next()
            if data:
                if self.phase is not Phase.STOPPED:
                    await self.out.write(data)
                self.account(1)
            if self.reader.busy() or (flow and flow.paused):
                await asyncio.sleep(0)
                continue
            # Parked here, not in a coroutine of its own: every frame an idle (parked) pump waits in is held.
            if self.phase is Phase.STOPPED:
                await self.waiter.wait()  # ended from outside: `stop` is about to interrupt it (streams/edge/race.py)
                continue
            self.phase = Phase.PARKED if self.intake.at_live_end() else Phase.WAITING
            if not self.settled:
                self.settled = True
                if self.owner is not None:
                    self.owner.opened()
            try:
                await self.waiter.wait()
            finally:
                if self.phase is not Phase.STOPPED:
                    self.phase = Phase.WORKING

    def _idle(self) -> None:
        """Nothing was written for the keep-alive's interval. A parked or waiting pump's open connection gets the
        comment at once; a busy pump is asked to send it with its next write."""
        if self.phase is Phase.STOPPED:
            return
        flow = self.out.flow
        if self.phase in (Phase.PARKED, Phase.WAITING) and flow is not None and not flow.paused:
            self.out.write_now(sse.KEEPALIVE)
        else:
            self.intake.keepalive_due = True
            self.waiter.set()


class KeepAlive:
    """The keep-alive timer: each time `interval` seconds pass without a write to `out`, it calls `idle`, which
    sends the comment or has it sent. It sees nothing of the pump but these two."""

    # One per open stream: no dict of its own.
    __slots__ = ("idle", "interval", "out", "timer")

    def __init__(self, out: Output, interval: int, idle: Callable[[], None]) -> None:
        self.out, self.interval, self.idle = out, interval, idle
        self.timer = out.loop.call_at(out.last_write + interval, self._fire)

    def cancel(self) -> None:
        self.timer.cancel()

    def _fire(self) -> None:
        loop = self.out.loop
        now = loop.time()
        if now - self.out.last_write >= self.interval:
            self.idle()
        due = self.out.last_write + self.interval
        if due <= now:
            # `idle` wrote nothing (a full connection gets the comment with its next write): look again an interval
            # from now, or this timer, due in the past, would fire on every turn of the loop until the client reads.
            due = now + self.interval
        self.timer = loop.call_at(due, self._fire)
