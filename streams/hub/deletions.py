"""Topics deleted while streams read them: noticed, checked, and dropped, so their streams end and the others go on.

Three signs lead here. The topic watch (streams/hub/topic_watch.py) finds a topic with streams gone, or under
another topic id: on Apache Kafka the only sign, since librdkafka keeps the fetch errors of a deleted topic's
assigned partitions to itself. The consumer reports a topic unknown (on brokers whose errors reach it). Or the
consumer's process died (librdkafka 2.16 crashed on the former in-memory broker's answer to such a fetch,
decision 0008) and a new one started with nothing assigned.
Either way each topic concerned is described again. One that no longer exists, or exists under another topic
id (deleted and created again under its name), is dropped: its partitions, its cache window, its state, and
its streams, which end (the client reconnects and gets the 404 of an unknown topic, or the new topic). Every
other topic is assigned again where its cache ends, so its streams lose and repeat nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from streams.hub.topic_state import TopicState
from streams.kafka.client import Metadata, TopicInfo, TopicNotFoundError

log = logging.getLogger(__name__)

RECHECK_AFTER_S = 5.0  # a topic the consumer keeps reporting unknown is described again at most this often


class Deletions:
    """Handed the hub's topics and what it needs to check and drop one: the hub wires the fetcher's reports of
    lost consumers and unknown topics to `restarted` and `suspect`."""

    def __init__(
        self,
        topics: dict[str, TopicState],
        metadata: Metadata,
        loop: asyncio.AbstractEventLoop,
        *,
        forget: Callable[[str], TopicState | None],
        reassign: Callable[[str], None],
    ) -> None:
        self.topics, self.metadata, self.loop = topics, metadata, loop
        self._forget, self._reassign = forget, reassign
        self.dropped = 0  # topics dropped since the process started
        self._checking: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = self.loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def restarted(self, topics: set[str]) -> None:
        """A new consumer process runs, with nothing assigned: check each topic, then assign again or drop."""
        self._spawn(self._recover(sorted(topics)), "hub-refetch")

    async def _recover(self, topics: list[str]) -> None:
        gone = await asyncio.gather(*(self._gone(topic) for topic in topics))
        for topic, deleted in zip(topics, gone, strict=True):
            if deleted:
                self.drop(topic)
            else:
                self._reassign(topic)

    def suspect(self, topics: set[str]) -> None:
        """The consumer said these topics are unknown: check them (each at most every RECHECK_AFTER_S)."""
        for topic in topics - self._checking:
            self._checking.add(topic)
            self._spawn(self._check(topic), f"hub-check:{topic}")

    async def _check(self, topic: str) -> None:
        try:
            if await self._gone(topic):
                self.drop(topic)
                return  # a topic of that name streamed again later is another topic: checked afresh
            await asyncio.sleep(RECHECK_AFTER_S)
        finally:
            self._checking.discard(topic)

    async def _gone(self, topic: str) -> bool:
        """The topic no longer exists, or is another topic under the same name. Kafka unreachable: not gone."""
        try:
            info = await self.metadata.describe(topic)
        except TopicNotFoundError:
            return True
        except Exception:
            log.warning("could not check whether topic %s still exists", topic, exc_info=True)
            return False
        state = self.topics.get(topic)
        known = state.info.topic_id if state is not None else ""
        return bool(known and info.topic_id and info.topic_id != known)

    def current(self, topic: str, info: TopicInfo) -> TopicState | None:
        """The topic's state, unless there is none or `info` (just described) is of another topic by that name:
        then the old one was deleted, and is dropped."""
        state = self.topics.get(topic)
        if state is not None and state.info.topic_id and info.topic_id and info.topic_id != state.info.topic_id:
            self.drop(topic)
            return None
        return state

    def stats(self) -> dict[str, int]:
        return {"topics_deleted": self.dropped}

    def drop(self, topic: str) -> None:
        """Forget the deleted topic everywhere in the process and end its streams."""
        state = self._forget(topic)
        self.dropped += 1
        if state is None:
            return
        log.warning("topic %s was deleted: its %d streams of this process end", topic, len(state.subscribers))
        if state.fanout is not None:
            state.fanout.cancel()
            state.fanout = None
        for subscriber in list(state.subscribers):
            subscriber.gone()
