"""The topic watch: what changed in the topics this process streams, from one metadata request every few seconds.

The consumer alone does not say it. With partitions assigned (no group), librdkafka keeps a deleted topic's
fetch errors (`UNKNOWN_TOPIC_ID`, `UNKNOWN_TOPIC_OR_PART`) to itself and waits for the topic to come back, and it
never offers a partition added to the topic. So the hub's janitor asks Kafka about every topic that has streams
here (or is a bootstrap topic), all of them in one request, and hands on what it finds:

- a topic that no longer exists, or exists under another topic id (deleted and created again): to the deletion
  check (streams/hub/deletions.py), which describes it once more and drops it, ending its streams;
- partitions added (`kafka-topics --alter --partitions`, `AdminClient.create_partitions`): to `Descriptions.grow`
  (streams/hub/descriptions.py), which has every stream of the topic read them from their start and name them
  in its ids (docs/contract.md §4).

A topic nobody streams costs nothing; the rest cost one request per process per check, whatever their number.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from streams.hub.topic_state import TopicState
from streams.kafka.client import Metadata

log = logging.getLogger(__name__)

CHECK_S = 2.0  # how often the topics with streams are described: a deletion or new partition shows within this


class TopicWatch:
    """Handed the hub's topics, the metadata client, and where to hand what it finds: `grow` (the descriptions') for
    added partitions, `suspect` (the deletion check's) for topics gone or replaced."""

    def __init__(
        self,
        topics: dict[str, TopicState],
        metadata: Metadata,
        *,
        grow: Callable[[TopicState, list[int]], Awaitable[None]],
        suspect: Callable[[set[str]], None],
    ) -> None:
        self.topics, self.metadata = topics, metadata
        self._grow, self._suspect = grow, suspect
        self.checks = 0  # requests made since the process started (health endpoint)

    async def check(self) -> None:
        """Describe every topic with streams (or bootstrap) once; hand on deletions and added partitions."""
        watched = {name: state for name, state in self.topics.items() if state.subscribers or state.bootstrap}
        if not watched:
            return
        self.checks += 1
        layouts = await self.metadata.layouts(sorted(watched))
        suspects = set()
        for name, layout in layouts.items():
            state = watched[name]
            if self.topics.get(name) is not state:
                continue  # dropped, or replaced by a new stream's description, while this request was out
            known = state.info.topic_id
            if layout is None or (known and layout.topic_id and layout.topic_id != known):
                suspects.add(name)
            elif not set(layout.partitions) <= set(state.info.partitions):
                await self._grow(state, layout.partitions)
        if suspects:
            self._suspect(suspects)
