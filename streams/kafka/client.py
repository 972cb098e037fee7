"""Kafka access for the data plane, off the event loop: records, topic metadata, and historical reads.

Metadata (partitions, `cleanup.policy`, watermarks, timestamp lookups) goes through one `AdminClient` per
process, whose calls return futures the event loop awaits. Records come from the fetcher (streams/kafka/fetcher.py);
a short-lived `HistoricalReader` reads only what is older than the cache holds.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from config.kafka_settings import KafkaSettings
from streams.codecs import sse
from streams.kafka.consumer_host import RemoteConsumer

log = logging.getLogger(__name__)
T = TypeVar("T")
READER_SLOT_POLL_S = 0.1  # how often a historical reader waiting for room looks again


class TopicNotFoundError(Exception):
    def __init__(self, topic: str) -> None:
        super().__init__(f"Topic {topic!r} does not exist.")
        self.topic = topic


class KafkaUnavailableError(Exception):
    pass


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int = 0
    key_json: bool = False  # the key is its key model's JSON (streams/kafka/decoding.py)

    def header(self, name: str) -> bytes | None:
        if not self.headers:
            return None
        return next((value for key, value in self.headers if key == name), None)

    @cached_property
    def body(self) -> bytes:
        """The event after its id line, encoded once however many subscribers send it."""
        return sse.body(self.value, self.key)

    @cached_property
    def size(self) -> int:
        """Bytes this record holds in memory, roughly: value, key, headers, encoded body, overhead."""
        headers = sum(len(k) + len(v or b"") for k, v in self.headers)
        return len(self.value or b"") + len(self.key or b"") + headers + len(self.body) + 200


@dataclass(frozen=True)
class TopicInfo:
    partitions: list[int]
    compacted: bool  # cleanup.policy includes compact
    topic_id: str = ""  # Kafka's id of the topic: a topic deleted and created again under its name has another


@dataclass(frozen=True)
class Layout:
    """What a topic is made of now, as a periodic check compares it: its partitions and Kafka's id of it."""

    partitions: list[int]
    topic_id: str


@dataclass(frozen=True)
class Watermarks:
    low: int  # the earliest offset the partition still holds
    high: int  # the offset the next record will get (read_committed: the last stable offset)


class ReaderStats:
    """Live Kafka consumers of this process other than the fetcher's (health endpoint, tests)."""

    historical_readers = 0

    @classmethod
    def room(cls, kafka: KafkaSettings) -> bool:
        """Another historical reader may start now."""
        return not kafka.max_historical_readers or cls.historical_readers < kafka.max_historical_readers


class Metadata:
    """Topic metadata through one AdminClient: safe to share by every stream of the process."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._kafka = kafka
        self._admin = AdminClient(kafka.admin_config())

    async def _result(self, future: Future[T]) -> T:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self._kafka.metadata_timeout_s * 2)
        except (KafkaException, TimeoutError) as exc:
            raise KafkaUnavailableError(str(exc)) from exc

    async def reachable(self, timeout_s: float) -> None:
        """Raise KafkaUnavailableError unless a broker answers within `timeout_s` (readiness)."""
        future = self._admin.describe_cluster(request_timeout=timeout_s)
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), timeout_s + 0.5)
        except (KafkaException, TimeoutError) as exc:
            raise KafkaUnavailableError(str(exc) or "no broker answered") from exc

    async def describe(self, topic: str) -> TopicInfo:
        """Partitions and cleanup policy; raises TopicNotFoundError or KafkaUnavailableError.

        `describe_topics`, not a metadata request: some brokers create a topic a metadata request names.
        """
        future = self._admin.describe_topics(TopicCollection([topic]))[topic]
        try:
            # Not `wait_for`, whose frame keeps the future that holds the exception its traceback holds.
            async with asyncio.timeout(self._kafka.metadata_timeout_s * 2):
                description = await asyncio.wrap_future(future)
        except KafkaException as exc:
            # The admin's future holds the exception, whose traceback holds this frame: let go of it, or every
            # failed describe (each request naming an unknown topic) leaves a cycle for the collector's review.
            del future
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise TopicNotFoundError(topic) from None
            raise KafkaUnavailableError(str(exc)) from exc
        except TimeoutError as exc:
            raise KafkaUnavailableError(f"no answer about {topic!r}") from exc
        if not description.partitions:
            raise TopicNotFoundError(topic)
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = await self._result(self._admin.describe_configs([resource])[resource])
        policy = configs.get("cleanup.policy")
        compacted = policy is not None and "compact" in str(policy.value or "").split(",")
        topic_id = str(description.topic_id) if description.topic_id is not None else ""
        return TopicInfo(sorted(p.id for p in description.partitions), compacted=compacted, topic_id=topic_id)

    async def layouts(self, topics: list[str]) -> dict[str, Layout | None]:
        """Each topic's partitions and id, all in one metadata request: None for a topic that does not exist. A
        topic whose answer failed otherwise (Kafka unreachable) is left out."""
        if not topics:
            return {}
        futures = self._admin.describe_topics(TopicCollection(topics))
        found: dict[str, Layout | None] = {}
        for topic, future in futures.items():
            try:
                description = await asyncio.wait_for(asyncio.wrap_future(future), self._kafka.metadata_timeout_s * 2)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    found[topic] = None
                continue
            except TimeoutError:
                continue
            topic_id = str(description.topic_id) if description.topic_id is not None else ""
            partitions = sorted(p.id for p in description.partitions)
            found[topic] = Layout(partitions, topic_id) if partitions else None
        return found

    async def _offsets(self, topic: str, specs: dict[int, OffsetSpec]) -> dict[int, int]:
        query = {TopicPartition(topic, p): spec for p, spec in specs.items()}
        futures = self._admin.list_offsets(query, isolation_level=IsolationLevel.READ_COMMITTED)
        return {tp.partition: (await self._result(future)).offset for tp, future in futures.items()}

    async def watermarks(self, topic: str, partitions: list[int]) -> dict[int, Watermarks]:
        earliest: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        latest: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        low = await self._offsets(topic, dict.fromkeys(partitions, earliest))
        high = await self._offsets(topic, dict.fromkeys(partitions, latest))
        return {p: Watermarks(low[p], high[p]) for p in partitions}

    async def offsets_for_time(self, topic: str, partitions: list[int], epoch_ms: int) -> dict[int, int]:
        """The first offset at or after `epoch_ms` per partition (-1: none yet)."""
        return await self._offsets(topic, dict.fromkeys(partitions, OffsetSpec.for_timestamp(epoch_ms)))


@dataclass(frozen=True)
class Batch:
    records: list[Record]
    eof: dict[int, int]  # partitions whose end the reader reached in this poll: that end


class HistoricalReader:
    """Reads one topic's partitions from offsets older than the cache holds; one consumer, one thread.

    The consumer lives in the worker's consumer host (streams/kafka/consumer_host.py): a crash inside librdkafka there
    makes `poll()` raise `ConsumerLost`, and the worker lives on. Every blocking call runs on the reader's own
    thread, in order, so `close()` runs only after an in-flight poll returns.
    """

    def __init__(self, kafka: KafkaSettings, topic: str, *, batch_size: int = 200) -> None:
        self._kafka = kafka
        self.topic = topic
        self._batch_size = batch_size
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-history")
        self._consumer: RemoteConsumer | None = None
        self._counted = False
        self._closing: asyncio.Future[None] | None = None

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._closing is not None:
            raise RuntimeError(f"the historical reader of {self.topic!r} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def start(self, offsets: dict[int, int]) -> None:
        """Start reading at `offsets`, once the process has room for another reader (`max_historical_readers`)."""
        # Polled: rare (the endpoint refuses new streams past the limit; only eviction brings one here), and the
        # readers of a process may belong to several loops (tests), which one asyncio.Event cannot serve.
        while not ReaderStats.room(self._kafka):  # noqa: ASYNC110
            await asyncio.sleep(READER_SLOT_POLL_S)
        ReaderStats.historical_readers += 1
        self._counted = True
        await self._run(self._start, offsets)

    def _start(self, offsets: dict[int, int]) -> None:
        config = {**self._kafka.consumer_config(), "enable.partition.eof": True, "auto.offset.reset": "earliest"}
        self._consumer = RemoteConsumer(config, self.topic, sorted(offsets.items()), self._kafka.metadata_timeout_s)

    async def poll(self, timeout: float) -> Batch:  # noqa: ASYNC109
        return await self._run(self._poll, timeout)  # type: ignore[no-any-return]

    def _poll(self, timeout: float) -> Batch:
        assert self._consumer is not None  # noqa: S101
        records, eof = self._consumer.read(timeout, self._batch_size)
        return Batch(records=[Record(*record) for record in records], eof=dict(eof))

    async def close(self) -> None:
        """Close the consumer after any in-flight call. Safe to call on a reader that never started, and again
        (a second call waits for the first one's close; no work goes to the executor after its shutdown)."""
        if self._closing is None:
            self._closing = asyncio.get_running_loop().run_in_executor(self._executor, self._close)
            self._executor.shutdown(wait=False)
        try:
            await asyncio.shield(self._closing)
        finally:
            if self._counted:
                self._counted = False
                ReaderStats.historical_readers -= 1

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close(self._kafka.metadata_timeout_s)
            self._consumer = None
