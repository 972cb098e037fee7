"""What the fetcher reports, taken into the topic state: batches of records, and where partitions start.

`on_batch` appends each partition's records to its cache window, marks partitions read up to their end (unless
paused since they were polled), and schedules the fan-out of every topic touched. `on_lows` moves a partition's
known start up when Kafka's moved (records deleted, or past retention). Both run on the event loop, called by the
fetcher (streams/kafka/fetcher.py).

Handed the hub's topics, the cache, the fetcher's `paused` and the fan-out's `schedule`; it never imports the hub.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streams.hub.cache import Cache
from streams.hub.topic_state import TopicState
from streams.kafka.fetcher import FetchedBatch


class Arrivals:
    def __init__(
        self,
        topics: dict[str, TopicState],
        cache: Cache,
        *,
        paused: Callable[[tuple[str, int]], bool],
        schedule: Callable[[TopicState], None],
    ) -> None:
        self.topics, self.cache = topics, cache
        self._paused, self._schedule = paused, schedule

    def on_batch(self, batch: FetchedBatch) -> None:
        touched: set[str] = set()
        for (topic, partition), records in batch.records.items():
            self.cache.append(topic, partition, records)
            state = self.topics.get(topic)
            if state is not None:
                state.at_end.discard(partition)
                touched.add(topic)
        for topic, partition in batch.eof:
            state = self.topics.get(topic)
            if state is not None and not self._paused((topic, partition)):  # polled before its pause
                state.reached_end(partition, time.monotonic())
                touched.add(topic)
        for topic in touched:
            self._schedule(self.topics[topic])

    def on_lows(self, lows: dict[tuple[str, int], int]) -> None:
        """Kafka's start of the partitions being fetched, from the fetch responses: records deleted or past
        retention move it while the cache window may still hold them. New streams start there and resumes below
        it get a reset, as when the start comes from a lookup (streams/hub/start_finder.py)."""
        for (topic, partition), low in lows.items():
            state = self.topics.get(topic)
            if state is not None and low > state.low.get(partition, low):
                state.low[partition] = low
