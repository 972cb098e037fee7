"""Catch-up reads shared by the streams of a topic that stand in the same position.

When thousands of clients reconnect at once (a network blip), most resume from the same Last-Event-ID, and each
one's first reads walk the same records of the cache window and encode the same events. The first stream to
read from a position keeps what it wrote and where it then stood (a `Read`); a stream in that same position
afterwards takes it as it is, instead of reading and encoding again.

A read is right for anyone in its position at any later time: the records at given offsets never change, and
if the window has grown since, what was kept is a prefix of what a fresh read would give, and the stream reads
the rest on its next turn. What a stream outputs from a position depends only on its route, its options, its
cursors and its progress once its subscription is settled (`Subscription.settled`): the key holds all four.

Reads are kept per topic (`TopicState.reads`) for a few seconds (a storm's reconnections arrive together), within
a byte budget, oldest out first; the hub's janitor drops expired ones, and a deleted topic's state goes with its
reads.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from streams.events.subscription import Position
from streams.kafka.client import Record
from streams.telemetry.delivery_log import DeliverySink

MAX_BYTES = 2 * 1024 * 1024  # per topic: 8 reads of the largest chunk (streams/stream/reader.py), many more small ones
KEEP_S = 10.0


@dataclass(frozen=True)
class Read:
    """What one read from a position wrote, and where its stream stood after it."""

    at: float  # the loop's time when it was read
    label: str  # the route
    topic: str
    data: bytes
    cursors: dict[int, int]  # next offset to read, per partition
    position: Position  # the subscription's, after the read
    delivered: int  # events it wrote
    batch: tuple[tuple[Record, int], ...]  # each with its size, for the delivery log
    log: DeliverySink | None  # where the first stream counted it

    def size(self) -> int:
        return len(self.data) + 64 * len(self.batch)


class SharedReads:
    def __init__(self, max_bytes: int = MAX_BYTES, keep_s: float = KEEP_S) -> None:
        self.max_bytes, self.keep_s = max_bytes, keep_s
        self.bytes = 0
        self.hits = 0
        self._reads: OrderedDict[Hashable, Read] = OrderedDict()  # oldest first
        # reads taken during this turn of the loop, by streams at the live end or catching up, and how often
        self._taken: dict[tuple[int, bool], tuple[Read, int]] = {}

    def __len__(self) -> int:
        return len(self._reads)

    def get(self, key: Hashable, now: float) -> Read | None:
        read = self._reads.get(key)
        if read is None or now - read.at > self.keep_s:
            return None
        self.hits += 1
        return read

    def put(self, key: Hashable, read: Read) -> None:
        if read.size() > self.max_bytes:
            return
        self._drop(key)
        self._reads[key] = read
        self.bytes += read.size()
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._reads)))
        self.expire(read.at)

    def taken(self, read: Read, *, live: bool) -> None:
        """Another stream wrote `read`: counted in its log with the others that take it during this turn of the
        loop, as one write to that many clients (the per-event work of counting is done once, not per client);
        `live`: that stream stood at the live end, else it was catching up."""
        key = (id(read), live)
        entry = self._taken.get(key)
        if entry is None and not self._taken:
            asyncio.get_running_loop().call_soon(self._count)
        self._taken[key] = (read, 1 if entry is None else entry[1] + 1)

    def _count(self) -> None:
        taken, self._taken = self._taken, {}
        for (_, live), (read, clients) in taken.items():
            if read.log is not None:
                read.log.delivered(read.label, read.topic, read.batch, clients, live=live)

    def expire(self, now: float) -> None:
        """Let go of the reads older than `keep_s`."""
        while self._reads:
            key, oldest = next(iter(self._reads.items()))
            if now - oldest.at <= self.keep_s:
                return
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        read = self._reads.pop(key, None)
        if read is not None:
            self.bytes -= read.size()
