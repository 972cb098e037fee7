"""A stream's topic, before its response starts: the topic named by its route, where the stream starts in it,
or the problem it is refused with."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from bindings.patterns import is_internal_topic, is_topic_name
from streams.edge.asks import Asks
from streams.edge.metrics import STARTS
from streams.edge.runtime import Runtime
from streams.hub.topic_state import TopicState
from streams.kafka.client import KafkaUnavailableError, ReaderStats, TopicNotFoundError
from streams.routes.matching import Match
from streams.stream.opening import Opened, open_subscription
from streams.stream.reader import Source, start_source

log = logging.getLogger(__name__)

RETRY_SOON = ((b"retry-after", b"5"),)


@dataclass(frozen=True)
class TopicProblem:
    """Why a stream cannot open on its topic: the problem response, and the reason it is counted under."""

    status: int
    title: str
    detail: str
    reason: str
    headers: tuple[tuple[bytes, bytes], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)  # more members of the problem body


async def open_topic(
    runtime: Runtime, matched: Match, resume: bytes | None, asks: Asks
) -> tuple[TopicState, Opened] | TopicProblem:
    """The stream's topic and where it starts in it, or why it cannot start: the templated name is no topic's,
    the topic does not exist, Kafka cannot be reached, or the stream starts before the cache window while every
    reader of older records is busy."""
    if not is_topic_name(matched.topic):
        detail = f"{matched.topic!r} is not a Kafka topic name."
        return TopicProblem(404, "Unknown topic", detail, "unknown_topic", extra={"topic": matched.topic})
    if is_internal_topic(matched.topic, settings.SSE_INTERNAL_TOPICS):  # as if it did not exist
        detail = str(TopicNotFoundError(matched.topic))
        return TopicProblem(404, "Unknown topic", detail, "unknown_topic", extra={"topic": matched.topic})
    hub = runtime.hub()
    try:
        state = await hub.topic(matched.topic)
        opened = await open_subscription(
            hub, state, matched, resume, asks.since_ms, stats=runtime.stats, log_batches=runtime.deliveries.enabled,
            shaping=asks.shaping,
        )  # fmt: skip
    except TopicNotFoundError as exc:
        return TopicProblem(404, "Unknown topic", str(exc), "unknown_topic", extra={"topic": exc.topic})
    except KafkaUnavailableError as exc:
        log.warning("kafka unavailable for %s: %s", matched.topic, exc)
        detail = "The message broker cannot be reached; retry later."
        return TopicProblem(503, "Kafka unavailable", detail, "kafka_unavailable", RETRY_SOON)
    source = start_source(hub.cache, state.name, opened.starts)
    if source is Source.HISTORY and not ReaderStats.room(hub.kafka):
        retry = ((b"retry-after", b"%d" % settings.SSE_LIMIT_RETRY_AFTER_S),)
        detail = "This stream starts before what the server keeps, and every reader of older records is busy."
        return TopicProblem(503, "Server busy", detail, "max_historical_readers", retry)
    STARTS.labels("hit" if source is Source.CACHE else "miss").inc()
    return state, opened
