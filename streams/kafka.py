"""Reading one topic for one stream, with confluent-kafka off the event loop.

Each reader owns one `Consumer` (no group, `assign()` with explicit offsets) and one worker thread: every
blocking call runs on that thread, in order, so `close()` runs only after an in-flight poll returns.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource

from config.kafka import KafkaSettings

log = logging.getLogger(__name__)


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

    def header(self, name: str) -> bytes | None:
        return next((value for key, value in self.headers if key == name), None)


@dataclass(frozen=True)
class TopicInfo:
    partitions: list[int]
    compacted: bool  # cleanup.policy includes compact


@dataclass(frozen=True)
class Batch:
    records: list[Record]
    eof: set[int]  # partitions whose end the reader reached in this poll


class ReaderStats:
    """Counts of live readers in this process, read by the health endpoint and the tests."""

    open_readers = 0


def _record(message: Message) -> Record:
    # A consumed message's headers are always a list of pairs (the dict form exists only for producing).
    pairs: list[tuple[str, str | bytes | None]] = message.headers() or []  # type: ignore[assignment]
    headers = tuple((name, value.encode() if isinstance(value, str) else value) for name, value in pairs)
    return Record(
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        key=message.key(),
        value=message.value(),
        headers=headers,
    )


class TopicReader:
    def __init__(self, kafka: KafkaSettings, topic: str, *, batch_size: int = 500) -> None:
        self._kafka = kafka
        self.topic = topic
        self._batch_size = batch_size
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-reader")
        self._consumer: Consumer | None = None
        self._counted = False

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def open(self) -> TopicInfo:
        """Connect and describe the topic; raises TopicNotFound or KafkaUnavailable."""
        ReaderStats.open_readers += 1
        self._counted = True
        return await self._run(self._open)  # type: ignore[no-any-return]

    def _open(self) -> TopicInfo:
        self._consumer = Consumer({**self._kafka.consumer_config(), "enable.partition.eof": True})
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=self._kafka.metadata_timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailableError(str(exc)) from exc
        topic = metadata.topics.get(self.topic)
        if topic is None or (topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise TopicNotFoundError(self.topic)
        if topic.error is not None:
            raise KafkaUnavailableError(topic.error.str())
        if not topic.partitions:
            raise TopicNotFoundError(self.topic)
        return TopicInfo(partitions=sorted(topic.partitions), compacted=self._compacted())

    def _compacted(self) -> bool:
        resource = ConfigResource(ConfigResource.Type.TOPIC, self.topic)
        try:
            future = _admin(self._kafka).describe_configs([resource])[resource]
            configs = future.result(timeout=self._kafka.metadata_timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailableError(str(exc)) from exc
        policy = configs.get("cleanup.policy")
        return policy is not None and "compact" in str(policy.value or "").split(",")

    async def watermarks(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """(earliest retained, end) offsets per partition, as of now."""
        return await self._run(self._watermarks, partitions)  # type: ignore[no-any-return]

    def _watermarks(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        assert self._consumer is not None  # noqa: S101
        timeout = self._kafka.metadata_timeout_s
        marks: dict[int, tuple[int, int]] = {}
        try:
            for p in partitions:
                low, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout, cached=False)
                marks[p] = (low, high)
        except KafkaException as exc:
            raise KafkaUnavailableError(str(exc)) from exc
        return marks

    async def offsets_for_time(self, partitions: list[int], epoch_ms: int) -> dict[int, int]:
        """The first offset at or after `epoch_ms` per partition (-1: none yet)."""
        return await self._run(self._offsets_for_time, partitions, epoch_ms)  # type: ignore[no-any-return]

    def _offsets_for_time(self, partitions: list[int], epoch_ms: int) -> dict[int, int]:
        assert self._consumer is not None  # noqa: S101
        query = [TopicPartition(self.topic, p, epoch_ms) for p in partitions]
        try:
            found = self._consumer.offsets_for_times(query, timeout=self._kafka.metadata_timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailableError(str(exc)) from exc
        return {tp.partition: tp.offset for tp in found}

    async def assign(self, offsets: dict[int, int]) -> None:
        """Start each partition at its offset (`OFFSET_BEGINNING` = -2 = earliest)."""
        await self._run(self._assign, offsets)

    def _assign(self, offsets: dict[int, int]) -> None:
        assert self._consumer is not None  # noqa: S101
        self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in sorted(offsets.items())])

    async def poll(self, timeout: float) -> Batch:  # noqa: ASYNC109
        return await self._run(self._poll, timeout)  # type: ignore[no-any-return]

    def _poll(self, timeout: float) -> Batch:
        assert self._consumer is not None  # noqa: S101
        # poll() returns as soon as one message is ready; consume(n, 0) then drains what is already fetched
        # (consume(n, timeout) alone would wait out the whole timeout on a quiet topic).
        first = self._consumer.poll(timeout)
        batch = Batch(records=[], eof=set())
        if first is None:
            return batch
        for message in [first, *self._consumer.consume(self._batch_size - 1, 0)]:
            error = message.error()
            if error is None:
                batch.records.append(_record(message))
            elif error.code() == KafkaError._PARTITION_EOF:
                batch.eof.add(message.partition() or 0)
            else:
                # Broker loss and the like: librdkafka reconnects by itself and keeps its fetch position.
                log.warning("kafka: %s", error.str())
        return batch

    async def close(self) -> None:
        """Close the consumer after any in-flight call; safe to call on a reader that never opened."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=False)
        try:
            await asyncio.shield(future)
        finally:
            if self._counted:
                self._counted = False
                ReaderStats.open_readers -= 1

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


_admins: dict[str, AdminClient] = {}


def _admin(kafka: KafkaSettings) -> AdminClient:
    """One AdminClient per process and cluster (it is thread-safe), for topic configuration lookups."""
    admin = _admins.get(kafka.bootstrap_servers)
    if admin is None:
        admin = _admins[kafka.bootstrap_servers] = AdminClient(kafka.admin_config())
    return admin


__all__ = [
    "OFFSET_BEGINNING",
    "Batch",
    "KafkaUnavailableError",
    "ReaderStats",
    "Record",
    "TopicInfo",
    "TopicNotFoundError",
    "TopicReader",
]
