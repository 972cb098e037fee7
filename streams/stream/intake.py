"""The deciding half of a stream's pump: what its next write carries, and whether the stream stands at the live
end. Nothing here writes to the client (the pump does, streams/stream/pump.py); an `Intake` reads from its
stream's reader (streams/stream/reader.py) and says what goes out.

The stream's own events go first, then what the cache window no longer holds, then the window; a keep-alive
comment only when nothing else goes. What it delivers is counted as live or catch-up as its `Standing` says, so
the delivery log and `/metrics` see every write of the stream once, whoever made it.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Hashable

from streams.codecs import sse
from streams.stream.reader import StreamReader
from streams.telemetry.delivery_log import DeliverySink


class Standing(enum.Enum):
    """Whether a stream stands at the live end, which decides how its writes are counted: a live stream's events
    in the latency histograms (delivery log, `/metrics`), a catching-up stream's in the catch-up count and age
    histogram (docs/data-plane.md, "Live and catch-up"). Transitions:

        CATCHING_UP --it has nothing more to read, and has read every partition up to Kafka's end as it was
                      when the stream opened (`Subscription.reached_ends`)--> LIVE
        LIVE --it must read from Kafka what its cache window no longer holds (eviction overtook it)--> CATCHING_UP

    Every stream starts CATCHING_UP; one that starts at the live end is LIVE at its first look, which finds
    nothing to read. Only a LIVE stream parks where the fan-out writes to it directly, so every direct write is
    live, and telling the two apart costs the fan-out nothing per client.
    """

    CATCHING_UP = "catching_up"
    LIVE = "live"


class Intake:
    """What a pump's writes carry, chosen apart from the writing: the stream's own events first (a challenge),
    then the history older than the cache window, then the window, read shared with the streams of the topic in
    the same position; a keep-alive comment when there is nothing else. A conflating client that fell behind
    skips the history and reads the window conflated. Counts what was replayed and logs what was delivered, as
    live or catch-up as the stream's `Standing` says."""

    # One per open stream: no dict of its own.
    __slots__ = (
        "_due",
        "behind",
        "injected",
        "keepalive_due",
        "label",
        "log",
        "loop",
        "reader",
        "replayed",
        "shared_delivered",
        "shared_pending",
        "standing",
        "subscription",
        "wake",
    )

    def __init__(
        self, reader: StreamReader, label: str, log: DeliverySink | None, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.reader, self.subscription, self.label, self.log, self.loop = reader, reader.subscription, label, log, loop
        self.behind = False  # conflating: the connection was full, so the next read conflates what is pending
        self.injected = b""  # the stream's own events, to go first
        self.keepalive_due = False  # the keep-alive timer asks for one with the next write
        self.replayed = 0  # events read from before the cache window
        self.standing = Standing.CATCHING_UP
        self.shared_delivered = 0  # what the last direct write delivered, shared with the group
        self.shared_pending = False  # the window held more after it
        self.wake: Callable[[], None] | None = None  # the pump's, for a record conflation holds back
        self._due: asyncio.TimerHandle | None = None

    async def next(self) -> bytes:
        """The task's read, for its next write."""
        # A conflating client that fell behind skips the history, to the window.
        before = self.subscription.delivered
        history = b"" if self.behind else await self.reader.read_history()
        if history_events := self.subscription.delivered - before:
            self.replayed += history_events
            self.standing = Standing.CATCHING_UP  # what the window no longer holds: a replay, live or not before
        data = history + self._read_shared()
        due = self.subscription.next_due()
        if due is not None and due <= self.loop.time():  # conflation's wait is over, and nothing new came
            data += self.subscription.feed(())
        self._arm()
        if self.injected:
            data, self.injected = self.injected + data, b""
        if self.keepalive_due and not data:
            data = sse.KEEPALIVE
        self.keepalive_due = False
        return data

    def share_key(self) -> Hashable | None:
        """Where the stream stands, which pumps in the same position share (None: the subscription holds records
        back)."""
        if not self.subscription.settled:
            return None
        progress = tuple(self.subscription.progress.items())
        # The options by identity (one object per value, `SubscriptionOptions.shared`): hashing the key for every
        # stream at every fan-out then runs no Python `__hash__`.
        options = id(self.subscription.options)
        # With deltas, what it last sent of each key, by identity (one object per value, held by this pump or by
        # the position it takes next, so the identity stays its while the key is kept).
        sent = id(self.subscription.sent())
        return (self.label, options, tuple(self.reader.cursors.items()), progress, sent)

    def lead(self) -> bytes:
        """The hub's read for a direct write, kept for the pumps in the same position that take it (`share`): what it
        delivered, and whether the window holds more."""
        before = self.subscription.delivered
        data = self._read_cache()
        self.shared_pending = self.reader.pending()
        self.shared_delivered = self.subscription.delivered - before
        self._arm()
        return data

    def stop(self) -> None:
        """No more wake-ups for what conflation holds back."""
        if self._due is not None:
            self._due.cancel()
            self._due = None

    def _arm(self) -> None:
        """Wake the pump when the first record conflation holds back is due: no record may arrive to carry it."""
        due = self.subscription.next_due()
        if due is None or self.wake is None or (self._due is not None and self._due.when() <= due):
            return
        if self._due is not None:
            self._due.cancel()
        self._due = self.loop.call_at(due, self._fire)

    def _fire(self) -> None:
        self._due = None
        if self.wake is not None:
            self.wake()

    def account(self, clients: int) -> None:
        """Log the events of the last write, which went to `clients` clients (a fan-out group writes once)."""
        if self.log is not None:
            live = self.standing is Standing.LIVE
            self.log.delivered(self.label, self.reader.topic, self.subscription.take_batch(), clients, live=live)

    def at_live_end(self) -> bool:
        """The pump has nothing more to read: whether the stream now stands at the live end (`Standing`)."""
        if self.standing is Standing.CATCHING_UP and self.subscription.reached_ends:
            self.standing = Standing.LIVE
        return self.standing is Standing.LIVE

    def _read_cache(self) -> bytes:
        conflate, self.behind = self.behind, False
        return self.reader.read_cache(conflate=conflate)

    def _read_shared(self) -> bytes:
        """Shared with the streams of the topic in the same position (a storm of resumes)."""
        if self.behind:
            return self._read_cache()
        live = self.standing is Standing.LIVE
        return self.reader.read_shared(self.reader.state.reads, self.label, self.loop.time(), self.log, live=live)
