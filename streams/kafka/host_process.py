"""The historical readers' consumers, in the worker's consumer host process (`python -m
streams.kafka.fetch_process FD host`, started by streams/kafka/consumer_host.py): one thread per reader, so one
reader's poll never waits for another's. Imports no Django.

Requests are (request id, reader id, operation, arguments); each gets (request id, ok, result or error text).
Operations: ("open", config, topic, [(partition, offset), ...]), ("read", timeout, batch size) -> ([record tuple,
...], [(partition at its end, that end), ...]), ("close",). One more, answered by nothing: ("models", Models), the
models records are decoded with from then on (streams/kafka/decoding.py). Unasked, the host sends
(STATS, True, (skipped, decoded)): what it decoded and skipped since it last said, after a read that did either.

Records are decoded as the fetch process decodes them, by a decoder process of the host's
(streams/kafka/decoder.py), which the readers share one at a time: a record that does not decode is skipped, and
one whose registry cannot be reached stops its partition there: the reader's consumer is moved back to it and the
reader reads nothing for `RETRY_S`, then tries again (the stream waits, as the fetched window does).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streams.kafka.decode_queue import RETRY_S
from streams.kafka.decoder import Decoder
from streams.kafka.decoding import Models
from streams.kafka.records import RecordTuple, record_tuple

log = logging.getLogger("streams.kafka.fetch_process")

STATS = -1  # the request id of the host's own reports


class Host:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()  # the readers' threads reply on one socket
        self.readers: dict[int, queue.SimpleQueue[tuple[int, str, tuple[Any, ...]]]] = {}
        self.decoding = SharedDecoder()

    def run(self) -> None:
        try:
            self.serve_requests()
        finally:
            self.decoding.close()

    def serve_requests(self) -> None:
        while True:
            try:
                request, reader, operation, args = self.conn.recv()
            except (EOFError, OSError):
                return
            if operation == "models":
                self.decoding.use(*args)
                continue
            found = self.readers.get(reader)
            if found is None:
                found = self.readers[reader] = queue.SimpleQueue()
                threading.Thread(target=self.serve, args=(reader, found), daemon=True).start()
            found.put((request, operation, args))

    def serve(self, reader: int, requests: queue.SimpleQueue[tuple[int, str, tuple[Any, ...]]]) -> None:
        history: History | None = None
        while True:
            request, operation, args = requests.get()
            result: Any = None
            try:
                if operation == "open":
                    config, topic, offsets = args
                    history = History(Consumer(config), topic, self.decoding)
                    history.consumer.assign([TopicPartition(topic, p, o) for p, o in offsets])
                elif operation == "read" and history is not None:
                    result = history.read(*args)
                elif operation == "close" and history is not None:
                    history.consumer.close()
                ok = True
            except Exception as exc:
                ok, result = False, str(exc)
            with self.lock:
                self.conn.send((request, ok, result))
                if operation == "read":
                    self.report()
            if operation == "close":
                self.readers.pop(reader, None)
                return

    def report(self) -> None:
        """What the readers decoded and skipped since the last report, if anything (called holding the lock)."""
        skipped, decoded = self.decoding.take()
        if skipped or decoded:
            self.conn.send((STATS, True, (skipped, decoded)))


class SharedDecoder:
    """The host's decoder process, used by one reader at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decoder = Decoder()

    def use(self, models: Models) -> None:
        with self._lock:
            self._decoder.use(models)

    def decodes(self, topic: str) -> bool:
        return self._decoder.models.decodes(topic)

    def decode(self, topic: str, records: list[RecordTuple]) -> list[Any]:
        with self._lock:
            return self._decoder.decode([(topic, record) for record in records])

    def take(self) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
        with self._lock:
            return self._decoder.tally.take()

    def close(self) -> None:
        with self._lock:
            self._decoder.close()


class History:
    """One historical reader's consumer, decoding what it reads."""

    def __init__(self, consumer: Consumer, topic: str, decoding: SharedDecoder) -> None:
        self.consumer, self.topic, self.decoding = consumer, topic, decoding
        self.quiet_until = 0.0  # a partition waits for its registry: nothing is read until then

    def read(self, timeout: float, batch_size: int) -> tuple[list[RecordTuple], list[tuple[int, int]]]:
        """What one poll gives (then what is already fetched, up to `batch_size`), decoded: records, and the
        partitions at their end, each with that end (the offset the reader stands at)."""
        records: list[RecordTuple] = []
        eof: list[tuple[int, int]] = []
        if time.monotonic() < self.quiet_until:
            time.sleep(timeout)
            return records, eof
        first = self.consumer.poll(timeout)
        if first is None:
            return records, eof
        fetched: list[RecordTuple] = []
        for message in [first, *self.consumer.consume(batch_size - 1, 0)]:
            error = message.error()
            if error is None:
                fetched.append(record_tuple(message))
            elif error.code() == KafkaError._PARTITION_EOF:
                eof.append((message.partition() or 0, message.offset() or 0))
            else:
                log.warning("kafka: %s", error.str())
        if not fetched or not self.decoding.decodes(self.topic):
            return fetched, eof
        stopped: set[int] = set()  # partitions waiting at a record: what follows it is read again later
        for record, result in zip(fetched, self.decoding.decode(self.topic, fetched), strict=True):
            partition = record[0]
            if partition in stopped:
                continue
            if isinstance(result, tuple):
                records.append(result)
            elif isinstance(result, str | bool):  # waits for its registry, or was not tried: read it again
                if isinstance(result, str):
                    log.info("history of %s[%d] waits at offset %d: %s", self.topic, partition, record[1], result)
                    self.quiet_until = time.monotonic() + RETRY_S
                self.consumer.seek(TopicPartition(self.topic, partition, record[1]))
                stopped.add(partition)
        eof = [(partition, end) for partition, end in eof if partition not in stopped]
        return records, eof
