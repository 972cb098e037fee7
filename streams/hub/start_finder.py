"""Where a new stream starts in each partition: from the cache when it can answer, else from Kafka's watermarks.

The decision itself is pure (`plan_start` in streams/events/start_plan.py); this module gathers what it needs with as
few broker round trips as it can: none when the fetcher is at the end of every partition and the cache window
holds the requested offsets, one watermark lookup shared by every stream starting together otherwise.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from bindings.selectors import START_LIVE
from streams.codecs.event_id import OFFSET_EARLIEST
from streams.events.start_plan import StartPlan, plan_start, since_offsets
from streams.hub.cache import Cache
from streams.hub.topic_state import TopicState
from streams.kafka.client import Metadata, Watermarks

SINCE_KEYS_KEPT = 1024


class SinceLookup:
    """One `?since=` lookup in flight or answered. Its age counts from the answer, not the question: a lookup
    slower than SSE_SINCE_CACHE_S (a loaded broker) is still shared by the streams asking right after it."""

    __slots__ = ("answered_at", "task")

    def __init__(self, task: asyncio.Task[dict[int, int]], loop: asyncio.AbstractEventLoop) -> None:
        self.task = task
        self.answered_at: float | None = None
        task.add_done_callback(lambda _: setattr(self, "answered_at", loop.time()))

    def older_than(self, moment: float) -> bool:
        return self.answered_at is not None and self.answered_at < moment


WATERMARKS_REUSE_S = 0.2  # streams starting together share one lookup (a reconnect storm sends one, not 10 000)


@dataclass(frozen=True)
class Positions:
    plan: StartPlan
    starts: dict[int, int]  # first offset to read per partition (the earliest resolved)
    ends: dict[int, int]  # each partition's end as of subscribe time


class StartFinder:
    def __init__(self, metadata: Metadata, cache: Cache, loop: asyncio.AbstractEventLoop) -> None:
        self.metadata, self.cache, self.loop = metadata, cache, loop
        # (topic, since ms) -> the lookup: `?since=` answers shared by streams asking the same
        self.since: OrderedDict[tuple[str, int], SinceLookup] = OrderedDict()

    async def positions(
        self, state: TopicState, *, resumed: Mapping[int, int] | None, start: str, since_ms: int | None
    ) -> Positions:
        """Where a new stream starts; broker round trips only when the cache cannot answer."""
        marks = self._cached_marks(state, resumed, start) if since_ms is None else None
        if marks is None:
            asked = self.loop.time()
            marks = await self._watermarks(state, not_before=asked - WATERMARKS_REUSE_S)
            if resumed and any(marks[p].high < offset for p, offset in resumed.items() if p in marks):
                # Past the end of a shared answer: ask again before calling it a reset (it may be just newer).
                marks = await self._watermarks(state, not_before=asked)
        since = None
        if since_ms is not None:
            since = since_offsets(await self._offsets_for_time(state, since_ms), marks)
        plan = plan_start(marks, resumed=resumed, start=start, since=since)
        starts = {p: marks[p].low if o == OFFSET_EARLIEST else o for p, o in plan.offsets.items()}
        return Positions(plan, starts, {p: m.high for p, m in marks.items()})

    async def _watermarks(self, state: TopicState, *, not_before: float) -> dict[int, Watermarks]:
        """The broker's watermarks from a lookup started at `not_before` or later: one lookup in flight per
        topic, shared by every stream that can take it."""
        task = state.marks
        if task is None or state.marks_at < not_before:
            task = state.marks = self.loop.create_task(self.metadata.watermarks(state.name, state.info.partitions))
            state.marks_at = self.loop.time()
        try:
            marks = await asyncio.shield(task)
        except Exception:
            if state.marks is task:
                state.marks = None  # the next stream asks again
            raise
        state.low.update({p: m.low for p, m in marks.items()})
        return marks

    async def _offsets_for_time(self, state: TopicState, since_ms: int) -> dict[int, int]:
        """Kafka's first offset at or after `since_ms` per partition, looked up once for every stream asking the
        same within SSE_SINCE_CACHE_S. An answer of -1 (no record yet at that time) is not kept: a record may
        come any moment, while a found offset stays the answer (later records get later offsets)."""
        key = (state.name, since_ms)
        found = self.since.get(key)
        if found is None or found.older_than(self.loop.time() - settings.SSE_SINCE_CACHE_S):
            lookup = self.metadata.offsets_for_time(state.name, state.info.partitions, since_ms)
            found = self.since[key] = SinceLookup(self.loop.create_task(lookup), self.loop)
            while len(self.since) > SINCE_KEYS_KEPT:
                self.since.popitem(last=False)
        try:
            offsets = await asyncio.shield(found.task)
        except Exception:
            self._forget(key, found)
            raise
        if any(offset < 0 for offset in offsets.values()):
            self._forget(key, found)
        return offsets

    def _forget(self, key: tuple[str, int], found: SinceLookup) -> None:
        if self.since.get(key) is found:
            del self.since[key]

    def _cached_marks(
        self, state: TopicState, resumed: Mapping[int, int] | None, start: str
    ) -> dict[int, Watermarks] | None:
        """Watermarks from the cache, when the fetcher is at the end and the window holds what is asked."""
        marks = {}
        for partition in state.info.partitions:
            window = self.cache.log(state.name, partition)
            low = state.low.get(partition)
            if window is None or low is None or partition not in state.at_end:
                return None
            requested = None if resumed is None else resumed.get(partition, OFFSET_EARLIEST)  # as plan_start
            if requested is None or requested == OFFSET_EARLIEST:
                if (requested == OFFSET_EARLIEST or start != START_LIVE) and window.start > low:
                    return None  # history older than the window: the broker must say where it begins
            elif not window.start <= requested <= window.next_offset:
                return None
            marks[partition] = Watermarks(low, window.next_offset)
        return marks
