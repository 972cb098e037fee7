"""A fetched record as the consumer processes send it to the worker: a plain tuple, cheap to pickle."""

from __future__ import annotations

from confluent_kafka import Message

# (partition, offset, key, value, headers, timestamp_ms, key is JSON): the last is True once a key model decoded the
# key (streams/kafka/decoding.py), so a key filter compares it as JSON.
RecordTuple = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int, bool]


def record_tuple(message: Message) -> RecordTuple:
    # A consumed message's headers are always a list of pairs (the dict form exists only for producing).
    pairs: list[tuple[str, str | bytes | None]] = message.headers() or []  # type: ignore[assignment]
    headers = tuple((name, value.encode() if isinstance(value, str) else value) for name, value in pairs)
    return (
        message.partition() or 0,
        message.offset() or 0,
        message.key(),
        message.value(),
        headers,
        message.timestamp()[1],
        False,
    )
