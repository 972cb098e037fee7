"""The delivery log's writer thread and its topic (streams/telemetry/log_writer.py): reports every interval,
rows in messages of bounded size, and rows lost and counted, never waited for, when Kafka is unreachable."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from config.kafka_settings import KafkaSettings
from streams.telemetry.delivery_log import DeliveryLog
from streams.telemetry.delivery_schema import BATCH_ROWS, HEADER, REFUSALS, REPORTS, End, header_value
from streams.telemetry.log_writer import LogTopic
from tests.support.delivery_log import log_messages, log_rows, stream_row, topic_log


def test_reports_say_how_many_streams_are_open_every_interval(new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    log = topic_log(topic, report_s=1)
    streams = [stream_row() for _ in range(3)]
    for stream in streams:
        log.opened(stream)
    log.closed(streams[0], End.CLIENT_GONE)
    log.flush()
    log.flush()  # not due yet: no second report
    time.sleep(2.5)  # the writer thread reports meanwhile
    log.closed(streams[1], End.CLIENT_GONE)
    log.close()  # and reports once more
    reports = log_rows(topic, REPORTS)
    opens = [row["open"] for row in reports]
    assert (opens[0], opens[-1]) == (2, 1)
    times = [row["at"] for row in reports]
    assert len(times) >= 3  # one a second meanwhile
    assert all((later - earlier).total_seconds() >= 0.9 for earlier, later in itertools.pairwise(times[:-1]))


def test_a_flush_of_many_rows_sends_them_in_bounded_messages(new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    log = topic_log(topic)
    now = int(time.time())
    for second in range(BATCH_ROWS + 10):  # a refusal row per second: more rows than one message holds
        log.refusals[(now - second, "r", 404, "no_route")] = 1
    assert log.flush() == BATCH_ROWS + 10 + 1
    log.close()
    kinds = [headers[HEADER] for _, _, headers, _ in log_messages(topic)]
    assert kinds.count(header_value(REFUSALS)) == 2
    assert len(log_rows(topic, REFUSALS)) == BATCH_ROWS + 10


def test_an_unreachable_kafka_loses_rows_counted_and_never_blocks_a_stream() -> None:
    nowhere = KafkaSettings(bootstrap_servers="127.0.0.1:9", metadata_timeout_s=0.5)
    log = DeliveryLog(LogTopic(nowhere, "sse-delivery-log-nowhere", timeout_s=1), salt=b"s")
    started = time.monotonic()
    for _ in range(1000):
        log.refused("a", 404, "no_route")
        log.opened(stream_row())
    assert time.monotonic() - started < 0.5  # the event loop's side only adds to tallies
    assert log.flush() == 1 + 1000 + 1  # handed to the producer, which holds them (bounded) for a second
    log.topic.close(timeout_s=5)  # type: ignore[union-attr]
    stats = log.stats()
    assert (stats["delivery_log_rows"], stats["delivery_log_dropped"]) == (0, 1002)
    assert stats["delivery_log_write_errors"] == 3  # one message per table
    log.writer.stopping.set()  # type: ignore[union-attr]  # closed: nothing more to send at exit
