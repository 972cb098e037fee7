"""Deleted topics (streams/hub/deletions.py), with the collaborators it is handed as fakes: no hub, no broker.

A topic that no longer exists, or exists under another topic id, is dropped and its streams end; every other
topic is assigned again; a broker that cannot answer drops nothing.
"""

from __future__ import annotations

import asyncio

import pytest

from streams.hub.deletions import Deletions
from streams.hub.topic_state import TopicState
from streams.kafka.client import KafkaUnavailableError, TopicInfo, TopicNotFoundError


class Metadata:
    """Answers `describe` from a table: a TopicInfo, or an exception to raise."""

    def __init__(self, answers: dict[str, TopicInfo | Exception]) -> None:
        self.answers = answers

    async def describe(self, topic: str) -> TopicInfo:
        answer = self.answers[topic]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Stream:
    label = "/t"
    cursors: dict[int, int] = {}  # noqa: RUF012

    def __init__(self) -> None:
        self.ended = False

    def receiving(self) -> bool:
        return True

    def gone(self) -> None:
        self.ended = True


def state(name: str, topic_id: str) -> TopicState:
    return TopicState(name, TopicInfo([0], compacted=False, topic_id=topic_id), 0.0)


def deletions(topics: dict[str, TopicState], metadata: Metadata) -> tuple[Deletions, list[str], list[str]]:
    forgotten: list[str] = []
    reassigned: list[str] = []

    def forget(topic: str) -> TopicState | None:
        forgotten.append(topic)
        return topics.pop(topic, None)

    found = Deletions(
        topics,
        metadata,  # type: ignore[arg-type]
        asyncio.get_running_loop(),
        forget=forget,
        reassign=reassigned.append,
    )
    return found, forgotten, reassigned


async def settle(deletions: Deletions) -> None:
    while deletions._tasks:
        await asyncio.gather(*deletions._tasks, return_exceptions=True)


@pytest.mark.asyncio
async def test_after_a_consumer_restart_a_gone_topic_is_dropped_and_the_others_are_assigned_again() -> None:
    stream = Stream()
    topics = {"gone": state("gone", "a"), "kept": state("kept", "b"), "again": state("again", "c")}
    topics["gone"].subscribers.add(stream)  # type: ignore[arg-type]
    metadata = Metadata({
        "gone": TopicNotFoundError("gone"),
        "kept": TopicInfo([0], compacted=False, topic_id="b"),
        "again": TopicInfo([0], compacted=False, topic_id="other"),  # deleted and created again under its name
    })  # fmt: skip
    found, forgotten, reassigned = deletions(topics, metadata)

    found.restarted({"gone", "kept", "again"})
    await settle(found)

    assert sorted(forgotten) == ["again", "gone"]
    assert reassigned == ["kept"]
    assert stream.ended
    assert found.stats() == {"topics_deleted": 2}
    assert list(topics) == ["kept"]


@pytest.mark.asyncio
async def test_a_broker_that_cannot_answer_drops_nothing() -> None:
    topics = {"t": state("t", "a")}
    found, forgotten, _ = deletions(topics, Metadata({"t": KafkaUnavailableError("down")}))

    found.suspect({"t"})
    await asyncio.sleep(0)  # the check runs, then waits RECHECK_AFTER_S before the topic may be checked again
    found.suspect({"t"})  # still being checked: not asked twice

    assert forgotten == []
    assert list(topics) == ["t"]
    for task in found._tasks:
        task.cancel()
    await asyncio.gather(*found._tasks, return_exceptions=True)


@pytest.mark.asyncio
async def test_a_topic_described_under_another_id_is_dropped_on_the_spot() -> None:
    stream = Stream()
    topics = {"t": state("t", "old")}
    topics["t"].subscribers.add(stream)  # type: ignore[arg-type]
    found, forgotten, _ = deletions(topics, Metadata({}))

    assert found.current("t", TopicInfo([0], compacted=False, topic_id="old")) is topics["t"]
    assert found.current("t", TopicInfo([0], compacted=False, topic_id="new")) is None
    assert forgotten == ["t"]
    assert stream.ended
