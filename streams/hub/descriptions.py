"""What the process knows of each topic's layout: described once for any number of concurrent callers, and grown.

A topic's partitions and cleanup policy come from one `describe` (through the metadata client, off the event
loop) shared by every stream asking at once, and are kept `METADATA_TTL_S`. A description that finds partitions
the topic did not have, or the topic watch (streams/hub/topic_watch.py) finding them, grows the topic: every
stream of it reads the new partitions from their first offset. Bootstrap topics are described and opened from
their start when the hub starts (`warm`).

Handed the hub's topics, the metadata client, the deletion check's `current` (a name that now names another
topic is dropped) and the hub's `open` (a cache window and a fetch per partition); it never imports the hub.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from streams.hub.topic_state import TopicState
from streams.kafka.client import Metadata, TopicInfo

log = logging.getLogger(__name__)

METADATA_TTL_S = 30.0


class Descriptions:
    def __init__(
        self,
        topics: dict[str, TopicState],
        metadata: Metadata,
        *,
        current: Callable[[str, TopicInfo], TopicState | None],
        open: Callable[[TopicState, Mapping[int, int]], None],
    ) -> None:
        self.topics, self.metadata = topics, metadata
        self._current, self._open = current, open
        self._describing: dict[str, asyncio.Task[TopicState]] = {}

    async def topic(self, name: str) -> TopicState:
        """The topic's state, described once for any number of concurrent callers; raises like Metadata."""
        state = self.topics.get(name)
        if state is not None and time.monotonic() - state.described_at < METADATA_TTL_S:
            return state
        task = self._describing.get(name)
        if task is None:
            task = self._describing[name] = asyncio.get_running_loop().create_task(self._describe(name))
            task.add_done_callback(lambda _: self._describing.pop(name, None))
        try:
            return await asyncio.shield(task)
        finally:
            # A task that raised holds its exception, whose traceback holds this frame: without `task` in it, no
            # cycle, and the exception goes with its last reference (a flood of unknown topics leaves nothing).
            del task

    async def _describe(self, name: str) -> TopicState:
        info = await self.metadata.describe(name)
        state = self._current(name, info)  # None also when the name now names another topic
        if state is None:
            state = self.topics[name] = TopicState(name, info, time.monotonic())
        else:
            await self.grow(state, info.partitions)  # its streams must read the partitions added, too
            state.info, state.described_at = replace(info, partitions=state.info.partitions), time.monotonic()
        return state

    async def grow(self, state: TopicState, partitions: list[int]) -> None:
        """The topic has `partitions` now: those added since it was described are read by every stream of the
        topic from their first offset (all of their records are newer than the streams), and new streams list
        them. Raises like Metadata, before changing anything."""
        added = set(partitions) - set(state.info.partitions)
        if not added:
            return
        marks = await self.metadata.watermarks(state.name, sorted(added))
        added -= set(state.info.partitions)  # another call may have grown it meanwhile
        if not added or self.topics.get(state.name) is not state:
            return
        firsts = {p: marks[p].low for p in sorted(added)}
        log.info("topic %s has %d partitions more: %s", state.name, len(added), sorted(added))
        state.low.update(firsts)
        state.info = replace(state.info, partitions=sorted({*state.info.partitions, *added}))
        if state.subscribers or state.bootstrap:
            self._open(state, firsts)
        for subscriber in list(state.subscribers):
            subscriber.grow(firsts)

    async def warm(self, topic: str) -> None:
        """A bootstrap topic: described, and read from its start whether or not a stream reads it."""
        try:
            state = await self.topic(topic)
            marks = await self.metadata.watermarks(topic, state.info.partitions)
        except Exception:
            log.exception("bootstrap topic %s could not be fetched", topic)
            return
        state.bootstrap = True
        state.low.update({p: m.low for p, m in marks.items()})
        self._open(state, {p: m.low for p, m in marks.items()})
