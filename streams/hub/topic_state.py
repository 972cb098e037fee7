"""The shared topic state: what a process knows of each topic its streams read, in a module nobody owns.

The hub creates a `TopicState` per topic and keeps them; the start finder, the stall watch and the deletions
read and update the ones they are handed, and the streams hold theirs. None of them imports another to reach
it, so the hub's collaborators never import the hub (as aiokafka's `subscription_state.py` serves its fetcher
and its group coordinator).

Also here: what a stream reading a topic is to the hub (`Subscriber`), and to the stall watch (`Watched`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.hub.shared_reads import SharedReads
from streams.kafka.client import TopicInfo, Watermarks


class Watched(Protocol):
    """A stream as the stall watch sees it (streams/hub/watchdog.py)."""

    label: str  # the route, for the log

    @property
    def cursors(self) -> dict[int, int]:
        """Next offset to read, per partition."""

    def receiving(self) -> bool:
        """The client takes what is written (its connection is not full, the stream not ended)."""


class Subscriber(Watched, Protocol):
    """A stream reading a topic through the hub (what the stall watch needs of it, and the fan-out's hooks)."""

    def share_key(self) -> Hashable | None:
        """Subscribers with equal keys would write the same bytes for the next batch; None: not shareable now."""

    def notify(self) -> bytes | None:
        """New records (or a partition's end) arrived for the topic; called on the event loop. Returns the bytes
        it wrote, or None when it left the work to its own task."""

    def share(self, followers: list[Any], data: bytes) -> None:
        """Write what this one just wrote (`data`, returned by `notify`) to `followers`, subscribers with the same
        share key, and give them its position."""

    def account(self, clients: int) -> None:
        """Count what the last write delivered, to `clients` clients (a group's leader counts for the group)."""

    def gone(self) -> None:
        """The topic was deleted: the stream ends (streams/hub/deletions.py)."""

    def grow(self, starts: Mapping[int, int]) -> None:
        """Partitions were added to the topic: read them too, from `starts` (each one's first offset), and name
        them in the ids from now on. Partitions it reads already are left as they are."""


@dataclass
class TopicState:
    name: str
    info: TopicInfo
    described_at: float
    low: dict[int, int] = field(default_factory=dict)  # earliest offsets, as last looked up
    at_end: set[int] = field(default_factory=set)  # partitions the fetcher has read up to their end
    # When the fetcher last said so, per partition (time.monotonic()): Kafka's end may have moved since.
    end_reported_at: dict[int, float] = field(default_factory=dict)
    subscribers: set[Subscriber] = field(default_factory=set)
    idle_since: float | None = None
    bootstrap: bool = False
    last_fanout: float = float("-inf")
    fanout_cost: float = 0.0  # seconds the last fan-out held the loop
    fanout: asyncio.TimerHandle | None = None  # a coalesced fan-out already scheduled
    marks: asyncio.Task[dict[int, Watermarks]] | None = None  # the latest watermark lookup
    marks_at: float = float("-inf")
    reads: SharedReads = field(default_factory=SharedReads)  # catch-up reads of streams in the same position

    def reached_end(self, partition: int, now: float) -> None:
        """The fetcher read `partition` up to Kafka's end as it was at `now`."""
        self.at_end.add(partition)
        self.end_reported_at[partition] = now
