"""Noticing streams that should be receiving and are not: the symptom of a defect, made visible.

A stream is *stalled* when its read position has not moved for `stall_s` while its client reads (its
connection is not full) and, at two checks in a row (a fetch in flight at one check is no stall), either the
cache holds records past that position, or Kafka's end of one of its partitions moved past it since the
stream went quiet while the fetcher has not reported reaching Kafka's end since it moved (an aborted
transaction's records and markers move it with nothing to deliver, and the fetcher reports its end again). A stalled
stream is logged once, with its route and topic, and counted (`/-/health`: `stalled_streams` now,
`stalls_noticed` since start). Nothing is repaired here: the cure belongs in the code that stalled.

Kafka is asked for a topic's ends only when one of its streams has been quiet for `stall_s`, so a busy topic
costs nothing and a quiet one one lookup per check.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streams.hub.topic_state import TopicState, Watched

if TYPE_CHECKING:
    from streams.hub.cache import Cache
    from streams.kafka.client import Metadata

log = logging.getLogger(__name__)


@dataclass(slots=True)  # one per open stream: no dict of its own
class Quiet:
    # The read position that has not moved: the stream's own dict, which is replaced and never changed in place
    # (streams/stream/reader.py), so it is kept, not copied.
    cursors: dict[int, int]
    since: float
    highs: dict[int, int] | None = None  # Kafka's ends when the stream was first found quiet for long
    grew_at: dict[int, float] | None = None  # when each partition's end was first seen past `highs`
    behind: bool = False  # the last check found it behind
    stalled: bool = False


class StallWatch:
    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self.noticed = 0
        self._quiet: dict[Watched, Quiet] = {}

    @property
    def stalled(self) -> int:
        return sum(quiet.stalled for quiet in self._quiet.values())

    def forget(self, stream: Watched) -> None:
        quiet = self._quiet.pop(stream, None)
        if quiet is not None and quiet.stalled:
            log.warning("a stalled stream of route %s left without receiving anything", stream.label)

    async def check(
        self,
        topics: list[TopicState],
        cache: Cache,
        metadata: Metadata,
        now: float,
        waiting: Collection[tuple[str, int]] = (),
    ) -> None:
        """`waiting`: (topic, partition)s whose records wait for their schema registry (streams/kafka/decoding.py),
        a known cause that `/readyz` names: their streams are quiet, not stalled."""
        for state in topics:
            suspects = [stream for stream in list(state.subscribers) if self._quiet_for_long(stream, now)]
            if not suspects:
                continue
            try:
                marks = await metadata.watermarks(state.name, state.info.partitions)
            except Exception:  # Kafka unreachable: nothing to compare with, and streams wait for it anyway
                log.debug("stall check of %s: no watermarks", state.name, exc_info=True)
                continue
            highs = {partition: mark.high for partition, mark in marks.items()}
            for stream in suspects:
                if stream in state.subscribers and stream in self._quiet:
                    self._judge(stream, state, cache, highs, now, waiting=waiting)

    def _quiet_for_long(self, stream: Watched, now: float) -> bool:
        quiet = self._quiet.get(stream)
        if quiet is None or quiet.cursors != stream.cursors or not stream.receiving():
            if quiet is not None and quiet.stalled:
                log.warning("a stalled stream of route %s receives again", stream.label)
            self._quiet[stream] = Quiet(stream.cursors, now)
            return False
        return now - quiet.since >= self.stall_s

    def _judge(
        self,
        stream: Watched,
        state: TopicState,
        cache: Cache,
        highs: Mapping[int, int],
        now: float,
        *,
        waiting: Collection[tuple[str, int]],
    ) -> None:
        quiet = self._quiet[stream]
        behind = []
        for partition, cursor in stream.cursors.items():
            if (state.name, partition) in waiting:
                continue
            window = cache.log(state.name, partition)
            unread = window is not None and (cursor < window.start or bool(window.read(cursor, 1)))
            high = highs.get(partition, cursor)
            grew = quiet.highs is not None and high > quiet.highs.get(partition, high)
            caught_up = False
            if grew:
                if quiet.grew_at is None:
                    quiet.grew_at = {}
                grew_at = quiet.grew_at.setdefault(partition, now)
                # The fetcher is at Kafka's end only if it said so after that end moved: an end it reached before
                # (a live stream's usual place) says nothing of the records that came since.
                caught_up = partition in state.at_end and state.end_reported_at.get(partition, -1.0) >= grew_at
            if unread or (grew and high > cursor and not caught_up):
                behind.append(partition)
        if quiet.highs is None:
            quiet.highs = dict(highs)
        was_behind, quiet.behind = quiet.behind, bool(behind)
        if behind and was_behind and not quiet.stalled:
            quiet.stalled = True
            self.noticed += 1
            log.warning(
                "stalled stream: route %s, topic %s, partitions %s: nothing read for %.0f s while Kafka has more "
                "(read position %s, Kafka's end %s)",
                stream.label, state.name, behind, now - quiet.since,
                {p: stream.cursors[p] for p in behind}, {p: highs.get(p) for p in behind},
            )  # fmt: skip
